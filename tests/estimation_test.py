"""Tests of stats.estimation and stats.hockey_stick against independent truths.

Truths used: dp_accounting's PLD accountant, direct numerical integration of the
hockey-stick divergence, high-precision mpmath evaluation, the Gaussian
mechanism simulated, scipy's Anderson-Darling test, and the paper's numbers.
"""

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from one_shot_epe.stats import estimation as est
from one_shot_epe.stats import hockey_stick


# ----------------------------------------------------------------------------
# Gaussian mechanism and two-Gaussian epsilon.


@pytest.mark.parametrize('sigma', [0.541, 1.54, 4.22, 20.0])
@pytest.mark.parametrize('delta', [1e-3, 1e-6, 1e-10])
def test_gaussian_epsilon_matches_dp_accounting_pld(sigma, delta):
  pld = dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=sigma, sensitivity=1.0,
      value_discretization_interval=1e-4)
  expected = pld.get_epsilon_for_delta(delta)
  assert est.gaussian_epsilon(sigma, delta) == pytest.approx(
      expected, rel=1e-3, abs=1e-4)


def test_gaussian_sigma_reproduces_table2_calibration():
  # Table 2 lists sigma = 4.22, 1.54, 0.541 for eps = 1, 3, 10 at delta = 1e-6.
  sigmas = [est.gaussian_sigma(eps, 1e-6) for eps in (1.0, 3.0, 10.0)]
  assert [float(f'{s:.3g}') for s in sigmas] == [4.22, 1.54, 0.541]
  for eps, sigma in zip((1.0, 3.0, 10.0), sigmas):
    assert est.gaussian_epsilon(sigma, 1e-6) == pytest.approx(eps, rel=1e-9)


def test_gaussian_epsilon_satisfies_balle_wang_equation():
  sigma, delta = 0.8, 1e-5
  eps = est.gaussian_epsilon(sigma, delta)
  norm = stats.norm
  achieved = (norm.cdf(0.5 / sigma - eps * sigma) -
              math.exp(eps) * norm.cdf(-0.5 / sigma - eps * sigma))
  assert achieved == pytest.approx(delta, rel=1e-8)


@pytest.mark.parametrize('gap,std', [(1.0, 1.0), (0.3, 0.1), (2e-3, 1e-3)])
def test_equal_variances_reduce_to_gaussian_mechanism(gap, std):
  for delta in (1e-3, 1e-6, 1e-12):
    assert est.epsilon_two_gaussians(0.0, std, gap, std, delta) == pytest.approx(
        est.gaussian_epsilon(std / gap, delta), rel=1e-9)


def _hockey_stick_by_quadrature(mu_p, std_p, mu_q, std_q, eps):
  """E_eps(P||Q) = integral of max(p - e^eps q, 0), by adaptive quadrature."""
  p, q = stats.norm(mu_p, std_p), stats.norm(mu_q, std_q)
  lo = min(mu_p - 40 * std_p, mu_q - 40 * std_q)
  hi = max(mu_p + 40 * std_p, mu_q + 40 * std_q)
  grid = np.linspace(lo, hi, 401)
  total = 0.0
  for a, b in zip(grid[:-1], grid[1:]):
    total += integrate.quad(
        lambda x: max(p.pdf(x) - math.exp(eps) * q.pdf(x), 0.0), a, b,
        epsabs=1e-16, epsrel=1e-10, limit=200)[0]
  return total


@pytest.mark.parametrize('mu0,std0,mu1,std1,delta', [
    (0.0, 1.0, 0.5, 0.7, 1e-3),
    (0.0, 1.0, 1.5, 1.8, 1e-4),
    (0.0, 1.0, 3.0, 0.4, 1e-5),
    (0.1, 0.2, 0.2, 0.25, 1e-3),
])
def test_unequal_variances_match_numerical_integration(mu0, std0, mu1, std1,
                                                       delta):
  eps = est.epsilon_two_gaussians(mu0, std0, mu1, std1, delta)
  forward = _hockey_stick_by_quadrature(mu0, std0, mu1, std1, eps)
  backward = _hockey_stick_by_quadrature(mu1, std1, mu0, std0, eps)
  # The binding direction reaches delta exactly; the other stays below it.
  assert max(forward, backward) == pytest.approx(delta, rel=1e-5)
  assert min(forward, backward) <= delta * (1 + 1e-6)


@pytest.mark.parametrize('mu_p,std_p,mu_q,std_q,eps', [
    (0.5, 0.7, 0.0, 1.0, 0.3),
    (0.0, 1.0, 0.5, 0.7, 1.0),
    (3.0, 0.4, 0.0, 1.0, 2.0),
    (1.0, 1.0, 0.0, 1.0, 0.0),
])
def test_log_hockey_stick_matches_numerical_integration(mu_p, std_p, mu_q,
                                                        std_q, eps):
  got = hockey_stick.log_hockey_stick(mu_p, std_p, mu_q, std_q, eps)
  assert math.exp(got) == pytest.approx(
      _hockey_stick_by_quadrature(mu_p, std_p, mu_q, std_q, eps), rel=1e-7)


