"""Tests of many runs in one program (`experiments.train.run_program`).

Independent truths: the same runs trained one at a time (with the JAX
engine's CPU strategy, 'loop', so the program's 'vmap' run axis is checked
against another computation of the same rounds, and the program's 'loop'
strategy, the runs in turn, against the runs alone), compared file by file
in their run directories by the launcher and round by round by the engine;
a run resumed from a later checkpoint than the others against its
uninterrupted self; the padding the runs alone processed; the flags that
fix a shape.
"""

import csv
import json
import os
import shutil

import numpy as np
import pytest

from experiments import grid
from experiments import train
from experiments import train_config
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import run_stats
from one_shot_epe.jax_engine import training

import tiny_jax

# Per-round wall-clock time differs between any two runs.
_TIMES = ('training_time_in_seconds',)
_COMPARED = (run_directory.METRICS_FILE, run_directory.CANARY_COSINES_FILE,
             run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE)


def _config(root, name: str, **overrides) -> train_config.TrainConfig:
  settings = dict(backend='jax', task='emnist_character',
                  use_synthetic_data=True, synthetic_num_clients=4,
                  synthetic_examples_per_client=8,
                  synthetic_client_sizes='realistic', clients_per_round=2,
                  sampling='poisson', total_rounds=2, num_canaries=4,
                  num_unseen_canaries=4, client_batch_size=8,
                  rounds_per_checkpoint=1, clipping_norm=1.0,
                  progress_bar=False, root_output_dir=str(root),
                  run_name=name)
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


# Two runs that differ in the flags a program's runs may differ in.
_RUNS = (dict(noise_multiplier=0.1, seed=1, canary_seed=7),
         dict(noise_multiplier=0.5, seed=2, canary_seed=8, delta=1e-4))


def _rows(path) -> list[dict[str, str]]:
  with open(path, newline='', encoding='utf-8') as stream:
    return list(csv.DictReader(stream))


def _assert_same_values(ours, theirs, where: str) -> None:
  """Equal structure; numbers equal to float rounding, text equal."""
  if isinstance(ours, dict):
    assert sorted(ours) == sorted(theirs), where
    for key in ours:
      _assert_same_values(ours[key], theirs[key], f'{where}.{key}')
  elif isinstance(ours, list):
    assert len(ours) == len(theirs), where
    for i, (a, b) in enumerate(zip(ours, theirs)):
      _assert_same_values(a, b, f'{where}[{i}]')
  elif isinstance(ours, (int, float)) and not isinstance(ours, bool):
    np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=1e-6,
                               err_msg=where)
  else:
    assert ours == theirs, where


def _assert_same_run(ours: str, theirs: str) -> None:
  with open(os.path.join(ours, run_directory.REPORT_JSON_FILE)) as f:
    report = json.load(f)
  with open(os.path.join(theirs, run_directory.REPORT_JSON_FILE)) as f:
    _assert_same_values(report, json.load(f), 'report')
  for name in _COMPARED:
    rows, expected = _rows(os.path.join(ours, name)), _rows(
        os.path.join(theirs, name))
    assert len(rows) == len(expected) > 0, name
    for row, other in zip(rows, expected):
      assert row.keys() == other.keys(), name
      for column in row:
        if column in _TIMES:
          continue
        try:
          np.testing.assert_allclose(float(row[column]), float(other[column]),
                                     rtol=2e-4, atol=1e-6,
                                     err_msg=f'{name}:{column}')
        except ValueError:
          assert row[column] == other[column], f'{name}:{column}'


@pytest.mark.slow
def test_runs_in_one_program_write_what_separate_runs_write(tmp_path):
  alone = [train.run_training(_config(tmp_path / 'alone', f'r{i}', **flags))
           for i, flags in enumerate(_RUNS)]
  together = train.run_program([
      _config(tmp_path / 'program', f'r{i}', **flags)
      for i, flags in enumerate(_RUNS)])
  for ours, theirs in zip(together, alone):
    assert ours.rounds_trained == theirs.rounds_trained == 2
    _assert_same_run(ours.run_dir, theirs.run_dir)


def _plan(run: int) -> run_plan.RunPlan:
  """Run `run` of three: its own seeds, canaries and noise multiplier."""
  return run_plan.RunPlan(
      sampler=participation.PoissonSampling(12, 4.0, seed=run),
      spec=canary_spec.CanarySpec(seed=3 + run, num_seen=4, num_unseen=4,
                                  schedule=[[0], [1, 2], [], [3], []],
                                  buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=(0.3, 0.4, 0.3)[run],
                                   clients_per_round=4.8),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', 1.0), batch_size=2,
      epochs=1, max_examples=None, total_rounds=5, seed=4 + run,
      noise_seed=None, rounds_per_checkpoint=3)


