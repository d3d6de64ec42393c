"""Synthetic federated data with exactly the element structure of TFF's datasets.

The demo and the tests run the paper's pipeline (Section 5) without the real
EMNIST/StackOverflow files. These stand-ins yield the same feature names, dtypes and
shapes as `tff.simulation.datasets.emnist.load_data` and
`tff.simulation.datasets.stackoverflow.load_data`, so TFF's preprocessing and
models run on them unchanged. Every client's data is a pure function of
(seed, split, client index, example index) through TensorFlow's stateless random
ops, generated lazily inside `tf.data`, so any number of clients costs no memory
and the same seed always gives the same data.

- EMNIST: each of the 62 classes has a fixed template of three random pen strokes;
  an example is its class template, shifted by up to 1 pixel each way, drawn with the
  writer's ink strength (per client, in [0.6, 1]) plus Gaussian pixel noise, on
  EMNIST's white (1.0) background. Labels are uniform, so a CNN learns it quickly.
- StackOverflow: sentences of 4 to 25 words over a vocabulary `w0, w1, ...`; the
  first word is Zipf-distributed and each next word is 1 to 3 ranks after the
  previous one (modulo the vocabulary size), which a language model can learn.
"""

import collections
import importlib
import math
import os
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import client_arrays
from one_shot_epe.design import tasks
from one_shot_epe import validation
from one_shot_epe.tff_engine.tasks import tff_cache

__all__ = ['emnist', 'emnist_templates', 'stackoverflow', 'stackoverflow_vocab',
           'write_data_dir', 'write_splits']

_SPLIT_CODES = {'train': 0, 'test': 1, 'heldout': 2}
_EMNIST_CLASSES = 62
_IMAGE_SIZE = 28
_STROKES_PER_CLASS = 3
_STROKE_STEPS = 14
_MAX_SHIFT = 1
_PIXEL_NOISE_STDDEV = 0.2
_MIN_SENTENCE_WORDS = 4
_MAX_SENTENCE_WORDS = 25
_MAX_WORD_STEP = 3


def _client_ids(num_clients: int) -> list[str]:
  width = len(str(num_clients - 1))
  return [f'{i:0{width}d}' for i in range(num_clients)]


def _client_seed(seed: int, split: str, client_id) -> tf.Tensor:
  """Stateless seed of one client's stream: (seed, split) folded with its index."""
  index = tf.strings.to_number(client_id, out_type=tf.int64)
  split_seed = tf.constant([seed, _SPLIT_CODES[split]], dtype=tf.int64)
  return tf.random.experimental.stateless_fold_in(split_seed, index)


def emnist_templates(seed: int) -> np.ndarray:
  """The 62 class templates: ink (1) / no ink (0) images of three random strokes.

  Args:
    seed: Seed of the strokes.

  Returns:
    float32 [62, 28, 28] templates.
  """
  rng = np.random.default_rng([seed, _EMNIST_CLASSES])
  templates = np.zeros((_EMNIST_CLASSES, _IMAGE_SIZE, _IMAGE_SIZE), np.float32)
  for label in range(_EMNIST_CLASSES):
    for _ in range(_STROKES_PER_CLASS):
      position = rng.uniform(6, 21, size=2)
      angle = rng.uniform(0, 2 * math.pi)
      for _ in range(_STROKE_STEPS):
        angle += rng.normal(0, 0.5)
        position = np.clip(position + [math.cos(angle), math.sin(angle)], 4, 22)
        row, col = int(position[0]), int(position[1])
        templates[label, row:row + 2, col:col + 2] = 1.0
  return templates


def _examples(sizes: np.ndarray, client_id) -> tf.Tensor:
  """How many examples client `client_id` (its index, as a string) has."""
  return tf.gather(tf.constant(sizes, tf.int64),
                   tf.strings.to_number(client_id, out_type=tf.int64))


def _emnist_split(sizes: np.ndarray, seed: int,
                  split: str) -> tff.simulation.datasets.ClientData:
  """One split of synthetic EMNIST as a lazily generated `ClientData`."""
  template_values = emnist_templates(seed)

  def dataset_fn(client_id) -> tf.data.Dataset:
    templates = tf.constant(template_values)
    client_seed = _client_seed(seed, split, client_id)
    ink = tf.random.stateless_uniform([], client_seed, 0.6, 1.0)

    def example(index):
      seeds = tf.random.experimental.stateless_split(
          tf.random.experimental.stateless_fold_in(client_seed, index), 3)
      label = tf.random.stateless_uniform(
          [], seeds[0], 0, _EMNIST_CLASSES, dtype=tf.int32)
      shift = tf.random.stateless_uniform(
          [2], seeds[1], -_MAX_SHIFT, _MAX_SHIFT + 1, dtype=tf.int32)
      strokes = tf.roll(tf.gather(templates, label), shift, axis=[0, 1])
      noise = tf.random.stateless_normal(
          [_IMAGE_SIZE, _IMAGE_SIZE], seeds[2], stddev=_PIXEL_NOISE_STDDEV)
      pixels = tf.clip_by_value(1.0 - ink * strokes + noise, 0.0, 1.0)
      return collections.OrderedDict(label=label, pixels=pixels)

    return tf.data.Dataset.range(_examples(sizes, client_id)).map(example)

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      _client_ids(len(sizes)), dataset_fn)


