"""TFF's C++ workers as processes: addresses, and loopback workers started here.

TFF 0.87 ships one C++ server, `tensorflow_federated/data/worker_binary`, with
only `--port`, `--max_concurrent_computation_calls` and
`--grpc_max_message_length_megabytes`. `local_workers` starts N of them on
free loopback ports for `distributed_runtime.remote_cpp_context` (the
launcher's `--tff_workers=N`) and always stops and reaps them, with SIGKILL
after a timeout for a worker that ignores SIGINT; `parse_addresses` checks
`--tff_worker_addresses`. Imports neither TensorFlow nor TFF, so the
launcher's flag checks can use it.
"""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence

import psutil

from one_shot_epe.tff_engine import isolation
from one_shot_epe import validation

__all__ = ['LOOPBACK_HOST', 'local_workers', 'parse_addresses', 'port_is_free',
           'worker_binary_path']

LOOPBACK_HOST = '127.0.0.1'
_MAX_PORT = 65535
_PORT_ATTEMPTS = 3
_POLL_S = 0.05


def worker_binary_path() -> str:
  """Path of the C++ worker shipped in the installed TFF package.

  Found without importing TFF (and TensorFlow), which takes seconds.
  """
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or not spec.submodule_search_locations:
    raise RuntimeError('tensorflow_federated is not installed; its '
                       'worker_binary is needed for local TFF workers.')
  return os.path.join(spec.submodule_search_locations[0], 'data',
                      'worker_binary')


# ----------------------------------------------------------------------------
# Addresses.


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
  """Validated worker addresses 'host:port' from a list or a comma list.

  `host` is a name, an IPv4 address or a bracketed IPv6 address ('[::1]').

  Raises:
    ValueError: naming `addresses` if it is empty or an entry is not
      host:port with a port in [1, 65535].
  """
  if isinstance(addresses, str):
    entries = [entry.strip() for entry in addresses.split(',')]
  else:
    entries = list(addresses)
  if not entries or entries == ['']:
    raise ValueError('addresses must name at least one worker as host:port; '
                     f'got {addresses!r}.')
  parsed = []
  for entry in entries:
    host, colon, port = (entry.rpartition(':') if isinstance(entry, str) else
                         ('', '', ''))
    if not (colon and host and port.isdigit() and
            1 <= int(port) <= _MAX_PORT):
      raise ValueError('addresses entries must be host:port with a port in '
                       f'[1, {_MAX_PORT}]; got {entry!r}.')
    parsed.append(f'{host}:{int(port)}')
  return parsed


# ----------------------------------------------------------------------------
# Loopback workers.


