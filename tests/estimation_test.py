"""Tests of one_shot_epe.estimation against independent truths.

Truths used: dp_accounting's PLD accountant, direct numerical integration of the
hockey-stick divergence, high-precision mpmath evaluation, Monte Carlo samples
of uniform unit vectors, scipy's Anderson-Darling test, and the paper's numbers.
"""

import json
import math
import subprocess
import sys

import dp_accounting
import mpmath
import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from one_shot_epe import estimation as est


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
  result = stats.kstest(samples, lambda t: est.null_cdf(t, dim))
  assert result.pvalue > 1e-3


def test_gaussian_approximation_is_rejected_at_small_dim():
  # At d = 5 the N(0, 1/d) law is visibly wrong: a test that could not tell
  # the two apart would make the previous test meaningless.
  rng = np.random.default_rng(0)
  samples = _uniform_sphere_first_coordinate(5, 20000, rng)
  approx = est.null_gaussian_approximation(5)
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
    assert float(est.null_logsf(tau, dim)) == pytest.approx(expected, rel=1e-9)


def test_null_logsf_far_tail_beyond_underflow():
  # At d = 1e6 a cosine of 0.3 has survival probability ~ exp(-47 000).
  value = float(est.null_logsf(0.3, 10**6))
  assert value == pytest.approx(float(_mp_null_logsf(0.3, 10**6)), rel=1e-9)
  assert value < -4e4


@pytest.mark.parametrize('dim', [3, 7, 1000, 10**9])
def test_null_pdf_integrates_to_cdf_and_ppf_inverts_cdf(dim):
  lo, hi = -0.4, 0.6
  if dim > 10:
    lo, hi = -2 / math.sqrt(dim), 1.5 / math.sqrt(dim)
  mass = integrate.quad(lambda t: float(est.null_pdf(t, dim)), lo, hi,
                        epsabs=0, epsrel=1e-10)[0]
  assert mass == pytest.approx(
      float(est.null_cdf(hi, dim) - est.null_cdf(lo, dim)), rel=1e-8)
  qs = np.array([1e-6, 0.01, 0.3, 0.5, 0.8, 0.999])
  np.testing.assert_allclose(est.null_cdf(est.null_ppf(qs, dim), dim), qs,
                             rtol=1e-8)


def test_gaussian_approximation_converges_with_dim():
  errors = []
  for dim in (10, 100, 1000, 10000, 100000):
    tau = np.linspace(-4, 4, 161) / math.sqrt(dim)
    approx = stats.norm.cdf(tau * math.sqrt(dim))
    errors.append(np.max(np.abs(est.null_cdf(tau, dim) - approx)))
  assert np.all(np.diff(errors) < 0)
  assert errors[-1] < 1e-5
  # The exact null's variance is exactly 1/d (E[T^2] = 1/d for a unit vector).
  var = integrate.quad(lambda t: t * t * float(est.null_pdf(t, 40)), -1, 1)[0]
  assert var == pytest.approx(1 / 40, rel=1e-10)


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
# eps_lo.


def test_perfect_separation_bound_matches_jeffreys_closed_form():
  # 1000 seen above 1000 unseen: at the best threshold both error counts are 0,
  # so eps_lo = log((1 - delta - u)/u) with u the 95% Jeffreys upper bound for
  # 0 of 1000, Beta(0.5, 1000.5).ppf(0.95). The paper's Table 3 reports 6.240.
  rng = np.random.default_rng(0)
  seen, unseen = rng.uniform(0.5, 0.6, 1000), rng.uniform(0.0, 0.1, 1000)
  delta = 341_000**-1.1
  u = stats.beta(0.5, 1000.5).ppf(0.95)
  expected = math.log((1 - delta - u) / u)
  got = est.epsilon_lower_bound(seen, unseen=unseen, delta=delta)
  assert got == pytest.approx(expected, rel=1e-9)
  assert got == pytest.approx(6.240, abs=0.02)


def test_lower_bound_positive_with_signal_and_uses_the_top_cosine():
  # At optimal thresholds the canary at the threshold counts as detected, so
  # the single highest cosine is a usable test ("cosine >= max"): FNR bound
  # from 999 misses of 1000, FPR the null's mass above the maximum. (Its
  # confidence is nominal, as for every threshold picked on the data; the
  # bound may then exceed eps_est, which is not a bound.)
  dim, delta = 10**6, 1e-6
  rng = np.random.default_rng(3)
  for sigma in (0.6, 1.0, 2.0):
    cos = rng.normal(1 / (sigma * math.sqrt(dim)), 1 / math.sqrt(dim), 1000)
    lo = est.epsilon_lower_bound(cos, dim=dim, delta=delta)
    fnr = float(est.jeffreys_upper(999, 1000, 0.05))
    log_fpr = float(est.null_logsf(cos.max(), dim))
    top = max(math.log(1 - delta - math.exp(log_fpr)) - math.log(fnr),
              math.log(1 - delta - fnr) - log_fpr)
    assert lo > 0 and lo >= top * (1 - 1e-12)


