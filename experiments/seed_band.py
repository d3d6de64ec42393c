r"""A grid's numbers over several seeds: the band a reader's run should fall in.

One run's digits are a promise no other machine keeps: TensorFlow's CPU
kernels sum in an order that depends on the vector width, and a run's noisy
rounds amplify the difference, so the estimates, bounds and accuracy of the
same flags move from one CPU generation to the next. What a reader can
check is whether their numbers fall in the spread the project measured over
seeds, where the seed changes everything random: client sampling, model
initialisation and DP noise (--seed) and the canaries and their schedule
(--canary_seed).

The seeds' table is a CSV (`write_table`, `read_table`): one row per seed
and grid point (noise multiplier z, canary repetitions r), one column per
`COLUMNS` entry (the terminal summary's estimates, bounds that hold,
references and accuracy) and the machine it ran on (`machine`: `lscpu`'s
model name, CPU family and vector extensions). `bands` turns it into each
column's mean, standard deviation, minimum and maximum per grid point;
`band_table` is the Markdown the README and docs/reproducing.md quote;
`compare_table` sets a run's numbers against the band ('within' the seeds'
minimum to maximum, or 'outside'), what `experiments.reproduce --band=CSV`
prints after its tables (and so `make demo`).

Build the table from a grid's runs, one output directory per seed:

  python -m experiments.reproduce --config=configs/demo_fashion_mnist.cfg \
      --data_dir=DIR --output_dir=/tmp/seeds/seed1 --seed=1 --canary_seed=1
  ...
  python -m experiments.seed_band \
      --seed_dirs=/tmp/seeds/seed0,/tmp/seeds/seed1,... \
      --output=configs/demo_fashion_mnist_seeds.csv

Framework-free (it reads the runs' report.json files).
"""

import csv
import dataclasses
import io
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from absl import app
from absl import flags

from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import run_directory

__all__ = ['Band', 'BandColumn', 'COLUMNS', 'MACHINE_FIELDS', 'band_table',
           'bands', 'compare_table', 'define_flags', 'machine', 'read_table',
           'rows_of_runs', 'write_table']


@dataclasses.dataclass(frozen=True)
class BandColumn:
  """One number of a run that the band follows.

  Attributes:
    name: Its column name (the terminal summary's, e.g. 'est-fin').
    value: Its value in a run's report (None where the run lacks it).
  """
  name: str
  value: Callable[[run_report.RunReport], float | None]


def _field(model: str, key: str) -> Callable[[run_report.RunReport],
                                             float | None]:
  """A report field's value in threat model 'final' or 'all'."""

  def value(report: run_report.RunReport) -> float | None:
    threat = report.final if model == 'final' else report.all_iterates
    return None if threat is None else getattr(threat, key)

  return value


# The summary table's columns (`experiments.grid_tables.summary_table`), in
# its order: the references, each threat model's headline estimate and the
# bounds it shows, the last-iterate heuristic and the accuracy.
COLUMNS = (
    BandColumn('analyt.', lambda report: report.analytical_epsilon),
    BandColumn('acct.', lambda report: (
        None if report.accounted_mechanism is None else
        report.accounted_epsilon)),
    BandColumn('est-all', _field('all', 'epsilon_est')),
    BandColumn('lo-all', _field('all', 'epsilon_lo')),
    BandColumn('est-fin', _field('final', 'epsilon_est')),
    BandColumn('lo-fin', _field('final', 'epsilon_lo')),
    BandColumn('any-fin', _field('final', 'epsilon_lo_tight_any')),
    BandColumn('gdp-fin', _field('final', 'epsilon_lo_tight_gdp')),
    BandColumn('last-it', lambda report: (
        None if report.last_iterate_mechanism is None else
        report.last_iterate_epsilon)),
    BandColumn('acc.', lambda report: report.accuracy),
)
# What each row says of its machine (`machine`).
MACHINE_FIELDS = ('cpu_model', 'cpu_family', 'vector_extensions')
_KEY_FIELDS = ('seed', 'noise_multiplier', 'canary_repeats')
# The vector extensions `machine` reports, by the prefix of lscpu's flag.
_VECTOR_FLAGS = re.compile(r'^(sse4_2|avx\w*|fma|amx\w*)$')


