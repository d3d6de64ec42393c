"""How far is each lower bound of the report from the best its kind can show?

For k in --canaries seen canaries (and as many unseen) and eps in
--epsilons, the Gaussian mechanism in the canary's direction, in
standardized units: a seen canary scores N(mu, 1), an unseen one (and the
final model's known null) N(0, 1), mu = 1 / sigma with sigma the noise of
the Gaussian mechanism that is exactly (eps, delta)-DP
(`bound_oracles.gaussian_mu`). Each cell simulates --runs runs (one entry
per --canaries entry) and computes every lower bound the report carries at
1 - alpha, with the report's own functions and defaults (`BOUNDS`):

* final model, against the known null: epsilon_lo (the 16 fixed FPRs,
  Bonferroni, `lower_bound.epsilon_lower_bound`), epsilon_lo_tight_any
  (`tight_audit.epsilon_lo_known_null`), epsilon_lo_gauss_pair
  (`gaussian_pair.epsilon_lo_known_null`);
* all iterates, seen against unseen: epsilon_lo (the unseen ranks),
  epsilon_lo_tight_any (the one-run game, channel family),
  epsilon_lo_gauss_pair (`gaussian_pair.epsilon_lo_two_sample`);
* both threat models alike (each report compares the seen with the unseen
  scores): epsilon_one_run, epsilon_one_run_fdp, epsilon_lo_tight_gdp,
  epsilon_lo_gdp_thresholds.

The scores reach the bounds divided by sqrt(d), d = 10^5, as cosines, the
known null N(0, 1/d) (the report's final model uses the exact null of
Theorem 3.1, whose tail probabilities differ from N(0, 1/d)'s by under
0.3%, relative, down to 10^-9 at this d: 0.003 in eps; every bound here is
unchanged by a common scale). Beside each bound's mean
/ eps the table gives its oracle / eps, the best 95% bound a test of its
kind certifies with k canaries when it knows the seen canaries' law (each
defined in `benchmarks.bound_oracles`), and the ratio mean / oracle. A
second table shows what the any-mechanism bounds' search costs: the mean
over the same runs of the oracle's own test, its threshold (or r) fixed in
advance at level alpha (`benchmarks.bound_best_tests`), beside the bound's
mean.

The oracle is what a test of the kind certifies when its counts come out
at their expected values; a run's counts vary, and the bound, convex in
them and the best of many tests, gains more from lucky runs than it loses
from unlucky ones: a mean a little above its oracle is no contradiction.

  python -m benchmarks.bound_limits        # 200/100/6 runs, about 7 min
  python -m benchmarks.bound_limits --canaries=1000 --runs=200 \\
      --figure=''
"""

import dataclasses
import math
import os
import time
import types
from collections.abc import Callable, Sequence

import numpy as np
from absl import app
from absl import flags
from scipy import stats

from benchmarks import bound_best_tests
from benchmarks import bound_oracles
from benchmarks import tiny
from one_shot_epe.reporting import report_fields
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import gaussian_pair
from one_shot_epe.stats import gdp_threshold
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit

