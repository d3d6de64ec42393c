"""Atomic file writes: a reader sees the old file or the complete new one.

Results, reports and cosine CSVs are written to a temporary file in the target's
directory, flushed to disk, and renamed over the target with `os.replace`, which
is atomic on POSIX file systems. A crash mid-write leaves at most a stray
temporary file (named `.tmp-*`), never a truncated result;
`remove_temporaries` deletes such leftovers when the directory is next used.
A file that only needs to survive the process being killed, not the machine
losing power (a progress mark rewritten every round), may skip the flush to
disk (`durable=False`): the rename is as atomic, and much cheaper.
"""

import csv
import io
import os
import tempfile
from collections.abc import Mapping, Sequence

__all__ = ['TEMPORARY_PREFIX', 'remove_temporaries', 'write_bytes',
           'write_columns_csv', 'write_text']

TEMPORARY_PREFIX = '.tmp-'


def write_text(path: str, text: str, durable: bool = True) -> None:
  """Writes `text` (UTF-8) to `path` atomically.

  Args:
    path: the target file; its directory must exist.
    text: the whole new content.
    durable: as for `write_bytes`.

  Raises:
    OSError: the write failed (as `write_bytes`); the old file is untouched.
  """
  write_bytes(path, text.encode('utf-8'), durable)


def write_bytes(path: str, data: bytes, durable: bool = True) -> None:
  """Writes `data` to `path` atomically, syncing it before the rename.

  Args:
    path: the target file; its directory must exist and receives the
      temporary file.
    data: the whole new content.
    durable: sync the data to disk before the rename (False: the rename is
      atomic for other processes and survives this one being killed, but a
      machine that loses power may keep an empty file).

  Raises:
    OSError: the write failed (a full disk, an I/O error, ...). Its
      `filename` is `path`, whatever step failed, and the old file at `path`
      (if any) is untouched; the temporary file is removed.
  """
  directory = os.path.dirname(os.path.abspath(path))
  try:
    handle, temporary = tempfile.mkstemp(
        dir=directory, prefix=TEMPORARY_PREFIX, suffix=os.path.basename(path))
  except OSError as error:
    raise _naming(error, path) from None
  try:
    with os.fdopen(handle, 'wb') as stream:
      stream.write(data)
      stream.flush()
      if durable:
        os.fsync(stream.fileno())
    os.chmod(temporary, 0o644)  # mkstemp creates files readable by us only.
    os.replace(temporary, path)
  except BaseException as error:
    if os.path.exists(temporary):
      os.unlink(temporary)
    if isinstance(error, OSError):
      raise _naming(error, path) from None
    raise


def _naming(error: OSError, path: str) -> OSError:
  """`error` (same errno, hence same OSError subclass) with `path` as filename.

  A failed `write` or `fsync` carries no file name, and a failed rename names
  the temporary file; callers report the target instead.
  """
  return OSError(error.errno, error.strerror or str(error), path)


def remove_temporaries(directory: str) -> list[str]:
  """Deletes the temporary files of interrupted writes in `directory`.

  Only call it while no write to `directory` is in progress.

  Args:
    directory: the folder to clean; a missing folder is left alone.

  Returns:
    The names (not paths) of the files removed, sorted; empty if none.
  """
  if not os.path.isdir(directory):
    return []
  removed = []
  for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if name.startswith(TEMPORARY_PREFIX) and os.path.isfile(path):
      os.unlink(path)
      removed.append(name)
  return removed


def write_columns_csv(path: str, columns: Mapping[str, Sequence[float]]) -> None:
  """Writes named columns (possibly of different lengths) as CSV, atomically.

  Shorter columns leave their trailing cells empty, the format read by
  `python -m one_shot_epe.reporting.epsilon_cli`. Floats keep full precision (repr).

  Args:
    path: the target CSV file.
    columns: column name -> its values, in column order; the header row is
      the names.

  Raises:
    OSError: the write failed (as `write_bytes`); the old file is untouched.
  """
  names = list(columns)
  length = max((len(values) for values in columns.values()), default=0)
  buffer = io.StringIO()
  writer = csv.writer(buffer, lineterminator='\n')
  writer.writerow(names)
  for row in range(length):
    writer.writerow([
        repr(float(columns[name][row])) if row < len(columns[name]) else ''
        for name in names
    ])
  write_text(path, buffer.getvalue())
