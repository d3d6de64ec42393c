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
                      eps_est with bootstrap intervals of the estimate and
                      every lower bound, each with when it holds (whatever
                      the mechanism, or only for one Gaussian in the
                      canary's direction); the attack's summaries (eps_gdp,
                      AUROC, TPR). The terminal
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
nonzero (at least 2). With real data and --train_epochs the number of
clients is fixed, so fewer clients per round would lengthen every epoch
(EMNIST at --scale=0.05: 677 rounds of 5 clients, more than the full 510);
there --clients_per_round is kept and only the epochs shrink (EMNIST at
0.05: 1 epoch of 34 rounds of 101 clients).

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

The grid (which runs; running, resuming or skipping them) is
`experiments.grid`, the tables `experiments.grid_tables` and the figures
`experiments.grid_figures`, each reading the runs' typed reports
(`run_report.RunReport.read`); this module is the command line.

With --executor=ray every run is a Ray task (`experiments.ray_executor`): on a
local Ray cluster of this machine's CPUs, or with --ray_address=HOST:PORT (or
'auto', or ray://HOST:PORT) on a running cluster whose nodes share
--output_dir and the project's environment. A task whose worker dies is
retried and resumes from its checkpoint; the tables and figures are the same
bytes as with the default --executor=sequential. A missing Ray or an
unreachable --ray_address exits with status 2 before anything is written.

With --backend=jax (on the command line or in the config) the program imports
neither TensorFlow nor TFF, so the grid runs on a machine with JAX alone (the
JAX engine's limits: `experiments.backend_jax`), and --runs_per_program=R
trains up to R runs that share every shape (the grid's points, Table 5's
runs of one arm) as one program, with a run axis on accelerators and the
runs in turn on a CPU (`experiments.grid.programs`): the same run directories, reports and tables
as one run at a time, up to float rounding.
"""

import os
import sys

if __name__ == '__main__':
  # TFF runs: the network isolation mode's checks (exit 2) for the runs'
  # local TFF workers. `main` imports TensorFlow quietly once the flags have
  # been checked. JAX runs need neither.
  from one_shot_epe.runtime import command_line as _cli
  # Before absl opens them: --flagfile, --config and the flagfiles they name.
  _cli.check_flagfiles_or_exit(sys.argv, flagfile_flags=('config',))
  if _cli.requested_backend(sys.argv, flagfile_flags=('config',)) != 'jax':
    from one_shot_epe.tff_engine import isolation
    isolation.check_program(sys.argv, flagfile_flags=('config',))

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from absl import app
from absl import flags
from absl import logging

from experiments import grid
from experiments import grid_figures
from experiments import grid_tables
from experiments import run_outputs
from experiments import run_planning
from experiments import seed_band
from experiments import table5
from experiments import train
from experiments import train_config
from experiments import train_flags
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import quiet
from one_shot_epe.runtime import write_failures

__all__ = ['ACCURACY_FILE', 'ANDERSON_FILE', 'DENSITY_FILE', 'EPSILON_ALL_FILE',
           'EPSILON_FINAL_FILE', 'RESULTS_FILE', 'TABLE5_FILE', 'TABLE_FILE',
           'config_and_grid', 'define_flags', 'main', 'write_outputs']

TABLE_FILE = 'table.md'
ANDERSON_FILE = 'anderson.md'
RESULTS_FILE = 'results.json'
DENSITY_FILE = 'cosine_densities.png'
EPSILON_FINAL_FILE = 'epsilon_final.png'
EPSILON_ALL_FILE = 'epsilon_all.png'
ACCURACY_FILE = 'accuracy.md'
TABLE5_FILE = 'table5.md'


def write_outputs(runs: Sequence[grid.GridRun], noises: Sequence[float],
                  repetitions: Sequence[int], output_dir: str, title: str,
                  without_canaries: Mapping[float, float] | None = None
                  ) -> dict[str, str]:
  """Writes the tables, results.json and figures; returns name -> path.

  The accuracy table is written when `without_canaries` (noise -> accuracy
  of the run without canaries) is given.

  Args:
    runs: The grid's runs.
    noises: The grid's noise multipliers, in order.
    repetitions: The grid's canary repetitions, in order.
    output_dir: Where the files go.
    title: The figures' title (the config's name).
    without_canaries: Noise -> accuracy of its run without canaries, or None.

  Returns:
    File name -> path of each file written.
  """
  os.makedirs(output_dir, exist_ok=True)
  paths = {name: os.path.join(output_dir, name) for name in (
      TABLE_FILE, ANDERSON_FILE, RESULTS_FILE, DENSITY_FILE,
      EPSILON_FINAL_FILE)}
  atomic_io.write_text(paths[TABLE_FILE], grid_tables.privacy_table(runs))
  atomic_io.write_text(paths[ANDERSON_FILE], grid_tables.anderson_table(runs))
  if without_canaries:
    paths[ACCURACY_FILE] = os.path.join(output_dir, ACCURACY_FILE)
    atomic_io.write_text(paths[ACCURACY_FILE],
                         grid_tables.accuracy_table(runs, without_canaries))
  atomic_io.write_text(paths[RESULTS_FILE], json.dumps([
      {'noise_multiplier': run.noise_multiplier,
       'canary_repeats': run.canary_repeats, 'run_dir': run.run_dir,
       'report': run.report.to_dict()} for run in runs
  ], indent=2, sort_keys=True, allow_nan=False) + '\n')
  grid_figures.cosine_densities(runs, noises, paths[DENSITY_FILE], title)
  grid_figures.epsilon_bars(runs, noises, repetitions, 'final',
                            paths[EPSILON_FINAL_FILE], title)
  if grid_figures.has_all_iterates(runs):
    paths[EPSILON_ALL_FILE] = os.path.join(output_dir, EPSILON_ALL_FILE)
    grid_figures.epsilon_bars(runs, noises, repetitions, 'all',
                              paths[EPSILON_ALL_FILE], title)
  return paths


# ----------------------------------------------------------------------------
# Command line.

def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers this program's flags and every `experiments.train` flag.

  Args:
    flag_values: The registry to define them in.
  """
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
  flags.DEFINE_enum('executor', 'sequential', ['sequential', 'ray'],
                    'Who runs the grid: this process, run after run, or Ray '
                    'tasks (experiments.ray_executor).',
                    flag_values=flag_values)
  flags.DEFINE_string('ray_address', None, "With --executor=ray: 'auto', "
                      'HOST:PORT or ray://HOST:PORT of a running Ray cluster '
                      '(default: start a local one).',
                      flag_values=flag_values)
  flags.DEFINE_integer('table5_runs', 10, 'Table 5: runs of the split arm '
                       '(>= 2, dividing --num_canaries).',
                       flag_values=flag_values)
  flags.DEFINE_string('band', None, "A seeds' table (CSV, "
                      'experiments.seed_band): after the tables, each run\'s '
                      'numbers against the band of its grid point, within '
                      'or outside the seeds\' range.', flag_values=flag_values)
  flags.DEFINE_integer('runs_per_program', 1, '--backend=jax: train up to R '
                       'runs that share every shape (grid points, Table 5\'s '
                       'runs) as one program (a run axis on accelerators, '
                       'the runs in turn on a CPU), each in its own run '
                       'directory (experiments.grid.programs).',
                       flag_values=flag_values)
  train_flags.define_flags(flag_values)


def _grid_values(grid_lines: Mapping[str, list[str]],
                 override: list[str] | None, name: str, flag: str,
                 default: Any, kind: type) -> list[Any]:
  """The grid values of one flag: the override, the grid line or the default."""
  texts = override if override is not None else grid_lines.get(name)
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
  """The scaled base config and the grid of parsed reproduce flags.

  Args:
    flag_values: The parsed flags of this program.

  Returns:
    (the base config: --config's flags, the command line's over them,
    scaled by --scale; the grid's noise multipliers; its repetitions).

  Raises:
    train_config.ConfigError: naming the flag, for a missing or malformed
      --config, an --output_dir that cannot be a directory, a bad --scale
      or grid values.
  """
  if not flag_values['config'].value:
    raise train_config.ConfigError('--config must name a flagfile; got none.')
  config_path = flag_values['config'].value
  try:
    command_line.check_flagfiles(['reproduce', f'--config={config_path}'],
                                 flagfile_flags=('config',))
    grid_lines = grid.parse_grid(config_path)
  except bounded_reads.InputRefused as refusal:
    raise train_config.ConfigError(str(refusal)) from None
  except ValueError as error:
    raise train_config.ConfigError(f'--config: {error}') from None
  unknown = set(grid_lines) - set(grid.GRID_FLAGS)
  if unknown:
    raise train_config.ConfigError(f'--config: grid flags must be among '
                                   f'{list(grid.GRID_FLAGS)}; got '
                                   f'{sorted(unknown)}.')
  from_file = flags.FlagValues()
  train_flags.define_flags(from_file)
  try:
    from_file(['reproduce', f'--flagfile={config_path}'])
  except flags.Error as error:
    raise train_config.ConfigError(f'--config: {error}') from None
  base = train_flags.config_from_flags(from_file)
  overrides = {field.name: flag_values[field.name].value
               for field in dataclasses.fields(train_config.TrainConfig)
               if flag_values[field.name].present}
  base = dataclasses.replace(base, **overrides)
  base.validate()  # The flags as given, before --scale changes any.
  _check_output_dir(flag_values['output_dir'].value)
  try:
    base = grid.scale_config(base, flag_values['scale'].value)
  except ValueError as error:
    raise train_config.ConfigError(str(error)) from None
  noises = _grid_values(grid_lines, flag_values['noise_multipliers'].value,
                        'noise_multiplier', 'noise_multipliers',
                        base.noise_multiplier, float)
  repetitions = _grid_values(grid_lines, flag_values['repetitions'].value,
                             'canary_repeats', 'repetitions',
                             base.canary_repeats, int)
  return base, noises, repetitions


def _check_output_dir(output_dir: str) -> None:
  """--output_dir must be a directory this process can write, or create.

  Raises:
    ConfigError: naming --output_dir, if it (or the nearest of its parents
      that exists) is not a directory or not writable
      (`run_directory.check_writable`).
  """
  try:
    run_directory.check_writable(output_dir)
  except run_directory.RunDirectoryError as error:
    raise train_config.ConfigError(f'--output_dir: {error}') from None


def _executor(flag_values: flags.FlagValues) -> grid.Executor:
  """The grid's executor of --executor (Ray imported only for 'ray')."""
  if flag_values['executor'].value == 'sequential':
    if flag_values['ray_address'].value is not None:
      raise train_config.ConfigError('--ray_address needs --executor=ray.')
    return grid.sequential
  from experiments import ray_executor  # Ray: only with --executor=ray.
  return ray_executor.connect(flag_values['ray_address'].value)


def _band_rows(path: str | None) -> list[dict[str, str]] | None:
  """The seeds' table of --band, read before any run; None without it.

  Raises:
    ConfigError: naming --band, for a file that is not a seeds' table.
  """
  if path is None:
    return None
  try:
    return seed_band.read_table(path)
  except ValueError as error:  # Its message starts with the quoted path.
    raise train_config.ConfigError(f'--band {error}') from None


def _run(flag_values: flags.FlagValues
         ) -> tuple[list[grid.GridRun], dict[float, float], str | None,
                    dict[str, str], list[dict[str, str]] | None]:
  """Validates the whole grid, runs (or resumes) it and writes the outputs.

  Returns:
    The grid's runs, the accuracies without canaries (empty without
    --accuracy_table), Table 5's text (None without it), the paths
    written by name and the rows of --band's seeds' table (None without
    it).
  """
  base, noises, repetitions = config_and_grid(flag_values)
  band_rows = _band_rows(flag_values['band'].value)
  output_dir = flag_values.output_dir
  configs = grid.grid_configs(base, noises, repetitions, output_dir)
  baselines = (grid.accuracy_configs(base, noises, output_dir)
               if flag_values.accuracy_table else [])
  for config in configs + baselines:  # Every run's plan, before TensorFlow.
    run_planning.check_plan(config.validate())
  # The plans are sound: now TensorFlow, quietly (the runs' checks need it).
  quiet.quiet_startup(sys.argv, import_tensorflow=base.backend != 'jax')
  table5_experiments = []
  if flag_values.table5_experiments:
    table5_experiments = table5.experiments(
        base, noises, flag_values.table5_experiments,
        flag_values.table5_runs, output_dir)
    for experiment in table5_experiments:  # Validate before any run.
      for config in experiment.configs:
        train.prepare(config)
  runs_per_program = flag_values.runs_per_program
  grid.programs(configs, runs_per_program)  # Its flag's errors, now.
  title = os.path.splitext(os.path.basename(flag_values.config))[0]
  executor = _executor(flag_values)
  with write_failures.reported(output_dir):
    runs, without_canaries = grid.run_grid(configs, baselines, executor,
                                           runs_per_program)
    table5_text = None
    if table5_experiments:
      table5_text = grid.run_table5(table5_experiments, executor,
                                    runs_per_program)
      atomic_io.write_text(os.path.join(output_dir, TABLE5_FILE),
                           table5_text)
    paths = write_outputs(runs, noises, repetitions, output_dir, title,
                          without_canaries)
  if table5_text is not None:
    paths[TABLE5_FILE] = os.path.join(output_dir, TABLE5_FILE)
  return runs, without_canaries, table5_text, paths, band_rows


def _band_text(runs: Sequence[grid.GridRun],
               band_rows: Sequence[Mapping[str, str]], path: str) -> str:
  """The runs' numbers against the seeds' band of --band, with its legend."""
  seeds = sorted({int(row['seed']) for row in band_rows})
  machines = sorted({f"{row['cpu_model']} (family {row['cpu_family']}; "
                     f"{row['vector_extensions'] or 'no vector extensions'})"
                     for row in band_rows})
  plural = '' if len(seeds) == 1 else 's'
  return (f'**This grid against the band of {len(seeds)} seed{plural}** '
          f"({path}; {', '.join(machines)}): 'within' where a number lies "
          "in the seeds' range. Another CPU generation sums in another "
          'order, so its numbers may leave the range.\n\n' +
          seed_band.compare_table(
              [run.report for run in runs],
              [(run.noise_multiplier, run.canary_repeats) for run in runs],
              band_rows))


def main(argv: Sequence[str]) -> None:
  """Validates the whole grid, runs (or resumes) it, writes the outputs.

  Everything is checked before the first run starts; a bad flag or config
  exits with status 2, and so do a run in use by another process and a
  failed write (`run_outputs.REPORTED_ERRORS`). Ctrl-C or SIGTERM stops the
  grid with one line naming the round it stopped at, status 130; a rerun
  resumes. Prints the tables and the paths written.

  Args:
    argv: The program name alone (absl took the flags; more exits 2).

  Raises:
    SystemExit: with status 2 for one of `run_outputs.REPORTED_ERRORS` (an
      interrupt ends the process with status 130,
      `interrupts.exit_interrupted`).
  """
  command_line.refuse_positional_arguments(argv)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)
  try:
    with interrupts.stop_on_signals():
      runs, without_canaries, table5_text, paths, band_rows = _run(
          flags.FLAGS)
  except run_outputs.REPORTED_ERRORS as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt as error:
    interrupts.exit_interrupted(
        error, 'interrupted before the first run began; nothing was '
        'written: rerun the same command')
  print(grid_tables.summary_table(runs), end='')
  print()
  if band_rows is not None:
    print(_band_text(runs, band_rows, flags.FLAGS.band), end='')
    print()
  print(grid_tables.anderson_table(runs), end='')
  if without_canaries:
    print()
    print(grid_tables.accuracy_table(runs, without_canaries), end='')
  if table5_text is not None:
    print()
    print(table5_text, end='')
  for path in paths.values():
    print(f'Wrote {path}')


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
