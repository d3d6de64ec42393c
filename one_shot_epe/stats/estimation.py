"""Epsilon between Gaussians and the paper's estimates (numpy/scipy only).

Implements the estimates of Andrew et al., "One-shot Empirical Privacy
Estimation for Federated Learning" (ICLR 2024):

* Section 3.2: the optimal epsilon between two arbitrary Gaussians, through the
  privacy-loss random variable, evaluated in log space
  (`epsilon_two_gaussians`, a search over the hockey-stick divergence of
  `hockey_stick`).
* Algorithms 1 and 2: epsilon from canary/final-model cosines against the null
  N(0, 1/d) (`epsilon_from_final_cosines`); Algorithm 3: epsilon from the
  max-over-rounds cosines of seen and unseen canaries
  (`epsilon_from_seen_unseen`).
* Balle and Wang (2018): exact epsilon <-> sigma for one Gaussian mechanism with
  sensitivity 1 (`gaussian_epsilon`, `gaussian_sigma`), and the eps of
  mu-Gaussian DP (`epsilon_of_gdp`).
* Appendix B / Table 6: the Anderson-Darling normality statistic
  (`anderson_darling`).

The rest of the statistics live beside it: the exact null of a cosine
(Theorems 3.1 and 3.2) in `null_distribution`, the lower bound eps_lo
(Section 5.1) in `lower_bound`, and the per-threat-model report that bundles
them with robust summaries in `privacy_report`.

Epsilon *estimates* compare two Gaussians, so they use the moment-matched null
N(0, 1/d) exactly as Algorithms 1 and 2 state (the exact null has mean 0 and
variance exactly 1/d).
"""

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special

from one_shot_epe import validation
from one_shot_epe.stats import hockey_stick
from one_shot_epe.stats import null_distribution

__all__ = ['EpsilonOverflowError', 'VarianceModel', 'anderson_darling',
           'epsilon_from_final_cosines', 'epsilon_from_seen_unseen',
           'epsilon_of_gdp', 'epsilon_two_gaussians', 'fit_gaussian',
           'gaussian_epsilon', 'gaussian_sigma']

VarianceModel = Literal['fitted', 'null']


class EpsilonOverflowError(ValueError):
  """The two Gaussians are so far apart that eps exceeds 1e12."""


# A standard deviation (`epsilon_two_gaussians`).
_STD = validation.Real(0.0, low_open=True)

_LOG_TINY = -700.0  # Below this, exp() underflows double precision.


def fit_gaussian(sample: np.ndarray, name: str) -> tuple[float, float]:
  """Mean and population std (ddof=0) of a sample, as in Algorithm 1, line 9.

  Args:
    sample: A 1-D array of numbers.
    name: What the sample is, for the error message.

  Returns:
    (mean, std) as floats.

  Raises:
    ValueError: naming `name`, when the sample has zero spread.
  """
  mean, std = float(np.mean(sample)), float(np.std(sample))
  if std <= 0.0 or np.all(sample == sample[0]):
    raise ValueError(f'{name} has zero spread; a Gaussian cannot be fit.')
  return mean, std


# ----------------------------------------------------------------------------
# Section 3.2: epsilon between two Gaussians.


def _epsilon_one_direction(mu_p: float, std_p: float, mu_q: float,
                           std_q: float, log_delta: float) -> float:
  """Smallest eps >= 0 with E_eps(P || Q) <= delta (monotone root search)."""

  def excess(eps: float) -> float:
    value = hockey_stick.log_hockey_stick(mu_p, std_p, mu_q, std_q, eps)
    return max(value, _LOG_TINY * 10) - log_delta

  if excess(0.0) <= 0.0:
    return 0.0
  hi = 1.0
  while excess(hi) > 0.0:
    hi *= 2.0
    if hi > 2.0**40:
      raise EpsilonOverflowError('epsilon exceeds 1e12: the two Gaussians '
                                 'are too far apart for a meaningful '
                                 'estimate.')
  return optimize.brentq(excess, 0.0 if hi == 1.0 else hi / 2.0, hi,
                         xtol=1e-12, rtol=1e-12, maxiter=500)


