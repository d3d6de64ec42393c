"""Table 2 of the paper: one-shot auditing of the Gaussian mechanism (Sec. 3).

For each target epsilon the noise sigma is set by the optimal calibration of
Balle & Wang (2018) at delta, Algorithm 1 is simulated `num_simulations` times
(k canaries uniform on S^{d-1}, rho = sum_j c_j + N(0, sigma^2 I_d)), and each
simulation's k cosines give two estimates:

* "Alg. 1, fitted std": Algorithm 1, line 10, as stated: eps between the null
  N(0, 1/d) and N(mean, std^2) fitted to the cosines
  (`estimation.epsilon_from_final_cosines`).
* "std fixed at 1/sqrt(d)": eps between N(0, 1/d) and N(mean, 1/d), i.e. the
  fitted variance replaced by its limit from Theorem 3.3 (d * std^2 -> 1).

At k = 10^3 and delta = 10^-6 the two differ: the fitted std has a relative
sampling error of about 1/sqrt(2k) = 2.2%, and eps at small delta grows
steeply with any mismatch of the two variances (either way), so the fitted
estimate is biased upwards and spread out (about 1.37 ± 0.29 at eps = 1). The
paper's Table 2 values (0.972 ± 0.148, 3.04 ± 0.137, 9.98 ± 0.190) agree with
the fixed-variance estimate. Both are printed, with Welch z statistics against
the paper's values at the paper's setting (d = 10^6, k = 10^3, delta = 10^-6)
and against the analytical epsilon.

  python -m experiments.gaussian_mechanism                       # full table
  python -m experiments.gaussian_mechanism --num_simulations=10  # quick demo

Bad flags exit with status 2 and a message naming the flag. The flags are
defined only when this module runs as a program, so that tests and benchmarks
can import the table functions without registering global absl flags (which
would collide with same-named flags of other programs imported alongside).
"""

import dataclasses
import math
import os
import time
from collections.abc import Sequence

import numpy as np
from absl import app
from absl import flags

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import interrupts
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_simulation

__all__ = ['Estimates', 'PAPER_NUM_SIMULATIONS', 'PAPER_TABLE2', 'PaperRow',
           'Row', 'Setting', 'epsilon_estimates', 'format_table', 'main',
           'paper_row', 'run_row', 'run_table', 'z_versus_analytical',
           'z_versus_paper']


@dataclasses.dataclass(frozen=True)
class PaperRow:
  """One row of the paper's Table 2 (mean and std of eps_est over 50 runs)."""
  sigma: float
  mean: float
  std: float


# Table 2 of the paper, keyed by the analytical epsilon.
PAPER_TABLE2 = {
    1.0: PaperRow(sigma=4.22, mean=0.972, std=0.148),
    3.0: PaperRow(sigma=1.54, mean=3.04, std=0.137),
    10.0: PaperRow(sigma=0.541, mean=9.98, std=0.190),
}
PAPER_NUM_SIMULATIONS = 50