@validation.arguments('num_clients', 'examples_per_client', 'seed',
                      test_examples_per_client=validation.Optional(
                          validation.Int(1)),
                      sizes=validation.Choice(client_arrays.CLIENT_SIZE_LAWS))
def emnist(num_clients: int, examples_per_client: int, seed: int = 0,
           test_examples_per_client: int | None = None, sizes: str = 'equal'
           ) -> tuple[tff.simulation.datasets.ClientData,
                      tff.simulation.datasets.ClientData]:
  """Synthetic EMNIST-62 (train, test) with TFF's element structure.

  Elements are OrderedDict(label=int32 [], pixels=float32 [28, 28]) in [0, 1].
  Like the real data, the test split has the same client ids as the train split.

  Args:
    num_clients: number of clients (writers), >= 1.
    examples_per_client: train examples per client, >= 1.
    seed: determines all data.
    test_examples_per_client: test examples per client; default
      max(1, examples_per_client // 8), about EMNIST's train/test ratio.
    sizes: the law of the train clients' sizes, of mean
      `examples_per_client` (`client_arrays.client_sizes`: 'equal', or the
      writers' 'realistic' law; the JAX engine's stand-in has the same).

  Returns:
    (train, test) federated data.
  """
  if test_examples_per_client is None:
    test_examples_per_client = max(1, examples_per_client // 8)
  return (_emnist_split(client_arrays.client_sizes.unchecked(
      'emnist', num_clients, examples_per_client, sizes, seed), seed, 'train'),
          _emnist_split(np.full(num_clients, test_examples_per_client), seed,
                        'test'))


def stackoverflow_vocab(vocab_size: int) -> list[str]:
  """The synthetic vocabulary, most frequent first: 'w0', 'w1', ...

  Args:
    vocab_size: The number of words.

  Returns:
    The words.
  """
  return [f'w{rank}' for rank in range(vocab_size)]


def _stackoverflow_split(sizes: np.ndarray, vocab_size: int, seed: int,
                         split: str) -> tff.simulation.datasets.ClientData:
  """One split of synthetic StackOverflow as a lazily generated `ClientData`."""
  words = stackoverflow_vocab(vocab_size)
  zipf_logits = -np.log(np.arange(1, vocab_size + 1, dtype=np.float32))

  def dataset_fn(client_id) -> tf.data.Dataset:
    vocab = tf.constant(words)
    logits = tf.constant(zipf_logits[np.newaxis, :])
    client_seed = _client_seed(seed, split, client_id)

    def example(index):
      seeds = tf.random.experimental.stateless_split(
          tf.random.experimental.stateless_fold_in(client_seed, index), 5)
      length = tf.random.stateless_uniform(
          [], seeds[0], _MIN_SENTENCE_WORDS, _MAX_SENTENCE_WORDS + 1,
          dtype=tf.int32)
      first = tf.random.stateless_categorical(logits, 1, seeds[1])[0, 0]
      steps = tf.random.stateless_uniform(
          [length - 1], seeds[2], 1, _MAX_WORD_STEP + 1, dtype=tf.int64)
      ranks = (first + tf.concat([[0], tf.cumsum(steps)], 0)) % vocab_size
      sentence = tf.gather(vocab, ranks)
      is_question = tf.random.stateless_uniform([], seeds[3]) < 0.3
      return collections.OrderedDict(
          creation_date=tf.constant('2010-01-01 00:00:00 UTC'),
          score=tf.random.stateless_uniform(
              [], seeds[4], -2, 20, dtype=tf.int64),
          tags=tf.strings.join(['tag', tf.strings.as_string(first % 50)]),
          title=tf.strings.reduce_join(sentence[:3], separator=' '),
          tokens=tf.strings.reduce_join(sentence, separator=' '),
          type=tf.where(is_question, 'question', 'answer'),
      )

    return tf.data.Dataset.range(_examples(sizes, client_id)).map(example)

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      _client_ids(len(sizes)), dataset_fn)