def test_log_hockey_stick_of_the_gaussian_mechanism_far_in_the_tail():
  # Balle and Wang's delta(eps) of N(1, s^2) vs N(0, s^2) in mpmath, where
  # it is about e^-806, below the smallest double (and e^eps above the
  # largest).
  sigma, eps = 0.05, 1000.0
  with mpmath.workdps(60):
    exact = float(mpmath.log(
        mpmath.ncdf(0.5 / sigma - eps * sigma) -
        mpmath.e**eps * mpmath.ncdf(-0.5 / sigma - eps * sigma)))
  got = hockey_stick.log_hockey_stick(1.0, sigma, 0.0, sigma, eps)
  assert got == pytest.approx(exact, rel=1e-9)
  assert hockey_stick.log_diff(math.log(3.0), math.log(1.0)) == pytest.approx(
      math.log(2.0), rel=1e-15)
  assert hockey_stick.log_diff(0.0, -1e-300) == pytest.approx(
      math.log(1e-300), rel=1e-12)
  assert hockey_stick.log_diff(1.0, 1.0) == -math.inf


def test_symmetry_and_affine_invariance():
  base = est.epsilon_two_gaussians(0.0, 1.0, 0.8, 0.6, 1e-6)
  assert est.epsilon_two_gaussians(0.8, 0.6, 0.0, 1.0, 1e-6) == pytest.approx(
      base, rel=1e-12)
  shifted = est.epsilon_two_gaussians(5.0, 3.0, 5.0 + 2.4, 1.8, 1e-6)
  assert shifted == pytest.approx(base, rel=1e-9)
  mirrored = est.epsilon_two_gaussians(0.0, 1.0, -0.8, 0.6, 1e-6)
  assert mirrored == pytest.approx(base, rel=1e-12)


def test_monotone_in_mean_gap_and_delta():
  gaps = np.linspace(0.05, 6.0, 25)
  eps = [est.epsilon_two_gaussians(0.0, 1.0, g, 1.3, 1e-6) for g in gaps]
  assert np.all(np.diff(eps) > 0)
  deltas = np.logspace(-12, -1, 12)
  eps = [est.epsilon_two_gaussians(0.0, 1.0, 2.0, 0.9, d) for d in deltas]
  assert np.all(np.diff(eps) < 0)


def test_zero_when_distributions_already_close():
  assert est.epsilon_two_gaussians(0.0, 1.0, 0.0, 1.0, 1e-6) == 0.0
  # Total variation of N(0,1) vs N(0.01,1) is ~0.004 < delta = 0.01.
  assert est.epsilon_two_gaussians(0.0, 1.0, 0.01, 1.0, 0.01) == 0.0


def _mp_gaussian_epsilon(gap_over_std, delta):
  """Balle-Wang equation solved by bisection in 60-digit arithmetic."""
  mpmath.mp.dps = 60
  g = mpmath.mpf(gap_over_std)
  log_delta = mpmath.log(mpmath.mpf(delta))

  def excess(e):  # Decreasing in e.
    value = (mpmath.ncdf(g / 2 - e / g) -
             mpmath.exp(e) * mpmath.ncdf(-g / 2 - e / g))
    return mpmath.log(value) - log_delta if value > 0 else -mpmath.inf

  lo, hi = mpmath.mpf(0), g * g
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
  return float((lo + hi) / 2)


@pytest.mark.parametrize('gap,delta', [(300.0, 1e-6), (320.0, 1e-12),
                                       (30.0, 1e-12), (450.0, 1e-9)])
def test_large_epsilon_accurate_in_log_space(gap, delta):
  # eps of order 1e4 to 1e5, as for the paper's eps_est-all = 45 800 and 51 300.
  expected = _mp_gaussian_epsilon(gap, delta)
  got = est.epsilon_two_gaussians(0.0, 1e-3, gap * 1e-3, 1e-3, delta)
  assert got == pytest.approx(expected, rel=1e-9)


def test_large_epsilon_unequal_variance_is_finite_and_ordered():
  narrow = est.epsilon_two_gaussians(0.0, 1.0, 300.0, 0.5, 1e-6)
  wide = est.epsilon_two_gaussians(0.0, 1.0, 300.0, 1.0, 1e-6)
  assert math.isfinite(narrow) and narrow > 4e4
  assert wide == pytest.approx(_mp_gaussian_epsilon(300.0, 1e-6), rel=1e-9)


# ----------------------------------------------------------------------------
# Algorithms 1-3.


def test_final_cosines_estimate_recovers_gaussian_mechanism_epsilon():
  # Cosines distributed as Theorem 3.3's limit N(1/(sigma sqrt d), 1/d). With
  # the variance fixed at 1/d only the mean is estimated, and eps_est is
  # centred on the Gaussian mechanism's eps within sampling error.
  dim, sigma, delta, reps = 10**6, 1.54, 1e-6, 40
  rng = np.random.default_rng(1)
  values = [
      est.epsilon_from_final_cosines(
          rng.normal(1 / sigma, 1.0, 1000) / math.sqrt(dim), dim, delta,
          variance='null') for _ in range(reps)
  ]
  truth = est.gaussian_epsilon(sigma, delta)
  assert abs(np.mean(values) - truth) < 4 * np.std(values) / math.sqrt(reps)
  assert np.std(values) == pytest.approx(0.165, abs=0.06)