@validation.arguments('delta', mu0=validation.Real(), std0=_STD,
                      mu1=validation.Real(), std1=_STD)
def epsilon_two_gaussians(mu0: float, std0: float, mu1: float, std1: float,
                          delta: float) -> float:
  """Optimal eps such that N(mu0, std0^2) and N(mu1, std1^2) are (eps, delta)-close.

  Section 3.2: eps is the smallest value for which the hockey-stick divergence
  is at most delta in *both* directions, computed from the privacy-loss random
  variable. All probabilities are handled as logarithms, so results stay
  accurate from eps ~ 0 up to eps ~ 1e5 and for delta down to 1e-300. The
  problem is standardised first (x -> (x - mu0)/std0), which leaves eps
  unchanged.

  Args:
    mu0: Mean of the first Gaussian.
    std0: Its standard deviation, > 0.
    mu1: Mean of the second Gaussian.
    std1: Its standard deviation, > 0.
    delta: The delta, in (0, 1).

  Returns:
    eps >= 0; 0 when (0, delta) already holds.

  Raises:
    ValueError: if an argument is out of range or the Gaussians are too far
      apart to compare in double precision.
    EpsilonOverflowError: if eps exceeds 1e12.
  """
  log_delta = math.log(delta)
  shift = (mu1 - mu0) / std0
  ratio = std1 / std0
  if not (math.isfinite(shift) and math.isfinite(ratio) and ratio > 0):
    raise ValueError('the two Gaussians are too far apart to compare in double '
                     'precision (mean gap or std ratio overflows).')
  return max(
      _epsilon_one_direction(0.0, 1.0, shift, ratio, log_delta),
      _epsilon_one_direction(shift, ratio, 0.0, 1.0, log_delta))


# ----------------------------------------------------------------------------
# Balle and Wang (2018): the Gaussian mechanism with sensitivity 1.


def _gaussian_log_delta(eps: float, sigma: float) -> float:
  """log delta(eps) of N(0, s^2) vs N(1, s^2): Phi(1/2s - eps s) - e^eps Phi(-1/2s - eps s)."""
  return hockey_stick.log_diff(
      hockey_stick.log_prob_below(0.5 / sigma - eps * sigma),
      eps + hockey_stick.log_prob_below(-0.5 / sigma - eps * sigma))


@validation.arguments('sigma', 'delta')
def gaussian_epsilon(sigma: float, delta: float) -> float:
  """Exact eps of one Gaussian mechanism N(f(D), sigma^2), sensitivity 1.

  Balle and Wang (2018), Theorem 8: the mechanism is (eps, delta)-DP iff
  Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma) <= delta.
  This is the "analytical eps" column of the paper's Tables 2 to 4.

  Args:
    sigma: The noise standard deviation, > 0.
    delta: The delta, in (0, 1).

  Returns:
    The smallest eps >= 0 at which the mechanism is (eps, delta)-DP.

  Raises:
    ValueError: if `sigma` <= 0 or `delta` is not in (0, 1).
  """
  log_delta = math.log(delta)
  if _gaussian_log_delta(0.0, sigma) <= log_delta:
    return 0.0
  hi = 1.0
  while _gaussian_log_delta(hi, sigma) > log_delta:
    hi *= 2.0
  return optimize.brentq(lambda e: _gaussian_log_delta(e, sigma) - log_delta,
                         0.0, hi, xtol=1e-13, rtol=1e-13, maxiter=500)


