"""Tests of one_shot_epe.stats.tight_audit against simulation and quadrature.

The p-value is checked against Monte Carlo runs of each family's worst-case
game (Bernoulli(1/2) labels, the optimal ranking and guesses) and against
scipy's adaptive quadrature of the Beta expectation; the mean MAP errors
against their closed forms and numerical integrals; the bound's coverage
against simulated Gaussian mechanisms with a known eps.
"""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import optimize
from scipy import special
from scipy import stats

from one_shot_epe.stats import balanced_null
from one_shot_epe.stats import estimation
from one_shot_epe.stats import tight_audit


def _simulated_mistakes(family, theta, delta, canaries, guesses, runs, rng):
  """Mistakes among the r most confident MAP guesses of the worst case."""
  inserted = rng.random((runs, canaries)) < 0.5
  if family == 'gdp':
    x = rng.standard_normal((runs, canaries)) + np.where(inserted, theta / 2,
                                                         -theta / 2)
    confidence, wrong = np.abs(x), (x > 0) != inserted
  else:
    certain = rng.random((runs, canaries)) < delta
    right = certain | (rng.random((runs, canaries)) < special.expit(theta))
    confidence = certain + 0.5 * rng.random((runs, canaries))
    wrong = ~right
  top = np.argsort(-confidence, axis=1)[:, :guesses]
  return np.take_along_axis(wrong, top, axis=1).sum(axis=1)


@pytest.mark.parametrize('family,theta,delta', [('gdp', 1.0, 1e-6),
                                                ('gdp', 0.3, 1e-6),
                                                ('channel', 1.5, 0.02),
                                                ('channel', 0.5, 1e-6)])
def test_p_value_is_the_worst_case_games_mistake_cdf(family, theta, delta):
  rng = np.random.default_rng(0)
  canaries, guesses, runs = 120, 30, 40000
  made = _simulated_mistakes(family, theta, delta, canaries, guesses, runs,
                             rng)
  for u in range(0, guesses + 1, 3):
    simulated = np.mean(made <= u)
    exact = tight_audit.tight_p_value(u, guesses, canaries, family, theta,
                                      delta)
    error = math.sqrt(max(exact * (1 - exact), 1e-4) / runs)
    assert exact == pytest.approx(simulated, abs=4 * error), u


@pytest.mark.parametrize('family,theta', [('gdp', 0.8), ('channel', 2.0)])
def test_p_value_equals_adaptive_quadrature(family, theta):
  canaries, guesses, delta = 500, 60, 1e-3
  for u in (2, 8, 15):

    def integrand(w, u=u):
      error = tight_audit.mean_map_error(family, theta, delta, [1.0 - w])[0]
      return (stats.binom.cdf(u, guesses, error) *
              stats.beta.pdf(w, canaries - guesses, guesses + 1))

    lo, hi = stats.beta.ppf([1e-12, 1 - 1e-12], canaries - guesses,
                            guesses + 1)
    expected, _ = integrate.quad(integrand, lo, hi, epsabs=1e-12,
                                 epsrel=1e-10, limit=200)
    assert tight_audit.tight_p_value(u, guesses, canaries, family, theta,
                                     delta) == pytest.approx(expected,
                                                             rel=1e-8)


def test_all_guesses_is_a_binomial_cdf():
  # r = n: W = 0, one binomial at the family's mean error over everything.
  for u in (10, 40):
    assert tight_audit.tight_p_value(u, 100, 100, 'gdp', 1.2, 1e-6) == (
        pytest.approx(stats.binom.cdf(u, 100, stats.norm.cdf(-0.6)),
                      rel=1e-10))


def test_channel_error_closed_form():
  top = np.array([1e-4, 0.01, 0.3, 1.0])
  eps, delta = 2.0, 1e-3
  expected = np.maximum(top - delta, 0) / top / (1 + math.exp(eps))
  np.testing.assert_allclose(
      tight_audit.mean_map_error('channel', eps, delta, top), expected,
      rtol=1e-14)


def test_gdp_error_is_the_integral_of_the_map_error():
  mu = 1.3
  mixture = lambda x: 0.5 * (stats.norm.pdf(x, mu / 2) +
                             stats.norm.pdf(x, -mu / 2))
  error = lambda x: special.expit(-mu * abs(x))
  for cut in (0.0, 0.4, 1.5, 4.0):
    mass = min(2 * integrate.quad(mixture, cut, np.inf)[0], 1.0)
    wrong = 2 * integrate.quad(lambda x: mixture(x) * error(x), cut,
                               np.inf)[0]
    got = tight_audit.mean_map_error('gdp', mu, 1e-6, [mass])[0]
    assert got == pytest.approx(wrong / mass, rel=1e-6)