def machine(lscpu_text: str | None = None) -> dict[str, str]:
  """This machine's CPU as the seeds' table records it.

  Args:
    lscpu_text: `lscpu`'s output; None runs `lscpu` (empty fields where it
      cannot).

  Returns:
    `MACHINE_FIELDS` -> 'Model name', 'CPU family' and the vector
    extensions among 'Flags' (SSE4.2, AVX, AVX2, FMA, AVX-512 and AMX
    flags, space-separated, in lscpu's order).
  """
  if lscpu_text is None:
    try:
      lscpu_text = subprocess.run(['lscpu'], capture_output=True, text=True,
                                  check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
      lscpu_text = ''
  fields = {}
  for line in lscpu_text.splitlines():
    name, _, value = line.partition(':')
    fields.setdefault(name.strip(), value.strip())
  vector = [flag for flag in fields.get('Flags', '').split()
            if _VECTOR_FLAGS.match(flag)]
  return {'cpu_model': fields.get('Model name', ''),
          'cpu_family': fields.get('CPU family', ''),
          'vector_extensions': ' '.join(vector)}


def _cell(value: float | None) -> str:
  """A number of the CSV: full precision, 'inf', '' for None."""
  if value is None:
    return ''
  return 'inf' if math.isinf(value) else repr(float(value))


def rows_of_runs(seed: int, reports: Sequence[run_report.RunReport],
                 points: Sequence[tuple[float, int]],
                 machine_fields: Mapping[str, str]) -> list[dict[str, str]]:
  """The seeds' table's rows of one seed's grid.

  Args:
    seed: The seed the grid ran with (its --seed and --canary_seed).
    reports: Its runs' reports.
    points: Each report's (noise multiplier, canary repetitions).
    machine_fields: The machine it ran on (`machine`).

  Returns:
    One row per run: the seed, its grid point, each `COLUMNS` value and the
    machine.
  """
  rows = []
  for report, (noise, repeats) in zip(reports, points):
    row = {'seed': str(seed), 'noise_multiplier': repr(float(noise)),
           'canary_repeats': str(repeats)}
    row.update({column.name: _cell(column.value(report))
                for column in COLUMNS})
    row.update({name: machine_fields[name] for name in MACHINE_FIELDS})
    rows.append(row)
  return rows


def write_table(path: str, rows: Sequence[Mapping[str, str]]) -> None:
  """Writes the seeds' table (atomically).

  Args:
    path: The CSV file.
    rows: Its rows (`rows_of_runs`), in the order to write.
  """
  stream = io.StringIO()
  writer = csv.DictWriter(stream, [*_KEY_FIELDS,
                                   *(column.name for column in COLUMNS),
                                   *MACHINE_FIELDS], lineterminator='\n')
  writer.writeheader()
  writer.writerows(rows)
  atomic_io.write_text(path, stream.getvalue())


def read_table(path: str) -> list[dict[str, str]]:
  """The seeds' table's rows.

  Args:
    path: The CSV file (`write_table`).

  Returns:
    Its rows, each column name -> text.

  Raises:
    ValueError: naming the file, when it is not a seeds' table (an
      `bounded_reads.InputRefused` when it is not a regular UTF-8 text file
      within `bounded_reads.SEED_TABLE`).
  """
  text = bounded_reads.read_text(path, bounded_reads.SEED_TABLE)
  reader = csv.DictReader(io.StringIO(text, newline=''))
  needed = {*_KEY_FIELDS, *(column.name for column in COLUMNS)}
  missing = needed - set(reader.fieldnames or ())
  if missing:
    raise ValueError(f'{path!r} is not a seeds\' table: it lacks the '
                     f'columns {sorted(missing)}.')
  return list(reader)


@dataclasses.dataclass(frozen=True)
class Band:
  """One column's spread over the seeds at one grid point.

  Attributes:
    count: The seeds that have the value.
    mean: Their mean.
    sd: Their sample standard deviation (0 for one seed).
    low: The smallest.
    high: The largest.
  """
  count: int
  mean: float
  sd: float
  low: float
  high: float

  def holds(self, value: float) -> bool:
    """Whether `value` lies in the seeds' range.

    Args:
      value: A run's number of the band's column.

    Returns:
      Whether low <= value <= high.
    """
    return self.low <= value <= self.high


def _band(values: Sequence[float]) -> Band:
  count = len(values)
  mean = math.fsum(values) / count
  if len(set(values)) == 1:
    sd = 0.0  # Equal values (an infinite one too): no rounding residue.
  elif any(math.isinf(value) for value in values):
    sd = math.nan
  else:
    sd = (math.sqrt(math.fsum((value - mean)**2 for value in values) /
                    (count - 1)) if count > 1 else 0.0)
  return Band(count, mean, sd, min(values), max(values))


def bands(rows: Sequence[Mapping[str, str]]
          ) -> dict[tuple[float, int], dict[str, Band]]:
  """Each grid point's band of every column over the seeds.

  Args:
    rows: The seeds' table's rows (`read_table`).

  Returns:
    (noise multiplier, canary repetitions) -> column name -> its `Band`
    (columns no seed has left out), grid points in the order rows first
    bring them.
  """
  values: dict[tuple[float, int], dict[str, list[float]]] = {}
  for row in rows:
    point = (float(row['noise_multiplier']), int(row['canary_repeats']))
    columns = values.setdefault(point, {})
    for column in COLUMNS:
      if row[column.name] != '':
        columns.setdefault(column.name, []).append(float(row[column.name]))
  return {point: {name: _band(found) for name, found in columns.items()}
          for point, columns in values.items()}


def _number(value: float) -> str:
  return '∞' if math.isinf(value) else f'{value:.4g}'


def _band_cell(band: Band) -> str:
  """'mean ± sd (low–high)'; one number where every seed gave it."""
  if band.low == band.high:
    return _number(band.low)
  return (f'{_number(band.mean)} ± {band.sd:.2g} '
          f'({_number(band.low)}–{_number(band.high)})')


def band_table(rows: Sequence[Mapping[str, str]]) -> str:
  """The band as Markdown: a row per grid point, a cell per column.

  Args:
    rows: The seeds' table's rows (`read_table`).

  Returns:
    The table, a row per grid point in ascending z then r, each cell
    'mean ± sd (min–max)' over the seeds (one number where all seeds
    agree), ending with a newline.
  """
  found = bands(rows)
  names = [column.name for column in COLUMNS]
  lines = ['| z | r | seeds | ' + ' | '.join(names) + ' |',
           '|---|---|---|' + '---|' * len(names)]
  for (noise, repeats), columns in sorted(found.items()):
    count = max(band.count for band in columns.values())
    lines.append(f'| {noise:g} | {repeats} | {count} | ' + ' | '.join(
        _band_cell(columns[name]) if name in columns else 'n/a'
        for name in names) + ' |')
  return '\n'.join(lines) + '\n'


def compare_table(reports: Sequence[run_report.RunReport],
                  points: Sequence[tuple[float, int]],
                  rows: Sequence[Mapping[str, str]]) -> str:
  """A grid's numbers against the seeds' band, 'within' or 'outside'.

  Args:
    reports: The grid's runs' reports.
    points: Each report's (noise multiplier, canary repetitions).
    rows: The seeds' table's rows (`read_table`).

  Returns:
    Markdown: a row per run and column, with the run's number, the band's
    mean ± sd and range, and whether the number lies in the range; runs at
    a grid point the table lacks are named as such.
  """
  found = bands(rows)
  lines = ['| z | r | column | this run | seeds: mean ± sd | seeds: range | '
           'verdict |', '|---|---|---|---|---|---|---|']
  missing = []
  for report, point in zip(reports, points):
    columns = found.get((float(point[0]), int(point[1])))
    if columns is None:
      missing.append(point)
      continue
    for column in COLUMNS:
      value = column.value(report)
      band = columns.get(column.name)
      if value is None or band is None:
        continue
      lines.append(
          f'| {point[0]:g} | {point[1]} | {column.name} | {_number(value)} | '
          f'{_number(band.mean)} ± {band.sd:.2g} | '
          f'{_number(band.low)}–{_number(band.high)} | '
          f'{"within" if band.holds(value) else "outside"} |')
  lines += [f'No seeds were run at z = {noise:g}, r = {repeats}.'
            for noise, repeats in missing]
  return '\n'.join(lines) + '\n'


# ----------------------------------------------------------------------------
# Command line: the seeds' table from the grids of several seeds.


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags on `flag_values` (when it runs).

  Args:
    flag_values: Where to define them.

  Returns:
    The flags' holders by name.
  """
  return {
      'seed_dirs': flags.DEFINE_list(
          'seed_dirs', None, "Each seed's --output_dir of "
          'experiments.reproduce (its runs/ are read).',
          flag_values=flag_values),
      'output': flags.DEFINE_string(
          'output', None, "The seeds' table (CSV) to write.",
          flag_values=flag_values),
  }


def _seed_rows(seed_dir: str,
               machine_fields: Mapping[str, str]) -> list[dict[str, str]]:
  """The rows of one seed's grid, read from its finished runs."""
  runs_dir = os.path.join(seed_dir, 'runs')
  try:
    names = sorted(os.listdir(runs_dir))
  except OSError as error:
    raise ValueError(f'--seed_dirs: cannot list {runs_dir!r}: '
                     f'{error.strerror}.') from None
  rows = []
  for name in names:
    run_dir = os.path.join(runs_dir, name)
    report_path = os.path.join(run_dir, run_directory.REPORT_JSON_FILE)
    config = json.loads(bounded_reads.read_text(
        os.path.join(run_dir, run_directory.CONFIG_FILE),
        bounded_reads.RUN_CONFIG, 'seed_dirs'))
    if not config['num_canaries']:
      continue  # An accuracy baseline (--accuracy_table): no report.
    if not os.path.exists(report_path):
      raise ValueError(f'--seed_dirs: {run_dir!r} has no report: its run '
                       'has not finished.')
    if config['seed'] != config['canary_seed']:
      raise ValueError(f'--seed_dirs: {run_dir!r} ran --seed='
                       f'{config["seed"]} with --canary_seed='
                       f'{config["canary_seed"]}: a seed of the table sets '
                       'both.')
    rows += rows_of_runs(
        config['seed'], [run_report.RunReport.read(report_path)],
        [(config['noise_multiplier'], config['canary_repeats'])],
        machine_fields)
  return rows


def main(argv: Sequence[str]) -> None:
  """Writes the seeds' table of --seed_dirs to --output and prints the band.

  Args:
    argv: The program name alone (absl took the flags; more exits 2).

  Raises:
    SystemExit: with status 2 for a missing flag or an unfinished run.
  """
  command_line.refuse_positional_arguments(argv)
  values = flags.FLAGS
  for name in ('seed_dirs', 'output'):
    if not values[name].value:
      sys.exit(f'error: --{name} is required.')
  machine_fields = machine()
  try:
    rows = [row for seed_dir in values.seed_dirs
            for row in _seed_rows(seed_dir, machine_fields)]
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  write_table(values.output, rows)
  print(band_table(rows), end='')
  print(f'Wrote {values.output}')


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
