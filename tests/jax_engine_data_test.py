"""Tests of one_shot_epe.jax_engine.data (client arrays and round batches).

Independent truths: the hand-derived law of tf.data's buffered shuffle on
three elements, counting (every example appears once per epoch, the cap cuts
the repeated stream), a save/load round trip, and TFF's token layout
(`get_special_tokens`: pad 0, words rank + 1, then oov, bos, eos).
"""

import collections

import numpy as np
import pytest

from one_shot_epe.data import client_arrays
from one_shot_epe.data import fashion_mnist
from one_shot_epe.jax_engine import data


def test_buffered_shuffle_has_tf_datas_law():
  # Buffer 2 over [0, 1, 2]: the first output is 0 or 1 (prob 1/2 each); the
  # slot refills with 2; then a uniform pick of the two left: four orders of
  # probability 1/4, never starting with 2.
  rng = np.random.default_rng(0)
  counts = collections.Counter(
      tuple(data.shuffled_order(3, 2, rng)) for _ in range(4000))
  assert set(counts) == {(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0)}
  for count in counts.values():
    assert abs(count / 4000 - 0.25) < 0.03
  # A buffer as large as the data is a uniform permutation.
  firsts = collections.Counter(
      int(data.shuffled_order(4, 10, rng)[0]) for _ in range(4000))
  assert all(abs(firsts[i] / 4000 - 0.25) < 0.03 for i in range(4))
  assert data.shuffled_order(5, 1, rng).tolist() == [0, 1, 2, 3, 4]


def test_example_order_repeats_epochs_then_applies_the_cap():
  rng = np.random.default_rng(1)
  order = data.client_example_order(5, epochs=3, max_examples=None,
                                    shuffle_buffer=2, rng=rng)
  assert order.size == 15
  for epoch in range(3):
    assert sorted(order[5 * epoch:5 * epoch + 5]) == list(range(5))
  capped = data.client_example_order(5, epochs=3, max_examples=7,
                                     shuffle_buffer=100, rng=rng)
  assert capped.size == 7 and sorted(capped[:5]) == list(range(5))
  assert data.client_example_order(0, epochs=2, max_examples=None,
                                   shuffle_buffer=3, rng=rng).size == 0


def _arrays():
  sizes = [3, 0, 5]
  n = sum(sizes)
  return client_arrays.ClientArrays(
      kind='emnist', client_ids=np.asarray(['a', 'b', 'c']),
      offsets=np.concatenate([[0], np.cumsum(sizes)]),
      features={'pixels': np.arange(n, dtype=np.float32)[:, None, None] *
                          np.ones((1, 28, 28), np.float32),
                'label': np.arange(n, dtype=np.int32)})


def test_client_batches_pad_mask_and_hold_each_clients_examples():
  arrays = _arrays()
  batches = data.client_batches(arrays, [2, 1, 0], batch_size=2, epochs=2,
                                max_examples=None,
                                rng=np.random.default_rng(2), num_slots=4)
  assert batches.inputs.shape == (4, 5, 2, 28, 28)
  assert batches.labels.shape == (4, 5, 2)
  np.testing.assert_array_equal(batches.client_mask, [1, 1, 1, 0])
  np.testing.assert_array_equal(batches.example_mask.sum(axis=(1, 2)),
                                [10, 0, 6, 0])
  # Client 'c' (examples 3..7) twice; client 'a' (0..2) twice, in 3 batches.
  for slot, owned in ((0, range(3, 8)), (2, range(0, 3))):
    mask = batches.example_mask[slot].astype(bool)
    assert sorted(batches.labels[slot][mask]) == sorted(list(owned) * 2)
    np.testing.assert_array_equal(batches.inputs[slot][mask][:, 0, 0],
                                  batches.labels[slot][mask])
  # Batches fill in order: the partial batch is the last one.
  np.testing.assert_array_equal(batches.example_mask[2].sum(1), [2, 2, 2, 0,
                                                                 0])
  with pytest.raises(ValueError, match='max_batches must be >= 5'):
    data.client_batches(arrays, [2], batch_size=2, epochs=2,
                        max_examples=None, rng=np.random.default_rng(0),
                        max_batches=4)
  with pytest.raises(ValueError, match=r'clients must be indices in \[0, 3\)'):
    data.client_batches(arrays, [3], batch_size=2, epochs=1,
                        max_examples=None, rng=np.random.default_rng(0))


