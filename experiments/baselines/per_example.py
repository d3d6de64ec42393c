"""Per-example gradients, clipped, in a model's flat parameter space.

With one example per client (the setting of CANIFE's Sec. 4.1 and of Sec. 5.4
of Andrew et al.), a client's model update after one local SGD step is its
example's gradient, and DP-FedSGD clips it to norm C:
u_i = g_i min(1, C/||g_i||) (McMahan et al. 2018). CANIFE's mock clients
(Maddock et al. 2022, Algorithm 1, line 2), its mock rounds, and the DP-SGD
training of the comparison all need these clipped updates, computed here
for a batch at once by vectorising the gradient of each example's loss
(`tf.vectorized_map`).

The loss is the cross-entropy with a label *distribution* (soft label), so the
same code serves real examples (one-hot labels) and CANIFE's canary, whose
label is optimised as a distribution (Sec. 3.3).

A model is any object with `dim` (number of parameters), `num_classes`,
`input_shape` and `logits(flat_params, inputs) -> [n, K]`, e.g.
`experiments.baselines.feedforward.FeedForward`.
"""

from typing import Any

import numpy as np
import tensorflow as tf

from one_shot_epe import validation

__all__ = ['GradientOracle', 'check_clip', 'clip_rows', 'one_hot',
           'soft_label_loss']


def one_hot(labels: Any, num_classes: int) -> np.ndarray:
  """float32 [n, K] one-hot rows for integer labels in [0, K).

  Args:
    labels: Integer labels, 1-D.
    num_classes: K.

  Returns:
    The one-hot rows.

  Raises:
    ValueError: `labels` is not a 1-D integer array in [0, K).
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.dtype.kind not in 'iu' or (
      labels.size and (labels.min() < 0 or labels.max() >= num_classes)):
    raise ValueError(
        f'labels must be a 1-D integer array in [0, {num_classes}).')
  return np.eye(num_classes, dtype=np.float32)[labels]


def check_clip(clip: Any) -> float:
  """The clip norm C as a float > 0 (its rule in `validation.PARAMETERS`).

  Args:
    clip: The clip norm as given.

  Returns:
    C as a float.
  """
  return validation.PARAMETERS['clip']('clip', clip)


def clip_rows(matrix: tf.Tensor, clip: float) -> tf.Tensor:
  """Scales each row g to g min(1, C / ||g||) (rows of norm 0 stay 0).

  Args:
    matrix: Rows g, [n, d].
    clip: C > 0.

  Returns:
    The clipped rows.
  """
  norms = tf.norm(matrix, axis=1, keepdims=True)
  return matrix * tf.minimum(1.0, clip / tf.maximum(norms, 1e-30))


def soft_label_loss(model: Any, flat_params: tf.Tensor, inputs: tf.Tensor,
                    label_probs: tf.Tensor) -> tf.Tensor:
  """Per-example cross-entropy -sum_k p_k log softmax(logits)_k, shape [n].

  Args:
    model: The model (`logits(flat_params, inputs)`).
    flat_params: float32 [d].
    inputs: The batch, [n, *input_shape].
    label_probs: Label distributions p, [n, K].

  Returns:
    The losses.
  """
  return tf.nn.softmax_cross_entropy_with_logits(
      labels=label_probs, logits=model.logits(flat_params, inputs))


class GradientOracle:
  """Compiled per-example gradient computations for one model.

  All methods take float32 flat parameters [d], inputs [n, *input_shape] and
  label distributions [n, K], and return TensorFlow tensors.
  """

  def __init__(self, model: Any):
    self.model = model
    params_spec = tf.TensorSpec([model.dim], tf.float32)
    inputs_spec = tf.TensorSpec([None, *model.input_shape], tf.float32)
    labels_spec = tf.TensorSpec([None, model.num_classes], tf.float32)
    clip_spec = tf.TensorSpec([], tf.float32)
    self._gradients = tf.function(
        self._per_example_gradients,
        input_signature=[params_spec, inputs_spec, labels_spec])
    self._clipped = tf.function(
        self._clipped_gradients,
        input_signature=[params_spec, inputs_spec, labels_spec, clip_spec])
    self._clipped_sum = tf.function(
        self._clipped_gradient_sum,
        input_signature=[params_spec, inputs_spec, labels_spec, clip_spec])
    self._accuracy = tf.function(
        self._fraction_correct,
        input_signature=[params_spec, inputs_spec, labels_spec])

  def _per_example_gradients(self, flat_params: tf.Tensor, inputs: tf.Tensor,
                             label_probs: tf.Tensor) -> tf.Tensor:

    def one(example):
      x, p = example
      with tf.GradientTape() as tape:
        tape.watch(flat_params)
        loss = soft_label_loss(self.model, flat_params, x[tf.newaxis],
                               p[tf.newaxis])[0]
      return tape.gradient(loss, flat_params)

    return tf.vectorized_map(one, (inputs, label_probs))

  def _clipped_gradients(self, flat_params, inputs, label_probs, clip):
    return clip_rows(self._per_example_gradients(flat_params, inputs,
                                                 label_probs), clip)

  def _clipped_gradient_sum(self, flat_params, inputs, label_probs, clip):
    return tf.reduce_sum(
        self._clipped_gradients(flat_params, inputs, label_probs, clip), axis=0)

  def _fraction_correct(self, flat_params, inputs, label_probs):
    predicted = tf.argmax(self.model.logits(flat_params, inputs), axis=1)
    return tf.reduce_mean(
        tf.cast(predicted == tf.argmax(label_probs, axis=1), tf.float32))

  def gradients(self, flat_params, inputs, label_probs) -> tf.Tensor:
    """Per-example gradients g_i, float32 [n, d].

    Args:
      flat_params: theta, float32 [d], where the gradients are taken.
      inputs: The n examples, [n, *input_shape].
      label_probs: Their label distributions (soft labels allowed), [n, K].

    Returns:
      The gradients, unclipped.
    """
    return self._gradients(flat_params, inputs, label_probs)

  def clipped(self, flat_params, inputs, label_probs, clip: float) -> tf.Tensor:
    """Clipped updates u_i = g_i min(1, C/||g_i||), float32 [n, d].

    Args:
      flat_params: theta, float32 [d], the model the clients start from.
      inputs: One example per client, [n, *input_shape].
      label_probs: Their label distributions, [n, K].
      clip: C > 0.

    Returns:
      The clipped updates, one row per client.
    """
    return self._clipped(flat_params, inputs, label_probs,
                         tf.constant(check_clip(clip), tf.float32))

  def clipped_sum(self, flat_params, inputs, label_probs,
                  clip: float) -> tf.Tensor:
    """sum_i u_i over the batch, float32 [d] (zeros for an empty batch).

    Args:
      flat_params: theta, float32 [d], the round's model.
      inputs: The round's cohort, one example per client, [n, *input_shape]
        (n = 0 allowed).
      label_probs: Their label distributions, [n, K].
      clip: C > 0.

    Returns:
      The sum of the clipped updates.
    """
    return self._clipped_sum(flat_params, inputs, label_probs,
                             tf.constant(check_clip(clip), tf.float32))

  def accuracy(self, flat_params, inputs, label_probs) -> float:
    """Fraction of examples whose arg-max logit is the arg-max label.

    Args:
      flat_params: theta, float32 [d], the model scored.
      inputs: The examples to classify, [n, *input_shape].
      label_probs: Their labels as distributions (the arg-max is the
        class), [n, K].

    Returns:
      The accuracy.
    """
    return float(self._accuracy(flat_params, inputs, label_probs))
