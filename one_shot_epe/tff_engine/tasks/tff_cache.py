"""The local `--data_dir` cache that TFF's dataset loaders read, without downloads.

TFF's loaders (`tff.simulation.datasets.emnist.load_data`,
`tff.simulation.datasets.stackoverflow.load_data`) call
`tff.simulation.datasets.download.get_compressed_file`, which returns
`<cache_dir>/<name>.sqlite` when that file exists and otherwise downloads
`<name>.sqlite.lzma` from Google Cloud Storage. The experiments of the paper
(Section 5) must run offline, so this module checks that the expected SQLite file is
present and has the layout TFF's `SqlClientData` reads *before* a loader is called,
and `no_download()` makes the download function raise for the duration of the call.

Layout of a data directory (the file names TFF's loaders look for):

  <data_dir>/emnist_all.sqlite         EMNIST-62, splits `all_train`, `all_test`
  <data_dir>/stackoverflow.sqlite      StackOverflow, splits `train`, `heldout`,
                                       `test`
  <data_dir>/stackoverflow.word_count  "word count" lines, most frequent first
      (or the same file under <data_dir>/datasets/, where TFF's own
      `load_word_counts` extracts it, or the downloaded
      `stackoverflow.word_count.tar.bz2` archive in either place)

Each SQLite file holds the two tables `SqlClientData` requires:
`examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)` with one
serialized `tf.train.Example` per row, and
`client_metadata(client_id TEXT, split_name TEXT, num_examples INTEGER)` with one
row per client and split. `write_sqlite` and `write_word_counts` produce this layout
(used by tests and to export synthetic data).
"""

from collections.abc import Iterator, Mapping, Sequence
import contextlib
import dataclasses
import io
import os
import sqlite3
import tarfile

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.datasets import download

from one_shot_epe.runtime import bounded_reads

__all__ = ['CachedDataset', 'EMNIST', 'STACKOVERFLOW', 'WORD_COUNT_ARCHIVE',
           'WORD_COUNT_FILE', 'client_data_to_examples', 'no_download',
           'read_word_counts', 'verify_sqlite', 'write_sqlite',
           'write_word_counts']

_SQLITE_HEADER = b'SQLite format 3\x00'
# The columns TFF's `SqlClientData` reads (it documents, but never reads,
# `client_metadata.num_examples`, so a file without it is still accepted).
_REQUIRED_COLUMNS = {
    'examples': ('split_name', 'client_id', 'serialized_example_proto'),
    'client_metadata': ('client_id', 'split_name'),
}
_CREATE_TABLES = (
    'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
    'serialized_example_proto BLOB NOT NULL);',
    'CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
    'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL);',
    'CREATE INDEX examples_client_split ON examples (client_id, split_name);',
)

WORD_COUNT_FILE = 'stackoverflow.word_count'
WORD_COUNT_ARCHIVE = WORD_COUNT_FILE + '.tar.bz2'
# Where TFF's `load_word_counts(cache_dir=...)` keeps the file (Keras' `get_file`
# default `cache_subdir`).
_KERAS_SUBDIR = 'datasets'


@dataclasses.dataclass(frozen=True)
class CachedDataset:
  """What TFF expects of one cached SQLite dataset.

  Attributes:
    file_name: the uncompressed file name `get_compressed_file` looks for.
    splits: the `split_name` values our tasks read.
    features: feature name -> (tf.train.Feature kind, number of values), the
      serialized `tf.train.Example` layout TFF's `_add_proto_parsing` parses.
  """
  file_name: str
  splits: tuple[str, ...]
  features: Mapping[str, tuple[str, int]]


EMNIST = CachedDataset(
    file_name='emnist_all.sqlite',
    splits=('all_train', 'all_test'),
    features={'pixels': ('float_list', 28 * 28), 'label': ('int64_list', 1)},
)
STACKOVERFLOW = CachedDataset(
    file_name='stackoverflow.sqlite',
    splits=('train', 'heldout', 'test'),
    features={
        name: ('int64_list', 1) if name == 'score' else ('bytes_list', 1)
        for name in ('creation_date', 'score', 'tags', 'title', 'tokens', 'type')
    },
)


def _malformed(path: str, why: str) -> ValueError:
  return ValueError(
      f'--data_dir: {path} is not a usable TFF SQLite dataset file: {why}. '
      'Point --data_dir at a directory holding the decompressed files TFF '
      'downloads (emnist_all.sqlite; stackoverflow.sqlite and '
      'stackoverflow.word_count), or pass --use_synthetic_data.')


def _require_dir(data_dir: str | None) -> str:
  if not data_dir:
    raise ValueError(
        '--data_dir must name a directory holding TFF\'s cached dataset files '
        'when --use_synthetic_data is not set; got '
        f'{data_dir!r}.')
  if not os.path.isdir(data_dir):
    raise FileNotFoundError(
        f'--data_dir {data_dir!r} is not an existing directory.')
  return os.path.abspath(data_dir)


