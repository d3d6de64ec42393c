r"""Command line: privacy report from a CSV of canary cosines.

  python -m one_shot_epe.reporting.epsilon_cli --cosines=final.csv --dim=1206590 --delta=1e-6
  python -m one_shot_epe.reporting.epsilon_cli --cosines=maxima.csv --delta=1e-6
  python -m one_shot_epe.reporting.epsilon_cli --losses=data_canary_losses.csv --delta=1e-6

The CSV's accepted forms, every data row read:

* one column with no header (the first row is a number): observed canaries'
  cosines with the final model;
* one column under any header (`cosine`, or any name but `seen`/`unseen`):
  the same;
* `cosine` and `unseen`: the final model, with never-inserted canaries'
  cosines, for the one-run certificates and the tight one-run bounds;
* `seen` and `unseen`: max-over-rounds cosines, the all-iterates report
  (Algorithm 3).

With --losses instead, the CSV holds data canaries' final-model losses
under `seen` and `unseen` (a run's data_canary_losses.csv: the data
canaries' final-model report, `privacy_report.data_canary_report`) or
their largest excess one-round loss drops under `seen_drop` and `unseen_drop` (a
run's data_canary_drops.csv: their all-iterates report,
`privacy_report.data_canary_all_iterates_report`); --dim optional.

Final-model cosines give the final-model report (Algorithm 2) and need --dim;
the all-iterates report has no use for --dim, which is then an error.
Columns may differ in length (leave trailing cells empty). Prints the report
(`privacy_report.PrivacyReport`: estimates, lower bounds at 1 - alpha, each
with when it holds, the paper's nominal eps_lo, attack summaries) as JSON
(--format=json) or, by default, its quotable sentence, when each bound
holds and a Markdown table. Bad input exits with status 2 and one line naming
the problem: --delta, --alpha and --dim by their rules before the file is
read, and a --cosines that is not a regular UTF-8 text file of at most
`bounded_reads.COSINE_CSV_ROWS` data rows (`bounded_reads.COSINE_CSV`). A
reader that closes the pipe early (`| head`) ends it quietly.
"""

import csv
import io
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from absl import app
from absl import flags

from one_shot_epe import validation
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import estimation
from one_shot_epe.stats import null_distribution
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_markdown

__all__ = ['build_report', 'define_flags', 'format_markdown', 'main',
           'read_cosine_columns', 'read_loss_columns']

_NAMES = ('cosine', 'seen', 'unseen')

def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags on `flag_values` (when it runs).

  Defined only when the module runs as a program, so importing it leaves
  absl's flags as they were (other programs define --dim and --delta too).

  Args:
    flag_values: Where to define them.

  Returns:
    The flags' holders by name.
  """
  return {
      'cosines': flags.DEFINE_string(
          'cosines', None, 'CSV file of canary cosines.',
          flag_values=flag_values),
      'losses': flags.DEFINE_string(
          'losses', None, 'Instead of --cosines: CSV file of data canaries\' '
          'final-model losses, columns `seen` and `unseen` (a run\'s '
          'data_canary_losses.csv), or of their largest excess one-round loss '
          'drops, `seen_drop` and `unseen_drop` (data_canary_drops.csv).',
          flag_values=flag_values),
      'dim': flags.DEFINE_integer(
          'dim', None, 'Model dimensionality d (>= 3); required for '
          'final-model cosines, an error for `seen`/`unseen` columns.',
          flag_values=flag_values),
      'delta': flags.DEFINE_float('delta', None, 'Target delta, in (0, 1).',
                                  flag_values=flag_values),
      'alpha': flags.DEFINE_float(
          'alpha', 0.05,
          'Confidence level of eps_lo is 1 - alpha; in (0, 0.5).',
          flag_values=flag_values),
      'threshold_strategy': flags.DEFINE_enum(
          'threshold_strategy', 'bonferroni', ['bonferroni', 'split'],
          'How the sound eps_lo pays for its threshold: a fixed family with '
          "a Bonferroni correction, or a split; the paper's nominal eps_lo is "
          'always reported as epsilon_lo_paper.', flag_values=flag_values),
      'format': flags.DEFINE_enum('format', 'markdown', ['markdown', 'json'],
                                  'Output format.', flag_values=flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS: dict[str, flags.FlagHolder] = {}


def _is_number(cell: str) -> bool:
  try:
    float(cell)
  except ValueError:
    return False
  return True


def _data_rows(path: str, flag: str) -> Iterator[tuple[int, list[str]]]:
  """The CSV's non-blank rows with their numbers in the file (from 1)."""
  text = bounded_reads.read_text(path, bounded_reads.COSINE_CSV, flag)
  for number, row in enumerate(csv.reader(io.StringIO(text, newline='')), 1):
    if any(cell.strip() for cell in row):
      yield number, row