def test_stackoverflow_batches_split_inputs_and_targets():
  arrays = client_arrays.synthetic_stackoverflow(2, 3, vocab_size=30, seed=1)
  batches = data.client_batches(arrays, [1], batch_size=2, epochs=1,
                                max_examples=2, rng=np.random.default_rng(0))
  assert batches.inputs.shape == batches.labels.shape == (1, 1, 2, 20)
  np.testing.assert_array_equal(batches.inputs[..., 1:],
                                batches.labels[..., :-1])


def test_save_and_load_round_trip(tmp_path):
  arrays = _arrays()
  arrays.save(str(tmp_path / 'train'))
  loaded = client_arrays.ClientArrays.load(str(tmp_path / 'train'))
  assert loaded.kind == 'emnist'
  np.testing.assert_array_equal(loaded.client_ids, arrays.client_ids)
  np.testing.assert_array_equal(loaded.offsets, arrays.offsets)
  assert isinstance(loaded.features['pixels'], np.memmap)
  for name in ('pixels', 'label'):
    np.testing.assert_array_equal(loaded.features[name], arrays.features[name])


def test_special_tokens_and_sentence_encoding_follow_tff():
  tokens = client_arrays.special_tokens(10_000)
  assert (tokens.pad, tokens.oov, tokens.bos, tokens.eos) == (0, (10_001,),
                                                              10_002, 10_003)
  np.testing.assert_array_equal(
      client_arrays.encode_sentence([5, 7], tokens, sequence_length=4),
      [10_002, 5, 7, 10_003, 0])
  np.testing.assert_array_equal(
      client_arrays.encode_sentence([1, 2, 3, 4, 5], tokens, sequence_length=4),
      [10_002, 1, 2, 3, 4])


def test_synthetic_data_has_the_real_structure():
  emnist = client_arrays.synthetic_emnist(3, 4, seed=0)
  assert emnist.features['pixels'].shape == (12, 28, 28)
  assert emnist.features['pixels'].dtype == np.float32
  assert 0.0 <= emnist.features['pixels'].min() <= 1.0
  assert emnist.features['pixels'].max() <= 1.0
  assert emnist.features['label'].max() < 62
  np.testing.assert_array_equal(emnist.client_sizes(), [4, 4, 4])
  so = client_arrays.synthetic_stackoverflow(2, 50, vocab_size=100, seed=0)
  rows = so.features['tokens']
  assert rows.shape == (100, 21)
  special = client_arrays.special_tokens(100)
  assert (rows[:, 0] == special.bos).all()
  words = rows[:, 1:]
  assert ((words == 0) | (words == special.eos) |
          ((words >= 1) & (words <= 100))).all()
  # Short sentences end with eos, then padding only.
  short = (rows == special.eos).any(axis=1)
  assert short.any() and (~short).any()
  # Same seed, same data.
  np.testing.assert_array_equal(
      client_arrays.synthetic_stackoverflow(2, 50, vocab_size=100, seed=0)
      .features['tokens'], rows)


def test_arguments_are_checked():
  with pytest.raises(ValueError, match='kind must be one of'):
    client_arrays.ClientArrays('mnist', np.asarray(['a']), np.asarray([0, 0]), {})
  with pytest.raises(ValueError, match='client_ids must have 1 entries'):
    client_arrays.ClientArrays('stackoverflow', np.asarray([]), np.asarray([0, 0]),
                               {'tokens': np.zeros((0, 21))})
  with pytest.raises(TypeError, match='batch_size must be an int'):
    data.client_batches(_arrays(), [0], batch_size=2.0, epochs=1,
                        max_examples=None, rng=np.random.default_rng(0))


def test_fashion_mnist_arrays_hold_the_label_shard_clients():
  # Brute force from the partition: client i holds exactly its shard indices,
  # in index order, pixels / 255; the test split is one client of all images.
  images = fashion_mnist.synthetic_clients(5, 10, seed=1)
  train, test = fashion_mnist.client_arrays_of(images, 5)
  partition = fashion_mnist.partition_by_label_shards(
      images.train_labels, 5, fashion_mnist.SHARDS_PER_CLIENT,
      fashion_mnist.PARTITION_SEED)
  assert list(train.client_ids) == ['0', '1', '2', '3', '4']
  for i, indices in enumerate(partition):
    start, end = train.offsets[i], train.offsets[i + 1]
    np.testing.assert_array_equal(train.features['label'][start:end],
                                  images.train_labels[indices])
    np.testing.assert_array_equal(
        train.features['pixels'][start:end],
        images.train_images[indices].astype(np.float32) / 255.0)
  assert train.offsets[-1] == 50 and train.kind == 'emnist'
  assert test.num_clients == 1
  np.testing.assert_array_equal(test.features['label'], images.test_labels)
