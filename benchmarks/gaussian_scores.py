"""Simulated Gaussian mechanisms' canary statistics, with known truth.

What `benchmarks.coverage` scores for the Gaussian family (its docstring
derives each law):

* independent noise: the seen canaries' cosines with one Gaussian release
  (`final_model_scores`, exact) and their maxima over rounds of the
  per-round cosine, each inserted in one round (`all_iterates_scores`, the
  d -> infinity law), with unseen canaries drawn from the null;
* one canary per release, at any d: its cosine with c + N(0, sigma^2 I_d)
  (`single_canary_scores`), i.i.d. across canaries, and the exact eps of
  that cosine's law against the exact null (`single_canary_epsilon`), below
  the Gaussian mechanism's at small d;
* DP-FTRL's correlated noise of a strategy C (`strategy_matrix`,
  jax-privacy's BLT or banded strategy; needs .venv-jax): the final model,
  the raw per-round maximum and the decorrelated matched filter
  (`correlated_scores`). No absl flags.
"""

import math

import numpy as np
from scipy import special
from scipy import stats

from one_shot_epe.stats import decorrelation
from one_shot_epe.stats import gaussian_simulation
from one_shot_epe.stats import null_distribution


def final_model_scores(rng: np.random.Generator, dim: int, canaries: int,
                       sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """Seen cosines with one Gaussian release; unseen ones from the exact null.

  Args:
    rng: The simulation's generator.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    sigma: The release's noise std over the canaries' norm.

  Returns:
    (seen, unseen) cosines, [k] each.
  """
  seen = gaussian_simulation.simulate_cosines(dim, canaries, sigma, rng)
  half = (dim - 1) / 2.0
  unseen = 2.0 * rng.beta(half, half, canaries) - 1.0
  return seen, unseen


def single_canary_scores(rng: np.random.Generator, dim: int, canaries: int,
                         sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """Each seen canary's cosine with a release of its own; unseen: the null.

  The release is rho = c + sigma W, W ~ N(0, I_d): its cosine with c is
  a / sqrt(a^2 + sigma^2 V), a = 1 + sigma Z, Z ~ N(0, 1) and V ~
  chi^2(d - 1) independent (W's parts along c and across it). An unseen
  canary's cosine with rho has the exact null law (Theorem 3.1).

  Args:
    rng: The simulation's generator.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    sigma: The release's noise std over the canary's norm.

  Returns:
    (seen, unseen) cosines, [k] each, independent.
  """
  along = 1.0 + sigma * rng.standard_normal(canaries)
  across = rng.chisquare(dim - 1, canaries)
  seen = along / np.sqrt(along**2 + sigma**2 * across)
  half = (dim - 1) / 2.0
  unseen = 2.0 * rng.beta(half, half, canaries) - 1.0
  return seen, unseen


def single_canary_tails(cosines: np.ndarray, dim: int,
                sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """P(g > t) and P(g < t) for `single_canary_scores`' seen cosine g.

  Args:
    cosines: The thresholds t, in (-1, 1).
    dim: d.
    sigma: The release's noise std.

  Returns:
    (P(g > t), P(g < t)), each shaped as `cosines`.

  With a = 1 + sigma z: for t > 0, g > t iff a > 0 and V < a^2 (1 - t^2) /
  (t sigma)^2; for t < 0, g < t iff a < 0 and V < the same. Each is a
  probability of V given z, integrated over z ~ N(0, 1) by the trapezoid
  rule on the half-line where a has t's sign (cut 12 standard deviations
  out), at 2,001 evenly spaced points and 500 more spaced geometrically
  from a = 0, where the probability of V rises over a width of about
  |t| sqrt(d) in z; the other tail is its complement, which is not small
  there.

  Args:
    cosines: The thresholds t, in (-1, 1).
    dim: d.
    sigma: The release's noise std.

  Returns:
    (P(g > t), P(g < t)), each shaped as `cosines`.
  """
  kappa = 1.0 / sigma
  upper, lower = np.empty_like(cosines), np.empty_like(cosines)
  for sign, chosen in ((1.0, cosines > 0.0), (-1.0, cosines < 0.0)):
    span = 12.0 + kappa if sign > 0 else max(12.0 - kappa, 1.0)
    z = -kappa + sign * np.unique(np.concatenate([
        np.linspace(0.0, span, 2001), np.geomspace(1e-9, span, 500)]))
    along = 1.0 + sigma * z
    t = cosines[chosen][:, None]
    limit = along**2 * (1.0 - t * t) / (t * sigma)**2
    tail = np.abs(np.trapz(stats.norm.pdf(z) * special.chdtr(dim - 1, limit),
                           z, axis=1))
    near, far = (upper, lower) if sign > 0 else (lower, upper)
    near[chosen], far[chosen] = tail, 1.0 - tail
  at_zero = cosines == 0.0  # g > 0 iff a > 0.
  upper[at_zero] = special.ndtr(kappa)
  lower[at_zero] = special.ndtr(-kappa)
  return upper, lower


def single_canary_epsilon(dim: int, sigma: float, delta: float) -> float:
  """Exact eps at delta of `single_canary_scores`' seen law against the null.

  rho's direction u has density e^{-kappa^2/2} E[exp(kappa R (u . c))]
  (R ~ chi_d, kappa = 1/sigma) with respect to the uniform law, increasing
  in the cosine t = u . c: the likelihood ratio of the seen cosine to the
  null is monotone, so each direction's hockey-stick divergence is attained
  at a threshold, delta(eps) = max(sup_t P(g > t) - e^eps Q(g > t),
  sup_t Q(g < t) - e^eps P(g < t)), Q the exact null
  (`null_distribution`). The supremum is taken over 2,001 thresholds
  t = x / sqrt(d), x from -12 to kappa + 12, eps by bisection to 1e-9
  relative. As d grows it tends to the Gaussian mechanism's eps at sigma
  (at d = 10^6 it is within 2e-5 of it at eps = 1, 3 and 10).

  Args:
    dim: d >= 3.
    sigma: The release's noise std over the canary's norm.
    delta: delta in (0, 1).

  Returns:
    The seen cosine's eps at delta.
  """
  kappa = 1.0 / sigma
  x = np.linspace(-12.0, kappa + 12.0, 2001)
  cosines = x / math.sqrt(dim)
  cosines = cosines[np.abs(cosines) < 1.0]
  seen_upper, seen_lower = single_canary_tails(cosines, dim, sigma)
  log_null_upper = null_distribution.null_logsf(cosines, dim)
  null_lower = null_distribution.null_cdf(cosines, dim)

  def profile(epsilon: float) -> float:
    return max(float(np.max(seen_upper - np.exp(log_null_upper + epsilon))),
               float(np.max(null_lower - math.exp(epsilon) * seen_lower)))

  low, high = 0.0, 1.0
  while profile(high) > delta:
    low, high = high, 2.0 * high
  while high - low > 1e-9 * high:
    middle = 0.5 * (low + high)
    low, high = (middle, high) if profile(middle) > delta else (low, middle)
  return high


def all_iterates_scores(rng: np.random.Generator, dim: int, canaries: int,
                        sigma: float,
                        rounds: int) -> tuple[np.ndarray, np.ndarray]:
  """Max-over-rounds cosines, each seen canary inserted once (coverage doc).

  Args:
    rng: The simulation's generator.
    dim: d.
    canaries: k seen and k unseen canaries.
    sigma: The rounds' noise std over the canaries' norm.
    rounds: T.

  Returns:
    (seen, unseen) maxima, [k] each.
  """
  per_round = rng.standard_normal((2 * canaries, rounds))
  per_round[np.arange(canaries), rng.integers(0, rounds, canaries)] += (
      1.0 / sigma)
  maxima = per_round.max(axis=1) / math.sqrt(dim)
  return maxima[:canaries], maxima[canaries:]


def correlated_scores(
    rng: np.random.Generator, dim: int, canaries: int, scale: float,
    strategy: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Seen and unseen statistics under correlated noise (coverage's doc).

  Args:
    rng: The simulation's generator.
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


def strategy_matrix(mechanism: str, rounds: int) -> np.ndarray:
  """jax-privacy's C for `rounds` rounds, one participation (needs it).

  Args:
    mechanism: 'blt' or 'banded' (4 bands, at most `rounds`).
    rounds: T.

  Returns:
    C, lower triangular Toeplitz [T, T].
  """
  # Imported here: jax-privacy is installed only in .venv-jax.
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
  bounds = correlated_noise.ParticipationBounds(1, 1)
  strategy = correlated_noise.build_strategy(mechanism, rounds, bounds,
                                             num_bands=min(4, rounds))
  index = np.subtract.outer(np.arange(rounds), np.arange(rounds))
  return np.where(index >= 0, strategy.coefs[np.maximum(index, 0)], 0.0)
