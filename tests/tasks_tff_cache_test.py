"""Tests of one_shot_epe.tff_engine.tasks.tff_cache: data_dir checks, no downloads, writers."""

import collections
import io
import os
import sqlite3
import tarfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.datasets import download

from one_shot_epe.tff_engine.tasks import tff_cache


def _emnist_example(label: int, num_pixels: int = 784) -> dict[str, np.ndarray]:
  return {'pixels': np.full(num_pixels, 0.5, np.float32), 'label': np.int64(label)}


def _write_emnist(path, splits=('all_train', 'all_test'), num_pixels=784):
  tff_cache.write_sqlite(path, {
      split: {'c1': [_emnist_example(1, num_pixels), _emnist_example(2, num_pixels)]}
      for split in splits
  })


def test_verify_accepts_well_formed_file_and_returns_absolute_dir(tmp_path,
                                                                 network_calls):
  _write_emnist(str(tmp_path / 'emnist_all.sqlite'))
  relative = os.path.relpath(tmp_path)
  assert tff_cache.verify_sqlite(relative, tff_cache.EMNIST) == str(tmp_path)
  assert not network_calls


@pytest.mark.parametrize('data_dir', [None, ''])
def test_verify_requires_a_data_dir(data_dir):
  with pytest.raises(ValueError, match='--data_dir'):
    tff_cache.verify_sqlite(data_dir, tff_cache.EMNIST)


def test_verify_missing_dir(tmp_path, network_calls):
  with pytest.raises(FileNotFoundError, match='--data_dir.*not an existing'):
    tff_cache.verify_sqlite(str(tmp_path / 'absent'), tff_cache.EMNIST)
  assert not network_calls


def test_verify_empty_dir_names_expected_file(tmp_path, network_calls):
  with pytest.raises(FileNotFoundError,
                     match='--data_dir.*does not contain emnist_all.sqlite'):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  with pytest.raises(FileNotFoundError, match='stackoverflow.sqlite'):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.STACKOVERFLOW)
  assert not network_calls
  assert os.listdir(tmp_path) == []  # nothing created


def test_verify_wrong_file_name_lists_present_files(tmp_path, network_calls):
  _write_emnist(str(tmp_path / 'emnist.sqlite'))
  with pytest.raises(FileNotFoundError,
                     match=r"emnist_all.sqlite.*\['emnist.sqlite'\]"):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  assert not network_calls


def test_verify_compressed_file_only_hints_decompression(tmp_path, network_calls):
  (tmp_path / 'emnist_all.sqlite.lzma').write_bytes(b'\x5d\x00\x00')
  with pytest.raises(FileNotFoundError, match='decompress'):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  assert not network_calls


def test_verify_corrupt_files(tmp_path, network_calls):
  path = tmp_path / 'emnist_all.sqlite'
  path.write_bytes(np.random.default_rng(0).bytes(4096))
  with pytest.raises(ValueError, match='--data_dir.*no SQLite header'):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  # A valid header followed by garbage: SQLite itself rejects it.
  path.write_bytes(b'SQLite format 3\x00' + np.random.default_rng(1).bytes(4096))
  with pytest.raises(ValueError, match='--data_dir.*SQLite error'):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  assert not network_calls


def test_verify_missing_table_split_or_feature(tmp_path, network_calls):
  path = str(tmp_path / 'emnist_all.sqlite')
  with sqlite3.connect(path) as connection:
    connection.execute('CREATE TABLE examples (client_id TEXT, '
                       'serialized_example_proto BLOB)')
  with pytest.raises(ValueError, match=r"examples.*lacks columns \['split_name'\]"):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  os.remove(path)
  _write_emnist(path, splits=('digits_only_train', 'all_test'))
  with pytest.raises(ValueError, match=r"splits \['all_train'\]"):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  os.remove(path)
  _write_emnist(path, num_pixels=10)
  with pytest.raises(ValueError, match="'pixels' has 10 values, expected 784"):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.EMNIST)
  with pytest.raises(ValueError, match="bytes_list feature 'creation_date'"):
    tff_cache.verify_sqlite(str(tmp_path), tff_cache.CachedDataset(
        'emnist_all.sqlite', ('all_train',), tff_cache.STACKOVERFLOW.features))
  assert not network_calls


def test_no_download_blocks_tff_download_and_restores(tmp_path, network_calls):
  # The recording stand-in installed by the fixture.
  guarded = download._fetch_lzma_file  # pylint: disable=protected-access
  with tff_cache.no_download():
    with pytest.raises(RuntimeError, match='Refusing to download'):
      tff.simulation.datasets.emnist.load_data(only_digits=False,
                                               cache_dir=str(tmp_path))
  assert download._fetch_lzma_file is guarded  # pylint: disable=protected-access
  assert not network_calls


