"""CANIFE canary design (Maddock et al. 2022, Sec. 3.3 and Algorithm 1).

A rogue client crafts one training example z = (x, label) whose gradient
g(z) = grad_theta l(theta; z) at the current (frozen) model theta is
orthogonal to the clipped updates u_i of mock clients built from a design
pool, while its norm is at least a constant C (the clip norm):

  L(z) = sum_i <u_i, g(z)>^2 + max(C - ||g(z)||, 0)^2                    (1)

The first term is an (uncentred) covariance estimate of the real updates
along g(z) (Appendix A: minimising g^T Sigma g separates the two score
Gaussians); the second keeps ||u_c||^2 = C^2, the gap between them. Algorithm
1, line 5 writes the first term with C * g(z), a factor C^2 that does not
change the minimiser's direction; Eq. (1) is implemented (the two agree at
the paper's C = 1). The pixels x and the label distribution softmax(a) (a
"soft label", Sec. 5.4 of Andrew et al.) are optimised with Adam (lr 1.0 in
CANIFE's Sec. 4, default 2 500 steps), starting from random values (CANIFE's
Sec. 4.2: "the canary sample z is initialised randomly"), with the model held
fixed. Evaluating grad_z L(z) differentiates through g(z), i.e. a double
backward pass.

Canary health (Sec. 4.2) is the relative reduction of the design loss,
(L(z_0) - L(z_T)) / L(z_0): 1 means the loss was driven to 0.

The canary's model update is the rogue client's clipped update,
u_c = g(z_T) min(1, C/||g(z_T)||) (Algorithm 1, line 9; with one example and
one local SGD step the update is proportional to g).
"""

import dataclasses
import math
from typing import Any

import numpy as np
import tensorflow as tf

from experiments.baselines import per_example
from one_shot_epe import validation

__all__ = ['ADAM_BETA1', 'ADAM_BETA2', 'ADAM_EPSILON', 'CanaryDesigner',
           'DesignedCanary', 'canary_health', 'mean_abs_cosine']

# Adam's moment decays and epsilon: PyTorch's (and Kingma & Ba's) defaults, as
# CANIFE used PyTorch's Adam.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8


@dataclasses.dataclass(frozen=True)
class DesignedCanary:
  """The result of canary design.

  Attributes:
    inputs: float32 [*input_shape], the optimised input x_T.
    label_logits: float32 [K]; the canary's label is softmax(label_logits).
    gradient: float32 [d], g(z_T).
    update: float32 [d], u_c = g(z_T) min(1, C/||g(z_T)||).
    gradient_norm: ||g(z_T)||.
    initial_loss: L(z_0).
    final_loss: L(z_T).
    losses: float64 [T + 1], L(z_t) for t = 0..T.
  """
  inputs: np.ndarray
  label_logits: np.ndarray
  gradient: np.ndarray
  update: np.ndarray
  gradient_norm: float
  initial_loss: float
  final_loss: float
  losses: np.ndarray

  @property
  def health(self) -> float:
    """Canary health (CANIFE Sec. 4.2): relative reduction of design loss."""
    return canary_health(self.initial_loss, self.final_loss)


def canary_health(initial_loss: float, final_loss: float) -> float:
  """(L_0 - L_T) / L_0; 1 for a loss driven to 0, 0 for no progress.

  Args:
    initial_loss: L_0, the design loss before optimisation.
    final_loss: L_T, after it.

  Returns:
    The canary's health.

  Raises:
    ValueError: unless L_0 > 0 and L_T >= 0 are finite.
  """
  initial_loss, final_loss = float(initial_loss), float(final_loss)
  if not math.isfinite(initial_loss) or initial_loss <= 0.0:
    raise ValueError(
        f'initial_loss must be finite and > 0; got {initial_loss!r}.')
  if not math.isfinite(final_loss) or final_loss < 0.0:
    raise ValueError(f'final_loss must be finite and >= 0; got {final_loss!r}.')
  return (initial_loss - final_loss) / initial_loss


