"""A full disk under a real launcher: one line, nothing lost, the rerun resumes.

The run directory lives on a small tmpfs (mounted here; root only, else the
test is skipped with the reason).

* A disk that cannot hold the run's checkpoints is refused before training:
  exit status 2, one line naming --root_output_dir and the space, nothing
  written.
* A disk filled by something else while the run trains (the launcher is told
  there is room: `shutil.disk_usage` answers 1 TiB): 36 MiB hold the small
  files and two checkpoint versions of the tiny run (~14.5 MB each: the
  1,206,590-parameter EMNIST CNN, its last aggregate and the audit's theta_0),
  not a third, so the launcher fails while saving checkpoint 4:

* exit status 2, a last stderr line naming the checkpoint version and
  "No space left on device", no traceback; checkpoints 0 and 2 intact
  (every tensor reads back with its checksum), no temporary leftovers;
* remounted larger, the same command resumes from round 2 and finishes;
* the disk filled again but for 16 KiB, rerunning the finished run (which
  rewrites config.json and its results) fails on one of its files with
  status 2, and every file it had written is unchanged, byte for byte.
"""

import errno
import os
import pathlib
import re
import subprocess
import sys

import pytest

from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import checkpoints
from one_shot_epe.runtime import run_lock

import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NO_SPACE = os.strerror(errno.ENOSPC)
_SMALL, _LARGE = '36m', '80m'
_FLAGS = [
    '--task=emnist_character', '--use_synthetic_data',
    '--synthetic_num_clients=12', '--synthetic_examples_per_client=8',
    '--clients_per_round=3', '--total_rounds=4', '--client_batch_size=4',
    '--noise_multiplier=0.05', '--num_canaries=4',
    '--num_unseen_canaries=16', '--canary_repeats=2',
    '--rounds_per_evaluation=2', '--rounds_per_checkpoint=2',
    '--max_eval_examples=16', '--noprogress_bar', '--run_name=run',
]
_WRITTEN = (run_directory.CONFIG_FILE, run_directory.METRICS_FILE, run_directory.CANARY_COSINES_FILE,
            run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
            run_directory.REPORT_JSON_FILE, run_directory.REPORT_MARKDOWN_FILE,
            run_directory.DENSITY_PLOT_FILE)


def _mount(*args):
  return subprocess.run(['mount', *args], capture_output=True, text=True,
                        check=False)


@pytest.fixture(name='disk')
def fixture_disk(tmp_path):
  """A tmpfs of `_SMALL` bytes at tmp_path/disk, unmounted afterwards."""
  if os.geteuid() != 0:
    pytest.skip('mounting a small tmpfs needs root')
  disk = tmp_path / 'disk'
  disk.mkdir()
  mounted = _mount('-t', 'tmpfs', '-o', f'size={_SMALL}', 'tmpfs', str(disk))
  if mounted.returncode != 0:
    pytest.skip(f'cannot mount a tmpfs: {mounted.stderr.strip()}')
  try:
    yield disk
  finally:
    subprocess.run(['umount', '--lazy', str(disk)], check=True)


# The launcher, told by `shutil.disk_usage` that the disk has 1 TiB free.
_TOLD_THERE_IS_ROOM = r'''
import collections, runpy, shutil
usage = collections.namedtuple('usage', 'total used free')
shutil.disk_usage = lambda path: usage(2**40, 0, 2**40)
runpy.run_module('experiments.train', run_name='__main__', alter_sys=True)
'''


def _train(root, told_there_is_room=False):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  launcher = (['-c', _TOLD_THERE_IS_ROOM] if told_there_is_room else
              ['-m', 'experiments.train'])
  return programs.run([sys.executable, *launcher, *_FLAGS,
                       f'--root_output_dir={root}'], cwd=_REPO, env=env,
                      timeout=300)


def _failure_line(done):
  """The launcher's one-line error: last stderr line, the only 'error:'."""
  assert done.returncode == 2, done.stderr[-3000:]
  assert 'Traceback' not in done.stderr, done.stderr[-3000:]
  last = done.stderr.strip().splitlines()[-1]
  assert [line for line in done.stderr.splitlines()
          if line.startswith('error:')] == [last]
  assert _NO_SPACE in last and 'intact' in last and 'rerun' in last, last
  return last


def _leftovers(run_dir):
  """Temporary files or checkpoint directories anywhere in the run."""
  return [os.path.join(parent, name)
          for parent, directories, files in os.walk(run_dir)
          for name in directories + files
          if '_temp' in name or name.startswith('.tmp-')]


def _fill_but(disk, free_bytes):
  """Fills the tmpfs with a file, then frees `free_bytes` of it."""
  filler = disk / 'filler'
  with open(filler, 'wb') as stream:
    try:
      while True:
        stream.write(b'\0' * 65536)
        stream.flush()
    except OSError as error:
      assert error.errno == errno.ENOSPC
  os.truncate(filler, os.path.getsize(filler) - free_bytes)


@pytest.mark.slow
def test_a_disk_too_small_for_the_checkpoints_is_refused_before_training(
    disk):
  root = str(disk / 'out')
  done = _train(root)
  assert done.returncode == 2, done.stderr[-3000:]
  line = done.stderr.strip().splitlines()[-1]
  assert line.startswith('error: --root_output_dir: ') and 'MiB free' in line
  assert 'checkpoint' in line and 'Traceback' not in done.stderr
  assert not os.path.exists(root)


@pytest.mark.slow
def test_full_disk_fails_cleanly_and_the_rerun_resumes(disk):
  root = str(disk / 'out')
  run_dir = os.path.join(root, 'run')
  checkpoint_dir = os.path.join(run_dir, run_directory.CHECKPOINT_DIR)

  line = _failure_line(_train(root, told_there_is_room=True))
  assert repr(os.path.join(checkpoint_dir, 'program_state_4')) in line
  assert checkpoints.versions(checkpoint_dir) == [0, 2]
  assert checkpoints.verify_latest(checkpoint_dir) == 2
  checkpoints.verify(os.path.join(checkpoint_dir, 'program_state_0'))
  assert not _leftovers(run_dir)

  remounted = _mount('-o', f'remount,size={_LARGE}', str(disk))
  assert remounted.returncode == 0, remounted.stderr
  resumed = _train(root)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  # Round 4 was reached before its checkpoint failed: the rerun names it.
  assert re.search(r'resumed from round 2(; the previous invocation had '
                   r'completed round [34]: [12] rounds? lost \(ended between '
                   r'checkpoints\);|,) trained 2 now', resumed.stdout), (
                       resumed.stdout[-3000:])
  before = {name: pathlib.Path(run_dir, name).read_bytes()
            for name in _WRITTEN}

  _fill_but(disk, 16 * 1024)
  line = _failure_line(_train(root, told_there_is_room=True))
  named = line.split("cannot write '")[1].split("'")[0]
  assert os.path.relpath(named, run_dir).split(os.sep)[0] in (
      *_WRITTEN, run_directory.TENSORBOARD_DIR, run_lock.LOCK_FILE), line
  assert {name: pathlib.Path(run_dir, name).read_bytes()
          for name in _WRITTEN} == before
  assert not _leftovers(run_dir)
  assert checkpoints.versions(checkpoint_dir) == [0, 2, 4]
