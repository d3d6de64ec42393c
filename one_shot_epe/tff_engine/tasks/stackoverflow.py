"""StackOverflow next-word prediction with the LSTM of Reddi et al. (2020).

The paper's StackOverflow experiments (Section 5.1, Table 3) use "the StackOverflow
word prediction data/model of Reddi et al. [2020]", a word LSTM with about 4.1M
parameters. TFF's baseline `create_recurrent_model` is that model: a 10,000-word
vocabulary plus 4 special tokens (padding, one out-of-vocabulary bucket, beginning
and end of sentence), embedding 96, one LSTM layer of 670 units, dense 96, dense to
the 10,004 logits:

  96 V + 4 * 670 * (96 + 670 + 1) + (670 * 96 + 96) + (96 V + V) = 4,050,748
  for V = 10,004.

Preprocessing (TFF's `word_prediction_preprocessing`): shuffle (buffer 1,000),
repeat for the client epochs, take `max_examples_per_client` sentences, map each
sentence to [bos] + the first 20 token ids (+ [eos] when shorter), pad to 21,
batch, and split into 20 input and 20 target tokens. Model, preprocessing, loss
and the masked accuracy metrics come from TFF's
`create_word_prediction_task_from_datasets`. TFF's `create_word_prediction_task`
is not used: it loads the vocabulary without `cache_dir`, i.e. from the network.
`build_task` is the task's entry point (`design.tasks`): the real data or
`synthetic.stackoverflow`'s stand-in.
"""

import os

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_tasks

from one_shot_epe import validation
from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import synthetic
from one_shot_epe.tff_engine.tasks import tff_cache

__all__ = ['NUM_OUT_OF_VOCAB_BUCKETS', 'SEQUENCE_LENGTH', 'TASK_NAME',
           'VOCAB_SIZE', 'build_task', 'client_arrays_of', 'create_task',
           'exported_arrays', 'load_client_data', 'write_synthetic_files']

TASK_NAME = 'stackoverflow_word'
VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE
SEQUENCE_LENGTH = tff.simulation.baselines.stackoverflow.DEFAULT_SEQUENCE_LENGTH
NUM_OUT_OF_VOCAB_BUCKETS = 1
_TO_IDS = (tff.simulation.baselines.stackoverflow.word_prediction_preprocessing
           .build_to_ids_fn)


@validation.arguments('vocab_size')
def load_client_data(
    data_dir: str | None, vocab_size: int = VOCAB_SIZE
) -> tuple[tff.simulation.datasets.ClientData, tff.simulation.datasets.ClientData,
           tff.simulation.datasets.ClientData, list[str]]:
  """Loads StackOverflow (train, heldout, test, vocab) from `data_dir`, offline.

  The vocabulary is the `vocab_size` most frequent words of
  `stackoverflow.word_count`; the clients come from `stackoverflow.sqlite`.

  Args:
    data_dir: Holds stackoverflow.sqlite and the word counts.
    vocab_size: The vocabulary's size.

  Returns:
    (train, heldout, test, the vocabulary, most frequent first).

  Raises:
    FileNotFoundError / ValueError: see `tff_cache.verify_sqlite` and
      `tff_cache.read_word_counts`.
  """
  cache_dir = tff_cache.verify_sqlite(data_dir, tff_cache.STACKOVERFLOW)
  vocab = tff_cache.read_word_counts(cache_dir, vocab_size)
  with tff_cache.no_download():
    train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=cache_dir)
  return train, heldout, test, vocab


def create_task(train_client_spec: tff.simulation.baselines.ClientSpec,
                train_data: tff.simulation.datasets.ClientData,
                heldout_data: tff.simulation.datasets.ClientData,
                test_data: tff.simulation.datasets.ClientData,
                vocab: list[str],
                data_source: str) -> base.Task:
  """Wraps TFF's StackOverflow next-word baseline task around the given data.

  Args:
    train_client_spec: client epochs, batch size and example cap for training.
    train_data: federated data with TFF's StackOverflow element structure
      (creation_date, score, tags, title, tokens, type), real or synthetic.
    heldout_data: the held-out users (TFF's validation split).
    test_data: the test split; evaluated centrally in batches of 64.
    vocab: the vocabulary, most frequent word first.
    data_source: recorded in the returned task ('synthetic' or a directory).

  Returns:
    The task: TFF's LSTM, its preprocessing, the data and d.
  """
  baseline = word_prediction_tasks.create_word_prediction_task_from_datasets(
      train_client_spec=train_client_spec,
      eval_client_spec=None,
      sequence_length=SEQUENCE_LENGTH,
      vocab=list(vocab),
      num_out_of_vocab_buckets=NUM_OUT_OF_VOCAB_BUCKETS,
      train_data=train_data,
      test_data=test_data,
      validation_data=heldout_data,
  )
  return base.Task.from_baseline(TASK_NAME, baseline, data_source)


