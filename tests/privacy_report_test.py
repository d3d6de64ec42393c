"""Tests of one_shot_epe.reporting.privacy_report: each field against the module it comes from.

The attack summaries (GDP, bootstrap interval, AUROC, TPR) are tested against
simulation in attack_metrics_test.py; the bounds' coverage in
lower_bound_test.py and one_run_test.py.
"""

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats

from one_shot_epe.stats import estimation as est
from one_shot_epe.stats import gaussian_simulation
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import null_distribution
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit
from one_shot_epe.reporting import privacy_report


def test_final_report_bundles_estimates_and_bounds_and_serialises():
  rng = np.random.default_rng(8)
  dim = 10**6
  cos = rng.normal(1e-3, 1e-3, 1000)
  unseen = rng.normal(0, 1e-3, 1000)
  report = privacy_report.final_model_report(cos, dim, 1e-6, unseen=unseen)
  assert report.epsilon_est == est.epsilon_from_final_cosines(
      cos, dim, 1e-6, variance='null')
  assert report.epsilon_est_fitted == est.epsilon_from_final_cosines(
      cos, dim, 1e-6)
  assert report.epsilon_lo == lower_bound.epsilon_lower_bound(
      cos, dim=dim, delta=1e-6)
  assert report.epsilon_lo_paper == lower_bound.epsilon_lower_bound(
      cos, dim=dim, delta=1e-6, threshold_strategy='paper')
  assert report.epsilon_one_run == one_run.epsilon_one_run(
      cos, unseen, delta=1e-6)
  assert report.epsilon_one_run_fdp == one_run.epsilon_one_run_fdp(
      cos, unseen, delta=1e-6)
  assert report.num_unseen == 1000
  assert report.null_std == pytest.approx(1e-3)
  assert json.loads(report.to_json())['epsilon_est'] == report.epsilon_est
  without = privacy_report.final_model_report(cos, dim, 1e-6)
  assert without.epsilon_one_run is None and without.num_unseen == 0


def test_all_iterates_report_bundles_estimates_and_bounds():
  rng = np.random.default_rng(9)
  seen, unseen = rng.normal(2e-3, 1e-3, 800), rng.normal(0, 1e-3, 1000)
  report = privacy_report.all_iterates_report(seen, unseen, 1e-6)
  assert report.epsilon_est_fitted == est.epsilon_from_seen_unseen(
      seen, unseen, 1e-6)
  mu = math.sqrt(2) * stats.norm.ppf(report.auroc)
  assert report.epsilon_est == pytest.approx(
      est.gaussian_epsilon(1 / mu, 1e-6), rel=1e-9)
  assert report.epsilon_lo == lower_bound.epsilon_lower_bound(
      seen, unseen=unseen, delta=1e-6)
  assert report.epsilon_lo_paper == lower_bound.epsilon_lower_bound(
      seen, unseen=unseen, delta=1e-6, threshold_strategy='paper')
  assert report.epsilon_one_run == one_run.epsilon_one_run(
      seen, unseen, delta=1e-6)
  assert report.anderson_unseen == pytest.approx(
      stats.anderson(unseen).statistic)
  low, high = report.epsilon_est_interval
  assert low <= report.epsilon_est <= high


def test_perfect_separation_saturates_the_all_iterates_headline():
  # Every seen maximum above every unseen one: AUROC 1, moved half a pair
  # inwards, is the largest mu 50 x 50 canaries can show; marked saturated.
  seen = np.linspace(0.5, 0.6, 50)
  unseen = np.linspace(0.0, 0.1, 50)
  report = privacy_report.all_iterates_report(seen, unseen, 1e-5)
  mu = math.sqrt(2) * stats.norm.ppf(1 - 0.5 / 2500)
  assert report.epsilon_est == pytest.approx(
      est.gaussian_epsilon(1 / mu, 1e-5), rel=1e-9)
  assert report.epsilon_est_saturated
  rng = np.random.default_rng(3)
  overlapping = privacy_report.all_iterates_report(
      rng.normal(1, 1, 50) / 1e3, rng.normal(0, 1, 50) / 1e3, 1e-5)
  assert not overlapping.epsilon_est_saturated
  assert not privacy_report.final_model_report(
      seen, 10**4, 1e-5).epsilon_est_saturated


