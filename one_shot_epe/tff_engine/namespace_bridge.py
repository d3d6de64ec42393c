"""The child processes that enter a private network namespace (the bridges).

`isolation.private_network_server` and `isolation.private_network_refusal`
start a fresh, single-threaded interpreter that runs one of these, so that
the caller's own namespace, threads and signals never change:

* `bridge_main` enters a loopback-only namespace
  (`network_namespace.enter_private_network`), starts the server there on
  127.0.0.1:<port>, dies with it, and forwards every connection made to a
  Unix-domain socket (in a directory of its own, private to the user) to
  that port until its stdin closes; then it stops the server (SIGINT,
  SIGKILL after the shutdown timeout) and removes its socket. It reports
  one status line on an inherited pipe: 'ready <socket path>', 'refused
  <why>' or 'exit status <n>'.
* `probe_main` only tries to enter a namespace: exit status 0 if it could.

Framework-free: sockets, selectors, threads and prctl only.
"""

import contextlib
import ctypes
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from one_shot_epe.tff_engine import network_namespace

__all__ = ['bridge_main', 'probe_main']

_PR_SET_PDEATHSIG = 1
_LOOPBACK_HOST = '127.0.0.1'
_POLL_S = 0.05
_BRIDGE_BUFFER_BYTES = 1 << 20


def probe_main(argv: Sequence[str]) -> None:
  """`isolation.private_network_refusal`'s child: exit 0 iff one was entered.

  Args:
    argv: Unused (the child's argv after the package root).

  Raises:
    SystemExit: status 1, after printing why, if no namespace was entered.
  """
  del argv  # Unused.
  try:
    network_namespace.enter_private_network()
  except network_namespace.IsolationError as error:
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


def bridge_main(argv: Sequence[str]) -> None:
  """The bridge of `isolation.private_network_server` (argv after the root).

  Args:
    argv: The temporary directory's root, the status pipe's descriptor, the
      shutdown timeout in seconds, then the server's command (without the
      port flag).

  Raises:
    SystemExit: status 3 if no namespace could be entered, 4 if the server
      exited before it listened (after the status line says so).
  """
  temp_root, ready_fd, shutdown_timeout_s = argv[0], int(argv[1]), float(
      argv[2])
  command = list(argv[3:])
  with os.fdopen(ready_fd, 'w') as ready:
    try:
      network_namespace.enter_private_network()
    except network_namespace.IsolationError as error:
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
