"""Tests of benchmarks.bound_limits, bound_oracles and bound_best_tests.

Truths: the Gaussian mechanism's eps written out here (Balle and Wang,
2018: delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)), solved by
scipy's root finder; scipy's Beta quantiles for Clopper-Pearson; the
threshold oracles re-derived here by a continuous optimizer over t; the
game's p-value as `tight_audit.tight_p_value` computes it at integer
mistakes; the report's own fields on the same scores; the best tests'
level by simulation. The oracles sit above their bounds' means at
k = 1,000, eps = 3 (where the run's means are 0.81 to 1.01 of them), a
check that an oracle computed too low fails.
"""

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats

from benchmarks import bound_best_tests
from benchmarks import bound_limits
from benchmarks import bound_oracles
from one_shot_epe.reporting import privacy_report
from one_shot_epe.stats import tight_audit

_DELTA = 1e-6
_ALPHA = 0.05


def _gaussian_epsilon(mu):
  """eps at _DELTA of the Gaussian mechanism with mean shift mu."""

  def excess(eps):
    return (stats.norm.cdf(-eps / mu + mu / 2) -
            math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - _DELTA)

  return optimize.brentq(excess, 0.0, 200.0, xtol=1e-12)


def _setting(canaries, epsilon):
  return bound_oracles.Setting(canaries,
                               bound_oracles.gaussian_mu(epsilon, _DELTA),
                               _DELTA, _ALPHA)


@pytest.mark.parametrize('epsilon', [1.0, 3.0, 10.0])
def test_mu_is_that_of_the_gaussian_mechanism_at_epsilon(epsilon):
  mu = bound_oracles.gaussian_mu(epsilon, _DELTA)
  assert _gaussian_epsilon(mu) == pytest.approx(epsilon, rel=1e-7)


@pytest.mark.parametrize('canaries', [100, 1000, 10000])
@pytest.mark.parametrize('epsilon', [1.0, 3.0, 10.0])
def test_gauss_pair_oracles_are_the_closed_forms(canaries, epsilon):
  setting = _setting(canaries, epsilon)
  z = stats.norm.isf(_ALPHA)
  for oracle, margin in (
      (bound_oracles.gauss_pair_known_null, z / math.sqrt(canaries)),
      (bound_oracles.gauss_pair_two_sample, z * math.sqrt(2.0 / canaries))):
    shifted = setting.mu - margin
    expected = _gaussian_epsilon(shifted) if shifted > 0 else 0.0
    assert oracle(setting) == pytest.approx(expected, rel=1e-7, abs=1e-9)


def test_clopper_pearson_at_integer_counts_is_the_beta_quantile():
  counts = np.array([0, 1, 5, 99])
  expected = stats.beta.ppf(1 - 0.01, counts + 1, 100 - counts)
  np.testing.assert_allclose(
      bound_oracles.clopper_pearson_upper(counts, 100, 0.01), expected,
      rtol=1e-9)
  between = bound_oracles.clopper_pearson_upper([0.5, 1.5], 100, 0.01)
  assert expected[0] < between[0] < expected[1] < between[1]
  assert bound_oracles.clopper_pearson_upper([100], 100, 0.01)[0] == 1.0


@pytest.mark.parametrize('family', tight_audit.FAMILIES)
@pytest.mark.parametrize('mistakes,guesses,canaries,theta', [
    (3, 50, 200, 1.0), (10, 100, 2000, 0.5), (0, 16, 100, 3.0),
    (40, 400, 2000, 2.0)])
def test_game_p_value_at_integer_mistakes_is_the_projects(
    family, mistakes, guesses, canaries, theta):
  assert bound_oracles.game_p_value(
      family, theta, mistakes, guesses, canaries, _DELTA) == pytest.approx(
          tight_audit.tight_p_value(mistakes, guesses, canaries, family,
                                    theta, _DELTA), rel=1e-6, abs=1e-12)


def _best_threshold(objective, mu):
  """The maximum over t of `objective`, by a bounded optimizer from a scan."""
  starts = np.linspace(-4.0, mu + 6.0, 401)
  start = starts[int(np.argmax([objective(t) for t in starts]))]
  found = optimize.minimize_scalar(lambda t: -objective(t),
                                   bounds=(start - 0.05, start + 0.05),
                                   method='bounded',
                                   options={'xatol': 1e-7})
  return max(0.0, -found.fun)


def _cp(count, trials, level):
  return stats.beta.ppf(1 - level, count + 1, trials - count)


def _rates_epsilon(fpr, fnr):
  return max(math.log(max(1 - _DELTA - fpr, 1e-300)) - math.log(fnr),
             math.log(max(1 - _DELTA - fnr, 1e-300)) - math.log(fpr))


@pytest.mark.parametrize('canaries,epsilon', [(100, 10.0), (1000, 1.0),
                                              (1000, 3.0), (10000, 10.0)])
