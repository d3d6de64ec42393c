"""Crash and resume of experiments/train.py with real processes and SIGKILL.

A reference run trains 8 rounds uninterrupted. Each crash case starts the
same command in a new process group, kills the group (launcher and TFF
worker) with SIGKILL at a chosen moment, reruns the same command to the end,
and requires every result file to equal the reference byte for byte (the
per-round metrics less their wall-clock timing columns):

* between checkpoints: killed from outside once the progress mark shows
  round 3 (checkpoint 2 on disk): the rerun also says how many rounds the
  kill lost;
* during a checkpoint: the launcher writes half of checkpoint 4 (the
  SavedModel in its temporary directory, its variables file truncated) and
  kills itself before the rename;
* during the report: killed after the new report.json is written to its
  temporary file, before the rename.

And stopped as a user or a scheduler stops it: SIGINT, and SIGTERM, once
the progress mark shows a random round of at least 2, wherever in a round
it lands; the launcher must end with status 130 and the line naming the
round it saved, and its rerun must resume from that round to the same
files.

Training is bit-reproducible (seeded DP noise, input-keyed dropout, in-order
batches, per-round data seeds), so equality is exact, not approximate.
"""

import csv
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from one_shot_epe.runtime import run_directory

import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FLAGS = [
    '--task=emnist_character', '--use_synthetic_data',
    '--synthetic_num_clients=12', '--synthetic_examples_per_client=8',
    '--clients_per_round=3', '--total_rounds=8', '--client_batch_size=4',
    '--noise_multiplier=0.05', '--num_canaries=4',
    '--num_unseen_canaries=16', '--canary_repeats=2',
    '--rounds_per_evaluation=2', '--rounds_per_checkpoint=2',
    '--max_eval_examples=16', '--noprogress_bar', '--run_name=run',
]
_RESULT_FILES = (run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
                 run_directory.REPORT_JSON_FILE, run_directory.REPORT_MARKDOWN_FILE,
                 run_directory.METRICS_FILE, run_directory.CANARY_COSINES_FILE)

# Runs the launcher with one failure injected (argv[1]), then the flags.
_CRASHING_LAUNCHER = r'''
import glob, os, signal, sys
import tensorflow as tf
from absl import app
from experiments import train, train_config, train_flags
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import run_directory

def die():
  os.killpg(0, signal.SIGKILL)  # The launcher and its TFF worker, at once.

mode = sys.argv.pop(1)
if mode == 'checkpoint':
  real_save = tf.saved_model.save
  def save(obj, export_dir, *args, **kwargs):
    real_save(obj, export_dir, *args, **kwargs)
    if os.path.basename(export_dir).startswith('program_state_4_temp'):
      data, = glob.glob(os.path.join(export_dir, 'variables', '*.data-*'))
      os.truncate(data, os.path.getsize(data) // 2)
      die()
  tf.saved_model.save = save
elif mode == 'report':
  real_replace = atomic_io.os.replace
  def replace(source, target):
    if os.path.basename(target) == run_directory.REPORT_JSON_FILE:
      die()
    real_replace(source, target)
  atomic_io.os.replace = replace
train_flags.define_flags()
app.run(train.main, flags_parser=command_line.parse_flags_or_exit)
'''


def _command(root, *launcher):
  return [sys.executable, *launcher, *_FLAGS, f'--root_output_dir={root}']


def _run(command, **kwargs):
  """Runs `command` to its end in a new process group; returns it."""
  return programs.run(command, cwd=_REPO, timeout=300, **kwargs)


def _group_alive(pgid):
  alive = []
  for process in psutil.process_iter(['pid']):
    try:
      if os.getpgid(process.pid) == pgid and process.status() != 'zombie':
        alive.append(process)
    except (ProcessLookupError, psutil.NoSuchProcess):
      continue
  return alive


def _read(run_dir, name):
  """The file's bytes; for metrics.csv, its rows less wall-clock timings."""
  path = os.path.join(run_dir, name)
  if name != run_directory.METRICS_FILE:
    with open(path, 'rb') as stream:
      return stream.read()
  with open(path, newline='') as stream:
    rows = list(csv.DictReader(stream))
  return [{key: value for key, value in row.items()
           if not key.endswith('time_in_seconds')} for row in rows]


@pytest.fixture(scope='module', name='reference')
def fixture_reference(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('reference'))
  done = _run(_command(root, '-m', 'experiments.train'))
  assert done.returncode == 0, done.stderr[-3000:]
  run_dir = os.path.join(root, 'run')
  return run_dir, {name: _read(run_dir, name) for name in _RESULT_FILES}


def _resume_and_compare(root, reference, resumed_from, lost=''):
  """Reruns the command in `root` to its end; compares with `reference`."""
  _, reference_files = reference
  done = _run(_command(root, '-m', 'experiments.train'))
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'resumed from round {resumed_from}{lost}' in done.stdout, done.stdout
  run_dir = os.path.join(root, 'run')
  for name in _RESULT_FILES:
    assert _read(run_dir, name) == reference_files[name], name
  leftovers = [name for name in os.listdir(os.path.join(run_dir, 'checkpoints'))
               if 'temp' in name]
  assert not leftovers
  assert not [name for name in os.listdir(run_dir) if name.startswith('.tmp')]


