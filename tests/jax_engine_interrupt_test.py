"""Ctrl-C and SIGTERM on the JAX engine: the last round is kept, exactly.

Independent truth: the same run, uninterrupted. In this process, a run of
the engine is interrupted by a real SIGINT sent from inside a round's
report (it waits for the round's bookkeeping, `interrupts.deferred`): the
checkpoint of that round must hold its block's unscored vectors, and the
run resumed from it must report every later round and every round's
cosines as the uninterrupted run does, bit for bit, ending with the same
cosines (also under correlated BLT noise, whose stream restarts at the
resumed round, with its decorrelated statistic). As a user would: `python
-m experiments.train --backend=jax` is stopped with SIGINT once its progress
mark shows a random round, rerun and stopped with SIGTERM later, rerun and
killed with SIGKILL a round later still (no checkpoint of that round), then
rerun to the end; each stop must end with status 130 and the line naming
the round saved, the last rerun must say it resumed from the round the
SIGTERM saved and how many rounds the SIGKILL lost, and the run directory
must end as an uninterrupted run's, file by file.
"""

import csv
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import training
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.stats import decorrelation

import programs
import tiny_jax

try:
  from one_shot_epe.jax_engine import correlated_noise
except ImportError:  # jax-privacy is not installed here.
  correlated_noise = None

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_ROUNDS = 5


def _plan() -> run_plan.RunPlan:
  # Blocks of 2 rounds; checkpoints at 0, 3 and 5: blocks {1, 2}, {3}
  # (scored at checkpoint 3), {4, 5}.
  return run_plan.RunPlan(
      sampler=participation.PoissonSampling(12, 4.0, seed=1),
      spec=canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                  schedule=[[0], [1, 2], [], [3], []],
                                  buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                   clients_per_round=4.8, clip=1.0),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgdm', 1.0, momentum=0.9),
      batch_size=2, epochs=1, max_examples=None, total_rounds=_ROUNDS,
      seed=4, noise_seed=None, rounds_per_checkpoint=3,
      rounds_per_evaluation=2)


class _Interrupting(tiny_jax.Recorder):
  """Records the run; sends this process SIGINT in round `at`'s report."""

  def __init__(self, at: int | None = None):
    super().__init__()
    self._at = at

  def on_round(self, record: round_record.RoundRecord) -> None:
    super().on_round(record)
    if record.round_num == self._at:
      os.kill(os.getpid(), signal.SIGINT)


def _correlated(kind: str):
  """`training.train`'s noise and decorrelation for `kind` ('': none)."""
  if not kind:
    return {}
  strategy = correlated_noise.build_strategy(
      kind, _ROUNDS, correlated_noise.participation_bounds('poisson',
                                                           _ROUNDS, 1))
  plan = _plan()
  return dict(
      noise_rows=correlated_noise.NoiseStream(correlated_noise.privatizer(
          strategy, plan.dp.noise_multiplier, plan.dp.clip,
          seed=plan.seed)).rows,
      decorrelation=training.Decorrelation(
          decorrelation.toeplitz_strategy(strategy.coefs),
          plan.dp.noise_multiplier * plan.dp.clip * strategy.sensitivity /
          plan.dp.clients_per_round))


def _train(directory, observer, kind):
  return training.train(_plan(), tiny_jax.MODEL, tiny_jax.arrays(),
                        tiny_jax.arrays(),
                        checkpoints.TrainingStateCheckpoints(str(directory)),
                        observer, local_training='loop', **_correlated(kind))


def _same(ours, theirs) -> bool:
  """Events equal, NaN equal to NaN; times left out."""
  if type(ours) is not type(theirs) or ours.round_num != theirs.round_num:
    return False
  if isinstance(ours, round_record.CanaryCosines):
    return np.array_equal(ours, theirs, equal_nan=True)
  return {k: v for k, v in ours.metrics.items() if 'time' not in k} == {
      k: v for k, v in theirs.metrics.items() if 'time' not in k}


