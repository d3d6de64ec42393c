"""Crash and resume of experiments/train.py with real processes and SIGKILL.

A reference run trains 8 rounds uninterrupted. Each crash case starts the
same command in a new process group, kills the group (launcher and TFF
worker) with SIGKILL at a chosen moment, reruns the same command to the end,
and requires every result file to equal the reference byte for byte (the
per-round metrics less their wall-clock timing columns):

* between checkpoints: killed from outside once checkpoint 2 is on disk;
* during a checkpoint: the launcher writes half of checkpoint 4 (the
  SavedModel in its temporary directory, its variables file truncated) and
  kills itself before the rename;
* during the report: killed after the new report.json is written to its
  temporary file, before the rename.

Training is bit-reproducible (seeded DP noise, input-keyed dropout, in-order
batches, per-round data seeds), so equality is exact, not approximate.
"""

import csv
import os
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


def _resume_and_compare(root, reference, resumed_from):
  """Reruns the command in `root` to its end; compares with `reference`."""
  _, reference_files = reference
  done = _run(_command(root, '-m', 'experiments.train'))
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'resumed from round {resumed_from}' in done.stdout, done.stdout
  run_dir = os.path.join(root, 'run')
  for name in _RESULT_FILES:
    assert _read(run_dir, name) == reference_files[name], name
  leftovers = [name for name in os.listdir(os.path.join(run_dir, 'checkpoints'))
               if 'temp' in name]
  assert not leftovers
  assert not [name for name in os.listdir(run_dir) if name.startswith('.tmp')]


def test_kill_between_checkpoints_then_resume(reference, tmp_path):
  root = str(tmp_path)
  checkpoint = os.path.join(root, 'run', 'checkpoints', 'program_state_2')
  process = subprocess.Popen(_command(root, '-m', 'experiments.train'),
                             cwd=_REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
  deadline = time.monotonic() + 240
  while not os.path.isdir(checkpoint) and process.poll() is None:
    assert time.monotonic() < deadline, 'checkpoint 2 never appeared'
    time.sleep(0.02)
  assert process.poll() is None, 'the run ended before it could be killed'
  os.killpg(process.pid, signal.SIGKILL)
  process.wait()
  assert not _group_alive(process.pid)  # The TFF worker died with it.
  assert not os.path.exists(os.path.join(root, 'run', run_directory.REPORT_JSON_FILE))
  _resume_and_compare(root, reference, resumed_from=2)


def test_kill_while_writing_a_checkpoint_then_resume(reference, tmp_path):
  root = str(tmp_path)
  crashed = _run(_command(root, '-c', _CRASHING_LAUNCHER, 'checkpoint'))
  assert crashed.returncode == -signal.SIGKILL
  names = os.listdir(os.path.join(root, 'run', 'checkpoints'))
  assert 'program_state_2' in names and 'program_state_4' not in names
  assert any(name.startswith('program_state_4_temp') for name in names)
  _resume_and_compare(root, reference, resumed_from=2)


def test_kill_while_writing_the_report_then_resume(reference, tmp_path):
  root = str(tmp_path)
  crashed = _run(_command(root, '-c', _CRASHING_LAUNCHER, 'report'))
  assert crashed.returncode == -signal.SIGKILL
  run_dir = os.path.join(root, 'run')
  assert not os.path.exists(os.path.join(run_dir, run_directory.REPORT_JSON_FILE))
  assert [name for name in os.listdir(run_dir) if name.startswith('.tmp')]
  # Training had finished: the rerun trains nothing and writes the results.
  _resume_and_compare(root, reference, resumed_from=8)


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