def test_gdp_error_without_privacy_loss_is_a_half():
  np.testing.assert_allclose(
      tight_audit.mean_map_error('gdp', 0.0, 1e-6, [1e-6, 0.2, 1.0]), 0.5,
      rtol=1e-10)


def test_guess_grid():
  assert list(tight_audit.guess_grid(2000, 'gdp')) == [1000, 500, 250]
  assert list(tight_audit.guess_grid(100, 'channel')) == [50, 25, 12, 8]


def test_mistakes_count_the_label_free_guesses():
  seen, unseen = np.array([5.0, 4.0, -0.5, 0.2]), np.array([-3.0, 0.1, -0.2,
                                                            1.0])
  # Pooled median 0.15; by distance: 5 (in, right), 4 (in, right), -3 (out,
  # right), 1 (in, wrong), -0.5 (out, wrong), -0.2 (out, right), ...
  made, guessed_in = tight_audit.mistakes(seen, unseen)
  np.testing.assert_array_equal(made[:6], [0, 0, 0, 1, 2, 2])
  np.testing.assert_array_equal(guessed_in[:6], [1, 2, 2, 3, 3, 3])


def test_identical_scores_put_their_wrong_guesses_first():
  # Median 0.5. Distance 1.5, higher score first: the three 2.0s ("in", one
  # unseen: wrong, counted first whatever order the sets come in), then the
  # two -1.0s ("out", unseen: right); distance 0.5: 1.0 ("in", unseen:
  # wrong), then the two 0.0s ("out", seen: wrong).
  for seen, unseen in [([2.0, 2.0, 0.0, 0.0], [2.0, 1.0, -1.0, -1.0]),
                       ([0.0, 0.0, 2.0, 2.0], [-1.0, -1.0, 1.0, 2.0])]:
    made, guessed_in = tight_audit.mistakes(seen, unseen)
    np.testing.assert_array_equal(made, [1, 1, 1, 1, 1, 2, 3, 4])
    np.testing.assert_array_equal(guessed_in, [1, 2, 3, 3, 3, 4, 4, 4])


def test_ties_cannot_favour_the_labels():
  # Every seen score equals an unseen one: no guess can beat chance.
  scores = np.round(np.random.default_rng(1).normal(0, 1, 500), 1)
  for family in tight_audit.FAMILIES:
    assert tight_audit.epsilon_lo_tight(scores, scores, delta=1e-6,
                                        family=family) == 0.0


@pytest.mark.parametrize('family', tight_audit.FAMILIES)
def test_bound_holds_on_simulated_gaussian_mechanisms(family):
  # mu-GDP is exactly the Gaussian mechanism, (eps, delta) its worst case.
  rng = np.random.default_rng(2)
  epsilon, delta, runs = 2.0, 1e-5, 60
  mu = 1.0 / estimation.gaussian_sigma(epsilon, delta)
  bounds = np.array([
      tight_audit.epsilon_lo_tight(rng.normal(mu, 1, 300),
                                   rng.normal(0, 1, 300), delta=delta,
                                   family=family) for _ in range(runs)])
  assert np.mean(bounds > epsilon) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)
  assert np.mean(bounds) > (1.0 if family == 'gdp' else 0.2) * (
      0.5 * epsilon)


def test_an_r_is_tested_only_where_no_signal_is_rejected():
  # 17 seen + 17 unseen (grids [17, 8], level 0.025). The 17 most confident
  # guesses: 8 "in" (2 wrong), 9 "out" (2 wrong); the 8 most confident: 2
  # wrong. The Bernoulli game rejects no signal at r = 17 (P[Bin(17, 1/2)
  # <= 4] = 0.0245), the balanced design does not (0.0262): no bound.
  far_in, far_out = 10.0 + np.arange(8), -10.5 - np.arange(9)
  near_in, near_out = 0.1 + 0.1 * np.arange(9), -0.1 - 0.1 * np.arange(8)
  seen = np.concatenate([far_in[[0, 1, 3, 4, 5, 7]], far_out[[0, 4]],
                         near_in[:5], near_out[:4]])
  unseen = np.concatenate([far_in[[2, 6]], far_out[[1, 2, 3, 5, 6, 7, 8]],
                           near_in[5:], near_out[4:]])
  made, guessed_in = tight_audit.mistakes(seen, unseen)
  assert (made[16], guessed_in[16], made[7]) == (4, 8, 2)
  level = 0.05 / tight_audit.guess_grid(34, 'gdp').size
  assert tight_audit.tight_p_value(4, 17, 34, 'gdp', 0.0, 1e-6) < level
  assert balanced_null.permutation_p_value(4, 8, 17, 17, 34) > level
  for family in tight_audit.FAMILIES:
    assert tight_audit.epsilon_lo_tight(seen, unseen, delta=1e-6,
                                        family=family) == 0.0


