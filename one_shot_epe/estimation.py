"""Empirical privacy estimates from canary cosines (numpy/scipy only, no TensorFlow).

Implements the statistics of Andrew et al., "One-shot Empirical Privacy Estimation
for Federated Learning" (ICLR 2024):

* Section 3.2: the optimal epsilon between two arbitrary Gaussians, through the
  privacy-loss random variable, evaluated in log space
  (`epsilon_two_gaussians`).
* Theorems 3.1 and 3.2: the exact distribution of the cosine between a uniformly
  random unit vector and any fixed vector, and its N(0, 1/d) approximation
  (`null_pdf`, `null_cdf`, `null_logsf`, `null_ppf`).
* Algorithms 1 and 2: epsilon from canary/final-model cosines against the null
  (`epsilon_from_final_cosines`); Algorithm 3: epsilon from the max-over-rounds
  cosines of seen and unseen canaries (`epsilon_from_seen_unseen`).
* Section 5.1: the 1-alpha lower bound eps_lo, Jagielski et al. (2020) with
  Jeffreys intervals and the exact null (`epsilon_lower_bound`).
* Balle and Wang (2018): exact epsilon <-> sigma for one Gaussian mechanism with
  sensitivity 1 (`gaussian_epsilon`, `gaussian_sigma`).
* Appendix B / Table 6: the Anderson-Darling normality statistic
  (`anderson_darling`).
* Beside eps_est, robust summaries of the same attack in every report: the
  Gaussian-DP eps (`epsilon_of_gdp`), a bootstrap interval for eps_est, AUROC
  and TPR at fixed FPRs (`PrivacyReport`, from `attack_metrics`).

Which null is used: epsilon *estimates* compare two Gaussians, so they use the
moment-matched null N(0, 1/d) exactly as Algorithms 1 and 2 state (the exact null
has mean 0 and variance exactly 1/d). The *lower bound* needs false-positive rates
deep in the tail, where only the exact null is right, so it uses the exact
Beta-based null by default (`null='exact'`), as Section 5.1 describes.
"""

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special
from scipy import stats

from one_shot_epe import attack_metrics

NullKind = Literal['exact', 'gaussian']
ThresholdStrategy = Literal['all', 'split']
VarianceModel = Literal['fitted', 'null']

_LOG_TINY = -700.0  # Below this, exp() underflows double precision.


# ----------------------------------------------------------------------------
# Input validation.


def _check_delta(delta: float) -> float:
  if not isinstance(delta, (int, float, np.floating, np.integer)) or not (
      0.0 < float(delta) < 1.0):
    raise ValueError(f'delta must be a number in (0, 1); got {delta!r}.')
  return float(delta)


def _check_finite(name: str, value: float) -> float:
  try:
    value = float(value)
  except (TypeError, ValueError):
    raise ValueError(f'{name} must be a finite number; got {value!r}.') from None
  if not math.isfinite(value):
    raise ValueError(f'{name} must be a finite number; got {value!r}.')
  return value


def _check_std(name: str, value: float) -> float:
  value = _check_finite(name, value)
  if value <= 0.0:
    raise ValueError(f'{name} must be positive; got {value!r}.')
  return value


def _check_dim(dim: float) -> int:
  if isinstance(dim, bool) or not float(dim).is_integer() or dim < 3:
    raise ValueError(f'dim must be an integer >= 3; got {dim!r}.')
  return int(dim)


def _check_alpha(alpha: float) -> float:
  alpha = _check_finite('alpha', alpha)
  if not 0.0 < alpha < 0.5:
    raise ValueError(f'alpha must be in (0, 0.5); got {alpha!r}.')
  return alpha


