"""What an audited run prints: Flower's essential lines once, then a table.

Flower logs every round at INFO: the round's header, its sampling, one
line per clipped reply, the noise, the metrics, then the whole history at
the end (thousands of lines for the demo). `flower_logs` keeps, unless
verbose, what a user needs once: Flower's warnings and errors, each
strategy's opening summary (its DP settings, sampling and rounds) and the
line that says how long it ran, and the audit's line saying where the run
is ('new run in <dir>', 'resumed from round N in <dir>'). `opening` is the
report's opening sentences, as report.md words them; `report_table` is the
reports' headline numbers, one row per run, in Markdown (report.md in each
run directory has the rest). `refuse` ends a ServerApp with a refused value
the way Flower records a failed run, in one line. Shared by the app's
ServerApp and by examples/flower_fashion_mnist.py; imports nothing of the
app.
"""

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import NoReturn

from one_shot_epe.reporting import run_report

# Flower's logger: every line of `flwr.common.logger.log` goes through it.
FLOWER_LOGGER = 'flwr'
# The functions logging a strategy's opening summary (`Strategy.start`).
_SUMMARY_FUNCTIONS = frozenset({'summary', 'log_strategy_start_info'})
# Flower's INFO lines kept whoever logs them.
_KEPT_PREFIXES = ('Starting ', 'Strategy execution finished', 'new run in ',
                  'resumed from round ')
# The table's columns: (header, key of `RunReport.to_dict`).
_COLUMNS = (('noise', 'noise_multiplier'),
            ('analytical ε', 'analytical_epsilon'),
            ('accounted ε', 'accounted_epsilon'),
            ('ε_lo-all', 'epsilon_lo_all'), ('ε_est-all', 'epsilon_est_all'),
            ('ε_lo-final', 'epsilon_lo_final'),
            ('ε_est-final', 'epsilon_est_final'), ('accuracy', 'accuracy'))


class EssentialFlowerLines(logging.Filter):
  """Passes Flower's warnings, errors and strategy summaries; drops rounds."""

  def filter(self, record: logging.LogRecord) -> bool:
    """Whether Flower's `record` is printed.

    Args:
      record: A record of Flower's logger.

    Returns:
      True for WARNING and above, a strategy's opening summary, a 'Starting
      ...' line and the strategy's closing time; False for the rest (the
      rounds' lines, the final history, blank lines).
    """
    if record.levelno >= logging.WARNING:
      return True
    message = record.getMessage()
    return bool(message.strip()) and (
        record.funcName in _SUMMARY_FUNCTIONS or
        message.startswith(_KEPT_PREFIXES))


@contextlib.contextmanager
def flower_logs(verbose: bool) -> Iterator[None]:
  """The block in which Flower prints its essential lines only.

  Args:
    verbose: Print all of Flower's lines instead.

  Yields:
    None; Flower's logger is as before once the block ends.
  """
  if verbose:
    yield
    return
  logger = logging.getLogger(FLOWER_LOGGER)
  essential = EssentialFlowerLines()
  logger.addFilter(essential)
  try:
    yield
  finally:
    logger.removeFilter(essential)


class _OneLineRefusal(logging.Filter):
  """Drops Flower's later report of a refusal already logged in one line."""

  def __init__(self, error: Exception):
    super().__init__()
    self._error = error

  def filter(self, record: logging.LogRecord) -> bool:
    """Whether Flower's `record` is printed.

    Args:
      record: A record of Flower's logger.

    Returns:
      False for Flower's report of the refusal (its traceback) and its
      'Exit Code: ...' banner (which would call the refusal an unhandled
      exception), else True.
    """
    if record.exc_info and record.exc_info[1] is self._error:
      return False
    return not (isinstance(record.msg, str) and
                record.msg.startswith('Exit Code: '))


def refuse(error: Exception) -> NoReturn:
  """Ends the ServerApp with `error`, a value refused, as one line.

  The line is logged at once through Flower's logger (the run's log and
  stream); the error then propagates to Flower, which records the run as
  failed with the error's message as its details (a ServerApp that exits
  instead is recorded as completed in a simulation and loses its output in a
  deployment). Flower's own report of it (a traceback, an exit-code banner)
  is filtered out.

  Args:
    error: The refusal; its message names the run config key.

  Raises:
    The error, always.
  """
  logger = logging.getLogger(FLOWER_LOGGER)
  logger.addFilter(_OneLineRefusal(error))
  logger.error('%s', error)
  raise error


def opening(report: run_report.RunReport) -> str:
  """The report's opening sentences, as report.md begins.

  Args:
    report: The run's report.

  Returns:
    report.md's paragraphs before its first table: the quotable sentence of
    each threat model (what the canaries can and cannot show), then the
    notes.
  """
  lines = []
  for line in report.to_markdown().splitlines():
    if line.startswith('|'):
      break
    lines.append(line)
  return '\n'.join(lines).strip()


def _cell(value: object) -> str:
  if value is None:
    return '—'
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def report_table(reports: Sequence[run_report.RunReport]) -> str:
  """The reports' main numbers as a Markdown table, one row per run.

  Args:
    reports: The runs' reports (`CanaryAudit.report`).

  Returns:
    The table's lines: noise multiplier, analytical and accounted ε, the
    lower bound and estimate of each threat model, accuracy ('—' where a
    report has none).
  """
  lines = ['| ' + ' | '.join(header for header, _ in _COLUMNS) + ' |',
           '|' + '---|' * len(_COLUMNS)]
  for report in reports:
    fields = report.to_dict()
    lines.append('| ' + ' | '.join(_cell(fields[key]) for _, key in _COLUMNS)
                 + ' |')
  return '\n'.join(lines)