@validation.arguments('epsilon', 'delta')
def gaussian_sigma(epsilon: float, delta: float) -> float:
  """Smallest noise std giving (epsilon, delta)-DP at sensitivity 1 (Balle & Wang).

  This is the "optimal calibration" used for Table 2: delta(eps) decreases in
  sigma, so sigma is the root of log delta(epsilon; sigma) = log delta.

  Args:
    epsilon: The target eps, > 0.
    delta: The target delta, in (0, 1).

  Returns:
    sigma > 0.

  Raises:
    ValueError: if `epsilon` <= 0 or `delta` is not in (0, 1).
  """
  log_delta = math.log(delta)

  def excess(log_sigma: float) -> float:
    return _gaussian_log_delta(epsilon, math.exp(log_sigma)) - log_delta

  lo, hi = -1.0, 1.0
  while excess(lo) < 0.0:
    lo -= 2.0
  while excess(hi) > 0.0:
    hi += 2.0
  return math.exp(optimize.brentq(excess, lo, hi, xtol=1e-14, maxiter=500))


# ----------------------------------------------------------------------------
# Algorithms 1-3: epsilon estimates.


@validation.arguments('cosines', 'delta', dim=null_distribution.DIM,
                      variance=validation.Choice(('fitted', 'null')))
def epsilon_from_final_cosines(cosines: ArrayLike, dim: int, delta: float,
                               variance: VarianceModel = 'fitted') -> float:
  """Algorithm 2 (and 1): eps between N(0, 1/d) and a Gaussian fit of the cosines.

  `cosines` are the observed canaries' cosines with the released vector (the
  final model, or the mechanism output in Algorithm 1).

  variance='fitted' (default) is Algorithm 1/2 as written: the observed
  cosines are modelled as N(mu_hat, sigma_hat^2) with the population standard
  deviation (line 9), and eps is the two-Gaussian eps of Section 3.2. Because
  the privacy loss of unequal-variance Gaussians is unbounded, at small delta
  this eps is very sensitive to sigma_hat: with k = 1000 canaries the ~2%
  sampling error of sigma_hat alone biases eps upwards (for the Gaussian
  mechanism at eps = 3, delta = 1e-6, to about 3.4 +- 0.4).

  variance='null' fixes the observed variance to the null's 1/d, the limit
  d sigma_hat^2 -> 1 of Theorem 3.3, so that only mu_hat is estimated. It is
  the right model when the mechanism is a Gaussian mechanism and reproduces
  the spread of the paper's Table 2; it is wrong when training changes the
  cosines' spread (e.g. with little noise), where 'fitted' must be used.

  Args:
    cosines: The observed canaries' cosines, in [-1, 1], at least 2.
    dim: d >= 3, the dimension of the released vector.
    delta: The delta, in (0, 1).
    variance: 'fitted' or 'null' (above).

  Returns:
    eps_est >= 0.

  Raises:
    ValueError: if an argument is out of range, the cosines have zero spread
      or `variance` is neither 'fitted' nor 'null'.

  Example:
    Algorithm 1 on the Gaussian mechanism at sigma = 1, whose true eps at
    delta = 1e-5 is `gaussian_epsilon(1.0, 1e-5)`:

    >>> import numpy as np
    >>> from one_shot_epe.stats import estimation, gaussian_simulation
    >>> cosines = gaussian_simulation.simulate_cosines(
    ...     dim=10**6, num_canaries=1000, sigma=1.0,
    ...     rng=np.random.default_rng(0))
    >>> round(estimation.epsilon_from_final_cosines(
    ...     cosines, dim=10**6, delta=1e-5, variance='null'), 2)
    4.45
    >>> round(estimation.gaussian_epsilon(1.0, 1e-5), 2)
    4.38
  """
  null_std = 1.0 / math.sqrt(dim)
  mean, std = fit_gaussian(cosines, 'cosines')
  if variance == 'null':
    std = null_std
  return epsilon_two_gaussians.unchecked(0.0, null_std, mean, std, delta)


@validation.arguments('delta', seen=validation.Cosines(),
                      unseen=validation.Cosines())
