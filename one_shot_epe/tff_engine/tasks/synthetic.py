"""Synthetic federated data with exactly the element structure of TFF's datasets.

The demo and the tests run the paper's pipeline (Section 5) without the real
EMNIST/StackOverflow files. The examples are the framework-free stand-ins the
JAX engine trains and tests on (`one_shot_epe.data.task_data.emnist` and
`stackoverflow`, drawn by `one_shot_epe.data.client_arrays.synthetic_emnist`
and `synthetic_stackoverflow`: every split shares the task's class templates
or vocabulary law), so the same flags give both engines the same examples.
`ArraysClientData` serves them as TFF client data with the feature names,
dtypes and shapes of `tff.simulation.datasets.emnist.load_data` and
`tff.simulation.datasets.stackoverflow.load_data`, so TFF's preprocessing and
models run on them unchanged:

- EMNIST: OrderedDict(label=int32 [], pixels=float32 [28, 28]), the arrays'
  rows.
- StackOverflow: each row's word ids back as the sentence of its words (rank
  r is the word 'w<r>', `stackoverflow_vocab`), which TFF's `to_ids` maps to
  that row again; the fields TFF's preprocessing does not read
  (creation_date, score, tags, title, type) are constants.
"""

import collections
import functools
import importlib
import os
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.design import tasks
from one_shot_epe import validation
from one_shot_epe.tff_engine.tasks import tff_cache

__all__ = ['ArraysClientData', 'emnist', 'stackoverflow',
           'stackoverflow_vocab', 'write_data_dir', 'write_splits']


def _stackoverflow_element(tokens: tf.Tensor) -> collections.OrderedDict:
  """A sentence as TFF's StackOverflow element, in its parser's key order."""
  return collections.OrderedDict(
      creation_date=tf.constant('2010-01-01 00:00:00 UTC'),
      score=tf.constant(0, tf.int64), tags=tf.constant(''),
      title=tf.constant(''), tokens=tokens, type=tf.constant('answer'))


def _sentences(rows: np.ndarray, vocab: Sequence[str]) -> np.ndarray:
  """Token rows as their sentences: the vocabulary words, space-separated."""
  words = np.asarray(vocab)
  in_vocab = (rows[:, 1:] >= 1) & (rows[:, 1:] <= len(words))
  return np.asarray([' '.join(words[row[1:][kept] - 1])
                     for row, kept in zip(rows, in_vocab)], dtype=bytes)


class ArraysClientData(tff.simulation.datasets.ClientData):
  """A stand-in's `ClientArrays` split as TFF client data, TFF's elements.

  A client's dataset (`create_tf_dataset_for_client`) holds only its own
  examples as constants, so TFF serialises a round's clients rather than the
  split; `serializable_dataset_fn` (whole-split iteration, as the test set's)
  holds all of them and reads the client's index from its numbered id.
  """

  def __init__(self, arrays: client_arrays.ClientArrays,
               vocab: Sequence[str] = ()):
    """Keeps the split's columns in the form TFF's elements take.

    Args:
      arrays: A split of `client_arrays.synthetic_emnist` or
        `synthetic_stackoverflow` (numbered client ids; sentences of
        vocabulary words only).
      vocab: A StackOverflow split's vocabulary, most frequent word first.
    """
    self._index = {str(client_id): index
                   for index, client_id in enumerate(arrays.client_ids)}
    self._offsets = np.asarray(arrays.offsets, np.int64)
    self._kind = arrays.kind
    if arrays.kind == 'emnist':
      self._columns = collections.OrderedDict(
          label=np.asarray(arrays.features['label'], np.int32),
          pixels=np.asarray(arrays.features['pixels'], np.float32))
    else:
      self._columns = collections.OrderedDict(
          tokens=_sentences(np.asarray(arrays.features['tokens']), vocab))
    self._element_spec = self._dataset(collections.OrderedDict(
        (name, column[:0]) for name, column in self._columns.items())
                                       ).element_spec

  def _dataset(self, columns: Mapping[str, object]) -> tf.data.Dataset:
    """Rows of `columns` (arrays or tensors) as TFF's elements."""
    if self._kind == 'emnist':
      return tf.data.Dataset.from_tensor_slices(columns)
    return tf.data.Dataset.from_tensor_slices(columns['tokens']).map(
        _stackoverflow_element)

  @property
  def client_ids(self) -> list[str]:
    """The arrays' client ids, in their order."""
    return list(self._index)

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    """The client's examples, as a dataset holding only them.

    Args:
      client_id: One of `client_ids`.

    Returns:
      Its examples in the arrays' order, TFF's element structure.

    Raises:
      ValueError: `client_id` is not a client of this split.
    """
    if client_id not in self._index:
      raise ValueError(f'client_id must be one of the {len(self._index)} '
                       f'client ids; got {client_id!r}.')
    index = self._index[client_id]
    start, end = self._offsets[index], self._offsets[index + 1]
    return self._dataset(collections.OrderedDict(
        (name, column[start:end]) for name, column in self._columns.items()))

  @property
  def serializable_dataset_fn(self):
    """Traceable client id -> its examples, the split held as constants."""
    columns, offsets = self._columns, self._offsets

    def dataset_fn(client_id) -> tf.data.Dataset:
      index = tf.strings.to_number(client_id, out_type=tf.int64)
      bounds = tf.constant(offsets)
      start, end = bounds[index], bounds[index + 1]
      return self._dataset(collections.OrderedDict(
          (name, tf.constant(column)[start:end])
          for name, column in columns.items()))

    return dataset_fn

  @property
  def element_type_structure(self):
    """The elements' TensorSpecs: TFF's EMNIST or StackOverflow structure."""
    return self._element_spec


