"""Tests of one_shot_epe.stats.gaussian_pair with the truth known.

The noncentral-t bound is checked against scipy's (cdflib's) inverse; the
premise of the bound (a Gaussian pair's eps is at least mu-GDP's at the shift
in units of the larger std) against the exact two-Gaussian eps of Sec. 3.2;
its coverage and tightness on the Gaussian mechanism in the final-model game
(seen cosines N(mu / sqrt(d), 1 / d) against the exact null's N(0, 1 / d),
mu that of the mechanism's (eps, delta)) and against unseen canaries, with
unequal stds, and its failure out of its family (Laplace noise). The final
model's cosines at finite d (each canary released on its own, c + N(0,
sigma^2 I_d)) are checked against the exact eps of their own law: the
report's bound holds from its minimum d on, and below it, where it would
not, the report refuses it.
"""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import special
from scipy import stats

from benchmarks import gaussian_scores
from benchmarks import heavy_tailed
from one_shot_epe.reporting import privacy_report
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_pair

_DIM = 10**5
_NULL_STD = 1.0 / math.sqrt(_DIM)
_DELTA = 1e-6
_CANARIES = 1000
_RUNS = 200


def _holds(exceed: np.ndarray, alpha: float = 0.05) -> bool:
  """P(bound > truth) within alpha + 2 standard errors over the runs."""
  return float(np.mean(exceed)) <= alpha + 2.0 * math.sqrt(
      alpha * (1.0 - alpha) / exceed.size)


@pytest.mark.parametrize('df', [9.0, 99.0, 999.0])
@pytest.mark.parametrize('t', [-30.0, -2.0, 0.3, 3.0, 30.0, 58.4])
def test_noncentrality_lower_inverts_the_noncentral_t(df, t):
  bound = gaussian_pair.noncentrality_lower(t, df, 0.05)

  def density(square):  # P(T <= t) given V = square, times V's density.
    return stats.chi2.pdf(square, df) * special.ndtr(
        t * math.sqrt(square / df) - bound)

  cdf = integrate.quad(density, stats.chi2.ppf(1e-15, df),
                       stats.chi2.isf(1e-15, df), points=[df], limit=500,
                       epsabs=1e-13)[0]
  assert cdf == pytest.approx(0.95, abs=2e-7)
  # scipy's cdflib inverse agrees where it is accurate.
  assert bound == pytest.approx(special.nctdtrinc(df, 0.95, t), rel=1e-5,
                                abs=1e-5)


def test_noncentrality_lower_returns_where_scipy_does_not():
  # nctdtrinc caps the first at 1e6 and does not return for the second.
  assert gaussian_pair.noncentrality_lower(1e9, 1e6, 0.05) == pytest.approx(
      1e9 * (1.0 - special.ndtri(0.95) / math.sqrt(2e6)), rel=1e-6)
  assert gaussian_pair.noncentrality_lower(-1e9, 1.0, 0.05) < -1e9


@pytest.mark.parametrize('shift', [0.2, 1.0, 2.5])
@pytest.mark.parametrize('std', [0.5, 0.8, 1.0, 1.25, 2.0])
def test_pair_is_at_least_gdp_at_the_larger_std(shift, std):
  pair = estimation.epsilon_two_gaussians(0.0, 1.0, shift, std, _DELTA)
  gdp = estimation.epsilon_of_gdp(shift / max(1.0, std), _DELTA)
  assert pair >= gdp - 1e-9
  if std == 1.0:
    assert pair == pytest.approx(gdp, rel=1e-9)


# The targets for the mean bound / eps on the final model.
@pytest.mark.parametrize('epsilon,final_ratio,pair_ratio',
                         [(1.0, 0.70, 0.62), (3.0, 0.88, 0.84),
                          (10.0, 0.92, 0.90)])
