"""Tests of one_shot_epe.runtime.run_directory: the run directory of either engine.

Independent truths: directories built by hand (what may be resumed), the
round arithmetic by enumeration, `shutil.disk_usage` replaced by a known
answer (the space check), and the lock and temporary files of the project's
own writers.
"""

import collections
import json
import os
import shutil

import pytest

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import run_lock

_Usage = collections.namedtuple('_Usage', 'total used free')


def _accept(saved):
  del saved


class _Checkpoints:
  """A `checkpoint_store.CheckpointStore` that records what it is asked."""

  def __init__(self, error: Exception | None = None):
    self.calls = []
    self._error = error

  def verify(self, limit=None):
    self.calls.append('verify')
    self.limit = limit
    if self._error is not None:
      raise self._error

  def remove_partial(self):
    self.calls.append('remove_partial')


def test_new_empty_and_locked_only_directories_may_hold_a_run(tmp_path):
  run_dir = str(tmp_path / 'run')
  run_directory.check(run_dir, accept_config=_accept,
                      checkpoints=_Checkpoints())
  os.mkdir(run_dir)
  open(os.path.join(run_dir, run_lock.LOCK_FILE), 'w').close()
  run_directory.check(run_dir, accept_config=_accept,
                      checkpoints=_Checkpoints())


def test_other_files_root_files_and_unreadable_configs_are_named(tmp_path):
  run_dir = tmp_path / 'run'
  run_dir.mkdir()
  (run_dir / 'notes.txt').write_text('mine')
  with pytest.raises(run_directory.RunDirectoryError,
                     match='not empty and holds no config.json') as caught:
    run_directory.check(str(run_dir), accept_config=_accept,
                        checkpoints=_Checkpoints())
  assert caught.value.flag == 'run_name'
  (run_dir / 'config.json').write_text('{not json')
  with pytest.raises(run_directory.RunDirectoryError, match='cannot read'):
    run_directory.check(str(run_dir), accept_config=_accept,
                        checkpoints=_Checkpoints())
  root = tmp_path / 'file'
  root.write_text('')
  with pytest.raises(run_directory.RunDirectoryError,
                     match='not a directory') as caught:
    run_directory.check(str(root / 'run'), accept_config=_accept,
                        checkpoints=_Checkpoints())
  assert caught.value.flag == 'root_output_dir'


def test_a_saved_run_is_checked_by_the_callers_rules(tmp_path):
  run_dir = tmp_path / 'run'
  run_dir.mkdir()
  (run_dir / 'config.json').write_text(json.dumps({'seed': 1}))
  seen = []

  def accept(saved):
    seen.append(saved)

  store = _Checkpoints(
      checkpoint_store.CheckpointError('checkpoint 4 is damaged'))
  with pytest.raises(checkpoint_store.CheckpointError, match='damaged'):
    run_directory.check(str(run_dir), accept_config=accept,
                        checkpoints=store)
  assert seen == [{'seed': 1}] and store.calls == ['verify']


def test_checkpoint_rounds_are_zero_the_multiples_and_the_last():
  for total in range(1, 12):
    for every in range(1, 6):
      want = sorted({0, total} | {t for t in range(total + 1)
                                  if t % every == 0})
      assert run_directory.checkpoint_rounds(total, every) == want


@pytest.mark.parametrize('to_write, saved, kept, peak', [
    (3, 0, 3, 3), (5, 0, 3, 4), (5, 2, 3, 2), (0, 3, 3, 0), (5, 2, None, 5)])
def test_free_space_counts_the_checkpoints_held_at_once(
    tmp_path, monkeypatch, to_write, saved, kept, peak):
  size = 10 * 2**20
  needed = peak * size + 2**20
  monkeypatch.setattr(shutil, 'disk_usage',
                      lambda path: _Usage(0, 0, needed))
  run_dir = str(tmp_path / 'a' / 'run')  # Neither exists yet.
  run_directory.check_free_space(run_dir, checkpoint_bytes=size,
                                 to_write=to_write, saved=saved, kept=kept)
  monkeypatch.setattr(shutil, 'disk_usage',
                      lambda path: _Usage(0, 0, needed - 1))
  with pytest.raises(run_directory.RunDirectoryError,
                     match=f'{peak} more checkpoint') as caught:
    run_directory.check_free_space(run_dir, checkpoint_bytes=size,
                                   to_write=to_write, saved=saved, kept=kept)
  assert caught.value.flag == 'root_output_dir'


def test_owned_directory_is_locked_rechecked_and_cleaned(tmp_path):
  run_dir = str(tmp_path / 'run')
  os.mkdir(run_dir)
  leftover = os.path.join(run_dir, atomic_io.TEMPORARY_PREFIX + 'x')
  open(leftover, 'w').close()
  calls = []
  store = _Checkpoints()
  with run_directory.owned(run_dir, recheck=lambda: calls.append('check'),
                           checkpoints=store):
    assert calls == ['check'] and store.calls == ['remove_partial']
    assert not os.path.exists(leftover)
    with pytest.raises(run_lock.RunLockedError):
      with run_lock.acquire(run_dir):
        pass
  with run_lock.acquire(run_dir):  # Released.
    pass


@pytest.mark.parametrize('line_end', ['\n', '\r\n'])
def test_per_round_rows_read_back_up_to_a_round(tmp_path, line_end):
  path = str(tmp_path / 'rows.csv')
  assert run_directory.read_rounds(path, 3) == ([], [])
  rows = [{'round': t, 'x': t / 2} for t in range(1, 6)]
  rows[0] = {'round': 1}  # A missing field is left empty.
  run_directory.write_rounds(path, ('round', 'y', 'x'), rows,
                             run_directory.CsvFormat(False, line_end))
  with open(path, 'rb') as stream:
    assert stream.read().startswith(
        f'round,y,x{line_end}1,,{line_end}2,,1.0{line_end}'.encode())
  assert run_directory.read_rounds(path, 3) == (
      ['round', 'y', 'x'],
      [{'round': '1', 'y': '', 'x': ''}] +
      [{'round': str(t), 'y': '', 'x': str(t / 2)} for t in range(2, 4)])
