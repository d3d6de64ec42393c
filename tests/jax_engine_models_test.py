"""Tests of one_shot_epe.jax_engine.models against TFF's Keras baselines.

The independent truth is TFF's own model: the tasks of one_shot_epe.tff_engine.tasks
build the Keras models (EMNIST `cnn_dropout`, StackOverflow LSTM) wrapped by
`tff.learning.models.from_keras_model`; their weights are copied into the JAX
models, and logits, the batch loss TFF minimises and its gradients must agree.
Initialisers are checked against Keras' closed forms (glorot limit,
orthogonality, forget-gate bias) with KS tests.
"""

import math

import numpy as np
import pytest
import scipy.stats

# The references are Keras models: skipped where TensorFlow is absent (the
# TensorFlow-free JAX environment of `make test-jax`, the accelerator machines).
pytest.importorskip('tensorflow')

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf
import jax
import jax.numpy as jnp

from one_shot_epe.tff_engine import tasks
from one_shot_epe.jax_engine import compat
from one_shot_epe.jax_engine import models
# pylint: enable=g-import-not-at-top,wrong-import-position


def _first_batch(task):
  data = task.preprocessed_train_data
  dataset = data.create_tf_dataset_for_client(data.client_ids[0])
  return next(iter(dataset))


def _tff_loss_and_grads(model, batch):
  """TFF's batch loss (training=False: no dropout) and its gradients."""
  with tf.GradientTape() as tape:
    output = model.forward_pass(batch, training=False)
  grads = tape.gradient(output.loss, model.trainable_variables)
  return output, [tf.convert_to_tensor(g).numpy() for g in grads]


def _assert_close(actual, expected, rtol=1e-4, atol=1e-5, err_msg=''):
  np.testing.assert_allclose(np.asarray(actual), np.asarray(expected),
                             rtol=rtol, atol=atol, err_msg=err_msg)


def test_parameter_counts_are_the_papers():
  assert models.EmnistCnn().num_parameters() == 1_206_590
  assert models.WordLstm().num_parameters() == 4_050_748
  # And the TFF tasks count the same (d of the canary null distribution).
  emnist_task = tasks.get_task('emnist_character', client_batch_size=2,
                               use_synthetic_data=True,
                               synthetic_num_clients=1,
                               synthetic_examples_per_client=2)
  assert emnist_task.num_parameters == 1_206_590
  assert [tuple(v.shape) for v in emnist_task.model_fn().trainable_variables
         ] == list(models.EmnistCnn().param_shapes())


def test_emnist_cnn_equals_keras_logits_loss_and_gradients():
  task = tasks.get_task('emnist_character', client_batch_size=3,
                        use_synthetic_data=True, synthetic_num_clients=1,
                        synthetic_examples_per_client=3, seed=4)
  model = task.model_fn()
  cnn = models.EmnistCnn()
  params = cnn.from_keras_weights(
      [v.numpy() for v in model.trainable_variables])
  pixels, labels = _first_batch(task)
  output, tff_grads = _tff_loss_and_grads(model, (pixels, labels))
  x = jnp.asarray(pixels.numpy()[..., 0])
  y = jnp.asarray(labels.numpy())
  mask = jnp.ones(y.shape, jnp.float32)
  probs = jax.nn.softmax(cnn.logits(params, x))
  _assert_close(probs, output.predictions.numpy())
  loss, grads = jax.value_and_grad(cnn.loss)(params, x, y, mask)
  _assert_close(loss, output.loss.numpy())
  for name, g_jax, g_tff in zip(cnn.param_names, grads, tff_grads):
    scale = np.abs(g_tff).max()
    _assert_close(np.asarray(g_jax) / scale, g_tff / scale, atol=2e-5,
                  err_msg=name)


def test_emnist_padding_examples_change_nothing():
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=3, dense_units=4,
                         num_classes=5, image_size=8)
  params = cnn.init(compat.prng_key(0))
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.random((3, 8, 8), np.float32))
  y = jnp.asarray([1, 4, 2])
  padded_x = jnp.concatenate([x, jnp.asarray(rng.random((2, 8, 8)),
                                             jnp.float32)])
  padded_y = jnp.concatenate([y, jnp.asarray([0, 3])])
  full = cnn.loss(params, x, y, jnp.ones(3))
  padded = cnn.loss(params, padded_x, padded_y, jnp.asarray([1., 1, 1, 0, 0]))
  _assert_close(padded, full, rtol=1e-6)
  # A hand-computed mean of -log softmax over the three examples.
  logits = np.asarray(cnn.logits(params, x), np.float64)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  _assert_close(full, -logp[np.arange(3), [1, 4, 2]].mean(), rtol=1e-5)