@dataclasses.dataclass(frozen=True)
class Setting:
  """The simulation setting shared by all rows (defaults: the paper's)."""
  dim: int = 10**6
  num_canaries: int = 10**3
  delta: float = 1e-6
  num_simulations: int = PAPER_NUM_SIMULATIONS
  method: str = 'gram'
  seed: int = 0

  def __post_init__(self):
    for name, minimum in (('dim', 3), ('num_canaries', 1),
                          ('num_simulations', 1), ('seed', 0)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or (
          value < minimum):
        raise ValueError(f'{name} must be an integer >= {minimum}, got '
                         f'{value!r}.')
    if not 0 < self.delta < 1:
      raise ValueError(f'delta must be in (0, 1), got {self.delta!r}.')
    if self.method not in gaussian_simulation.METHODS:
      raise ValueError(f'method must be one of {gaussian_simulation.METHODS}, '
                       f'got {self.method!r}.')

  def is_paper_setting(self) -> bool:
    """True at Table 2's d = 10^6, k = 10^3, delta = 10^-6 (Sec. 3).

    Only there are the paper's values a valid reference (`paper_row`).

    Returns:
      Whether this setting is Table 2's.
    """
    return (self.dim == 10**6 and self.num_canaries == 10**3 and
            self.delta == 1e-6)


@dataclasses.dataclass(frozen=True)
class Estimates:
  """eps_est of each simulation for one target epsilon, by one estimator."""
  values: np.ndarray

  @property
  def mean(self) -> float:
    """Mean eps_est over simulations (the first number of a Table 2 cell)."""
    return float(np.mean(self.values))

  @property
  def std(self) -> float:
    """Sample standard deviation (ddof=1) over simulations."""
    return float(np.std(self.values, ddof=1))


@dataclasses.dataclass(frozen=True)
class Row:
  """Results for one target epsilon.

  Attributes:
    epsilon: the target epsilon sigma is calibrated to.
    sigma: the noise std from the optimal calibration (Balle & Wang 2018).
    analytical_epsilon: the exact epsilon of `sigma` at delta.
    fitted: Algorithm 1 as stated: eps between N(0, 1/d) and
      N(mean, std^2) fitted to the cosines (std with ddof=0).
    fixed_variance: eps between N(0, 1/d) and N(mean, 1/d), i.e. the variance
      of the fit replaced by its Theorem 3.3 limit 1/d (module docstring).
    wall_time_s: wall time of the row (sampling and both estimates).
  """
  epsilon: float
  sigma: float
  analytical_epsilon: float
  fitted: Estimates
  fixed_variance: Estimates
  wall_time_s: float


def epsilon_estimates(setting: Setting, sigma: float,
                      rng: np.random.Generator) -> tuple[Estimates, Estimates]:
  """(fitted, fixed-variance) eps_est of `setting.num_simulations` runs.

  Args:
    setting: d, k, delta, the number of simulations and the method.
    sigma: The Gaussian mechanism's noise.
    rng: The generator the simulations draw from, in turn.

  Returns:
    The estimates with fitted variance (Algorithm 1 literally) and with the
    variance fixed at 1/d.
  """
  fitted = np.empty(setting.num_simulations)
  fixed_variance = np.empty(setting.num_simulations)
  for i in range(setting.num_simulations):
    cosines = gaussian_simulation.simulate_cosines(
        setting.dim, setting.num_canaries, sigma, rng, method=setting.method)
    fitted[i] = estimation.epsilon_from_final_cosines(cosines, setting.dim,
                                                      setting.delta)
    fixed_variance[i] = estimation.epsilon_from_final_cosines(
        cosines, setting.dim, setting.delta, variance='null')
  return Estimates(fitted), Estimates(fixed_variance)


def run_row(setting: Setting, epsilon: float, index: int) -> Row:
  """Calibrates sigma to `epsilon` and estimates it; row `index` seeds the rng.

  The generator of row `index` is default_rng([seed, index]); simulations draw
  from it in turn, so the first n estimates of a longer run equal a run of n.

  Args:
    setting: The simulation's setting.
    epsilon: The target epsilon sigma is calibrated to (Balle and Wang).
    index: The row's index, which seeds its generator.

  Returns:
    The row: sigma, the analytical epsilon and both estimates.
  """
  sigma = estimation.gaussian_sigma(epsilon, setting.delta)
  analytical_epsilon = estimation.gaussian_epsilon(sigma, setting.delta)
  rng = np.random.default_rng([setting.seed, index])
  start = time.perf_counter()
  fitted, fixed_variance = epsilon_estimates(setting, sigma, rng)
  return Row(epsilon=epsilon, sigma=sigma,
             analytical_epsilon=analytical_epsilon, fitted=fitted,
             fixed_variance=fixed_variance,
             wall_time_s=time.perf_counter() - start)


def run_table(setting: Setting, epsilons: Sequence[float]) -> list[Row]:
  """One row per target epsilon, in order (row i is seeded by [seed, i]).

  Args:
    setting: The simulation's setting.
    epsilons: The target epsilons.

  Returns:
    The table's rows.
  """
  return [run_row(setting, eps, index) for index, eps in enumerate(epsilons)]


def paper_row(setting: Setting, epsilon: float) -> PaperRow | None:
  """The paper's row for `epsilon`, or None outside the paper's setting.

  Args:
    setting: The simulation's setting.
    epsilon: A target epsilon.

  Returns:
    Table 2's published mean and standard deviation, where they apply.
  """
  if not setting.is_paper_setting():
    return None
  for paper_epsilon, row in PAPER_TABLE2.items():
    if math.isclose(epsilon, paper_epsilon, rel_tol=1e-9):
      return row
  return None


def z_versus_paper(estimates: Estimates, paper: PaperRow) -> float:
  """Welch z of our mean against the paper's (both means carry sampling error).

  z = (mean - paper.mean) / sqrt(std^2 / n + paper.std^2 / 50).

  Args:
    estimates: Our n estimates.
    paper: The paper's row (50 simulations).

  Returns:
    The z statistic.
  """
  standard_error = math.sqrt(estimates.std**2 / estimates.values.size +
                             paper.std**2 / PAPER_NUM_SIMULATIONS)
  return (estimates.mean - paper.mean) / standard_error


def z_versus_analytical(estimates: Estimates,
                        analytical_epsilon: float) -> float:
  """z of our mean against the analytical eps: (mean - eps) / (std / sqrt n).

  Args:
    estimates: Our n estimates.
    analytical_epsilon: The mechanism's exact epsilon.

  Returns:
    The z statistic.
  """
  return (estimates.mean - analytical_epsilon) / (
      estimates.std / math.sqrt(estimates.values.size))


def _significant(value: float) -> str:
  """Three significant digits, keeping trailing zeros (4.22, 0.541, 10.0)."""
  return f'{value:#.3g}'


def _estimate_cells(estimates: Estimates, paper: PaperRow | None,
                    analytical_epsilon: float) -> str:
  z_paper = '—' if paper is None else f'{z_versus_paper(estimates, paper):+.2f}'
  z_analytical = z_versus_analytical(estimates, analytical_epsilon)
  return (f'{_significant(estimates.mean)} ± {_significant(estimates.std)} | '
          f'{z_paper} | {z_analytical:+.2f}')


def format_table(setting: Setting, rows: Sequence[Row],
                 total_wall_time_s: float) -> str:
  """The Markdown report: a title line, the table and notes.

  Args:
    setting: The simulation's setting.
    rows: The table's rows.
    total_wall_time_s: Seconds the table took (printed).

  Returns:
    The report.
  """
  lines = [
      f'Table 2: one-shot auditing of the Gaussian mechanism (d = '
      f'{setting.dim}, k = {setting.num_canaries}, delta = {setting.delta:g}, '
      f'{setting.num_simulations} simulations per row, method = '
      f'{setting.method}, seed = {setting.seed})',
      '',
      '| sigma | analytical eps | paper eps_est | eps_est (Alg. 1, fitted std) '
      '| z vs paper | z vs analytical | eps_est (std fixed at 1/sqrt(d)) '
      '| z vs paper | z vs analytical | wall time (s) |',
      '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    paper = paper_row(setting, row.epsilon)
    paper_text = ('—' if paper is None else
                  f'{_significant(paper.mean)} ± {_significant(paper.std)}')
    fitted = _estimate_cells(row.fitted, paper, row.analytical_epsilon)
    fixed_variance = _estimate_cells(row.fixed_variance, paper,
                                     row.analytical_epsilon)
    lines.append(
        f'| {_significant(row.sigma)} | {_significant(row.analytical_epsilon)} '
        f'| {paper_text} | {fitted} | {fixed_variance} '
        f'| {row.wall_time_s:.2f} |')
  lines += [
      '',
      f'Total wall time: {total_wall_time_s:.2f} s.',
      '',
      'eps_est is mean ± sample std (ddof=1) over simulations. "Alg. 1, fitted '
      'std" compares N(0, 1/d) with N(mean, std^2) fitted to the k cosines, as '
      'Algorithm 1 states; "std fixed at 1/sqrt(d)" compares N(0, 1/d) with '
      'N(mean, 1/d), the variance of the fit replaced by its Theorem 3.3 '
      'limit. z vs paper = (mean - paper mean) / sqrt(std^2/n + paper '
      'std^2/50) (Welch); z vs analytical = (mean - analytical eps) / '
      '(std/sqrt(n)); |z| <= 3.29 is agreement at two-sided level 0.001.',
  ]
  return '\n'.join(lines) + '\n'


def _parse_epsilons(values: Sequence[str]) -> list[float]:
  """The --epsilons list as floats; ValueError unless all are finite and > 0."""
  if not values:
    raise ValueError('--epsilons must list at least one value.')
  epsilons = [float(value) for value in values]
  if not all(math.isfinite(eps) and eps > 0 for eps in epsilons):
    raise ValueError(f'--epsilons must be finite and > 0, got {values}.')
  return epsilons


def _epsilons_are_valid(values: Sequence[str]) -> bool:
  """Validator of --epsilons."""
  try:
    _parse_epsilons(values)
  except ValueError:
    return False
  return True


def _define_flags() -> None:
  """Registers the program's flags and their validators."""
  flags.DEFINE_integer('dim', 10**6, 'Dimension d of the mechanism.',
                       lower_bound=3)
  flags.DEFINE_integer('num_canaries', 10**3, 'Number k of canaries.',
                       lower_bound=1)
  flags.DEFINE_float('delta', 1e-6, 'Target delta, in (0, 1).')
  flags.register_validator('delta', lambda delta: 0 < delta < 1,
                           message='--delta must be in (0, 1).')
  flags.DEFINE_list('epsilons', ['1', '3', '10'],
                    'Target epsilons (comma-separated, finite, > 0); sigma is '
                    'calibrated to each.')
  flags.register_validator(
      'epsilons', _epsilons_are_valid,
      message='--epsilons must be a non-empty list of finite numbers > 0.')
  flags.DEFINE_integer('num_simulations', PAPER_NUM_SIMULATIONS,
                       'Simulations per epsilon (>= 2 for a std).',
                       lower_bound=2)
  flags.DEFINE_integer('seed', 0, 'Seed of the random numbers (>= 0).',
                       lower_bound=0)
  flags.DEFINE_enum('method', 'gram', list(gaussian_simulation.METHODS),
                    "Sampler: 'gram' (exact, O(k^2) per simulation) or "
                    "'stream' (materialised vectors, O(k d); slow at d=1e6).")
  flags.DEFINE_string('output', None,
                      'Optional Markdown file to write the table to '
                      '(atomically); its directory must exist.')
  flags.register_validator(
      'output',
      lambda path: path is None or os.path.isdir(
          os.path.dirname(os.path.abspath(path))),
      message="--output's directory must exist.")


def main(argv: Sequence[str]) -> None:
  """Runs the table at the flags' setting, prints it and maybe writes it.

  Ctrl-C or SIGTERM stops it with one line and status 130
  (`interrupts.exit_interrupted`).

  Args:
    argv: The program name alone (absl took the flags; more exits 2).
  """
  command_line.refuse_positional_arguments(argv)
  flag_values = flags.FLAGS
  setting = Setting(dim=flag_values.dim,
                    num_canaries=flag_values.num_canaries,
                    delta=flag_values.delta,
                    num_simulations=flag_values.num_simulations,
                    method=flag_values.method, seed=flag_values.seed)
  start = time.perf_counter()
  try:
    with interrupts.stop_on_signals():
      rows = run_table(setting, _parse_epsilons(flag_values.epsilons))
  except KeyboardInterrupt as error:
    interrupts.exit_interrupted(
        error, 'interrupted before the table was finished; nothing was '
        'written: rerun the same command')
  report = format_table(setting, rows, time.perf_counter() - start)
  print(report, end='')
  if flag_values.output is not None:
    atomic_io.write_text(flag_values.output, report)


if __name__ == '__main__':
  _define_flags()
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
