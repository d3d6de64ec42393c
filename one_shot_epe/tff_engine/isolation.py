"""Keeps TFF's local executors unreachable from other hosts (Linux netns).

TFF 0.87's C++ `worker_binary` has no flag for its bind address: it serves an
unauthenticated gRPC executor service, which runs any TensorFlow graph it is
sent, on `[::]:<port>`, every interface of the host, for the whole run. Both
the default local context (`runtime.local_cpp_context`) and each
`--tff_workers` worker (`tff_workers.local_workers`) start one.

The programs that start local workers therefore move themselves, at start and
before any thread exists, into a network namespace of their own whose only
interface is loopback (`enter_private_network`); the workers they start inherit
it, and the launcher still reaches them on 127.0.0.1. A user's script gets the
same when it imports `tff_engine.audit` or `tff_engine.runtime` before
anything starts a thread (numpy, TensorFlow): `isolate_on_import`. Other hosts, and other
processes of this host, cannot reach them at all. Programs that use remote
workers (`--tff_worker_addresses`) stay in the host's network: those workers
are reached through the README's SSH tunnels.

Where the host allows no namespace (neither CAP_SYS_ADMIN nor unprivileged
user namespaces, e.g. a default Docker container), a program goes on and
every local worker is reported, once it listens, with its exact exposure
(`exposed_listeners`, `warn_if_exposed`). Refusing instead would make the
project unusable in such containers, whose network is usually private already;
ONE_SHOT_EPE_NETWORK_ISOLATION=require makes a program refuse (exit 2), and
=off skips the namespace (to reach a worker from outside while debugging).

Framework-free: ctypes, /proc and ioctls only.
"""

import ctypes
import errno
import fcntl

import os
import socket
import struct
import sys
from collections.abc import Sequence

from absl import flags
from absl import logging

from one_shot_epe import cli

__all__ = ['ISOLATION_ENV', 'ISOLATION_MODES', 'IsolationError',
           'LOOPBACK_INTERFACE', 'enter_private_network', 'exposed_listeners',
           'in_private_network', 'isolate_on_import', 'isolate_program',
           'isolation_mode', 'listening_addresses', 'namespace_interfaces',
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


class IsolationError(OSError):
  """The process could not enter a private network namespace."""


def isolation_mode() -> str:
  """ONE_SHOT_EPE_NETWORK_ISOLATION: 'auto' (default), 'require' or 'off'.

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
  """Names of the interfaces of the network namespace of process `pid`."""
  with open(f'/proc/{pid}/net/dev', encoding='ascii') as f:
    lines = f.read().splitlines()[2:]  # Two header lines.
  return [line.split(':', 1)[0].strip() for line in lines]


def in_private_network(pid: int | str = 'self') -> bool:
  """True if the only interface of `pid`'s network namespace is loopback."""
  return namespace_interfaces(pid) == [LOOPBACK_INTERFACE]


def enter_private_network() -> None:
  """Moves this process into a new network namespace with only loopback up.

  As root (CAP_SYS_ADMIN) a plain unshare(CLONE_NEWNET); otherwise also a new
  user namespace that maps only our own uid and gid, so files keep their
  owner. Must run before the process starts a thread: a namespace is a
  property of the calling thread, and a user namespace can only be entered by
  a single-threaded process. Children started later inherit the namespace.

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


def isolate_on_import() -> bool:
  """A script's private network, taken when importing the plug-in modules.

  `tff_engine.audit` and `tff_engine.runtime` call it first thing, so a
  script that imports one of them before numpy or TensorFlow (which start
  threads) gets the launcher's isolation: its local TFF workers are reachable
  only over loopback and no exposure is reported. Imported later, with
  ONE_SHOT_EPE_NETWORK_ISOLATION=off (e.g. a script using remote workers), or
  where the host refuses, nothing changes and each worker's exposure is
  reported when it listens. Returns whether the process is in a private
  network.

  Raises:
    IsolationError: ONE_SHOT_EPE_NETWORK_ISOLATION=require and no private
      network could be had.
  """
  if in_private_network():
    return True
  mode = isolation_mode()
  if mode == 'off':
    return False
  try:
    enter_private_network()
  except IsolationError:
    if mode == 'require':
      raise
    return False
  return True


def remote_workers_requested(argv: Sequence[str],
                             flagfile_flags: Sequence[str] = ()) -> bool:
  """True if `argv` gives --tff_worker_addresses (also in flagfiles).

  Parses only that flag (absl, known_only), following --flagfile and each
  flag of `flagfile_flags` whose value is a flagfile (reproduce's --config,
  whose values the command line overrides), before the program's own flags
  are defined.
  """
  try:
    values = cli.known_string_flags(argv, ('tff_worker_addresses',),
                                    flagfile_flags)
  except flags.Error:  # The program's own parser reports it.
    return False
  return bool(values.tff_worker_addresses)


def isolate_program(argv: Sequence[str],
                    flagfile_flags: Sequence[str] = ()) -> None:
  """Program start: a private network for local TFF workers (module doc).

  Call first thing in a program that may start local workers, before
  TensorFlow or numpy start threads. Does nothing with remote workers or
  ONE_SHOT_EPE_NETWORK_ISOLATION=off; if the host refuses, logs a warning
  (mode auto; each worker's exposure is reported when it starts) or exits
  with status 2 (mode require).
  """
  try:
    mode = isolation_mode()
  except ValueError as error:
    sys.stderr.write(f'error: {error}\n')
    sys.exit(2)
  if mode == 'off' or remote_workers_requested(argv, flagfile_flags):
    return
  try:
    enter_private_network()
  except IsolationError as error:
    if mode == 'require':
      sys.stderr.write(f'error: {ISOLATION_ENV}=require but {error}\n')
      sys.exit(2)
    logging.warning(
        'No network isolation (%s): local TFF workers will listen on every '
        'interface of this host; each is reported when it starts.', error)


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
  """
  if in_private_network(pid):
    return []
  return [a for a in listening_addresses(pid) if not _is_loopback(a)]


def warn_if_exposed(pid: int, what: str) -> list[str]:
  """Logs a warning naming `what` (pid `pid`) and each exposed address.

  Returns the exposed addresses (empty: nothing logged; also if the process
  has exited meanwhile, as it then listens on nothing).
  """
  try:
    exposed = exposed_listeners(pid)
  except FileNotFoundError:  # /proc/<pid> is gone.
    return []
  if exposed:
    logging.warning(
        'EXPOSED: %s (pid %d) listens on %s, reachable from other hosts: an '
        'unauthenticated service that runs any TensorFlow graph it is sent. '
        'This project\'s programs avoid it with a private network namespace, '
        'and so does a script that imports one_shot_epe.tff_engine.audit (or '
        '.runtime) before numpy and TensorFlow; %s=off disables that, and the '
        'host may refuse it. Otherwise firewall these ports.', what, pid,
        ', '.join(exposed), ISOLATION_ENV)
  return exposed
