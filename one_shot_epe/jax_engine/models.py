"""The paper's two models as pure JAX functions, equal to TFF's Keras baselines.

Andrew et al. (ICLR 2024) train TFF's EMNIST `cnn_dropout` (Section 5.2.1, 1.2M
parameters) and the StackOverflow word LSTM of Reddi et al. 2020 (Section 5.1,
4.1M parameters). Here both are written with jax.numpy / jax.lax only (no flax:
the code must run on jax 0.4.14 and on the newest jax), with

* parameters as a tuple of arrays in the order of the Keras model's
  `get_weights()` (the order of `tff.learning`'s trainable weights, hence of
  the flattened update that canaries live in; `param_names` names them);
* `init`: Keras' initialisers in distribution (glorot uniform kernels, zero
  biases, uniform(-0.05, 0.05) embeddings, orthogonal LSTM recurrent kernel,
  LSTM forget-gate bias 1);
* `from_keras_weights`: the Keras model's `get_weights()` list (numpy arrays)
  as parameters, so both backends can start from the same weights;
* `logits` with an optional dropout key (None: dropout off, deterministic);
* `loss`: the batch loss TFF's `from_keras_model` minimises, with a mask of
  valid examples (padded batches, `data.client_batches`);
* `correct`: the task's accuracy metric's numerator and denominator
  (`correct_counts` over the word models' `counted` targets: TFF's masks).

Widths are arguments so tests can use tiny models; the defaults are the paper's.
"""

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from one_shot_epe import validation

__all__ = ['EMBEDDING_INIT_RANGE', 'EmnistCnn', 'InVocabWordLstm', 'PAD_TOKEN',
           'Params', 'Shapes', 'WordLstm', 'correct_counts', 'glorot_uniform',
           'orthogonal']

Params = tuple[jax.Array, ...]
Shapes = tuple[tuple[int, ...], ...]

# Keras' default `Embedding` initialiser: uniform(-0.05, 0.05).
EMBEDDING_INIT_RANGE = 0.05
# Keras' token id for padding: `Embedding(mask_zero=True)` masks it.
PAD_TOKEN = 0


def glorot_uniform(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Keras' GlorotUniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).

  For a kernel of shape (..., fan_in_per_unit, fan_out_per_unit) the receptive
  field (the leading dimensions of a conv kernel) multiplies both fans.

  Args:
    key: PRNG key.
    shape: Kernel shape, at least 2-D; the last two axes are (fan_in,
      fan_out) per receptive-field position.

  Returns:
    float32 array of `shape`.
  """
  receptive = math.prod(shape[:-2])
  fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
  limit = math.sqrt(6.0 / (fan_in + fan_out))
  return jax.random.uniform(key, shape, jnp.float32, -limit, limit)


def orthogonal(key: jax.Array, shape: tuple[int, int]) -> jax.Array:
  """Keras' Orthogonal (gain 1): QR of a Gaussian matrix, sign-corrected.

  The result has orthonormal rows (rows < columns) or columns (otherwise),
  Haar-distributed as in Keras.

  Args:
    key: PRNG key.
    shape: (rows, cols) of the matrix.

  Returns:
    float32 [rows, cols] array.
  """
  rows, cols = shape
  normal = jax.random.normal(key, (max(rows, cols), min(rows, cols)),
                             jnp.float32)
  q, r = jnp.linalg.qr(normal)
  q = q * jnp.sign(jnp.diag(r))
  return q.T if rows < cols else q


def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
  return x @ kernel + bias


def _dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout (Keras): keep with prob 1 - rate, rescale by 1/(1-rate)."""
  if key is None:
    return x
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0.0)


