"""Tests of one_shot_epe.accounting.dp_fedavg against dp_accounting's own accountants."""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.stats import estimation


def _pld_epsilon(event, delta, interval=1e-4):
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=interval)
  accountant.compose(event)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize('noise,presentations,delta', [
    (0.2207, 1, 200**-1.1), (0.2207, 2, 200**-1.1), (1.0, 4, 1e-6),
    (2.0, 8, 1e-5)])
def test_canary_epsilon_is_the_pld_composition_of_r_gaussians(
    noise, presentations, delta):
  expected = _pld_epsilon(
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.GaussianDpEvent(noise), presentations), delta)
  got = dp_fedavg.canary_epsilon(noise, delta, presentations)
  assert got.epsilon == pytest.approx(expected, rel=1e-3)
  assert f'r = {presentations}' in got.mechanism


def test_one_presentation_is_the_papers_analytical_epsilon():
  # Sec. 5.4: noise 0.2 at delta = 1e-5 (one Gaussian release) is 34.5...
  # here checked against Balle and Wang directly, r = 1.
  assert dp_fedavg.canary_epsilon(0.2, 1e-5, 1).epsilon == (
      estimation.gaussian_epsilon(0.2, 1e-5))


def test_no_noise_is_infinite():
  assert math.isinf(dp_fedavg.canary_epsilon(0.0, 1e-5, 3).epsilon)
  participation = dp_fedavg.Participation('bernoulli', 10, 100, 5)
  assert math.isinf(
      dp_fedavg.client_epsilon(0.0, 1e-5, participation).epsilon)


@pytest.mark.parametrize('sampling', ['bernoulli', 'poisson'])
@pytest.mark.parametrize('noise,clients,num_clients,rounds,delta', [
    (1.0, 10, 1000, 1000, 1e-6), (1.0, 40, 200, 20, 200**-1.1)])
def test_sampled_client_epsilon_is_dp_accountings_pld(
    sampling, noise, clients, num_clients, rounds, delta):
  q = clients / num_clients
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          q, dp_accounting.GaussianDpEvent(noise)), rounds)
  expected = _pld_epsilon(event, delta)
  got = dp_fedavg.client_epsilon(
      noise, delta,
      dp_fedavg.Participation(sampling, clients, num_clients, rounds))
  assert got.epsilon == pytest.approx(expected, rel=2e-3)
  # A valid (pessimistic) PLD bound is never far below RDP's looser one.
  rdp = dp_accounting.rdp.RdpAccountant()
  rdp.compose(event)
  assert got.epsilon <= rdp.get_epsilon(delta) * 1.001
  assert f'q = {q:.4g}' in got.mechanism and f'{rounds} rounds' in got.mechanism


def test_shuffled_client_epsilon_composes_over_epochs():
  # 200 clients, 40 per round: 5 rounds per epoch; 12 rounds touch 3 epochs.
  participation = dp_fedavg.Participation('shuffle', 40, 200, 12)
  assert participation.epochs == 3
  got = dp_fedavg.client_epsilon(0.5, 1e-5, participation)
  expected = _pld_epsilon(
      dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.5), 3),
      1e-5)
  assert got.epsilon == pytest.approx(expected, rel=1e-3)
  assert 'no amplification' in got.mechanism and '3 shuffled' in got.mechanism


def test_shuffle_epochs_with_a_partial_cohort():
  # 101 clients, 10 per round: ceil(101/10) = 11 rounds per epoch.
  assert dp_fedavg.Participation('shuffle', 10, 101, 11).epochs == 1
  assert dp_fedavg.Participation('shuffle', 10, 101, 12).epochs == 2


def test_event_epsilon_of_a_composed_round_is_dp_accountings_pld():
  # An adaptive clip's round: value and count noise composed, which is one
  # Gaussian at (1.1^-2 + 5^-2)^-1/2; Poisson subsampled over the rounds, or
  # every round without sampling.
  round_event = dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(1.1), dp_accounting.GaussianDpEvent(5.0)])
  participation = dp_fedavg.Participation('bernoulli', 20, 400, 60)
  got = dp_fedavg.client_epsilon_of_event(round_event, 1e-6, participation,
                                           60)
  merged = dp_accounting.GaussianDpEvent((1.1**-2 + 5.0**-2)**-0.5)
  expected = _pld_epsilon(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(0.05, merged), 60), 1e-6)
  assert got.epsilon == pytest.approx(expected, rel=2e-3)
  every = dp_fedavg.client_epsilon_of_event(round_event, 1e-6, None, 60)
  assert every.epsilon == pytest.approx(_pld_epsilon(
      dp_accounting.SelfComposedDpEvent(round_event, 60), 1e-6), rel=2e-3)
  assert 'every one of 60 rounds' in every.mechanism
  assert math.isinf(dp_fedavg.client_epsilon_of_event(
      dp_accounting.GaussianDpEvent(0.0), 1e-6, None, 3).epsilon)