def test_separated_scores_give_large_bounds_and_fixed_count_is_smaller():
  rng = np.random.default_rng(3)
  seen, unseen = rng.normal(4, 1, 1000), rng.normal(0, 1, 1000)
  gdp = tight_audit.epsilon_lo_tight(seen, unseen, delta=1e-6, family='gdp')
  fixed = tight_audit.epsilon_lo_tight(seen, unseen, delta=1e-6, family='gdp',
                                       design='fixed_count')
  assert gdp > 15.0 and 0.0 < fixed < gdp


@pytest.mark.parametrize('seen,unseen,message', [
    (5, 5, 'at least 20'), (30, 100, 'probability 1/2')])
def test_refuses_sets_that_are_not_a_half_design(seen, unseen, message):
  with pytest.raises(ValueError, match=message):
    tight_audit.epsilon_lo_tight(np.arange(seen), np.arange(unseen) - 0.5,
                                 delta=1e-6, family='gdp')


@pytest.mark.parametrize('kwargs,message', [
    ({'family': 'laplace'}, 'family'), ({'alpha': 0.5}, 'alpha'),
    ({'delta': 0.0}, 'delta'), ({'design': 'poisson'}, 'design')])
def test_bad_arguments(kwargs, message):
  arguments = dict(delta=1e-6, family='gdp') | kwargs
  with pytest.raises(ValueError, match=message):
    tight_audit.epsilon_lo_tight(np.arange(20.0), np.arange(20.0),
                                 **arguments)


def test_known_null_ranks_halve_from_k():
  assert tight_audit.known_null_ranks(1000).tolist() == [
      1000, 500, 250, 125, 62, 31, 16, 8, 4, 2]
  assert tight_audit.known_null_ranks(1).tolist() == [1]


def _brute_known_null(seen, log_sf, delta, alpha):
  """The largest eps with P[Bin(k, e^eps Q(x_(r)) + delta) >= r] <= level."""
  ranks = tight_audit.known_null_ranks(seen.size)
  ordered = np.sort(seen)[::-1]
  best = 0.0
  for r in ranks:
    q = math.exp(log_sf(ordered[r - 1]))
    level = alpha / ranks.size

    def tail(eps, r=r, q=q):
      return stats.binom.sf(r - 1, seen.size, min(1.0, math.exp(eps) * q +
                                                   delta)) - level
    if tail(0.0) > 0.0:
      continue
    best = max(best, optimize.brentq(tail, 0.0, 60.0, xtol=1e-12))
  return best


def test_known_null_bound_is_the_binomial_tests_brute_force():
  rng = np.random.default_rng(4)
  seen = rng.normal(1.5, 1, 400)
  got = tight_audit.epsilon_lo_known_null(seen, stats.norm.logsf, delta=1e-6)
  assert got == pytest.approx(
      _brute_known_null(seen, stats.norm.logsf, 1e-6, 0.05), rel=1e-7)


@pytest.mark.parametrize('mechanism', ['gaussian', 'laplace'])
def test_known_null_bound_holds_in_and_out_of_the_gaussian_family(mechanism):
  # Seen scores from the "in" law, the "out" law known exactly: the Gaussian
  # mechanism at (eps, delta), or Laplace noise of scale 1/eps (eps-DP).
  rng = np.random.default_rng(5)
  epsilon, delta, runs = 3.0, 1e-6, 300
  if mechanism == 'gaussian':
    shift = 1.0 / estimation.gaussian_sigma(epsilon, delta)
    draw, log_sf = (lambda: rng.normal(shift, 1, 1000)), stats.norm.logsf
  else:
    law = stats.laplace(scale=1.0 / epsilon)
    draw, log_sf = (lambda: 1.0 + law.rvs(1000, random_state=rng)), law.logsf
  bounds = np.array([tight_audit.epsilon_lo_known_null(
      draw(), log_sf, delta=delta) for _ in range(runs)])
  assert np.mean(bounds > epsilon) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / runs)
  assert np.mean(bounds) > 0.3 * epsilon
