"""Tests of experiments.baselines.canife_design (CANIFE Sec. 3.3, Algorithm 1).

On a small trained network, a designed canary's gradient must be nearly
orthogonal to clipped updates of held-out examples the design never saw,
much more so than the gradient of a random input (the undesigned canary),
and must reach the norm target C.
"""

import numpy as np
import pytest
import tensorflow as tf

import cluster_data
from experiments.baselines import canife_design
from experiments.baselines import feedforward
from experiments.baselines import per_example

CLIP = 1.0


@pytest.fixture(scope='module')
def frozen():
  """A network trained for 50 clipped-SGD steps, then frozen."""
  model = feedforward.FeedForward((6, 6), hidden_units=8, num_classes=3)
  oracle = per_example.GradientOracle(model)
  params = model.initial_params(0)
  inputs, labels = cluster_data.clusters(1, 1600)
  for step in range(50):
    batch = slice(32 * step, 32 * (step + 1))
    params = params - 0.5 * oracle.clipped_sum(
        params, inputs[batch], labels[batch], CLIP).numpy() / 32
  test_inputs, test_labels = cluster_data.clusters(2, 200)
  assert oracle.accuracy(params, test_inputs, test_labels) > 0.9
  pool = oracle.clipped(params, test_inputs[:32], test_labels[:32],
                        CLIP).numpy()
  heldout = oracle.clipped(params, test_inputs[32:], test_labels[32:],
                           CLIP).numpy()
  return model, params, pool, heldout


def test_designed_canary_is_nearly_orthogonal_to_heldout_updates(frozen):
  model, params, pool, heldout = frozen
  designer = canife_design.CanaryDesigner(model)
  random_input = designer.design(params, pool, norm_target=CLIP, steps=0,
                                 seed=3)
  canary = designer.design(params, pool, norm_target=CLIP, steps=300, seed=3)
  random_cos = canife_design.mean_abs_cosine(random_input.gradient, heldout)
  designed_cos = canife_design.mean_abs_cosine(canary.gradient, heldout)
  pool_cos = canife_design.mean_abs_cosine(canary.gradient, pool)
  print(f'mean |cos| with 168 held-out clipped updates (d = {model.dim}): '
        f'random input {random_cos:.4f}, designed canary {designed_cos:.4f}; '
        f'design pool {pool_cos:.4f}; health {canary.health:.5f}; '
        f'||g|| {canary.gradient_norm:.3f}')
  # Observed: random 0.146, designed 0.047.
  assert designed_cos < 0.5 * random_cos
  assert designed_cos < 0.06
  assert canary.gradient_norm >= CLIP
  assert canary.health > 0.99


def test_design_reduces_equation_one_and_reports_it_consistently(frozen):
  model, params, pool, _ = frozen
  canary = canife_design.CanaryDesigner(model).design(
      params, pool, norm_target=CLIP, steps=100, seed=5)
  assert canary.losses.shape == (101,)
  # L(z) of Eq. (1) recomputed independently from the returned canary.
  gradient = canary.gradient.astype(np.float64)
  expected = (np.sum((pool.astype(np.float64) @ gradient)**2) +
              max(CLIP - np.linalg.norm(gradient), 0.0)**2)
  assert canary.final_loss == pytest.approx(expected, rel=1e-3)
  assert canary.final_loss < canary.initial_loss
  assert canary.health == pytest.approx(
      (canary.initial_loss - canary.final_loss) / canary.initial_loss)
  # g(z) is the gradient of the canary's soft-label loss at theta.
  oracle = per_example.GradientOracle(model)
  label = tf.nn.softmax(canary.label_logits).numpy()[np.newaxis]
  np.testing.assert_allclose(
      oracle.gradients(params, canary.inputs[np.newaxis], label).numpy()[0],
      canary.gradient, rtol=1e-4, atol=1e-6)
  # u_c is g clipped to C.
  np.testing.assert_allclose(
      canary.update, gradient * min(1.0, CLIP / np.linalg.norm(gradient)),
      rtol=1e-5, atol=1e-7)


def test_norm_penalty_lifts_a_small_gradient_to_the_target(frozen):
  model, params, pool, _ = frozen
  target = 2.0 * canife_design.CanaryDesigner(model).design(
      params, pool, norm_target=CLIP, steps=0, seed=7).gradient_norm
  canary = canife_design.CanaryDesigner(model).design(
      params, pool[:1] * 0.0, norm_target=target, steps=200, seed=7)
  assert canary.gradient_norm >= 0.99 * target


def test_design_is_deterministic_given_the_seed(frozen):
  model, params, pool, _ = frozen
  designer = canife_design.CanaryDesigner(model)
  first = designer.design(params, pool, norm_target=CLIP, steps=20, seed=11)
  again = designer.design(params, pool, norm_target=CLIP, steps=20, seed=11)
  np.testing.assert_array_equal(first.inputs, again.inputs)
  np.testing.assert_array_equal(first.losses, again.losses)


def test_canary_health_and_bad_arguments():
  assert canife_design.canary_health(10.0, 0.1) == pytest.approx(0.99)
  with pytest.raises(ValueError, match='initial_loss'):
    canife_design.canary_health(0.0, 0.0)
  model = feedforward.FeedForward((2, 2), hidden_units=2, num_classes=2)
  designer = canife_design.CanaryDesigner(model)
  params = model.initial_params(0)
  with pytest.raises(ValueError, match='mock_updates'):
    designer.design(params, np.zeros((2, 3)), norm_target=1.0)
  with pytest.raises(ValueError, match='steps'):
    designer.design(params, np.zeros((1, model.dim)), norm_target=1.0, steps=-1)
  with pytest.raises(ValueError, match='norm_target'):
    designer.design(params, np.zeros((1, model.dim)), norm_target=0.0)
  with pytest.raises(ValueError, match='updates'):
    canife_design.mean_abs_cosine(np.ones(3), np.ones((2, 4)))
