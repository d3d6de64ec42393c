r"""Command line: privacy report from a CSV of canary cosines.

  python -m one_shot_epe.reporting.epsilon_cli --cosines=final.csv --dim=1206590 --delta=1e-6
  python -m one_shot_epe.reporting.epsilon_cli --cosines=maxima.csv --delta=1e-6

The CSV has a header row. A column named `cosine` (or a single unnamed column)
holds observed canaries' cosines with the final model and gives the
final-model report (Algorithm 2; needs --dim); an `unseen` column beside it
holds never-inserted canaries' cosines with the final model, for the one-run
certificates. Columns `seen` and `unseen` hold max-over-rounds cosines and give
the all-iterates report (Algorithm 3). Columns may differ in length (leave
trailing cells empty). Prints the report (`privacy_report.PrivacyReport`:
estimates, bounds that hold at 1 - alpha, the paper's nominal eps_lo, attack
summaries) as JSON (--format=json) or a Markdown table (default). Bad input
exits with status 2 and a message naming the problem.
"""

import csv
import math
import sys
from collections.abc import Sequence

from absl import app
from absl import flags

from one_shot_epe.runtime import command_line
from one_shot_epe.stats import estimation
from one_shot_epe.reporting import privacy_report

__all__ = ['build_report', 'format_markdown', 'main', 'read_cosine_columns']

_COSINES = flags.DEFINE_string('cosines', None, 'CSV file of canary cosines.')
_DIM = flags.DEFINE_integer(
    'dim', None, 'Model dimensionality d (>= 3); required for a `cosine` column.')
_DELTA = flags.DEFINE_float('delta', None, 'Target delta, in (0, 1).')
_ALPHA = flags.DEFINE_float('alpha', 0.05,
                            'Confidence level of eps_lo is 1 - alpha; in (0, 0.5).')
_THRESHOLD = flags.DEFINE_enum(
    'threshold_strategy', 'bonferroni', ['bonferroni', 'split'],
    'How the sound eps_lo pays for its threshold: a fixed family with a '
    "Bonferroni correction, or a split; the paper's nominal eps_lo is always "
    'reported as epsilon_lo_paper.')
_FORMAT = flags.DEFINE_enum('format', 'markdown', ['markdown', 'json'],
                            'Output format.')


def read_cosine_columns(path: str) -> dict[str, list[float]]:
  """Reads named numeric columns; raises ValueError naming the row and column."""
  try:
    with open(path, newline='', encoding='utf-8') as handle:
      rows = list(csv.reader(handle))
  except OSError as error:
    raise ValueError(f'--cosines: cannot read {path!r}: {error.strerror}.') from None
  except UnicodeDecodeError:
    raise ValueError(f'--cosines: {path!r} is not a text CSV file.') from None
  rows = [row for row in rows if any(cell.strip() for cell in row)]
  if len(rows) < 2:
    raise ValueError(f'--cosines: {path!r} needs a header row and data rows.')
  header = [name.strip() for name in rows[0]]
  if len(header) == 1 and header[0] not in ('cosine', 'seen', 'unseen'):
    header = ['cosine']  # A single column of any name is final-model cosines.
  allowed = ({'cosine'}, {'cosine', 'unseen'}, {'seen', 'unseen'})
  if set(header) not in allowed or len(set(header)) != len(header):
    raise ValueError(
        f'--cosines: header {rows[0]} must be a single column (`cosine`), '
        '`cosine` and `unseen` (final model, with never-inserted canaries) or '
        '`seen` and `unseen` (maxima over rounds).')
  columns: dict[str, list[float]] = {name: [] for name in header}
  for number, row in enumerate(rows[1:], start=2):
    if len(row) != len(header):
      raise ValueError(f'--cosines: row {number} has {len(row)} fields; '
                       f'expected {len(header)}.')
    for name, cell in zip(header, row):
      cell = cell.strip()
      if not cell:
        continue
      try:
        value = float(cell)
      except ValueError:
        raise ValueError(f'--cosines: row {number}, column {name!r}: {cell!r} '
                         'is not a number.') from None
      if not math.isfinite(value) or abs(value) > 1.0:
        raise ValueError(f'--cosines: row {number}, column {name!r}: {cell!r} '
                         'is not a cosine in [-1, 1].')
      columns[name].append(value)
  return columns


def build_report(columns: dict[str, list[float]], dim: int | None, delta: float,
                 alpha: float,
                 threshold_strategy: str) -> privacy_report.PrivacyReport:
  """Chooses the threat model from the columns present."""
  if 'cosine' in columns:
    if dim is None:
      raise ValueError('--dim is required for final-model cosines.')
    try:
      return privacy_report.final_model_report(
          columns['cosine'], dim, delta, alpha, unseen=columns.get('unseen'),
          threshold_strategy=threshold_strategy)
    except estimation.EpsilonOverflowError as error:
      # The cosines sit that many null standard deviations (1/sqrt(d)) out.
      raise ValueError(f'--dim={dim}: {error}; is --dim the number of model '
                       'parameters?') from None
  return privacy_report.all_iterates_report(
      columns['seen'], columns['unseen'], delta, alpha, dim=dim,
      threshold_strategy=threshold_strategy)


def _format_value(value: object) -> str:
  """Floats to 6 digits, inside lists (the interval) and dicts (TPR) too."""
  if isinstance(value, float):
    return f'{value:.6g}'
  if isinstance(value, list):
    return '[' + ', '.join(_format_value(item) for item in value) + ']'
  if isinstance(value, dict):
    return ', '.join(f'{key}: {_format_value(item)}'
                     for key, item in value.items())
  return str(value)


def format_markdown(report: privacy_report.PrivacyReport) -> str:
  """The report as a two-column Markdown table, floats to 6 digits.

  tpr_at_fpr shows as "FPR: TPR" pairs, the bootstrap interval as [low, high].
  """
  lines = ['| quantity | value |', '|---|---|']
  for key, value in report.to_dict().items():
    lines.append(f'| {key} | {_format_value(value)} |')
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> None:
  """Reads --cosines, prints the report; bad input exits with status 2."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  if _COSINES.value is None or _DELTA.value is None:
    raise app.UsageError('--cosines and --delta are required.', exitcode=2)
  try:
    columns = read_cosine_columns(_COSINES.value)
    report = build_report(columns, _DIM.value, _DELTA.value, _ALPHA.value,
                          _THRESHOLD.value)
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  if _FORMAT.value == 'json':
    print(report.to_json())
  else:
    print(format_markdown(report))


if __name__ == '__main__':
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