def verify_sqlite(data_dir: str | None, dataset: CachedDataset) -> str:
  """Checks `<data_dir>/<dataset.file_name>` before TFF touches it.

  Verifies the SQLite header, the tables and columns `SqlClientData` reads, that
  every split in `dataset.splits` has at least one client, and that the first
  stored example has the features TFF's parser expects. Only reads.

  Args:
    data_dir: the directory given as `--data_dir`.
    dataset: `EMNIST` or `STACKOVERFLOW`.

  Returns:
    The absolute directory to pass to TFF's loader as `cache_dir`.

  Raises:
    FileNotFoundError: `data_dir` or the file is missing.
    bounded_reads.InputRefused: the file is not a regular file or is larger
      than `bounded_reads.TFF_SQLITE`.
    ValueError: the file is not a SQLite database in TFF's layout.
  """
  data_dir = _require_dir(data_dir)
  path = os.path.join(data_dir, dataset.file_name)
  if not os.path.isfile(path):
    hint = ''
    if os.path.isfile(path + '.lzma'):
      hint = (f' {dataset.file_name}.lzma is there: decompress it first '
              f'(e.g. `unlzma -k {path}.lzma`).')
    raise FileNotFoundError(
        f'--data_dir {data_dir!r} does not contain {dataset.file_name}, the '
        'file TFF\'s loader reads (it would otherwise download it; this project '
        f'never downloads).{hint} Files present: {sorted(os.listdir(data_dir))}.')
  bounded_reads.check_file(path, bounded_reads.TFF_SQLITE, '--data_dir')
  with open(path, 'rb') as f:
    if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
      raise _malformed(path, 'no SQLite header')
  try:
    # Read-only URI so that nothing is ever created or modified.
    with contextlib.closing(
        sqlite3.connect(f'file:{path}?mode=ro', uri=True)) as connection:
      _verify_tables(connection, path, dataset)
  except sqlite3.DatabaseError as e:
    raise _malformed(path, f'SQLite error "{e}"') from e
  return data_dir


def _verify_tables(connection: sqlite3.Connection, path: str,
                   dataset: CachedDataset) -> None:
  """Checks the schema, the splits and the first example of an open database."""
  for table, columns in _REQUIRED_COLUMNS.items():
    present = {row[1] for row in connection.execute(f'PRAGMA table_info({table})')}
    missing = [c for c in columns if c not in present]
    if missing:
      raise _malformed(path, f'table `{table}` lacks columns {missing}')
  splits = {
      row[0] for row in connection.execute(
          'SELECT DISTINCT split_name FROM client_metadata')
  }
  missing_splits = [s for s in dataset.splits if s not in splits]
  if missing_splits:
    raise _malformed(
        path, f'no clients in splits {missing_splits} '
        f'(found splits {sorted(splits)})')
  row = connection.execute(
      'SELECT serialized_example_proto FROM examples LIMIT 1').fetchone()
  if row is None:
    raise _malformed(path, 'table `examples` is empty')
  try:
    example = tf.train.Example.FromString(row[0])
  except Exception as e:  # protobuf raises its own DecodeError
    raise _malformed(path, 'first example is not a tf.train.Example') from e
  for name, (kind, length) in dataset.features.items():
    feature = example.features.feature.get(name)
    if feature is None or feature.WhichOneof('kind') != kind:
      raise _malformed(path, f'examples lack the {kind} feature {name!r}')
    found = len(getattr(feature, kind).value)
    if found != length:
      raise _malformed(
          path, f'feature {name!r} has {found} values, expected {length}')


def read_word_counts(data_dir: str | None, vocab_size: int) -> list[str]:
  """Returns the `vocab_size` most frequent StackOverflow words from `data_dir`.

  Reads the file TFF's StackOverflow `load_word_counts` reads (one "word
  count" line per word, most frequent first) directly: TFF's function goes
  through `tf.keras.utils.get_file`, which downloads again whenever the local
  archive's SHA-256 differs from the published one, so it cannot be made
  offline.

  Args:
    data_dir: The data directory (--data_dir).
    vocab_size: The number of words to read.

  Returns:
    The words, most frequent first.

  Raises:
    FileNotFoundError: no word-count file or archive in `data_dir`.
    bounded_reads.InputRefused: it is not a regular file or is larger than
      `bounded_reads.WORD_COUNTS`.
    ValueError: malformed lines or fewer than `vocab_size` words.
  """
  data_dir = _require_dir(data_dir)
  candidates = [
      os.path.join(data_dir, sub, name)
      for name in (WORD_COUNT_FILE, WORD_COUNT_ARCHIVE)
      for sub in ('', _KERAS_SUBDIR)
  ]
  path = next((p for p in candidates if os.path.isfile(p)), None)
  if path is None:
    raise FileNotFoundError(
        f'--data_dir {data_dir!r} contains no StackOverflow vocabulary: expected '
        f'{WORD_COUNT_FILE} (or {WORD_COUNT_ARCHIVE}) in it or in its '
        f'{_KERAS_SUBDIR}/ subdirectory.')
  bounded_reads.check_file(path, bounded_reads.WORD_COUNTS, '--data_dir')
  words = []
  try:
    for number, line in enumerate(_word_count_lines(path), start=1):
      if len(words) == vocab_size:
        break
      fields = line.split()
      if len(fields) != 2 or not fields[1].isdigit():
        raise ValueError(
            f'--data_dir: line {number} of {path} is not "word count": '
            f'{line!r}')
      words.append(fields[0])
  except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as e:
    raise ValueError(f'--data_dir: cannot read vocabulary {path}: {e}') from e
  if len(words) < vocab_size:
    raise ValueError(
        f'--data_dir: {path} lists {len(words)} words, fewer than the vocabulary '
        f'size {vocab_size}.')
  return words


