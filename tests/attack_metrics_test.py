"""Tests of one_shot_epe.stats.attack_metrics and of the robust report fields.

Truths: brute-force pairwise counts, the closed-form AUROC and TPR of two
Gaussians, binomial sampling error, and exact simulations of the Gaussian
mechanism of Table 2 (`gaussian_simulation.simulate_cosines`, 'gram').
"""

import math

import numpy as np
import pytest
from scipy import stats

from one_shot_epe.stats import attack_metrics as am
from one_shot_epe.stats import estimation as est
from one_shot_epe.stats import gaussian_simulation
from one_shot_epe.stats import null_distribution
from one_shot_epe.reporting import privacy_report

_TABLE2_DIM, _TABLE2_K, _TABLE2_DELTA = 10**6, 1000, 1e-6


def test_auroc_two_samples_equals_brute_force_pair_count():
  rng = np.random.default_rng(0)
  # Rounded values so that ties between seen and unseen occur.
  seen = np.round(rng.normal(0.5, 1.0, 300), 1)
  unseen = np.round(rng.normal(0.0, 1.0, 200), 1)
  wins = (seen[:, None] > unseen[None, :]).sum()
  ties = (seen[:, None] == unseen[None, :]).sum()
  assert ties > 0
  expected = (wins + 0.5 * ties) / (seen.size * unseen.size)
  assert am.auroc_two_samples(seen, unseen) == pytest.approx(expected,
                                                             rel=1e-12)


def test_auroc_two_samples_matches_two_gaussian_closed_form():
  # AUROC of N(m1, s1^2) vs N(m0, s0^2) is Phi((m1 - m0) / sqrt(s0^2 + s1^2)).
  rng = np.random.default_rng(1)
  seen, unseen = rng.normal(1.0, 2.0, 4000), rng.normal(0.0, 1.0, 4000)
  expected = stats.norm.cdf(1.0 / math.sqrt(5.0))
  # The U statistic's std is below sqrt((1/k + 1/m) / 12) < 0.0065.
  assert am.auroc_two_samples(seen, unseen) == pytest.approx(expected,
                                                             abs=0.026)


def test_final_report_auroc_matches_closed_form_against_the_null():
  dim, n = 10**5, 20000
  rng = np.random.default_rng(2)
  seen = rng.normal(1.5, 1.2, n) / math.sqrt(dim)
  report = privacy_report.final_model_report(seen, dim, 1e-6,
                                             bootstrap_resamples=20)
  # Null N(0, 1/d) (exact to ~1/d here); seen N(1.5, 1.44)/sqrt(d).
  expected = stats.norm.cdf(1.5 / math.sqrt(1.0 + 1.44))
  assert report.auroc == pytest.approx(expected, abs=4 * math.sqrt(1 / (12 * n)))
  # And exactly the mean of the exact null's CDF at the seen cosines.
  assert report.auroc == pytest.approx(
      float(np.mean(null_distribution.null_cdf(seen, dim))), rel=1e-12)


@pytest.mark.parametrize('fpr', [0.01, 0.001])
def test_final_report_tpr_matches_closed_form(fpr):
  dim, n, shift = 10**6, 50000, 3.0
  rng = np.random.default_rng(3)
  seen = rng.normal(shift, 1.0, n) / math.sqrt(dim)
  report = privacy_report.final_model_report(seen, dim, 1e-6,
                                             bootstrap_resamples=20)
  # Threshold z_{1-fpr}/sqrt(d) of N(0, 1/d); TPR = Phi(shift - z_{1-fpr}).
  expected = stats.norm.sf(stats.norm.isf(fpr) - shift)
  binomial_std = math.sqrt(expected * (1 - expected) / n)
  assert report.tpr_at_fpr[f'{fpr:g}'] == pytest.approx(
      expected, abs=4 * binomial_std + 1e-3)


@pytest.mark.parametrize('fpr', [0.01, 0.001])
def test_all_iterates_tpr_matches_closed_form(fpr):
  rng = np.random.default_rng(4)
  seen, unseen = rng.normal(3.0, 1.0, 10000), rng.normal(0.0, 1.0, 50000)
  report = privacy_report.all_iterates_report(seen / 100, unseen / 100, 1e-6,
                                              bootstrap_resamples=20)
  z = stats.norm.isf(fpr)
  expected = stats.norm.sf(z - 3.0)
  # Sampling error of the seen fraction plus that of the unseen quantile
  # (asymptotic std sqrt(fpr (1 - fpr) / m) / pdf(z), times dTPR/dz).
  quantile_std = math.sqrt(fpr * (1 - fpr) / 50000) / stats.norm.pdf(z)
  std = math.hypot(math.sqrt(expected * (1 - expected) / 10000),
                   stats.norm.pdf(z - 3.0) * quantile_std)
  assert report.tpr_at_fpr[f'{fpr:g}'] == pytest.approx(expected, abs=4 * std)