def _sweep_bound(seen, threshold, delta, alpha, log_sf):
  """eps bound of the test "cosine > threshold", from its counts."""
  misses = int(np.sum(seen <= threshold))
  fnr = float(est.jeffreys_upper(misses, seen.size, alpha))
  fpr = math.exp(log_sf(threshold))
  terms = []
  if 1 - delta - fpr > 0 and fnr > 0:
    terms.append(math.log(1 - delta - fpr) - math.log(fnr))
  if 1 - delta - fnr > 0 and fpr > 0:
    terms.append(math.log(1 - delta - fnr) - log_sf(threshold))
  return max(terms, default=-math.inf)


@pytest.mark.parametrize('null', ['exact', 'gaussian'])
@pytest.mark.parametrize('seed,size,shift,delta', [
    (0, 40, 2.0, 1e-6), (1, 200, 1.0, 1e-5), (2, 25, 3.5, 1e-8),
    (3, 100, 0.5, 1e-3)])
def test_lower_bound_is_the_supremum_over_a_threshold_sweep(null, seed, size,
                                                            shift, delta):
  # Brute force: "cosine > t" on a fine grid of t plus points just below
  # every seen cosine, each evaluated from its own counts and the closed-form
  # null. The optimal-threshold bound is never below a grid value and equals
  # the sweep's maximum.
  dim, alpha = 10**6, 0.05
  scale = 1 / math.sqrt(dim)
  rng = np.random.default_rng(seed)
  seen = np.round(rng.normal(shift, 1.2, size), 2) * scale  # Some ties.
  if null == 'exact':
    log_sf = lambda t: float(est.null_logsf(t, dim))
  else:
    log_sf = lambda t: float(stats.norm.logsf(t / scale))
  grid = np.concatenate([
      np.linspace(seen.min() - scale, seen.max() + scale, 400),
      np.unique(seen) * (1 - 1e-12) - 1e-18])
  sweep = [_sweep_bound(seen, t, delta, alpha, log_sf) for t in grid]
  bound = est.epsilon_lower_bound(seen, dim=dim, delta=delta, alpha=alpha,
                                  null=null)
  assert all(bound >= value for value in sweep)
  assert bound == pytest.approx(max(max(sweep), 0.0), rel=1e-9)
  assert bound > 0


def test_lower_bound_counts_the_canary_at_the_threshold_as_detected():
  # Two seen cosines far out: "cosine >= the smaller" detects both (FNR
  # bound from 0 misses of 2), which "cosine > the smaller" would not.
  dim, delta = 10**4, 1e-5
  seen = np.array([0.05, 0.0501])
  fnr = float(est.jeffreys_upper(0, 2, 0.05))
  expected = math.log(1 - delta - fnr) - float(est.null_logsf(0.05, dim))
  got = est.epsilon_lower_bound(seen, dim=dim, delta=delta)
  assert got == pytest.approx(expected, rel=1e-12)


def test_exact_and_gaussian_null_agree_in_high_dimension():
  dim = 10**7
  rng = np.random.default_rng(4)
  cos = rng.normal(2 / math.sqrt(dim), 1 / math.sqrt(dim), 500)
  exact = est.epsilon_lower_bound(cos, dim=dim, delta=1e-6)
  approx = est.epsilon_lower_bound(cos, dim=dim, delta=1e-6, null='gaussian')
  assert exact == pytest.approx(approx, rel=1e-3)