@pytest.mark.slow
@pytest.mark.parametrize('local_training', ['vmap', 'loop'])
def test_a_run_resumed_later_sits_the_programs_first_rounds_out(
    tmp_path, local_training):
  arrays = tiny_jax.arrays()
  alone = []
  for run in range(3):
    recorder = tiny_jax.Recorder()
    alone.append((training.train(
        _plan(run), tiny_jax.MODEL, arrays, arrays,
        checkpoints.TrainingStateCheckpoints(str(tmp_path / f'alone{run}')), recorder,
        local_training='loop'), recorder.events))
  # Run 1 was killed after its round-3 checkpoint: it resumes there while
  # the others start from round 0.
  shutil.copytree(tmp_path / 'alone1', tmp_path / 'program1')
  store = checkpoints.TrainingStateCheckpoints(str(tmp_path / 'program1'))
  os.unlink(os.path.join(store.directory, 'round_00000005.npz'))
  recorders = [tiny_jax.Recorder() for _ in range(3)]
  stats = run_stats.RunStats()
  together = training.train_program(
      [training.ProgramRun(_plan(run), checkpoints.TrainingStateCheckpoints(
          str(tmp_path / f'program{run}')), recorders[run])
       for run in range(3)], tiny_jax.MODEL, arrays, arrays,
      local_training=local_training, stats=stats)
  assert [o.resumed_from_round for o in together] == [0, 3, 0]
  assert stats.rounds == 5
  for run, (ours, (theirs, events)) in enumerate(zip(together, alone)):
    np.testing.assert_allclose(ours.final_cosines, theirs.final_cosines,
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours.seen_maxima, theirs.seen_maxima,
                               rtol=1e-4, atol=1e-6)
    assert ours.accuracy == pytest.approx(theirs.accuracy, abs=0.02)
    # The rounds it trained now, reported as its own run reports them.
    rounds = [e.round_num for e in recorders[run].events
              if isinstance(e, round_record.RoundRecord)]
    # (A run that starts now reports round 0's evaluation first.)
    assert rounds == ([4, 5] if run == 1 else [0, 1, 2, 3, 4, 5])
    clips = {e.round_num: e.clip for e in events
             if isinstance(e, round_record.RoundRecord)}
    for event in recorders[run].events:
      if isinstance(event, round_record.CanaryCosines):
        expected = next(e for e in events
                        if isinstance(e, round_record.CanaryCosines) and
                        e.round_num == event.round_num)
        np.testing.assert_allclose(event.seen_mean, expected.seen_mean,
                                   rtol=1e-4, atol=1e-6)
      else:
        assert event.clip == pytest.approx(clips[event.round_num])


@pytest.mark.slow
def test_a_loop_program_runs_its_runs_in_turn_as_they_run_alone(tmp_path):
  # 'loop' (the CPU's strategy, `round_engine.default_local_training`) for
  # the run axis too: the program processes exactly the examples of its
  # runs alone and ends where they end.
  arrays = tiny_jax.arrays()
  alone, padded = [], 0
  for run in range(2):
    stats = run_stats.RunStats()
    alone.append(training.train(
        _plan(run), tiny_jax.MODEL, arrays, None,
        checkpoints.TrainingStateCheckpoints(str(tmp_path / f'alone{run}')),
        local_training='loop', stats=stats))
    padded += stats.padded_examples
  stats = run_stats.RunStats()
  together = training.train_program(
      [training.ProgramRun(_plan(run), checkpoints.TrainingStateCheckpoints(
          str(tmp_path / f'program{run}'))) for run in range(2)],
      tiny_jax.MODEL, arrays, None, local_training='loop', stats=stats)
  assert stats.padded_examples == padded
  assert stats.padded_examples < stats.vmap_padded_examples
  for ours, theirs in zip(together, alone):
    np.testing.assert_allclose(ours.final_cosines, theirs.final_cosines,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours.seen_maxima, theirs.seen_maxima,
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('flags,names', [
    (dict(client_batch_size=4), ('--runs_per_program', '--client_batch_size')),
    (dict(num_canaries=2), ('--runs_per_program', '--num_canaries')),
])
def test_runs_that_differ_in_a_shape_are_refused_before_writing(
    tmp_path, flags, names):
  configs = [_config(tmp_path, 'a'), _config(tmp_path, 'b', **flags)]
  with pytest.raises(train_config.ConfigError) as error:
    train.run_program(configs)
  assert all(name in str(error.value) for name in names), error.value
  assert not os.listdir(tmp_path)


def test_tff_runs_cannot_share_a_program():
  configs = [train_config.TrainConfig(run_name='a'),
             train_config.TrainConfig(run_name='b', seed=1)]
  # Without TensorFlow (the JAX environment) the engine itself is refused.
  with pytest.raises(train_config.ConfigError,
                     match='--runs_per_program=2 is not supported by '
                     '--backend=tff|--backend=tff needs'):
    grid.programs(configs, 2)
  with pytest.raises(train_config.ConfigError, match='--runs_per_program'):
    grid.programs(configs, 0)


def test_programs_group_runs_by_their_shared_flags_in_order(tmp_path):
  configs = [_config(tmp_path, f'r{i}', num_canaries=4 + 2 * (i % 2), seed=i)
             for i in range(5)]
  programs = grid.programs(configs, 2)
  assert [[c.run_name for c in p] for p in programs] == [
      ['r0', 'r2'], ['r4'], ['r1', 'r3']]
  assert [len(p) for p in grid.programs(configs, 1)] == [1] * 5