def _check_sample(name: str, values: ArrayLike, min_size: int = 2) -> np.ndarray:
  try:
    array = np.asarray(values, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(f'{name} must be a 1-D array of numbers.') from None
  if array.ndim != 1:
    raise ValueError(f'{name} must be 1-D; got shape {array.shape}.')
  if array.size < min_size:
    raise ValueError(
        f'{name} needs at least {min_size} values; got {array.size}.')
  if not np.all(np.isfinite(array)):
    raise ValueError(f'{name} contains NaN or infinite values.')
  return array


def _check_cosines(name: str, values: ArrayLike) -> np.ndarray:
  array = _check_sample(name, values)
  if np.any(np.abs(array) > 1.0 + 1e-6):
    raise ValueError(f'{name} are cosines and must lie in [-1, 1].')
  return np.clip(array, -1.0, 1.0)


def _fit(sample: np.ndarray, name: str) -> tuple[float, float]:
  """Mean and population std (ddof=0) as in Algorithm 1, line 9."""
  mean, std = float(np.mean(sample)), float(np.std(sample))
  if std <= 0.0:
    raise ValueError(f'{name} has zero spread; a Gaussian cannot be fit.')
  return mean, std


# ----------------------------------------------------------------------------
# Log-probabilities of Gaussian sets, accurate far into the tails.


def _log_diff(log_a: float, log_b: float) -> float:
  """log(exp(log_a) - exp(log_b)) for log_a >= log_b.

  log(1 - e^x), x = log_b - log_a < 0, is taken as log(-expm1(x)) for
  x > -log 2 and log1p(-e^x) below (Maechler, 2012): for x within an ulp of 0,
  exp(x) rounds to 1 and log1p(-1) would raise a math domain error.
  """
  if log_b == -math.inf:
    return log_a
  if log_b >= log_a:
    return -math.inf
  x = log_b - log_a
  if x > -math.log(2.0):
    return log_a + math.log(-math.expm1(x))
  return log_a + math.log1p(-math.exp(x))


def _log_prob_above(z: float) -> float:
  return float(special.log_ndtr(-z))


def _log_prob_below(z: float) -> float:
  return float(special.log_ndtr(z))


def _log_prob_between(lo: float, hi: float) -> float:
  """log P(lo < Z < hi) for standard normal Z, stable in either tail."""
  if hi <= lo:
    return -math.inf
  if lo >= 0.0:  # Both in the upper tail: difference of survival functions.
    return _log_diff(_log_prob_above(lo), _log_prob_above(hi))
  if hi <= 0.0:  # Both in the lower tail: difference of CDFs.
    return _log_diff(_log_prob_below(hi), _log_prob_below(lo))
  return math.log1p(-math.exp(_log_prob_below(lo)) -
                    math.exp(_log_prob_above(hi)))


def _log_prob_of_set(intervals: Sequence[tuple[float, float]], mean: float,
                     std: float) -> float:
  """log P(X in union of disjoint intervals) for X ~ N(mean, std^2)."""
  logs = []
  for lo, hi in intervals:
    zlo, zhi = (lo - mean) / std, (hi - mean) / std
    if zlo == -math.inf:
      logs.append(_log_prob_below(zhi))
    elif zhi == math.inf:
      logs.append(_log_prob_above(zlo))
    else:
      logs.append(_log_prob_between(zlo, zhi))
  return _log_sum_exp(logs)


def _log_sum_exp(logs: Sequence[float]) -> float:
  """log(sum(exp(logs))) of a few floats, without scipy's per-call overhead.

  scipy.special.logsumexp costs ~0.1 ms per call, most of the time of an eps
  evaluation; this is the same max-shifted sum in plain floats.
  """
  top = max(logs, default=-math.inf)
  if top == -math.inf:
    return -math.inf
  return top + math.log(math.fsum(math.exp(value - top) for value in logs))


# ----------------------------------------------------------------------------
# Section 3.2: epsilon between two Gaussians.


def _privacy_loss_superlevel_set(mu_p: float, std_p: float, mu_q: float,
                                 std_q: float,
                                 eps: float) -> list[tuple[float, float]]:
  """Intervals where log p(x) - log q(x) > eps, for p = N(mu_p, std_p^2) etc.

  The privacy loss is the quadratic a x^2 + b x + c with
    a = 1/(2 std_q^2) - 1/(2 std_p^2),
    b = mu_p/std_p^2 - mu_q/std_q^2,
    c = mu_q^2/(2 std_q^2) - mu_p^2/(2 std_p^2) + log(std_q/std_p).
  Its superlevel set is a half-line (a = 0), two tails (a > 0) or an interval
  (a < 0). Roots use the cancellation-free form of the quadratic formula.
  """
  a = 0.5 / std_q**2 - 0.5 / std_p**2
  b = mu_p / std_p**2 - mu_q / std_q**2
  c = (0.5 * mu_q**2 / std_q**2 - 0.5 * mu_p**2 / std_p**2 +
       math.log(std_q / std_p) - eps)
  if a == 0.0:
    if b == 0.0:
      return [(-math.inf, math.inf)] if c > 0 else []
    root = -c / b
    return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
  disc = b * b - 4.0 * a * c
  if disc <= 0.0:  # No sign change: everywhere (a > 0) or nowhere (a < 0).
    return [(-math.inf, math.inf)] if a > 0 else []
  q = -0.5 * (b + math.copysign(math.sqrt(disc), b))
  r1, r2 = sorted((q / a, c / q))
  if a > 0:
    return [(-math.inf, r1), (r2, math.inf)]
  return [(r1, r2)]


def _log_hockey_stick(mu_p: float, std_p: float, mu_q: float, std_q: float,
                      eps: float) -> float:
  """log of the hockey-stick divergence E_eps(P || Q) = sup_S P(S) - e^eps Q(S).

  The supremum is attained on S = {x : log p(x)/q(x) > eps}, on which
  P(S) >= e^eps Q(S) pointwise, so the logarithm of the difference is formed
  from log P(S) and log Q(S) without cancellation.
  """
  intervals = _privacy_loss_superlevel_set(mu_p, std_p, mu_q, std_q, eps)
  if not intervals:
    return -math.inf
  log_p = _log_prob_of_set(intervals, mu_p, std_p)
  log_q = _log_prob_of_set(intervals, mu_q, std_q)
  return _log_diff(log_p, eps + log_q)


def _epsilon_one_direction(mu_p: float, std_p: float, mu_q: float,
                           std_q: float, log_delta: float) -> float:
  """Smallest eps >= 0 with E_eps(P || Q) <= delta (monotone root search)."""

  def excess(eps: float) -> float:
    value = _log_hockey_stick(mu_p, std_p, mu_q, std_q, eps)
    return max(value, _LOG_TINY * 10) - log_delta

  if excess(0.0) <= 0.0:
    return 0.0
  hi = 1.0
  while excess(hi) > 0.0:
    hi *= 2.0
    if hi > 2.0**40:
      raise ValueError('epsilon exceeds 1e12: the two Gaussians are too far '
                       'apart for a meaningful estimate.')
  return optimize.brentq(excess, 0.0 if hi == 1.0 else hi / 2.0, hi,
                         xtol=1e-12, rtol=1e-12, maxiter=500)


def epsilon_two_gaussians(mu0: float, std0: float, mu1: float, std1: float,
                          delta: float) -> float:
  """Optimal eps such that N(mu0, std0^2) and N(mu1, std1^2) are (eps, delta)-close.

  Section 3.2: eps is the smallest value for which the hockey-stick divergence
  is at most delta in *both* directions, computed from the privacy-loss random
  variable. All probabilities are handled as logarithms, so results stay
  accurate from eps ~ 0 up to eps ~ 1e5 and for delta down to 1e-300. Returns 0
  when (0, delta) already holds. The problem is standardised first
  (x -> (x - mu0)/std0), which leaves eps unchanged.
  """
  mu0, mu1 = _check_finite('mu0', mu0), _check_finite('mu1', mu1)
  std0, std1 = _check_std('std0', std0), _check_std('std1', std1)
  log_delta = math.log(_check_delta(delta))
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
  return _log_diff(
      _log_prob_below(0.5 / sigma - eps * sigma),
      eps + _log_prob_below(-0.5 / sigma - eps * sigma))


def gaussian_epsilon(sigma: float, delta: float) -> float:
  """Exact eps of one Gaussian mechanism N(f(D), sigma^2), sensitivity 1.

  Balle and Wang (2018), Theorem 8: the mechanism is (eps, delta)-DP iff
  Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma) <= delta.
  This is the "analytical eps" column of the paper's Tables 2 to 4.
  """
  sigma = _check_std('sigma', sigma)
  log_delta = math.log(_check_delta(delta))
  if _gaussian_log_delta(0.0, sigma) <= log_delta:
    return 0.0
  hi = 1.0
  while _gaussian_log_delta(hi, sigma) > log_delta:
    hi *= 2.0
  return optimize.brentq(lambda e: _gaussian_log_delta(e, sigma) - log_delta,
                         0.0, hi, xtol=1e-13, rtol=1e-13, maxiter=500)


def gaussian_sigma(epsilon: float, delta: float) -> float:
  """Smallest noise std giving (epsilon, delta)-DP at sensitivity 1 (Balle & Wang).

  This is the "optimal calibration" used for Table 2: delta(eps) decreases in
  sigma, so sigma is the root of log delta(epsilon; sigma) = log delta.
  """
  epsilon = _check_finite('epsilon', epsilon)
  if epsilon <= 0.0:
    raise ValueError(f'epsilon must be positive; got {epsilon!r}.')
  log_delta = math.log(_check_delta(delta))

  def excess(log_sigma: float) -> float:
    return _gaussian_log_delta(epsilon, math.exp(log_sigma)) - log_delta

  lo, hi = -1.0, 1.0
  while excess(lo) < 0.0:
    lo -= 2.0
  while excess(hi) > 0.0:
    hi += 2.0
  return math.exp(optimize.brentq(excess, lo, hi, xtol=1e-14, maxiter=500))


# ----------------------------------------------------------------------------
# Theorems 3.1 and 3.2: the null distribution of a cosine.


def _log_gamma_ratio_half(a: float) -> float:
  """log(Gamma(a + 1/2) / Gamma(a)) without cancelling two huge log-gammas.

  For a >= 1000 the asymptotic series 1/2 log a - 1/(8a) + 1/(192 a^3) has
  error below 2e-18; below that, the plain difference of log-gammas is
  accurate to about 1e-12.
  """
  if a >= 1000.0:
    return 0.5 * math.log(a) - 1.0 / (8.0 * a) + 1.0 / (192.0 * a**3)
  return float(special.gammaln(a + 0.5) - special.gammaln(a))


def _log_sf_upper(tau: np.ndarray, a: float) -> np.ndarray:
  """log P(T > tau) for tau > 0: log I_x(a, a), x = (1 - tau)/2, by continued fraction.

  I_x(a, b) = x^a (1-x)^b / (a B(a, b)) / (1 + d1/(1 + d2/(1 + ...))) with
    d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),
    d_{2m}   = m(b-m) x / ((a+2m-1)(a+2m))        (DLMF 8.17.22),
  which converges quickly for x < 1/2, evaluated by the modified Lentz method.
  With b = a the prefactor simplifies, by x(1-x) = (1 - tau^2)/4 and Legendre's
  duplication formula, to (1 - tau^2)^a Gamma(a + 1/2) / (2a sqrt(pi) Gamma(a)),
  whose logarithm stays well conditioned even for d = 1e9.

  Each element stops at its own convergence: for large a the odd terms nearly
  cancel 1, so after convergence the Lentz step keeps jittering by ~1e-13
  around 1, and waiting for all elements to reach |step - 1| < 1e-15 at the
  same iteration would run to the iteration cap (~300x slower for d >= 4e6).
  """
  tiny = 1e-300
  b = a
  x = (1.0 - tau) / 2.0

  def guard(v):
    return np.where(np.abs(v) < tiny, tiny, v)

  c = np.ones_like(x)
  d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
  h = d.copy()
  active = np.ones(x.shape, dtype=bool)
  for m in range(1, 100000):
    for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
      d = 1.0 / guard(1.0 + num * d)
      c = guard(1.0 + num / c)
      step = c * d
      h = np.where(active, h * step, h)
    active &= np.abs(step - 1.0) >= 1e-15
    if not np.any(active):
      break
  log_prefactor = (a * np.log1p(-tau * tau) + _log_gamma_ratio_half(a) -
                   math.log(2.0 * a) - 0.5 * math.log(math.pi))
  return log_prefactor + np.log(h)


def _half_mass_centre(tau: np.ndarray, a: float) -> np.ndarray:
  """P(0 < T < |tau|) = I_{tau^2}(1/2, a)/2 for tau^2 <= 1/(2a + 1), by a positive series.

  DLMF 8.17.8 with 2F1(a + 1/2, 1; 3/2; y), y = tau^2:
    I_y(1/2, a) = 2 |tau| (1 - y)^a Gamma(a + 1/2) / (sqrt(pi) Gamma(a))
                  * sum_k (a + 1/2)_k / (3/2)_k y^k.
  Every term is positive and the term ratio (a + 1/2 + k) y / (3/2 + k) is at
  most 1/3 in the centre, so 40 terms reach double precision. scipy's
  betainc(1/2, a, y) loses up to ~1e-9 relative accuracy for a between 1e3 and
  1e6, which is why it is not used here.
  """
  y = tau * tau
  term = np.ones_like(y)
  total = np.ones_like(y)
  for k in range(40):
    term = term * (a + 0.5 + k) * y / (1.5 + k)
    total = total + term
  log_front = (a * np.log1p(-y) + _log_gamma_ratio_half(a) -
               0.5 * math.log(math.pi))
  return np.abs(tau) * np.exp(log_front) * total


def null_logsf(tau: ArrayLike, dim: int) -> np.ndarray:
  """log P(T > tau) for the exact null cosine T (Theorem 3.1), accurate in the tails.

  (1 + T)/2 ~ Beta(a, a) with a = (d-1)/2, and T^2 ~ Beta(1/2, a). Near the
  centre (|tau| sqrt(d) <= 1) P(T > tau) = (1 -/+ I_{tau^2}(1/2, a))/2 has no
  cancellation; for larger tau the continued fraction of `_log_sf_upper` is
  used, and negative tau follow from P(T > tau) = 1 - P(T > -tau). Relative
  accuracy is about 1e-12 or better for d from 3 to 1e9, including tails far
  beyond double-precision underflow.
  """
  dim = _check_dim(dim)
  tau = np.asarray(tau, dtype=np.float64)
  a = 0.5 * (dim - 1)
  out = np.empty_like(tau)
  flat_tau, flat_out = tau.reshape(-1), out.reshape(-1)
  scaled = np.abs(flat_tau) * math.sqrt(dim)
  centre = scaled <= 1.0
  if np.any(centre):
    t = flat_tau[centre]
    flat_out[centre] = np.log(0.5 - np.sign(t) * _half_mass_centre(t, a))
  upper = ~centre & (flat_tau > 0)
  lower = ~centre & (flat_tau < 0)
  inside_up = upper & (flat_tau < 1.0)
  inside_low = lower & (flat_tau > -1.0)
  if np.any(inside_up):
    flat_out[inside_up] = _log_sf_upper(flat_tau[inside_up], a)
  if np.any(inside_low):
    mirrored = _log_sf_upper(-flat_tau[inside_low], a)
    flat_out[inside_low] = np.log1p(-np.exp(mirrored))
  flat_out[upper & ~inside_up] = -np.inf
  flat_out[lower & ~inside_low] = 0.0
  return out


def null_pdf(tau: ArrayLike, dim: int) -> np.ndarray:
  """Density of the cosine between a uniform unit vector and a fixed vector.

  Theorem 3.1: f_d(tau) = Gamma(d/2) / (Gamma((d-1)/2) sqrt(pi)) (1-tau^2)^((d-3)/2)
  on [-1, 1].
  """
  dim = _check_dim(dim)
  tau = np.asarray(tau, dtype=np.float64)
  log_norm = _log_gamma_ratio_half(0.5 * (dim - 1)) - 0.5 * math.log(math.pi)
  inside = np.abs(tau) < 1.0
  safe = np.where(inside, tau, 0.0)
  log_pdf = log_norm + 0.5 * (dim - 3) * np.log1p(-safe * safe)
  return np.where(inside, np.exp(log_pdf), 0.0)


def null_cdf(tau: ArrayLike, dim: int) -> np.ndarray:
  """P(T <= tau) for the exact null cosine, by symmetry P(T > -tau)."""
  return np.exp(null_logsf(-np.asarray(tau, dtype=np.float64), dim))


def null_ppf(q: ArrayLike, dim: int) -> np.ndarray:
  """Quantile function of the exact null cosine.

  Starts from 2 B^{-1}(q) - 1 for the Beta((d-1)/2, (d-1)/2) law and polishes
  it with Newton steps on the accurate `null_cdf` (the incomplete-beta inverse
  alone loses about six digits at d = 1e9).
  """
  dim = _check_dim(dim)
  q = np.asarray(q, dtype=np.float64)
  if np.any((q < 0.0) | (q > 1.0)) or np.any(np.isnan(q)):
    raise ValueError('q must lie in [0, 1].')
  a = 0.5 * (dim - 1)
  tau = 2.0 * special.betaincinv(a, a, q) - 1.0
  interior = (q > 0.0) & (q < 1.0)
  for _ in range(3):
    density = null_pdf(tau, dim)
    step = np.where(interior & (density > 0),
                    (null_cdf(tau, dim) - q) / np.where(density > 0, density, 1.0),
                    0.0)
    tau = np.clip(tau - step, -1.0, 1.0)
  return tau


def null_gaussian_approximation(dim: int) -> stats.rv_continuous:
  """N(0, 1/d): the limit law of Theorem 3.2 (and the exact null's mean/variance)."""
  dim = _check_dim(dim)
  return stats.norm(loc=0.0, scale=1.0 / math.sqrt(dim))


# ----------------------------------------------------------------------------
# Algorithms 1-3: epsilon estimates.


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
  """
  sample = _check_cosines('cosines', cosines)
  dim = _check_dim(dim)
  null_std = 1.0 / math.sqrt(dim)
  mean, std = _fit(sample, 'cosines')
  if variance == 'null':
    std = null_std
  elif variance != 'fitted':
    raise ValueError(f"variance must be 'fitted' or 'null'; got {variance!r}.")
  return epsilon_two_gaussians(0.0, null_std, mean, std, delta)


def epsilon_from_seen_unseen(seen: ArrayLike, unseen: ArrayLike,
                             delta: float) -> float:
  """Algorithm 3: eps between Gaussian fits of unseen and seen max-over-rounds cosines.

  The null distribution of a maximum over rounds has no closed form (it
  depends on the training trajectory), so it is estimated from canaries that
  were never inserted.
  """
  seen = _check_cosines('seen', seen)
  unseen = _check_cosines('unseen', unseen)
  mu_seen, std_seen = _fit(seen, 'seen')
  mu_unseen, std_unseen = _fit(unseen, 'unseen')
  return epsilon_two_gaussians(mu_unseen, std_unseen, mu_seen, std_seen, delta)


# ----------------------------------------------------------------------------
# Section 5.1: eps_lo, the Jagielski et al. (2020) bound with Jeffreys intervals.


def _beta_quantile(a: np.ndarray, b: np.ndarray, prob: float) -> np.ndarray:
  """The lower `prob` quantile of Beta(a, b), elementwise, accurate for tiny prob.

  scipy's betaincinv is only the starting point: for prob below ~1e-6 and
  parameters in the hundreds it can be off by orders of magnitude. A
  bracketed Newton iteration on log I_q(a, b) = log prob, with the accurate
  forward betainc, converges from there (a step leaving the bracket becomes a
  bisection step). An element stops when log I_q is within 1e-10 of log prob,
  its Newton step no longer changes q, or its bracket is a few ulps wide (for
  parameters ~1e6 betainc itself is only good to ~3e-10).
  """
  log_prob = math.log(prob)
  lo, hi = np.zeros_like(a), np.ones_like(a)
  q = special.betaincinv(a, b, prob)
  active = np.ones(q.shape, dtype=bool)
  # A step that overflows or is NaN leaves the bracket and is bisected.
  with np.errstate(divide='ignore', over='ignore', invalid='ignore'):
    for _ in range(200):
      q = np.where(active & ~((q > lo) & (q < hi)), 0.5 * (lo + hi), q)
      log_cdf = np.log(special.betainc(a, b, q))
      error = log_cdf - log_prob
      lo = np.where(error < 0.0, q, lo)
      hi = np.where(error > 0.0, q, hi)
      log_pdf = ((a - 1.0) * np.log(q) + (b - 1.0) * np.log1p(-q) -
                 special.betaln(a, b))
      stepped = q - error * np.exp(log_cdf - log_pdf)
      active &= ((np.abs(error) > 1e-10) & (stepped != q) &
                 (hi - lo > 4.0 * np.spacing(q)))
      if not np.any(active):
        break
      q = np.where(active, stepped, q)
  return q


def jeffreys_upper(failures: ArrayLike, trials: int, alpha: float) -> np.ndarray:
  """One-sided 1-alpha Jeffreys upper confidence bound on a binomial rate.

  The alpha upper quantile of Beta(x + 1/2, n - x + 1/2); 1 when x = n
  (Brown, Cai and DasGupta, 2001). Computed as 1 - q, q the alpha lower
  quantile of the mirrored law Beta(n - x + 1/2, x + 1/2), so that the small
  tail mass alpha is inverted as given: betaincinv(x + 1/2, n - x + 1/2,
  1 - alpha) returns 0.99999999685 instead of 0.0185 for x = 0, n = 1000,
  alpha = 1e-9.
  """
  if isinstance(trials, bool) or not float(trials).is_integer() or trials < 1:
    raise ValueError(f'trials must be an integer >= 1; got {trials!r}.')
  alpha = _check_finite('alpha', alpha)
  if not 0.0 < alpha < 1.0:
    raise ValueError(f'alpha must be in (0, 1); got {alpha!r}.')
  x = np.asarray(failures, dtype=np.float64)
  if np.any(~np.isfinite(x)) or np.any(x < 0) or np.any(x > trials) or np.any(
      x != np.round(x)):
    raise ValueError(f'failures must be integers in [0, {trials}].')
  q = _beta_quantile(trials - x + 0.5, x + 0.5, alpha)
  return np.where(x >= trials, 1.0, 1.0 - q)


def _epsilon_from_rates(log_fpr: np.ndarray, log_fnr: np.ndarray,
                        delta: float) -> np.ndarray:
  """eps >= max(log((1-delta-FPR)/FNR), log((1-delta-FNR)/FPR)) per threshold.

  Any (eps, delta)-DP mechanism forces FPR + e^eps FNR >= 1 - delta and the
  same with the roles swapped (Kairouz et al., 2015), so upper bounds on both
  rates give a lower bound on eps. Computed in logs; impossible terms are -inf.
  """
  with np.errstate(divide='ignore', invalid='ignore'):
    one_minus_fpr = np.log(np.maximum(1.0 - delta - np.exp(log_fpr), 0.0))
    one_minus_fnr = np.log(np.maximum(1.0 - delta - np.exp(log_fnr), 0.0))
    first = np.where(np.isfinite(one_minus_fpr), one_minus_fpr - log_fnr,
                     -np.inf)
    second = np.where(np.isfinite(one_minus_fnr), one_minus_fnr - log_fpr,
                      -np.inf)
  return np.maximum(first, second)


def _log_rates_at(thresholds: np.ndarray, seen: np.ndarray, *,
                  dim: int | None, unseen: np.ndarray | None, null: NullKind,
                  alpha: float) -> tuple[np.ndarray, np.ndarray]:
  """Upper-bound log rates of the threshold test at each threshold t.

  Empirical null (`unseen` given): the test 'seen iff cosine > t'; a seen
  cosine equal to t is a miss and an unseen one equal to t is no alarm.
  Closed-form null: the test 'seen iff cosine >= t', the limit of
  'cosine > t - h' as h -> 0+: a seen cosine equal to t is detected, and the
  false-positive rate is the null's mass at or above t (the null is
  continuous, so that is its survival function at t). A cosine of exactly 1
  (the null puts no mass there) is evaluated at the largest double below 1,
  so the bound stays finite for rounded inputs.
  """
  seen_sorted = np.sort(seen)
  side = 'right' if unseen is not None else 'left'
  misses = np.searchsorted(seen_sorted, thresholds, side=side)
  with np.errstate(divide='ignore'):
    log_fnr = np.log(jeffreys_upper(misses, seen.size, alpha))
    if unseen is not None:
      unseen_sorted = np.sort(unseen)
      false_alarms = unseen.size - np.searchsorted(
          unseen_sorted, thresholds, side='right')
      log_fpr = np.log(jeffreys_upper(false_alarms, unseen.size, alpha))
    elif null == 'exact':
      # A float cosine of exactly 1 is a rounded value: its FPR is the
      # (positive) null mass above the largest double below 1, not 0.
      log_fpr = null_logsf(np.minimum(thresholds, np.nextafter(1.0, 0.0)), dim)
    else:
      log_fpr = stats.norm.logsf(thresholds * math.sqrt(dim))
  return log_fpr, log_fnr


def epsilon_lower_bound(seen: ArrayLike,
                        *,
                        delta: float,
                        dim: int | None = None,
                        unseen: ArrayLike | None = None,
                        alpha: float = 0.05,
                        null: NullKind = 'exact',
                        threshold_strategy: ThresholdStrategy = 'all',
                        seed: int = 0) -> float:
  """eps_lo: a 1-alpha lower bound on eps from thresholding canary cosines.

  Section 5.1, modifying Jagielski et al. (2020): the test says "inserted" when
  a canary's cosine exceeds a threshold t. Its false-negative rate is bounded
  above by a one-sided Jeffreys interval (Zanella-Beguelin et al., 2022) on the
  observed canaries; its false-positive rate is either exact, from the null's
  survival function (give `dim`: the final-model threat model), or bounded by a
  Jeffreys interval on never-inserted canaries (give `unseen`: the
  all-iterates threat model). The rates then bound eps from below as in
  `_epsilon_from_rates`.

  Thresholds are optimal: the bound is the supremum over all thresholds t
  of the test. Its counts change only at observed cosines, so the candidates
  are those cosines, each approached from the side that favours the test:
    closed-form null: "cosine >= s" for each seen cosine s, i.e. t -> s from
      below: the FNR counts the seen cosines strictly below s and the FPR is
      the null's mass at or above s. (Testing "cosine > s" at t = s instead
      would count the canary at the threshold as a miss and lose the top
      order statistic.)
    empirical null: "cosine > v" for each seen or unseen cosine v, as in the
      paper's reference code; this covers every distinct pair of counts.
  Ties between a seen and an unseen cosine are conservative: no threshold
  separates them, so at any threshold the tied seen cosine is a miss or the
  tied unseen cosine a false alarm; they always count against the attacker.

  Threshold choice:
    'all'   (the paper's behaviour): every candidate above is tried and
            the largest bound is reported. Choosing t on the same data makes
            the confidence level nominal rather than exact (footnote 5): with
            200 seen cosines ~ N(1.5, 1)/sqrt(d) vs N(0, 1/d) at delta = 1e-5,
            a 95% bound exceeded the true eps in 28 of 300 simulations.
    'split': t is chosen on a random half of the samples (seeded by `seed`)
            and the same test ("cosine >= t" or "cosine > t" as above) is
            evaluated on the other half, so the 1-alpha guarantee holds
            exactly for that single test.
  With an empirical null, each rate's interval is at level 1-alpha as in the
  paper; a joint 1-alpha guarantee over both rates needs alpha/2 (union bound).
  Returns 0 when no threshold gives a positive bound.
  """
  seen = _check_cosines('seen', seen)
  delta = _check_delta(delta)
  alpha = _check_alpha(alpha)
  if (dim is None) == (unseen is None):
    raise ValueError('give exactly one of dim (exact/Gaussian null) or unseen '
                     '(empirical null).')
  if dim is not None:
    dim = _check_dim(dim)
  if unseen is not None:
    unseen = _check_cosines('unseen', unseen)
  if null not in ('exact', 'gaussian'):
    raise ValueError(f"null must be 'exact' or 'gaussian'; got {null!r}.")
  if threshold_strategy not in ('all', 'split'):
    raise ValueError("threshold_strategy must be 'all' or 'split'; got "
                     f'{threshold_strategy!r}.')

  def best(seen_part, unseen_part, candidates):
    log_fpr, log_fnr = _log_rates_at(candidates, seen_part, dim=dim,
                                     unseen=unseen_part, null=null, alpha=alpha)
    bounds = _epsilon_from_rates(log_fpr, log_fnr, delta)
    index = int(np.argmax(bounds))
    return candidates[index], float(bounds[index])

  def candidates_of(seen_part, unseen_part):
    pool = seen_part if unseen_part is None else np.concatenate(
        [seen_part, unseen_part])
    return np.unique(pool)

  if threshold_strategy == 'all':
    _, bound = best(seen, unseen, candidates_of(seen, unseen))
    return max(bound, 0.0)

  rng = np.random.default_rng(seed)
  if seen.size < 4 or (unseen is not None and unseen.size < 4):
    raise ValueError("threshold_strategy='split' needs at least 4 cosines in "
                     'each set.')
  seen_perm = rng.permutation(seen)
  seen_choose, seen_eval = np.array_split(seen_perm, 2)
  unseen_choose = unseen_eval = None
  if unseen is not None:
    unseen_perm = rng.permutation(unseen)
    unseen_choose, unseen_eval = np.array_split(unseen_perm, 2)
  threshold, _ = best(seen_choose, unseen_choose,
                      candidates_of(seen_choose, unseen_choose))
  _, bound = best(seen_eval, unseen_eval, np.array([threshold]))
  return max(bound, 0.0)


# ----------------------------------------------------------------------------
# Appendix B / Table 6: normality of the cosine samples.


def anderson_darling(sample: ArrayLike) -> float:
  """Anderson-Darling A^2 for normality with mean and variance estimated.

  A^2 = -n - (1/n) sum_i (2i-1) [log Phi(z_(i)) + log(1 - Phi(z_(n+1-i)))] with
  z standardised by the sample mean and the (ddof=1) standard deviation, as in
  Stephens (1974) case 3 and the paper's Table 6. Tail probabilities are taken
  as logs, so extreme points do not overflow.
  """
  values = _check_sample('sample', sample, min_size=8)
  std = float(np.std(values, ddof=1))
  if std <= 0.0:
    raise ValueError('sample has zero spread.')
  z = np.sort((values - values.mean()) / std)
  n = z.size
  weights = 2.0 * np.arange(1, n + 1) - 1.0
  terms = special.log_ndtr(z) + special.log_ndtr(-z[::-1])
  return float(-n - np.sum(weights * terms) / n)


# ----------------------------------------------------------------------------
# Robust summaries beside eps_est (see `attack_metrics`).


def epsilon_of_gdp(mu: float, delta: float) -> float:
  """eps at delta of mu-Gaussian DP: the Gaussian mechanism at sigma = 1/mu.

  mu-GDP (Dong, Roth and Su, 2022) is the trade-off between N(0, 1) and
  N(mu, 1), i.e. a sensitivity-1 Gaussian mechanism with noise 1/mu, whose
  exact eps is `gaussian_epsilon` (Balle and Wang, 2018). mu <= 0 (no shift
  towards the seen side) gives 0.
  """
  mu = _check_finite('mu', mu)
  if mu <= 0.0:
    return 0.0
  return gaussian_epsilon(1.0 / mu, delta)


def _check_resamples(resamples: int) -> int:
  if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)):
    raise TypeError('bootstrap_resamples must be an int; got '
                    f'{type(resamples).__name__}.')
  if resamples < 20:
    raise ValueError(f'bootstrap_resamples must be >= 20; got {resamples}.')
  return int(resamples)


def _bootstrap_epsilons(fits: Sequence[tuple[np.ndarray, np.ndarray]],
                        epsilon_of_fits) -> np.ndarray:
  """eps_est of every bootstrap resample whose fitted stds are all positive.

  `fits` holds (means, stds) arrays per resampled sample; a resample that
  drew one value n times has zero spread, no Gaussian fit, and is dropped.
  """
  usable = np.all([stds > 0.0 for _, stds in fits], axis=0)
  if not np.any(usable):
    raise ValueError('every bootstrap resample has zero spread; the sample '
                     'is too small for an interval.')
  columns = [(means[usable], stds[usable]) for means, stds in fits]
  return np.array([
      epsilon_of_fits(*[(m[i], s[i]) for m, s in columns])
      for i in range(int(np.sum(usable)))
  ])


# ----------------------------------------------------------------------------
# Reports.

DEFAULT_BOOTSTRAP_RESAMPLES = 400
TPR_FPRS = (0.01, 0.001)  # False-positive rates of `PrivacyReport.tpr_at_fpr`.


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """Everything one threat model's estimate rests on, ready for JSON.

  threat_model is 'final' (Algorithm 2: cosines with the final model, null
  N(0, 1/d) / exact) or 'all' (Algorithm 3: max-over-rounds cosines, empirical
  null from unseen canaries).

  Beside the paper's eps_est (Sec. 3.2) and eps_lo (Sec. 5.1), robust
  summaries of the same attack, "the seen statistic is larger":
    gdp_mu, epsilon_gdp: mu = (seen mean - null mean) / null std and the eps of
      mu-Gaussian DP at delta (`epsilon_of_gdp`); null N(0, 1/d) for 'final',
      the unseen sample's fit for 'all'.
    epsilon_est_interval: basic bootstrap 95% interval for eps_est (seen, and
      for 'all' unseen, resampled with replacement).
    auroc: P(null statistic < seen statistic), ties one half; against the
      exact null (Theorem 3.1) for 'final', the unseen sample for 'all'.
    tpr_at_fpr: fraction of seen statistics above the threshold whose FPR is
      the key ('0.01', '0.001'): the exact null's quantile for 'final', the
      unseen sample's (`attack_metrics.empirical_threshold`) for 'all'.
  """
  threat_model: str
  dim: int | None
  delta: float
  alpha: float
  num_seen: int
  num_unseen: int
  seen_mean: float
  seen_std: float
  null_mean: float
  null_std: float
  epsilon_est: float
  epsilon_lo: float
  anderson_seen: float | None
  anderson_unseen: float | None
  epsilon_gdp: float
  gdp_mu: float
  epsilon_est_interval: tuple[float, float]
  auroc: float
  tpr_at_fpr: dict[str, float]

  def to_dict(self) -> dict[str, object]:
    """The fields by name (None for an Anderson statistic not computed).

    The interval is a two-element list, as JSON gives it back.
    """
    fields = dataclasses.asdict(self)
    fields['epsilon_est_interval'] = list(self.epsilon_est_interval)
    return fields

  def to_json(self) -> str:
    """`to_dict` as indented JSON with sorted keys."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _anderson_or_none(sample: np.ndarray) -> float | None:
  return anderson_darling(sample) if sample.size >= 8 else None


def _fpr_key(fpr: float) -> str:
  return f'{fpr:g}'


def final_model_report(cosines: ArrayLike, dim: int, delta: float,
                       alpha: float = 0.05,
                       threshold_strategy: ThresholdStrategy = 'all',
                       bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> PrivacyReport:
  """Report for the final-model threat model (Algorithm 2 + eps_lo vs the exact null).

  `seed` makes the bootstrap (and the 'split' halves of eps_lo)
  reproducible; `bootstrap_resamples` (>= 20) resamples give the interval.
  """
  sample = _check_cosines('cosines', cosines)
  dim = _check_dim(dim)
  delta = _check_delta(delta)
  resamples = _check_resamples(bootstrap_resamples)
  mean, std = _fit(sample, 'cosines')
  null_std = 1.0 / math.sqrt(dim)
  epsilon_est = epsilon_from_final_cosines(sample, dim, delta)
  rng = np.random.default_rng(seed)
  resampled = _bootstrap_epsilons(
      [attack_metrics.bootstrap_fits(sample, resamples, rng)],
      lambda fit: epsilon_two_gaussians(0.0, null_std, fit[0], fit[1], delta))
  mu = attack_metrics.gdp_mu(mean, 0.0, null_std)
  return PrivacyReport(
      threat_model='final', dim=dim, delta=delta,
      alpha=_check_alpha(alpha), num_seen=sample.size, num_unseen=0,
      seen_mean=mean, seen_std=std, null_mean=0.0, null_std=null_std,
      epsilon_est=epsilon_est,
      epsilon_lo=epsilon_lower_bound(sample, dim=dim, delta=delta, alpha=alpha,
                                     threshold_strategy=threshold_strategy,
                                     seed=seed),
      anderson_seen=_anderson_or_none(sample), anderson_unseen=None,
      epsilon_gdp=epsilon_of_gdp(mu, delta), gdp_mu=mu,
      epsilon_est_interval=attack_metrics.basic_bootstrap_interval(
          epsilon_est, resampled),
      auroc=attack_metrics.auroc_against_cdf(null_cdf(sample, dim)),
      tpr_at_fpr={
          _fpr_key(fpr): attack_metrics.tpr_above(
              sample, float(-null_ppf(fpr, dim)))  # The null is symmetric.
          for fpr in TPR_FPRS
      })


def all_iterates_report(seen: ArrayLike, unseen: ArrayLike, delta: float,
                        alpha: float = 0.05, dim: int | None = None,
                        threshold_strategy: ThresholdStrategy = 'all',
                        bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                        seed: int = 0) -> PrivacyReport:
  """Report for the all-iterates threat model (Algorithm 3 + empirical eps_lo).

  `seed` makes the bootstrap (seen and unseen resampled independently) and
  the 'split' halves of eps_lo reproducible.
  """
  seen = _check_cosines('seen', seen)
  unseen = _check_cosines('unseen', unseen)
  delta = _check_delta(delta)
  resamples = _check_resamples(bootstrap_resamples)
  mu_seen, std_seen = _fit(seen, 'seen')
  mu_unseen, std_unseen = _fit(unseen, 'unseen')
  epsilon_est = epsilon_from_seen_unseen(seen, unseen, delta)
  rng = np.random.default_rng(seed)
  resampled = _bootstrap_epsilons(
      [attack_metrics.bootstrap_fits(seen, resamples, rng),
       attack_metrics.bootstrap_fits(unseen, resamples, rng)],
      lambda s, u: epsilon_two_gaussians(u[0], u[1], s[0], s[1], delta))
  mu = attack_metrics.gdp_mu(mu_seen, mu_unseen, std_unseen)
  return PrivacyReport(
      threat_model='all', dim=None if dim is None else _check_dim(dim),
      delta=delta, alpha=_check_alpha(alpha),
      num_seen=seen.size, num_unseen=unseen.size, seen_mean=mu_seen,
      seen_std=std_seen, null_mean=mu_unseen, null_std=std_unseen,
      epsilon_est=epsilon_est,
      epsilon_lo=epsilon_lower_bound(seen, unseen=unseen, delta=delta,
                                     alpha=alpha,
                                     threshold_strategy=threshold_strategy,
                                     seed=seed),
      anderson_seen=_anderson_or_none(seen),
      anderson_unseen=_anderson_or_none(unseen),
      epsilon_gdp=epsilon_of_gdp(mu, delta), gdp_mu=mu,
      epsilon_est_interval=attack_metrics.basic_bootstrap_interval(
          epsilon_est, resampled),
      auroc=attack_metrics.auroc_two_samples(seen, unseen),
      tpr_at_fpr={
          _fpr_key(fpr): attack_metrics.tpr_above(
              seen, attack_metrics.empirical_threshold(unseen, fpr))
          for fpr in TPR_FPRS
      })
