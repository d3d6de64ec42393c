r"""Runs a config's grid (noise x canary repetitions) and writes the paper's tables.

Andrew et al., "One-shot Empirical Privacy Estimation for Federated Learning"
(ICLR 2024), Section 5: for every noise multiplier and every number of canary
repetitions of a config's grid, one DP-FedAvg run with canaries
(`experiments.train.run_training`: TFF or, with --backend=jax, the JAX
engine); then, from the runs' own `report.json`
and cosine CSVs:

  table.md            Tables 3 and 4, one block per repetition count r: the
                      paper's columns (noise, analytical eps at r
                      presentations, its nominal eps_lo and fitted eps_est
                      per threat model, accuracy); the accounted eps of a
                      real client, the last-iterate heuristic, the headline
                      eps_est with bootstrap intervals and the lower bounds
                      that hold (eps_lo, one-run, one-run f-DP); the
                      attack's summaries (eps_gdp, AUROC, TPR). The terminal
                      shows `summary_table`, at most 100 columns wide
  anderson.md         Table 6: Anderson-Darling A^2 of each cosine set
  results.json        the same numbers at full precision, one entry per run
  cosine_densities.png  Figures 1 and 3: final-model cosine densities, one
                      panel per noise multiplier, one curve per repetition
                      count, against the null N(0, 1/d)
  epsilon_final.png   Figures 2 and 4: eps_est-final bars, eps_lo-final ticks
  epsilon_all.png     the same for the all-iterates threat model
  accuracy.md         with --accuracy_table: final test accuracy of each
                      noise level without canaries (--num_canaries=0, run
                      in runs/noise<N>_nocanaries/) and with them, the
                      earlier version's table
  table5.md           with --table5_experiments=E: Table 5, quantiles of
                      eps_est-final over E experiments of one run with K
                      canaries and E of --table5_runs=R runs with K/R
                      canaries each (`experiments.table5`; runs in table5/)

  python -m experiments.reproduce --config=configs/demo.cfg
  python -m experiments.reproduce --config=configs/emnist.cfg \
      --data_dir=~/tff_data --scale=0.1 --output_dir=/tmp/emnist_grid

The grid comes from the config's "# grid: --FLAG=V1,V2,..." comment lines
(flags noise_multiplier and canary_repeats; a flag without a grid line takes
its single configured value); --noise_multipliers and --repetitions replace
them. Any flag of `experiments.train` given on the command line overrides the
config's value. --scale s in (0, 1] then multiplies, rounding to the nearest
integer: --total_rounds or --train_epochs (at least 1), --clients_per_round
(at least 1), --synthetic_num_clients (synthetic data only; at least the
scaled clients per round), and --num_canaries and --num_unseen_canaries when
nonzero (at least 2). With real data the number of clients is fixed, so there
scaling the clients per round lengthens an epoch.

The run of grid point (N, R) lives in --output_dir/runs/noise<N>_rep<R>/
(--root_output_dir and --run_name of the config are replaced); the whole grid
is validated (`train.prepare`: flags, data, and that existing run
directories hold runs with the same flags) before any run starts. A rerun
skips runs whose report is written and resumes unfinished ones from their
checkpoints. Each run is locked while it trains (`train.run_training`, one
writer per run directory): a run that another process is training (say, a
second reproduce on the same --output_dir) stops this program with status 2
naming the run directory and the holder's pid, rather than waiting an
unknown time for it or leaving it out of the tables; rerunning once the
holder has ended picks the run up. All output files are written atomically;
a failed write (a full disk) exits with status 2 naming the file and the
cause, and a rerun resumes. Bad flags exit with status 2 and a message
naming the flag.

With --backend=jax (on the command line or in the config) the program imports
neither TensorFlow nor TFF, so the grid runs on a machine with JAX alone (the
JAX engine's limits: `experiments.backend_jax`).
"""

import os
import sys

