"""Do TFF workers run at the same time? `distributed_runtime` vs TFF's context.

Times one federated round whose clients each wait --client_sleep_ms inside the
worker (a tf.data sleep: wall time without CPU, so the 2-core machine's load
does not blur the answer) and then are summed, over --num_workers loopback
workers with --clients_per_worker clients each:

* baseline: `tff.backends.native.create_mergeable_comp_execution_context`
  over one `tff.framework.AsyncExecutionContext` per worker, TFF 0.87's own
  way to spread a round over several workers;
* distributed_runtime: `distributed_runtime.remote_cpp_context` over the same
  workers.

Both compute the same MergeableCompForm; the ratio baseline / this module is
~num_workers if this module's workers run concurrently and TFF's one after
another (its remote executor blocks the one event loop that drives them all).
Each is timed --repeats times after one warm-up call; medians are printed.

  python -m benchmarks.distributed_runtime [--num_workers=2]
      [--clients_per_worker=2] [--client_sleep_ms=500] [--repeats=3]
"""

import sys

if __name__ == '__main__':
  # The isolation mode's checks (exit 2), then a quiet TensorFlow import.
  from benchmarks import tff_start
  tff_start.start(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import statistics
import time
import types
from collections.abc import Sequence

from absl import app
from absl import flags
import grpc
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# The only TF op that waits without using the CPU; private but stable in 2.14.
from tensorflow.python.data.experimental.ops import testing as tf_data_testing

from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine import distributed_runtime
from one_shot_epe.tff_engine import tff_workers


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'num_workers': flags.DEFINE_integer(
          'num_workers', 2, 'Workers.', lower_bound=2, flag_values=flag_values),
      'clients_per_worker': flags.DEFINE_integer(
          'clients_per_worker', 2, 'Clients per worker.', lower_bound=1,
          flag_values=flag_values),
      'client_sleep_ms': flags.DEFINE_integer(
          'client_sleep_ms', 500, 'Milliseconds each client waits.',
          lower_bound=1, flag_values=flag_values),
      'repeats': flags.DEFINE_integer(
          'repeats', 3, 'Timed calls per context.', lower_bound=1,
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): 1 client per worker waiting 1 ms, one timed call.
_TINY = dict(clients_per_worker=1, client_sleep_ms=1, repeats=1)


def _sleeping_sum(sleep_us: int) -> tff.Computation:
  """Federated sum of client values, each client waiting `sleep_us` first."""

  @tff.tensorflow.computation(np.int64)
  def wait_then_return(value):
    waited = tf.data.Dataset.range(1).apply(tf_data_testing.sleep(sleep_us))
    return waited.reduce(value, lambda total, _: total)

  @tff.federated_computation(tff.FederatedType(np.int64, tff.CLIENTS))
  def round_fn(values):
    return tff.federated_sum(tff.federated_map(wait_then_return, values))

  return round_fn


def _tff_mergeable_context(
    addresses: Sequence[str]) -> tff.framework.SyncContext:
  """TFF's context over one async remote-executor context per worker."""

  def async_context(address):
    stub = tff.framework.RemoteExecutorGrpcStub(grpc.insecure_channel(address))

    def stack_fn(cardinalities):
      cardinalities.setdefault(tff.CLIENTS, 0)
      executor = tff.framework.RemoteExecutor(stub)
      executor.set_cardinalities(cardinalities)
      return executor

    return tff.framework.AsyncExecutionContext(
        executor_fn=tff.framework.ResourceManagingExecutorFactory(stack_fn),
        compiler_fn=tff.backends.native.desugar_and_transform_to_native,
        transform_args=tff.tensorflow.transform_args,
        transform_result=tff.tensorflow.transform_result)

  return tff.backends.native.create_mergeable_comp_execution_context(
      [async_context(address) for address in addresses])


def _median_seconds(round_fn: tff.Computation, values: list[int],
                    repeats: int) -> float:
  expected = sum(values)
  if round_fn(values) != expected:  # Warm-up (compilation), checked.
    raise AssertionError('wrong federated sum')
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    total = round_fn(values)
    times.append(time.perf_counter() - start)
    if total != expected:
      raise AssertionError('wrong federated sum')
  return statistics.median(times)


def main(argv: Sequence[str]) -> None:
  """Prints both contexts' median round times on the same workers, and ratio.

  Args:
    argv: the program's name, then the arguments absl left after parsing
      the flags (none are accepted).

  Raises:
    app.UsageError: `argv` holds arguments besides the program's name.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  tiny.shrink(_FLAGS, _TINY)
  num_workers = _FLAGS.num_workers.value
  values = list(range(num_workers * _FLAGS.clients_per_worker.value))
  round_fn = _sleeping_sum(1000 * _FLAGS.client_sleep_ms.value)
  with tff_workers.local_workers(num_workers) as addresses:
    with tff.framework.get_context_stack().install(
        _tff_mergeable_context(addresses)):
      baseline = _median_seconds(round_fn, values, _FLAGS.repeats.value)
    with distributed_runtime.remote_cpp_context(addresses):
      spread = _median_seconds(round_fn, values, _FLAGS.repeats.value)
  print(f'{num_workers} workers x {_FLAGS.clients_per_worker.value} '
        f'clients, each waiting {_FLAGS.client_sleep_ms.value} ms; median of '
        f'{_FLAGS.repeats.value}:')
  print(f'  baseline (TFF mergeable context): {baseline:.3f} s')
  print(f'  distributed_runtime:              {spread:.3f} s')
  print(f'  ratio baseline / distributed_runtime: {baseline / spread:.2f}')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
