"""A two-layer feed-forward classifier whose parameters are one flat vector.

Section 5.4 of Andrew et al. (ICLR 2024) compares the one-shot estimator with
CANIFE on "a two-layer feedforward network on the fashion MNIST dataset". Both
methods work in the flattened parameter space: the one-shot canaries are
directions of R^d (`one_shot_epe.tff_engine.canaries`) and CANIFE's design loss takes
inner products of flattened gradients. Keeping the parameters as a single
float32 vector theta in R^d makes every gradient a d-vector directly.

Layout of theta (the order `tf.nest.flatten` would give the list
[W1, b1, W2, b2]): W1 [p, h] row-major, b1 [h], W2 [h, K], b2 [K], where p is
the number of input features (28 x 28 = 784 for images), h the hidden width
and K the number of classes, so d = p h + h + h K + K. The logits are
relu(x W1 + b1) W2 + b2 for flattened inputs x.
"""

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from one_shot_epe import validation

__all__ = ['FeedForward']


class FeedForward:
  """Two-layer ReLU network x -> relu(x W1 + b1) W2 + b2 on flat parameters.

  Attributes:
    input_shape: Shape of one input example, e.g. (28, 28).
    hidden_units: Width h of the hidden layer.
    num_classes: Number K of classes.
    dim: Number d of parameters.
  """

  @validation.arguments(hidden_units=validation.Int(1),
                        num_classes=validation.Int(2))
  def __init__(self, input_shape: Sequence[int] = (28, 28),
               hidden_units: int = 100, num_classes: int = 10):
    if isinstance(input_shape, (str, bytes)) or not isinstance(
        input_shape, Sequence) or not input_shape:
      raise ValueError('input_shape must be a non-empty sequence of integers '
                       f'>= 1; got {input_shape!r}.')
    self.input_shape = tuple(
        validation.check_int('input_shape entries', s, low=1) for s in input_shape)
    self.hidden_units = hidden_units
    self.num_classes = num_classes
    self.num_features = math.prod(self.input_shape)
    h, k, p = self.hidden_units, self.num_classes, self.num_features
    self._shapes = ((p, h), (h,), (h, k), (k,))
    self._sizes = tuple(math.prod(s) for s in self._shapes)
    self.dim = sum(self._sizes)

  def initial_params(self, seed: int) -> np.ndarray:
    """Glorot-uniform weights and zero biases, as Keras's Dense, float32 [d].

    A pure function of `seed` (numpy's default generator).

    Args:
      seed: The generator's seed.

    Returns:
      The flat parameters.
    """
    rng = np.random.default_rng(seed)
    parts = []
    for shape in self._shapes:
      if len(shape) == 2:
        limit = math.sqrt(6.0 / (shape[0] + shape[1]))
        parts.append(rng.uniform(-limit, limit, size=shape).reshape(-1))
      else:
        parts.append(np.zeros(shape))
    return np.concatenate(parts).astype(np.float32)

  def unflatten(self, flat_params: tf.Tensor) -> list[tf.Tensor]:
    """[W1, b1, W2, b2] from the flat vector (differentiable).

    Args:
      flat_params: float32 [d].

    Returns:
      The layers' weights and biases.
    """
    parts = tf.split(flat_params, self._sizes)
    return [tf.reshape(part, shape) for part, shape in zip(parts, self._shapes)]

  def logits(self, flat_params: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
    """Logits [n, K] of a batch of inputs [n, *input_shape].

    Args:
      flat_params: float32 [d].
      inputs: The batch.

    Returns:
      The logits.
    """
    w1, b1, w2, b2 = self.unflatten(flat_params)
    features = tf.reshape(tf.cast(inputs, tf.float32), [-1, self.num_features])
    hidden = tf.nn.relu(tf.matmul(features, w1) + b1)
    return tf.matmul(hidden, w2) + b2
