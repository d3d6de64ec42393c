"""Which TCP sockets a process listens on, and which other hosts can reach.

Where the host grants no private network namespace, `isolation` lets a
local TFF worker start in the caller's namespace and reports, once it
listens, its exact exposure (`warn_if_exposed`). The sockets are read from
/proc/<pid>/net, in the network namespace of the process itself
(`listening_addresses`); a socket is exposed unless it is bound to loopback
or its namespace has no interface but loopback (`exposed_listeners`).

Framework-free: /proc and sockets only.
"""

import os
import socket

from absl import logging

from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import network_namespace

__all__ = ['exposed_listeners', 'listening_addresses', 'warn_if_exposed']

_TCP_LISTEN = '0A'  # Socket state in /proc/<pid>/net/tcp{,6}.


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
  if network_namespace.in_private_network(pid):
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
        'without.', what, pid, ', '.join(exposed), isolation.ISOLATION_ENV,
        isolation.ISOLATION_ENV)
  return exposed
