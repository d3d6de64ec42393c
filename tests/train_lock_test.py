"""One writer per run directory, with real launcher processes.

* Two launches of the same command at once: exactly one trains; the other
  exits with status 2 naming the run directory and the first one's pid, and
  the survivor's results and checkpoints equal an undisturbed run's, byte
  for byte (the per-round metrics less their wall-clock columns).
* The holder killed with SIGKILL: its lock dies with it (the pid text stays,
  stale); the rerun takes the lock and resumes to the undisturbed results.
* Two reproduce programs on one output directory: a run in use by another
  process stops the second with status 2 naming the run, writing nothing.

To make the overlap certain rather than likely on a loaded machine, the
launchers run `train.main` with `run_lock.acquire` wrapped to pause after
taking the lock until the test creates a file; nothing else is changed.
"""

import csv
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from experiments import grid
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import run_lock

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
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')

# The launcher, pausing once it holds the run lock until argv[1] exists.
_PAUSING_LAUNCHER = r'''
import os, sys, time
from absl import app
from experiments import train, train_config, train_flags
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import run_lock

go = sys.argv.pop(1)
real_acquire = run_lock.acquire

def acquire(directory):
  lock = real_acquire(directory)
  while not os.path.exists(go):
    time.sleep(0.02)
  return lock

run_lock.acquire = acquire
train_flags.define_flags()
app.run(train.main, flags_parser=command_line.parse_flags_or_exit)
'''


def _command(root, *launcher):
  return [sys.executable, *launcher, *_FLAGS, f'--root_output_dir={root}']


def _start(command):
  return subprocess.Popen(command, cwd=_REPO, env=_ENV, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True)


def _finish(process, timeout=300):
  """Waits for `process`; kills its group on timeout. Returns out, err."""
  try:
    return process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    raise


def _wait_for(predicate, what, timeout=240):
  deadline = time.monotonic() + timeout
  while not predicate():
    assert time.monotonic() < deadline, f'timed out waiting for {what}'
    time.sleep(0.05)


def _read(run_dir, name):
  """The file's bytes; for metrics.csv, its rows less wall-clock timings."""
  path = os.path.join(run_dir, name)
  if name != run_directory.METRICS_FILE:
    return pathlib.Path(path).read_bytes()
  with open(path, newline='', encoding='utf-8') as stream:
    rows = list(csv.DictReader(stream))
  return [{key: value for key, value in row.items()
           if not key.endswith('time_in_seconds')} for row in rows]


def _checkpoints(run_dir):
  """Each kept checkpoint version's variable files: name -> bytes."""
  directory = os.path.join(run_dir, run_directory.CHECKPOINT_DIR)
  files = {}
  for version in sorted(os.listdir(directory)):
    variables = os.path.join(directory, version, 'variables')
    for name in sorted(os.listdir(variables)):
      files[(version, name)] = pathlib.Path(variables, name).read_bytes()
  return files


def _outputs(run_dir):
  return ({name: _read(run_dir, name) for name in _RESULT_FILES},
          _checkpoints(run_dir))


def _assert_refused(stderr, run_dir, holder_pid):
  """stderr ends with the one-line refusal naming the run and the holder."""
  assert 'Traceback' not in stderr, stderr[-3000:]
  errors = [line for line in stderr.splitlines() if line.startswith('error:')]
  assert errors == [stderr.strip().splitlines()[-1]], stderr[-3000:]
  assert repr(run_dir) in errors[0]
  assert f'in use by process {holder_pid} ' in errors[0]