def test_empirical_threshold_is_the_largest_allowed_order_statistic():
  unseen = np.arange(1000.0)
  threshold = am.empirical_threshold(unseen, 0.01)
  assert threshold == 989.0 and np.sum(unseen > threshold) == 10
  # Fewer than 1/fpr values: the maximum.
  assert am.empirical_threshold(np.arange(50.0), 0.01) == 49.0
  # Brute force over thresholds for a random sample with ties.
  rng = np.random.default_rng(5)
  sample = np.round(rng.normal(size=300), 1)
  for fpr in (0.01, 0.05, 0.2):
    allowed = [v for v in np.sort(sample)
               if np.sum(sample > v) <= fpr * sample.size]
    assert am.empirical_threshold(sample, fpr) == min(allowed)


def test_tpr_counts_a_tie_with_the_threshold_as_a_miss():
  assert am.tpr_above([1.0, 2.0, 2.0, 3.0], 2.0) == 0.25


def test_gdp_estimate_is_the_null_variance_estimate_for_the_final_model():
  rng = np.random.default_rng(6)
  cosines = rng.normal(2.0, 1.0, 500) / math.sqrt(10**6)
  report = privacy_report.final_model_report(cosines, 10**6, 1e-6,
                                             bootstrap_resamples=20)
  assert report.gdp_mu == pytest.approx(np.mean(cosines) * 1000, rel=1e-12)
  assert report.epsilon_gdp == pytest.approx(
      est.epsilon_from_final_cosines(cosines, 10**6, 1e-6, variance='null'),
      rel=1e-9)


def test_gdp_estimate_recovers_table2_epsilon():
  # Table 2 setting at eps = 3: 30 exact simulations of Algorithm 1; the mean
  # GDP estimate must agree with 3 by a one-sample t-test at level 1e-3.
  sigma = est.gaussian_sigma(3.0, _TABLE2_DELTA)
  rng = np.random.default_rng(7)
  estimates = []
  for _ in range(30):
    cosines = gaussian_simulation.simulate_cosines(_TABLE2_DIM, _TABLE2_K, sigma,
                                                  rng)
    mu = am.gdp_mu(np.mean(cosines), 0.0, 1.0 / math.sqrt(_TABLE2_DIM))
    estimates.append(est.epsilon_of_gdp(mu, _TABLE2_DELTA))
  assert stats.ttest_1samp(estimates, 3.0).pvalue > 1e-3
  assert abs(np.mean(estimates) - 3.0) < 0.15


def test_all_iterates_gdp_estimate_recovers_gaussian_epsilon():
  rng = np.random.default_rng(8)
  seen, unseen = rng.normal(2.0, 0.5, 5000), rng.normal(0.0, 0.5, 5000)
  report = privacy_report.all_iterates_report(seen / 50, unseen / 50, 1e-5,
                                              bootstrap_resamples=20)
  # mu = 4. The mean gap's error is sqrt(2/5000) = 0.02 in null stds and
  # the null std's relative error sqrt(1/10000) = 0.01 moves mu by 0.04:
  # mu_hat has std ~0.045; allow 4 of them.
  assert report.gdp_mu == pytest.approx(4.0, abs=0.18)
  assert report.epsilon_gdp == pytest.approx(
      est.gaussian_epsilon(1.0 / report.gdp_mu, 1e-5), rel=1e-12)
  low, high = (est.gaussian_epsilon(1.0 / mu, 1e-5) for mu in (3.82, 4.18))
  assert low < report.epsilon_gdp < high


def test_epsilon_of_gdp_is_zero_without_shift():
  assert est.epsilon_of_gdp(0.0, 1e-5) == 0.0
  assert est.epsilon_of_gdp(-1.0, 1e-5) == 0.0


@pytest.mark.slow
def test_bootstrap_interval_covers_table2_epsilon():
  # 200 exact simulations of Table 2 at eps = 3: the headline estimate's
  # 95% interval must cover 3 in at least 90% of runs.
  sigma = est.gaussian_sigma(3.0, _TABLE2_DELTA)
  rng = np.random.default_rng(9)
  covered = 0
  for run in range(200):
    cosines = gaussian_simulation.simulate_cosines(_TABLE2_DIM, _TABLE2_K, sigma,
                                                  rng)
    low, high = privacy_report.final_model_report(cosines, _TABLE2_DIM,
                                                  _TABLE2_DELTA,
                                                  seed=run).epsilon_est_interval
    covered += low <= 3.0 <= high
  assert covered >= 180, covered


def test_percentile_interval_is_the_resamples_quantiles():
  resampled = np.linspace(1.0, 3.0, 401)  # Quantiles 1.05 and 2.95.
  assert am.percentile_bootstrap_interval(resampled) == pytest.approx(
      (1.05, 2.95), rel=1e-12)
  assert am.percentile_bootstrap_interval(resampled, 0.5) == pytest.approx(
      (1.5, 2.5), rel=1e-12)


def test_bootstrap_means_are_those_of_the_drawn_resamples():
  sample = np.array([1.0, 2.0, 4.0, 8.0])
  means = am.bootstrap_means(sample, 500, np.random.default_rng(10))
  # Same draws again, summarised one by one.
  indices = np.random.default_rng(10).integers(0, 4, size=(500, 4))
  np.testing.assert_allclose(means, sample[indices].mean(axis=1), rtol=1e-15)