def _word_count_lines(path: str) -> Iterator[str]:
  """Yields the lines of a word-count file or of its member in the archive."""
  if not path.endswith('.tar.bz2'):
    with open(path, encoding='utf-8') as f:
      yield from f
    return
  with tarfile.open(path, 'r:bz2') as archive:
    for member in archive:
      if member.isfile() and os.path.basename(member.name) == WORD_COUNT_FILE:
        yield from io.TextIOWrapper(archive.extractfile(member), encoding='utf-8')
        return
  raise ValueError(f'--data_dir: archive {path} has no member {WORD_COUNT_FILE}')


def _refuse_download(origin: str, filename: str) -> None:
  raise RuntimeError(
      f'Refusing to download {origin} to {filename}: this project never '
      'downloads datasets; check --data_dir.')


@contextlib.contextmanager
def no_download() -> Iterator[None]:
  """Makes TFF's SQLite download function raise while the context is open.

  `get_compressed_file` downloads only through `download._fetch_lzma_file`, which
  it looks up at call time, so replacing that attribute closes the download path
  even if a verified file disappears before TFF opens it.

  Yields:
    None, while downloads are closed.
  """
  original = download._fetch_lzma_file  # pylint: disable=protected-access
  download._fetch_lzma_file = _refuse_download  # pylint: disable=protected-access
  try:
    yield
  finally:
    download._fetch_lzma_file = original  # pylint: disable=protected-access


def _to_feature(value: np.ndarray) -> tf.train.Feature:
  """Encodes one tensor value the way TFF's cached datasets store it."""
  flat = np.asarray(value).reshape(-1)
  if flat.dtype.kind in 'SUO':
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[v if isinstance(v, bytes) else str(v).encode() for v in flat]))
  if flat.dtype.kind == 'f':
    return tf.train.Feature(float_list=tf.train.FloatList(value=flat))
  if flat.dtype.kind in 'iub':
    return tf.train.Feature(int64_list=tf.train.Int64List(value=flat))
  raise ValueError(f'unsupported dtype {flat.dtype} for a tf.train.Example')


def write_sqlite(path: str,
                 splits: Mapping[str, Mapping[str, Sequence[Mapping[str, object]]]]
                 ) -> None:
  """Writes a SQLite file in the layout TFF's `SqlClientData` reads.

  Args:
    path: the file to create (must not exist).
    splits: split name -> client id -> list of examples, each a mapping from
      feature name to a numpy-convertible value (bytes/str for string features).

  Raises:
    FileExistsError: `path` exists.
  """
  if os.path.exists(path):
    raise FileExistsError(f'{path} already exists')
  with contextlib.closing(sqlite3.connect(path)) as connection:
    with connection:
      for statement in _CREATE_TABLES:
        connection.execute(statement)
      for split_name, clients in splits.items():
        for client_id, examples in clients.items():
          connection.executemany(
              'INSERT INTO examples VALUES (?, ?, ?)',
              [(split_name, client_id, tf.train.Example(
                  features=tf.train.Features(feature={
                      name: _to_feature(value)
                      for name, value in example.items()
                  })).SerializeToString()) for example in examples])
          connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                             (client_id, split_name, len(examples)))


def write_word_counts(path: str, word_counts: Mapping[str, int]) -> None:
  """Writes `word_counts` (most frequent first) as TFF's word-count file.

  Args:
    path: The file to write.
    word_counts: Word -> count, in the file's order.
  """
  with open(path, 'w', encoding='utf-8') as f:
    for word, count in word_counts.items():
      f.write(f'{word} {count}\n')


def client_data_to_examples(
    client_data: tff.simulation.datasets.ClientData
) -> dict[str, list[dict[str, np.ndarray]]]:
  """Materialises every client of a `ClientData` as a list of numpy examples.

  Args:
    client_data: Federated data.

  Returns:
    Client id -> its examples, each feature name -> numpy value.
  """
  return {
      client_id: [{name: value.numpy() for name, value in element.items()}
                  for element in client_data.create_tf_dataset_for_client(client_id)]
      for client_id in client_data.client_ids
  }