def test_threshold_oracles_are_the_best_threshold(canaries, epsilon):
  setting = _setting(canaries, epsilon)
  mu, k = setting.mu, canaries

  def known(t):
    fnr = _cp(k * stats.norm.cdf(t - mu), k, _ALPHA)
    return _rates_epsilon(stats.norm.sf(t), fnr)

  def two_sample(t):
    return _rates_epsilon(_cp(k * stats.norm.sf(t), k, _ALPHA / 2),
                          _cp(k * stats.norm.cdf(t - mu), k, _ALPHA / 2))

  assert bound_oracles.threshold_known_null(setting) == pytest.approx(
      _best_threshold(known, mu), abs=1e-4)
  assert bound_oracles.threshold_two_sample(setting) == pytest.approx(
      _best_threshold(two_sample, mu), abs=1e-4)


@pytest.mark.parametrize('key', bound_best_tests.BEST_TESTS[:3])
def test_best_tests_hold_their_level(key):
  """A best test is a test: P(its bound > eps) <= alpha + 2 SE."""
  runs, epsilon = 400, 3.0
  setting = _setting(100, epsilon)
  test = bound_best_tests.best_test(*key, setting)
  rng = np.random.default_rng(11)
  above = np.mean([
      test(rng.standard_normal(100) + setting.mu, rng.standard_normal(100))
      > epsilon for _ in range(runs)])
  assert above <= _ALPHA + 2 * math.sqrt(_ALPHA * (1 - _ALPHA) / runs)


def test_best_test_at_expected_counts_is_the_oracle():
  """Scores placed so the counts are their rounded expectations."""
  setting = _setting(1000, 10.0)
  threshold = bound_oracles.best_threshold(setting, 'known_null')
  misses = round(1000 * stats.norm.cdf(threshold - setting.mu))
  seen = np.where(np.arange(1000) < misses, threshold - 1.0, threshold + 1.0)
  fnr = _cp(misses, 1000, _ALPHA)
  expected = _rates_epsilon(stats.norm.sf(threshold), fnr)
  test = bound_best_tests.best_test('epsilon_lo', 'final', setting)
  assert test(seen, None) == pytest.approx(expected, rel=1e-9)
  assert expected == pytest.approx(
      bound_oracles.threshold_known_null(setting), rel=0.05)


def _cell_values(canaries, epsilon, runs, seed):
  """{bound name: values over runs} and the setting."""
  setting = _setting(canaries, epsilon)
  rng = np.random.default_rng(seed)
  values = {bound.name: [] for bound in bound_limits.BOUNDS}
  root = math.sqrt(bound_limits.DIM)
  for _ in range(runs):
    seen = (rng.standard_normal(canaries) + setting.mu) / root
    unseen = rng.standard_normal(canaries) / root
    for bound in bound_limits.BOUNDS:
      if 'tight' in bound.key and bound.threat_model != 'final':
        continue  # The game: slow, and its oracle is tested above.
      values[bound.name].append(bound.compute(seen, unseen, _DELTA, _ALPHA))
  return setting, values


def test_each_oracle_is_above_its_bounds_mean():
  setting, values = _cell_values(1000, 3.0, runs=40, seed=7)
  for bound in bound_limits.BOUNDS:
    found = np.array(values[bound.name])
    if not found.size:
      continue
    error = np.std(found, ddof=1) / math.sqrt(found.size)
    assert np.mean(found) <= bound.oracle(setting) + 3 * error, bound.name


def test_bounds_are_the_reports():
  rng = np.random.default_rng(3)
  mu = bound_oracles.gaussian_mu(3.0, _DELTA)
  root = math.sqrt(bound_limits.DIM)
  seen = (rng.standard_normal(200) + mu) / root
  unseen = rng.standard_normal(200) / root
  reports = {
      'all': privacy_report.all_iterates_report(
          seen, unseen, _DELTA, _ALPHA, bootstrap_resamples=20),
      'final': privacy_report.final_model_report(
          seen, bound_limits.DIM, _DELTA, _ALPHA, unseen=unseen,
          bootstrap_resamples=20)}
  for bound in bound_limits.BOUNDS:
    value = bound.compute(seen, unseen, _DELTA, _ALPHA)
    threats = ('final', 'all') if bound.threat_model == 'both' else (
        bound.threat_model,)
    for threat in threats:
      reported = getattr(reports[threat], bound.key)
      # The final model's exact null is N(0, 1/d) to 0.3% in its tails.
      tolerance = 0.02 if threat == 'final' else 1e-9
      assert value == pytest.approx(reported, abs=tolerance), (bound.name,
                                                               threat)


@pytest.mark.slow
def test_cell_rows_and_tables(tmp_path):
  rows = bound_limits.simulate_cell(100, 10.0, 3, _DELTA, _ALPHA, seed=0)
  assert [row.bound for row in rows] == list(bound_limits.BOUNDS)
  for row in rows:
    assert row.oracle == pytest.approx(row.bound.oracle(_setting(100, 10.0)))
  table = bound_limits.format_table(rows)
  assert table.count('\n') == len(rows) + 2
  assert bound_limits.format_search_cost(rows).count('\n') == len(
      bound_best_tests.BEST_TESTS) + 2
  assert all((row.best_test is None) == (
      (row.bound.key, row.bound.threat_model) not in
      bound_best_tests.BEST_TESTS) for row in rows)
  path = tmp_path / 'figure' / 'limits.png'
  bound_limits.write_figure(rows, str(path))
  assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
