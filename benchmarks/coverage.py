"""Do the report's bounds hold, and do its estimates run away? Simulated truth.

Simulated Gaussian mechanisms with a known eps (sigma calibrated by Balle and
Wang) at eps in --epsilons, --runs runs per cell, d = --dim, k = --canaries
seen and as many unseen canaries, delta = --delta:

* final model (Algorithm 2): the seen canaries' cosines with one release
  rho = sum_j c_j + N(0, sigma^2 I_d), sampled exactly
  (`gaussian_simulation.simulate_cosines`); the unseen canaries' cosines with
  that release are independent of it, hence draws of the exact null
  (Theorem 3.1: (1 + tau)/2 ~ Beta((d - 1)/2, (d - 1)/2)).
* all iterates (Algorithm 3): --rounds rounds, each seen canary inserted
  once, in one round; the per-round cosine of a canary with a round's update,
  in the null's standard deviations, is N(0, 1) when it is absent and
  N(1/sigma, 1) in its round (the d -> infinity law of a noise-dominated
  update), so every canary is exactly a Gaussian mechanism at sigma; the
  statistic is each canary's maximum over rounds.

For every statistic the report labels a bound at 1 - alpha (epsilon_lo,
epsilon_one_run, epsilon_one_run_fdp, epsilon_lo_tight_any,
epsilon_lo_tight_gdp) it prints the share of runs in which it exceeds the
true eps, with its binomial standard error, whether that share is within
alpha + 2 standard errors, and the mean bound and its ratio to the truth;
the paper's nominal epsilon_lo_paper is printed beside them. For every estimate (epsilon_est,
epsilon_est_fitted, epsilon_gdp) it prints the mean and 95th percentile of
estimate / eps. For all iterates the true eps is that of an adversary who
knows each canary's round; the maximum over rounds is a weaker attack, so
estimates below 1 are expected there and estimates above it overshoot.

With --mechanism=blt or banded (jax-privacy's strategy C for --rounds
rounds, one participation; needs .venv-jax), DP-FTRL's correlated noise:
the rounds' noisy updates are y = x + C^{-1} Z, Z with i.i.d. N(0, s^2)
entries, every seen canary inserted in round 0 (C's longest column, the
worst canary for these Toeplitz strategies). The full release is one
Gaussian mechanism at mu = ||C[:, 0]|| / s, and s is calibrated so that its
eps is the cell's; the truths of the threat models are:

* final model: the final model is the sum of the noisy updates, so the
  canary meets noise of std s ||C^{-T} 1||: a Gaussian mechanism at
  1 / (s ||C^{-T} 1||), simulated exactly as above; its eps is the truth.
* all iterates ('all'): each canary's max over rounds of its per-round
  cosine in null standard deviations, g_t = (e_0 + s C^{-1} w)_t /
  (s ||C^{-1}[t]||) with w ~ N(0, I_T): the noise correlated across rounds.
  The truth is the full release's eps (the max is a weaker attack).
* all iterates, decorrelated ('all_decorrelated'): the updates multiplied by
  the encoder C first, C y = C x + Z, independent noise; the statistic is the
  canary's matched filter sum_t C[t, 0] (C g)_t / (s ||C[:, 0]||), exactly
  N(mu, 1) when inserted, so its estimates should meet the truth.

With --mechanism=discrete_gaussian, TFF's distributed discrete Gaussian
(`benchmarks.discrete_gaussian`): canaries scaled by --dg_scale * sqrt(d)
and stochastically rounded to integers, summed, discrete Gaussian noise
N_Z(0, sigma^2) added, in one release (final model) and in --rounds releases
(all iterates, each seen canary in one round, the same cosine statistics as
the engine's). sigma is calibrated so that the rounded canary is about a
Gaussian mechanism of the cell's eps; the truth of both threat models is the
exact eps of the seen canary with the largest rounded norm, from the
discrete Gaussian's privacy loss distribution (dp_accounting).

With --mechanism=laplace or mixture, out of the Gaussian family: a canary's
score is 1 + noise when inserted and noise when not (one release), the
noise Laplace or a half-half mixture of N(0, s^2) and N(0, (3 s)^2), scaled
so that the mechanism is exactly (eps, delta)-DP (`laplace_scale`,
`mixture_scale`); the all-iterates report (empirical null) scores them.
Bounds that assume a Gaussian mechanism (epsilon_lo_tight_gdp,
epsilon_one_run_fdp) may fail there; the others must hold.

  python -m benchmarks.coverage                   # 200 runs per cell, ~10 min
  python -m benchmarks.coverage --runs=20 --json=/tmp/coverage.json
  .venv-jax/bin/python -m benchmarks.coverage --mechanism=blt --runs=50
  python -m benchmarks.coverage --mechanism=discrete_gaussian --dim=20000 \
      --canaries=250 --runs=100
  python -m benchmarks.coverage --mechanism=laplace --epsilons=1,3,10 --runs=100
"""

