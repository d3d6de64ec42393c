"""TFF computations spread over several C++ `worker_binary` processes.

TFF 0.87 ships one C++ server, `tensorflow_federated/data/worker_binary`. Its
only flags are `--port`, `--max_concurrent_computation_calls` and
`--grpc_max_message_length_megabytes`; it serves TFF's executor gRPC service
on `[::]:<port>` and runs a local (single-machine) C++ executor stack. It can
neither compose other workers nor call them, and the Python package has no
C++ composing executor either. `runtime.local_cpp_context()` (TFF's local
C++ context, its worker isolated) is one such worker plus a Python
`tff.framework.RemoteExecutor` that drives it over gRPC.
This module drives N workers from the launcher (the Python process).
`DistributedExecutionContext.invoke(comp, arg)`, all steps in the launcher:

  0. Cut every CLIENTS-placed argument (a list with one entry per client)
     into one slice per client, and copy every other argument (server
     state, broadcast values) into every slice. Worker i gets the i-th
     contiguous block of clients (the first n mod k of the k blocks one
     client larger). With one slice (at most one client, or no
     CLIENTS-placed argument: `initialize`, evaluation on one client, state
     accessors), `comp` runs unchanged on worker 0, as in one process.
     Otherwise:
  1. Compile `comp` to a `tff.framework.MergeableCompForm` with
     `tff.backends.native.compile_to_mergeable_comp_form`: `up_to_merge`
     (everything up to the aggregation, ending in a `federated_aggregate`
     whose report is the identity), `merge` (the aggregation's merge
     function) and `after_merge` (its report and all later server work).
  2. Run `up_to_merge` for every client, the workers at once (one launcher
     thread per worker, as TFF's gRPC calls block), each worker its block
     in client order: the client work, and each client's aggregate record.
  3. Fold the records in client order, (((r_0 + r_1) + r_2) ...), each
     `merge` on worker 0.
  4. Run `after_merge` on worker 0 with the merged aggregate and client 0's
     slice: the server update (DP noise, canaries, server optimizer) runs
     once. Only a result with CLIENTS-placed values runs it for every
     client, on that client's worker, and joins the values in client order.

Traffic per multi-client call: every client's slice carries the
server-placed arguments (model and aggregator state) to its worker, with the
client's data, and returns a model-sized record; worker 0 then receives the
records for `merge`, and the state and merged aggregate for `after_merge`.
Folding per-client records costs n - 1 `merge` calls on worker 0 instead of
k - 1 for per-worker partial sums, but it is what makes the results exact.
DP noise is drawn once per round, exactly as in one process. Client data
travel as serialised tf.data graphs: in-memory data inside the graph,
file-backed data (TFF's SqlClientData) as a path that the worker opens
itself, so such files must exist at the same path on every worker's host.

Why not `tff.backends.native.create_mergeable_comp_execution_context`, which
implements steps 0-4 for async contexts? In TFF 0.87 (a) the remote
executor's gRPC calls block the one event loop on which that context drives
all workers, so they run one after another (benchmarks/distributed_runtime.py:
4 workers take 3.75x as long there as here); (b) it merges partial aggregates
and joins CLIENTS-placed results in the order in which the workers finish
(observed: per-client results came back permuted), so with three or more
workers float sums depend on timing; (c) a computation whose argument holds no
CLIENTS-placed value runs on every worker, each with `default_num_clients`
clients. Here the workers run concurrently, the result is a fixed function of
the argument, and (c) runs on worker 0 alone, as in one process.

Numerics: one process aggregates by folding the clients' records in client
order, starting from the zero of the aggregation, and so does step 3 (0 + r_0
is r_0 exactly). Every float therefore has the same bits as in one process,
for any number of workers; this matters because the EMNIST task's dropout
masks are keyed by the exact bytes of the layer input (`tasks.determinism`),
so a 1-ulp difference would draw other masks and the runs would diverge like
runs with other seeds.

Which computations: any, when its argument makes one slice. Otherwise
`MergeableCompForm` allows several aggregations in parallel but none that
depends on the result of another one in the same computation (TFF raises
ValueError when compiling). The rounds of experiments/train.py's DP-FedAvg
processes (fixed and adaptive clipping, canaries) satisfy it. Server work
*before* the aggregation (e.g. the DP query's `derive_sample_params`) runs
on every worker, so it must be deterministic; the DP noise is drawn after
it.

Lifetimes: `tff_workers.local_workers` starts workers, each in a
loopback-only network namespace reached through a Unix-domain socket, and
stops them; `remote_cpp_context` connects to running workers (this process,
or one per host) and installs the context; it never stops a worker.
"""