def test_split_lower_bound_coverage_by_monte_carlo():
  # Seen cosines ~ N(mu, 1/d) against the exact Gaussian null of the same
  # variance: the true eps is the Gaussian mechanism's at sigma = 1/(mu sqrt d).
  # A 95% lower bound may exceed it in at most ~5% of repetitions; with 300
  # repetitions, more than 5% + 3 standard errors (~8.8%) would be a failure.
  # Only 'split' has this guarantee: 'all' picks the threshold on the same
  # data (nominal confidence; here it exceeds the truth in 28 of 300 runs).
  dim, delta, mu_scaled = 10**6, 1e-5, 1.5
  true_eps = est.gaussian_epsilon(1 / mu_scaled, delta)
  rng = np.random.default_rng(5)
  violations = 0
  reps = 300
  for rep in range(reps):
    cos = rng.normal(mu_scaled, 1.0, 200) / math.sqrt(dim)
    lo = est.epsilon_lower_bound(cos, dim=dim, delta=delta, null='gaussian',
                                 threshold_strategy='split', seed=rep)
    violations += lo > true_eps
  assert violations / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_lower_bound_zero_without_signal():
  rng = np.random.default_rng(6)
  dim = 10**5
  null_cos = rng.standard_normal(400) / math.sqrt(dim)
  assert est.epsilon_lower_bound(null_cos, dim=dim, delta=1e-5,
                                 threshold_strategy='split') < 0.5


# ----------------------------------------------------------------------------
# Anderson-Darling and reports.


def test_anderson_darling_matches_scipy():
  rng = np.random.default_rng(7)
  for sample in (rng.normal(size=1000), rng.exponential(size=300)):
    assert est.anderson_darling(sample) == pytest.approx(
        stats.anderson(sample, 'norm').statistic, rel=1e-10)


def test_reports_bundle_estimates_and_serialise():
  rng = np.random.default_rng(8)
  dim = 10**6
  cos = rng.normal(1e-3, 1e-3, 1000)
  report = est.final_model_report(cos, dim, 1e-6)
  assert report.epsilon_est == est.epsilon_from_final_cosines(cos, dim, 1e-6)
  assert report.epsilon_lo == est.epsilon_lower_bound(cos, dim=dim, delta=1e-6)
  assert report.null_std == pytest.approx(1e-3)
  assert json.loads(report.to_json())['epsilon_est'] == report.epsilon_est
  unseen = rng.normal(0, 1e-3, 1000)
  all_report = est.all_iterates_report(cos, unseen, 1e-6)
  assert all_report.epsilon_est == est.epsilon_from_seen_unseen(cos, unseen, 1e-6)
  assert all_report.anderson_unseen == pytest.approx(
      stats.anderson(unseen).statistic)


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
    (lambda: est.null_cdf(0.1, 2), 'dim'),
    (lambda: est.null_logsf(0.1, 10.5), 'dim'),
    (lambda: est.null_ppf(1.5, 10), 'q'),
    (lambda: est.epsilon_from_final_cosines([], 100, 1e-5), 'cosines'),
    (lambda: est.epsilon_from_final_cosines([0.1, float('nan')], 100, 1e-5),
     'NaN'),
    (lambda: est.epsilon_from_final_cosines([0.1, 2.0], 100, 1e-5), r'\[-1, 1\]'),
    (lambda: est.epsilon_from_final_cosines([0.1, 0.1], 100, 1e-5), 'spread'),
    (lambda: est.epsilon_from_final_cosines([[0.1, 0.2]], 100, 1e-5), '1-D'),
    (lambda: est.epsilon_from_seen_unseen([0.1, 0.2], [0.3], 1e-5), 'unseen'),
    (lambda: est.epsilon_lower_bound([0.1, 0.2], delta=1e-5), 'exactly one'),
    (lambda: est.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                     alpha=0.7), 'alpha'),
    (lambda: est.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                     threshold_strategy='best'),
     'threshold_strategy'),
    (lambda: est.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                     null='student'), 'null'),
    (lambda: est.anderson_darling([1.0, 2.0]), 'sample'),
    (lambda: est.jeffreys_upper([3], 2, 0.05), 'failures'),
    (lambda: est.jeffreys_upper([1], 0, 0.05), 'trials'),
    (lambda: est.jeffreys_upper([1], 5, 1.5), 'alpha'),
    (lambda: est.epsilon_two_gaussians(0, 1e-9, 1, 1e-9, 1e-6),
     'too far apart'),
    (lambda: est.epsilon_from_final_cosines([0.1, 0.2], 100, 1e-5,
                                            variance='pooled'), 'variance'),
])
def test_bad_input_raises_named_value_error(call, message):
  with pytest.raises(ValueError, match=message):
    call()


def test_estimation_module_does_not_import_tensorflow():
  code = ('import sys; import one_shot_epe.estimation; '
          'print(any(m.split(".")[0] in ("tensorflow", "tensorflow_federated") '
          'for m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, check=True, timeout=120)
  assert out.stdout.strip() == 'False'
