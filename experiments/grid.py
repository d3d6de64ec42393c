"""The grid of a config: which runs, and running or resuming them (Section 5).

For every noise multiplier and number of canary repetitions of a config's
grid ("# grid: --FLAG=V1,V2,..." lines, `parse_grid`), one DP-FedAvg run with
canaries (`experiments.train.run_training`) in its own run directory
`runs/noise<N>_rep<R>/` (`grid_configs`); `accuracy_configs` the same noise
levels without canaries and `experiments.table5` Table 5's runs. `run_grid`
validates every run before the first starts, then runs, resumes or skips
each (a run whose report.json exists is finished) and reads each back as a
`GridRun`: its typed `run_report.RunReport` and final-model cosines.

Who runs the runs is an `Executor`: `sequential` (one after the other, in
this process) or `experiments.ray_executor.RayExecutor` (Ray tasks, on one
machine or a cluster sharing the output directory). Either only trains;
the runs are then read back from their directories here, so the tables do
not depend on the executor.
"""

import csv
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from experiments import table5
from experiments import train
from experiments import train_config
from one_shot_epe import run_directory
from one_shot_epe import run_report

__all__ = ['Executor', 'GRID_FLAGS', 'GRID_PREFIX', 'GridRun', 'RUNS_DIR',
           'accuracy_configs', 'baseline_accuracy', 'grid_configs',
           'load_run', 'parse_grid', 'run_grid', 'run_table5', 'scale_config',
           'sequential', 'train_unless_reported']

GRID_PREFIX = '# grid: --'
GRID_FLAGS = ('noise_multiplier', 'canary_repeats')
RUNS_DIR = 'runs'

T = TypeVar('T')
# Runs `task(config)` for every config (a run each); returns the results in
# the order of the configs.
Executor = Callable[[Callable[[train_config.TrainConfig], T],
                     Sequence[train_config.TrainConfig]], list[T]]


def sequential(task: Callable[[train_config.TrainConfig], T],
               configs: Sequence[train_config.TrainConfig]) -> list[T]:
  """The default `Executor`: each run in turn, in this process."""
  return [task(config) for config in configs]


def parse_grid(path: str) -> dict[str, list[str]]:
  """The "# grid: --FLAG=V1,V2,..." lines of a flagfile: flag -> values.

  Raises:
    ValueError: a grid line is malformed or names a flag twice.
  """
  grid = {}
  with open(path, encoding='utf-8') as stream:
    for number, line in enumerate(stream, 1):
      if not line.startswith(GRID_PREFIX):
        continue
      flag, sep, values = line[len(GRID_PREFIX):].strip().partition('=')
      items = [value.strip() for value in values.split(',')]
      if not sep or not flag or not all(items):
        raise ValueError(f'config {path} line {number}: a grid line must '
                         f'read "{GRID_PREFIX}FLAG=V1,V2,..."; got '
                         f'{line.strip()!r}.')
      if flag in grid:
        raise ValueError(f'config {path} line {number}: grid flag --{flag} '
                         'is listed twice.')
      grid[flag] = items
  return grid


def scale_config(config: train_config.TrainConfig,
                 scale: float) -> train_config.TrainConfig:
  """Shrinks rounds, clients and canaries by `scale` (see module docstring).

  Raises:
    ValueError: `scale` is not in (0, 1].
  """
  if (isinstance(scale, bool) or not isinstance(scale, (int, float)) or
      not 0.0 < scale <= 1.0):
    raise ValueError(f'--scale must be a number in (0, 1]; got {scale!r}.')

  def times(value: int, minimum: int) -> int:
    return max(minimum, int(round(value * scale)))

  changes: dict[str, Any] = {
      'clients_per_round': times(config.clients_per_round, 1)}
  if config.total_rounds is not None:
    changes['total_rounds'] = times(config.total_rounds, 1)
  if config.train_epochs is not None:
    changes['train_epochs'] = times(config.train_epochs, 1)
  if config.use_synthetic_data:
    changes['synthetic_num_clients'] = times(
        config.synthetic_num_clients, changes['clients_per_round'])
  for name in ('num_canaries', 'num_unseen_canaries'):
    if getattr(config, name):
      changes[name] = times(getattr(config, name), 2)
  return dataclasses.replace(config, **changes)


def grid_configs(base: train_config.TrainConfig,
                 noise_multipliers: Sequence[float],
                 repetitions: Sequence[int],
                 output_dir: str) -> list[train_config.TrainConfig]:
  """One config per (noise, repetitions), noise-major, in its own run dir."""
  return [
      dataclasses.replace(base, noise_multiplier=noise, canary_repeats=repeats,
                          root_output_dir=os.path.join(output_dir, RUNS_DIR),
                          run_name=f'noise{noise:g}_rep{repeats}')
      for noise in noise_multipliers for repeats in repetitions
  ]


