"""Tests for one_shot_epe.tff_engine.tasks.determinism (reproducible dropout).

The input-keyed masks must behave as dropout (Bernoulli keeps at rate 1 - p,
rescaled by 1 / (1 - p); checked with binomial bounds) while being a pure
function of the layer and its input: equal inputs give equal masks, other
inputs or other layers give unrelated masks.
"""

import numpy as np
import tensorflow as tf

from one_shot_epe.tff_engine.tasks import determinism

_N = 40_000


def _model(rate=0.25):
  return determinism.input_keyed_dropout(tf.keras.Sequential([
      tf.keras.Input([_N]),
      tf.keras.layers.Dropout(rate),
      tf.keras.layers.Dropout(rate),
  ]))


def _kept(model, x, layer):
  return model.layers[layer](x, training=True).numpy() != 0


def test_masks_have_dropout_law():
  rate = 0.25
  model = _model(rate)
  x = tf.random.stateless_uniform([1, _N], [1, 2], minval=1.0, maxval=2.0)
  out = model.layers[0](x, training=True).numpy()
  kept = out != 0
  # Keep fraction ~ Binomial(_N, 0.75)/_N, sd 0.0022: 5-sigma bound.
  assert abs(kept.mean() - (1 - rate)) < 0.011
  np.testing.assert_allclose(out[kept], x.numpy()[kept] / (1 - rate),
                             rtol=1e-6)


def test_masks_are_a_pure_function_of_layer_and_input():
  model = _model()
  x = tf.random.stateless_uniform([1, _N], [3, 4], minval=1.0, maxval=2.0)
  y = tf.random.stateless_uniform([1, _N], [5, 6], minval=1.0, maxval=2.0)
  np.testing.assert_array_equal(_kept(model, x, 0), _kept(_model(), x, 0))
  # Independent masks agree on a unit with probability 0.75^2 + 0.25^2 =
  # 0.625; sd of the mean agreement is 0.0024, so 0.6 < agreement < 0.65.
  for a, b in ((_kept(model, x, 0), _kept(model, y, 0)),
               (_kept(model, x, 0), _kept(model, x, 1))):
    assert 0.6 < np.mean(a == b) < 0.65


def test_inference_is_the_identity():
  model = _model()
  x = tf.ones([2, _N])
  np.testing.assert_array_equal(model(x, training=False).numpy(), x.numpy())


def test_model_without_dropout_is_unchanged():
  model = tf.keras.Sequential([tf.keras.Input([3]), tf.keras.layers.Dense(2)])
  layers = list(model.layers)
  assert determinism.input_keyed_dropout(model) is model
  assert list(model.layers) == layers