import json
import math
import time
import types
from collections.abc import Sequence

import numpy as np
from absl import app
from absl import flags
from scipy import stats

from benchmarks import discrete_gaussian
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import decorrelation
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_simulation
from one_shot_epe.reporting import privacy_report


def define_flags() -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Returns:
    The flags' holders by name.
  """
  return {
      'epsilons': flags.DEFINE_list(
          'epsilons', ['0.5', '1', '3', '10'], 'True epsilons of the simulated '
          'mechanisms.'),
      'runs': flags.DEFINE_integer(
          'runs', 200, 'Simulated runs per cell.', lower_bound=1),
      'dim': flags.DEFINE_integer(
          'dim', 10 ** 5, 'Model dimension d.', lower_bound=3),
      'canaries': flags.DEFINE_integer(
          'canaries', 1000, 'Seen canaries k (and as many unseen).',
          lower_bound=8),
      'rounds': flags.DEFINE_integer(
          'rounds', 20, 'Rounds T of the all-iterates simulation.',
          lower_bound=1),
      'delta': flags.DEFINE_float(
          'delta', 1e-06, 'delta of every epsilon.', lower_bound=0.0,
          upper_bound=1.0),
      'alpha': flags.DEFINE_float(
          'alpha', 0.05, 'Bounds hold at 1 - alpha.', lower_bound=0.0,
          upper_bound=0.5),
      'seed': flags.DEFINE_integer(
          'seed', 0, 'Seed of the simulations.', lower_bound=0),
      'json': flags.DEFINE_string(
          'json', None, 'Also write the table as JSON here.'),
      'mechanism': flags.DEFINE_enum(
          'mechanism', 'gaussian',
          ['gaussian', 'blt', 'banded', 'discrete_gaussian', 'laplace',
           'mixture'],
          'Independent noise, or correlated noise with a BLT or a 4-band '
          'banded strategy for --rounds rounds (needs jax-privacy), or the '
          'distributed discrete Gaussian (canaries rounded to integers, '
          "--dg_scale), or a canary's score with heavier-tailed noise than "
          'Gaussian: Laplace, or a half-half mixture of two Gaussians of '
          'scales 1 and 3.'),
      'dg_scale': flags.DEFINE_float(
          'dg_scale', 4.0, 'With --mechanism=discrete_gaussian: a unit canary '
          'is scaled by dg_scale * sqrt(d) before rounding, so its '
          'coordinates have std dg_scale integer units.', lower_bound=0.0),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()

BOUNDS = ('epsilon_lo', 'epsilon_one_run', 'epsilon_one_run_fdp',
          'epsilon_lo_tight_any', 'epsilon_lo_tight_gdp')
NOMINAL = ('epsilon_lo_paper',)
ESTIMATES = ('epsilon_est', 'epsilon_est_fitted', 'epsilon_gdp')
# The mixture noise: N(0, scale^2) or N(0, (MIXTURE_RATIO scale)^2), each
# with probability 1/2.
MIXTURE_RATIO = 3.0


def laplace_scale(epsilon: float, delta: float) -> float:
  """b of the sensitivity-1 Laplace mechanism that is exactly (eps, delta)-DP.

  Its privacy profile is delta(eps) = 1 - exp((eps - 1/b) / 2) for eps <=
  1/b, so 1/b = eps - 2 log(1 - delta).
  """
  return 1.0 / (epsilon - 2.0 * math.log1p(-delta))


def _mixture_logpdf(x: np.ndarray, scale: float, ratio: float) -> np.ndarray:
  wide = ratio * scale
  return np.logaddexp(
      stats.norm.logpdf(x, scale=scale), stats.norm.logpdf(x, scale=wide)
  ) - math.log(2.0)


def mixture_epsilon(scale: float, delta: float,
                    ratio: float = MIXTURE_RATIO) -> float:
  """Exact eps at delta of the sensitivity-1 mechanism with mixture noise.

  delta(eps) = integral of max(p - e^eps q, 0) for p the noise density
  shifted by 1 and q unshifted (the noise is symmetric, so the other
  direction gives the same), by the midpoint rule on a grid of step
  min(scale, 1)/200 over +-(14 ratio scale + 2), beyond which the densities
  are below 1e-40; eps is the root of delta(eps) = delta (bisection, 1e-10).
  With ratio 1 it is the Gaussian mechanism's eps.
  """
  wide = ratio * scale
  step = min(scale, 1.0) / 200.0
  grid = np.arange(-14.0 * wide - 2.0, 14.0 * wide + 2.0, step)
  log_p = _mixture_logpdf(grid - 1.0, scale, ratio)
  log_q = _mixture_logpdf(grid, scale, ratio)

  def profile(epsilon: float) -> float:
    return float(np.sum(np.maximum(np.exp(log_p) - np.exp(log_q + epsilon),
                                   0.0)) * step)

  low, high = 0.0, 1.0
  while profile(high) > delta:
    low, high = high, 2.0 * high
  while high - low > 1e-10:
    middle = 0.5 * (low + high)
    low, high = (middle, high) if profile(middle) > delta else (low, middle)
  return high


def mixture_scale(epsilon: float, delta: float) -> float:
  """The mixture's scale whose exact eps at delta is `epsilon` (bisection)."""
  low, high = 1e-3, 1e3  # eps falls as the scale grows.
  for _ in range(60):
    middle = math.sqrt(low * high)
    if mixture_epsilon(middle, delta) > epsilon:
      low = middle
    else:
      high = middle
  return math.sqrt(low * high)