def read_cosine_columns(path: str) -> dict[str, list[float]]:
  """Reads the CSV's columns (the accepted forms of the module docstring).

  The file is read against `bounded_reads.COSINE_CSV` and may hold at most
  `bounded_reads.COSINE_CSV_ROWS` data rows.

  Args:
    path: The CSV file.

  Returns:
    {'cosine'} or {'cosine', 'unseen'} or {'seen', 'unseen'}: each column's
    values, empty cells skipped.

  Raises:
    ValueError: naming the file, row and column of what cannot be read
      (`bounded_reads.InputRefused` for a file that is not a text file
      within its limit).
  """
  return _read_columns(
      path, '--cosines', ({'cosine'}, {'cosine', 'unseen'},
                          {'seen', 'unseen'}),
      lambda value: abs(value) <= 1.0, 'a cosine in [-1, 1]',
      'a single column (`cosine`), `cosine` and `unseen` (final model, with '
      'never-inserted canaries) or `seen` and `unseen` (maxima over rounds)')


def read_loss_columns(path: str) -> dict[str, list[float]]:
  """Reads a CSV of data canaries' losses or largest loss drops.

  Read as `read_cosine_columns` reads (its limits); any finite number is a
  loss or a drop.

  Args:
    path: The CSV file (a run's data_canary_losses.csv, columns `seen` and
      `unseen`, or data_canary_drops.csv, `seen_drop` and `unseen_drop`).

  Returns:
    {'seen', 'unseen'} or {'seen_drop', 'unseen_drop'}: each column's
    values, empty cells skipped.

  Raises:
    ValueError: naming the file, row and column of what cannot be read.
  """
  return _read_columns(path, '--losses', ({'seen', 'unseen'},
                                         {'seen_drop', 'unseen_drop'}),
                       lambda value: True, 'a finite loss',
                       '`seen` and `unseen` (data canaries\' final-model '
                       'losses) or `seen_drop` and `unseen_drop` (their '
                       'largest excess one-round loss drops)')


def _read_columns(path: str, flag: str, allowed: Sequence[set[str]],
                  admits: Callable[[float], bool], kind: str,
                  forms: str) -> dict[str, list[float]]:
  """The CSV's named columns of finite numbers that `admits` accepts."""
  rows = _data_rows(path, flag)
  first_number, first_row = next(rows, (0, []))
  first = [cell.strip() for cell in first_row]
  headerless = len(first) == 1 and _is_number(first[0])
  if headerless:
    rows = itertools.chain([(first_number, first_row)], rows)
    header = ['cosine']  # No header: every row is data.
  elif any(_is_number(cell) for cell in first):
    raise ValueError(f'{flag}: {path!r} has {len(first)} columns and no '
                     f'header row; name them: {forms}.')
  else:
    header = first
  if len(header) == 1 and header[0] not in _NAMES:
    header = ['cosine']  # A single column of any name is final-model cosines.
  if header and (set(header) not in allowed or
                 len(set(header)) != len(header)):
    raise ValueError(f'{flag}: header {first_row} must be {forms}.')
  columns: dict[str, list[float]] = {name: [] for name in header}
  count = 0
  for count, (number, row) in enumerate(rows, 1):
    if count > bounded_reads.COSINE_CSV_ROWS:
      raise ValueError(f'{flag}: {path!r} has more than '
                       f'{bounded_reads.COSINE_CSV_ROWS:,} data rows, the '
                       'most this program reads.')
    if len(row) != len(header):
      raise ValueError(f'{flag}: row {number} has {len(row)} fields; '
                       f'expected {len(header)}.')
    for name, cell in zip(header, row):
      cell = cell.strip()
      if not cell:
        continue
      try:
        value = float(cell)
      except ValueError:
        raise ValueError(f'{flag}: row {number}, column {name!r}: {cell!r} '
                         'is not a number.') from None
      if not math.isfinite(value) or not admits(value):
        raise ValueError(f'{flag}: row {number}, column {name!r}: {cell!r} '
                         f'is not {kind}.')
      columns[name].append(value)
  if not count:
    raise ValueError(f'{flag}: {path!r} needs a header row and data rows.')
  return columns


