"""Keeps TFF's local executors unreachable from other hosts (Linux netns).

TFF 0.87's C++ `worker_binary` has no flag for its bind address: it serves an
unauthenticated gRPC executor service, which runs any TensorFlow graph it is
sent, on `[::]:<port>`, every interface of its network namespace, for the
whole run. Both the default local context (`runtime.local_cpp_context`) and
each `--tff_workers` worker (`tff_workers.local_workers`) start one.

So each such worker runs alone in a network namespace of its own whose only
interface is loopback, and nothing else changes: `private_network_server`
starts a child interpreter (the bridge) that enters a new namespace
(`enter_private_network`: unshare(CLONE_NEWNET) as root, else together with
a new user namespace mapping only our uid and gid), starts the worker there
on 127.0.0.1:<port> and forwards the connections made to a Unix-domain
socket to it. The socket is a file in a temporary directory private to the
user (the bridge's own, removed when it ends), reachable from the caller's namespace (gRPC target `unix:<path>`).
Other hosts, and other network namespaces of this host, cannot reach the
worker at all; the calling process (a launcher or a user's script) keeps its
own namespace, threads, signal handlers and environment, and importing any
module of this package changes none of them. Programs that use remote
workers (`--tff_worker_addresses`) start none: those workers are reached
through the README's SSH tunnels.

Where the host allows no namespace (neither CAP_SYS_ADMIN nor unprivileged
user namespaces, e.g. a default Docker container), the worker starts in the
caller's namespace as TFF would start it, and is reported, once it listens,
with its exact exposure (`exposed_listeners`, `warn_if_exposed`). Refusing
instead would make the project unusable in such containers, whose network is
usually private already. ONE_SHOT_EPE_NETWORK_ISOLATION (`isolation_mode`)
decides: 'auto' (default) as just said; 'require' raises `IsolationError`
naming the variable before any worker starts (programs exit with status 2 at
start, `check_program`); 'off' starts workers in the caller's namespace (to
reach one from outside while debugging).

Framework-free: ctypes, /proc, sockets and ioctls only.
"""

import contextlib
import ctypes
import errno
import fcntl
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from absl import flags
from absl import logging

from one_shot_epe.runtime import command_line

__all__ = ['ISOLATION_ENV', 'ISOLATION_MODES', 'IsolationError',
           'IsolatedServer', 'LOOPBACK_INTERFACE', 'check_program', 'enter_private_network',
           'exposed_listeners', 'in_private_network', 'isolation_mode',
           'listening_addresses', 'namespace_interfaces',
           'private_network_refusal', 'private_network_server',
           'remote_workers_requested', 'warn_if_exposed']

ISOLATION_ENV = 'ONE_SHOT_EPE_NETWORK_ISOLATION'
ISOLATION_MODES = ('auto', 'require', 'off')
LOOPBACK_INTERFACE = 'lo'

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ_SIZE = 40  # struct ifreq: 16-byte name, then a 24-byte union.
_TCP_LISTEN = '0A'  # Socket state in /proc/<pid>/net/tcp{,6}.
_PR_SET_PDEATHSIG = 1
_LOOPBACK_HOST = '127.0.0.1'
_POLL_S = 0.05
_BRIDGE_GRACE_S = 5.0  # Beyond the server's shutdown timeout.
_BRIDGE_BUFFER_BYTES = 1 << 20
# The directory holding the package, so that a child interpreter imports the
# very code of this process however it found it.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# A child interpreter running `isolation.<function>(argv after the root)`.
_CHILD = ('import sys; sys.path.insert(0, sys.argv[1]); '
          'from one_shot_epe.tff_engine import isolation; '
          'isolation.{}(sys.argv[2:])')


class IsolationError(OSError):
  """The process could not enter a private network namespace."""


def isolation_mode() -> str:
  """ONE_SHOT_EPE_NETWORK_ISOLATION: 'auto' (default), 'require' or 'off'.

  Returns:
    The mode, lower-cased; 'auto' when the variable is unset or blank.

  Raises:
    ValueError: naming the variable if it holds another value.
  """
  mode = os.environ.get(ISOLATION_ENV, 'auto').strip().lower() or 'auto'
  if mode not in ISOLATION_MODES:
    raise ValueError(f'{ISOLATION_ENV} must be one of {ISOLATION_MODES}; got '
                     f'{os.environ[ISOLATION_ENV]!r}.')
  return mode