def heavy_tailed_scores(rng: np.random.Generator, mechanism: str,
                        canaries: int, scale: float,
                        dim: int) -> tuple[np.ndarray, np.ndarray]:
  """A canary's score: 1 + noise if inserted, noise if not, over sqrt(d).

  The noise is Laplace(scale) or the Gaussian mixture of `scale`; dividing
  by sqrt(d) keeps the scores inside [-1, 1] without changing any bound (all
  are invariant to scaling the scores).
  """
  if mechanism == 'laplace':
    noise = rng.laplace(0.0, scale, 2 * canaries)
  else:
    noise = scale * rng.standard_normal(2 * canaries) * np.where(
        rng.random(2 * canaries) < 0.5, 1.0, MIXTURE_RATIO)
  noise[:canaries] += 1.0
  scores = noise / math.sqrt(dim)
  return scores[:canaries], scores[canaries:]


def simulate_heavy_tailed(mechanism: str, epsilons: Sequence[float],
                          runs: int, dim: int, canaries: int, delta: float,
                          alpha: float, seed: int) -> dict[str, dict[str, dict]]:
  """{mechanism: {eps: cell}}: the seen/unseen bounds on 1-D scores.

  The report is the all-iterates one (empirical null from the unseen
  scores); the mechanism is exactly (eps, delta)-DP (Laplace: b from
  `laplace_scale`, the truth from dp_accounting's privacy loss distribution;
  mixture: `mixture_scale`), but not Gaussian, so the 'gdp' bounds and the
  f-DP one-run certificate lose their premise.
  """
  # Imported here: only these cells need it.
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {mechanism: {}}
  for epsilon in epsilons:
    if mechanism == 'laplace':
      scale = laplace_scale(epsilon, delta)
      truth = privacy_loss_distribution.from_laplace_mechanism(
          scale, sensitivity=1.0,
          value_discretization_interval=1e-5).get_epsilon_for_delta(delta)
    else:
      scale = mixture_scale(epsilon, delta)
      truth = mixture_epsilon(scale, delta)
    reports = []
    for _ in range(runs):
      seen, unseen = heavy_tailed_scores(rng, mechanism, canaries, scale, dim)
      reports.append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    table[mechanism][f'{epsilon:g}'] = dict(
        cell(reports, truth, alpha), truth={'epsilon': truth, 'scale': scale})
  return table