def test_bootstrap_aurocs_are_those_of_the_drawn_resamples():
  seen, unseen = np.array([1.0, 3.0, 5.0]), np.array([0.0, 2.0, 4.0, 6.0])
  aurocs = am.bootstrap_aurocs(seen, unseen, 30, np.random.default_rng(12))
  rng = np.random.default_rng(12)
  for auroc in aurocs:
    s = seen[rng.integers(0, 3, 3)]
    u = unseen[rng.integers(0, 4, 4)]
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in s for b in u])
    assert auroc == pytest.approx(brute, rel=1e-12)


def test_gdp_mu_from_auroc_inverts_the_binormal_auroc():
  # mu-GDP's ROC has area Phi(mu / sqrt 2); simulated equal-variance
  # Gaussians recover mu; perfect separation is moved half a pair inwards.
  for mu in (0.0, 0.5, 2.0):
    auroc = stats.norm.cdf(mu / math.sqrt(2))
    assert am.gdp_mu_from_auroc(auroc, 10**6) == pytest.approx(mu, abs=1e-9)
  rng = np.random.default_rng(13)
  auroc = am.auroc_two_samples(rng.normal(1.5, 1, 4000), rng.normal(0, 1, 4000))
  assert am.gdp_mu_from_auroc(auroc, 4000**2) == pytest.approx(1.5, abs=0.06)
  top = am.gdp_mu_from_auroc(1.0, 2500)
  assert top == pytest.approx(math.sqrt(2) * stats.norm.ppf(1 - 1 / 5000))


def test_all_iterates_headline_does_not_run_away_on_maxima():
  # Maxima over 20 rounds, each canary inserted once at mu = 5 (a Gaussian
  # mechanism at sigma 1/5, as the CANIFE comparison's canaries): the unseen
  # maxima's spread is about half of one round's, so the mean-shift GDP eps
  # and the fitted eps overshoot the truth; the AUROC's eps cannot exceed it
  # beyond sampling error.
  rng = np.random.default_rng(14)
  delta, mu, rounds, size = 1e-5, 5.0, 20, 1000
  noise = rng.standard_normal((2 * size, rounds))
  noise[:size, 0] += mu
  maxima = noise.max(axis=1) / 1000
  report = privacy_report.all_iterates_report(maxima[:size], maxima[size:],
                                              delta, bootstrap_resamples=20)
  truth = est.gaussian_epsilon(1 / mu, delta)
  assert report.epsilon_gdp > 1.2 * truth
  assert report.epsilon_est_fitted > 2 * truth
  assert report.epsilon_est < truth


def test_reports_are_reproducible_and_seeded():
  rng = np.random.default_rng(11)
  seen, unseen = rng.normal(2, 1, 200) / 1e3, rng.normal(0, 1, 200) / 1e3
  first = privacy_report.all_iterates_report(seen, unseen, 1e-5, seed=3)
  assert first == privacy_report.all_iterates_report(seen, unseen, 1e-5, seed=3)
  other = privacy_report.all_iterates_report(seen, unseen, 1e-5, seed=4)
  assert other.epsilon_est_interval != first.epsilon_est_interval
  assert other.epsilon_est == first.epsilon_est


@pytest.mark.parametrize('call,error,message', [
    (lambda: am.auroc_against_cdf([0.5, 1.5]), ValueError, 'probabilities'),
    (lambda: am.empirical_threshold([1.0, 2.0], 1.0), ValueError, 'fpr'),
    (lambda: am.empirical_threshold([1.0, 2.0], '0.1'), TypeError, 'fpr'),
    (lambda: am.tpr_above([], 0.0), ValueError, 'seen'),
    (lambda: am.gdp_mu(1.0, 0.0, 0.0), ValueError, 'null_std'),
    (lambda: am.bootstrap_means([1.0, 2.0], 0, np.random.default_rng()),
     ValueError, 'resamples'),
    (lambda: am.bootstrap_means([1.0, 2.0], 2.5, np.random.default_rng()),
     TypeError, 'resamples'),
    (lambda: am.bootstrap_means([1.0, 2.0], 5, 0), TypeError, 'rng'),
    (lambda: am.bootstrap_aurocs([1.0, 2.0], [], 5, np.random.default_rng()),
     ValueError, 'unseen'),
    (lambda: am.percentile_bootstrap_interval([1.0], level=1.0), ValueError,
     'level'),
    (lambda: am.gdp_mu_from_auroc(1.5, 10), ValueError, 'auroc'),
    (lambda: am.gdp_mu_from_auroc(0.5, 0), ValueError, 'num_pairs'),
    (lambda: privacy_report.final_model_report(
        [0.1, 0.2], 100, 1e-5, bootstrap_resamples=5), ValueError,
     'bootstrap_resamples'),
    (lambda: privacy_report.final_model_report(
        [0.1, 0.2], 100, 1e-5, bootstrap_resamples=50.0), TypeError,
     'bootstrap_resamples'),
])
def test_bad_arguments_raise_named_errors(call, error, message):
  with pytest.raises(error, match=message):
    call()