def _unshare(clone_flags: int) -> int:
  """unshare(2) of the calling thread; returns 0 or the errno."""
  libc = ctypes.CDLL(None, use_errno=True)
  return 0 if libc.unshare(clone_flags) == 0 else ctypes.get_errno()


def _write(path: str, text: str) -> None:
  with open(path, 'w', encoding='ascii') as f:
    f.write(text)


def _set_interface_up(name: str) -> None:
  """Brings interface `name` up (SIOCGIFFLAGS, then SIOCSIFFLAGS | IFF_UP)."""
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
    request = struct.pack('16sh', name.encode(), 0).ljust(_IFREQ_SIZE, b'\0')
    current = struct.unpack_from('16sh', fcntl.ioctl(probe, _SIOCGIFFLAGS,
                                                     request))[1]
    fcntl.ioctl(probe, _SIOCSIFFLAGS,
                struct.pack('16sh', name.encode(),
                            current | _IFF_UP).ljust(_IFREQ_SIZE, b'\0'))


def namespace_interfaces(pid: int | str = 'self') -> list[str]:
  """Names of the interfaces of the network namespace of process `pid`.

  Args:
    pid: A process id, or 'self' for the calling process.

  Returns:
    The interface names in /proc/<pid>/net/dev order.

  Raises:
    OSError: /proc/<pid>/net/dev cannot be read (e.g. the process is gone).
  """
  with open(f'/proc/{pid}/net/dev', encoding='ascii') as f:
    lines = f.read().splitlines()[2:]  # Two header lines.
  return [line.split(':', 1)[0].strip() for line in lines]


def in_private_network(pid: int | str = 'self') -> bool:
  """True if the only interface of `pid`'s network namespace is loopback.

  Args:
    pid: A process id, or 'self' for the calling process.

  Returns:
    Whether `LOOPBACK_INTERFACE` is the namespace's only interface.

  Raises:
    OSError: /proc/<pid>/net/dev cannot be read (e.g. the process is gone).
  """
  return namespace_interfaces(pid) == [LOOPBACK_INTERFACE]


def enter_private_network() -> None:
  """Moves this process into a new network namespace with only loopback up.

  As root (CAP_SYS_ADMIN) a plain unshare(CLONE_NEWNET); otherwise also a new
  user namespace that maps only our own uid and gid, so files keep their
  owner. Must run before the process starts a thread: a namespace is a
  property of the calling thread, and a user namespace can only be entered by
  a single-threaded process. Children started later inherit the namespace.
  Only the bridge of `private_network_server` (and its probe) call it: no
  process of the user's is ever moved.

  Raises:
    IsolationError: with the reason, if the process has other threads or the
      kernel refuses (no privilege, user namespaces disabled or filtered).
  """
  threads = len(os.listdir('/proc/self/task'))
  if threads != 1:
    raise IsolationError(
        f'enter_private_network must run before any thread starts; this '
        f'process has {threads} threads.')
  error = _unshare(_CLONE_NEWNET)
  if error == errno.EPERM:
    uid, gid = os.geteuid(), os.getegid()
    error = _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    if not error:
      _write('/proc/self/setgroups', 'deny')
      _write('/proc/self/uid_map', f'{uid} {uid} 1')
      _write('/proc/self/gid_map', f'{gid} {gid} 1')
  if error:
    raise IsolationError(error, 'cannot create a network namespace: '
                         f'unshare: {os.strerror(error)}')
  _set_interface_up(LOOPBACK_INTERFACE)
  if not in_private_network():
    raise IsolationError(f'the new network namespace has interfaces '
                         f'{namespace_interfaces()}, expected only loopback.')


def remote_workers_requested(argv: Sequence[str],
                             flagfile_flags: Sequence[str] = ()) -> bool:
  """True if `argv` gives --tff_worker_addresses (also in flagfiles).

  Parses only that flag (absl, known_only), following --flagfile and each
  flag of `flagfile_flags` whose value is a flagfile (reproduce's --config,
  whose values the command line overrides), before the program's own flags
  are defined.

  Args:
    argv: The command line, program name first.
    flagfile_flags: Names of further flags whose value is a flagfile.

  Returns:
    Whether --tff_worker_addresses is given a non-empty value; False also when
    the command line does not parse.
  """
  try:
    values = command_line.known_string_flags(argv, ('tff_worker_addresses',),
                                    flagfile_flags)
  except flags.Error:  # The program's own parser reports it.
    return False
  return bool(values.tff_worker_addresses)