def _request(task: str, num_clients: int, examples_per_client: int,
             seed: int, sizes: str, vocab_size: int) -> task_data.DataRequest:
  """The launcher's data request for a task's stand-in of these sizes."""
  return task_data.DataRequest(
      task=task, data_dir=None, synthetic=True, num_clients=num_clients,
      examples_per_client=examples_per_client, client_sizes=sizes, seed=seed,
      vocab_size=vocab_size)


@validation.arguments('num_clients', 'examples_per_client', 'seed',
                      sizes=validation.Choice(client_arrays.CLIENT_SIZE_LAWS))
def emnist(num_clients: int, examples_per_client: int, seed: int = 0,
           sizes: str = 'equal'
           ) -> tuple[ArraysClientData, ArraysClientData]:
  """Synthetic EMNIST-62 (train, test): the JAX engine's, as TFF client data.

  The splits of `one_shot_epe.data.task_data.emnist` for these sizes
  (`task_data.synthetic_split`: the test split has the same client ids, as
  the real data's, with max(1, examples_per_client // 8) images each).

  Args:
    num_clients: number of clients (writers), >= 1.
    examples_per_client: train examples per client, >= 1.
    seed: determines all data.
    sizes: the law of the train clients' sizes, of mean
      `examples_per_client` (`client_arrays.client_sizes`: 'equal', or the
      writers' 'realistic' law).

  Returns:
    (train, test) federated data.
  """
  arrays = task_data.emnist(_request('emnist_character', num_clients,
                                     examples_per_client, seed, sizes, 0))
  return ArraysClientData(arrays.train), ArraysClientData(arrays.test)


def stackoverflow_vocab(vocab_size: int) -> list[str]:
  """The synthetic vocabulary, most frequent first: 'w0', 'w1', ...

  Args:
    vocab_size: The number of words.

  Returns:
    The words.
  """
  return [f'w{rank}' for rank in range(vocab_size)]


@validation.arguments('num_clients', 'examples_per_client', 'vocab_size',
                      'seed',
                      sizes=validation.Choice(client_arrays.CLIENT_SIZE_LAWS))
def stackoverflow(num_clients: int, examples_per_client: int,
                  vocab_size: int = 10_000, seed: int = 0,
                  sizes: str = 'equal'
                  ) -> tuple[ArraysClientData, ArraysClientData,
                             ArraysClientData, list[str]]:
  """Synthetic StackOverflow (train, heldout, test, vocab) with TFF's structure.

  The splits of `one_shot_epe.data.task_data.stackoverflow` for these sizes,
  and a held-out split of the test split's sizes
  (`task_data.synthetic_split`), as sentences of `stackoverflow_vocab`'s
  words. Elements are OrderedDict(creation_date, score, tags, title, tokens,
  type): all scalar tf.string except score (int64), in the key order of
  TFF's parser. The vocabulary (default 10,000 words, as in the paper) gives
  the real model size.

  Args:
    num_clients: number of clients (users), >= 1.
    examples_per_client: train sentences per client, >= 1.
    vocab_size: vocabulary size, >= 1.
    seed: determines all data.
    sizes: the law of the train clients' sizes, of mean
      `examples_per_client` (`client_arrays.client_sizes`: 'equal', or the
      users' heavy-tailed 'realistic' law).

  Returns:
    (train, heldout, test, the vocabulary).
  """
  request = _request('stackoverflow_word', num_clients, examples_per_client,
                     seed, sizes, vocab_size)
  arrays = task_data.stackoverflow(request)
  heldout = task_data.synthetic_split(
      functools.partial(client_arrays.synthetic_stackoverflow,
                        vocab_size=vocab_size), request, 'heldout')
  vocab = stackoverflow_vocab(vocab_size)
  return (ArraysClientData(arrays.train, vocab),
          ArraysClientData(heldout, vocab),
          ArraysClientData(arrays.test, vocab), vocab)


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
