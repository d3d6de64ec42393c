"""The grid of a config: which runs, and running or resuming them (Section 5).

For every noise multiplier and number of canary repetitions of a config's
grid ("# grid: --FLAG=V1,V2,..." lines, `parse_grid`), one DP-FedAvg run with
canaries (`experiments.train.run_training`) in its own run directory
`runs/noise<N>_rep<R>/` (`grid_configs`); `accuracy_configs` the same noise
levels without canaries and `experiments.table5` Table 5's runs. `run_grid`
validates every run before the first starts, then runs, resumes or skips
each (a run whose report.json exists is finished) and reads each back as a
`GridRun`: its typed `run_report.RunReport` and final-model cosines.

The unit of work is a program (`programs`): one run, or with
--runs_per_program=R on the JAX engine up to R runs that share every shape
(`train_config.program_key`) trained as one program (a run axis on
accelerators, the runs in turn on a CPU: `experiments.train.run_program`);
each run still has its own run
directory. Who runs the programs is an `Executor`: `sequential` (one after
the other, in this process) or `experiments.ray_executor.RayExecutor` (Ray
tasks, on one machine or a cluster sharing the output directory). Either
only trains; the runs are then read back from their directories here, so
the tables depend on neither the executor nor the programs. Ctrl-C or
SIGTERM stops the grid with the line of the runs it interrupted, each saved
after its last completed round (`experiments.train.run_program`); a rerun
skips the finished runs and resumes those.
"""

import csv
import dataclasses
import io
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from experiments import run_outputs
from experiments import table5
from experiments import train
from experiments import train_config
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import run_directory
from one_shot_epe.reporting import run_report

__all__ = ['Executor', 'GRID_FLAGS', 'GRID_PREFIX', 'GridRun', 'Program',
           'RUNS_DIR', 'accuracy_configs', 'baseline_accuracy', 'grid_configs',
           'load_run', 'parse_grid', 'programs', 'run_grid', 'run_table5',
           'scale_config', 'sequential', 'train_unless_reported']

GRID_PREFIX = '# grid: --'
GRID_FLAGS = ('noise_multiplier', 'canary_repeats')
RUNS_DIR = 'runs'

T = TypeVar('T')
# The runs trained as one program (`programs`; one run by default).
Program = tuple[train_config.TrainConfig, ...]
# Runs `task(program)` for every program; returns the results in the order
# of the programs.
Executor = Callable[[Callable[[Program], T], Sequence[Program]], list[T]]


def sequential(task: Callable[[Program], T],
               programs: Sequence[Program]) -> list[T]:
  """The default `Executor`: each program in turn, in this process.

  Args:
    task: What to do with one program.
    programs: The programs.

  Returns:
    `task`'s result for each program, in order.
  """
  return [task(program) for program in programs]


def programs(configs: Sequence[train_config.TrainConfig],
             runs_per_program: int = 1) -> list[Program]:
  """The configs grouped into programs of at most `runs_per_program` runs.

  Runs share a program only if they share every flag but
  `train_config.PROGRAM_DIFFERENCES` (`train_config.program_key`); groups
  keep the configs' order and are cut into consecutive chunks.

  Args:
    configs: The runs' configs.
    runs_per_program: The most runs one program may train.

  Returns:
    The programs, each a tuple of configs.

  Raises:
    train_config.ConfigError: `runs_per_program` is not an integer >= 1, or
      is > 1 for an engine that trains one run at a time or runs with data
      canaries (`train.check_runs_per_program`).
  """
  if (isinstance(runs_per_program, bool) or
      not isinstance(runs_per_program, int) or runs_per_program < 1):
    raise train_config.ConfigError('--runs_per_program must be an integer '
                                   f'>= 1; got {runs_per_program!r}.')
  groups: dict[Any, list[train_config.TrainConfig]] = {}
  for config in configs:
    train.check_runs_per_program(config.backend, runs_per_program,
                                 config.canary_kind)
    groups.setdefault(train_config.program_key(config), []).append(config)
  return [tuple(group[i:i + runs_per_program]) for group in groups.values()
          for i in range(0, len(group), runs_per_program)]


def parse_grid(path: str) -> dict[str, list[str]]:
  """The "# grid: --FLAG=V1,V2,..." lines of a flagfile: flag -> values.

  Args:
    path: The flagfile.

  Returns:
    Each grid flag's values, as written.

  Raises:
    bounded_reads.InputRefused: the file is not a flagfile
      (`bounded_reads.FLAGFILES`).
    ValueError: a grid line is malformed or names a flag twice.
  """
  grid = {}
  text = bounded_reads.read_text(path, bounded_reads.FLAGFILES, '--config')
  for number, line in enumerate(text.splitlines(), 1):
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
  """Shrinks rounds, clients and canaries by `scale`.

  Rounds (--total_rounds or --train_epochs), clients per round, synthetic
  clients and canaries are multiplied by `scale` and rounded (see
  `experiments.reproduce`). One exception keeps the run shorter than the
  full one: with real data and --train_epochs, the number of clients is
  fixed, so fewer clients per round would make each epoch longer (EMNIST at
  0.05: 677 rounds of 5 clients instead of 510 of 101); there the clients
  per round are kept and only the epochs shrink.

  Args:
    config: The full run's config.
    scale: The factor, in (0, 1].

  Returns:
    The scaled config.

  Raises:
    ValueError: `scale` is not in (0, 1].
  """
  if (isinstance(scale, bool) or not isinstance(scale, (int, float)) or
      not 0.0 < scale <= 1.0):
    raise ValueError(f'--scale must be a number in (0, 1]; got {scale!r}.')

  def times(value: int, minimum: int) -> int:
    return max(minimum, int(round(value * scale)))

  changes: dict[str, Any] = {}
  if config.use_synthetic_data or config.train_epochs is None:
    changes['clients_per_round'] = times(config.clients_per_round, 1)
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
  """One config per (noise, repetitions), noise-major, in its own run dir.

  Args:
    base: The (scaled) config every grid point starts from.
    noise_multipliers: The grid's noise multipliers.
    repetitions: The grid's canary repetitions.
    output_dir: The grid's directory; runs go to its runs/ folder.

  Returns:
    The grid points' configs.
  """
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