def final_model_scores(rng: np.random.Generator, dim: int, canaries: int,
                       sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """Seen cosines with one Gaussian release; unseen ones from the exact null."""
  seen = gaussian_simulation.simulate_cosines(dim, canaries, sigma, rng)
  half = (dim - 1) / 2.0
  unseen = 2.0 * rng.beta(half, half, canaries) - 1.0
  return seen, unseen


def all_iterates_scores(rng: np.random.Generator, dim: int, canaries: int,
                        sigma: float,
                        rounds: int) -> tuple[np.ndarray, np.ndarray]:
  """Max-over-rounds cosines, each seen canary inserted once (module doc)."""
  per_round = rng.standard_normal((2 * canaries, rounds))
  per_round[np.arange(canaries), rng.integers(0, rounds, canaries)] += (
      1.0 / sigma)
  maxima = per_round.max(axis=1) / math.sqrt(dim)
  return maxima[:canaries], maxima[canaries:]


def correlated_scores(
    rng: np.random.Generator, dim: int, canaries: int, scale: float,
    strategy: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Seen and unseen statistics under correlated noise (module docstring).

  Args:
    rng: the simulation's generator.
    dim: d.
    canaries: k seen (inserted in round 0) and k unseen.
    scale: s, the std of Z's entries (clip 1).
    strategy: C, lower triangular [T, T].

  Returns:
    {'final', 'all', 'all_decorrelated'}: (seen, unseen) cosines.
  """
  inverse = np.linalg.inv(strategy)
  final_sigma = scale * np.linalg.norm(inverse.sum(axis=0))
  scores = {'final': final_model_scores(rng, dim, canaries, final_sigma)}
  rounds = strategy.shape[0]
  signal = np.zeros((2 * canaries, rounds))
  signal[:canaries, 0] = 1.0
  noise = scale * rng.standard_normal((2 * canaries, rounds)) @ inverse.T
  per_round = (signal + noise) / (scale * np.linalg.norm(inverse, axis=1))
  maxima = per_round.max(axis=1) / math.sqrt(dim)
  scores['all'] = (maxima[:canaries], maxima[canaries:])
  seen, unseen = decorrelation.matched_filter_scores(
      signal + noise, strategy, [range(canaries)] + [[]] * (rounds - 1),
      canaries, scale)
  scores['all_decorrelated'] = (seen / math.sqrt(dim),
                                unseen / math.sqrt(dim))
  return scores


def simulate_correlated(epsilons: Sequence[float], runs: int, dim: int,
                        canaries: int, strategy: np.ndarray, delta: float,
                        alpha: float, seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} under correlated noise with strategy C.

  Each cell's eps is the full release's; every threat model is scored
  against its own truth (module docstring), which the cell also holds.
  """
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {
      'final': {}, 'all': {}, 'all_decorrelated': {}}
  column_norm = float(np.linalg.norm(strategy[:, 0]))
  final_factor = column_norm * np.linalg.norm(
      np.linalg.inv(strategy).sum(axis=0))
  for epsilon in epsilons:
    sigma = estimation.gaussian_sigma(epsilon, delta)
    scale = column_norm * sigma
    truths = {'final': estimation.gaussian_epsilon(sigma * final_factor,
                                                   delta),
              'all': epsilon, 'all_decorrelated': epsilon}
    reports: dict[str, list[privacy_report.PrivacyReport]] = {
        name: [] for name in table}
    for _ in range(runs):
      scores = correlated_scores(rng, dim, canaries, scale, strategy)
      seen, unseen = scores['final']
      reports['final'].append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      for name in ('all', 'all_decorrelated'):
        seen, unseen = scores[name]
        reports[name].append(privacy_report.all_iterates_report(
            seen, unseen, delta, alpha, bootstrap_resamples=20))
    for name in table:
      table[name][f'{epsilon:g}'] = dict(
          cell(reports[name], truths[name], alpha),
          truth={'epsilon': truths[name]})
  return table


def simulate_discrete_gaussian(
    epsilons: Sequence[float], runs: int, dim: int, canaries: int,
    rounds: int, scale: float, delta: float, alpha: float,
    seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} under the distributed discrete Gaussian.

  Each cell's sigma makes the rounded canary about a Gaussian mechanism of
  its eps (`discrete_gaussian.calibrated_sigma`); both threat models
  (Sections 3.1 and 3.2 of the paper, Algorithms 2 and 3) are scored
  against the exact eps of the cell's seen canary (over all its runs) with
  the largest rounded norm (`discrete_gaussian.discrete_gaussian_epsilon`), which the cell holds
  with sigma, that norm and the continuous Gaussian's eps at the same
  noise-to-norm ratio.

  Args:
    epsilons: the cells' nominal eps, each > 0.
    runs: simulated runs per cell.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    rounds: T of the all-iterates runs.
    scale: gamma / sqrt(d) > 0, integer units per canary coordinate std.
    delta: delta of every eps.
    alpha: the bounds hold at 1 - alpha.
    seed: the simulation's seed.

  Returns:
    {'final', 'all'}: {f'{eps:g}': cell with a 'truth' entry}.

  Raises:
    ValueError: naming --dg_scale if scale is not positive.
  """
  if not scale > 0:
    raise ValueError(f'--dg_scale must be positive; got {scale}.')
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {'final': {}, 'all': {}}
  for epsilon in epsilons:
    sigma = discrete_gaussian.calibrated_sigma(
        estimation.gaussian_sigma(epsilon, delta), scale, dim)
    reports: dict[str, list[privacy_report.PrivacyReport]] = {
        'final': [], 'all': []}
    worst = None
    for _ in range(runs):
      run = discrete_gaussian.scores(rng, dim, canaries, scale, sigma, rounds)
      if worst is None or run['worst'] @ run['worst'] > worst @ worst:
        worst = run['worst']
      seen, unseen = run['final']
      reports['final'].append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      seen, unseen = run['all']
      reports['all'].append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    norm = float(np.linalg.norm(worst))
    truth = {
        'epsilon': discrete_gaussian.discrete_gaussian_epsilon(
            worst, sigma, delta),
        'gaussian_epsilon': estimation.gaussian_epsilon(sigma / norm, delta),
        'sigma': sigma, 'sensitivity_norm': norm,
    }
    for name in table:
      table[name][f'{epsilon:g}'] = dict(
          cell(reports[name], truth['epsilon'], alpha), truth=truth)
  return table


def strategy_matrix(mechanism: str, rounds: int) -> np.ndarray:
  """jax-privacy's C for `rounds` rounds, one participation (needs it)."""
  # Imported here: jax-privacy is installed only in .venv-jax.
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
  bounds = correlated_noise.ParticipationBounds(1, 1)
  strategy = correlated_noise.build_strategy(mechanism, rounds, bounds,
                                             num_bands=min(4, rounds))
  index = np.subtract.outer(np.arange(rounds), np.arange(rounds))
  return np.where(index >= 0, strategy.coefs[np.maximum(index, 0)], 0.0)


def cell(reports: Sequence[privacy_report.PrivacyReport], epsilon: float,
         alpha: float) -> dict[str, dict[str, float]]:
  """Exceedance shares of the bounds and ratio summaries of the estimates."""
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


def simulate(epsilons: Sequence[float], runs: int, dim: int, canaries: int,
             rounds: int, delta: float, alpha: float,
             seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} over `runs` simulations per cell."""
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {'final': {}, 'all': {}}
  for epsilon in epsilons:
    sigma = estimation.gaussian_sigma(epsilon, delta)
    final, every = [], []
    for _ in range(runs):
      seen, unseen = final_model_scores(rng, dim, canaries, sigma)
      final.append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      seen, unseen = all_iterates_scores(rng, dim, canaries, sigma, rounds)
      every.append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    table['final'][f'{epsilon:g}'] = cell(final, epsilon, alpha)
    table['all'][f'{epsilon:g}'] = cell(every, epsilon, alpha)
  return table


def format_table(table: dict[str, dict[str, dict]], runs: int,
                 alpha: float) -> str:
  """Markdown: per threat model and eps, bounds' shares above the truth and
  estimates' mean / 95th-percentile ratios to the truth."""
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


def main(argv: Sequence[str]) -> None:
  """Simulates every cell, prints the table and its wall time."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  try:
    epsilons = [float(text) for text in _FLAGS.epsilons.value]
  except ValueError:
    raise app.UsageError(
        '--epsilons must list numbers; got '
        f'{_FLAGS.epsilons.value}.',
        exitcode=2) from None
  if not epsilons or min(epsilons) <= 0:
    raise app.UsageError(
        '--epsilons must list positive numbers; got '
        f'{_FLAGS.epsilons.value}.',
        exitcode=2)
  start = time.perf_counter()
  if _FLAGS.mechanism.value == 'gaussian':
    table = simulate(epsilons, _FLAGS.runs.value, _FLAGS.dim.value,
                     _FLAGS.canaries.value, _FLAGS.rounds.value,
                     _FLAGS.delta.value, _FLAGS.alpha.value, _FLAGS.seed.value)
  elif _FLAGS.mechanism.value in ('laplace', 'mixture'):
    table = simulate_heavy_tailed(_FLAGS.mechanism.value, epsilons,
                                  _FLAGS.runs.value, _FLAGS.dim.value,
                                  _FLAGS.canaries.value, _FLAGS.delta.value,
                                  _FLAGS.alpha.value, _FLAGS.seed.value)
  elif _FLAGS.mechanism.value == 'discrete_gaussian':
    if not _FLAGS.dg_scale.value > 0:
      raise app.UsageError(
          f'--dg_scale must be positive; got {_FLAGS.dg_scale.value}.',
          exitcode=2)
    table = simulate_discrete_gaussian(epsilons, _FLAGS.runs.value,
                                       _FLAGS.dim.value, _FLAGS.canaries.value,
                                       _FLAGS.rounds.value,
                                       _FLAGS.dg_scale.value,
                                       _FLAGS.delta.value, _FLAGS.alpha.value,
                                       _FLAGS.seed.value)
  else:
    table = simulate_correlated(
        epsilons, _FLAGS.runs.value, _FLAGS.dim.value, _FLAGS.canaries.value,
        strategy_matrix(_FLAGS.mechanism.value, _FLAGS.rounds.value),
        _FLAGS.delta.value, _FLAGS.alpha.value, _FLAGS.seed.value)
  print(
      f'd = {_FLAGS.dim.value}, k = {_FLAGS.canaries.value} seen + '
      f'{_FLAGS.canaries.value} unseen canaries, δ = {_FLAGS.delta.value:g}, '
      f'T = {_FLAGS.rounds.value} rounds (all iterates), seed '
      f'{_FLAGS.seed.value}.\n')
  print(format_table(table, _FLAGS.runs.value, _FLAGS.alpha.value), end='')
  truths = {(threat, epsilon): row['truth'] for threat, rows in table.items()
            for epsilon, row in rows.items() if 'truth' in row}
  if truths:
    print('\nTrue ε of each cell:')
  for (threat, epsilon), truth in truths.items():
    print(f'  {threat}, ε = {epsilon}: ' + ', '.join(
        f'{key} {value:.6g}' for key, value in sorted(truth.items())))
  print(f'\nWall time: {time.perf_counter() - start:.0f} s.')
  if _FLAGS.json.value:
    with open(_FLAGS.json.value, 'w', encoding='utf-8') as handle:
      json.dump(table, handle, indent=2, sort_keys=True)


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