@pytest.mark.slow
def test_final_headline_is_unbiased_on_the_gaussian_mechanism():
  # Exact simulations of Algorithm 1 (d = 10^5, k = 1000, delta = 1e-6): the
  # headline's mean ratio to the true eps is within 10% at eps = 1, 3 and
  # 10, where the fitted estimate runs high at eps = 1.
  dim, k, delta = 10**5, 1000, 1e-6
  rng = np.random.default_rng(10)
  for epsilon in (1.0, 3.0, 10.0):
    sigma = est.gaussian_sigma(epsilon, delta)
    reports = [privacy_report.final_model_report(
        gaussian_simulation.simulate_cosines(dim, k, sigma, rng), dim, delta,
        bootstrap_resamples=20) for _ in range(40)]
    ratio = np.mean([r.epsilon_est for r in reports]) / epsilon
    assert abs(ratio - 1) < 0.1, (epsilon, ratio)
    if epsilon == 1.0:
      fitted = np.mean([r.epsilon_est_fitted for r in reports]) / epsilon
      assert fitted > 1.15


@pytest.mark.parametrize('call,message', [
    (lambda: privacy_report.final_model_report([], 100, 1e-5), 'cosines'),
    (lambda: privacy_report.final_model_report([0.1], 100, 1e-5), 'cosines'),
    (lambda: privacy_report.final_model_report([0.1, float('nan')], 100, 1e-5),
     'cosines'),
    (lambda: privacy_report.final_model_report([0.1, 0.1, 0.1], 100, 1e-5),
     'zero spread'),
    (lambda: privacy_report.final_model_report([0.1, 0.2], 100, 1.0), 'delta'),
    (lambda: privacy_report.final_model_report([0.1, 0.2], 100, 1e-5,
                                               alpha=0.0), 'alpha'),
    (lambda: privacy_report.final_model_report([0.1, 0.2], 100, 1e-5,
                                               unseen=[0.1]), 'unseen'),
    (lambda: privacy_report.final_model_report(
        [0.1, 0.2], 100, 1e-5, threshold_strategy='paper'),
     'epsilon_lo_paper'),
    (lambda: privacy_report.all_iterates_report([0.1, 0.2], [0.3], 1e-5),
     'unseen'),
    (lambda: privacy_report.all_iterates_report([0.1, 0.2], [0.3, 0.3], 1e-5),
     'zero spread'),
])
def test_bad_input_names_the_argument(call, message):
  with pytest.raises(ValueError, match=message):
    call()


def test_tight_bounds_in_both_threat_models():
  rng = np.random.default_rng(11)
  dim = 10**5
  seen = rng.normal(2.0, 1.0, 400) / math.sqrt(dim)
  unseen = rng.normal(0.0, 1.0, 400) / math.sqrt(dim)
  expected = [tight_audit.epsilon_lo_tight(seen, unseen, delta=1e-6,
                                           family=family)
              for family in ('channel', 'gdp')]
  assert 0.3 < expected[0] < expected[1]
  everywhere = privacy_report.all_iterates_report(seen, unseen, 1e-6,
                                                  bootstrap_resamples=20,
                                                  seed=3)
  assert [everywhere.epsilon_lo_tight_any,
          everywhere.epsilon_lo_tight_gdp] == expected
  # Final model: the channel family against the exact null (no unseen
  # needed), the GDP family by the game on the unseen canaries.
  against_null = tight_audit.epsilon_lo_known_null(
      seen, lambda t: null_distribution.null_logsf(t, dim), delta=1e-6)
  assert against_null > expected[0]
  final = privacy_report.final_model_report(seen, dim, 1e-6, unseen=unseen,
                                            bootstrap_resamples=20, seed=3)
  assert [final.epsilon_lo_tight_any,
          final.epsilon_lo_tight_gdp] == [against_null, expected[1]]
  without_unseen = privacy_report.final_model_report(seen, dim, 1e-6,
                                                     bootstrap_resamples=20)
  assert without_unseen.epsilon_lo_tight_any == against_null
  assert without_unseen.epsilon_lo_tight_gdp is None
  # 400 seen and 40 unseen cannot come from inserting each with
  # probability 1/2: no tight bound, the rest of the report as before.
  lopsided = privacy_report.all_iterates_report(seen, unseen[:40], 1e-6,
                                                bootstrap_resamples=20)
  assert lopsided.epsilon_lo_tight_gdp is None
  assert lopsided.epsilon_one_run is not None


def test_reports_written_before_the_tight_bounds_still_load():
  rng = np.random.default_rng(12)
  report = privacy_report.all_iterates_report(
      rng.normal(0.3, 0.1, 50), rng.normal(0.0, 0.1, 50), 1e-6,
      bootstrap_resamples=20)
  fields = json.loads(report.to_json())
  del fields['epsilon_lo_tight_any'], fields['epsilon_lo_tight_gdp']
  old = privacy_report.PrivacyReport.from_dict(fields)
  assert old.epsilon_lo_tight_any is None
  assert old == dataclasses.replace(report, epsilon_lo_tight_any=None,
                                    epsilon_lo_tight_gdp=None)
