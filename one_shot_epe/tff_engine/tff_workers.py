"""TFF's C++ workers as processes: addresses, and loopback workers started here.

TFF 0.87 ships one C++ server, `tensorflow_federated/data/worker_binary`, with
only `--port`, `--max_concurrent_computation_calls` and
`--grpc_max_message_length_megabytes`. `local_workers` starts N of them,
each alone in a loopback-only network namespace reached through a
Unix-domain socket (`isolation.private_network_server`), for
`distributed_runtime.remote_cpp_context` (the launcher's `--tff_workers=N`)
and for `runtime.local_cpp_context` (N = 1), and always stops and reaps them,
with SIGKILL after a timeout for a worker that ignores SIGINT;
`parse_addresses` checks `--tff_worker_addresses`. Imports neither
TensorFlow nor TFF, so the launcher's flag checks can use it.
"""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

from absl import logging
import psutil

from one_shot_epe.tff_engine import exposure
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import network_namespace
from one_shot_epe.tff_engine import quiet
from one_shot_epe import validation

__all__ = ['LOOPBACK_HOST', 'local_workers', 'parse_addresses', 'port_is_free',
           'worker_binary_path']

LOOPBACK_HOST = '127.0.0.1'
_UNIX_PREFIX = 'unix:'
_MAX_PORT = 65535
_PORT_ATTEMPTS = 3
_POLL_S = 0.05


def worker_binary_path() -> str:
  """Path of the C++ worker shipped in the installed TFF package.

  Found without importing TFF (and TensorFlow), which takes seconds.

  Returns:
    <package dir>/data/worker_binary (not checked to exist).

  Raises:
    RuntimeError: tensorflow_federated is not installed.
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
  """Validated worker addresses from a list or a comma list.

  An address is 'host:port', `host` a name, an IPv4 address or a bracketed
  IPv6 address ('[::1]'), or 'unix:<absolute path>' (a Unix-domain socket,
  as `local_workers` yields).

  Args:
    addresses: A comma-separated string (blanks around entries ignored) or a
      sequence of addresses.

  Returns:
    The addresses in order, ports written without leading zeros.

  Raises:
    ValueError: naming `addresses` if it is empty or an entry is neither
      host:port with a port in [1, 65535] nor unix:<absolute path>.
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
    if isinstance(entry, str) and entry.startswith(_UNIX_PREFIX + '/'):
      parsed.append(entry)
      continue
    host, colon, port = (entry.rpartition(':') if isinstance(entry, str) else
                         ('', '', ''))
    if not (colon and host and port.isdigit() and
            1 <= int(port) <= _MAX_PORT):
      raise ValueError('addresses entries must be host:port with a port in '
                       f'[1, {_MAX_PORT}] or {_UNIX_PREFIX}<absolute path>; '
                       f'got {entry!r}.')
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

  Args:
    port: A TCP port number.

  Returns:
    Whether the bind succeeded (the probe socket is closed at once).
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


def _worker_command(max_concurrent_computation_calls: int) -> list[str]:
  return [worker_binary_path(), f'--max_concurrent_computation_calls='
          f'{max_concurrent_computation_calls}']


def _start_worker(port: int, max_concurrent_computation_calls: int,
                  output: Any, env: dict[str, str]) -> subprocess.Popen:
  """A worker in this process's network namespace (no isolation)."""
  return subprocess.Popen(
      [*_worker_command(max_concurrent_computation_calls), f'--port={port}'],
      stdin=subprocess.DEVNULL, stdout=output,
      stderr=None if output is None else subprocess.STDOUT, env=env)


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


def _direct_worker(index: int, max_concurrent_computation_calls: int,
                   output: Any, env: dict[str, str],
                   startup_timeout_s: float, processes: list[subprocess.Popen],
                   ports: list[int]) -> str:
  """Starts worker `index` in this process's namespace; returns its address.

  Appends what it started to `processes` and the port it listens on to
  `ports`; a worker that exits at start (its port was taken in between) is
  restarted on another port.
  """
  for _ in range(_PORT_ATTEMPTS):
    port = _unused_loopback_port()
    processes.append(_start_worker(port, max_concurrent_computation_calls,
                                   output, env))
    if _await_listening(processes[-1], port,
                        time.monotonic() + startup_timeout_s):
      ports.append(port)
      exposure.warn_if_exposed(processes[-1].pid, f'worker_binary {index}')
      return f'{LOOPBACK_HOST}:{port}'
  raise RuntimeError(
      f'worker_binary {index} exited at start {_PORT_ATTEMPTS} times (exit '
      f'code {processes[-1].returncode}); pass log_dir to see why.')


