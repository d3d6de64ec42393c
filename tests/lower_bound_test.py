"""Tests of one_shot_epe.lower_bound (eps_lo, Section 5.1).

Truths used: the Jeffreys interval's Beta quantile in closed form, the paper's
Table 3 value, a brute-force sweep over thresholds, and Monte Carlo coverage
against the exact eps of the Gaussian mechanism.
"""

import math

import numpy as np
import pytest
from scipy import stats

from one_shot_epe import estimation as est
from one_shot_epe import lower_bound
from one_shot_epe import null_distribution


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
  got = lower_bound.epsilon_lower_bound(seen, unseen=unseen, delta=delta)
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
    lo = lower_bound.epsilon_lower_bound(cos, dim=dim, delta=delta)
    fnr = float(lower_bound.jeffreys_upper(999, 1000, 0.05))
    log_fpr = float(null_distribution.null_logsf(cos.max(), dim))
    top = max(math.log(1 - delta - math.exp(log_fpr)) - math.log(fnr),
              math.log(1 - delta - fnr) - log_fpr)
    assert lo > 0 and lo >= top * (1 - 1e-12)


def _sweep_bound(seen, threshold, delta, alpha, log_sf):
  """eps bound of the test "cosine > threshold", from its counts."""
  misses = int(np.sum(seen <= threshold))
  fnr = float(lower_bound.jeffreys_upper(misses, seen.size, alpha))
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
    log_sf = lambda t: float(null_distribution.null_logsf(t, dim))
  else:
    log_sf = lambda t: float(stats.norm.logsf(t / scale))
  grid = np.concatenate([
      np.linspace(seen.min() - scale, seen.max() + scale, 400),
      np.unique(seen) * (1 - 1e-12) - 1e-18])
  sweep = [_sweep_bound(seen, t, delta, alpha, log_sf) for t in grid]
  bound = lower_bound.epsilon_lower_bound(seen, dim=dim, delta=delta,
                                          alpha=alpha, null=null)
  assert all(bound >= value for value in sweep)
  assert bound == pytest.approx(max(max(sweep), 0.0), rel=1e-9)
  assert bound > 0


def test_lower_bound_counts_the_canary_at_the_threshold_as_detected():
  # Two seen cosines far out: "cosine >= the smaller" detects both (FNR
  # bound from 0 misses of 2), which "cosine > the smaller" would not.
  dim, delta = 10**4, 1e-5
  seen = np.array([0.05, 0.0501])
  fnr = float(lower_bound.jeffreys_upper(0, 2, 0.05))
  expected = math.log(1 - delta - fnr) - float(
      null_distribution.null_logsf(0.05, dim))
  got = lower_bound.epsilon_lower_bound(seen, dim=dim, delta=delta)
  assert got == pytest.approx(expected, rel=1e-12)


def test_exact_and_gaussian_null_agree_in_high_dimension():
  dim = 10**7
  rng = np.random.default_rng(4)
  cos = rng.normal(2 / math.sqrt(dim), 1 / math.sqrt(dim), 500)
  exact = lower_bound.epsilon_lower_bound(cos, dim=dim, delta=1e-6)
  approx = lower_bound.epsilon_lower_bound(cos, dim=dim, delta=1e-6,
                                           null='gaussian')
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
    lo = lower_bound.epsilon_lower_bound(cos, dim=dim, delta=delta,
                                         null='gaussian',
                                         threshold_strategy='split', seed=rep)
    violations += lo > true_eps
  assert violations / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_lower_bound_zero_without_signal():
  rng = np.random.default_rng(6)
  dim = 10**5
  null_cos = rng.standard_normal(400) / math.sqrt(dim)
  assert lower_bound.epsilon_lower_bound(null_cos, dim=dim, delta=1e-5,
                                         threshold_strategy='split') < 0.5


# ----------------------------------------------------------------------------
# Input validation.


@pytest.mark.parametrize('call,message', [
    (lambda: lower_bound.epsilon_lower_bound([0.1, 0.2], delta=1e-5),
     'exactly one'),
    (lambda: lower_bound.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                             alpha=0.7), 'alpha'),
    (lambda: lower_bound.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                             threshold_strategy='best'),
     'threshold_strategy'),
    (lambda: lower_bound.epsilon_lower_bound([0.1, 0.2], dim=10, delta=1e-5,
                                             null='student'), 'null'),
    (lambda: lower_bound.jeffreys_upper([3], 2, 0.05), 'failures'),
    (lambda: lower_bound.jeffreys_upper([1], 0, 0.05), 'trials'),
    (lambda: lower_bound.jeffreys_upper([1], 5, 1.5), 'alpha'),
])
def test_bad_input_raises_named_value_error(call, message):
  with pytest.raises(ValueError, match=message):
    call()
