"""What a coverage table holds: each cell's summary, and the table itself.

`benchmarks.coverage` simulates runs of a mechanism with a known true eps
and reports each run (`privacy_report`); a cell gathers the runs of one
threat model and eps (`cell`): for every lower bound of the report (BOUNDS,
the 'lower bounds' group of `report_fields.FIELDS`, those for any (eps,
delta)-DP mechanism first) the share of runs in which it exceeds the truth,
with its binomial standard error, whether that share is within alpha + 2
standard errors, and the mean bound and its ratio to the truth; the paper's
nominal bound (NOMINAL) beside them; for every estimate (ESTIMATES) the
mean and 95th percentile of estimate / truth; and the share of runs whose
seen scores Anderson and Darling's test finds not normal at 5%
(`normality_rejected`). `format_table` writes the cells as Markdown, each
bound's column marked with what it assumes. No absl flags.
"""

import math
from collections.abc import Sequence

import numpy as np

from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields

# The report's lower bounds (any mechanism first, then those that assume a
# Gaussian one); its nominal one; its estimates.
BOUNDS = tuple(field.key for field in report_fields.in_groups('lower bounds'))
ANY_MECHANISM_BOUNDS = tuple(
    key for key in BOUNDS
    if report_fields.by_key(key).assumes == report_fields.ANY_MECHANISM)
NOMINAL = ('epsilon_lo_paper',)
ESTIMATES = ('epsilon_est', 'epsilon_est_fitted', 'epsilon_gdp')
# Anderson and Darling's A^2 (mean and variance estimated) rejects normality
# at 5% above this, times 1 + 0.75/n + 2.25/n^2 (D'Agostino and Stephens,
# 1986, Table 4.7).
ANDERSON_CRITICAL_5 = 0.752


def normality_rejected(statistic: float | None, size: int) -> bool:
  """Whether A^2 of `size` scores rejects normality at 5%.

  Args:
    statistic: A^2 (`estimation.anderson_darling`), None for too few scores.
    size: The number of scores.

  Returns:
    True when A^2 (1 + 0.75/n + 2.25/n^2) exceeds ANDERSON_CRITICAL_5.
  """
  if statistic is None:
    return False
  return statistic * (1.0 + 0.75 / size + 2.25 / size**2) > (
      ANDERSON_CRITICAL_5)


def cell(reports: Sequence[privacy_report.PrivacyReport], epsilon: float,
         alpha: float) -> dict[str, dict[str, float]]:
  """Exceedance shares of the bounds and ratio summaries of the estimates.

  Args:
    reports: The cell's runs' reports.
    epsilon: The cell's true eps.
    alpha: The bounds hold at 1 - alpha.

  Returns:
    Per bound (BOUNDS, NOMINAL): the share of runs above the truth, its
    binomial standard error at alpha, the mean, the mean over the truth and
    whether the share is within alpha + 2 standard errors; per estimate
    (ESTIMATES): the mean and 95th percentile of estimate / truth; under
    'normality', the share of runs whose seen scores A^2 finds not normal.
  """
  runs = len(reports)
  result: dict[str, dict[str, float]] = {}
  for name in BOUNDS + NOMINAL:
    values = np.array([np.nan if getattr(r, name) is None else getattr(r, name)
                       for r in reports], dtype=np.float64)
    share = float(np.mean(values > epsilon))  # None (NaN) is not above.
    error = math.sqrt(alpha * (1 - alpha) / runs)
    mean = float(np.nanmean(values)) if np.any(np.isfinite(values)) or (
        np.any(np.isinf(values))) else math.nan
    result[name] = {'share_above_truth': share, 'standard_error': error,
                    'mean': mean, 'mean_ratio': mean / epsilon,
                    'holds': share <= alpha + 2 * error}
  for name in ESTIMATES:
    ratios = np.array([getattr(r, name) for r in reports]) / epsilon
    result[name] = {'mean_ratio': float(np.mean(ratios)),
                    'p95_ratio': float(np.quantile(ratios, 0.95))}
  result['normality'] = {'share_rejected': float(np.mean(
      [normality_rejected(r.anderson_seen, r.num_seen) for r in reports]))}
  return result


def _header(name: str) -> str:
  """A statistic's column: its report label and what it assumes."""
  return report_fields.by_key(name).columns()[0].header()


def format_table(table: dict[str, dict[str, dict]], runs: int,
                 alpha: float) -> str:
  """Markdown: per threat model and eps, bounds' shares above the truth and
  estimates' mean / 95th-percentile ratios to the truth.

  Args:
    table: {threat model: {eps: cell}} of a `simulate*` function.
    runs: Simulated runs per cell.
    alpha: The bounds hold at 1 - alpha.

  Returns:
    The table and a line per family of bounds saying whether its bounds
    hold in every cell.
  """
  lines = [
      f'Share of {runs} runs in which a {1 - alpha:.0%} lower bound exceeds '
      f'the true ε (a bound holds when the share is at most {alpha:g} + 2 '
      'standard errors; mean bound and mean bound / true ε in brackets; '
      '(Gaussian): a bound only if the mechanism is Gaussian in the '
      "canary's direction), estimate / true ε (mean, 95th percentile) and "
      "the share of runs whose seen scores Anderson and Darling's test "
      'finds not normal at 5%:',
      '',
      '| threat model | ε | ' + ' | '.join(
          _header(n) for n in BOUNDS + NOMINAL + ESTIMATES) +
      ' | A² rejects normality |',
      '|---|---|' + '---|' * (len(BOUNDS + NOMINAL + ESTIMATES) + 1),
  ]
  titles = {'final': 'final model', 'all': 'all iterates',
            'all_decorrelated': 'all iterates, decorrelated',
            'laplace': 'Laplace noise', 'mixture': 'Gaussian mixture noise',
            'student_t': 'Student t noise (30 df)',
            'contaminated': 'contaminated Gaussian noise (2% at 2×)'}
  for threat in table:
    title = titles[threat]
    for epsilon, row in table[threat].items():
      bounds = ' | '.join(
          f'{row[n]["share_above_truth"]:.3f} ({row[n]["mean"]:.3g}, '
          f'{row[n]["mean_ratio"]:.2f})'
          + ('' if row[n]['holds'] or n in NOMINAL else ' ✗')
          for n in BOUNDS + NOMINAL)
      estimates = ' | '.join(
          f'{row[n]["mean_ratio"]:.2f} / {row[n]["p95_ratio"]:.2f}'
          for n in ESTIMATES)
      lines.append(f'| {title} | {epsilon} | {bounds} | {estimates} | '
                   f'{row["normality"]["share_rejected"]:.3f} |')
  lines.append('')
  for family in report_fields.FAMILIES:
    names = [n for n in BOUNDS if report_fields.by_key(n).assumes == family]
    if not names:
      continue
    held = all(row[n]['holds'] for rows in table.values()
               for row in rows.values() for n in names)
    lines.append(
        f'Bounds that hold {family.holds}: ' + (
            'each holds at its level in every cell.' if held else
            'one marked ✗ exceeds the truth too often.'))
  return '\n'.join(lines) + '\n'