if __name__ == '__main__':
  # TFF runs: before TensorFlow (or numpy) starts a thread, the runs' local
  # TFF workers in a network namespace with only loopback. `main` imports
  # TensorFlow quietly once the flags have been checked. JAX runs need
  # neither.
  from one_shot_epe import cli as _cli
  if _cli.requested_backend(sys.argv, flagfile_flags=('config',)) != 'jax':
    from one_shot_epe.tff_engine import isolation
    isolation.isolate_program(sys.argv, flagfile_flags=('config',))

# pylint: disable=g-import-not-at-top,g-bad-import-order
import csv
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from absl import app
from absl import flags
from absl import logging
import numpy as np

from experiments import run_outputs
from experiments import table5
from experiments import train
from experiments import train_config
from one_shot_epe import atomic_io
from one_shot_epe import cli
from one_shot_epe import plots
from one_shot_epe import run_directory
from one_shot_epe.tff_engine import quiet
from one_shot_epe import write_failures

GRID_PREFIX = '# grid: --'
GRID_FLAGS = ('noise_multiplier', 'canary_repeats')
RUNS_DIR = 'runs'
TABLE_FILE = 'table.md'
ANDERSON_FILE = 'anderson.md'
RESULTS_FILE = 'results.json'
DENSITY_FILE = 'cosine_densities.png'
EPSILON_FINAL_FILE = 'epsilon_final.png'
EPSILON_ALL_FILE = 'epsilon_all.png'
ACCURACY_FILE = 'accuracy.md'
TABLE5_FILE = 'table5.md'


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
        raise ValueError(f'config {path} line {number}: a grid line must read '
                         f'"{GRID_PREFIX}FLAG=V1,V2,..."; got {line.strip()!r}.')
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
  report: dict[str, Any]  # The run's report.json.
  final_cosines: np.ndarray


def _read_column(path: str, column: str) -> np.ndarray:
  with open(path, newline='', encoding='utf-8') as stream:
    return np.array([float(row[column]) for row in csv.DictReader(stream)
                     if row[column] != ''])


def load_run(config: train_config.TrainConfig) -> GridRun:
  """Reads a finished run's report.json and final cosines."""
  run_dir = config.run_dir
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE),
            encoding='utf-8') as stream:
    report = json.load(stream)
  return GridRun(noise_multiplier=config.noise_multiplier,
                 canary_repeats=config.canary_repeats, run_dir=run_dir,
                 report=report,
                 final_cosines=_read_column(
                     os.path.join(run_dir, run_directory.FINAL_COSINES_FILE),
                     'cosine'))


def run_or_load(config: train_config.TrainConfig) -> GridRun:
  """Runs (or resumes) `config` unless its report is written; reads it back."""
  if not os.path.exists(os.path.join(config.run_dir, run_directory.REPORT_JSON_FILE)):
    print(f'Running {config.run_dir}', flush=True)
    train.run_training(config)
  return load_run(config)