import collections
import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
import tensorflow_federated as tff

from one_shot_epe.tff_engine import tff_workers
from one_shot_epe import validation

__all__ = ['DistributedExecutionContext', 'GRPC_CHANNEL_OPTIONS',
           'remote_cpp_context', 'split_clients']

# TFF's own channel options for its local worker (executor_factory.py).
_GRPC_MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
GRPC_CHANNEL_OPTIONS = (
    ('grpc.max_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', _GRPC_MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', _GRPC_MAX_MESSAGE_BYTES),
)
# Remote executors kept per worker, one per distinct cardinalities; beyond
# this the least recently used one is disposed of on the worker (TFF's
# factory also keeps 10 but drops evicted ones without disposing of them).
_MAX_EXECUTORS_PER_WORKER = 10

_Slice = TypeVar('_Slice')
# `split_clients` with this many slices cuts one slice per client.
_ONE_SLICE_PER_CLIENT = 2**62


# ----------------------------------------------------------------------------
# Execution context over running workers.


def _cardinalities_key(cardinalities: dict[Any, int]) -> tuple[Any, ...]:
  return tuple(sorted((str(k), v) for k, v in cardinalities.items()))


class _WorkerExecutorFactory(tff.framework.ExecutorFactory):
  """`tff.framework.RemoteExecutor`s on one worker, one per cardinalities.

  Like the factory of `tff.backends.native.create_sync_local_cpp_execution_
  context` minus starting the worker; additionally disposes of evicted and,
  in `close`, of all its executors on the worker, which a long-lived worker
  serving many launcher runs needs.
  """

  def __init__(self, stub: tff.framework.RemoteExecutorGrpcStub,
               default_num_clients: int):
    self._stub = stub
    self._default_num_clients = default_num_clients
    self._executors = collections.OrderedDict()

  def create_executor(self, cardinalities):
    cardinalities = dict(cardinalities)
    cardinalities.setdefault(tff.CLIENTS, self._default_num_clients)
    key = _cardinalities_key(cardinalities)
    executor = self._executors.pop(key, None)
    if executor is None:
      executor = tff.framework.RemoteExecutor(self._stub)
      executor.set_cardinalities(cardinalities)
    self._executors[key] = executor
    while len(self._executors) > _MAX_EXECUTORS_PER_WORKER:
      _, evicted = self._executors.popitem(last=False)
      evicted.close()
    return executor

  def clean_up_executor(self, cardinalities):
    cardinalities = dict(cardinalities)
    cardinalities.setdefault(tff.CLIENTS, self._default_num_clients)
    executor = self._executors.pop(_cardinalities_key(cardinalities), None)
    if executor is not None:
      executor.close()

  def close(self) -> None:
    while self._executors:
      _, executor = self._executors.popitem()
      executor.close()


def _is_clients_values(type_spec: Any) -> bool:
  """A CLIENTS-placed type with one value per client (not all-equal)."""
  return (isinstance(type_spec, tff.FederatedType) and
          type_spec.placement is tff.CLIENTS and not type_spec.all_equal)


def _has_clients_values(type_spec: Any) -> bool:
  return type_spec is not None and tff.types.contains(type_spec,
                                                      _is_clients_values)


def _client_counts(value: Any, type_spec: Any) -> set[int]:
  """Lengths of the per-client lists in `value` (of type `type_spec`)."""
  if not _has_clients_values(type_spec):
    return set()
  if _is_clients_values(type_spec):
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
      raise ValueError(
          'arg: a CLIENTS-placed value must be a list with one entry per '
          f'client; got {type(value).__name__} for {type_spec}.')
    return {len(value)}
  counts = set()
  elements = tff.structure.iter_elements(tff.structure.from_container(value))
  for (_, element), (_, element_type) in zip(
      elements, tff.structure.iter_elements(type_spec)):
    counts |= _client_counts(element, element_type)
  return counts


def _client_slice(value: Any, type_spec: Any, start: int, stop: int) -> Any:
  """`value` with every per-client list cut to clients [start, stop)."""
  if not _has_clients_values(type_spec):
    return value
  if _is_clients_values(type_spec):
    return list(value[start:stop])
  elements = tff.structure.iter_elements(tff.structure.from_container(value))
  return tff.structure.Struct([
      (name, _client_slice(element, element_type, start, stop))
      for (_, element), (name, element_type) in zip(
          elements, tff.structure.iter_elements(type_spec))
  ])


def _block_bounds(num_items: int, num_blocks: int) -> list[int]:
  """Bounds of min(num_blocks, n) contiguous blocks of n items, larger first.

  Block i is [bounds[i], bounds[i + 1]); the first n mod k blocks hold one
  item more than the others.
  """
  num_blocks = min(num_blocks, num_items)
  bounds = [0]
  for i in range(num_blocks):
    bounds.append(bounds[-1] + num_items // num_blocks +
                  (1 if i < num_items % num_blocks else 0))
  return bounds


def split_clients(value: Any, type_spec: Any, num_slices: int) -> list[Any]:
  """Cuts CLIENTS-placed values of `value` into <= `num_slices` slices.

  Client c of n goes to the slice i with c in [b_i, b_{i+1}): contiguous
  blocks in client order, the first n mod k of the k = min(num_slices, n)
  blocks one client larger. Non-CLIENTS values are repeated in every slice.
  A value without per-client lists (or with zero clients) is one slice.

  Args:
    value: A TFF computation argument (a Python structure) whose CLIENTS
      values are lists with one entry per client.
    type_spec: The TFF type of `value` (the computation's parameter type).
    num_slices: Upper bound on the number of slices, >= 1.

  Returns:
    The slices, each a value of type `type_spec` over its block of clients.

  Raises:
    ValueError: if `num_slices` < 1 or per-client lists in `value` differ in
      length.
  """
  if isinstance(num_slices, bool) or not isinstance(num_slices, int) or (
      num_slices < 1):
    raise ValueError(f'num_slices must be an integer >= 1; got {num_slices!r}.')
  counts = _client_counts(value, type_spec)
  if len(counts) > 1:
    raise ValueError('arg: CLIENTS-placed values must all have one entry per '
                     f'client; got lists of lengths {sorted(counts)}.')
  num_clients = counts.pop() if counts else 0
  if num_clients == 0:
    return [value]
  bounds = _block_bounds(num_clients, num_slices)
  return [_client_slice(value, type_spec, start, stop)
          for start, stop in zip(bounds[:-1], bounds[1:])]


def _join_clients(values: Sequence[Any], type_spec: Any) -> Any:
  """Inverts `split_clients` on per-slice results of type `type_spec`."""
  if not _has_clients_values(type_spec):
    return values[0]
  if _is_clients_values(type_spec):
    return [client for value in values for client in value]
  structs = [tff.structure.from_container(value) for value in values]
  return tff.structure.Struct([
      (name, _join_clients([struct[i] for struct in structs], element_type))
      for i, (name, element_type) in enumerate(
          tff.structure.iter_elements(type_spec))
  ])


class DistributedExecutionContext(tff.framework.SyncContext):
  """Sync context running each computation over one sub-context per worker.

  See the module docstring for the data flow. `worker_contexts[i]` executes
  the pieces of slice i (in practice a `tff.framework.SyncExecutionContext`
  over a `tff.framework.RemoteExecutor` of worker i); context 0 also merges
  and runs the work after the aggregation. Not thread-safe: invoke it from
  one thread at a time.
  """

  def __init__(self, worker_contexts: Sequence[tff.framework.SyncContext]):
    """Makes a thread pool with one thread per worker context.

    Args:
      worker_contexts: One sync context per worker, at least one; context 0 also
        runs the merge and the work after it.

    Raises:
      ValueError: if `worker_contexts` is empty.
    """
    if not worker_contexts:
      raise ValueError('worker_contexts must hold at least one context.')
    self._workers = list(worker_contexts)
    self._pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=len(self._workers), thread_name_prefix='tff_worker')
    self._forms = {}

  @property
  def num_workers(self) -> int:
    """Number of worker contexts; 0 once closed."""
    return len(self._workers)

  def close(self) -> None:
    """Waits for running calls, stops the threads, drops the workers."""
    self._pool.shutdown(wait=True)
    self._workers = []
    self._forms = {}

  def _compile(self, comp: Any) -> tff.framework.MergeableCompForm:
    form = self._forms.get(comp)
    if form is None:
      form = tff.backends.native.compile_to_mergeable_comp_form(comp)
      self._forms[comp] = form
    return form

  def _on_workers(self, fn: Callable[[tff.framework.SyncContext, _Slice], Any],
                  slices: Sequence[_Slice]) -> list[Any]:
    """fn(worker_contexts[i], slices[i]) concurrently; waits for all."""
    futures = [self._pool.submit(fn, worker, piece)
               for worker, piece in zip(self._workers, slices)]
    concurrent.futures.wait(futures)
    return [future.result() for future in futures]

  def invoke(self, comp: Any, arg: Any) -> Any:
    """Runs `comp` on `arg` over the workers (module docstring, steps 0-4).

    The result has the same bits as `comp` run in one process: the clients'
    records are merged in client order on worker 0.

    Args:
      comp: A TFF computation (compiled once to its mergeable form and cached).
      arg: Its argument, None for a computation without parameter.

    Returns:
      What `comp` returns on `arg`.

    Raises:
      RuntimeError: if the context is closed.
    """
    if not self._workers:
      raise RuntimeError('DistributedExecutionContext is closed.')
    parameter_type = comp.type_signature.parameter
    clients = ([arg] if parameter_type is None else
               split_clients(arg, parameter_type, _ONE_SLICE_PER_CLIENT))
    if len(clients) == 1:
      return self._workers[0].invoke(comp, arg)
    form = self._compile(comp)
    blocks = _contiguous_blocks(clients, len(self._workers))

    def on_clients(fn: Callable[[tff.framework.SyncContext, Any], Any]
                   ) -> list[Any]:
      """fn(worker i, client) for the clients of block i, in client order."""
      per_block = self._on_workers(
          lambda worker, block: [fn(worker, client) for client in block],
          blocks)
      return [result for block in per_block for result in block]

    partials = on_clients(
        lambda worker, client: worker.invoke(form.up_to_merge, client))
    merged = partials[0]
    for partial in partials[1:]:
      merged = self._workers[0].invoke(
          form.merge, tff.structure.Struct.unnamed(merged, partial))

    def after_merge(worker: tff.framework.SyncContext, client: Any) -> Any:
      return worker.invoke(form.after_merge,
                           tff.structure.Struct.unnamed(client, merged))

    result_type = form.after_merge.type_signature.result
    if not _has_clients_values(result_type):
      return after_merge(self._workers[0], clients[0])
    return tff.types.type_to_py_container(
        _join_clients(on_clients(after_merge), result_type), result_type)


