"""Tests of one_shot_epe.stats.gdp_threshold: the one-sided mu-GDP bound.

Truth: Gaussian scores, seen ~ N(mu, 1) and unseen ~ N(0, 1), are the
outputs of a mu-GDP mechanism in the canary's direction, whose eps at delta
is `estimation.epsilon_of_gdp(mu, delta)` (the Gaussian mechanism's, Balle
and Wang, 2018). Equality with jax-privacy main's source is in
jax_privacy_main_test.py; the reports' fields are checked against the
statistics called directly.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.stats import attack_metrics
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gdp_threshold
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import one_run

_DELTA = 1e-5
_ALPHA = 0.05
_RUNS = 300
_SIZE = 300


def _draws(mu, seed):
  rng = np.random.default_rng(seed)
  return (rng.normal(mu, 1.0, (_RUNS, _SIZE)),
          rng.normal(0.0, 1.0, (_RUNS, _SIZE)))


def _bounds(seen, unseen, bound=gdp_threshold.epsilon_gdp_thresholds):
  return np.array([bound(s, u, delta=_DELTA, alpha=_ALPHA)
                   for s, u in zip(seen, unseen)])


def _allowed_failures():
  """alpha + 2 standard errors of a rate measured on `_RUNS` runs."""
  return _ALPHA + 2.0 * math.sqrt(_ALPHA * (1.0 - _ALPHA) / _RUNS)


def _two_sided(seen, unseen, *, delta, alpha):
  """jax-privacy 2.0.0's bound: the largest |mu| of the same limits."""
  hits, alarms = one_run.hull_counts(seen, unseen)
  level = alpha / (2 * hits.size)
  fnr_up = lower_bound.clopper_pearson_upper(seen.size - hits, seen.size,
                                             level)
  fpr_up = lower_bound.clopper_pearson_upper(alarms, unseen.size, level)
  counted = np.maximum(fnr_up, fpr_up) < 1.0 - delta
  mus = np.abs(stats.norm.isf(fpr_up[counted]) -
               stats.norm.ppf(fnr_up[counted]))
  return estimation.epsilon_of_gdp(float(np.max(mus, initial=0.0)), delta)


@pytest.mark.parametrize('mu', [0.5, 1.5])
def test_the_bound_holds_at_its_level(mu):
  truth = estimation.epsilon_of_gdp(mu, _DELTA)
  bounds = _bounds(*_draws(mu, seed=int(10 * mu)))
  assert np.mean(bounds > truth) <= _allowed_failures()
  # Not vacuous: it certifies a good part of the truth on average.
  assert np.mean(bounds) > 0.25 * truth


@pytest.mark.parametrize('mu', [0.0, -1.0])
def test_no_forward_signal_certifies_nothing(mu):
  # mu <= 0: no test "score >= t" tells seen from unseen better than chance,
  # so the forward rule's truth is eps = 0.
  assert np.mean(_bounds(*_draws(mu, seed=7)) > 0.0) <= _allowed_failures()


def test_the_two_sided_bound_would_be_caught():
  # No signal at all (eps = 0 in either direction). Upper limits on both
  # rates are the wrong limits for the reverse rule: the two-sided bound's
  # |mu| of them claims privacy loss almost always.
  seen, unseen = _draws(0.0, seed=8)
  two_sided = _bounds(seen[:60], unseen[:60], bound=_two_sided)
  assert np.mean(two_sided > 0.0) > 0.5


def test_mu_and_eps_agree():
  rng = np.random.default_rng(3)
  seen, unseen = rng.normal(2.0, 1.0, 500), rng.normal(0.0, 1.0, 500)
  mu = gdp_threshold.gdp_mu_thresholds(seen, unseen, delta=_DELTA)
  assert 1.0 < mu < 2.0
  assert gdp_threshold.epsilon_gdp_thresholds(
      seen, unseen, delta=_DELTA) == pytest.approx(
          estimation.epsilon_of_gdp(mu, _DELTA), rel=1e-12)


def test_bad_arguments_are_refused():
  with pytest.raises(ValueError, match='alpha'):
    gdp_threshold.epsilon_gdp_thresholds([1.0, 2.0], [0.0, 1.0], delta=1e-5,
                                         alpha=0.5)
  with pytest.raises(ValueError, match='delta'):
    gdp_threshold.gdp_mu_thresholds([1.0, 2.0], [0.0, 1.0], delta=0.0)


def test_both_reports_carry_the_bound_and_summaries_with_unseen_only():
  rng = np.random.default_rng(9)
  dim = 10**5
  seen = rng.normal(2.0, 1.0, 300) / math.sqrt(dim)
  unseen = rng.normal(0.0, 1.0, 300) / math.sqrt(dim)
  final = privacy_report.final_model_report(seen, dim, 1e-6, unseen=unseen,
                                            bootstrap_resamples=20)
  every = privacy_report.all_iterates_report(seen, unseen, 1e-6,
                                             bootstrap_resamples=20)
  bound = gdp_threshold.epsilon_gdp_thresholds(seen, unseen, delta=1e-6)
  assert bound > 1.0
  tpr = attack_metrics.tpr_at_given_fpr(seen, unseen, [0.01, 0.001])
  for report in (final, every):
    assert report.epsilon_lo_gdp_thresholds == bound
    assert report.tpr_at_given_fpr == {'0.01': tpr[0], '0.001': tpr[1]}
    assert report.max_accuracy == attack_metrics.max_accuracy(seen, unseen)
    assert privacy_report.PrivacyReport.from_dict(
        json.loads(report.to_json())) == report
  alone = privacy_report.final_model_report(seen, dim, 1e-6,
                                            bootstrap_resamples=20)
  assert (alone.epsilon_lo_gdp_thresholds, alone.tpr_at_given_fpr,
          alone.max_accuracy) == (None, None, None)
  rates = report_fields.by_key('tpr_at_given_fpr').columns()
  assert [column.header() for column in rates] == [
      'hull TPR at FPR 1e-2', 'hull TPR at FPR 1e-3']
  assert [column.cell(alone) for column in rates] == ['n/a', 'n/a']
  assert rates[0].cell(every) == report_fields.number_cell(tpr[0])
  assert report_fields.by_key('epsilon_lo_gdp_thresholds').assumes == (
      report_fields.GAUSSIAN)
