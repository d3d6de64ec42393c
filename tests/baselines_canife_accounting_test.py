"""Tests of experiments.baselines.canife_accounting (CANIFE Algorithm 2).

Truths: the closed-form RDP of the Gaussian mechanism with the RDP-to-DP
conversion written out here, and dp_accounting called directly on the whole
training run as one composed PoissonSampledDpEvent(GaussianDpEvent) event.
"""

import math

import dp_accounting
import numpy as np
import pytest

from experiments.baselines import canife_accounting as accounting

DELTA = 1.0 / 60000


def _closed_form_epsilon(sigma: float, delta: float) -> float:
  """min over orders a of a/(2 s^2) + log((a-1)/a) - log(delta a)/(a-1).

  The Gaussian mechanism's RDP a/(2 s^2) (Mironov 2017) converted by
  Proposition 12 of Canonne et al. (2020), over dp_accounting's default
  orders (all > 1.01), floored at 0.
  """
  orders = np.array(dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
  eps = (orders / (2 * sigma**2) + np.log1p(-1 / orders) -
         np.log(delta * orders) / (orders - 1))
  return max(0.0, float(eps.min()))


@pytest.mark.parametrize('sigma', [0.2, 0.5, 1.0, 3.0])
def test_per_round_epsilon_is_the_gaussian_rdp_bound(sigma):
  assert accounting.per_round_epsilon(sigma, DELTA) == pytest.approx(
      _closed_form_epsilon(sigma, DELTA), rel=1e-9)


def test_paper_analytical_epsilon():
  # Sec. 5.4 of Andrew et al.: "an analytical eps of 34.5" at sigma = 0.2
  # for N = 60 000 (delta = 1/N): one unamplified Gaussian release.
  assert accounting.per_round_epsilon(0.2, DELTA) == pytest.approx(34.5,
                                                                   abs=0.05)


@pytest.mark.parametrize('sigma', [0.2, 0.7, 1.16, 4.0])
def test_noise_inversion_round_trips_from_sigma(sigma):
  eps = accounting.per_round_epsilon(sigma, DELTA)
  assert accounting.noise_from_epsilon(eps, DELTA) == pytest.approx(sigma,
                                                                    rel=1e-8)


@pytest.mark.parametrize('eps', [0.05, 0.5, 2.0, 3.89, 10.0, 40.0])
def test_noise_inversion_round_trips_from_epsilon(eps):
  sigma = accounting.noise_from_epsilon(eps, DELTA)
  assert accounting.per_round_epsilon(sigma, DELTA) == pytest.approx(eps,
                                                                     rel=1e-8)


def test_noise_inversion_edges():
  assert accounting.noise_from_epsilon(0.0, DELTA) == math.inf
  assert accounting.noise_from_epsilon(math.inf, DELTA) == 0.0
  assert accounting.per_round_epsilon(0.0, DELTA) == math.inf
  assert accounting.per_round_epsilon(math.inf, DELTA) == 0.0
  # Below the accountant's floor: the least sigma with eps_r <= target.
  sigma = accounting.noise_from_epsilon(1e-4, DELTA)
  assert accounting.per_round_epsilon(sigma * 1.001, DELTA) <= 1e-4
  assert accounting.per_round_epsilon(sigma * 0.999, DELTA) > 1e-4
  with pytest.raises(ValueError, match='epsilon'):
    accounting.noise_from_epsilon(-1.0, DELTA)
  with pytest.raises(ValueError, match='delta'):
    accounting.noise_from_epsilon(1.0, 1.5)


def test_audit_rounds_and_coverage():
  rounds = accounting.audit_rounds(469, 100)
  assert rounds == [0, 100, 200, 300, 400]
  assert accounting.rounds_covered(rounds, 469) == [100, 100, 100, 100, 69]
  covered = accounting.rounds_covered(accounting.audit_rounds(10, 3), 10)
  assert covered == [3, 3, 3, 1]
  with pytest.raises(ValueError, match='round 0'):
    accounting.rounds_covered([5, 10], 20)
  with pytest.raises(ValueError, match='increase'):
    accounting.rounds_covered([0, 10, 10], 20)
  with pytest.raises(ValueError, match='increase'):
    accounting.rounds_covered([0, 20], 20)


def test_composition_with_true_sigma_reproduces_dp_accounting():
  """Feeding eps_r(sigma) at every audit gives dp_accounting's own eps."""
  sigma, rate, num_rounds = 0.2, 128 / 60000, 469
  rounds = accounting.audit_rounds(num_rounds, 100)
  eps_r = accounting.per_round_epsilon(sigma, DELTA)
  estimate = accounting.canife_epsilon([eps_r] * len(rounds), rounds,
                                       num_rounds, rate, DELTA)
  truth = dp_accounting.rdp.RdpAccountant()
  truth.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          rate, dp_accounting.GaussianDpEvent(sigma)), num_rounds))
  assert estimate.epsilon == pytest.approx(truth.get_epsilon(DELTA), rel=1e-6)
  np.testing.assert_allclose(estimate.noise_multipliers, sigma, rtol=1e-8)
  assert estimate.round_counts == (100, 100, 100, 100, 69)