def test_written_schema_equals_tffs_own_writer(tmp_path):
  data = tff.simulation.datasets.TestClientData({
      'a': collections.OrderedDict(label=np.array([1, 2], np.int32)),
  })
  tff_path = str(tmp_path / 'tff.sqlite')
  tff.simulation.datasets.save_to_sql_client_data(
      ['a'], data.create_tf_dataset_for_client, tff_path)
  ours = str(tmp_path / 'ours.sqlite')
  tff_cache.write_sqlite(ours, {'default_split': {'a': [{'label': 1}, {'label': 2}]}})

  def dump(path):
    with sqlite3.connect(path) as connection:
      return ({t: list(connection.execute(f'PRAGMA table_info({t})'))
               for t in ('examples', 'client_metadata')},
              list(connection.execute('SELECT * FROM examples')),
              list(connection.execute('SELECT * FROM client_metadata')))

  assert dump(ours) == dump(tff_path)
  with pytest.raises(FileExistsError):
    tff_cache.write_sqlite(ours, {})


def test_write_sqlite_round_trips_through_tff_reader(tmp_path):
  rng = np.random.default_rng(3)
  written = {'x': [{'pixels': rng.random((28, 28), np.float32), 'label': 61}],
             'y': [{'pixels': rng.random((28, 28), np.float32), 'label': 0},
                   {'pixels': rng.random((28, 28), np.float32), 'label': 9}]}
  path = str(tmp_path / 'emnist_all.sqlite')
  tff_cache.write_sqlite(path, {'all_train': written})
  loaded = tff.simulation.datasets.load_and_parse_sql_client_data(
      path,
      collections.OrderedDict(label=tf.TensorSpec([], tf.int32),
                              pixels=tf.TensorSpec([28, 28], tf.float32)),
      split_name='all_train')
  assert loaded.client_ids == ['x', 'y']
  for client_id, examples in written.items():
    got = list(loaded.create_tf_dataset_for_client(client_id))
    assert [int(e['label']) for e in got] == [e['label'] for e in examples]
    for element, example in zip(got, examples):
      np.testing.assert_array_equal(element['pixels'].numpy(), example['pixels'])


def _write_word_count_archive(path, text: str):
  payload = text.encode()
  with tarfile.open(path, 'w:bz2') as archive:
    info = tarfile.TarInfo('stackoverflow.word_count')
    info.size = len(payload)
    archive.addfile(info, io.BytesIO(payload))


@pytest.mark.parametrize('location', ['stackoverflow.word_count',
                                      'datasets/stackoverflow.word_count',
                                      'stackoverflow.word_count.tar.bz2',
                                      'datasets/stackoverflow.word_count.tar.bz2'])
def test_read_word_counts_in_every_supported_location(tmp_path, location):
  text = 'the 900\nto 800\na 700\n'
  path = tmp_path / location
  path.parent.mkdir(exist_ok=True)
  if location.endswith('.tar.bz2'):
    _write_word_count_archive(path, text)
  else:
    path.write_text(text)
  assert tff_cache.read_word_counts(str(tmp_path), 2) == ['the', 'to']
  assert tff_cache.read_word_counts(str(tmp_path), 3) == ['the', 'to', 'a']


def test_write_word_counts_matches_tff_file_format(tmp_path):
  path = tmp_path / 'stackoverflow.word_count'
  tff_cache.write_word_counts(str(path), {'the': 9, 'to': 4})
  assert path.read_text() == 'the 9\nto 4\n'


def test_read_word_counts_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match='--data_dir.*stackoverflow.word_count'):
    tff_cache.read_word_counts(str(tmp_path), 3)
  path = tmp_path / 'stackoverflow.word_count'
  path.write_text('the 900\nto 800\n')
  with pytest.raises(ValueError, match='lists 2 words, fewer than .* 3'):
    tff_cache.read_word_counts(str(tmp_path), 3)
  path.write_text('the 900\nto eight\n')
  with pytest.raises(ValueError, match='line 2 .* not "word count"'):
    tff_cache.read_word_counts(str(tmp_path), 2)
  path.unlink()
  archive = tmp_path / 'stackoverflow.word_count.tar.bz2'
  archive.write_bytes(b'not bz2')
  with pytest.raises(ValueError, match='cannot read vocabulary'):
    tff_cache.read_word_counts(str(tmp_path), 2)
  with tarfile.open(archive, 'w:bz2') as tar:
    tar.addfile(tarfile.TarInfo('other_file'), io.BytesIO(b''))
  with pytest.raises(ValueError, match='has no member stackoverflow.word_count'):
    tff_cache.read_word_counts(str(tmp_path), 2)