def _unused_loopback_port() -> int:
  """A port the kernel reports free on 127.0.0.1 (may be taken meanwhile)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
    probe.bind((LOOPBACK_HOST, 0))
    return probe.getsockname()[1]


def port_is_free(port: int) -> bool:
  """True if nothing listens on `port`: 127.0.0.1:port can be bound.

  Binds with SO_REUSEADDR, as servers (worker_binary's gRPC among them) do,
  so connections of a stopped worker lingering in TIME_WAIT do not count.
  """
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      probe.bind((LOOPBACK_HOST, port))
    except OSError:
      return False
  return True


def _is_listening(pid: int, port: int) -> bool:
  try:
    connections = psutil.Process(pid).net_connections(kind='tcp')
  except psutil.NoSuchProcess:
    return False
  return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
             for c in connections)


def _start_worker(port: int, max_concurrent_computation_calls: int,
                  log_path: str | None) -> subprocess.Popen:
  args = [worker_binary_path(), f'--port={port}',
          f'--max_concurrent_computation_calls='
          f'{max_concurrent_computation_calls}']
  if log_path is None:
    return subprocess.Popen(args, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  with open(log_path, 'ab') as log:
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)


def _await_listening(process: subprocess.Popen, port: int,
                     deadline: float) -> bool:
  """Waits until `process` listens on `port` (True) or has exited (False)."""
  while time.monotonic() < deadline:
    if process.poll() is not None:
      return False
    if _is_listening(process.pid, port):
      return True
    time.sleep(_POLL_S)
  raise TimeoutError(f'worker_binary (pid {process.pid}) did not listen on '
                     f'port {port} in time.')


def _stop_workers(processes: Sequence[subprocess.Popen], ports: Sequence[int],
                  timeout_s: float) -> None:
  """SIGINT (TFF's own stop signal), SIGKILL after `timeout_s`, then reaps.

  Then waits up to `timeout_s` for `ports` (those the workers listened on) to
  be free again. A parent that itself ignores SIGINT (e.g. started with
  `nohup ... &`) passes that on to its children, which then only stop at the
  SIGKILL.
  """
  for process in processes:
    if process.poll() is None:
      with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
  deadline = time.monotonic() + timeout_s
  for process in processes:
    try:
      process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  deadline = time.monotonic() + timeout_s
  while (not all(port_is_free(port) for port in ports) and
         time.monotonic() < deadline):
    time.sleep(_POLL_S)


@contextlib.contextmanager
def local_workers(num_workers: int, *,
                  max_concurrent_computation_calls: int = -1,
                  startup_timeout_s: float = 60.0,
                  shutdown_timeout_s: float = 10.0,
                  log_dir: str | None = None) -> Iterator[list[str]]:
  """Starts `num_workers` worker_binary children; yields '127.0.0.1:port's.

  Each worker gets a port that is free on 127.0.0.1; a worker that exits at
  start (its port was taken in between) is restarted on another port. The
  addresses are for `remote_cpp_context`. On exit, also after an exception,
  every worker is stopped (`_stop_workers`) and reaped.

  worker_binary has no flag for the interface: like the worker of
  `runtime.local_cpp_context()` it listens on [::]:port, i.e. on every
  interface of its network namespace, with an unauthenticated gRPC service.
  The programs run in a namespace with only loopback
  (`isolation.isolate_program`); a worker reachable from other hosts is
  reported once it listens (`isolation.warn_if_exposed`).

  Args:
    num_workers: Number of workers, in [1, 256].
    max_concurrent_computation_calls: The worker flag of that name: at most
      this many concurrent calls of one computation per worker (e.g. clients
      trained at once), non-positive for no limit.
    startup_timeout_s: Seconds (> 0) a worker may take to listen.
    shutdown_timeout_s: Seconds (> 0) a worker gets between SIGINT and
      SIGKILL.
    log_dir: Existing directory for each worker's output (worker_<i>.log,
      appended); None discards it.

  Raises:
    ValueError: for an argument out of range.
    RuntimeError: if a worker cannot start.
  """
  validation.check_int('num_workers', num_workers, 1, 256)
  validation.check_real('startup_timeout_s', startup_timeout_s, 0.0,
                        low_open=True)
  validation.check_real('shutdown_timeout_s', shutdown_timeout_s, 0.0,
                        low_open=True)
  validation.check_int('max_concurrent_computation_calls',
                       max_concurrent_computation_calls)
  if log_dir is not None and not os.path.isdir(log_dir):
    raise ValueError(f'log_dir must be an existing directory; got {log_dir!r}.')
  processes, ports = [], []  # All started; the ports of the listening ones.
  try:
    for i in range(num_workers):
      log_path = (None if log_dir is None else
                  os.path.join(log_dir, f'worker_{i}.log'))
      for _ in range(_PORT_ATTEMPTS):
        port = _unused_loopback_port()
        processes.append(
            _start_worker(port, max_concurrent_computation_calls, log_path))
        if _await_listening(processes[-1], port,
                            time.monotonic() + startup_timeout_s):
          ports.append(port)
          isolation.warn_if_exposed(processes[-1].pid, f'worker_binary {i}')
          break
      else:
        raise RuntimeError(
            f'worker_binary {i} exited at start {_PORT_ATTEMPTS} times (exit '
            f'code {processes[-1].returncode}); pass log_dir to see why.')
    yield [f'{LOOPBACK_HOST}:{port}' for port in ports]
  finally:
    _stop_workers(processes, ports, shutdown_timeout_s)