def build_report(columns: dict[str, list[float]], dim: int | None, delta: float,
                 alpha: float, threshold_strategy: str,
                 losses: bool = False) -> privacy_report.PrivacyReport:
  """The report of the threat model the columns hold.

  Args:
    columns: `read_cosine_columns`'s result (`read_loss_columns`' with
      `losses`).
    dim: --dim: required for final-model cosines, refused for seen/unseen.
    delta: --delta.
    alpha: --alpha.
    threshold_strategy: --threshold_strategy.
    losses: Whether the columns are data canaries' losses (--losses).

  Returns:
    The final-model report for a `cosine` column, the data canaries'
    final-model report for losses and their all-iterates one for loss
    drops, else the all-iterates one.

  Raises:
    ValueError: naming the flag or column at fault.
  """
  if losses and 'seen_drop' in columns:
    return privacy_report.data_canary_all_iterates_report(
        columns['seen_drop'], columns['unseen_drop'], delta, alpha, dim=dim,
        threshold_strategy=threshold_strategy)
  if losses:
    return privacy_report.data_canary_report(
        columns['seen'], columns['unseen'], delta, alpha, dim=dim,
        threshold_strategy=threshold_strategy)
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
  if dim is not None:
    raise ValueError('--dim applies to final-model cosines (a `cosine` '
                     'column); the all-iterates report of `seen` and `unseen` '
                     'columns does not use it.')
  return privacy_report.all_iterates_report(
      columns['seen'], columns['unseen'], delta, alpha,
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
  """The report's sentence, when its bounds hold, then a three-column table.

  The sentence is `run_markdown.threat_sentence`'s (no analytical ε: the
  cosines alone do not give it), with `run_markdown.assumption_notes`;
  then `run_markdown.bounds_sentences` and
  `run_markdown.missing_notes`; then every field, floats to 6 digits
  (tpr_at_fpr as "FPR: TPR" pairs, the bootstrap interval as [low, high]),
  with what it assumes (`run_markdown.assumption_cell`; blank for the
  scores' facts).

  Args:
    report: The report.

  Returns:
    The text's lines joined by newlines.
  """
  confidence = f'{1 - report.alpha:.0%}'
  name = 'Final model' if report.threat_model == 'final' else 'All iterates'
  if report.canary_kind == 'data':
    name += ', data canaries'
  threats = [(name.lower(), report)]
  lines = [run_markdown.threat_sentence(name, report),
           *run_markdown.assumption_notes(threats), '',
           *run_markdown.bounds_sentences(confidence),
           *run_markdown.missing_notes(threats), '',
           '| quantity | value | what it assumes |', '|---|---|---|']
  entries = {field.key: field for field in report_fields.FIELDS}
  for key, value in report.to_dict().items():
    assumes = ('' if key not in entries else
               run_markdown.assumption_cell(entries[key], confidence))
    lines.append(f'| {key} | {_format_value(value)} | {assumes} |')
  return '\n'.join(lines)


def _fail(message: str) -> NoReturn:
  """One line on stderr, exit status 2."""
  print(f'error: {message}', file=sys.stderr)
  sys.exit(2)


def _print_quietly(text: str) -> None:
  """Prints `text`; a reader that closed the pipe (`| head`) ends it quietly.

  Python's advice for SIGPIPE: stdout is pointed at /dev/null so that the
  interpreter's final flush cannot raise again, and the program exits 0 (the
  reader had what it wanted).
  """
  try:
    print(text)
    sys.stdout.flush()
  except BrokenPipeError:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)


def main(argv: Sequence[str]) -> None:
  """Reads --cosines, prints the report; bad input exits with status 2.

  Args:
    argv: The command line left after the flags (the program name only).
  """
  if len(argv) > 1:
    _fail(f'unexpected arguments: {argv[1:]} (--helpshort lists the flags)')
  values = {name: holder.value for name, holder in _FLAGS.items()}
  if (values['cosines'] is None) == (values['losses'] is None):
    _fail('pass exactly one of --cosines and --losses (--helpshort lists '
          'the flags).')
  if values['delta'] is None:
    _fail('--delta is required (--helpshort lists the flags).')
  try:
    # Each flag by its parameter's rule, named as a flag, before the file.
    for name, rule in (('delta', validation.PARAMETERS['delta']),
                       ('alpha', validation.PARAMETERS['alpha']),
                       ('dim', validation.Optional(null_distribution.DIM))):
      rule(f'--{name}', values[name])
    losses = values['losses'] is not None
    columns = (read_loss_columns(values['losses']) if losses else
               read_cosine_columns(values['cosines']))
    report = build_report(columns, values['dim'], values['delta'],
                          values['alpha'], values['threshold_strategy'],
                          losses=losses)
  except ValueError as error:
    _fail(str(error))
  if values['format'] == 'json':
    _print_quietly(report.to_json())
  else:
    _print_quietly(format_markdown(report))


if __name__ == '__main__':
  _FLAGS.update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