def build_task(train_client_spec: tff.simulation.baselines.ClientSpec,
               request: task_data.DataRequest) -> base.Task:
  """The task on the data `request` asks for (its entry point).

  Args:
    train_client_spec: client epochs, batch size and example cap.
    request: the data flags: `data_dir`'s stackoverflow.sqlite and word
      counts, or the synthetic stand-in's sizes and seed
      (`synthetic.stackoverflow`); the vocabulary's size either way.

  Returns:
    The task (`create_task`).

  Raises:
    FileNotFoundError / ValueError: see `load_client_data`; ValueError for
      sizes out of range.
  """
  if request.synthetic:
    train, heldout, test, vocab = synthetic.stackoverflow(
        request.num_clients, request.examples_per_client, request.vocab_size,
        request.seed, sizes=request.client_sizes)
    return create_task(train_client_spec, train, heldout, test, vocab,
                       'synthetic')
  train, heldout, test, vocab = load_client_data(request.data_dir,
                                                 request.vocab_size)
  return create_task(train_client_spec, train, heldout, test, vocab,
                     os.path.abspath(request.data_dir))


def write_synthetic_files(data_dir: str, num_clients: int,
                          examples_per_client: int, seed: int,
                          vocab_size: int) -> str:
  """`synthetic.stackoverflow`'s stand-in as TFF's files in `data_dir`.

  stackoverflow.sqlite (splits train, heldout, test) and
  stackoverflow.word_count: the vocabulary in order, with pseudo-counts V,
  V-1, ..., 1.

  Args:
    data_dir: An existing directory.
    num_clients: The number of users.
    examples_per_client: Training sentences per user.
    seed: Seed of every draw.
    vocab_size: The vocabulary's size V.

  Returns:
    The SQLite file's path.
  """
  train, heldout, test, vocab = synthetic.stackoverflow(
      num_clients, examples_per_client, vocab_size, seed)
  tff_cache.write_word_counts(
      os.path.join(data_dir, tff_cache.WORD_COUNT_FILE),
      {word: len(vocab) - rank for rank, word in enumerate(vocab)})
  return synthetic.write_splits(
      data_dir, tff_cache.STACKOVERFLOW.file_name,
      {'train': train, 'heldout': heldout, 'test': test})


def client_arrays_of(client_data: tff.simulation.datasets.ClientData,
                     vocab: list[str],
                     sequence_length: int = client_arrays.SEQUENCE_LENGTH
                     ) -> client_arrays.ClientArrays:
  """Every client's sentences as token rows (TFF's `to_ids`, 0-padded).

  Args:
    client_data: TFF's StackOverflow federated data (one split).
    vocab: The vocabulary, most frequent word first.
    sequence_length: The model's sequence length.

  Returns:
    The split: one int32 row of sequence_length + 1 ids per sentence.
  """
  to_ids = _TO_IDS(vocab, sequence_length, NUM_OUT_OF_VOCAB_BUCKETS)
  rows, offsets = [], [0]
  for client_id in client_data.client_ids:
    for ids in client_data.create_tf_dataset_for_client(client_id).map(to_ids):
      row = np.zeros(sequence_length + 1, np.int32)
      row[:ids.shape[0]] = ids.numpy()
      rows.append(row)
    offsets.append(len(rows))
  return client_arrays.ClientArrays(
      kind='stackoverflow', client_ids=np.asarray(client_data.client_ids, str),
      offsets=np.asarray(offsets, np.int64),
      features={'tokens': np.asarray(rows, np.int32).reshape(
          -1, sequence_length + 1)})


def exported_arrays(data_dir: str, vocab_size: int
                    ) -> dict[str, client_arrays.ClientArrays]:
  """StackOverflow's train and test splits as client arrays (`export_arrays`).

  Args:
    data_dir: Holds stackoverflow.sqlite and the word counts.
    vocab_size: The vocabulary's size.

  Returns:
    'train' and 'test': `client_arrays_of` each, over the `vocab_size` most
    frequent words.

  Raises:
    FileNotFoundError / ValueError: see `load_client_data`.
  """
  train, _, test, vocab = load_client_data(data_dir, vocab_size)
  return {'train': client_arrays_of(train, vocab),
          'test': client_arrays_of(test, vocab)}