@dataclasses.dataclass(frozen=True)
class GridRun:
  """A finished run of the grid, read back from its run directory."""
  noise_multiplier: float
  canary_repeats: int
  run_dir: str
  report: run_report.RunReport  # The run's report.json.
  final_cosines: np.ndarray


def _read_column(path: str, column: str) -> np.ndarray:
  with open(path, newline='', encoding='utf-8') as stream:
    return np.array([float(row[column]) for row in csv.DictReader(stream)
                     if row[column] != ''])


def load_run(config: train_config.TrainConfig) -> GridRun:
  """Reads a finished run's report.json and final cosines."""
  run_dir = config.run_dir
  report = run_report.RunReport.read(
      os.path.join(run_dir, run_directory.REPORT_JSON_FILE))
  return GridRun(noise_multiplier=config.noise_multiplier,
                 canary_repeats=config.canary_repeats, run_dir=run_dir,
                 report=report,
                 final_cosines=_read_column(
                     os.path.join(run_dir, run_directory.FINAL_COSINES_FILE),
                     'cosine'))


def train_unless_reported(config: train_config.TrainConfig) -> None:
  """Runs (or resumes) `config` unless its report is written."""
  if not os.path.exists(os.path.join(config.run_dir,
                                     run_directory.REPORT_JSON_FILE)):
    print(f'Running {config.run_dir}', flush=True)
    train.run_training(config)


def baseline_accuracy(config: train_config.TrainConfig) -> float:
  """Trains (or re-evaluates) a run without canaries; its final accuracy."""
  print(f'Running {config.run_dir}', flush=True)
  return train.run_training(config).accuracy


def run_grid(
    configs: Sequence[train_config.TrainConfig],
    baseline_configs: Sequence[train_config.TrainConfig] = (),
    executor: Executor = sequential
) -> tuple[list[GridRun], dict[float, float]]:
  """Validates every config, then runs (or resumes, or skips) each.

  `configs` are the grid's runs with canaries: one whose report.json exists is
  finished (`prepare` has checked that its directory holds a run with the
  same flags) and is not run again. `baseline_configs` are runs without
  canaries (`accuracy_configs`); a finished one is not trained again, only
  re-evaluated, as it writes no report to read its accuracy from.
  `executor` runs them (`sequential`: in turn, in this process).

  Returns:
    The grid's runs, and the final accuracy of each baseline by noise.

  Raises:
    train_config.ConfigError: before any run starts, for the first invalid
      config.
  """
  prepared = [train.prepare(config).config for config in configs]
  baselines = [train.prepare(config).config for config in baseline_configs]
  for config in prepared:
    if config.num_canaries == 0:
      raise train_config.ConfigError('--num_canaries must be >= 2 for the '
                                     'privacy grid; got 0.')
  executor(train_unless_reported, prepared)
  runs = [load_run(config) for config in prepared]
  accuracies = dict(zip([config.noise_multiplier for config in baselines],
                        executor(baseline_accuracy, baselines)))
  return runs, accuracies


def run_table5(experiments: Sequence[table5.Experiment],
               executor: Executor = sequential) -> str:
  """Runs (or resumes, or skips) Table 5's runs; returns the table.

  Each run is validated as it starts (`train.run_training`);
  `experiments.reproduce` validates them all before its first run.
  `executor` runs them (`sequential`: in turn, in this process).

  Raises:
    train_config.ConfigError: for an invalid config.
  """
  executor(train_unless_reported,
           [config for experiment in experiments
            for config in experiment.configs])
  estimates: dict[tuple[float, str], list[float]] = {}
  for experiment in experiments:
    runs = [load_run(config) for config in experiment.configs]
    estimates.setdefault((experiment.noise_multiplier, experiment.arm),
                         []).append(table5.pooled_epsilon(
                             [run.final_cosines for run in runs],
                             runs[0].report.dim, runs[0].report.delta))
  return table5.table(estimates)


def accuracy_configs(base: train_config.TrainConfig,
                     noise_multipliers: Sequence[float],
                     output_dir: str) -> list[train_config.TrainConfig]:
  """The accuracy baseline: each noise multiplier without any canaries."""
  return [
      dataclasses.replace(base, noise_multiplier=noise, num_canaries=0,
                          num_unseen_canaries=0, canary_repeats=1,
                          root_output_dir=os.path.join(output_dir, RUNS_DIR),
                          run_name=f'noise{noise:g}_nocanaries')
      for noise in noise_multipliers
  ]