_KINDS = ['', 'blt']


@pytest.fixture(scope='module', name='whole')
def fixture_whole(tmp_path_factory):
  runs = {}
  for kind in _KINDS:
    if kind and correlated_noise is None:
      continue
    recorder = tiny_jax.Recorder()
    outcome = _train(tmp_path_factory.mktemp(f'whole{kind}'), recorder, kind)
    runs[kind] = outcome, recorder.events
  return runs


# Interrupted in the first block (round 1 unscored), and after checkpoint 3
# (round 4 unscored; under BLT the noise stream restarts at round 4).
@pytest.mark.slow
@pytest.mark.parametrize('at, kind', [(1, ''), (4, ''), (4, 'blt')])
def test_an_interrupted_run_resumes_as_if_uninterrupted(whole, tmp_path, at,
                                                        kind):
  if kind and correlated_noise is None:
    pytest.skip('jax-privacy is not installed here (.venv-jax).')
  expected, expected_events = whole[kind]
  first = _Interrupting(at)
  with pytest.raises(KeyboardInterrupt):
    _train(tmp_path, first, kind)
  store = checkpoints.TrainingStateCheckpoints(str(tmp_path))
  assert store.latest() == at  # No round of the plan's checkpoints.
  with np.load(os.path.join(tmp_path, f'round_{at:08d}.npz')) as saved:
    # The round of the block the interrupt left unscored: 1 of {1, 2}, or
    # 4 of {4, 5}.
    assert len(saved['pending']) == 1
  second = tiny_jax.Recorder()
  resumed = _train(tmp_path, second, kind)
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (
      at, _ROUNDS - at)
  records = [e for e in first.events + second.events
             if isinstance(e, round_record.RoundRecord)]
  cosines = [e for e in first.events + second.events
             if isinstance(e, round_record.CanaryCosines)]
  # Every round once, the interrupted round's record before the interrupt;
  # every round's cosines once, those left unscored from the resumed run.
  ordered = sorted(records, key=lambda e: e.round_num) + cosines
  reference = ([e for e in expected_events
                if isinstance(e, round_record.RoundRecord)] +
               [e for e in expected_events
                if isinstance(e, round_record.CanaryCosines)])
  assert len(ordered) == len(reference)
  assert all(map(_same, ordered, reference))
  for field in ('final_cosines', 'final_unseen_cosines', 'seen_maxima',
                'unseen_maxima', 'decorrelated_seen', 'decorrelated_unseen'):
    ours, theirs = getattr(resumed, field), getattr(expected, field)
    assert (ours is None) == (theirs is None), field
    if ours is not None:
      np.testing.assert_array_equal(ours, theirs, err_msg=field)


# The launcher, as a user runs it: 12 rounds, checkpoints at 0 and 12 only
# (--rounds_per_checkpoint's default), blocks of 3 rounds.
_FLAGS = [
    '--backend=jax', '--task=emnist_character', '--use_synthetic_data',
    '--synthetic_num_clients=12', '--synthetic_examples_per_client=8',
    '--clients_per_round=3', '--total_rounds=12', '--client_batch_size=4',
    '--noise_multiplier=0.05', '--num_canaries=4', '--num_unseen_canaries=16',
    '--canary_repeats=2', '--rounds_per_evaluation=2',
    '--canary_buffer_rounds=3', '--max_eval_examples=16', '--noprogress_bar',
    '--run_name=run']
_RESULT_FILES = (run_directory.FINAL_COSINES_FILE,
                 run_directory.MAX_COSINES_FILE,
                 run_directory.REPORT_JSON_FILE,
                 run_directory.REPORT_MARKDOWN_FILE,
                 run_directory.METRICS_FILE, run_directory.CANARY_COSINES_FILE)
_LINE = re.compile(r'interrupted after round (\d+) of 12; rerun the same '
                   r'command to resume from round \1$')


