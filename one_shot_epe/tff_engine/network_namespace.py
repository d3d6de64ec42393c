"""Entering and reading a loopback-only Linux network namespace.

`enter_private_network` moves the calling (single-threaded) process into a
new network namespace whose only interface, loopback, is up: unshare(2)
with CLONE_NEWNET as root, else together with a new user namespace that
maps only our uid and gid. Only the child processes of `namespace_bridge`
call it; `isolation` decides when. `namespace_interfaces` and
`in_private_network` read any process's namespace from /proc.

Framework-free: ctypes, /proc, sockets and ioctls only.
"""

import ctypes
import errno
import fcntl
import os
import socket
import struct

__all__ = ['IsolationError', 'LOOPBACK_INTERFACE', 'enter_private_network',
           'in_private_network', 'namespace_interfaces']

LOOPBACK_INTERFACE = 'lo'

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ_SIZE = 40  # struct ifreq: 16-byte name, then a 24-byte union.


class IsolationError(OSError):
  """The process could not enter a private network namespace."""


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
  Only the bridge of `isolation.private_network_server` (and its probe) call
  it: no process of the user's is ever moved.

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