def run_grid(
    configs: Sequence[train_config.TrainConfig],
    baseline_configs: Sequence[train_config.TrainConfig] = ()
) -> tuple[list[GridRun], dict[float, float]]:
  """Validates every config, then runs (or resumes, or skips) each in turn.

  `configs` are the grid's runs with canaries: one whose report.json exists is
  finished (`prepare` has checked that its directory holds a run with the
  same flags) and is not run again. `baseline_configs` are runs without
  canaries (`accuracy_configs`); a finished one is not trained again, only
  re-evaluated, as it writes no report to read its accuracy from.

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
  runs = [run_or_load(config) for config in prepared]
  accuracies = {}
  for config in baselines:
    print(f'Running {config.run_dir}', flush=True)
    accuracies[config.noise_multiplier] = train.run_training(config).accuracy
  return runs, accuracies


def run_table5(experiments: Sequence[table5.Experiment], output_dir: str
               ) -> str:
  """Runs (or resumes, or skips) Table 5's runs; writes and returns the table.

  Each run is validated as it starts (`train.run_training`); `main`
  validates them all before the first run of the whole program.

  Raises:
    train_config.ConfigError: for an invalid config.
  """
  estimates: dict[tuple[float, str], list[float]] = {}
  for experiment in experiments:
    runs = [run_or_load(config) for config in experiment.configs]
    estimates.setdefault((experiment.noise_multiplier, experiment.arm),
                         []).append(table5.pooled_epsilon(
                             [run.final_cosines for run in runs],
                             runs[0].report['dim'], runs[0].report['delta']))
  text = table5.table(estimates)
  atomic_io.write_text(os.path.join(output_dir, TABLE5_FILE), text)
  return text


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


def accuracy_table(runs: Sequence[GridRun],
                   without_canaries: Mapping[float, float]) -> str:
  """Final accuracy with and without canaries (the earlier version's table).

  One row per noise multiplier, one column per repetition count; the last
  column is the largest |accuracy change| over them, in percentage points.
  """
  by_point = {(run.noise_multiplier, run.canary_repeats): run for run in runs}
  repetitions = sorted({run.canary_repeats for run in runs})
  num_canaries = runs[0].report['final']['num_seen']
  lines = ['| noise | without canaries | ' + ' | '.join(
      f'with {num_canaries} canaries, {repeats} rep.'
      for repeats in repetitions) + ' | max change (points) |',
           '|---|---|' + '---|' * len(repetitions) + '---|']
  for noise, baseline in without_canaries.items():
    with_canaries = [by_point[(noise, repeats)].report['accuracy']
                     for repeats in repetitions]
    change = max(abs(value - baseline) for value in with_canaries) * 100
    lines.append(f'| {noise:g} | {baseline:.4f} | ' + ' | '.join(
        f'{value:.4f}' for value in with_canaries) + f' | {change:.2f} |')
  return '\n'.join(lines) + '\n'


def _number(value: float | None) -> str:
  """Table cell: None (an infinite analytical eps) is shown as infinity."""
  if value is None or (isinstance(value, float) and math.isinf(value)):
    return '∞'
  return f'{value:.4g}'


def _cell(report: Mapping[str, Any], key: str) -> str:
  """A robust-summary cell of report.json; n/a where the report lacks it."""
  value = report.get(key)
  return 'n/a' if value is None else _number(value)


def _interval_cell(report: Mapping[str, Any], key: str) -> str:
  """A bootstrap interval [low, high]; n/a where the report lacks it."""
  value = report.get(key)
  return 'n/a' if value is None else f'[{_number(value[0])}, {_number(value[1])}]'


def _tpr_cell(report: Mapping[str, Any], key: str, fpr: str) -> str:
  """TPR at one FPR ('0.01', '0.001'); n/a where the report lacks it."""
  value = report.get(key)
  return 'n/a' if value is None else _number(value[fpr])


def _accounted_cell(report: Mapping[str, Any]) -> str:
  """Accounted eps: None means infinite when a mechanism is given, else n/a."""
  if report.get('accounted_epsilon_mechanism') is None:
    return 'n/a'
  return _number(report['accounted_epsilon'])


def _blocks(runs: Sequence[GridRun]) -> list[tuple[int, list[GridRun]]]:
  """The runs grouped by canary repetitions r, ascending."""
  return [(repeats, [run for run in runs if run.canary_repeats == repeats])
          for repeats in sorted({run.canary_repeats for run in runs})]


def _setting_line(runs: Sequence[GridRun]) -> str:
  first = runs[0].report
  return (f'd = {first["dim"]}, δ = {first["delta"]:.3g}; bounds at '
          f'{1 - first["alpha"]:.0%} confidence.')


def summary_table(runs: Sequence[GridRun]) -> str:
  """The terminal's table: references, headline estimates, sound bounds.

  One row per run, at most 100 columns wide; `privacy_table` and each run's
  report.md hold the rest.
  """
  lines = [
      "**Privacy of the grid's runs**: estimates, and lower bounds that hold",
      '',
      '| noise | r | analytical | accounted | est-all | lo-all | est-final | '
      'lo-final | last-iter | acc. |',
      '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for _, block in _blocks(runs):
    for run in block:
      report = run.report
      lines.append(
          f'| {run.noise_multiplier:g} | {run.canary_repeats} | '
          f'{_number(report["analytical_epsilon"])} | '
          f'{_accounted_cell(report)} | '
          f'{_estimate_cell(report, "all")} | '
          f'{_cell(report, "epsilon_lo_all")} | '
          f'{_estimate_cell(report, "final")} | '
          f'{_cell(report, "epsilon_lo_final")} | '
          f'{_last_iterate_cell(report)} | {_number(report["accuracy"])} |')
  lines += [
      '',
      _setting_line(runs),
      'analytical: ε of a canary presented r times in known rounds; '
      'accounted: a real client,',
      'whole run (dp_accounting); last-iter: the last-iterate heuristic, '
      'reference for est-final.',
      'est-*: ε estimates (not bounds; ≥: the most the canaries can show); '
      'lo-*: lower bounds.',
      "acc.: accuracy. The paper's columns: table.md.",
  ]
  return '\n'.join(lines) + '\n'


def _estimate_cell(report: Mapping[str, Any], model: str) -> str:
  """A headline eps_est; '≥' in front when saturated (all seen above unseen)."""
  details = report.get('all_iterates' if model == 'all' else 'final') or {}
  mark = '≥' if details.get('epsilon_est_saturated') else ''
  return mark + _cell(report, f'epsilon_est_{model}')


def _last_iterate_cell(report: Mapping[str, Any]) -> str:
  """Last-iterate heuristic eps: None means infinite when it was computed."""
  if report.get('last_iterate_epsilon_mechanism') is None:
    return 'n/a'
  return _number(report['last_iterate_epsilon'])


def privacy_table(runs: Sequence[GridRun]) -> str:
  """Tables 3/4 and beside them the sound bounds: one block per repetition count.

  Per block: the paper's columns as the paper computes them (analytical eps
  at the block's r presentations; eps_lo the nominal Sec. 5.1 bound, eps_est
  Algorithms 2-3 with fitted variances); the references, the headline
  estimates with their bootstrap intervals and the lower bounds that hold
  (eps_lo, one-run, one-run f-DP) per threat model; the attack's summaries
  (Gaussian-DP eps from the mean shift, AUROC, TPR at FPR 1e-2 and 1e-3).
  """
  lines = []
  models = ('all', 'final')
  for repeats, block in _blocks(runs):
    lines += [
        f'**{repeats} canary repetition{"s" if repeats != 1 else ""}**',
        '',
        "The paper's columns (Tables 3-4; its ε_lo is nominal only):",
        '',
        f'| noise | analytical ε (r = {repeats}) | ε_lo-all | ε_est-all | '
        'ε_lo-final | ε_est-final | accuracy |',
        '|---|---|---|---|---|---|---|',
    ]
    lines += [
        f'| {run.noise_multiplier:g} | '
        f'{_number(run.report["analytical_epsilon"])} | '
        f'{_cell(run.report, "epsilon_lo_paper_all")} | '
        f'{_cell(run.report, "epsilon_est_fitted_all")} | '
        f'{_cell(run.report, "epsilon_lo_paper_final")} | '
        f'{_cell(run.report, "epsilon_est_fitted_final")} | '
        f'{_number(run.report["accuracy"])} |' for run in block]
    bound_header = ' | '.join(
        f'ε_est-{model} 95% CI | ε_lo-{model} | one-run-{model} | '
        f'one-run f-DP-{model}' for model in models)
    lines += [
        '',
        'References, headline estimates and lower bounds that hold:',
        '',
        f'| noise | accounted ε | last-iterate ε | {bound_header} |',
        '|---|---|---|' + '---|' * 4 * len(models),
    ]
    for run in block:
      cells = ' | '.join(
          f'{_estimate_cell(run.report, model)} '
          f'{_interval_cell(run.report, f"epsilon_est_interval_{model}")} | '
          f'{_cell(run.report, f"epsilon_lo_{model}")} | '
          f'{_cell(run.report, f"epsilon_one_run_{model}")} | '
          f'{_cell(run.report, f"epsilon_one_run_fdp_{model}")}'
          for model in models)
      lines.append(f'| {run.noise_multiplier:g} | '
                   f'{_accounted_cell(run.report)} | '
                   f'{_last_iterate_cell(run.report)} | {cells} |')
    attack_header = ' | '.join(
        f'ε_gdp-{model} | AUROC-{model} | TPR@1e-2-{model} | '
        f'TPR@1e-3-{model}' for model in models)
    lines += ['', 'The attack:', '', f'| noise | {attack_header} |',
              '|---|' + '---|' * 4 * len(models)]
    for run in block:
      cells = ' | '.join(
          f'{_cell(run.report, f"epsilon_gdp_{model}")} | '
          f'{_cell(run.report, f"auroc_{model}")} | '
          f'{_tpr_cell(run.report, f"tpr_at_fpr_{model}", "0.01")} | '
          f'{_tpr_cell(run.report, f"tpr_at_fpr_{model}", "0.001")}'
          for model in models)
      lines.append(f'| {run.noise_multiplier:g} | {cells} |')
    lines.append('')
  sampling = runs[0].report.get('setting', {}).get('sampling', 'the configured')
  lines += [
      _setting_line(runs),
      '',
      'Analytical ε: a canary presented r times in known rounds (r-fold '
      'Gaussian mechanism, no amplification). Accounted ε: a real client under '
      f'{sampling} sampling over the whole run (each run\'s report.md names '
      'the mechanism). Last-iterate ε: the heuristic of Steinke et al. (2025) '
      'for the final model, not a bound. ε_est: final model, two Gaussians '
      'with the variance fixed at 1/d; all iterates, Gaussian DP at the '
      'AUROC\'s μ; CI: percentile bootstrap interval. ε_lo (Bonferroni over a fixed '
      'family of thresholds, Clopper-Pearson), one-run (Steinke et al., 2023) '
      'and one-run f-DP (Mahloujifar et al., 2024) are lower bounds that hold '
      'at the stated confidence. ε_gdp: Gaussian-DP estimate from the mean '
      'shift in null standard deviations; AUROC and TPR of the attack "the '
      'statistic is larger".',
  ]
  return '\n'.join(lines) + '\n'


def anderson_table(runs: Sequence[GridRun]) -> str:
  """Table 6: A^2 of each cosine set (normality rejected above 0.656 at 10%,
  1.092 at 1%, for about 1000 samples)."""

  def cell(value: float | None) -> str:
    return 'n/a' if value is None else f'{value:.3f}'

  lines = ['**Table 6: Anderson-Darling A² of each cosine set** (normality is '
           'rejected above 0.656 at 10%, 1.092 at 1%)', '',
           '| noise | repetitions | final model, seen | max over rounds, seen '
           '| max over rounds, unseen |', '|---|---|---|---|---|']
  for run in runs:
    all_iterates = run.report['all_iterates'] or {}
    lines.append(
        f'| {run.noise_multiplier:g} | {run.canary_repeats} | '
        f'{cell(run.report["final"]["anderson_seen"])} | '
        f'{cell(all_iterates.get("anderson_seen"))} | '
        f'{cell(all_iterates.get("anderson_unseen"))} |')
  return '\n'.join(lines) + '\n'


def _epsilon_grid(runs: Sequence[GridRun], noises: Sequence[float],
                  repetitions: Sequence[int], key: str) -> np.ndarray:
  """report[key] of each (noise, repetitions) run; NaN where missing."""
  by_point = {(run.noise_multiplier, run.canary_repeats): run for run in runs}
  values = np.full((len(noises), len(repetitions)), np.nan)
  for i, noise in enumerate(noises):
    for j, repeats in enumerate(repetitions):
      value = by_point[(noise, repeats)].report[key]
      if value is not None:
        values[i, j] = value
  return values


def write_outputs(runs: Sequence[GridRun], noises: Sequence[float],
                  repetitions: Sequence[int], output_dir: str, title: str,
                  without_canaries: Mapping[float, float] | None = None
                  ) -> dict[str, str]:
  """Writes the tables, results.json and figures; returns name -> path.

  The accuracy table is written when `without_canaries` (noise -> accuracy
  of the run without canaries) is given.
  """
  os.makedirs(output_dir, exist_ok=True)
  paths = {name: os.path.join(output_dir, name) for name in (
      TABLE_FILE, ANDERSON_FILE, RESULTS_FILE, DENSITY_FILE,
      EPSILON_FINAL_FILE)}
  atomic_io.write_text(paths[TABLE_FILE], privacy_table(runs))
  atomic_io.write_text(paths[ANDERSON_FILE], anderson_table(runs))
  if without_canaries:
    paths[ACCURACY_FILE] = os.path.join(output_dir, ACCURACY_FILE)
    atomic_io.write_text(paths[ACCURACY_FILE],
                         accuracy_table(runs, without_canaries))
  atomic_io.write_text(paths[RESULTS_FILE], json.dumps([
      {'noise_multiplier': run.noise_multiplier,
       'canary_repeats': run.canary_repeats, 'run_dir': run.run_dir,
       'report': run.report} for run in runs
  ], indent=2, sort_keys=True, allow_nan=False) + '\n')
  panels = {}
  for noise in noises:
    panels[f'noise {noise:g}'] = {
        f'{run.canary_repeats} rep.': run.final_cosines
        for run in runs if run.noise_multiplier == noise}
  plots.plot_cosine_densities(panels, runs[0].report['dim'],
                              paths[DENSITY_FILE],
                              title=f'{title}: final-model cosines',
                              shared_x=True)

  def grid(key: str) -> np.ndarray:
    return _epsilon_grid(runs, noises, repetitions, key)

  analytical = grid('analytical_epsilon')
  plots.plot_epsilon_bars(
      noises, repetitions, grid('epsilon_est_final'), grid('epsilon_lo_final'),
      paths[EPSILON_FINAL_FILE], title=f'{title}: final model',
      references={'analytical ε (canary)': analytical,
                  'last-iterate heuristic ε': grid('last_iterate_epsilon')})
  if all(run.report['epsilon_est_all'] is not None for run in runs):
    paths[EPSILON_ALL_FILE] = os.path.join(output_dir, EPSILON_ALL_FILE)
    plots.plot_epsilon_bars(
        noises, repetitions, grid('epsilon_est_all'), grid('epsilon_lo_all'),
        paths[EPSILON_ALL_FILE], title=f'{title}: all iterates',
        references={'analytical ε (canary)': analytical,
                    'accounted ε (client)': grid('accounted_epsilon')})
  return paths


# ----------------------------------------------------------------------------
# Command line.

def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers this program's flags and every `experiments.train` flag."""
  flags.DEFINE_string('config', None, 'Flagfile of the experiment, with '
                      '"# grid: --FLAG=V1,..." lines.', flag_values=flag_values)
  flags.DEFINE_float('scale', 1.0, 'Shrink factor in (0, 1] of rounds, '
                     'clients per round, synthetic clients and canaries.',
                     flag_values=flag_values)
  flags.DEFINE_string('output_dir', '/tmp/one_shot_epe_reproduce',
                      'Directory of the tables, figures and runs.',
                      flag_values=flag_values)
  flags.DEFINE_list('noise_multipliers', None, 'Noise multipliers of the grid '
                    "(default: the config's grid line).",
                    flag_values=flag_values)
  flags.DEFINE_list('repetitions', None, 'Canary repetitions of the grid '
                    "(default: the config's grid line).",
                    flag_values=flag_values)
  flags.DEFINE_bool('accuracy_table', False, 'Also train each noise level '
                    'without canaries and write the accuracy table.',
                    flag_values=flag_values)
  flags.DEFINE_integer('table5_experiments', 0, 'Table 5: experiments per '
                       'noise level and arm (the paper: 50); 0 skips it.',
                       flag_values=flag_values)
  flags.DEFINE_integer('table5_runs', 10, 'Table 5: runs of the split arm '
                       '(>= 2, dividing --num_canaries).',
                       flag_values=flag_values)
  train_config.define_flags(flag_values)