def _reached(root):
  return run_directory.read_progress(os.path.join(root, 'run')) or 0


@pytest.mark.slow
def test_kill_between_checkpoints_then_resume(reference, tmp_path):
  root = str(tmp_path)
  process = subprocess.Popen(_command(root, '-m', 'experiments.train'),
                             cwd=_REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
  deadline = time.monotonic() + 240
  while _reached(root) < 3 and process.poll() is None:
    assert time.monotonic() < deadline, 'round 3 never came'
    time.sleep(0.01)
  assert process.poll() is None, 'the run ended before it could be killed'
  os.killpg(process.pid, signal.SIGKILL)
  process.wait()
  assert not _group_alive(process.pid)  # The TFF worker died with it.
  assert not os.path.exists(os.path.join(root, 'run', run_directory.REPORT_JSON_FILE))
  checkpoints = os.listdir(os.path.join(root, 'run', 'checkpoints'))
  saved = max(int(name.rsplit('_', 1)[1]) for name in checkpoints
              if re.fullmatch(r'program_state_\d+', name))
  reached = _reached(root)
  assert reached > saved, (reached, saved)  # Killed between checkpoints.
  lost = reached - saved
  _resume_and_compare(
      root, reference, resumed_from=saved,
      lost=f'; the previous invocation had completed round {reached}: '
      f'{lost} round{"s" if lost > 1 else ""} lost')


@pytest.mark.slow
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM],
                         ids=['SIGINT', 'SIGTERM'])
def test_an_interrupt_saves_the_last_round_then_resume(reference, tmp_path,
                                                       signum):
  root = str(tmp_path)
  after = random.randint(2, 6)
  process = subprocess.Popen(_command(root, '-m', 'experiments.train'),
                             cwd=_REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
  try:
    deadline = time.monotonic() + 240
    while _reached(root) < after:
      assert process.poll() is None, process.communicate()[1][-3000:]
      assert time.monotonic() < deadline, f'round {after} never came'
      time.sleep(0.01)
    os.killpg(process.pid, signum)  # As a terminal's Ctrl-C, or a kill.
    _, stderr = process.communicate(timeout=240)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
      process.communicate()
  assert process.returncode == 130, stderr[-3000:]
  assert 'Traceback' not in stderr, stderr[-3000:]
  line = stderr.strip().splitlines()[-1]
  match = re.fullmatch(r'interrupted after round (\d+) of 8; rerun the same '
                       r'command to resume from round \1', line)
  assert match, (after, stderr[-3000:])
  saved = int(match.group(1))
  assert saved >= after - 1, (after, saved)  # The last round it observed.
  assert os.path.isdir(os.path.join(root, 'run', 'checkpoints',
                                    f'program_state_{saved}'))
  assert not _group_alive(process.pid)
  _resume_and_compare(root, reference, resumed_from=saved)


@pytest.mark.slow
def test_kill_while_writing_a_checkpoint_then_resume(reference, tmp_path):
  root = str(tmp_path)
  crashed = _run(_command(root, '-c', _CRASHING_LAUNCHER, 'checkpoint'))
  assert crashed.returncode == -signal.SIGKILL
  names = os.listdir(os.path.join(root, 'run', 'checkpoints'))
  assert 'program_state_2' in names and 'program_state_4' not in names
  assert any(name.startswith('program_state_4_temp') for name in names)
  _resume_and_compare(root, reference, resumed_from=2)


@pytest.mark.slow
def test_kill_while_writing_the_report_then_resume(reference, tmp_path):
  root = str(tmp_path)
  crashed = _run(_command(root, '-c', _CRASHING_LAUNCHER, 'report'))
  assert crashed.returncode == -signal.SIGKILL
  run_dir = os.path.join(root, 'run')
  assert not os.path.exists(os.path.join(run_dir, run_directory.REPORT_JSON_FILE))
  assert [name for name in os.listdir(run_dir) if name.startswith('.tmp')]
  # Training had finished: the rerun trains nothing and writes the results.
  _resume_and_compare(root, reference, resumed_from=8)


@pytest.mark.slow
def test_damaged_checkpoint_is_refused_untouched(reference, tmp_path):
  root = str(tmp_path)
  run_dir = os.path.join(root, 'run')
  shutil.copytree(reference[0], run_dir)  # A finished run.
  data = os.path.join(run_dir, 'checkpoints', 'program_state_8', 'variables',
                      'variables.data-00000-of-00001')
  with open(data, 'r+b') as stream:  # Flip bytes in the middle.
    stream.seek(os.path.getsize(data) // 2)
    stream.write(b'\xff' * 16)
  before = {name: _read(run_dir, name) for name in _RESULT_FILES}
  again = _run(_command(root, '-m', 'experiments.train'))
  assert again.returncode == 2
  assert 'program_state_8' in again.stderr and 'damaged' in again.stderr
  assert 'Traceback' not in again.stderr
  assert 'resume from version 6' in again.stderr
  assert {name: _read(run_dir, name) for name in _RESULT_FILES} == before
