"""Keeps TFF's local executors unreachable from other hosts (Linux netns).

TFF 0.87's C++ `worker_binary` has no flag for its bind address: it serves an
unauthenticated gRPC executor service, which runs any TensorFlow graph it is
sent, on `[::]:<port>`, every interface of its network namespace, for the
whole run. Both the default local context (`runtime.local_cpp_context`) and
each `--tff_workers` worker (`tff_workers.local_workers`) start one.

So each such worker runs alone in a network namespace of its own whose only
interface is loopback, and nothing else changes: `private_network_server`
starts a child interpreter (the bridge, `namespace_bridge.bridge_main`) that
enters a new namespace (`network_namespace.enter_private_network`:
unshare(CLONE_NEWNET) as root, else together with a new user namespace
mapping only our uid and gid), starts the worker there on 127.0.0.1:<port>
and forwards the connections made to a Unix-domain socket to it. The socket
is a file in a temporary directory private to the user (the bridge's own,
removed when it ends), reachable from the caller's namespace (gRPC target
`unix:<path>`). Other hosts, and other network namespaces of this host,
cannot reach the worker at all; the calling process (a launcher or a user's
script) keeps its own namespace, threads, signal handlers and environment,
and importing any module of this package changes none of them. Programs that
use remote workers (`--tff_worker_addresses`) start none: those workers are
reached through the README's SSH tunnels.

Where the host allows no namespace (neither CAP_SYS_ADMIN nor unprivileged
user namespaces, e.g. a default Docker container), the worker starts in the
caller's namespace as TFF would start it, and is reported, once it listens,
with its exact exposure (`exposure.warn_if_exposed`). Refusing instead would
make the project unusable in such containers, whose network is usually
private already. ONE_SHOT_EPE_NETWORK_ISOLATION (`isolation_mode`) decides:
'auto' (default) as just said; 'require' raises
`network_namespace.IsolationError` naming the variable before any worker
starts (programs exit with status 2 at start, `check_program`); 'off' starts
workers in the caller's namespace (to reach one from outside while
debugging).

This module holds the mode and the caller's side; `network_namespace`
enters and reads namespaces, `namespace_bridge` is the bridge's (and the
probe's) child process, `exposure` reads what a process listens on.
"""

import contextlib
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from absl import flags

from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine import network_namespace

__all__ = ['ISOLATION_ENV', 'ISOLATION_MODES', 'IsolatedServer',
           'check_program', 'isolation_mode', 'private_network_refusal',
           'private_network_server', 'remote_workers_requested']

ISOLATION_ENV = 'ONE_SHOT_EPE_NETWORK_ISOLATION'
ISOLATION_MODES = ('auto', 'require', 'off')

_BRIDGE_GRACE_S = 5.0  # Beyond the server's shutdown timeout.
# The directory holding the package, so that a child interpreter imports the
# very code of this process however it found it.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# A child interpreter running `namespace_bridge.<function>(argv after the
# root)`.
_CHILD = ('import sys; sys.path.insert(0, sys.argv[1]); '
          'from one_shot_epe.tff_engine import namespace_bridge; '
          'namespace_bridge.{}(sys.argv[2:])')


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
      [sys.executable, '-c', _CHILD.format('probe_main'), _PACKAGE_ROOT],
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
  """A server of `private_network_server`: its bridge and its socket.

  Attributes:
    bridge: The bridge process (the server is its child).
    socket_path: The Unix-domain socket the bridge forwards to the server.
  """
  bridge: subprocess.Popen
  socket_path: str


@contextlib.contextmanager
def private_network_server(
    command: Sequence[str], *, stdout: Any = None, stderr: Any = None,
    env: Mapping[str, str] | None = None, startup_timeout_s: float = 60.0,
    shutdown_timeout_s: float = 10.0) -> Iterator[IsolatedServer]:
  """Runs a TCP server alone in a loopback-only namespace, reached by a socket.

  A child interpreter (the bridge, `namespace_bridge.bridge_main`) enters a
  new network namespace whose only interface is loopback
  (`network_namespace.enter_private_network`), starts `command` plus
  `--port=<port>` there, waits for it to accept on 127.0.0.1:<port>, and then
  forwards every connection made to its Unix-domain socket to that port. The
  socket is a file in a directory of its own, private to the user, under
  `tempfile.gettempdir()` (reachable from any network namespace; gRPC's
  `unix:<path>` target); the bridge removes both when it ends. Nothing
  listens in the caller's namespace, and the caller's namespace, threads and
  signals stay as they are.

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
    network_namespace.IsolationError: the host grants no network namespace
      (nothing started).
    RuntimeError: the server exited at start.
    TimeoutError: it did not listen within `startup_timeout_s`.
  """
  deadline = time.monotonic() + startup_timeout_s
  ready_read, ready_write = os.pipe()
  try:
    bridge = subprocess.Popen(
        [sys.executable, '-c', _CHILD.format('bridge_main'), _PACKAGE_ROOT,
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
      raise network_namespace.IsolationError(status[len('refused '):])
    if not status.startswith('ready '):
      raise RuntimeError(f'{os.path.basename(command[0])} exited at start in '
                         f'its network namespace ({status or "no status"}).')
    yield IsolatedServer(bridge, status[len('ready '):])
  finally:
    _stop_bridge(bridge, shutdown_timeout_s)