def _grid_values(grid: Mapping[str, list[str]], override: list[str] | None,
                 name: str, flag: str, default: Any, kind: type) -> list[Any]:
  """The grid values of one flag: the override, the grid line or the default."""
  texts = override if override is not None else grid.get(name)
  if texts is None:
    return [default]
  try:
    values = [kind(text) for text in texts]
  except ValueError:
    raise train_config.ConfigError(f'--{flag} must list {kind.__name__} '
                                   f'values; got {texts}.') from None
  if not values or len(set(values)) != len(values):
    raise train_config.ConfigError(f'--{flag} must list distinct values; got '
                                   f'{texts}.')
  return values


def config_and_grid(
    flag_values: flags.FlagValues
) -> tuple[train_config.TrainConfig, list[float], list[int]]:
  """The scaled base config and the grid of parsed reproduce flags."""
  if not flag_values['config'].value:
    raise train_config.ConfigError('--config must name a flagfile; got none.')
  config_path = flag_values['config'].value
  if not os.path.isfile(config_path):
    raise train_config.ConfigError(f'--config {config_path!r} is not a file.')
  try:
    grid = parse_grid(config_path)
  except ValueError as error:
    raise train_config.ConfigError(f'--config: {error}') from None
  unknown = set(grid) - set(GRID_FLAGS)
  if unknown:
    raise train_config.ConfigError(f'--config: grid flags must be among '
                                   f'{list(GRID_FLAGS)}; got '
                                   f'{sorted(unknown)}.')
  from_file = flags.FlagValues()
  train_config.define_flags(from_file)
  try:
    from_file(['reproduce', f'--flagfile={config_path}'])
  except flags.Error as error:
    raise train_config.ConfigError(f'--config: {error}') from None
  base = train_config.config_from_flags(from_file)
  overrides = {field.name: flag_values[field.name].value
               for field in dataclasses.fields(train_config.TrainConfig)
               if flag_values[field.name].present}
  base = dataclasses.replace(base, **overrides)
  try:
    base = scale_config(base, flag_values['scale'].value)
  except ValueError as error:
    raise train_config.ConfigError(str(error)) from None
  noises = _grid_values(grid, flag_values['noise_multipliers'].value,
                        'noise_multiplier', 'noise_multipliers',
                        base.noise_multiplier, float)
  repetitions = _grid_values(grid, flag_values['repetitions'].value,
                             'canary_repeats', 'repetitions',
                             base.canary_repeats, int)
  return base, noises, repetitions