def test_null_variance_estimate_is_the_gaussian_mechanism_of_the_mean():
  # N(0, 1/d) vs N(m, 1/d) is the Gaussian mechanism with sensitivity 1 and
  # noise 1/(sqrt(d) m) after scaling by sqrt(d) (Balle & Wang 2018).
  dim, delta = 10**6, 1e-6
  cosines = np.random.default_rng(13).normal(1.2e-3, 1e-3, size=1000)
  expected = est.gaussian_epsilon(1 / (math.sqrt(dim) * cosines.mean()), delta)
  assert est.epsilon_from_final_cosines(
      cosines, dim, delta, variance='null') == pytest.approx(expected, rel=1e-8)


def test_fitted_variance_estimate_is_consistent_but_noisy_at_small_k():
  dim, sigma, delta = 10**6, 1.54, 1e-6
  truth = est.gaussian_epsilon(sigma, delta)
  rng = np.random.default_rng(2)
  # Many canaries: sigma_hat is precise and the fitted estimate is close.
  big = rng.normal(1 / sigma, 1.0, 400_000) / math.sqrt(dim)
  assert est.epsilon_from_final_cosines(big, dim, delta) == pytest.approx(
      truth, abs=0.1)
  # 1000 canaries: the max over both directions is at least the
  # equal-variance value, so noise in sigma_hat only pushes eps up.
  small = [rng.normal(1 / sigma, 1.0, 1000) / math.sqrt(dim) for _ in range(30)]
  fitted = [est.epsilon_from_final_cosines(c, dim, delta) for c in small]
  mean_only = [
      est.epsilon_two_gaussians(0, 1, np.mean(c) * math.sqrt(dim), 1, delta)
      for c in small
  ]
  assert all(f >= m - 1e-9 for f, m in zip(fitted, mean_only))
  assert np.mean(fitted) > truth + 0.15


def test_seen_unseen_estimate_uses_both_fits():
  seen = np.linspace(-1, 1, 101) * 0.01 + 0.05
  unseen = np.linspace(-1, 1, 101) * 0.01
  expected = est.epsilon_two_gaussians(
      float(np.mean(unseen)), float(np.std(unseen)), float(np.mean(seen)),
      float(np.std(seen)), 1e-5)
  assert est.epsilon_from_seen_unseen(seen, unseen, 1e-5) == expected
  assert expected > 5


# ----------------------------------------------------------------------------
# Appendix B: Anderson-Darling.


def test_anderson_darling_matches_scipy():
  rng = np.random.default_rng(7)
  for sample in (rng.normal(size=1000), rng.exponential(size=300)):
    assert est.anderson_darling(sample) == pytest.approx(
        stats.anderson(sample, 'norm').statistic, rel=1e-10)


# ----------------------------------------------------------------------------
# Input validation.


@pytest.mark.parametrize('call,message', [
    (lambda: est.epsilon_two_gaussians(0, 1, 1, 1, 0.0), 'delta'),
    (lambda: est.epsilon_two_gaussians(0, 1, 1, 1, 1.0), 'delta'),
    (lambda: est.epsilon_two_gaussians(0, 0, 1, 1, 1e-5), 'std0'),
    (lambda: est.epsilon_two_gaussians(0, 1, 1, -1, 1e-5), 'std1'),
    (lambda: est.epsilon_two_gaussians(float('nan'), 1, 1, 1, 1e-5), 'mu0'),
    (lambda: est.epsilon_two_gaussians(0, 1, float('inf'), 1, 1e-5), 'mu1'),
    (lambda: est.gaussian_epsilon(0.0, 1e-5), 'sigma'),
    (lambda: est.gaussian_sigma(-1.0, 1e-5), 'epsilon'),
    (lambda: est.epsilon_from_final_cosines([], 100, 1e-5), 'cosines'),
    (lambda: est.epsilon_from_final_cosines([0.1, float('nan')], 100, 1e-5),
     'NaN'),
    (lambda: est.epsilon_from_final_cosines([0.1, 2.0], 100, 1e-5), r'\[-1, 1\]'),
    (lambda: est.epsilon_from_final_cosines([0.1, 0.1], 100, 1e-5), 'spread'),
    (lambda: est.epsilon_from_final_cosines([[0.1, 0.2]], 100, 1e-5), '1-D'),
    (lambda: est.epsilon_from_seen_unseen([0.1, 0.2], [0.3], 1e-5), 'unseen'),
    (lambda: est.anderson_darling([1.0, 2.0]), 'sample'),
    (lambda: est.epsilon_two_gaussians(0, 1e-9, 1, 1e-9, 1e-6),
     'too far apart'),
    (lambda: est.epsilon_from_final_cosines([0.1, 0.2], 100, 1e-5,
                                            variance='pooled'), 'variance'),
])
def test_bad_input_raises_named_value_error(call, message):
  with pytest.raises(ValueError, match=message):
    call()
