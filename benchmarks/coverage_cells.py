"""What a coverage table holds: each cell's summary, and the table itself.

`benchmarks.coverage` simulates runs of a mechanism with a known true eps
and reports each run (`privacy_report`); a cell gathers the runs of one
threat model and eps (`cell`): for every statistic the report labels a
bound at 1 - alpha (BOUNDS) the share of runs in which it exceeds the
truth, with its binomial standard error, whether that share is within
alpha + 2 standard errors, and the mean bound and its ratio to the truth;
the paper's nominal bound (NOMINAL) beside them; for every estimate
(ESTIMATES) the mean and 95th percentile of estimate / truth.
`format_table` writes the cells as Markdown. No absl flags.
"""

import math
from collections.abc import Sequence

import numpy as np

from one_shot_epe.reporting import privacy_report

# The report's bounds at 1 - alpha; its nominal one; its estimates.
BOUNDS = ('epsilon_lo', 'epsilon_one_run', 'epsilon_one_run_fdp',
          'epsilon_lo_tight_any', 'epsilon_lo_tight_gdp')
NOMINAL = ('epsilon_lo_paper',)
ESTIMATES = ('epsilon_est', 'epsilon_est_fitted', 'epsilon_gdp')


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
    (ESTIMATES): the mean and 95th percentile of estimate / truth.
  """
  runs = len(reports)
  result: dict[str, dict[str, float]] = {}
  for name in BOUNDS + NOMINAL:
    values = np.array([getattr(r, name) for r in reports], dtype=np.float64)
    share = float(np.mean(values > epsilon))
    error = math.sqrt(alpha * (1 - alpha) / runs)
    result[name] = {'share_above_truth': share, 'standard_error': error,
                    'mean': float(np.mean(values)),
                    'mean_ratio': float(np.mean(values)) / epsilon,
                    'holds': share <= alpha + 2 * error}
  for name in ESTIMATES:
    ratios = np.array([getattr(r, name) for r in reports]) / epsilon
    result[name] = {'mean_ratio': float(np.mean(ratios)),
                    'p95_ratio': float(np.quantile(ratios, 0.95))}
  return result


def format_table(table: dict[str, dict[str, dict]], runs: int,
                 alpha: float) -> str:
  """Markdown: per threat model and eps, bounds' shares above the truth and
  estimates' mean / 95th-percentile ratios to the truth.

  Args:
    table: {threat model: {eps: cell}} of a `simulate*` function.
    runs: Simulated runs per cell.
    alpha: The bounds hold at 1 - alpha.

  Returns:
    The table and a line saying whether every bound holds.
  """
  names = {'epsilon_lo': 'ε_lo', 'epsilon_one_run': 'one-run',
           'epsilon_one_run_fdp': 'one-run f-DP',
           'epsilon_lo_tight_any': 'tight, any (ε, δ)',
           'epsilon_lo_tight_gdp': 'tight, μ-GDP',
           'epsilon_lo_paper': "paper's ε_lo (nominal)",
           'epsilon_est': 'ε_est', 'epsilon_est_fitted': "paper's ε_est",
           'epsilon_gdp': 'ε_gdp'}
  lines = [
      f'Share of {runs} runs in which a {1 - alpha:.0%} lower bound exceeds '
      f'the true ε (a bound holds when the share is at most {alpha:g} + 2 '
      'standard errors; mean bound and mean bound / true ε in brackets), '
      'and estimate / true ε (mean, 95th percentile):',
      '',
      '| threat model | ε | ' + ' | '.join(
          names[n] for n in BOUNDS + NOMINAL) + ' | ' + ' | '.join(
              names[n] for n in ESTIMATES) + ' |',
      '|---|---|' + '---|' * (len(BOUNDS + NOMINAL) + len(ESTIMATES)),
  ]
  titles = {'final': 'final model', 'all': 'all iterates',
            'all_decorrelated': 'all iterates, decorrelated',
            'laplace': 'Laplace noise', 'mixture': 'Gaussian mixture noise'}
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
      lines.append(f'| {title} | {epsilon} | {bounds} | {estimates} |')
  held = all(row[n]['holds'] for rows in table.values()
             for row in rows.values() for n in BOUNDS)
  lines += ['', 'Every bound holds at its level in every cell.' if held else
            'A bound marked ✗ exceeds the truth too often.']
  return '\n'.join(lines) + '\n'
