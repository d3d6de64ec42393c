"""TFF's EMNIST and StackOverflow SQLite files as the JAX engine's arrays.

Run where TensorFlow Federated is installed; the JAX engine
(`experiments.train --backend=jax --data_dir=OUT`) then reads the result
without TensorFlow (`one_shot_epe.data.client_arrays.ClientArrays.load`, memory-mapped):

  python -m experiments.export_arrays --task=emnist_character \
      --data_dir=$HOME/tff_data --output_dir=OUT

writes OUT/<task>/train and OUT/<task>/test, each client's examples in the
order TFF's `ClientData` yields them, clients in `client_ids` order:

* EMNIST-62 (`all_train`, `all_test` of emnist_all.sqlite; Sec. 5.2.1):
  `pixels` float32 [n, 28, 28], `label` int32 [n];
* StackOverflow (`train`, `test` of stackoverflow.sqlite; Sec. 5.1): `tokens`
  int32 [n, 21], each sentence mapped by TFF's own
  `word_prediction_preprocessing.build_to_ids_fn` ([bos] + ids of the first
  20 words, + [eos] if shorter; out-of-vocabulary words in one bucket) over
  the `--vocab_size` most frequent words, padded with 0 as TFF's padded batch
  does.
"""

import os

import numpy as np
import tensorflow_federated as tff

from one_shot_epe.data import client_arrays
from one_shot_epe.tff_engine.tasks import emnist
from one_shot_epe.tff_engine.tasks import stackoverflow

__all__ = ['emnist_arrays', 'export', 'stackoverflow_arrays']

_to_ids_fn = (tff.simulation.baselines.stackoverflow.word_prediction_preprocessing
              .build_to_ids_fn)


def emnist_arrays(client_data: tff.simulation.datasets.ClientData
                  ) -> client_arrays.ClientArrays:
  """Every client's EMNIST examples as one `ClientArrays` split.

  Args:
    client_data: TFF's EMNIST federated data (one split).

  Returns:
    The split: pixels and labels, each client's examples in TFF's order.
  """
  pixels, labels, offsets = [], [], [0]
  for client_id in client_data.client_ids:
    for element in client_data.create_tf_dataset_for_client(client_id):
      pixels.append(np.reshape(element['pixels'].numpy(),
                               (client_arrays.IMAGE_SIZE, client_arrays.IMAGE_SIZE)))
      labels.append(int(element['label'].numpy()))
    offsets.append(len(labels))
  return client_arrays.ClientArrays(
      kind='emnist', client_ids=np.asarray(client_data.client_ids, str),
      offsets=np.asarray(offsets, np.int64),
      features={
          'pixels': np.asarray(pixels, np.float32).reshape(
              -1, client_arrays.IMAGE_SIZE, client_arrays.IMAGE_SIZE),
          'label': np.asarray(labels, np.int32)})


def stackoverflow_arrays(client_data: tff.simulation.datasets.ClientData,
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
  to_ids = _to_ids_fn(vocab, sequence_length,
                      stackoverflow.NUM_OUT_OF_VOCAB_BUCKETS)
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


def export(task: str, data_dir: str, output_dir: str,
           vocab_size: int = stackoverflow.VOCAB_SIZE) -> list[str]:
  """Converts `task`'s train and test splits; returns the directories written.

  Args:
    task: 'emnist_character' or 'stackoverflow_word'.
    data_dir: Holds TFF's SQLite files (and StackOverflow's word counts).
    output_dir: Where the splits' directories go.
    vocab_size: StackOverflow's vocabulary size.

  Returns:
    The directories written, one per split.

  Raises:
    ValueError: `task` is not 'emnist_character' or 'stackoverflow_word'.
    FileNotFoundError / ValueError: `data_dir` lacks the SQLite files (see
      `tff_cache.verify_sqlite`).
  """
  if task == emnist.TASK_NAME:
    train, test = emnist.load_client_data(data_dir)
    splits = {'train': emnist_arrays(train), 'test': emnist_arrays(test)}
  elif task == stackoverflow.TASK_NAME:
    train, _, test, vocab = stackoverflow.load_client_data(data_dir,
                                                           vocab_size)
    splits = {'train': stackoverflow_arrays(train, vocab),
              'test': stackoverflow_arrays(test, vocab)}
  else:
    allowed = [emnist.TASK_NAME, stackoverflow.TASK_NAME]
    raise ValueError(f'task must be one of {allowed}; got {task!r}.')
  written = []
  for split, arrays in splits.items():
    directory = os.path.join(output_dir, task, split)
    arrays.save(directory)
    written.append(directory)
  return written