def test_rounds_of_different_events_compose_as_dp_accountings_pld():
  # A round released at an effective multiplier below z (0.5 of 1), one that
  # released nothing (None), an adaptive clip's composed round.
  adaptive = dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(1.1), dp_accounting.GaussianDpEvent(5.0)])
  g = dp_accounting.GaussianDpEvent
  events = [g(1.0), None, g(0.5), adaptive]
  got = dp_fedavg.client_epsilon_of_rounds(events, 1e-5)
  assert got.epsilon == pytest.approx(_pld_epsilon(
      dp_accounting.ComposedDpEvent([g(1.0), g(0.5), adaptive]), 1e-5),
                                      rel=2e-3)
  assert '3 released round(s) of 4' in got.mechanism
  full = dp_fedavg.client_epsilon_of_event(g(1.0), 1e-5, None, 4).epsilon
  skipped = dp_fedavg.client_epsilon_of_rounds([g(1.0)] * 3 + [None], 1e-5)
  short = dp_fedavg.client_epsilon_of_rounds([g(1.0)] * 3 + [g(0.5)], 1e-5)
  assert skipped.epsilon < full < short.epsilon
  assert dp_fedavg.client_epsilon_of_rounds([None, None], 1e-5).epsilon == 0
  assert math.isinf(dp_fedavg.client_epsilon_of_rounds(
      [g(1.0), g(0.0)], 1e-5).epsilon)
  # Bernoulli: each round subsampled at q = 1/4, the adaptive one merged.
  bernoulli = dp_fedavg.Participation('bernoulli', 5, 20, 4)
  merged = g((1.1**-2 + 5.0**-2)**-0.5)
  assert dp_fedavg.client_epsilon_of_rounds(
      events, 1e-5, bernoulli).epsilon == pytest.approx(_pld_epsilon(
          dp_accounting.ComposedDpEvent([
              dp_accounting.PoissonSampledDpEvent(0.25, e)
              for e in (g(1.0), g(0.5), merged)]), 1e-5), rel=2e-3)
  # Shuffled epochs of 2 rounds: once per epoch, at its least-noised round.
  shuffle = dp_fedavg.Participation('shuffle', 10, 20, 4)
  assert dp_fedavg.client_epsilon_of_rounds(
      [g(1.0), g(0.5), None, g(2.0)], 1e-5, shuffle).epsilon == (
          pytest.approx(_pld_epsilon(dp_accounting.ComposedDpEvent(
              [g(0.5), g(2.0)]), 1e-5), rel=2e-3))
  with pytest.raises(TypeError, match='round_events'):
    dp_fedavg.client_epsilon_of_rounds([1.0], 1e-5)
  with pytest.raises(ValueError, match='participation 4'):
    dp_fedavg.client_epsilon_of_rounds(events[:3], 1e-5, bernoulli)


def _mixture_delta_by_quadrature(epsilon, scale, counts, weights):
  """max of both hockey-stick divergences, by numerical integration."""
  def q(x):
    return sum(w * stats.norm.pdf(x, k, scale) for k, w in zip(counts, weights))

  def p(x):
    return stats.norm.pdf(x, 0.0, scale)

  lo, hi = -12 * scale, max(counts) + 12 * scale
  points = list(np.linspace(lo, hi, 60))
  forward = integrate.quad(lambda x: max(q(x) - math.exp(epsilon) * p(x), 0),
                           lo, hi, points=points, limit=400, epsabs=1e-13)[0]
  backward = integrate.quad(lambda x: max(p(x) - math.exp(epsilon) * q(x), 0),
                            lo, hi, points=points, limit=400, epsabs=1e-13)[0]
  return max(forward, backward)


@pytest.mark.parametrize('noise,rounds,counts,delta', [
    (0.3, 20, [0] * 3 + [1] * 5 + [2] * 2, 1e-3),
    (0.1, 50, [1] * 9 + [3], 1e-4),
    (0.5, 10, [0, 1], 1e-2),
])
def test_last_iterate_mixture_matches_numerical_integration(noise, rounds,
                                                            counts, delta):
  # At the returned eps the hockey-stick divergence of the mixture against
  # N(0, T z^2), integrated numerically, is delta.
  got = dp_fedavg.last_iterate_epsilon(noise, delta, rounds,
                                        np.array(counts)).epsilon
  values, tally = np.unique(counts, return_counts=True)
  scale = noise * math.sqrt(rounds)
  measured = _mixture_delta_by_quadrature(got, scale, values,
                                          tally / tally.sum())
  assert got > 0 and measured == pytest.approx(delta, rel=1e-4)


