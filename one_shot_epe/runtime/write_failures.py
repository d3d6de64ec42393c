"""A failed write of a run's outputs, as one line: which file, why, what next.

A full disk, a quota, a read-only remount or an I/O error can stop any write
of a run: a checkpoint version saved by `tff.program.FileProgramStateManager`
(TensorFlow raises e.g. `tf.errors.ResourceExhaustedError: .../variables/
...tempstate123; No space left on device [Op:SaveV2]`), the per-round CSVs of
`tff.program.CSVFileReleaseManager` (`tf.io.gfile`), or the project's own
atomic writes (`OSError`, `atomic_io` names the target). Every one of these
writes a temporary name and renames it when complete, so what was written
before stays intact and a rerun of the same command resumes from the last
checkpoint; `WriteFailure` says so.

Only an error that names a path under the output directory is taken for a
failed write: anything else (TensorFlow's out-of-memory
`ResourceExhaustedError`, a bug) keeps its type and traceback.

TensorFlow is not imported here: its errors can only come from a program that
loaded it, and the JAX engine's programs run where it is not installed.
"""

import contextlib
import errno
import os
import re
import sys
from collections.abc import Iterator

__all__ = ['WriteFailure', 'from_error', 'reported']

# Temporary names of TensorFlow's and TFF's writers, per path component:
# TFF's `<name>_temp1234`, TensorFlow's `variables_temp` and
# `<file>.tempstate123`. A failure inside one is reported as a failure to
# write the final name. (`atomic_io` names its target itself.)
_TEMPORARY_SUFFIX = re.compile(r'(_temp\d*|\.tempstate\d+)$')

# The system's error texts (strerror), longest first, to find the cause in a
# TensorFlow message, which ends its file errors with one ("...; No space
# left on device").
_ERROR_TEXTS = sorted({os.strerror(code) for code in errno.errorcode},
                      key=len, reverse=True)


class WriteFailure(Exception):
  """Writing `path` failed because of `cause`; earlier outputs are intact."""

  def __init__(self, path: str, cause: str):
    """Builds the one-line message.

    Args:
      path: the final file or directory whose write failed.
      cause: the system's reason (e.g. 'No space left on device').
    """
    self.path = path
    self.cause = cause
    super().__init__(
        f'cannot write {path!r}: {cause}. Everything written before is '
        'intact; once the cause is fixed, rerun the same command to resume')


def _final_name(path: str, directory: str) -> str:
  """`path` up to its first temporary component, which gets its final name."""
  parts = os.path.relpath(path, directory).split(os.sep)
  named = []
  for part in parts:
    final = _TEMPORARY_SUFFIX.sub('', part)
    if final != part:
      named.append(final)
      break
    named.append(part)
  return os.path.normpath(os.path.join(directory, *named))


def _inside(path: str, directory: str) -> bool:
  """Whether `path` is `directory` or lies under it (both made absolute)."""
  path, directory = os.path.abspath(path), os.path.abspath(directory)
  return os.path.commonpath([path, directory]) == directory


def _paths_in_message(message: str, directory: str) -> list[str]:
  """Paths under `directory` quoted in a TensorFlow error message."""
  found = []
  for prefix in dict.fromkeys([os.path.abspath(directory),
                               os.path.normpath(directory)]):
    # A whole path: not the tail of a longer one, nor a sibling's prefix.
    pattern = (r'(?<![^\s\'"])' + re.escape(prefix) +
               r'(?:/[^\s;\'"]*)?(?=[\s;\'"]|$)')
    found += re.findall(pattern, message)
  return found


def _tensorflow_errors() -> tuple[type[BaseException], ...]:
  """`tf.errors.OpError` if this program has loaded TensorFlow, else ()."""
  tf = sys.modules.get('tensorflow')
  errors = getattr(tf, 'errors', None)
  return (errors.OpError,) if errors is not None else ()


def from_error(error: BaseException, directory: str) -> WriteFailure | None:
  """The `WriteFailure` that `error` is, or None if it is not a failed write.

  Args:
    error: An `OSError` (its `filename` or `filename2` must lie under
      `directory`) or a `tf.errors.OpError` (its message must name a path
      under `directory`); anything else is not a failed write.
    directory: The output directory whose writes are reported.

  Returns:
    A `WriteFailure` naming the final file or directory being written (a
    checkpoint version for a failed checkpoint) and the system's reason.
  """
  if isinstance(error, OSError):
    paths = [name for name in (error.filename, error.filename2)
             if isinstance(name, str) and _inside(name, directory)]
    if not paths:
      return None
    return WriteFailure(_final_name(paths[0], directory),
                        error.strerror or str(error))
  tensorflow_errors = _tensorflow_errors()
  if tensorflow_errors and isinstance(error, tensorflow_errors):
    paths = _paths_in_message(error.message, directory)
    if not paths:
      return None
    cause = next((text for text in _ERROR_TEXTS if text in error.message),
                 type(error).__name__)
    return WriteFailure(_final_name(paths[0], directory), cause)
  return None


@contextlib.contextmanager
def reported(directory: str) -> Iterator[None]:
  """Turns a failed write under `directory` into `WriteFailure`.

  Other errors pass through unchanged.

  Args:
    directory: the output directory whose writes are reported.

  Yields:
    None; the body of the `with` block runs here.

  Raises:
    TypeError: `directory` is not a string.
    ValueError: `directory` is empty.
  """
  if not isinstance(directory, str):
    raise TypeError(f'directory must be a str; got {type(directory).__name__}')
  if not directory:
    raise ValueError('directory must be a non-empty path; got an empty string')
  try:
    yield
  except (OSError, *_tensorflow_errors()) as error:
    failure = from_error(error, directory)
    if failure is None:
      raise
    raise failure from None