def _masked_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
  """sum(values * weights) / sum(weights); 0 when no weight is set."""
  total = jnp.sum(weights)
  return jnp.sum(values * weights) / jnp.maximum(total, 1.0)


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Sparse softmax cross entropy per example (labels: int class ids)."""
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def correct_counts(logits: jax.Array, labels: jax.Array,
                   weights: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(correct, counted): argmax hits and targets, weighted by `weights`.

  Args:
    logits: float [..., classes].
    labels: int [...] class ids.
    weights: [...] 1 for a counted target, 0 for one left out.

  Returns:
    Scalars sum(weights [argmax == label]) and sum(weights).
  """
  hits = jnp.argmax(logits, axis=-1) == labels
  return jnp.sum(hits * weights), jnp.sum(weights)


def _check_keras_weights(weights: Sequence[np.ndarray], shapes: Shapes,
                         names: tuple[str, ...]) -> Params:
  """The Keras weights as float32 jax arrays, after checking their shapes."""
  if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
    raise TypeError('weights must be the list from the Keras model\'s '
                    f'get_weights(); got {type(weights).__name__}.')
  if len(weights) != len(shapes):
    raise ValueError(f'weights must hold {len(shapes)} arrays ({names}); got '
                     f'{len(weights)}.')
  params = []
  for name, shape, weight in zip(names, shapes, weights):
    weight = np.asarray(weight)
    if weight.shape != shape:
      raise ValueError(f'weights[{name}] must have shape {shape}; got '
                       f'{weight.shape}.')
    params.append(jnp.asarray(weight, jnp.float32))
  return tuple(params)


class _Model:
  """What both models derive from their `param_shapes()` and `param_names`."""

  def num_parameters(self) -> int:
    """d, the number of trainable scalars.

    Returns:
      The sum of the products of `param_shapes()`.
    """
    return sum(math.prod(shape) for shape in self.param_shapes())

  def from_keras_weights(self, weights: Sequence[np.ndarray]) -> Params:
    """Parameters from the Keras model's `get_weights()` (numpy arrays).

    Args:
      weights: The list of `get_weights()`, one array per entry of
        `param_names`, each of the shape in `param_shapes()`.

    Returns:
      The parameters, float32 jax arrays.

    Raises:
      TypeError: `weights` is not a sequence (a string included).
      ValueError: it holds another number of arrays, or an array has another
        shape than `param_shapes()`.
    """
    return _check_keras_weights(weights, self.param_shapes(), self.param_names)


