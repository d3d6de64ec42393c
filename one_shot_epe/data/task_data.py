"""A task's client arrays from the launcher's data flags (framework-free).

Every task's framework-free loader (`design.tasks.EngineTask.data`, the
data the JAX engine trains on) takes a `DataRequest` (--task, --data_dir,
--use_synthetic_data and the synthetic sizes, --vocab_size) and returns its
`TaskArrays`: training clients, test split and where they came from. The
loaders of EMNIST and StackOverflow are here (`emnist`, `stackoverflow`):
their synthetic stand-ins (`client_arrays.synthetic_emnist`,
`client_arrays.synthetic_stackoverflow`) or the arrays that
`experiments.export_arrays` wrote from TFF's files (`exported`);
Fashion-MNIST's and Shakespeare's are in their own modules
(`fashion_mnist.task_arrays`, `shakespeare.task_arrays`).

A synthetic stand-in's training split has `DataRequest.num_clients` clients
of the request's sizes; its test split (and StackOverflow's held-out split,
which the TFF engine's task takes) the same clients with
max(1, examples_per_client // 8) examples each, about EMNIST's ratio of test
to training examples: `synthetic_split`. Every split comes from the request's
seed and shares the task's structure (the same class templates, the same
vocabulary law) with other examples. Both engines train and test on these
arrays (`one_shot_epe.tff_engine.tasks.synthetic` reads them as TFF client
data).
"""

import dataclasses
import functools
import os
from collections.abc import Callable

from one_shot_epe.data import client_arrays

__all__ = ['DataRequest', 'TaskArrays', 'emnist', 'exported',
           'stackoverflow', 'synthetic', 'synthetic_split']


@dataclasses.dataclass(frozen=True)
class DataRequest:
  """What a run asks of its task's data: the launcher's data flags.

  Attributes:
    task: The task's name (--task).
    data_dir: The data's directory (--data_dir), or None.
    synthetic: Whether to use the synthetic stand-in (--use_synthetic_data).
    num_clients: The stand-in's training clients.
    examples_per_client: Its examples per client (the mean with realistic
      sizes).
    client_sizes: The law of its clients' sizes ('equal' or 'realistic',
      `client_arrays.client_sizes`).
    seed: The seed of its draws.
    vocab_size: The vocabulary's size (the tasks that have one).
  """
  task: str
  data_dir: str | None
  synthetic: bool
  num_clients: int
  examples_per_client: int
  client_sizes: str
  seed: int
  vocab_size: int


@dataclasses.dataclass(frozen=True)
class TaskArrays:
  """A task's client arrays, as its loader read or drew them.

  Attributes:
    train: The training clients.
    test: The test split (one pooled client, or the test clients).
    source: Where they came from ('synthetic' or a directory).
  """
  train: client_arrays.ClientArrays
  test: client_arrays.ClientArrays
  source: str


def synthetic_split(make: Callable[..., client_arrays.ClientArrays],
                    request: DataRequest,
                    split: str = 'train') -> client_arrays.ClientArrays:
  """One split of a stand-in: `make(num_clients, examples_per_client, ...)`.

  Args:
    make: Draws a split: called with the clients, the examples per client
      and the keywords `seed`, `sizes` and `split`
      (`client_arrays.synthetic_emnist`'s).
    request: The sizes and seed.
    split: One of `client_arrays.SPLITS`.

  Returns:
    'train': the request's clients and sizes; any other split: the same
    clients with max(1, examples_per_client // 8) examples each.
  """
  if split == 'train':
    return make(request.num_clients, request.examples_per_client,
                seed=request.seed, sizes=request.client_sizes, split=split)
  return make(request.num_clients, max(1, request.examples_per_client // 8),
              seed=request.seed, sizes='equal', split=split)


def synthetic(make: Callable[..., client_arrays.ClientArrays],
              request: DataRequest) -> TaskArrays:
  """A stand-in's training and test splits (`synthetic_split`).

  Args:
    make: Draws a split, as `synthetic_split`'s.
    request: The sizes and seed.

  Returns:
    The splits 'train' and 'test' of the request's seed.
  """
  return TaskArrays(synthetic_split(make, request, 'train'),
                    synthetic_split(make, request, 'test'), 'synthetic')


def exported(request: DataRequest) -> TaskArrays:
  """The arrays exported for the task: <data_dir>/<task>/{train,test}.

  Args:
    request: The task and its --data_dir.

  Returns:
    Both splits, memory-mapped (`client_arrays.ClientArrays.load`).

  Raises:
    ValueError: naming --data_dir, if a split cannot be read.
  """
  directory = os.path.join(request.data_dir or '', request.task)
  try:
    train = client_arrays.ClientArrays.load(os.path.join(directory, 'train'))
    test = client_arrays.ClientArrays.load(os.path.join(directory, 'test'))
  except (OSError, ValueError) as error:
    raise ValueError(
        f'--data_dir with --backend=jax must hold {directory}/train and '
        f'{directory}/test written by one_shot_epe.data.client_arrays.'
        'ClientArrays.save (or use --use_synthetic_data): '
        f'{error}') from None
  return TaskArrays(train, test, directory)


def emnist(request: DataRequest) -> TaskArrays:
  """EMNIST-62: the synthetic stand-in, or the exported arrays.

  Args:
    request: The data flags.

  Returns:
    The splits (`client_arrays.synthetic_emnist`, or `exported`).

  Raises:
    ValueError: as `exported`.
  """
  if request.synthetic:
    return synthetic(client_arrays.synthetic_emnist, request)
  return exported(request)


def stackoverflow(request: DataRequest) -> TaskArrays:
  """StackOverflow: the synthetic stand-in, or the exported arrays.

  Args:
    request: The data flags (the stand-in's vocabulary: its vocab_size).

  Returns:
    The splits (`client_arrays.synthetic_stackoverflow`, or `exported`).

  Raises:
    ValueError: as `exported`.
  """
  if request.synthetic:
    return synthetic(functools.partial(client_arrays.synthetic_stackoverflow,
                                       vocab_size=request.vocab_size),
                     request)
  return exported(request)