DIM = 10**5  # d of the cosines the bounds see (scores over sqrt(d)).
_ROOT_DIM = math.sqrt(DIM)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'canaries': flags.DEFINE_list(
          'canaries', ['100', '1000', '10000'], 'Seen canaries k of each '
          'cell (and as many unseen).', flag_values=flag_values),
      'runs': flags.DEFINE_list(
          'runs', ['200', '100', '6'], 'Simulated runs per cell, one per '
          '--canaries entry (fewer at k = 10,000: there the one-run game '
          "bounds' exact no-signal p-value takes seconds per run).",
          flag_values=flag_values),
      'epsilons': flags.DEFINE_list(
          'epsilons', ['1', '3', '10'], 'True epsilons of the simulated '
          'mechanisms.', flag_values=flag_values),
      'delta': flags.DEFINE_float(
          'delta', 1e-06, 'delta of every epsilon.', lower_bound=0.0,
          upper_bound=1.0, flag_values=flag_values),
      'alpha': flags.DEFINE_float(
          'alpha', 0.05, 'Bounds hold at 1 - alpha.', lower_bound=0.0,
          upper_bound=0.5, flag_values=flag_values),
      'seed': flags.DEFINE_integer(
          'seed', 0, 'Seed of the simulations.', lower_bound=0,
          flag_values=flag_values),
      'figure': flags.DEFINE_string(
          'figure', 'docs/images/bound_limits.png', 'Where the figure is '
          "written ('' for none).", flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one cell (k = 100, eps 3) of 3 runs, no
# figure.
_TINY = dict(canaries=['100'], runs=['3'], epsilons=['3'], figure='')

Compute = Callable[[np.ndarray, np.ndarray, float, float], float]


@dataclasses.dataclass(frozen=True)
class Bound:
  """One lower bound of the report as the benchmark computes it.

  Attributes:
    key: Its field of `privacy_report.PrivacyReport`.
    threat_model: 'final', 'all' or 'both' (computed alike in both).
    compute: (seen, unseen, delta, alpha) -> the bound, from cosines (the
      standardized scores over sqrt(d)).
    oracle: The cell's oracle (`bound_oracles`).
    kind: The oracle's kind, in words.
  """
  key: str
  threat_model: str
  compute: Compute
  oracle: Callable[[bound_oracles.Setting], float]
  kind: str

  @property
  def name(self) -> str:
    """The table's name, e.g. 'epsilon_lo (final)'."""
    return f'{self.key} ({self.threat_model})'

  @property
  def any_mechanism(self) -> bool:
    """Whether the report says it holds for any (eps, delta)-DP mechanism."""
    return report_fields.by_key(self.key).assumes == report_fields.ANY_MECHANISM


def _null_logsf(cosines: np.ndarray) -> np.ndarray:
  """log P(null cosine > t) of the known null N(0, 1/d)."""
  return stats.norm.logsf(cosines * _ROOT_DIM)


BOUNDS = (
    Bound('epsilon_lo', 'final',
          lambda seen, unseen, delta, alpha: lower_bound.epsilon_lower_bound(
              seen, delta=delta, dim=DIM, alpha=alpha, null='gaussian'),
          bound_oracles.threshold_known_null, 'threshold, known null'),
    Bound('epsilon_lo_tight_any', 'final',
          lambda seen, unseen, delta, alpha: tight_audit.epsilon_lo_known_null(
              seen, _null_logsf, delta=delta, alpha=alpha),
          bound_oracles.threshold_known_null, 'threshold, known null'),
    Bound('epsilon_lo', 'all',
          lambda seen, unseen, delta, alpha: lower_bound.epsilon_lower_bound(
              seen, delta=delta, unseen=unseen, alpha=alpha),
          bound_oracles.threshold_two_sample, 'threshold, two-sample'),
    Bound('epsilon_lo_tight_any', 'all',
          lambda seen, unseen, delta, alpha: tight_audit.epsilon_lo_tight(
              seen, unseen, delta=delta, family='channel', alpha=alpha),
          lambda setting: bound_oracles.game(setting, 'channel'),
          'one-run game, channel'),
    Bound('epsilon_one_run', 'both',
          lambda seen, unseen, delta, alpha: one_run.epsilon_one_run(
              seen, unseen, delta=delta, alpha=alpha),
          lambda setting: bound_oracles.one_run_guesses(setting, 'steinke'),
          'guesses above a threshold'),
    Bound('epsilon_one_run_fdp', 'both',
          lambda seen, unseen, delta, alpha: one_run.epsilon_one_run_fdp(
              seen, unseen, delta=delta, alpha=alpha),
          lambda setting: bound_oracles.one_run_guesses(setting, 'fdp'),
          'guesses above a threshold'),
    Bound('epsilon_lo_tight_gdp', 'both',
          lambda seen, unseen, delta, alpha: tight_audit.epsilon_lo_tight(
              seen, unseen, delta=delta, family='gdp', alpha=alpha),
          lambda setting: bound_oracles.game(setting, 'gdp'),
          'one-run game, μ-GDP'),
    Bound('epsilon_lo_gdp_thresholds', 'both',
          lambda seen, unseen, delta, alpha: (
              gdp_threshold.epsilon_gdp_thresholds(
                  seen, unseen, delta=delta, alpha=alpha)),
          bound_oracles.gdp_thresholds, 'threshold, two-sample, μ-GDP'),
    Bound('epsilon_lo_gauss_pair', 'final',
          lambda seen, unseen, delta, alpha: (
              gaussian_pair.epsilon_lo_known_null(
                  seen, null_std=1.0 / _ROOT_DIM, delta=delta, alpha=alpha)),
          bound_oracles.gauss_pair_known_null, 'mean shift, null known'),
    Bound('epsilon_lo_gauss_pair', 'all',
          lambda seen, unseen, delta, alpha: (
              gaussian_pair.epsilon_lo_two_sample(
                  seen, unseen, delta=delta, alpha=alpha)),
          bound_oracles.gauss_pair_two_sample, 'mean shift, two-sample'),
)


@dataclasses.dataclass(frozen=True)
class Row:
  """One bound in one cell.

  Attributes:
    canaries: k.
    epsilon: The true eps.
    bound: The bound.
    runs: The runs simulated.
    mean: The bound's mean over the runs.
    standard_error: The mean's standard error.
    oracle: The oracle's value.
    best_test: The mean of the oracle's own test over the same runs
      (`bound_best_tests.BEST_TESTS` bounds), or None.
  """
  canaries: int
  epsilon: float
  bound: Bound
  runs: int
  mean: float
  standard_error: float
  oracle: float
  best_test: float | None


def simulate_cell(canaries: int, epsilon: float, runs: int, delta: float,
                  alpha: float, seed: int) -> list[Row]:
  """Every bound's mean over `runs` runs of one cell, with its oracles.

  Args:
    canaries: k seen and k unseen canaries.
    epsilon: The true eps, > 0.
    runs: Simulated runs, >= 1.
    delta: delta of every eps.
    alpha: The bounds hold at 1 - alpha.
    seed: The simulation's seed (with k and eps, the cell's generator).

  Returns:
    One `Row` per entry of `BOUNDS`, in its order.
  """
  setting = bound_oracles.Setting(
      canaries, bound_oracles.gaussian_mu(epsilon, delta), delta, alpha)
  tests = {key: bound_best_tests.best_test(*key, setting)
           for key in bound_best_tests.BEST_TESTS}
  rng = np.random.default_rng([seed, canaries, round(1e6 * epsilon)])
  values = np.zeros((runs, len(BOUNDS)))
  tested = {key: np.zeros(runs) for key in tests}
  for run in range(runs):
    seen = rng.standard_normal(canaries) + setting.mu
    unseen = rng.standard_normal(canaries)
    values[run] = [bound.compute(seen / _ROOT_DIM, unseen / _ROOT_DIM, delta,
                                 alpha) for bound in BOUNDS]
    for key, test in tests.items():
      tested[key][run] = test(seen, unseen)
  oracles: dict[Callable, float] = {}
  rows = []
  for index, bound in enumerate(BOUNDS):
    if bound.oracle not in oracles:
      oracles[bound.oracle] = bound.oracle(setting)
    best = tested.get((bound.key, bound.threat_model))
    spread = float(np.std(values[:, index], ddof=1)) if runs > 1 else 0.0
    rows.append(Row(canaries, epsilon, bound, runs,
                    float(np.mean(values[:, index])),
                    spread / math.sqrt(runs), oracles[bound.oracle],
                    None if best is None else float(np.mean(best))))
  return rows


def _ratio(value: float, reference: float) -> str:
  return f'{value / reference:.3f}' if reference > 0 else 'n/a'


def format_table(rows: Sequence[Row]) -> str:
  """The main table as Markdown: k, eps, bound, mean/eps, oracle/eps, ratio.

  Args:
    rows: The cells' rows.

  Returns:
    The table's lines.
  """
  lines = ['| k | ε | bound | holds for | oracle kind | runs | mean/ε (± SE) '
           '| oracle/ε | mean/oracle |', '|---|---|---|---|---|---|---|---|---|']
  for row in rows:
    holds = 'any' if row.bound.any_mechanism else 'Gaussian'
    lines.append(
        f'| {row.canaries} | {row.epsilon:g} | {row.bound.name} | {holds} | '
        f'{row.bound.kind} | {row.runs} | {row.mean / row.epsilon:.3f} ± '
        f'{row.standard_error / row.epsilon:.3f} | '
        f'{row.oracle / row.epsilon:.3f} | {_ratio(row.mean, row.oracle)} |')
  return '\n'.join(lines) + '\n'


def format_search_cost(rows: Sequence[Row]) -> str:
  """The any-mechanism bounds against their oracle's test, run.

  Args:
    rows: The cells' rows (those without a best test are left out).

  Returns:
    The table's lines: oracle, the best test's mean and the bound's mean
    over eps, and the bound's mean over the best test's.
  """
  lines = ['| k | ε | bound | oracle/ε | best test, mean/ε | mean/ε | '
           'mean/best test |', '|---|---|---|---|---|---|---|']
  for row in rows:
    if row.best_test is None:
      continue
    lines.append(
        f'| {row.canaries} | {row.epsilon:g} | {row.bound.name} | '
        f'{row.oracle / row.epsilon:.3f} | {row.best_test / row.epsilon:.3f} '
        f'| {row.mean / row.epsilon:.3f} | {_ratio(row.mean, row.best_test)} '
        '|')
  return '\n'.join(lines) + '\n'


def write_figure(rows: Sequence[Row], path: str) -> None:
  """Mean / eps (solid) and oracle / eps (dashed) against k, as a PNG.

  One column per eps; the any-mechanism bounds in the top row, those that
  assume a Gaussian mechanism in the bottom one.

  Args:
    rows: The cells' rows.
    path: The PNG file; its folder is created if missing.
  """
  # Imported here: only the figure needs matplotlib.
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  epsilons = sorted({row.epsilon for row in rows})
  figure, axes = pyplot.subplots(2, len(epsilons), squeeze=False,
                                 sharex=True, sharey=True,
                                 figsize=(4.2 * len(epsilons), 7.5))
  colors = pyplot.get_cmap('tab10').colors
  for column, epsilon in enumerate(epsilons):
    for line, bound in enumerate(BOUNDS):
      chosen = sorted((row for row in rows if row.bound is bound and
                       row.epsilon == epsilon), key=lambda row: row.canaries)
      axis = axes[0 if bound.any_mechanism else 1, column]
      ks = [row.canaries for row in chosen]
      color = colors[line % len(colors)]
      axis.plot(ks, [row.mean / epsilon for row in chosen], 'o-',
                color=color, label=bound.name)
      axis.plot(ks, [row.oracle / epsilon for row in chosen], '--',
                color=color)
    for row_index, title in enumerate(('any (ε, δ)-DP mechanism',
                                       'Gaussian in the canary’s direction')):
      axis = axes[row_index, column]
      axis.set_xscale('log')
      axis.set_ylim(0.0, 1.05)
      axis.axhline(1.0, color='grey', linewidth=0.5)
      axis.set_title(f'ε = {epsilon:g}: {title}', fontsize=9)
      axis.grid(alpha=0.3)
      if column == 0:
        axis.set_ylabel('bound / ε (solid: mean, dashed: oracle)')
      if row_index == 1:
        axis.set_xlabel('seen canaries k')
  for row_index in range(2):
    axes[row_index, -1].legend(fontsize=8, loc='center left',
                               bbox_to_anchor=(1.02, 0.5))
  folder = os.path.dirname(path)
  if folder:
    os.makedirs(folder, exist_ok=True)
  figure.savefig(path, dpi=110, bbox_inches='tight')
  pyplot.close(figure)


def _numbers(name: str, kind: type) -> list:
  """A list flag's entries as `kind`, positive; exit 2 otherwise."""
  texts = getattr(_FLAGS, name).value
  try:
    values = [kind(text) for text in texts]
  except ValueError:
    values = []
  if not values or min(values) <= 0:
    raise app.UsageError(f'--{name} must list positive numbers; got {texts}.',
                         exitcode=2)
  return values


def main(argv: Sequence[str]) -> None:
  """Simulates every cell, prints both tables, writes the figure.

  Args:
    argv: The command line left after the flags (the program's name).

  Raises:
    app.UsageError: exit status 2, for extra arguments, list flags that are
      not positive numbers, --runs not one per --canaries entry, or fewer
      than 10 canaries.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  canaries = _numbers('canaries', int)
  runs = _numbers('runs', int)
  epsilons = _numbers('epsilons', float)
  if len(runs) != len(canaries):
    raise app.UsageError('--runs must give one count per --canaries entry; '
                         f'got {runs} for {canaries}.', exitcode=2)
  if min(canaries) < 10:
    raise app.UsageError('--canaries must be at least 10 (the one-run game '
                         f'needs 20 in all); got {canaries}.', exitcode=2)
  delta, alpha = _FLAGS.delta.value, _FLAGS.alpha.value
  start = time.perf_counter()
  rows: list[Row] = []
  for size, count in zip(canaries, runs):
    cell_start = time.perf_counter()
    for epsilon in epsilons:
      rows += simulate_cell(size, epsilon, count, delta, alpha,
                            _FLAGS.seed.value)
    print(f'k = {size}: {count} runs per cell, '
          f'{time.perf_counter() - cell_start:.0f} s.', flush=True)
  print(f'\nThe Gaussian mechanism in standardized units (seen N(μ, 1), '
        f'unseen and null N(0, 1)), δ = {delta:g}, {1 - alpha:.0%} bounds, '
        f'seed {_FLAGS.seed.value}; runs per cell: ' + ', '.join(
            f'{count} at k = {size}' for size, count in zip(canaries, runs))
        + '.\n')
  print(format_table(rows))
  print("What the any-mechanism bounds' search costs: the oracle, the mean "
        "of the oracle's test run on the same runs (its threshold or r fixed "
        f'in advance, level α = {alpha:g}), and the bound\'s mean:\n')
  print(format_search_cost(rows))
  if _FLAGS.figure.value:
    write_figure(rows, _FLAGS.figure.value)
    print(f'Figure: {_FLAGS.figure.value}')
  print(f'Wall time: {time.perf_counter() - start:.0f} s.')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