def test_gaussian_mechanism_holds_and_is_tight(epsilon, final_ratio,
                                               pair_ratio):
  rng = np.random.default_rng(int(epsilon))
  mu = 1.0 / estimation.gaussian_sigma(epsilon, _DELTA)
  seen = _NULL_STD * (mu + rng.standard_normal((_RUNS, _CANARIES)))
  unseen = _NULL_STD * rng.standard_normal((_RUNS, _CANARIES))
  final = np.array([gaussian_pair.epsilon_lo_known_null(
      scores, null_std=_NULL_STD, delta=_DELTA) for scores in seen])
  pair = np.array([gaussian_pair.epsilon_lo_two_sample(
      scores, null, delta=_DELTA) for scores, null in zip(seen, unseen)])
  assert _holds(final > epsilon) and _holds(pair > epsilon)
  assert np.mean(final) >= final_ratio * epsilon
  assert np.mean(pair) >= pair_ratio * epsilon


@pytest.mark.parametrize('seen_std', [0.7, 1.0, 1.5])
def test_known_null_holds_for_unequal_stds(seen_std):
  rng = np.random.default_rng(7)
  truth = 0.5 / max(1.0, seen_std)  # mu in the larger std's units.
  seen = 0.5 + seen_std * rng.standard_normal((_RUNS * 2, _CANARIES))
  bounds = np.array([gaussian_pair.mu_lo_known_null(scores, null_std=1.0)
                     for scores in seen])
  assert _holds(bounds > truth)
  # The z bound in the null's std alone fails when the seen std is larger.
  known_only = seen.mean(axis=1) - special.ndtri(0.95) / math.sqrt(_CANARIES)
  assert _holds(known_only > truth) == (seen_std <= 1.0)


@pytest.mark.parametrize('seen_std,seen_size', [(1.5, 1000), (1 / 1.5, 1000),
                                                (1.5, 200), (1 / 1.5, 200)])
def test_two_sample_holds_for_unequal_stds(seen_std, seen_size):
  rng = np.random.default_rng(11)
  truth = 0.5 / max(1.0, seen_std)
  seen = 0.5 + seen_std * rng.standard_normal((_RUNS * 2, seen_size))
  unseen = rng.standard_normal((_RUNS * 2, _CANARIES))
  bounds = np.array([gaussian_pair.mu_lo_two_sample(scores, null)
                     for scores, null in zip(seen, unseen)])
  assert _holds(bounds > truth)


def test_out_of_family_it_fails():
  # Laplace noise, exactly (1, delta)-DP: the Gaussian pair of its scores
  # claims about three times the truth.
  rng = np.random.default_rng(3)
  scale = heavy_tailed.laplace_scale(1.0, _DELTA)
  null_std = math.sqrt(2.0) * scale / math.sqrt(_DIM)
  bounds = []
  for _ in range(50):
    seen, _ = heavy_tailed.scores(rng, 'laplace', _CANARIES, scale, _DIM)
    bounds.append(gaussian_pair.epsilon_lo_known_null(
        seen, null_std=null_std, delta=_DELTA))
  assert np.mean(np.array(bounds) > 1.0) > 0.9


def test_zero_spread_is_refused():
  with pytest.raises(ValueError, match='zero spread'):
    gaussian_pair.mu_lo_known_null(np.full(10, 0.1), null_std=1.0)
  with pytest.raises(ValueError, match='zero spread'):
    gaussian_pair.mu_lo_two_sample(np.arange(5.0), np.zeros(5))


def test_reports_carry_the_bound_at_their_confidence():
  rng = np.random.default_rng(5)
  seen = _NULL_STD * (0.6 + rng.standard_normal(_CANARIES))
  unseen = _NULL_STD * rng.standard_normal(_CANARIES)
  for alpha in (0.05, 0.2):
    final = privacy_report.final_model_report(
        seen, _DIM, _DELTA, alpha=alpha, unseen=unseen, bootstrap_resamples=20)
    every = privacy_report.all_iterates_report(
        seen, unseen, _DELTA, alpha=alpha, bootstrap_resamples=20)
    assert final.epsilon_lo_gauss_pair == gaussian_pair.epsilon_lo_known_null(
        seen, null_std=_NULL_STD, delta=_DELTA, alpha=alpha)
    assert every.epsilon_lo_gauss_pair == gaussian_pair.epsilon_lo_two_sample(
        seen, unseen, delta=_DELTA, alpha=alpha)
  assert 0.0 < every.epsilon_lo_gauss_pair < final.epsilon_lo_gauss_pair