def epsilon_from_seen_unseen(seen: ArrayLike, unseen: ArrayLike,
                             delta: float) -> float:
  """Algorithm 3: eps between Gaussian fits of unseen and seen max-over-rounds cosines.

  The null distribution of a maximum over rounds has no closed form (it
  depends on the training trajectory), so it is estimated from canaries that
  were never inserted.

  Args:
    seen: Max-over-rounds cosines of inserted canaries, in [-1, 1].
    unseen: Those of never-inserted canaries, in [-1, 1].
    delta: The delta, in (0, 1).

  Returns:
    eps_est >= 0 between N(unseen mean, unseen std^2) and the seen fit.

  Raises:
    ValueError: if a sample has fewer than 2 values, values outside [-1, 1]
      or zero spread, or `delta` is not in (0, 1).

  Example:
    Seen cosines of the Gaussian mechanism at sigma = 1 (true eps 4.38 at
    delta = 1e-5) against a sample of the exact null:

    >>> import numpy as np
    >>> from one_shot_epe.stats import estimation, gaussian_simulation
    >>> from one_shot_epe.stats import null_distribution
    >>> rng = np.random.default_rng(0)
    >>> seen = gaussian_simulation.simulate_cosines(
    ...     dim=10**6, num_canaries=1000, sigma=1.0, rng=rng)
    >>> unseen = null_distribution.null_ppf(rng.uniform(size=1000), 10**6)
    >>> round(estimation.epsilon_from_seen_unseen(seen, unseen, delta=1e-5), 2)
    5.58
  """
  mu_seen, std_seen = fit_gaussian(seen, 'seen')
  mu_unseen, std_unseen = fit_gaussian(unseen, 'unseen')
  return epsilon_two_gaussians.unchecked(mu_unseen, std_unseen, mu_seen,
                                         std_seen, delta)


# ----------------------------------------------------------------------------
# Appendix B / Table 6: normality of the cosine samples.


@validation.arguments(sample=validation.Sample(min_size=8))
def anderson_darling(sample: ArrayLike) -> float:
  """Anderson-Darling A^2 for normality with mean and variance estimated.

  A^2 = -n - (1/n) sum_i (2i-1) [log Phi(z_(i)) + log(1 - Phi(z_(n+1-i)))] with
  z standardised by the sample mean and the (ddof=1) standard deviation, as in
  Stephens (1974) case 3 and the paper's Table 6. Tail probabilities are taken
  as logs, so extreme points do not overflow.

  Args:
    sample: At least 8 finite numbers.

  Returns:
    A^2 (large values reject normality).

  Raises:
    ValueError: if `sample` has fewer than 8 finite numbers or zero spread.
  """
  std = float(np.std(sample, ddof=1))
  if std <= 0.0:
    raise ValueError('sample has zero spread.')
  z = np.sort((sample - sample.mean()) / std)
  n = z.size
  weights = 2.0 * np.arange(1, n + 1) - 1.0
  terms = special.log_ndtr(z) + special.log_ndtr(-z[::-1])
  return float(-n - np.sum(weights * terms) / n)


# ----------------------------------------------------------------------------
# Robust summary beside eps_est (see `privacy_report`).


@validation.arguments('mu', 'delta')
def epsilon_of_gdp(mu: float, delta: float) -> float:
  """eps at delta of mu-Gaussian DP: the Gaussian mechanism at sigma = 1/mu.

  mu-GDP (Dong, Roth and Su, 2022) is the trade-off between N(0, 1) and
  N(mu, 1), i.e. a sensitivity-1 Gaussian mechanism with noise 1/mu, whose
  exact eps is `gaussian_epsilon` (Balle and Wang, 2018).

  Args:
    mu: The GDP parameter (a mean shift in noise standard deviations).
    delta: The delta, in (0, 1).

  Returns:
    eps >= 0; 0 for mu <= 0 (no shift towards the seen side).
  """
  if mu <= 0.0:
    return 0.0
  return gaussian_epsilon.unchecked(1.0 / mu, delta)