def test_composition_of_changing_sigmas_reproduces_dp_accounting():
  sigmas, rate, num_rounds = [3.0, 1.5, 0.8], 0.01, 250
  rounds = [0, 100, 200]
  estimate = accounting.canife_epsilon(
      [accounting.per_round_epsilon(s, DELTA) for s in sigmas], rounds,
      num_rounds, rate, DELTA)
  events = [
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              rate, dp_accounting.GaussianDpEvent(s)), count)
      for s, count in zip(sigmas, [100, 100, 50])
  ]
  truth = dp_accounting.rdp.RdpAccountant()
  truth.compose(dp_accounting.ComposedDpEvent(events))
  assert estimate.epsilon == pytest.approx(truth.get_epsilon(DELTA), rel=1e-6)
  # The cumulative curve is the same composition truncated after each audit.
  assert list(estimate.cumulative) == sorted(estimate.cumulative)
  partial = dp_accounting.rdp.RdpAccountant()
  partial.compose(events[0])
  assert estimate.cumulative[0] == pytest.approx(partial.get_epsilon(DELTA),
                                                 rel=1e-6)


def test_composition_edges():
  # An uninformative audit (eps_hat_r = 0) adds nothing.
  with_zero = accounting.canife_epsilon([0.0, 2.0], [0, 50], 100, 0.01, DELTA)
  only_second = accounting.cumulative_epsilon(
      [accounting.noise_from_epsilon(2.0, DELTA)], [50], 0.01, DELTA)
  assert with_zero.epsilon == pytest.approx(only_second, rel=1e-9)
  # A perfect attack makes the cumulative estimate infinite.
  assert accounting.canife_epsilon([2.0, math.inf], [0, 50], 100, 0.01,
                                   DELTA).epsilon == math.inf
  with pytest.raises(ValueError, match='sampling_rate'):
    accounting.cumulative_epsilon([1.0], [1], 0.0, DELTA)
  with pytest.raises(ValueError, match='same length'):
    accounting.canife_epsilon([1.0], [0, 5], 10, 0.1, DELTA)


def test_noise_delta_reading_of_get_noise():
  """GetNoise at delta' instead of delta: sigma_hat solves eps_r(s, delta')."""
  estimate = accounting.canife_epsilon([3.0], [0], 100, 0.01, DELTA,
                                       noise_delta=0.01)
  sigma = estimate.noise_multipliers[0]
  assert _closed_form_epsilon(sigma, 0.01) == pytest.approx(3.0, rel=1e-8)
  default = accounting.canife_epsilon([3.0], [0], 100, 0.01, DELTA)
  assert sigma < default.noise_multipliers[0]
  assert estimate.epsilon > default.epsilon