def test_a_single_canarys_cosine_law_and_its_truth():
  # Its tails against the frequencies of its simulated cosines (4 standard
  # errors), and its eps against the Gaussian mechanism's: equal as d grows
  # (the cosine forgets nothing), below it at d = 100.
  rng = np.random.default_rng(8)
  sigma = estimation.gaussian_sigma(3.0, _DELTA)
  seen, _ = gaussian_scores.single_canary_scores(rng, 100, 200_000, sigma)
  points = np.array([-0.05, 0.0, 0.05, 0.1, 0.2])
  upper, lower = gaussian_scores.single_canary_tails(points, 100, sigma)
  for point, above, below in zip(points, upper, lower):
    error = 4.0 * math.sqrt(above * (1 - above) / seen.size) + 1e-6
    assert np.mean(seen > point) == pytest.approx(above, abs=error)
    assert np.mean(seen < point) == pytest.approx(below, abs=error)
  for epsilon in (1.0, 10.0):
    sigma = estimation.gaussian_sigma(epsilon, _DELTA)
    assert gaussian_scores.single_canary_epsilon(
        10**6, sigma, _DELTA) == pytest.approx(epsilon, rel=1e-4)
    assert gaussian_scores.single_canary_epsilon(
        100, sigma, _DELTA) < 0.96 * epsilon


def _final_bounds(dim, epsilon, runs, seed):
  """The bound on `runs` runs of 1,000 single-canary cosines, and truth."""
  rng = np.random.default_rng(seed)
  sigma = estimation.gaussian_sigma(epsilon, _DELTA)
  truth = gaussian_scores.single_canary_epsilon(dim, sigma, _DELTA)
  bounds = np.array([gaussian_pair.epsilon_lo_known_null(
      gaussian_scores.single_canary_scores(rng, dim, _CANARIES, sigma)[0],
      null_std=1.0 / math.sqrt(dim), delta=_DELTA) for _ in range(runs)])
  return bounds, truth


@pytest.mark.parametrize('epsilon', [1.0, 3.0, 10.0])
def test_final_model_bound_holds_on_cosines_from_its_minimum_dimension(
    epsilon):
  # At most alpha + 2 standard errors of 200 runs above the cosines' own
  # eps (a bound that held at exactly 5% passes with probability 0.98).
  bounds, truth = _final_bounds(gaussian_pair.MIN_FINAL_DIM, epsilon,
                                _RUNS, seed=int(epsilon))
  assert _holds(bounds > truth)
  assert np.mean(bounds) > 0.7 * truth


def test_below_its_minimum_dimension_the_report_refuses_it():
  # At d = 100 the bound would exceed the cosines' eps at eps = 10 in about
  # half the runs (48.5% measured; a bound holding at 5% exceeds 25% of 200
  # runs with probability below 1e-14).
  bounds, truth = _final_bounds(100, 10.0, _RUNS, seed=9)
  assert np.mean(bounds > truth) > 0.25
  rng = np.random.default_rng(10)
  for dim, refused in ((gaussian_pair.MIN_FINAL_DIM - 1, True),
                       (gaussian_pair.MIN_FINAL_DIM, False)):
    sigma = estimation.gaussian_sigma(3.0, _DELTA)
    seen, unseen = gaussian_scores.single_canary_scores(rng, dim, 300, sigma)
    final = privacy_report.final_model_report(
        seen, dim, _DELTA, unseen=unseen, bootstrap_resamples=20)
    assert (final.epsilon_lo_gauss_pair is None) == refused
  # The all-iterates bound compares two samples and is not refused.
  every = privacy_report.all_iterates_report(seen, unseen, _DELTA,
                                             bootstrap_resamples=20)
  assert every.epsilon_lo_gauss_pair is not None