def test_last_iterate_of_a_fixed_count_is_one_gaussian():
  # r presentations in T rounds: a Gaussian at z sqrt(T) / r, the same as
  # the analytical eps of T / r^2 ... r^2 / T-fold compositions.
  got = dp_fedavg.last_iterate_epsilon(0.5, 1e-5, 25, np.full(10, 5))
  assert got.epsilon == estimation.gaussian_epsilon(0.5, 1e-5)
  assert 'heuristic' in got.mechanism
  assert dp_fedavg.last_iterate_epsilon(
      0.5, 1e-5, 25, np.zeros(4, np.int64)).epsilon == 0.0
  assert math.isinf(dp_fedavg.last_iterate_epsilon(
      0.0, 1e-5, 25, np.ones(4, np.int64)).epsilon)


@pytest.mark.parametrize('call,error,message', [
    (lambda: dp_fedavg.canary_epsilon(-1.0, 1e-5, 1), ValueError,
     'noise_multiplier'),
    (lambda: dp_fedavg.canary_epsilon('1', 1e-5, 1), TypeError,
     'noise_multiplier'),
    (lambda: dp_fedavg.canary_epsilon(1.0, 1e-5, 0), ValueError,
     'presentations'),
    (lambda: dp_fedavg.canary_epsilon(1.0, 1e-5, 1.5), TypeError,
     'presentations'),
    (lambda: dp_fedavg.Participation('uniform', 1, 10, 1), ValueError,
     'sampling'),
    (lambda: dp_fedavg.Participation('shuffle', 11, 10, 1), ValueError,
     'clients_per_round'),
    (lambda: dp_fedavg.Participation('shuffle', 1, 10, 0), ValueError,
     'rounds'),
    (lambda: dp_fedavg.Participation('shuffle', 1, 10.0, 1), TypeError,
     'num_clients'),
    (lambda: dp_fedavg.client_epsilon(1.0, 1e-5, None), TypeError,
     'participation'),
    (lambda: dp_fedavg.client_epsilon(
        1.0, 2.0, dp_fedavg.Participation('shuffle', 1, 10, 1)), ValueError,
     'delta'),
    (lambda: dp_fedavg.client_epsilon_of_event(1.0, 1e-5, None, 3), TypeError,
     'round_event'),
    (lambda: dp_fedavg.client_epsilon_of_event(
        dp_accounting.GaussianDpEvent(1.0), 1e-5, None, 0), ValueError,
     'rounds'),
    (lambda: dp_fedavg.last_iterate_epsilon(1.0, 1e-5, 3, np.array([4])),
     ValueError, 'presentations'),
    (lambda: dp_fedavg.last_iterate_epsilon(1.0, 1e-5, 3, np.array([0.5])),
     ValueError, 'presentations'),
    (lambda: dp_fedavg.last_iterate_epsilon(1.0, 1e-5, 3, []), ValueError,
     'presentations'),
])
def test_bad_arguments_raise_named_errors(call, error, message):
  with pytest.raises(error, match=message):
    call()


@pytest.mark.parametrize('column_norm, sensitivity', [(1.0, 1.0),
                                                      (1.3, 2.1), (2.0, 2.0)])
def test_matrix_factorization_canary_epsilon_is_dp_accountings_gaussian(
    column_norm, sensitivity):
  # One Gaussian at mu = column_norm / (z sens): dp_accounting's PLD of a
  # Gaussian at noise multiplier 1 / mu.
  z, delta = 0.9, 1e-5
  mf = dp_fedavg.matrix_factorization_canary_epsilon(
      z, delta, column_norm, sensitivity, 'blt')
  pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  pld.compose(dp_accounting.GaussianDpEvent(z * sensitivity / column_norm))
  assert mf.epsilon == pytest.approx(pld.get_epsilon(delta), rel=1e-3)
  assert 'blt' in mf.mechanism
  assert dp_fedavg.matrix_factorization_canary_epsilon(
      0.0, delta, column_norm, sensitivity, 'blt').epsilon == math.inf
  with pytest.raises(ValueError, match='sensitivity'):
    dp_fedavg.matrix_factorization_canary_epsilon(z, delta, 1.0, 0.0, 'blt')
