"""Tests that atomic writes never leave a partial file behind."""

import errno
import os

import pytest

from one_shot_epe.runtime import atomic_io
from one_shot_epe.reporting import epsilon_cli


def test_replaces_content_and_leaves_no_temporary(tmp_path):
  path = tmp_path / 'table.md'
  path.write_text('old', encoding='utf-8')
  atomic_io.write_text(str(path), 'new table\n')
  assert path.read_text(encoding='utf-8') == 'new table\n'
  assert os.listdir(tmp_path) == ['table.md']


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
  path = tmp_path / 'report.json'
  path.write_text('{"complete": true}', encoding='utf-8')

  def crash(*_):
    raise OSError('disk full')

  monkeypatch.setattr(os, 'fsync', crash)
  with pytest.raises(OSError, match='disk full'):
    atomic_io.write_text(str(path), '{"compl')
  assert path.read_text(encoding='utf-8') == '{"complete": true}'
  assert os.listdir(tmp_path) == ['report.json']


def test_a_write_that_need_not_be_durable_skips_the_sync(tmp_path,
                                                          monkeypatch):
  path = tmp_path / '.progress.json'
  synced = []
  monkeypatch.setattr(os, 'fsync', synced.append)
  atomic_io.write_text(str(path), '{"round": 3}\n', durable=False)
  assert path.read_text(encoding='utf-8') == '{"round": 3}\n'
  assert os.listdir(tmp_path) == ['.progress.json'] and synced == []
  atomic_io.write_text(str(path), '{"round": 4}\n')
  assert len(synced) == 1  # The default: synced before the rename.


def test_a_full_disk_names_the_target_and_keeps_the_old_file(tmp_path,
                                                             monkeypatch):
  path = tmp_path / 'final_cosines.csv'
  path.write_text('cosine\n0.5\n', encoding='utf-8')

  def full(*_):  # What write(2)/fsync(2) raise on a full disk: no file name.
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  monkeypatch.setattr(os, 'fsync', full)
  with pytest.raises(OSError) as error:
    atomic_io.write_columns_csv(str(path), {'cosine': [0.25]})
  assert error.value.errno == errno.ENOSPC
  assert error.value.filename == str(path)
  assert os.strerror(errno.ENOSPC) in str(error.value)
  assert path.read_text(encoding='utf-8') == 'cosine\n0.5\n'
  assert os.listdir(tmp_path) == ['final_cosines.csv']


def test_a_missing_directory_raises_naming_the_target(tmp_path):
  path = str(tmp_path / 'missing' / 'report.md')
  with pytest.raises(FileNotFoundError) as error:
    atomic_io.write_text(path, 'text')
  assert error.value.filename == path


def test_columns_round_trip_through_the_estimate_cli_reader(tmp_path):
  path = tmp_path / 'cosines.csv'
  seen, unseen = [0.1, 0.25, 1 / 3], [-0.05, 0.2]
  atomic_io.write_columns_csv(str(path), {'seen': seen, 'unseen': unseen})
  assert epsilon_cli.read_cosine_columns(str(path)) == {
      'seen': seen, 'unseen': unseen}


def test_remove_temporaries_deletes_only_interrupted_writes(tmp_path):
  (tmp_path / '.tmp-abc123report.json').write_text('{"half": ')
  (tmp_path / 'report.json').write_text('{}')
  (tmp_path / '.hidden').write_text('keep')
  (tmp_path / '.tmp-dir').mkdir()
  assert atomic_io.remove_temporaries(str(tmp_path)) == [
      '.tmp-abc123report.json']
  assert sorted(os.listdir(tmp_path)) == ['.hidden', '.tmp-dir', 'report.json']
  assert atomic_io.remove_temporaries(str(tmp_path / 'missing')) == []
