"""What an audited run prints: Flower's essential lines once, then a table.

Flower logs every round at INFO: the round's header, its sampling, one
line per clipped reply, the noise, the metrics, then the whole history at
the end (thousands of lines for the demo). `flower_logs` keeps, unless
verbose, what a user needs once: Flower's warnings and errors, each
strategy's opening summary (its DP settings, sampling and rounds) and the
line that says how long it ran. `report_table` is the reports' headline
numbers, one row per run, in Markdown (report.md in each run directory has
the rest). Shared by the app's ServerApp and by
examples/flower_fashion_mnist.py; imports nothing of the app.
"""

import contextlib
import logging
from collections.abc import Iterator, Sequence

from one_shot_epe.reporting import run_report

# Flower's logger: every line of `flwr.common.logger.log` goes through it.
FLOWER_LOGGER = 'flwr'
# The functions logging a strategy's opening summary (`Strategy.start`).
_SUMMARY_FUNCTIONS = frozenset({'summary', 'log_strategy_start_info'})
# Flower's INFO lines kept whoever logs them.
_KEPT_PREFIXES = ('Starting ', 'Strategy execution finished')
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