def main(argv: Sequence[str]) -> None:
  """Validates the whole grid, runs (or resumes) it, writes the outputs.

  Everything is checked before the first run starts; a bad flag or config
  exits with status 2, and so do a run in use by another process and a
  failed write (`run_outputs.REPORTED_ERRORS`). Prints the tables and the paths
  written.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  try:
    base, noises, repetitions = config_and_grid(flags.FLAGS)
    # The flags are sound: now TensorFlow, quietly (the runs' checks need it).
    quiet.quiet_startup(sys.argv, import_tensorflow=base.backend != 'jax')
    output_dir = flags.FLAGS.output_dir
    configs = grid_configs(base, noises, repetitions, output_dir)
    baselines = (accuracy_configs(base, noises, output_dir)
                 if flags.FLAGS.accuracy_table else [])
    table5_experiments = []
    if flags.FLAGS.table5_experiments:
      table5_experiments = table5.experiments(
          base, noises, flags.FLAGS.table5_experiments,
          flags.FLAGS.table5_runs, output_dir)
      for experiment in table5_experiments:  # Validate before any run.
        for config in experiment.configs:
          train.prepare(config).config
    title = os.path.splitext(os.path.basename(flags.FLAGS.config))[0]
    with write_failures.reported(output_dir):
      runs, without_canaries = run_grid(configs, baselines)
      table5_text = (run_table5(table5_experiments, output_dir)
                     if table5_experiments else None)
      paths = write_outputs(runs, noises, repetitions, output_dir, title,
                            without_canaries)
  except run_outputs.REPORTED_ERRORS as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  print(summary_table(runs), end='')
  print()
  print(anderson_table(runs), end='')
  if without_canaries:
    print()
    print(accuracy_table(runs, without_canaries), end='')
  if table5_text is not None:
    paths[TABLE5_FILE] = os.path.join(output_dir, TABLE5_FILE)
    print()
    print(table5_text, end='')
  for path in paths.values():
    print(f'Wrote {path}')


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=cli.parse_flags_or_exit)