@contextlib.contextmanager
@validation.arguments(num_workers=validation.Int(1, 256),
                      max_concurrent_computation_calls=validation.Int(),
                      startup_timeout_s=validation.Real(0.0, low_open=True),
                      shutdown_timeout_s=validation.Real(0.0, low_open=True))
def local_workers(num_workers: int, *,
                  max_concurrent_computation_calls: int = -1,
                  startup_timeout_s: float = 60.0,
                  shutdown_timeout_s: float = 10.0,
                  log_dir: str | None = None,
                  inherit_output: bool = False) -> Iterator[list[str]]:
  """Starts `num_workers` worker_binary children; yields their gRPC targets.

  worker_binary has no flag for the interface: it listens on [::]:port, on
  every interface of its network namespace, with an unauthenticated gRPC
  service. So each worker runs alone in a network namespace of its own whose
  only interface is loopback, reached through a Unix-domain socket in a
  private temporary directory (`isolation.private_network_server`); its
  target is 'unix:<path>'. This process's own namespace is never changed.
  Where the host grants no namespace, ONE_SHOT_EPE_NETWORK_ISOLATION decides:
  'auto' (default) warns once and starts the workers here on free loopback
  ports ('127.0.0.1:port'), each reported once it listens
  (`exposure.warn_if_exposed`); 'require' raises before any worker starts;
  'off' always starts them here.

  The targets are for `distributed_runtime.remote_cpp_context` and
  `runtime.local_cpp_context`. On exit, also after an exception, every worker
  is stopped (SIGINT, SIGKILL after `shutdown_timeout_s`) and reaped, with
  its bridge, and the sockets are removed.

  Args:
    num_workers: Number of workers, in [1, 256].
    max_concurrent_computation_calls: The worker flag of that name: at most
      this many concurrent calls of one computation per worker (e.g. clients
      trained at once), non-positive for no limit.
    startup_timeout_s: Seconds (> 0) a worker may take to listen.
    shutdown_timeout_s: Seconds (> 0) a worker gets between SIGINT and
      SIGKILL.
    log_dir: Existing directory for each worker's output (worker_<i>.log,
      appended); None discards it, unless `inherit_output`.
    inherit_output: With no `log_dir`, the workers write to this process's
      stdout and stderr (as TFF's own local worker does).

  Yields:
    The workers' targets, 'unix:<path>' or '127.0.0.1:port', in order.

  Raises:
    ValueError: for an argument out of range, or a bad
      ONE_SHOT_EPE_NETWORK_ISOLATION (named).
    network_namespace.IsolationError: ONE_SHOT_EPE_NETWORK_ISOLATION=require
      and the host grants no network namespace.
    RuntimeError: if a worker cannot start.
  """
  if log_dir is not None and not os.path.isdir(log_dir):
    raise ValueError(f'log_dir must be an existing directory; got {log_dir!r}.')
  mode = isolation.isolation_mode()
  env = quiet.worker_environment()
  processes, ports = [], []  # Workers started here; their ports.
  isolated = mode != 'off'
  with contextlib.ExitStack() as stack:
    stack.callback(_stop_workers, processes, ports, shutdown_timeout_s)
    targets = []
    for i in range(num_workers):
      if log_dir is not None:
        output = stack.enter_context(
            open(os.path.join(log_dir, f'worker_{i}.log'), 'ab'))
      else:
        output = None if inherit_output else subprocess.DEVNULL
      if isolated:
        try:
          server = stack.enter_context(isolation.private_network_server(
              _worker_command(max_concurrent_computation_calls),
              stdout=output,
              stderr=None if output is None else subprocess.STDOUT, env=env,
              startup_timeout_s=startup_timeout_s,
              shutdown_timeout_s=shutdown_timeout_s))
          targets.append(f'{_UNIX_PREFIX}{server.socket_path}')
          continue
        except network_namespace.IsolationError as error:
          if mode == 'require':
            raise network_namespace.IsolationError(
                f'{isolation.ISOLATION_ENV}=require but {error}') from error
          logging.warning(
              'No network isolation (%s): local TFF workers listen on every '
              'interface of this host; each is reported when it starts.',
              error)
          isolated = False
      targets.append(_direct_worker(i, max_concurrent_computation_calls,
                                    output, env, startup_timeout_s, processes,
                                    ports))
    yield targets