class CanaryDesigner:
  """Designs CANIFE canaries for one model (compiled once, reused per audit).

  Attributes:
    model: The model (see `experiments.baselines.per_example`).
  """

  def __init__(self, model: Any):
    self.model = model
    spec = tf.TensorSpec
    self._design = tf.function(
        self._optimise,
        input_signature=[
            spec([model.dim], tf.float32),                 # theta
            spec([None, model.dim], tf.float32),           # mock updates U
            spec([*model.input_shape], tf.float32),        # x_0
            spec([model.num_classes], tf.float32),         # a_0
            spec([], tf.float32),                          # C (norm target)
            spec([], tf.int32),                            # steps T
            spec([], tf.float32),                          # learning rate
        ])
    self._gradient = tf.function(
        self._canary_gradient,
        input_signature=[
            spec([model.dim], tf.float32),
            spec([*model.input_shape], tf.float32),
            spec([model.num_classes], tf.float32),
        ])

  def _canary_gradient(self, params: tf.Tensor, inputs: tf.Tensor,
                       label_logits: tf.Tensor) -> tf.Tensor:
    """g(z) = grad_theta of the soft-label cross-entropy of z, [d]."""
    with tf.GradientTape() as tape:
      tape.watch(params)
      loss = per_example.soft_label_loss(
          self.model, params, inputs[tf.newaxis],
          tf.nn.softmax(label_logits)[tf.newaxis])[0]
    return tape.gradient(loss, params)

  def _loss(self, params, updates, inputs, label_logits, norm_target):
    """L(z) of Eq. (1)."""
    gradient = self._canary_gradient(params, inputs, label_logits)
    dots = tf.linalg.matvec(updates, gradient)
    shortfall = tf.nn.relu(norm_target - tf.norm(gradient))
    return tf.reduce_sum(tf.square(dots)) + tf.square(shortfall)

  def _optimise(self, params, updates, inputs, label_logits, norm_target,
                steps, learning_rate):
    """Adam on (x, a) for `steps` steps; returns x_T, a_T and L(z_t), t=0..T."""
    variables = (inputs, label_logits)
    zeros = tuple(tf.zeros_like(v) for v in variables)

    def loss_and_grads(x, a):
      with tf.GradientTape() as tape:
        tape.watch([x, a])
        loss = self._loss(params, updates, x, a, norm_target)
      return loss, tape.gradient(loss, [x, a])

    def body(t, x, a, m, v, losses):
      loss, grads = loss_and_grads(x, a)
      step = tf.cast(t + 1, tf.float32)
      new_m = tuple(ADAM_BETA1 * mi + (1.0 - ADAM_BETA1) * g
                    for mi, g in zip(m, grads))
      new_v = tuple(ADAM_BETA2 * vi + (1.0 - ADAM_BETA2) * tf.square(g)
                    for vi, g in zip(v, grads))
      correction1 = 1.0 - tf.pow(ADAM_BETA1, step)
      correction2 = 1.0 - tf.pow(ADAM_BETA2, step)
      x, a = (w - learning_rate * (mi / correction1) /
              (tf.sqrt(vi / correction2) + ADAM_EPSILON)
              for w, mi, vi in zip((x, a), new_m, new_v))
      return t + 1, x, a, new_m, new_v, losses.write(t, loss)

    _, x, a, _, _, losses = tf.while_loop(
        lambda t, *_: t < steps, body,
        (tf.constant(0), inputs, label_logits, zeros, zeros,
         tf.TensorArray(tf.float32, size=steps + 1)))
    final_loss = self._loss(params, updates, x, a, norm_target)
    return x, a, losses.write(steps, final_loss).stack()

  @validation.arguments('seed', norm_target=validation.Real(0.0, low_open=True),
                        steps=validation.Int(0),
                        learning_rate=validation.Real(0.0, low_open=True))
  def design(self, params: Any, mock_updates: Any, *, norm_target: float,
             steps: int = 2500, learning_rate: float = 1.0,
             seed: int = 0) -> DesignedCanary:
    """Algorithm 1, lines 3-9: optimise a canary and return it with its update.

    Args:
      params: The frozen model theta, float32 [d].
      mock_updates: Clipped updates u_i of the mock clients, float [m, d].
      norm_target: C in Eq. (1): the canary gradient's norm is pushed to at
        least C (CANIFE sets it to the clip norm). The update u_c is clipped
        to the same C.
      steps: Adam steps T (>= 0).
      learning_rate: Adam's learning rate beta (> 0).
      seed: Seed of the random initialisation: pixels ~ N(0, 1) in model input
        space (the scale of standardised images) and label logits ~ N(0, 1).

    Returns:
      The canary: its input, label, gradient, clipped update and losses.

    Raises:
      ValueError: `params` or `mock_updates` has the wrong shape.
    """
    updates = np.asarray(mock_updates, np.float32)
    if updates.ndim != 2 or updates.shape[1] != self.model.dim or (
        updates.shape[0] < 1):
      raise ValueError('mock_updates must have shape [m >= 1, '
                       f'{self.model.dim}]; got {updates.shape}.')
    params = np.asarray(params, np.float32)
    if params.shape != (self.model.dim,):
      raise ValueError(f'params must have shape [{self.model.dim}]; got '
                       f'{params.shape}.')
    rng = np.random.default_rng(seed)
    inputs0 = rng.standard_normal(self.model.input_shape).astype(np.float32)
    logits0 = rng.standard_normal(self.model.num_classes).astype(np.float32)
    inputs, label_logits, losses = self._design(
        tf.constant(params), tf.constant(updates), tf.constant(inputs0),
        tf.constant(logits0), tf.constant(norm_target, tf.float32),
        tf.constant(steps, tf.int32), tf.constant(learning_rate, tf.float32))
    gradient = self._gradient(tf.constant(params), inputs, label_logits).numpy()
    norm = float(np.linalg.norm(gradient.astype(np.float64)))
    update = gradient * np.float32(min(1.0, norm_target / max(norm, 1e-30)))
    losses = losses.numpy().astype(np.float64)
    return DesignedCanary(
        inputs=inputs.numpy(), label_logits=label_logits.numpy(),
        gradient=gradient, update=update.astype(np.float32),
        gradient_norm=norm, initial_loss=float(losses[0]),
        final_loss=float(losses[-1]), losses=losses)


def mean_abs_cosine(vector: Any, updates: Any) -> float:
  """Mean over rows u_i of |cos(vector, u_i)| (rows of norm 0 are skipped).

  The orthogonality figure of a canary: its gradient against held-out clipped
  updates.

  Args:
    vector: The canary's gradient, [d].
    updates: The clipped updates, [m, d].

  Returns:
    The mean |cosine| over the non-zero rows.

  Raises:
    ValueError: `updates` is not [m, d], `vector` is zero, or every row is.
  """
  vector = np.asarray(vector, np.float64).reshape(-1)
  updates = np.asarray(updates, np.float64)
  if updates.ndim != 2 or updates.shape[1] != vector.size:
    raise ValueError(f'updates must have shape [m, {vector.size}]; got '
                     f'{updates.shape}.')
  vector_norm = np.linalg.norm(vector)
  if vector_norm == 0.0:
    raise ValueError('vector must be non-zero.')
  norms = np.linalg.norm(updates, axis=1)
  keep = norms > 0
  if not np.any(keep):
    raise ValueError('updates must have at least one non-zero row.')
  cosines = updates[keep] @ vector / (norms[keep] * vector_norm)
  return float(np.mean(np.abs(cosines)))
