"""Lifetime management for TFF's C++ execution runtime.

TFF's default execution context starts a `worker_binary` child process on first use
and stops it only when a Python finaliser happens to run. A worker that outlives its
parent keeps the parent's stdout/stderr open, which hangs any pipe or CI runner
reading them. Every entry point of this project therefore runs TFF computations
inside `local_cpp_context()` and this module also stops leftover workers at
interpreter exit.

The worker serves an unauthenticated gRPC executor service on every interface
of its network namespace (TFF has no bind-address flag). `local_cpp_context()`
therefore starts its own worker the way `--tff_workers` workers start
(`tff_workers.local_workers`): alone in a network namespace whose only
interface is loopback, reached through a Unix-domain socket
(`isolation.private_network_server`), while the calling process keeps its own
namespace. Where the host grants no namespace the worker listens here and its
exposure is reported (ONE_SHOT_EPE_NETWORK_ISOLATION: `isolation`). Importing
this module changes nothing in the process.
"""

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil

from one_shot_epe.tff_engine import quiet
from one_shot_epe.tff_engine import tff_workers

__all__ = ['WORKER_BINARY_NAME', 'local_cpp_context', 'shutdown_workers',
           'worker_processes']

WORKER_BINARY_NAME = 'worker_binary'

# The reaper of `local_cpp_context`: a process of its own session, holding
# none of our files, that notes our TFF workers while we live and kills them
# once we are gone (killed with SIGKILL, say, when no finaliser runs).
_REAPER = r'''
import sys, time
import psutil
parent = psutil.Process(int(sys.argv[1]))
seen = {}
while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
  try:
    for child in parent.children(recursive=True):
      if child.name() == sys.argv[2]:
        seen[child.pid] = child
  except psutil.Error:
    pass
  time.sleep(float(sys.argv[3]))
for worker in seen.values():
  try:
    worker.kill()
  except psutil.Error:
    pass
'''
_REAPER_POLL_S = 0.1


def worker_processes(root_pid: int | None = None) -> list[psutil.Process]:
  """Returns the live TFF worker processes descended from `root_pid` (default: us).

  Args:
    root_pid: The process whose descendants are searched; None for this one.

  Returns:
    The descendants named `WORKER_BINARY_NAME` that are not zombies; [] if
    `root_pid` no longer exists.
  """
  try:
    root = psutil.Process(os.getpid() if root_pid is None else root_pid)
    children = root.children(recursive=True)
  except psutil.NoSuchProcess:
    return []
  workers = []
  for child in children:
    try:
      if (child.name() == WORKER_BINARY_NAME and
          child.status() != psutil.STATUS_ZOMBIE):
        workers.append(child)
    except psutil.NoSuchProcess:
      continue
  return workers


def _has_exited(process: psutil.Process) -> bool:
  try:
    return process.status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def shutdown_workers(timeout_s: float = 10.0) -> int:
  """Stops every TFF worker started by this process; returns how many were killed.

  Workers get SIGINT (TFF's own shutdown signal) and SIGKILL after `timeout_s`. The
  exited children are deliberately not reaped here: TFF's `Popen` object reaps them
  later, and reaping twice would make its finaliser fail.

  Args:
    timeout_s: Seconds to wait after SIGINT before SIGKILL.

  Returns:
    The number of workers still running at the deadline (and so killed); 0
    when every worker stopped on SIGINT.
  """
  workers = worker_processes()
  for worker in workers:
    with contextlib.suppress(psutil.NoSuchProcess):
      worker.send_signal(signal.SIGINT)
  deadline = time.monotonic() + timeout_s
  while workers and time.monotonic() < deadline:
    workers = [w for w in workers if not _has_exited(w)]
    time.sleep(0.02)
  for worker in workers:
    with contextlib.suppress(psutil.NoSuchProcess):
      worker.kill()
  return len(workers)


def _start_reaper() -> subprocess.Popen:
  """Starts the reaper of this process's workers (`_REAPER`)."""
  return subprocess.Popen(
      [sys.executable, '-c', _REAPER, str(os.getpid()), WORKER_BINARY_NAME,
       str(_REAPER_POLL_S)],
      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)


def _stop_reaper(reaper: subprocess.Popen) -> None:
  reaper.terminate()
  try:
    reaper.wait(timeout=10)
  except subprocess.TimeoutExpired:
    reaper.kill()
    reaper.wait()


@contextlib.contextmanager
def local_cpp_context(default_num_clients: int = 0,
                      federated_program: bool = False,
                      connect_timeout_s: float = 60.0) -> Iterator[object]:
  """Installs a fresh C++ execution context; stops its worker on exit.

  The context is synchronous (computations return values), or with
  `federated_program=True` a `tff.program.NativeFederatedContext` over the
  asynchronous one, which TFF's program logic (`tff.learning.programs.
  train_model`) requires. Either is TFF's local C++ context (one
  `worker_binary` driven by `tff.framework.RemoteExecutor`s, one per
  cardinalities), except that the worker is started here, isolated
  (`tff_workers.local_workers`, module doc), before the first computation.
  Starting the worker runs no computation, so TF's seeded random state is as
  with TFF's own context and a run equals the same run on
  `distributed_runtime` workers.

  A reaper process kills the worker should this process die without running
  its finalisers (SIGKILL), and the worker's bridge exits with it, so neither
  outlives its user nor holds the user's stdout and stderr open.

  Usage:
    with runtime.local_cpp_context():
      state = process.initialize()

  Args:
    default_num_clients: Number (>= 0) of clients of a computation whose
      argument does not determine it.
    federated_program: The asynchronous context, wrapped for TFF programs.
    connect_timeout_s: Seconds (> 0) to wait for the worker's gRPC service.

  Yields:
    The installed context.

  Raises:
    network_namespace.IsolationError: ONE_SHOT_EPE_NETWORK_ISOLATION=require
      and the host grants no network namespace.
    TimeoutError: the worker could not be reached.
  """
  quiet.quiet_tensorflow_import()
  # pylint: disable=g-import-not-at-top
  import grpc
  import tensorflow_federated as tff
  from one_shot_epe.tff_engine import distributed_runtime
  # pylint: enable=g-import-not-at-top

  reaper = _start_reaper()
  try:
    with tff_workers.local_workers(1, inherit_output=True) as (target,):
      channel = grpc.insecure_channel(target,
                                      distributed_runtime.GRPC_CHANNEL_OPTIONS)
      try:
        grpc.channel_ready_future(channel).result(timeout=connect_timeout_s)
      except grpc.FutureTimeoutError as e:
        raise TimeoutError(f'TFF worker at {target} is not reachable.') from e
      stub = tff.framework.RemoteExecutorGrpcStub(channel)

      def executor_stack(cardinalities):
        if cardinalities.get(tff.CLIENTS) is None:
          cardinalities[tff.CLIENTS] = default_num_clients
        executor = tff.framework.RemoteExecutor(stub)
        executor.set_cardinalities(cardinalities)
        return executor

      factory = tff.framework.ResourceManagingExecutorFactory(
          executor_stack_fn=executor_stack)
      kind = (tff.framework.AsyncExecutionContext if federated_program else
              tff.framework.SyncExecutionContext)
      context = kind(
          executor_fn=factory,
          compiler_fn=tff.backends.native.desugar_and_transform_to_native,
          transform_args=tff.tensorflow.transform_args,
          transform_result=tff.tensorflow.transform_result)
      if federated_program:
        context = tff.program.NativeFederatedContext(context)
      with tff.framework.get_context_stack().install(context):
        yield context
  finally:
    _stop_reaper(reaper)


atexit.register(shutdown_workers)