def private_network_refusal() -> str | None:
  """Why no private network namespace can be had here; None if one can.

  Asks a fresh (single-threaded) child interpreter to enter one, as
  `private_network_server` does, so the caller's own namespace never changes.

  Returns:
    The first line of the child's output when it fails, else None.
  """
  done = subprocess.run(
      [sys.executable, '-c', _CHILD.format('_probe_main'), _PACKAGE_ROOT],
      stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
  if done.returncode == 0:
    return None
  lines = (done.stdout + done.stderr).strip().splitlines()
  return lines[0] if lines else f'exit status {done.returncode}'


def check_program(argv: Sequence[str],
                  flagfile_flags: Sequence[str] = ()) -> None:
  """Program start: the isolation mode's checks, before anything is written.

  Exits with status 2 and one line naming ONE_SHOT_EPE_NETWORK_ISOLATION if
  it holds a bad value, or if it is 'require' and this host grants no private
  network namespace (`private_network_refusal`) to the local TFF workers the
  program may start. Changes nothing in this process; does nothing with
  remote workers (--tff_worker_addresses).

  Args:
    argv: The command line, program name first.
    flagfile_flags: Names of further flags whose value is a flagfile
      (`remote_workers_requested`).

  Raises:
    SystemExit: status 2, in the cases above.
  """
  try:
    mode = isolation_mode()
  except ValueError as error:
    sys.stderr.write(f'error: {error}\n')
    sys.exit(2)
  if mode != 'require' or remote_workers_requested(argv, flagfile_flags):
    return
  refusal = private_network_refusal()
  if refusal is not None:
    sys.stderr.write(f'error: {ISOLATION_ENV}=require but {refusal}\n')
    sys.exit(2)


def _read_line(fd: int, deadline: float) -> str:
  """One line from pipe `fd` ('' at EOF); TimeoutError after `deadline`."""
  data = b''
  while not data.endswith(b'\n'):
    remaining = deadline - time.monotonic()
    if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
      raise TimeoutError('the isolated TFF worker did not listen in time.')
    chunk = os.read(fd, 4096)
    if not chunk:
      break
    data += chunk
  return data.decode(errors='replace').strip()


def _stop_bridge(bridge: subprocess.Popen, shutdown_timeout_s: float) -> None:
  """EOF on the bridge's stdin: it stops its server (SIGINT, then SIGKILL)."""
  with contextlib.suppress(OSError):
    bridge.stdin.close()
  try:
    bridge.wait(shutdown_timeout_s + _BRIDGE_GRACE_S)
  except subprocess.TimeoutExpired:
    bridge.kill()
    bridge.wait()


class IsolatedServer(NamedTuple):
  """A server of `private_network_server`: its bridge and the bridge's socket."""
  bridge: subprocess.Popen
  socket_path: str


@contextlib.contextmanager
def private_network_server(
    command: Sequence[str], *, stdout: Any = None, stderr: Any = None,
    env: Mapping[str, str] | None = None, startup_timeout_s: float = 60.0,
    shutdown_timeout_s: float = 10.0) -> Iterator[IsolatedServer]:
  """Runs a TCP server alone in a loopback-only namespace, reached by a socket.

  A child interpreter (the bridge) enters a new network namespace whose only
  interface is loopback (`enter_private_network`), starts `command` plus
  `--port=<port>` there, waits for it to accept on 127.0.0.1:<port>, and then
  forwards every connection made to its Unix-domain socket to that port. The
  socket is a file in a directory of its own, private to the user, under
  `tempfile.gettempdir()` (reachable from any network namespace; gRPC's
  `unix:<path>` target); the bridge removes both when it ends. Nothing listens in the caller's namespace, and the
  caller's namespace, threads and signals stay as they are.

  The server dies with the bridge (PR_SET_PDEATHSIG), and the bridge stops
  the server (SIGINT, SIGKILL after `shutdown_timeout_s`), removes its socket
  and exits when its stdin closes: on leaving this context, and when the
  caller dies. The bridge runs in a session of its own, so a signal to the
  caller's process group (Ctrl-C, or SIGKILL to a launcher and its children)
  reaches it only as that end of its stdin, and it still cleans up.

  Args:
    command: The server's argv, without the port flag.
    stdout: The server's stdout (as for `subprocess.Popen`).
    stderr: The server's and the bridge's stderr.
    env: The server's environment (None: this process's).
    startup_timeout_s: Seconds the server may take to listen.
    shutdown_timeout_s: Seconds between SIGINT and SIGKILL at the end.

  Yields:
    The bridge process (the server is its child) and the socket's path.

  Raises:
    IsolationError: the host grants no network namespace (nothing started).
    RuntimeError: the server exited at start.
    TimeoutError: it did not listen within `startup_timeout_s`.
  """
  deadline = time.monotonic() + startup_timeout_s
  ready_read, ready_write = os.pipe()
  try:
    bridge = subprocess.Popen(
        [sys.executable, '-c', _CHILD.format('_bridge_main'), _PACKAGE_ROOT,
         tempfile.gettempdir(), str(ready_write), str(shutdown_timeout_s),
         *command],
        stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
        env=None if env is None else dict(env), pass_fds=(ready_write,),
        start_new_session=True)
  except BaseException:
    os.close(ready_read)
    raise
  finally:
    os.close(ready_write)
  try:
    try:
      status = _read_line(ready_read, deadline)
    finally:
      os.close(ready_read)
    if status.startswith('refused '):
      raise IsolationError(status[len('refused '):])
    if not status.startswith('ready '):
      raise RuntimeError(f'{os.path.basename(command[0])} exited at start in '
                         f'its network namespace ({status or "no status"}).')
    yield IsolatedServer(bridge, status[len('ready '):])
  finally:
    _stop_bridge(bridge, shutdown_timeout_s)


def _probe_main(argv: Sequence[str]) -> None:
  """Child of `private_network_refusal`: exit 0 iff a namespace was entered."""
  del argv  # Unused.
  try:
    enter_private_network()
  except IsolationError as error:
    print(error)
    sys.exit(1)


def _die_with_parent() -> None:
  """Server's pre-exec hook: SIGKILL when its bridge dies."""
  ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _await_server(server: subprocess.Popen, port: int) -> bool:
  """Waits until `server` accepts on 127.0.0.1:port (True) or exits (False)."""
  while server.poll() is None:
    with contextlib.suppress(OSError), socket.create_connection(
        (_LOOPBACK_HOST, port), timeout=1.0):
      return True
    time.sleep(_POLL_S)
  return False


def _pump(source: socket.socket, sink: socket.socket) -> None:
  """Copies `source` to `sink` until EOF or an error, then half-closes."""
  buffer = bytearray(_BRIDGE_BUFFER_BYTES)
  view = memoryview(buffer)
  try:
    while True:
      count = source.recv_into(buffer)
      if not count:
        break
      sink.sendall(view[:count])
  except OSError:
    pass
  finally:
    with contextlib.suppress(OSError):
      sink.shutdown(socket.SHUT_WR)


def _forward(client: socket.socket, port: int) -> None:
  """Forwards one accepted Unix-socket connection to 127.0.0.1:port."""
  with client:
    try:
      upstream = socket.create_connection((_LOOPBACK_HOST, port))
    except OSError:
      return
    with upstream:
      upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
      back = threading.Thread(target=_pump, args=(upstream, client),
                              daemon=True)
      back.start()
      _pump(client, upstream)
      back.join()


def _bridge_main(argv: Sequence[str]) -> None:
  """The bridge of `private_network_server` (its argv after the root)."""
  temp_root, ready_fd, shutdown_timeout_s = argv[0], int(argv[1]), float(
      argv[2])
  command = list(argv[3:])
  with os.fdopen(ready_fd, 'w') as ready:
    try:
      enter_private_network()
    except IsolationError as error:
      ready.write(f'refused {error}\n')
      sys.exit(3)
    with socket.socket() as probe:
      probe.bind((_LOOPBACK_HOST, 0))
      port = probe.getsockname()[1]
    server = subprocess.Popen([*command, f'--port={port}'],
                              stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent)
    if not _await_server(server, port):
      ready.write(f'exit status {server.returncode}\n')
      sys.exit(4)
    socket_dir = tempfile.mkdtemp(prefix='tff_worker_', dir=temp_root)
    socket_path = os.path.join(socket_dir, 'server.sock')
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(socket_path)
    listener.listen(16)
    ready.write(f'ready {socket_path}\n')
  with selectors.DefaultSelector() as selector:
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
    selector.register(listener, selectors.EVENT_READ)
    running = True
    while running and server.poll() is None:
      for key, _ in selector.select(_POLL_S * 4):
        if key.fileobj is listener:
          client, _ = listener.accept()
          threading.Thread(target=_forward, args=(client, port),
                           daemon=True).start()
        elif not os.read(key.fd, 4096):  # The caller closed our stdin.
          running = False
  listener.close()
  os.unlink(socket_path)
  os.rmdir(socket_dir)
  if server.poll() is None:
    server.send_signal(signal.SIGINT)
    try:
      server.wait(shutdown_timeout_s)
    except subprocess.TimeoutExpired:
      server.kill()
      server.wait()

def _socket_inodes(pid: int) -> set[str]:
  inodes = set()
  for fd in os.listdir(f'/proc/{pid}/fd'):
    try:
      target = os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:  # Closed meanwhile.
      continue
    if target.startswith('socket:['):
      inodes.add(target[len('socket:['):-1])
  return inodes


def _address(hex_address: str) -> str:
  """'host:port' of a /proc/net/tcp{,6} address (IPv6 in brackets)."""
  host, port = hex_address.split(':')
  raw = bytes.fromhex(host)
  # The kernel prints each 32-bit word in host (little-endian) byte order.
  raw = b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
  if len(raw) == 4:
    return f'{socket.inet_ntop(socket.AF_INET, raw)}:{int(port, 16)}'
  return f'[{socket.inet_ntop(socket.AF_INET6, raw)}]:{int(port, 16)}'


def listening_addresses(pid: int) -> list[str]:
  """'host:port' of every TCP socket that process `pid` listens on.

  Read from /proc/<pid>/net, i.e. in the network namespace of `pid` itself
  (psutil reads the caller's namespace and misses sockets of another one).

  Args:
    pid: The process id.

  Returns:
    The addresses, sorted: 'a.b.c.d:port' for IPv4, '[v6]:port' for IPv6.

  Raises:
    OSError: /proc/<pid> cannot be read (FileNotFoundError once it exits).
  """
  inodes = _socket_inodes(pid)
  found = []
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/{pid}/net/{table}', encoding='ascii') as f:
      for line in f.read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == _TCP_LISTEN and fields[9] in inodes:
          found.append(_address(fields[1]))
  return sorted(found)


def _is_loopback(address: str) -> bool:
  host = address.rsplit(':', 1)[0].strip('[]')
  return host == '::1' or host.startswith('127.')


def exposed_listeners(pid: int) -> list[str]:
  """Listening addresses of `pid` reachable from beyond loopback.

  A socket is exposed unless it is bound to a loopback address or its network
  namespace has no interface but loopback (`[::]:port` in a private namespace
  is reachable from nowhere else).

  Args:
    pid: The process id.

  Returns:
    The exposed 'host:port' addresses, sorted; [] in a private namespace.

  Raises:
    OSError: /proc/<pid> cannot be read (FileNotFoundError once it exits).
  """
  if in_private_network(pid):
    return []
  return [a for a in listening_addresses(pid) if not _is_loopback(a)]


def warn_if_exposed(pid: int, what: str) -> list[str]:
  """Logs a warning naming `what` (pid `pid`) and each exposed address.

  Returns the exposed addresses (empty: nothing logged; also if the process
  has exited meanwhile, as it then listens on nothing).

  Args:
    pid: The process id.
    what: What the process is, for the warning (e.g. 'TFF worker').

  Returns:
    The exposed 'host:port' addresses (`exposed_listeners`).
  """
  try:
    exposed = exposed_listeners(pid)
  except FileNotFoundError:  # /proc/<pid> is gone.
    return []
  if exposed:
    logging.warning(
        'EXPOSED: %s (pid %d) listens on %s, reachable from other hosts: an '
        'unauthenticated service that runs any TensorFlow graph it is sent. '
        'This project starts local workers each in a private network '
        'namespace where the host allows it (%s=off disables that); here it '
        'did not. Firewall these ports, or set %s=require to refuse to run '
        'without.', what, pid, ', '.join(exposed), ISOLATION_ENV,
        ISOLATION_ENV)
  return exposed
