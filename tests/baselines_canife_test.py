"""Tests of experiments.baselines.canife: one audit of a frozen model.

Truths: with no noise a well-designed canary is separated perfectly
(eps_hat_r = inf, accuracy 1, CANIFE Sec. 4.1 / Fig. 3a); with much noise the
attack has little power; the audit is a pure function of its seed.
"""

import math

import numpy as np
import pytest

import cluster_data
from experiments.baselines import canife
from experiments.baselines import feedforward

CLIP = 1.0


@pytest.fixture(scope='module')
def setting():
  model = feedforward.FeedForward((6, 6), hidden_units=8, num_classes=3)
  auditor = canife.CanifeAuditor(
      model, canife.CanifeConfig(design_steps=300, num_mock_rounds=60))
  params = model.initial_params(0)
  inputs, labels = cluster_data.clusters(1, 1600)
  for step in range(50):
    batch = slice(32 * step, 32 * (step + 1))
    params = params - 0.5 * auditor.oracle.clipped_sum(
        params, inputs[batch], labels[batch], CLIP).numpy() / 32
  design_inputs, design_labels = cluster_data.clusters(2, 32)

  def sample_cohort(rng):
    chosen = np.flatnonzero(rng.random(len(inputs)) < 4 / len(inputs))
    return inputs[chosen], labels[chosen]

  return auditor, params, design_inputs, design_labels, sample_cohort


def _audit(setting, noise_multiplier, seed=0):
  auditor, params, design_inputs, design_labels, sample_cohort = setting
  return auditor.audit(params, design_inputs=design_inputs,
                       design_labels=design_labels,
                       sample_cohort=sample_cohort, clip=CLIP,
                       noise_multiplier=noise_multiplier, seed=seed)


def test_without_noise_the_audit_separates_perfectly(setting):
  result = _audit(setting, 0.0)
  print(f'no noise: eps_hat_r {result.epsilon}, accuracy '
        f'{result.attack_accuracy}, health {result.canary_health:.4f}, '
        f'held-out mean |cos| {result.heldout_cosine:.3f}')
  assert result.epsilon == math.inf
  assert result.attack_accuracy == 1.0
  assert result.canary_health > 0.99
  assert result.canary_gradient_norm >= CLIP
  assert result.scores.shape == (60,) and result.inserted.shape == (60,)


def test_much_noise_leaves_little_to_detect(setting):
  result = _audit(setting, 5.0)
  print(f'noise 5: eps_hat_r {result.epsilon:.3f}, accuracy '
        f'{result.attack_accuracy:.2f}')
  # Scores N(0, 25) vs N(1, 25): the optimal test's balanced accuracy is
  # Phi(1/10) = 0.54; 60 rounds add sampling noise of about 0.06 (s.e.).
  assert result.attack_accuracy < 0.75
  assert result.epsilon < 2.5


def test_audit_is_a_pure_function_of_its_seed(setting):
  first, again = _audit(setting, 0.5, seed=4), _audit(setting, 0.5, seed=4)
  np.testing.assert_array_equal(first.scores, again.scores)
  assert first.epsilon == again.epsilon


def test_config_validation():
  assert canife.CanifeConfig().delta() == pytest.approx(0.01)
  assert canife.CanifeConfig(attack_delta=0.05).delta() == 0.05
  with pytest.raises(ValueError, match='num_mock_rounds'):
    canife.CanifeConfig(num_mock_rounds=1)
  with pytest.raises(ValueError, match='insertion_probability'):
    canife.CanifeConfig(insertion_probability=1.0)
  with pytest.raises(ValueError, match='design_learning_rate'):
    canife.CanifeConfig(design_learning_rate=0.0)
