"""The JAX engine's word accuracy against TFF's, on the same logits and labels.

Independent truth: TFF's own metric of its word tasks (StackOverflow and
Shakespeare, `word_prediction_tasks.create_word_prediction_task_from_datasets`):
`keras_metrics.MaskedCategoricalAccuracy` with the masked tokens of
`word_prediction_preprocessing.get_special_tokens` (padding, the
out-of-vocabulary buckets and end of sentence). The JAX side is what its
`models.InVocabWordLstm.correct` computes: `models.correct_counts` over the
model's `counted` targets. A broken mask (the padding-only mask of
`models.WordLstm`) must give another accuracy on the same data, so the check
can fail. Where TFF is absent (`make test-jax`), the JAX metric is held to
TFF's values stored from it (`_TFF_ACCURACY`, which the TFF-side test checks
against TFF itself in `make test`).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from one_shot_epe.jax_engine import models

BATCH, TIME = 6, 20
_CASES = [(10, 1, 0), (7, 3, 1), (40, 1, 2)]
# TFF's accuracy of `_data(*case)` without its last (padded) example, as TFF
# 0.87's MaskedCategoricalAccuracy computed it (float32).
_TFF_ACCURACY = {(10, 1, 0): 0.699999988079071, (7, 3, 1): 0.5862069129943848,
                 (40, 1, 2): 0.6136363744735718}


def _tff_accuracy(vocab_size, num_oov, logits, targets):
  """TFF's 'accuracy_without_out_of_vocab_or_end_of_sentence' of a batch."""
  # pylint: disable=g-import-not-at-top
  pytest.importorskip('tensorflow_federated')
  from tensorflow_federated.python.simulation.baselines import keras_metrics
  from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing
  # pylint: enable=g-import-not-at-top
  special = word_prediction_preprocessing.get_special_tokens(vocab_size,
                                                             num_oov)
  metric = keras_metrics.MaskedCategoricalAccuracy(
      masked_tokens=[special.padding, special.end_of_sentence] +
      special.out_of_vocab)
  metric.update_state(targets, logits)
  return float(metric.result().numpy())


def _data(vocab_size, num_oov, seed):
  """Logits and targets over every token id, half the targets predicted."""
  rng = np.random.default_rng(seed)
  num_tokens = vocab_size + 3 + num_oov
  logits = rng.normal(size=(BATCH, TIME, num_tokens)).astype(np.float32)
  targets = rng.integers(0, num_tokens, size=(BATCH, TIME))
  predicted = rng.random((BATCH, TIME)) < 0.5
  targets = np.where(predicted, logits.argmax(-1), targets).astype(np.int32)
  # Every special token is a target somewhere, some of them predicted.
  specials = [0, *range(vocab_size + 1, num_tokens)]
  targets[0, :len(specials)] = specials
  targets[1, :len(specials)] = logits[1, :len(specials)].argmax(-1)
  logits[1, np.arange(len(specials)), specials] += 100.0
  targets[1, :len(specials)] = specials
  return logits, targets


def _jax_accuracy(model, logits, targets, mask):
  correct, counted = models.correct_counts(
      jnp.asarray(logits), jnp.asarray(targets),
      model.counted(jnp.asarray(targets), jnp.asarray(mask)))
  return float(correct) / float(counted)


@pytest.mark.parametrize('vocab_size,num_oov,seed', _CASES)
def test_the_stored_values_are_tffs(vocab_size, num_oov, seed):
  logits, targets = _data(vocab_size, num_oov, seed)
  assert _tff_accuracy(vocab_size, num_oov, logits[:-1],
                       targets[:-1]) == pytest.approx(
                           _TFF_ACCURACY[vocab_size, num_oov, seed], abs=1e-7)


@pytest.mark.parametrize('vocab_size,num_oov,seed', _CASES)
def test_word_accuracy_is_tffs_on_the_same_logits_and_labels(vocab_size,
                                                             num_oov, seed):
  logits, targets = _data(vocab_size, num_oov, seed)
  model = models.InVocabWordLstm(vocab_size=vocab_size,
                                 num_oov_buckets=num_oov, embedding_size=2,
                                 lstm_size=2)
  # A padded example (mask 0) of the JAX batch is no example of TFF's.
  mask = np.ones(BATCH, np.float32)
  mask[-1] = 0.0
  expected = _TFF_ACCURACY[vocab_size, num_oov, seed]
  assert _jax_accuracy(model, logits, targets, mask) == pytest.approx(
      expected, abs=1e-6)
  # The check tells a broken mask apart: counting the special tokens
  # (padding excepted) gives another accuracy on the same data.
  broken = models.WordLstm(vocab_size=vocab_size, num_oov_buckets=num_oov,
                           embedding_size=2, lstm_size=2)
  assert _jax_accuracy(broken, logits, targets, mask) != pytest.approx(
      expected, abs=1e-3)


def test_beginning_of_sentence_counts_as_in_tffs_metric():
  vocab_size, num_oov = 10, 1
  bos = vocab_size + num_oov + 1
  model = models.InVocabWordLstm(vocab_size=vocab_size, embedding_size=2,
                                 lstm_size=2)
  targets = np.asarray([[0, 3, vocab_size + 1, bos, bos + 1]], np.int32)
  weights = np.asarray(model.counted(jnp.asarray(targets),
                                     jnp.ones(1, jnp.float32)))
  np.testing.assert_array_equal(weights, [[0, 1, 0, 1, 0]])