@validation.arguments('num_clients', 'examples_per_client', 'vocab_size',
                      'seed', eval_examples_per_client=validation.Optional(
                          validation.Int(1)),
                      sizes=validation.Choice(client_arrays.CLIENT_SIZE_LAWS))
def stackoverflow(num_clients: int, examples_per_client: int,
                  vocab_size: int = 10_000, seed: int = 0,
                  eval_examples_per_client: int | None = None,
                  sizes: str = 'equal'
                  ) -> tuple[tff.simulation.datasets.ClientData,
                             tff.simulation.datasets.ClientData,
                             tff.simulation.datasets.ClientData, list[str]]:
  """Synthetic StackOverflow (train, heldout, test, vocab) with TFF's structure.

  Elements are OrderedDict(creation_date, score, tags, title, tokens, type): all
  scalar tf.string except score (int64), in the key order of TFF's parser. The
  vocabulary (default 10,000 words, as in the paper) gives the real model size.

  Args:
    num_clients: number of clients (users), >= 1.
    examples_per_client: train sentences per client, >= 1.
    vocab_size: vocabulary size, >= 1.
    seed: determines all data.
    eval_examples_per_client: heldout and test sentences per client; default
      max(1, examples_per_client // 8).
    sizes: the law of the train clients' sizes, of mean
      `examples_per_client` (`client_arrays.client_sizes`: 'equal', or the
      users' heavy-tailed 'realistic' law; the JAX engine's stand-in has the
      same).

  Returns:
    (train, heldout, test, the vocabulary).
  """
  if eval_examples_per_client is None:
    eval_examples_per_client = max(1, examples_per_client // 8)
  train_sizes = client_arrays.client_sizes.unchecked(
      'stackoverflow', num_clients, examples_per_client, sizes, seed)
  eval_sizes = np.full(num_clients, eval_examples_per_client)
  return (
      _stackoverflow_split(train_sizes, vocab_size, seed, 'train'),
      _stackoverflow_split(eval_sizes, vocab_size, seed, 'heldout'),
      _stackoverflow_split(eval_sizes, vocab_size, seed, 'test'),
      stackoverflow_vocab(vocab_size),
  )


def write_splits(data_dir: str, file_name: str,
                 splits: Mapping[str, tff.simulation.datasets.ClientData]
                 ) -> str:
  """Writes `splits` as the SQLite file `file_name` TFF's loader reads.

  Args:
    data_dir: An existing directory.
    file_name: The file's name (`tff_cache.CachedDataset.file_name`).
    splits: The loader's split names -> their client data.

  Returns:
    The file's path.
  """
  path = os.path.join(data_dir, file_name)
  tff_cache.write_sqlite(path, {
      split: tff_cache.client_data_to_examples(data)
      for split, data in splits.items()
  })
  return path


def write_data_dir(task_name: str, data_dir: str, num_clients: int,
                   examples_per_client: int, seed: int = 0,
                   vocab_size: int = 10_000) -> str:
  """Exports synthetic data as the files TFF's loaders read; returns the file.

  The task's module (its entry's, `design.tasks`) writes them with its
  `write_synthetic_files`: `emnist_all.sqlite` (splits all_train, all_test),
  or `stackoverflow.sqlite` (train, heldout, test) plus
  `stackoverflow.word_count` (the vocabulary in order, with pseudo-counts V,
  V-1, ..., 1), into the existing directory `data_dir`, so the real loading
  path (`get_task(..., data_dir=data_dir)`) can be exercised end to end
  offline.

  Args:
    task_name: A task whose module reads TFF's SQLite files
      ('emnist_character' or 'stackoverflow_word').
    data_dir: An existing directory.
    num_clients: The number of clients.
    examples_per_client: Examples (sentences) per client.
    seed: Seed of every draw.
    vocab_size: The vocabulary's size (the tasks with a vocabulary).

  Returns:
    The SQLite file's path.

  Raises:
    ValueError: `task_name` is no task, or its data are not TFF's files.
  """
  try:
    entry = tasks.task_entry(task_name)
  except ValueError as error:
    raise ValueError(f'task_name: {error}') from None
  module = importlib.import_module(f'.{entry.tff.model_module}',
                                   __package__)
  write = getattr(module, 'write_synthetic_files', None)
  if write is None:
    raise ValueError(f'task_name {task_name!r} reads no TFF SQLite files '
                     '(its module has no write_synthetic_files).')
  return write(data_dir, num_clients, examples_per_client, seed, vocab_size)