@pytest.mark.slow
def test_word_lstm_equals_keras_logits_loss_gradients_and_accuracy():
  task = tasks.get_task('stackoverflow_word', client_batch_size=3,
                        use_synthetic_data=True, synthetic_num_clients=1,
                        synthetic_examples_per_client=3, vocab_size=40, seed=2)
  model = task.model_fn()
  lstm = models.WordLstm(vocab_size=40)
  params = lstm.from_keras_weights(
      [v.numpy() for v in model.trainable_variables])
  tokens, targets = _first_batch(task)
  assert (tokens.numpy() == 0).any()  # Short sentences: padding is exercised.
  output, tff_grads = _tff_loss_and_grads(model, (tokens, targets))
  x = jnp.asarray(tokens.numpy(), jnp.int32)
  y = jnp.asarray(targets.numpy(), jnp.int32)
  mask = jnp.ones(x.shape[0], jnp.float32)
  _assert_close(lstm.logits(params, x), output.predictions.numpy())
  loss, grads = jax.value_and_grad(lstm.loss)(params, x, y, mask)
  _assert_close(loss, output.loss.numpy())
  for g_jax, g_tff in zip(grads, tff_grads):
    scale = np.abs(g_tff).max()
    _assert_close(np.asarray(g_jax) / scale, g_tff / scale, atol=2e-5)
  correct, counted = lstm.correct(params, x, y, mask)
  metrics = model.report_local_unfinalized_metrics()
  tff_correct, tff_counted = metrics['accuracy']
  assert float(counted) == pytest.approx(float(tff_counted))
  assert float(correct) == pytest.approx(float(tff_correct))


def test_word_lstm_loss_averages_every_position_of_valid_examples():
  lstm = models.WordLstm(vocab_size=6, embedding_size=3, lstm_size=4)
  params = lstm.init(compat.prng_key(1))
  # bos=8, eos=9 for vocab 6 + 1 oov bucket; one sentence of two words, and
  # a second (padding) example that the mask removes.
  x = jnp.asarray([[8, 3, 4, 9, 0, 0], [8, 1, 2, 3, 4, 5]])
  y = jnp.asarray([[3, 4, 9, 0, 0, 0], [1, 2, 3, 4, 5, 6]])
  logits = np.asarray(lstm.logits(params, x), np.float64)[0]
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -np.mean([logp[t, int(y[0, t])] for t in range(6)])
  _assert_close(lstm.loss(params, x, y, jnp.asarray([1.0, 0.0])), expected,
                rtol=1e-5)


def test_glorot_and_embedding_initialisers_follow_their_distributions():
  key = compat.prng_key(3)
  kernel = np.asarray(models.glorot_uniform(key, (3, 3, 8, 16)))
  limit = math.sqrt(6.0 / (3 * 3 * 8 + 3 * 3 * 16))
  assert scipy.stats.kstest(kernel.ravel(), 'uniform', (-limit, 2 * limit)
                            ).pvalue > 1e-3
  lstm = models.WordLstm(vocab_size=60, embedding_size=8, lstm_size=5)
  emb, w, u, b, w1, b1, w2, b2 = [np.asarray(p) for p in lstm.init(key)]
  assert scipy.stats.kstest(emb.ravel(), 'uniform', (-0.05, 0.1)).pvalue > 1e-3
  limit = math.sqrt(6.0 / (8 + 20))
  assert np.abs(w).max() <= limit and np.abs(w).max() > 0.8 * limit
  np.testing.assert_allclose(u @ u.T, np.eye(5), atol=1e-5)  # Orthonormal rows.
  np.testing.assert_array_equal(b, np.repeat([0., 1., 0., 0.], 5))
  assert not b1.any() and not b2.any()


def test_orthogonal_is_haar_distributed():
  # The first entry of a Haar-random orthonormal column of length n has
  # n * entry^2 ~ Beta(1/2, (n-1)/2) * n; check it over many draws.
  keys = jax.random.split(compat.prng_key(5), 400)
  draws = np.asarray(jax.vmap(lambda k: models.orthogonal(k, (6, 3))[0, 0])(
      keys))
  assert scipy.stats.kstest(draws**2, 'beta', (0.5, 2.5)).pvalue > 1e-3


def test_dropout_is_off_without_key_and_seeded_with_one():
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=400,
                         num_classes=3, image_size=8)
  params = cnn.init(compat.prng_key(0))
  x = jnp.ones((2, 8, 8))
  plain = cnn.logits(params, x)
  _assert_close(cnn.logits(params, x), plain, rtol=0)
  key = compat.prng_key(9)
  dropped = cnn.logits(params, x, key)
  _assert_close(cnn.logits(params, x, key), dropped, rtol=0)
  assert not np.allclose(dropped, plain)


def test_from_keras_weights_rejects_wrong_lists():
  cnn = models.EmnistCnn()
  shapes = cnn.param_shapes()
  weights = [np.zeros(s, np.float32) for s in shapes]
  with pytest.raises(ValueError, match='8 arrays'):
    cnn.from_keras_weights(weights[:-1])
  with pytest.raises(ValueError, match=r'weights\[dense_1/bias\]'):
    cnn.from_keras_weights(weights[:-1] + [np.zeros(10, np.float32)])
  with pytest.raises(TypeError, match='get_weights'):
    cnn.from_keras_weights(np.zeros(3))
  with pytest.raises(ValueError, match='lstm_size must be >= 1'):
    models.WordLstm(lstm_size=0)
  with pytest.raises(TypeError, match='dense_units must be an int'):
    models.EmnistCnn(dense_units=1.5)
