"""Tests of one_shot_epe.tff_engine.tasks.synthetic: structure, determinism, learnability.

Independent truths: TFF's real loaders' element structure and its `to_ids`
preprocessing; the JAX engine's loader (the task entry's framework-free
`jax.data`), whose arrays TFF's clients must serve element for element; each
image's best-fitting class template by brute force.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models

from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.design import tasks as task_entries
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import emnist
from one_shot_epe.tff_engine.tasks import stackoverflow
from one_shot_epe.tff_engine.tasks import synthetic
from one_shot_epe.tff_engine.tasks import tff_cache


def _arrays(client_data, client_id):
  return [{k: v.numpy() for k, v in e.items()}
          for e in client_data.create_tf_dataset_for_client(client_id)]


def test_emnist_structure_sizes_and_ranges():
  train, test = synthetic.emnist(num_clients=12, examples_per_client=17, seed=3)
  assert train.client_ids == [f'{i:02d}' for i in range(12)]
  assert test.client_ids == train.client_ids
  assert train.element_type_structure == collections.OrderedDict(
      label=tf.TensorSpec([], tf.int32), pixels=tf.TensorSpec([28, 28], tf.float32))
  examples = _arrays(train, '11')
  assert len(examples) == 17
  assert len(_arrays(test, '11')) == 17 // 8
  pixels = np.stack([e['pixels'] for e in examples])
  assert pixels.min() >= 0.0 and pixels.max() <= 1.0
  # EMNIST's white background: the half of the background pixels with positive
  # noise clip to exactly 1.0.
  assert np.mean(pixels == 1.0) > 0.35
  assert all(0 <= e['label'] < 62 for e in examples)


@pytest.mark.parametrize('split', [0, 1])
def test_emnist_examples_match_their_class_template(split):
  # Brute force: an example's ink (1 - pixels) correlates best with the
  # template of its own label, over all 62 classes and the 9 possible shifts,
  # in the training and in the test split: the seed's templates.
  templates = client_arrays.emnist_templates(seed=3)
  examples = _arrays(synthetic.emnist(4, 25, seed=3)[split], '1')
  shifted = np.stack([np.roll(templates, (dr, dc), axis=(1, 2))
                      for dr in (-1, 0, 1) for dc in (-1, 0, 1)])
  hits = 0
  for example in examples:
    scores = np.einsum('sklm,lm->sk', shifted, 1.0 - example['pixels'])
    scores /= np.sqrt(np.einsum('sklm,sklm->sk', shifted, shifted))
    hits += int(np.argmax(scores.max(axis=0)) == example['label'])
  assert hits >= 0.9 * len(examples)


def test_emnist_is_deterministic_in_the_seed():
  first = _arrays(synthetic.emnist(3, 5, seed=4)[0], '2')
  again = _arrays(synthetic.emnist(3, 5, seed=4)[0], '2')
  other = _arrays(synthetic.emnist(3, 5, seed=5)[0], '2')
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a['pixels'], b['pixels'])
    assert a['label'] == b['label']
  assert not all(np.array_equal(a['pixels'], c['pixels'])
                 for a, c in zip(first, other))
  # Train and test streams, and different clients, are different data.
  test_split = synthetic.emnist(3, 5, seed=4)[1]
  assert not np.array_equal(first[0]['pixels'],
                            _arrays(test_split, '2')[0]['pixels'])
  assert not np.array_equal(first[0]['pixels'], _arrays(
      synthetic.emnist(3, 5, seed=4)[0], '1')[0]['pixels'])


def test_emnist_is_learnable_by_the_task_cnn():
  # Centralized SGD on 1,280 examples for 200 steps; chance accuracy is 1/62.
  train, test = synthetic.emnist(20, 64, seed=1)

  def batches(client_data, size):
    return client_data.create_tf_dataset_from_all_clients(seed=0).map(
        lambda e: (tf.expand_dims(e['pixels'], -1), e['label'])).cache().batch(size)

  tf.keras.utils.set_random_seed(0)
  model = emnist_models.create_conv_dropout_model(only_digits=False, debug_seed=0)
  model.compile(tf.keras.optimizers.SGD(0.1, momentum=0.9),
                'sparse_categorical_crossentropy', ['accuracy'])
  model.fit(batches(train, 32), epochs=5, verbose=0)
  _, accuracy = model.evaluate(batches(test, 256), verbose=0)
  assert accuracy > 0.3


def test_stackoverflow_structure_and_word_chain():
  vocab_size = 40
  train, heldout, test, vocab = synthetic.stackoverflow(
      num_clients=5, examples_per_client=30, vocab_size=vocab_size, seed=2)
  assert vocab == [f'w{i}' for i in range(vocab_size)]
  assert list(train.element_type_structure) == [
      'creation_date', 'score', 'tags', 'title', 'tokens', 'type']
  assert train.element_type_structure['score'] == tf.TensorSpec([], tf.int64)
  assert len(_arrays(heldout, '4')) == len(_arrays(test, '4')) == 30 // 8
  examples = _arrays(train, '4')
  assert len(examples) == 30
  for example in examples:
    # The model's first 20 words of sentences of 4 to 25 words.
    words = example['tokens'].decode().split(' ')
    assert 4 <= len(words) <= 20
    ranks = [vocab.index(w) for w in words]
    assert all((b - a) % vocab_size in (1, 2, 3) for a, b in zip(ranks, ranks[1:]))
    assert example['type'] == b'answer' and example['score'] == 0


def test_stackoverflow_first_words_follow_zipf():
  # Rank-1 first words should be twice as frequent as rank-2 (Zipf, s=1). With
  # 4,000 sentences (expected counts ~534 and ~267) the log-ratio's standard
  # error is ~0.075, so the band [1.4, 2.8] lies > 4.4 standard errors from 2
  # on both sides: a correct generator fails with probability < 1e-4.
  train, *_ = synthetic.stackoverflow(200, 20, vocab_size=1000, seed=9)
  firsts = collections.Counter(
      e['tokens'].split(b' ')[0]
      for e in train.create_tf_dataset_from_all_clients().as_numpy_iterator())
  assert 1.4 <= firsts[b'w0'] / firsts[b'w1'] <= 2.8


@pytest.mark.parametrize('bad', [0, -1, 2.5, True])
def test_sizes_are_validated(bad):
  with pytest.raises(ValueError, match='num_clients'):
    synthetic.emnist(bad, 3)
  with pytest.raises(ValueError, match='examples_per_client'):
    synthetic.stackoverflow(3, bad)
  with pytest.raises(ValueError, match='vocab_size'):
    synthetic.stackoverflow(3, 3, vocab_size=bad)


def test_write_data_dir_round_trips_through_tffs_loaders(tmp_path):
  path = synthetic.write_data_dir('emnist_character', str(tmp_path), 3, 4, seed=6)
  assert path == str(tmp_path / 'emnist_all.sqlite')
  train, test = emnist.load_client_data(str(tmp_path))
  fake_train, fake_test = synthetic.emnist(3, 4, seed=6)
  for real, fake in ((train, fake_train), (test, fake_test)):
    assert real.client_ids == fake.client_ids
    for client_id in fake.client_ids:
      for a, b in zip(_arrays(real, client_id), _arrays(fake, client_id),
                      strict=True):
        assert a['label'] == b['label']
        np.testing.assert_array_equal(a['pixels'], b['pixels'])

  synthetic.write_data_dir('stackoverflow_word', str(tmp_path), 2, 3,
                           vocab_size=30)
  train, _, _, vocab = stackoverflow.load_client_data(str(tmp_path), vocab_size=30)
  assert vocab == synthetic.stackoverflow_vocab(30)
  fake_train = synthetic.stackoverflow(2, 3, vocab_size=30)[0]
  assert ([e['tokens'] for e in _arrays(train, '1')] ==
          [e['tokens'] for e in _arrays(fake_train, '1')])
  assert tff_cache.read_word_counts(str(tmp_path), 30) == vocab
  with pytest.raises(ValueError, match='task_name'):
    synthetic.write_data_dir('cifar', str(tmp_path), 2, 3)


@pytest.mark.parametrize('task', ['emnist', 'stackoverflow'])
def test_realistic_sizes_are_the_jax_engines(task):
  # The same client sizes as the JAX engine's numpy stand-in, client by client.
  if task == 'emnist':
    train, _ = synthetic.emnist(7, 12, seed=3, sizes='realistic')
  else:
    train = synthetic.stackoverflow(7, 12, vocab_size=50, seed=3,
                                    sizes='realistic')[0]
  got = [sum(1 for _ in train.create_tf_dataset_for_client(client))
         for client in train.client_ids]
  assert got == client_arrays.client_sizes(task, 7, 12, 'realistic',
                                           seed=3).tolist()


@pytest.mark.parametrize('task', ['emnist_character', 'stackoverflow_word'])
def test_the_tff_task_serves_the_jax_engines_arrays(task):
  # The same data flags: the TFF task's clients (`tasks.get_task`) and the
  # JAX engine's loader (the task entry's `jax.data`), example for example.
  sizes = dict(num_clients=5, examples_per_client=16,
               client_sizes='realistic', seed=7, vocab_size=40)
  tff_task = tasks.get_task(
      task, client_batch_size=4, use_synthetic_data=True,
      synthetic_num_clients=5, synthetic_examples_per_client=16,
      synthetic_client_sizes='realistic', seed=7, vocab_size=40)
  load = task_entries.entry_point(task_entries.task_entry(task).jax.data)
  arrays = load(task_data.DataRequest(task=task, data_dir=None,
                                      synthetic=True, **sizes))
  to_ids = (tff.simulation.baselines.stackoverflow.word_prediction_preprocessing
            .build_to_ids_fn(synthetic.stackoverflow_vocab(40), 20, 1))

  def rows(dataset):
    if task == 'emnist_character':
      return [(int(e['label']), e['pixels'].numpy()) for e in dataset]
    return [(np.pad(ids, (0, 21 - ids.size)),)
            for ids in dataset.map(to_ids).as_numpy_iterator()]

  def array_rows(split, start, end):
    if task == 'emnist_character':
      return list(zip(split.features['label'][start:end].tolist(),
                      split.features['pixels'][start:end]))
    return [(row,) for row in split.features['tokens'][start:end]]

  for client_data, split in ((tff_task.train_data, arrays.train),
                             (tff_task.baseline.datasets.test_data,
                              arrays.test)):
    assert client_data.client_ids == split.client_ids.tolist()
    for index, client_id in enumerate(client_data.client_ids):
      got = rows(client_data.create_tf_dataset_for_client(client_id))
      want = array_rows(split, *split.offsets[index:index + 2])
      assert len(got) == len(want) > 0
      for a, b in zip(got, want):
        for part_a, part_b in zip(a, b, strict=True):
          np.testing.assert_array_equal(part_a, part_b)
    # The whole split as the test set reads it (the traced dataset function).
    pooled = rows(client_data.create_tf_dataset_from_all_clients(seed=0))
    assert len(pooled) == split.offsets[-1]


def test_a_capped_test_set_is_the_same_examples_on_both_engines():
  # --max_eval_examples=37: the TFF engine takes the first 37 examples of its
  # test clients in their seeded order (`Task.test_dataset`), the JAX engine
  # (`backend_jax._first_examples`) must take the same 37, not the first 37
  # of its arrays (the cap ends inside a client).
  from experiments import backend_jax  # pylint: disable=g-import-not-at-top
  count = 37
  tff_task = tasks.get_task(
      'emnist_character', client_batch_size=4, use_synthetic_data=True,
      synthetic_num_clients=12, synthetic_examples_per_client=40,
      synthetic_client_sizes='realistic', seed=7, vocab_size=40)
  arrays = task_data.emnist(task_data.DataRequest(
      task='emnist_character', data_dir=None, synthetic=True, num_clients=12,
      examples_per_client=40, client_sizes='realistic', seed=7,
      vocab_size=40))
  assert arrays.test.offsets[-1] > count
  tff_test = (tff_task.baseline.datasets.test_data
              .create_tf_dataset_from_all_clients(seed=0).take(count))
  want = [(int(e['label']), e['pixels'].numpy()) for e in tff_test]
  kept = backend_jax._first_examples(arrays.test, count)  # pylint: disable=protected-access
  assert kept.offsets[-1] == len(want) == count
  np.testing.assert_array_equal(kept.features['label'],
                                [label for label, _ in want])
  np.testing.assert_array_equal(kept.features['pixels'],
                                np.stack([pixels for _, pixels in want]))
