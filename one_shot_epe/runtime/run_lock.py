"""One writer per run directory: an exclusive OS lock held for the run's life.

Two launchers given the same run directory would both write its checkpoints
and results, and the checkpoint sequence would mix both processes. Each
launcher therefore takes this lock before it writes anything into the
directory and keeps it until it ends; a second launcher is refused with
`RunLockedError`, which names the directory and the holder's pid.

The lock is `flock(2)` (exclusive, non-blocking) on `LOCK_FILE` inside the
directory. The kernel releases it when the holder's descriptor is closed,
including when the process is killed, so a stale lock file never blocks a
rerun. The file holds the holder's pid only as information for a refused
launcher (it is emptied on a clean release). The file is never deleted:
unlinking a locked file would let two processes lock two different files of
the same name. The descriptor is not inherited by child processes
(close-on-exec), so a TFF worker started by the launcher cannot keep the
lock alive after the launcher dies.
"""

import errno
import fcntl
import os
import time

__all__ = ['LOCK_FILE', 'RunLock', 'RunLockedError', 'acquire']

LOCK_FILE = '.run.lock'

# A launcher that has just taken the lock writes its pid right after; a
# refused launcher waits this long for the pid to appear.
_PID_WAIT_SECONDS = 1.0


class RunLockedError(RuntimeError):
  """The run directory is locked by another process; names it and its pid."""

  def __init__(self, directory: str, pid: int | None):
    """Builds the message naming `directory` and its holder.

    Args:
      directory: the locked run directory.
      pid: the holder's process id, or None if it has not written it yet.
    """
    self.directory = directory
    self.pid = pid
    holder = f'process {pid}' if pid is not None else 'another process'
    super().__init__(
        f'run directory {directory!r} is in use by {holder} (lock file '
        f'{os.path.join(directory, LOCK_FILE)!r}); wait for it to end, or '
        'stop it: rerunning the same command then resumes the run')


class RunLock:
  """A held run-directory lock; `release` (or leaving a `with`) frees it."""

  def __init__(self, directory: str, descriptor: int):
    """Wraps a lock `acquire` has taken; not for direct use.

    Args:
      directory: the locked run directory.
      descriptor: the open, flock-ed descriptor of its lock file; `release`
        closes it.
    """
    self.directory = directory
    self._descriptor: int | None = descriptor

  def release(self) -> None:
    """Empties the pid text and releases the lock (idempotent)."""
    if self._descriptor is None:
      return
    descriptor, self._descriptor = self._descriptor, None
    try:
      os.ftruncate(descriptor, 0)
    finally:
      os.close(descriptor)  # Closing releases the flock.

  def __enter__(self) -> 'RunLock':
    return self

  def __exit__(self, *exc_info) -> None:
    self.release()


def _read_pid(path: str) -> int | None:
  """The pid written in the lock file, or None while it is empty."""
  try:
    with open(path, encoding='ascii') as stream:
      text = stream.read().strip()
  except (OSError, UnicodeDecodeError):
    return None
  return int(text) if text.isdigit() else None


def acquire(directory: str) -> RunLock:
  """Creates `directory` if needed and locks it for this process.

  Args:
    directory: the run directory (created with its parents if missing).

  Returns:
    The held lock; the holder's pid (this process) is written in the file.

  Raises:
    TypeError: `directory` is not a string.
    ValueError: `directory` is empty.
    RunLockedError: another process holds the lock.
    OSError: the directory or its lock file cannot be created or written
      (`filename` names it).
  """
  if not isinstance(directory, str):
    raise TypeError(f'directory must be a str; got {type(directory).__name__}')
  if not directory:
    raise ValueError('directory must be a non-empty path; got an empty string')
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, LOCK_FILE)
  descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
  try:
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as error:
    os.close(descriptor)
    if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
      raise OSError(error.errno, error.strerror, path) from None
    deadline = time.monotonic() + _PID_WAIT_SECONDS
    pid = _read_pid(path)
    while pid is None and time.monotonic() < deadline:
      time.sleep(0.02)
      pid = _read_pid(path)
    raise RunLockedError(directory, pid) from None
  lock = RunLock(directory, descriptor)
  try:
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f'{os.getpid()}\n'.encode('ascii'), 0)
  except OSError as error:
    lock.release()
    raise OSError(error.errno, error.strerror, path) from None
  return lock