@pytest.fixture(scope='module', name='reference')
def fixture_reference(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('reference'))
  done = programs.run(_command(root, '-m', 'experiments.train'), cwd=_REPO,
                      env=_ENV, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return _outputs(os.path.join(root, 'run'))


@pytest.mark.slow
def test_two_launches_at_once_one_trains_the_other_exits_2(reference,
                                                          tmp_path):
  root, go = str(tmp_path / 'out'), str(tmp_path / 'go')
  run_dir = os.path.join(root, 'run')
  launchers = [_start(_command(root, '-c', _PAUSING_LAUNCHER, go))
               for _ in range(2)]
  try:
    _wait_for(lambda: any(p.poll() is not None for p in launchers),
              'one launcher to end')
    loser, = [p for p in launchers if p.poll() is not None]
    winner, = [p for p in launchers if p is not loser]
    stdout, stderr = _finish(loser)
    assert loser.returncode == 2, stderr[-3000:]
    assert 'Rounds:' not in stdout
    _assert_refused(stderr, run_dir, winner.pid)
    assert winner.poll() is None  # Still holding the lock, paused.
    pathlib.Path(go).touch()
    stdout, stderr = _finish(winner)
  finally:
    for process in launchers:
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
      process.communicate()
  assert winner.returncode == 0, stderr[-3000:]
  assert 'Rounds: 8 (trained 8); ' in stdout, stdout
  assert _outputs(run_dir) == reference
  assert (pathlib.Path(run_dir, run_lock.LOCK_FILE).read_text() == '')


@pytest.mark.slow
def test_killed_holder_then_the_rerun_takes_the_lock_and_resumes(reference,
                                                                 tmp_path):
  root, go = str(tmp_path / 'out'), str(tmp_path / 'go')
  run_dir = os.path.join(root, 'run')
  lock_file = pathlib.Path(run_dir, run_lock.LOCK_FILE)
  checkpoint = os.path.join(run_dir, run_directory.CHECKPOINT_DIR, 'program_state_2')
  holder = _start(_command(root, '-c', _PAUSING_LAUNCHER, go))
  try:
    _wait_for(lambda: lock_file.exists() and lock_file.read_text() ==
              f'{holder.pid}\n', 'the holder to take the lock')
    second = programs.run(_command(root, '-m', 'experiments.train'),
                          cwd=_REPO, env=_ENV, timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    _assert_refused(second.stderr, run_dir, holder.pid)
    assert sorted(os.listdir(run_dir)) == [run_lock.LOCK_FILE]  # Paused.
    pathlib.Path(go).touch()
    _wait_for(lambda: os.path.isdir(checkpoint) or holder.poll() is not None,
              'checkpoint 2')
    assert holder.poll() is None, 'the run ended before it could be killed'
    os.killpg(holder.pid, signal.SIGKILL)  # The launcher and its TFF worker.
  finally:
    if holder.poll() is None:
      os.killpg(holder.pid, signal.SIGKILL)
    holder.communicate()
  assert lock_file.read_text() == f'{holder.pid}\n'  # Stale, not binding.
  rerun = programs.run(_command(root, '-m', 'experiments.train'), cwd=_REPO,
                       env=_ENV, timeout=300)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  resumed = int(rerun.stdout.split('resumed from round ')[1].split(',')[0])
  assert 2 <= resumed < 8, rerun.stdout
  assert _outputs(run_dir) == reference
  assert lock_file.read_text() == ''


@pytest.mark.slow
def test_a_run_in_use_stops_a_second_reproduce_naming_it(tmp_path):
  config = tmp_path / 'tiny.cfg'
  config.write_text('\n'.join([*_FLAGS[:-2], '--total_rounds=4', '']),
                    encoding='utf-8')
  output_dir = str(tmp_path / 'grid')
  run_dir = os.path.join(output_dir, grid.RUNS_DIR, 'noise0.05_rep2')
  with run_lock.acquire(run_dir):  # As another reproduce training it would.
    done = programs.run(
        [sys.executable, '-m', 'experiments.reproduce', f'--config={config}',
         f'--output_dir={output_dir}'], cwd=_REPO, env=_ENV, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    _assert_refused(done.stderr, run_dir, os.getpid())
    assert os.listdir(run_dir) == [run_lock.LOCK_FILE]
    assert sorted(os.listdir(output_dir)) == [grid.RUNS_DIR]