@dataclasses.dataclass(frozen=True)
class EmnistCnn(_Model):
  """TFF's EMNIST `cnn_dropout` (`emnist_models.create_conv_dropout_model`).

  conv 3x3 valid relu (conv1_filters), conv 3x3 valid relu (conv2_filters),
  2x2 max-pool, dropout 0.25, flatten, dense relu (dense_units), dropout 0.5,
  dense (num_classes) softmax. With the defaults: 320 + 18,496 + 1,179,776 +
  7,998 = 1,206,590 parameters. Inputs are pixels [batch, 28, 28] (TFF's
  preprocessing adds the channel axis, done here too) and int class labels.
  """
  conv1_filters: int = 32
  conv2_filters: int = 64
  dense_units: int = 128
  num_classes: int = 62
  image_size: int = 28

  dropout_rates = (0.25, 0.5)
  param_names = ('conv2d/kernel', 'conv2d/bias', 'conv2d_1/kernel',
                 'conv2d_1/bias', 'dense/kernel', 'dense/bias',
                 'dense_1/kernel', 'dense_1/bias')

  def __post_init__(self):
    for field in dataclasses.fields(self):
      validation.check_int(field.name, getattr(self, field.name), low=1)
    if self.image_size < 6:
      raise ValueError(f'image_size must be >= 6 (two 3x3 convs and a 2x2 '
                       f'pool); got {self.image_size}.')

  def param_shapes(self) -> Shapes:
    """Shapes of the parameters, in Keras `get_weights()` order.

    Returns:
      One shape tuple per entry of `param_names`.
    """
    pooled = (self.image_size - 4) // 2
    flat = pooled * pooled * self.conv2_filters
    return ((3, 3, 1, self.conv1_filters), (self.conv1_filters,),
            (3, 3, self.conv1_filters, self.conv2_filters),
            (self.conv2_filters,), (flat, self.dense_units),
            (self.dense_units,), (self.dense_units, self.num_classes),
            (self.num_classes,))

  def init(self, key: jax.Array) -> Params:
    """Keras' initialisation: glorot-uniform kernels, zero biases.

    Args:
      key: PRNG key, split into one key per parameter.

    Returns:
      The parameters in `param_names` order, float32.
    """
    shapes = self.param_shapes()
    keys = jax.random.split(key, len(shapes))
    return tuple(
        glorot_uniform(k, shape) if len(shape) > 1 else
        jnp.zeros(shape, jnp.float32) for k, shape in zip(keys, shapes))

  def logits(self, params: Params, pixels: jax.Array,
             dropout_key: jax.Array | None = None) -> jax.Array:
    """Pre-softmax outputs [batch, num_classes]; dropout iff dropout_key.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      pixels: float [batch, image_size, image_size] images, or with a trailing
        channel axis of 1.
      dropout_key: PRNG key for the two dropout layers; None turns dropout off.

    Returns:
      float32 [batch, num_classes] logits.

    Example:
      >>> import jax
      >>> from one_shot_epe.jax_engine import models
      >>> model = models.EmnistCnn()
      >>> model.num_parameters()
      1206590
      >>> params = model.init(jax.random.PRNGKey(0))
      >>> model.logits(params, jax.numpy.zeros((2, 28, 28))).shape
      (2, 62)
    """
    (k1, b1, k2, b2, w3, b3, w4, b4) = params
    x = pixels[..., None] if pixels.ndim == 3 else pixels
    dims = ('NHWC', 'HWIO', 'NHWC')
    x = jax.nn.relu(jax.lax.conv_general_dilated(
        x, k1, (1, 1), 'VALID', dimension_numbers=dims) + b1)
    x = jax.nn.relu(jax.lax.conv_general_dilated(
        x, k2, (1, 1), 'VALID', dimension_numbers=dims) + b2)
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                              (1, 2, 2, 1), 'VALID')
    keys = ((None, None) if dropout_key is None else
            tuple(jax.random.split(dropout_key)))
    x = _dropout(x, self.dropout_rates[0], keys[0])
    x = x.reshape(x.shape[0], -1)
    x = _dropout(jax.nn.relu(_dense(x, w3, b3)), self.dropout_rates[1], keys[1])
    return _dense(x, w4, b4)

  def loss(self, params: Params, pixels: jax.Array, labels: jax.Array,
           mask: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
    """Mean cross entropy over the valid examples (mask [batch], 0/1).

    Keras' `SparseCategoricalCrossentropy()` on the softmax output uses the
    logits it keeps, so this is log-softmax cross entropy, averaged over the
    batch like Keras' SUM_OVER_BATCH_SIZE on the unpadded batch.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      pixels: float [batch, image_size, image_size] images.
      labels: int [batch] class ids in [0, num_classes).
      mask: [batch] 1 for a valid example, 0 for padding.
      dropout_key: PRNG key for dropout; None turns dropout off.

    Returns:
      float32 scalar; 0 when no example is valid.
    """
    logits = self.logits(params, pixels, dropout_key)
    return _masked_mean(_cross_entropy(logits, labels), mask)

  def correct(self, params: Params, pixels: jax.Array, labels: jax.Array,
              mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(correct, counted) of `SparseCategoricalAccuracy` over valid examples.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      pixels: float [batch, image_size, image_size] images.
      labels: int [batch] class ids.
      mask: [batch] 1 for a valid example, 0 for padding.

    Returns:
      (correct, counted): the correct predictions and those counted.
    """
    return correct_counts(self.logits(params, pixels), labels, mask)


@dataclasses.dataclass(frozen=True)
class WordLstm(_Model):
  """TFF's StackOverflow next-word LSTM (`create_recurrent_model`).

  Embedding (num_tokens x embedding_size, token 0 = padding is masked), LSTM
  (lstm_size units, sequences returned), dense (embedding_size), dense
  (num_tokens logits). num_tokens = vocab_size + 3 + num_oov_buckets (padding,
  out-of-vocabulary buckets, beginning and end of sentence). Defaults: 10,004
  tokens and 4,050,748 parameters. Inputs are token ids [batch, time]; the
  targets are the next tokens.
  """
  vocab_size: int = 10_000
  num_oov_buckets: int = 1
  embedding_size: int = 96
  lstm_size: int = 670

  param_names = ('embedding/embeddings', 'lstm/kernel', 'lstm/recurrent_kernel',
                 'lstm/bias', 'dense/kernel', 'dense/bias', 'dense_1/kernel',
                 'dense_1/bias')

  def __post_init__(self):
    for field in dataclasses.fields(self):
      validation.check_int(field.name, getattr(self, field.name), low=1)

  @property
  def num_tokens(self) -> int:
    """Size of the extended vocabulary: words + special tokens."""
    return self.vocab_size + 3 + self.num_oov_buckets

  def param_shapes(self) -> Shapes:
    """Shapes of the parameters, in Keras `get_weights()` order.

    Returns:
      One shape tuple per entry of `param_names`.
    """
    v, e, u = self.num_tokens, self.embedding_size, self.lstm_size
    return ((v, e), (e, 4 * u), (u, 4 * u), (4 * u,), (u, e), (e,), (e, v),
            (v,))

  def init(self, key: jax.Array) -> Params:
    """Keras' initialisation (Embedding, LSTM and Dense defaults).

    Embedding uniform(-0.05, 0.05); LSTM kernel glorot uniform, recurrent
    kernel orthogonal, bias zeros except ones for the forget gate
    (unit_forget_bias); dense kernels glorot uniform, biases zeros.

    Args:
      key: PRNG key, split into one key per randomly initialised parameter.

    Returns:
      The parameters in `param_names` order, float32.
    """
    v, e, u = self.num_tokens, self.embedding_size, self.lstm_size
    keys = jax.random.split(key, 5)
    bias = jnp.zeros((4 * u,), jnp.float32).at[u:2 * u].set(1.0)
    return (
        jax.random.uniform(keys[0], (v, e), jnp.float32, -EMBEDDING_INIT_RANGE,
                           EMBEDDING_INIT_RANGE),
        glorot_uniform(keys[1], (e, 4 * u)),
        orthogonal(keys[2], (u, 4 * u)),
        bias,
        glorot_uniform(keys[3], (u, e)),
        jnp.zeros((e,), jnp.float32),
        glorot_uniform(keys[4], (e, v)),
        jnp.zeros((v,), jnp.float32),
    )

  def logits(self, params: Params, tokens: jax.Array,
             dropout_key: jax.Array | None = None) -> jax.Array:
    """Next-token logits [batch, time, num_tokens] (the model has no dropout).

    Keras' LSTM with the embedding's padding mask: at a padded step the state
    is carried over unchanged and the previous output is repeated
    (`zero_output_for_mask=False`). Gates are ordered i, f, c, o as in Keras.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      tokens: int [batch, time] token ids in [0, num_tokens); `PAD_TOKEN` is
        padding.
      dropout_key: Ignored (accepted for the models' common signature).

    Returns:
      float32 [batch, time, num_tokens] logits.
    """
    del dropout_key  # The model has no dropout layer.
    embeddings, kernel, recurrent, bias, w1, b1, w2, b2 = params
    units = self.lstm_size
    mask = (tokens != PAD_TOKEN)[..., None]
    projected = embeddings[tokens] @ kernel + bias  # [batch, time, 4u]

    def step(carry, inputs):
      h, c = carry
      z_t, mask_t = inputs
      z = z_t + h @ recurrent
      i = jax.nn.sigmoid(z[:, :units])
      f = jax.nn.sigmoid(z[:, units:2 * units])
      g = jnp.tanh(z[:, 2 * units:3 * units])
      o = jax.nn.sigmoid(z[:, 3 * units:])
      c_new = f * c + i * g
      h_new = o * jnp.tanh(c_new)
      h = jnp.where(mask_t, h_new, h)
      c = jnp.where(mask_t, c_new, c)
      return (h, c), h

    batch = tokens.shape[0]
    zeros = jnp.zeros((batch, units), jnp.float32)
    _, outputs = jax.lax.scan(
        step, (zeros, zeros),
        (jnp.swapaxes(projected, 0, 1), jnp.swapaxes(mask, 0, 1)))
    outputs = jnp.swapaxes(outputs, 0, 1)  # [batch, time, units]
    return _dense(_dense(outputs, w1, b1), w2, b2)

  def loss(self, params: Params, tokens: jax.Array, targets: jax.Array,
           mask: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
    """Mean next-token cross entropy over all positions of valid examples.

    TFF's `from_keras_model` loss, measured on TFF 0.87 (tests/
    jax_engine_models_test.py): `SparseCategoricalCrossentropy(from_logits=
    True)` averaged over every (example, position), padding included; the
    embedding's padding mask does not reach it. mask [batch] marks the valid
    examples of a padded batch.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      tokens: int [batch, time] input token ids.
      targets: int [batch, time] next-token ids.
      mask: [batch] 1 for a valid example, 0 for padding.
      dropout_key: Ignored (the model has no dropout).

    Returns:
      float32 scalar; 0 when no example is valid.
    """
    logits = self.logits(params, tokens, dropout_key)
    weights = jnp.broadcast_to(mask[:, None], tokens.shape)
    return _masked_mean(_cross_entropy(logits, targets), weights)

  def counted(self, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Which targets TFF's 'accuracy' counts: valid examples' but padding.

    Args:
      targets: int [batch, time] next-token ids.
      mask: [batch] 1 for a valid example, 0 for padding.

    Returns:
      float32 [batch, time] weights, 1 for a counted target.
    """
    return (targets != PAD_TOKEN) * jnp.asarray(mask, jnp.float32)[:, None]

  def correct(self, params: Params, tokens: jax.Array, targets: jax.Array,
              mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(correct, counted) of the model's accuracy over its `counted` targets.

    Args:
      params: The parameters (`init`, `from_keras_weights`).
      tokens: int [batch, time] input token ids.
      targets: int [batch, time] next-token ids.
      mask: [batch] 1 for a valid example, 0 for padding.

    Returns:
      (correct, counted): scalars, the number of correct predictions
      and the number of predictions counted.
    """
    return correct_counts(self.logits(params, tokens), targets,
                          self.counted(targets, mask))


@dataclasses.dataclass(frozen=True)
class InVocabWordLstm(WordLstm):
  """`WordLstm` whose accuracy counts in-vocabulary word targets only.

  TFF's 'accuracy_without_out_of_vocab_or_end_of_sentence' (Reddi et al.
  2020), with TFF's masked tokens (`get_special_tokens`): padding 0, the
  out-of-vocabulary buckets V + 1..V + num_oov_buckets and end of sentence
  V + num_oov_buckets + 2 are left out; words and beginning of sentence
  (never a target) count.
  """

  def counted(self, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """`WordLstm.counted` less out-of-vocabulary and end-of-sentence targets.

    Args:
      targets: int [batch, time] next-token ids.
      mask: [batch] 1 for a valid example, 0 for padding.

    Returns:
      float32 [batch, time] weights, 1 for a counted target.
    """
    words = self.vocab_size + self.num_oov_buckets
    out_of_vocab = (targets > self.vocab_size) & (targets <= words)
    left_out = (targets == PAD_TOKEN) | out_of_vocab | (targets == words + 2)
    return ~left_out * jnp.asarray(mask, jnp.float32)[:, None]