def _read_column(path: str, column: str, rows: int) -> np.ndarray:
  """A column of a run's cosine CSV of `rows` rows (`bounded_reads`)."""
  text = bounded_reads.read_text(path, bounded_reads.cosine_csv(rows))
  return np.array([float(row[column]) for row in csv.DictReader(
      io.StringIO(text, newline='')) if row[column] != ''])


def load_run(config: train_config.TrainConfig) -> GridRun:
  """Reads a finished run's report.json and final cosines.

  Args:
    config: The run's config (its run directory).

  Returns:
    The run, read back.
  """
  run_dir = config.run_dir
  report = run_report.RunReport.read(
      os.path.join(run_dir, run_directory.REPORT_JSON_FILE))
  return GridRun(noise_multiplier=config.noise_multiplier,
                 canary_repeats=config.canary_repeats, run_dir=run_dir,
                 report=report,
                 final_cosines=_read_column(
                     os.path.join(run_dir, run_directory.FINAL_COSINES_FILE),
                     'cosine', max(config.num_canaries,
                                   config.num_unseen_canaries)))


def _run_program(program: Program) -> list[train.RunResult]:
  """Trains (or resumes) the runs; prints each one's rounds line.

  Raises:
    interrupts.Interrupted: for Ctrl-C or SIGTERM, naming each run and the
      round it resumes from.
  """
  for config in program:
    print(f'Running {config.run_dir}', flush=True)
  results = train.run_program(program, name_runs=True)
  for result in results:
    print(f'{result.run_dir}: {run_outputs.rounds_line(result)}', flush=True)
  return results


def train_unless_reported(program: Program) -> None:
  """Runs (or resumes) the program's runs whose report is not written.

  Args:
    program: The runs' configs.
  """
  pending = [config for config in program if not os.path.exists(
      os.path.join(config.run_dir, run_directory.REPORT_JSON_FILE))]
  if pending:
    _run_program(pending)


def baseline_accuracy(program: Program) -> list[float]:
  """Trains (or re-evaluates) runs without canaries; their final accuracy.

  Args:
    program: The runs' configs (without canaries).

  Returns:
    Each run's final test accuracy, in order.
  """
  return [result.accuracy for result in _run_program(program)]


def run_grid(
    configs: Sequence[train_config.TrainConfig],
    baseline_configs: Sequence[train_config.TrainConfig] = (),
    executor: Executor = sequential, runs_per_program: int = 1
) -> tuple[list[GridRun], dict[float, float]]:
  """Validates every config, then runs (or resumes, or skips) each.

  `configs` are the grid's runs with canaries: one whose report.json exists is
  finished (`prepare` has checked that its directory holds a run with the
  same flags) and is not run again. `baseline_configs` are runs without
  canaries (`accuracy_configs`); a finished one is not trained again, only
  re-evaluated, as it writes no report to read its accuracy from.
  `executor` runs them (`sequential`: in turn, in this process), in
  `programs` of at most `runs_per_program` runs (baselines: one each).

  Args:
    configs: The grid's runs with canaries.
    baseline_configs: Runs without canaries, for the accuracy table.
    executor: What runs the programs.
    runs_per_program: The most runs one program trains.

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
  executor(train_unless_reported, programs(prepared, runs_per_program))
  runs = [load_run(config) for config in prepared]
  accuracies = dict(zip(
      [config.noise_multiplier for config in baselines],
      [accuracy for program in executor(baseline_accuracy,
                                        programs(baselines))
       for accuracy in program]))
  return runs, accuracies


def run_table5(experiments: Sequence[table5.Experiment],
               executor: Executor = sequential,
               runs_per_program: int = 1) -> str:
  """Runs (or resumes, or skips) Table 5's runs; returns the table.

  Each run is validated as it starts (`train.run_training`);
  `experiments.reproduce` validates them all before its first run.
  `executor` runs them (`sequential`: in turn, in this process), in
  `programs` of at most `runs_per_program` runs: an R-run experiment's
  runs, and the experiments of one arm, share their shapes.

  Args:
    experiments: Table 5's experiments (`table5.experiments`).
    executor: What runs the programs.
    runs_per_program: The most runs one program trains.

  Returns:
    The Markdown of table5.md.

  Raises:
    train_config.ConfigError: for an invalid config.
  """
  executor(train_unless_reported,
           programs([config for experiment in experiments
                     for config in experiment.configs], runs_per_program))
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
  """The accuracy baseline: each noise multiplier without any canaries.

  Args:
    base: The grid's base config.
    noise_multipliers: The grid's noise multipliers.
    output_dir: The grid's directory; runs go to its runs/ folder.

  Returns:
    One config per noise multiplier, with --num_canaries=0.
  """
  return [
      dataclasses.replace(base, noise_multiplier=noise, num_canaries=0,
                          num_unseen_canaries=0, canary_repeats=1,
                          root_output_dir=os.path.join(output_dir, RUNS_DIR),
                          run_name=f'noise{noise:g}_nocanaries')
      for noise in noise_multipliers
  ]
