"""Reproducible client training: seeded dropout and in-order batches.

Two parts of TFF's EMNIST baseline make a run irreproducible even with every
seed fixed, and so make a resumed run drift from an uninterrupted one:

* Keras `Dropout` draws its masks with an unseeded stateful op, which TFF's
  C++ runtime executes for many clients on parallel threads.
* TFF's EMNIST preprocessing maps batches in parallel with
  `deterministic=False`, so a client can see its batches in another order.

`input_keyed_dropout` gives each dropout layer masks that are a pure function
of (layer seed, the exact bytes of the layer's input): a
`tf.random.stateless_uniform` draw keyed by a fingerprint of the input. Inputs
change at every step (they depend on the batch and on the current weights), so
the masks are as fresh as unseeded ones — independent Bernoulli(1 - rate)
keeps per unit, rescaled by 1 / (1 - rate) — but two runs that reach the same
step with the same weights and batch draw the same mask. The batch-order fix
is to run TFF's own preprocessing with one map call in flight
(`num_parallel_calls=1`), which keeps batches in order; the map only reshapes
a batch, so nothing is lost.
"""

import tensorflow as tf

__all__ = ['input_keyed_dropout']


class _InputKeyedGenerator:
  """Stands in for a Keras layer's `RandomGenerator`; only `dropout` is used."""

  def __init__(self, layer_seed: int):
    self._layer_seed = layer_seed

  def dropout(self, inputs: tf.Tensor, rate: float,
              noise_shape: tf.Tensor | None = None) -> tf.Tensor:
    """Inverted dropout with a mask keyed by (layer seed, input bytes)."""
    fingerprint = tf.fingerprint(tf.reshape(inputs, [1, -1]))[0]  # uint8 [8]
    key = tf.bitcast(fingerprint, tf.int64)
    seed = tf.stack([tf.constant(self._layer_seed, tf.int64), key])
    return tf.nn.experimental.stateless_dropout(
        inputs, rate=rate, seed=seed, noise_shape=noise_shape)


def input_keyed_dropout(model: tf.keras.Model, seed: int = 0) -> tf.keras.Model:
  """Makes every `Dropout` layer of `model` draw reproducible masks (in place).

  Layer i (in `model.layers` order) uses layer seed `seed + i`, so two dropout
  layers never share masks even on equal inputs.

  Args:
    model: A Keras model; its `Dropout` layers are changed in place.
    seed: The first dropout layer's seed.

  Returns:
    `model` itself.
  """
  for index, layer in enumerate(model.layers):
    if isinstance(layer, tf.keras.layers.Dropout):
      layer._random_generator = _InputKeyedGenerator(seed + index)  # pylint: disable=protected-access
  return model
