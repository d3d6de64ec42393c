"""The exact null distribution of a canary cosine (Theorems 3.1 and 3.2).

The cosine T between a uniformly random unit vector in R^d and any fixed
vector has (1 + T)/2 ~ Beta((d-1)/2, (d-1)/2) (Theorem 3.1), with mean 0,
variance exactly 1/d, and N(0, 1/d) as its limit (Theorem 3.2). Here are its
density, CDF, quantile function and log-survival function, accurate to about
1e-12 relative for d from 3 to 1e9 and far into tails that underflow double
precision, which the lower bound eps_lo (`lower_bound`) needs. numpy/scipy
only.
"""

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special
from scipy import stats

from one_shot_epe import validation

__all__ = ['DIM', 'null_cdf', 'null_gaussian_approximation', 'null_logsf',
           'null_pdf', 'null_ppf']

# The rule of a cosine's dimension d wherever the exact null applies: the
# law of Theorem 3.1 needs d >= 3.
DIM = validation.Int(3)


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


@validation.arguments(dim=DIM)
def null_logsf(tau: ArrayLike, dim: int) -> np.ndarray:
  """log P(T > tau) for the exact null cosine T (Theorem 3.1), accurate in the tails.

  (1 + T)/2 ~ Beta(a, a) with a = (d-1)/2, and T^2 ~ Beta(1/2, a). Near the
  centre (|tau| sqrt(d) <= 1) P(T > tau) = (1 -/+ I_{tau^2}(1/2, a))/2 has no
  cancellation; for larger tau the continued fraction of `_log_sf_upper` is
  used, and negative tau follow from P(T > tau) = 1 - P(T > -tau). Relative
  accuracy is about 1e-12 or better for d from 3 to 1e9, including tails far
  beyond double-precision underflow.

  Args:
    tau: Cosine(s), any shape; values beyond [-1, 1] give log 1 or log 0.
    dim: Dimension d of the model delta, >= 3.

  Returns:
    log P(T > tau), float64 with the shape of `tau` (-inf for tau >= 1).

  Raises:
    ValueError: `dim` is not an int >= 3.
  """
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


@validation.arguments(dim=DIM)
def null_pdf(tau: ArrayLike, dim: int) -> np.ndarray:
  """Density of the cosine between a uniform unit vector and a fixed vector.

  Theorem 3.1: f_d(tau) = Gamma(d/2) / (Gamma((d-1)/2) sqrt(pi)) (1-tau^2)^((d-3)/2)
  on [-1, 1].

  Args:
    tau: Cosine(s), any shape.
    dim: Dimension d of the model delta, >= 3.

  Returns:
    f_d(tau), float64 with the shape of `tau`; 0 where |tau| >= 1.

  Raises:
    ValueError: `dim` is not an int >= 3.
  """
  tau = np.asarray(tau, dtype=np.float64)
  log_norm = _log_gamma_ratio_half(0.5 * (dim - 1)) - 0.5 * math.log(math.pi)
  inside = np.abs(tau) < 1.0
  safe = np.where(inside, tau, 0.0)
  log_pdf = log_norm + 0.5 * (dim - 3) * np.log1p(-safe * safe)
  return np.where(inside, np.exp(log_pdf), 0.0)


@validation.arguments(dim=DIM)
def null_cdf(tau: ArrayLike, dim: int) -> np.ndarray:
  """P(T <= tau) for the exact null cosine, by symmetry P(T > -tau).

  Args:
    tau: Cosine(s), any shape.
    dim: Dimension d of the model delta, >= 3.

  Returns:
    P(T <= tau), float64 with the shape of `tau`.

  Raises:
    ValueError: `dim` is not an int >= 3.
  """
  return np.exp(null_logsf.unchecked(-np.asarray(tau, dtype=np.float64), dim))


@validation.arguments(dim=DIM)
def null_ppf(q: ArrayLike, dim: int) -> np.ndarray:
  """Quantile function of the exact null cosine.

  Starts from 2 B^{-1}(q) - 1 for the Beta((d-1)/2, (d-1)/2) law and polishes
  it with Newton steps on the accurate `null_cdf` (the incomplete-beta inverse
  alone loses about six digits at d = 1e9).

  Args:
    q: Probabilities in [0, 1], any shape.
    dim: Dimension d of the model delta, >= 3.

  Returns:
    The quantiles tau in [-1, 1], float64 with the shape of `q`.

  Raises:
    ValueError: `dim` is not an int >= 3, or a `q` is NaN or outside [0, 1].
  """
  q = np.asarray(q, dtype=np.float64)
  if np.any((q < 0.0) | (q > 1.0)) or np.any(np.isnan(q)):
    raise ValueError('q must lie in [0, 1].')
  a = 0.5 * (dim - 1)
  tau = 2.0 * special.betaincinv(a, a, q) - 1.0
  interior = (q > 0.0) & (q < 1.0)
  for _ in range(3):
    density = null_pdf.unchecked(tau, dim)
    step = np.where(interior & (density > 0),
                    (null_cdf.unchecked(tau, dim) - q) /
                    np.where(density > 0, density, 1.0),
                    0.0)
    tau = np.clip(tau - step, -1.0, 1.0)
  return tau


@validation.arguments(dim=DIM)
def null_gaussian_approximation(dim: int) -> stats.rv_continuous:
  """N(0, 1/d): the limit law of Theorem 3.2 (and the exact null's mean/variance).

  Args:
    dim: Dimension d of the model delta, >= 3.

  Returns:
    The frozen `scipy.stats.norm` with mean 0 and std 1/sqrt(d).

  Raises:
    ValueError: `dim` is not an int >= 3.
  """
  return stats.norm(loc=0.0, scale=1.0 / math.sqrt(dim))
