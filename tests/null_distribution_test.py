"""Tests of one_shot_epe.stats.null_distribution (Theorems 3.1 and 3.2).

Truths used: Monte Carlo samples of uniform unit vectors, 30-digit mpmath
quadrature of the Theorem 3.1 density, scipy's numerical integration, and the
exact variance 1/d.
"""

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from one_shot_epe.stats import null_distribution


# ----------------------------------------------------------------------------
# The null distribution (Theorems 3.1 and 3.2).


def _uniform_sphere_first_coordinate(dim, n, rng):
  out = np.empty(n)
  chunk = max(1, 2_000_000 // dim)
  for start in range(0, n, chunk):
    block = rng.standard_normal((min(chunk, n - start), dim))
    out[start:start + block.shape[0]] = block[:, 0] / np.linalg.norm(block,
                                                                      axis=1)
  return out


@pytest.mark.parametrize('dim', [5, 50, 5000])
def test_exact_null_cdf_matches_monte_carlo(dim):
  rng = np.random.default_rng(dim)
  samples = _uniform_sphere_first_coordinate(dim, 20000, rng)
  result = stats.kstest(samples, lambda t: null_distribution.null_cdf(t, dim))
  assert result.pvalue > 1e-3


def test_gaussian_approximation_is_rejected_at_small_dim():
  # At d = 5 the N(0, 1/d) law is visibly wrong: a test that could not tell
  # the two apart would make the previous test meaningless.
  rng = np.random.default_rng(0)
  samples = _uniform_sphere_first_coordinate(5, 20000, rng)
  approx = null_distribution.null_gaussian_approximation(5)
  assert stats.kstest(samples, approx.cdf).pvalue < 1e-6


def _mp_null_logsf(tau, dim):
  """log P(T > tau) by 30-digit quadrature of the Theorem 3.1 density."""
  mpmath.mp.dps = 30
  tau, d = mpmath.mpf(tau), mpmath.mpf(dim)
  if tau == 0:
    return mpmath.log(mpmath.mpf(1) / 2)
  if tau < 0:
    return mpmath.log(1 - mpmath.exp(_mp_null_logsf(-tau, dim)))
  log_norm = (mpmath.loggamma(d / 2) - mpmath.loggamma((d - 1) / 2) -
              mpmath.log(mpmath.pi) / 2)
  width = 1 / max((d - 3) * tau / (1 - tau * tau), mpmath.sqrt(d))
  points = [tau + width * k for k in (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)]
  points = [p for p in points if p < 1] + [mpmath.mpf(1)]
  return mpmath.log(mpmath.quad(
      lambda u: mpmath.exp(log_norm + (d - 3) / 2 * mpmath.log1p(-u * u)),
      points))


@pytest.mark.parametrize('dim', [3, 4, 50, 1000, 10**6, 10**9])
def test_null_logsf_matches_high_precision_quadrature(dim):
  for z in (-3.0, -0.7, 0.2, 0.99, 1.01, 3.0, 20.0, 200.0):
    tau = z / math.sqrt(dim)
    if abs(tau) >= 1:
      continue
    expected = float(_mp_null_logsf(tau, dim))
    assert float(null_distribution.null_logsf(tau, dim)) == pytest.approx(
        expected, rel=1e-9)


def test_null_logsf_far_tail_beyond_underflow():
  # At d = 1e6 a cosine of 0.3 has survival probability ~ exp(-47 000).
  value = float(null_distribution.null_logsf(0.3, 10**6))
  assert value == pytest.approx(float(_mp_null_logsf(0.3, 10**6)), rel=1e-9)
  assert value < -4e4


@pytest.mark.parametrize('dim', [3, 7, 1000, 10**9])
def test_null_pdf_integrates_to_cdf_and_ppf_inverts_cdf(dim):
  lo, hi = -0.4, 0.6
  if dim > 10:
    lo, hi = -2 / math.sqrt(dim), 1.5 / math.sqrt(dim)
  mass = integrate.quad(lambda t: float(null_distribution.null_pdf(t, dim)), lo,
                        hi, epsabs=0, epsrel=1e-10)[0]
  assert mass == pytest.approx(
      float(
          null_distribution.null_cdf(hi, dim) -
          null_distribution.null_cdf(lo, dim)), rel=1e-8)
  qs = np.array([1e-6, 0.01, 0.3, 0.5, 0.8, 0.999])
  np.testing.assert_allclose(
      null_distribution.null_cdf(null_distribution.null_ppf(qs, dim), dim), qs,
      rtol=1e-8)


def test_gaussian_approximation_converges_with_dim():
  errors = []
  for dim in (10, 100, 1000, 10000, 100000):
    tau = np.linspace(-4, 4, 161) / math.sqrt(dim)
    approx = stats.norm.cdf(tau * math.sqrt(dim))
    errors.append(np.max(np.abs(null_distribution.null_cdf(tau, dim) - approx)))
  assert np.all(np.diff(errors) < 0)
  assert errors[-1] < 1e-5
  # The exact null's variance is exactly 1/d (E[T^2] = 1/d for a unit vector).
  var = integrate.quad(
      lambda t: t * t * float(null_distribution.null_pdf(t, 40)), -1, 1)[0]
  assert var == pytest.approx(1 / 40, rel=1e-10)


# ----------------------------------------------------------------------------
# Input validation.


@pytest.mark.parametrize('call,message', [
    (lambda: null_distribution.null_cdf(0.1, 2), 'dim'),
    (lambda: null_distribution.null_logsf(0.1, 10.5), 'dim'),
    (lambda: null_distribution.null_ppf(1.5, 10), 'q'),
])
def test_bad_input_raises_named_value_error(call, message):
  with pytest.raises(ValueError, match=message):
    call()