def _contiguous_blocks(items: Sequence[Any], num_blocks: int) -> list[list[Any]]:
  """`items` cut into <= num_blocks contiguous blocks (`_block_bounds`)."""
  bounds = _block_bounds(len(items), num_blocks)
  return [list(items[start:stop])
          for start, stop in zip(bounds[:-1], bounds[1:])]


@contextlib.contextmanager
@validation.arguments(default_num_clients=validation.Int(0),
                      connect_timeout_s=validation.Real(0.0, low_open=True))
def remote_cpp_context(
    addresses: str | Sequence[str], *, default_num_clients: int = 0,
    connect_timeout_s: float = 60.0
) -> Iterator[DistributedExecutionContext]:
  """Installs a `DistributedExecutionContext` over running workers.

  Usage, one process:
    with tff_workers.local_workers(2) as addresses, \\
        distributed_runtime.remote_cpp_context(addresses):
      state = process.initialize()

  or, one worker per host, `remote_cpp_context('h1:8000,h2:8000')`.

  Args:
    addresses: Worker addresses host:port or unix:<path> (see
      `tff_workers.parse_addresses`); clients are spread over them in this
      order.
    default_num_clients: Number (>= 0) of clients of a computation whose
      argument does not determine it (as in `runtime.local_cpp_context`).
    connect_timeout_s: Seconds (> 0) to wait for every worker to accept a
      gRPC connection.

  Yields:
    The installed context.

  Raises:
    ValueError: for an argument out of range.
    TimeoutError: if a worker cannot be reached.

  On exit, also after an exception, the previous context is restored, the
  executors are disposed of on the workers and the channels are released
  (closed when garbage collected: closing them explicitly races with gRPC's
  connectivity-polling thread, which then raises in that thread). The
  workers keep running.
  """
  addresses = tff_workers.parse_addresses(addresses)
  channels, factories, context = [], [], None
  try:
    for address in addresses:
      channels.append(grpc.insecure_channel(address, GRPC_CHANNEL_OPTIONS))
    deadline = time.monotonic() + connect_timeout_s
    for address, channel in zip(addresses, channels):
      try:
        grpc.channel_ready_future(channel).result(
            timeout=max(0.0, deadline - time.monotonic()))
      except grpc.FutureTimeoutError as e:
        raise TimeoutError(f'TFF worker at {address} is not reachable.') from e
    worker_contexts = []
    for channel in channels:
      factories.append(
          _WorkerExecutorFactory(tff.framework.RemoteExecutorGrpcStub(channel),
                                 default_num_clients))
      worker_contexts.append(tff.framework.SyncExecutionContext(
          executor_fn=factories[-1],
          compiler_fn=tff.backends.native.desugar_and_transform_to_native,
          transform_args=tff.tensorflow.transform_args,
          transform_result=tff.tensorflow.transform_result))
    context = DistributedExecutionContext(worker_contexts)
    with tff.framework.get_context_stack().install(context):
      yield context
  finally:
    if context is not None:
      context.close()
    for factory in factories:
      factory.close()
