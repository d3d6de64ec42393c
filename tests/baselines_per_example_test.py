"""Tests of experiments.baselines.per_example and .feedforward.

Truth: the two-layer network's forward pass and its cross-entropy gradient
written out by hand in numpy (backpropagation in closed form).
"""

import numpy as np
import pytest
import tensorflow as tf

from experiments.baselines import feedforward
from experiments.baselines import per_example


def _numpy_forward(model, params, inputs):
  p, h, k = model.num_features, model.hidden_units, model.num_classes
  w1 = params[:p * h].reshape(p, h)
  b1 = params[p * h:p * h + h]
  w2 = params[p * h + h:p * h + h + h * k].reshape(h, k)
  b2 = params[p * h + h + h * k:]
  x = inputs.reshape(len(inputs), -1).astype(np.float64)
  pre = x @ w1 + b1
  hidden = np.maximum(pre, 0.0)
  return x, pre, hidden, w2, hidden @ w2 + b2


def _numpy_gradients(model, params, inputs, label_probs):
  """Closed-form per-example gradient of -sum_k p_k log softmax(logits)_k."""
  x, pre, hidden, w2, logits = _numpy_forward(model, params.astype(np.float64),
                                              inputs)
  shifted = logits - logits.max(axis=1, keepdims=True)
  softmax = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
  dlogits = softmax * label_probs.sum(axis=1, keepdims=True) - label_probs
  dhidden = (dlogits @ w2.T) * (pre > 0)
  rows = []
  for i in range(len(x)):
    rows.append(np.concatenate([
        np.outer(x[i], dhidden[i]).ravel(), dhidden[i],
        np.outer(hidden[i], dlogits[i]).ravel(), dlogits[i]]))
  return np.array(rows)


@pytest.fixture(scope='module')
def setup():
  model = feedforward.FeedForward((3, 4), hidden_units=5, num_classes=3)
  rng = np.random.default_rng(0)
  params = model.initial_params(1) + 0.1 * rng.standard_normal(
      model.dim).astype(np.float32)
  inputs = rng.standard_normal((7, 3, 4)).astype(np.float32)
  soft = rng.dirichlet(np.ones(3), size=7).astype(np.float32)
  return model, per_example.GradientOracle(model), params, inputs, soft


def test_dimension_and_forward_pass_match_numpy(setup):
  model, _, params, inputs, _ = setup
  assert model.dim == 12 * 5 + 5 + 5 * 3 + 3
  logits = model.logits(tf.constant(params), tf.constant(inputs)).numpy()
  np.testing.assert_allclose(logits, _numpy_forward(model, params, inputs)[-1],
                             rtol=1e-5, atol=1e-5)


def test_initial_params_are_seeded_glorot_with_zero_biases():
  model = feedforward.FeedForward((28, 28), hidden_units=100)
  first, again = model.initial_params(3), model.initial_params(3)
  np.testing.assert_array_equal(first, again)
  w1 = first[:784 * 100]
  limit = np.sqrt(6.0 / (784 + 100))
  assert np.abs(w1).max() <= limit
  # Uniform on [-limit, limit]: variance limit^2 / 3 (78 400 draws, 1% slack).
  assert abs(np.var(w1) / (limit**2 / 3.0) - 1.0) < 0.01
  np.testing.assert_array_equal(first[784 * 100:784 * 100 + 100], 0.0)


def test_per_example_gradients_match_closed_form(setup):
  model, oracle, params, inputs, soft = setup
  got = oracle.gradients(params, inputs, soft).numpy()
  np.testing.assert_allclose(got, _numpy_gradients(model, params, inputs, soft),
                             rtol=1e-4, atol=1e-5)


def test_clipping_scales_long_rows_to_clip_and_keeps_short_rows(setup):
  model, oracle, params, inputs, soft = setup
  raw = _numpy_gradients(model, params, inputs, soft)
  clip = float(np.median(np.linalg.norm(raw, axis=1)))
  clipped = oracle.clipped(params, inputs, soft, clip).numpy()
  norms = np.linalg.norm(raw, axis=1)
  expected = raw * np.minimum(1.0, clip / norms)[:, None]
  np.testing.assert_allclose(clipped, expected, rtol=1e-4, atol=1e-5)
  assert np.all(np.linalg.norm(clipped, axis=1) <= clip * (1 + 1e-5))
  np.testing.assert_allclose(
      oracle.clipped_sum(params, inputs, soft, clip).numpy(),
      expected.sum(axis=0), rtol=1e-4, atol=1e-5)


def test_accuracy_counts_argmax_matches(setup):
  model, oracle, params, inputs, _ = setup
  predicted = _numpy_forward(model, params, inputs)[-1].argmax(axis=1)
  labels = per_example.one_hot(np.array([predicted[0]] * 7), 3)
  assert oracle.accuracy(params, inputs, labels) == pytest.approx(
      np.mean(predicted == predicted[0]))


@pytest.mark.parametrize('bad', [0.0, -1.0, float('nan'), 'x'])
def test_bad_clip_is_rejected(bad):
  with pytest.raises(ValueError, match='clip'):
    per_example.check_clip(bad)


def test_bad_model_shapes_and_labels_are_rejected():
  with pytest.raises(ValueError, match='hidden_units'):
    feedforward.FeedForward((2, 2), hidden_units=0)
  with pytest.raises(ValueError, match='num_classes'):
    feedforward.FeedForward((2, 2), hidden_units=2, num_classes=1)
  with pytest.raises(ValueError, match='input_shape'):
    feedforward.FeedForward(())
  with pytest.raises(ValueError, match='labels'):
    per_example.one_hot(np.array([0, 3]), 3)