def _environment(cache: str) -> dict[str, str]:
  # The launches share compiled programs (the same bits, compiled once).
  return dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')


def _command(root: str) -> list[str]:
  return [sys.executable, '-m', 'experiments.train', *_FLAGS,
          f'--root_output_dir={root}']


def _read(run_dir: str, name: str):
  """The file's bytes; for metrics.csv, its rows less wall-clock times."""
  path = os.path.join(run_dir, name)
  if name != run_directory.METRICS_FILE:
    with open(path, 'rb') as stream:
      return stream.read()
  with open(path, newline='') as stream:
    return [{key: value for key, value in row.items()
             if not key.endswith('time_in_seconds')}
            for row in csv.DictReader(stream)]


def _interrupt(root: str, env: dict[str, str], signum: int,
               after: int) -> int:
  """Runs the command; sends `signum` once round `after` is marked.

  Returns:
    The round the stopped run saved, from its line.
  """
  marker = os.path.join(root, 'run', run_directory.PROGRESS_FILE)
  with subprocess.Popen(_command(root), cwd=_REPO, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, start_new_session=True) as process:
    try:
      deadline = time.monotonic() + 300
      while (run_directory.read_progress(os.path.dirname(marker)) or 0
             ) < after:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f'round {after} never came'
        time.sleep(0.01)
      os.killpg(process.pid, signum)  # As a terminal does: the group.
      _, stderr = process.communicate(timeout=300)
    finally:
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
  assert process.returncode == 130, (after, stderr[-3000:])
  assert 'Traceback' not in stderr, stderr[-3000:]
  match = _LINE.match(stderr.strip().splitlines()[-1])
  assert match, (after, stderr[-3000:])
  saved = int(match.group(1))
  assert saved >= after - 1, (after, saved)
  assert os.path.exists(os.path.join(root, 'run', run_directory.CHECKPOINT_DIR,
                                     f'round_{saved:08d}.npz'))
  return saved


def _kill(root: str, env: dict[str, str], after: int) -> int:
  """Runs the command; kills it with SIGKILL once round `after` is marked.

  Returns:
    The last round the killed run marked.
  """
  run_dir = os.path.join(root, 'run')
  with subprocess.Popen(_command(root), cwd=_REPO, env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True) as process:
    try:
      deadline = time.monotonic() + 300
      while (run_directory.read_progress(run_dir) or 0) < after:
        assert process.poll() is None, 'the run ended before it was killed'
        assert time.monotonic() < deadline, f'round {after} never came'
        time.sleep(0.01)
    finally:
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
  return run_directory.read_progress(run_dir)


@pytest.mark.slow
def test_the_launcher_stopped_twice_ends_as_an_uninterrupted_run(
    tmp_path_factory):
  env = _environment(str(tmp_path_factory.mktemp('jax_cache')))
  reference = str(tmp_path_factory.mktemp('reference'))
  done = programs.run(_command(reference), cwd=_REPO, env=env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  root = str(tmp_path_factory.mktemp('stopped'))
  first = random.randint(2, 4)
  saved = _interrupt(root, env, signal.SIGINT, first)
  second = _interrupt(root, env, signal.SIGTERM, saved + 2)
  assert saved < second < 11, (first, saved, second)
  reached = _kill(root, env, second + 1)
  assert second < reached < 12, (second, reached)  # Between checkpoints.
  lost = reached - second
  rerun = programs.run(_command(root), cwd=_REPO, env=env, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert (f'resumed from round {second}; the previous invocation had '
          f'completed round {reached}: {lost} round{"s" if lost > 1 else ""} '
          f'lost (ended between checkpoints); trained {12 - second} now'
          ) in rerun.stdout, rerun.stdout
  for name in _RESULT_FILES:
    assert _read(os.path.join(root, 'run'), name) == _read(
        os.path.join(reference, 'run'), name), (name, first, saved, second)
