"""Lifetime management for TFF's C++ execution runtime.

TFF's default execution context starts a `worker_binary` child process on first use
and stops it only when a Python finaliser happens to run. A worker that outlives its
parent keeps the parent's stdout/stderr open, which hangs any pipe or CI runner
reading them. Every entry point of this project therefore runs TFF computations
inside `local_cpp_context()` and this module also stops leftover workers at
interpreter exit.

The worker listens on every interface of its network namespace (TFF has no
bind-address flag); `local_cpp_context()` watches for it to listen and reports
it if it is reachable from other hosts (`isolation.warn_if_exposed`), i.e.
unless the program entered a private network namespace
(`isolation.isolate_program`, or `isolation.isolate_on_import` when a script
imports this module or the audit before numpy and TensorFlow).
"""

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil

from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import quiet

__all__ = ['WORKER_BINARY_NAME', 'local_cpp_context', 'shutdown_workers',
           'worker_processes']

# A script importing this before numpy and TensorFlow: loopback-only workers.
isolation.isolate_on_import()

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
  """Returns the live TFF worker processes descended from `root_pid` (default: us)."""
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
  """Stops every TFF worker started by this process; returns how many were running.

  Workers get SIGINT (TFF's own shutdown signal) and SIGKILL after `timeout_s`. The
  exited children are deliberately not reaped here: TFF's `Popen` object reaps them
  later, and reaping twice would make its finaliser fail.
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
                      federated_program: bool = False) -> Iterator[object]:
  """Installs a fresh C++ execution context; stops its worker on exit.

  The context is synchronous (computations return values), or with
  `federated_program=True` a `tff.program.NativeFederatedContext` over the
  asynchronous one, which TFF's program logic (`tff.learning.programs.
  train_model`) requires.

  TFF starts the worker at the first computation; a background thread waits
  for it to listen and, if it is reachable from other hosts, logs a warning
  naming its address and port. A reaper process kills the worker should this
  process die without running its finalisers (SIGKILL), so a worker never
  outlives its user nor holds the user's stdout and stderr open. (Starting it here with a warm-up computation
  would be simpler but perturbs TF's seeded random state, so a run would no
  longer equal the same run on `distributed_runtime` workers.)

  Usage:
    with runtime.local_cpp_context():
      state = process.initialize()
  """
  quiet.quiet_tensorflow_import()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  if federated_program:
    context = tff.program.NativeFederatedContext(
        tff.backends.native.create_async_local_cpp_execution_context(
            default_num_clients=default_num_clients))
  else:
    context = tff.backends.native.create_sync_local_cpp_execution_context(
        default_num_clients=default_num_clients)
  stop = threading.Event()
  watcher = threading.Thread(target=_report_exposed_worker, args=(stop,),
                             name='worker-exposure-watch', daemon=True)
  watcher.start()
  reaper = _start_reaper()
  try:
    with tff.framework.get_context_stack().install(context):
      yield context
  finally:
    stop.set()
    watcher.join()
    shutdown_workers()
    _stop_reaper(reaper)


def _report_exposed_worker(stop: threading.Event,
                           poll_s: float = 0.05) -> None:
  """Waits for this process's worker to listen, then reports its exposure."""
  while not stop.wait(poll_s):
    for worker in worker_processes():
      with contextlib.suppress(FileNotFoundError, psutil.NoSuchProcess):
        if isolation.listening_addresses(worker.pid):
          isolation.warn_if_exposed(worker.pid, 'TFF worker_binary')
          return


atexit.register(shutdown_workers)
