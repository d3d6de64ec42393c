"""Tests for one_shot_epe.tff_engine.checkpoints (integrity of saved program state).

Checkpoints are written here by TFF's own `FileProgramStateManager`, then
damaged the ways a crash or a disk can: a truncated or bit-flipped variables
file, a missing or garbled proto, an interrupted save's `_temp` directory.
"""

import asyncio
import os
import shutil

import numpy as np
import pytest
import tensorflow_federated as tff

from one_shot_epe.runtime import bounded_reads
from one_shot_epe.tff_engine import checkpoints


def _save(directory, versions):
  manager = tff.program.FileProgramStateManager(directory, keep_total=0)
  for version in versions:
    state = {'weights': np.arange(1000, dtype=np.float32) + version,
             'round': np.int32(version)}
    asyncio.run(manager.save(state, version))


def _data_file(directory, version):
  return os.path.join(directory, f'program_state_{version}', 'variables',
                      'variables.data-00000-of-00001')


@pytest.fixture(name='saved')
def fixture_saved(tmp_path):
  directory = str(tmp_path / 'checkpoints')
  _save(directory, [0, 2, 4])
  return directory


def test_intact_versions_verify(saved):
  assert checkpoints.versions(saved) == [0, 2, 4]
  assert checkpoints.verify_latest(saved) == 4


def test_no_directory_or_no_versions(tmp_path):
  assert checkpoints.versions(str(tmp_path / 'none')) == []
  assert checkpoints.verify_latest(str(tmp_path / 'none')) is None
  assert checkpoints.verify_latest(str(tmp_path)) is None


def _flip_middle(path):
  with open(path, 'r+b') as stream:
    stream.seek(os.path.getsize(path) // 2)
    byte = stream.read(1)
    stream.seek(-1, os.SEEK_CUR)
    stream.write(bytes([byte[0] ^ 0xFF]))


def _truncate(path):
  os.truncate(path, os.path.getsize(path) // 2)


def _garble_proto(directory):
  with open(os.path.join(directory, 'program_state_4', 'saved_model.pb'),
            'wb') as stream:
    stream.write(b'\x0a\xff\xff\xff\xff not a proto')


@pytest.mark.parametrize('damage', [
    lambda d: _flip_middle(_data_file(d, 4)),
    lambda d: _truncate(_data_file(d, 4)),
    lambda d: os.unlink(_data_file(d, 4)),
    _garble_proto,
    lambda d: shutil.rmtree(os.path.join(d, 'program_state_4', 'variables')),
], ids=['bit flip', 'truncated', 'missing data', 'garbled proto',
        'missing variables'])
def test_damaged_latest_version_is_named(saved, damage):
  damage(saved)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"program_state_4' is damaged .*resume from "
                     r'version 2'):
    checkpoints.verify_latest(saved)


def test_only_version_damaged_says_start_afresh(tmp_path):
  directory = str(tmp_path)
  _save(directory, [0])
  _truncate(_data_file(directory, 0))
  with pytest.raises(checkpoints.CheckpointError, match='afresh'):
    checkpoints.verify_latest(directory)


def test_interrupted_save_is_not_a_version_and_is_removed(saved):
  partial = os.path.join(saved, 'program_state_6_temp1234')
  shutil.copytree(os.path.join(saved, 'program_state_4'), partial)
  _truncate(os.path.join(partial, 'variables', 'variables.data-00000-of-00001'))
  assert checkpoints.versions(saved) == [0, 2, 4]
  # TFF's manager agrees that the partial save is no version.
  manager = tff.program.FileProgramStateManager(saved)
  assert asyncio.run(manager.get_versions()) == [0, 2, 4]
  assert checkpoints.remove_partial(saved) == ['program_state_6_temp1234']
  assert not os.path.exists(partial)
  assert checkpoints.verify_latest(saved) == 4


def test_the_earlier_launchers_layout_is_refused_and_the_current_kept(
    tmp_path):
  old, new = str(tmp_path / 'old'), str(tmp_path / 'new')
  for directory, state in (
      (old, {'learning': np.zeros(3, np.float32),
             'tracker': np.zeros(2, np.float32)}),
      (new, {'program': np.zeros(3, np.float32),
             'audit': {'cosine_maxima': np.zeros(2, np.float32)}})):
    manager = tff.program.FileProgramStateManager(directory, keep_total=0)
    asyncio.run(manager.save(state, 0))
  with pytest.raises(checkpoints.CheckpointError,
                     match='earlier version of the launcher'):
    checkpoints.check_layout(os.path.join(old, f'{checkpoints.PREFIX}0'))
  checkpoints.check_layout(os.path.join(new, f'{checkpoints.PREFIX}0'))


def test_store_keeps_round_zero_and_the_last_two(tmp_path):
  directory = str(tmp_path / 'checkpoints')
  store = checkpoints.ProgramStateCheckpoints(directory)
  assert store.rounds() == [] and store.latest() is None
  store.verify()  # Nothing to check; nothing created.
  assert not os.path.exists(directory)
  # The checkpoint protocol (plain calls, rounds named round_num) for
  # rounds 0 and 2; TFF's awaited manager for 4 and 6: the same files.
  for round_num in (0, 2):
    store.save({'weights': np.full(3, round_num, np.float32)},
               round_num=round_num)
  manager = store.program_state_manager()
  assert isinstance(manager, tff.program.ProgramStateManager)
  for version in (4, 6):
    asyncio.run(manager.save({'weights': np.full(3, version, np.float32)},
                             version))
  assert store.rounds() == [0, 4, 6] and store.latest() == 6
  assert asyncio.run(manager.get_versions()) == [0, 4, 6]
  store.verify()
  template = {'weights': np.zeros(3, np.float32)}
  loaded = store.load(round_num=4, template=template)
  np.testing.assert_array_equal(loaded['weights'], [4.0, 4.0, 4.0])
  np.testing.assert_array_equal(
      asyncio.run(manager.load(0, template))['weights'], [0.0, 0.0, 0.0])
  os.truncate(_data_file(directory, 6), 10)
  with pytest.raises(checkpoints.CheckpointError,
                     match='program_state_6.*resume from version 4'):
    store.verify()


def test_a_version_past_its_limit_is_refused_before_it_is_read(saved):
  # The state of 1,000 float32 is 4 kB; a variables file grown to 1 GiB
  # (sparse: no block written) is refused by its size, unread.
  store = checkpoints.ProgramStateCheckpoints(saved)
  limit = bounded_reads.checkpoint(4_000)
  store.verify(limit)  # The intact versions are within it.
  with open(_data_file(saved, 4), 'r+b') as stream:
    os.truncate(stream.fileno(), 1 << 30)
  with pytest.raises(checkpoints.CheckpointError) as refused:
    store.verify(limit)
  assert 'program_state_4' in str(refused.value)
  assert 'limit of a checkpoint' in str(refused.value)
  assert 'resume from version 2' in str(refused.value)
