"""The tasks a run can train, one entry each (framework-free).

A `TaskEntry` says what the plan of a run needs to know about its task
before any data is read or any model is built: how many training clients
the real data has (when that is fixed), how many examples a real client
holds on average, the model's dimension d and the cost of training on one
example, each as a function of the vocabulary size where the task has one.
`experiments.train` checks a whole plan (its memory, disk and work,
`design.run_size`; its canaries' share) from these numbers before it loads
anything; tests hold every entry's d against both engines' models.

The numbers: EMNIST-62 has 3,383 writers and 671,585 training images (TFF's
`emnist` loader, Caldas et al. 2018); StackOverflow 342,477 users and
135,818,730 sentences (TFF's `stackoverflow` loader); Fashion-MNIST is
split into 1,200 clients of 50 images (`data.fashion_mnist`); Shakespeare's
speaking roles depend on the plays read (`data.shakespeare`). The models:
TFF's `cnn_dropout` CNN (conv 3x3x32, conv 3x3x64, dense 128, dense
classes) and TFF's StackOverflow word LSTM (embedding 96, LSTM 670, dense
96, dense vocab + 4) on sequences of 20 tokens. Training costs about three
times the forward pass (forward, and backward for activations and weights);
the forward pass costs 2 FLOPs per multiply-add.
"""

import dataclasses
from collections.abc import Callable

__all__ = ['TASKS', 'TaskEntry', 'task_entry']

# Multiply-adds of one forward pass of TFF's EMNIST CNN on a 28 x 28 image,
# without its last layer: conv 26x26x32 (3x3x1), conv 24x24x64 (3x3x32),
# dense 9216 -> 128.
_CNN_MACS = 26 * 26 * 32 * 9 + 24 * 24 * 64 * 9 * 32 + 9216 * 128
# Its parameters without the last layer (conv, conv, dense with biases).
_CNN_PARAMETERS = (3 * 3 * 32 + 32) + (3 * 3 * 32 * 64 + 64) + (9216 * 128 +
                                                               128)
# The word LSTM: embedding 96, LSTM 670, dense 96; the output layer has
# vocab + 4 tokens (padding, out of vocabulary, beginning and end).
_EMBEDDING, _LSTM, _SPECIAL_TOKENS = 96, 670, 4
_LSTM_PARAMETERS = 4 * _LSTM * (_EMBEDDING + _LSTM + 1) + (_LSTM * _EMBEDDING +
                                                          _EMBEDDING)
_SEQUENCE_LENGTH = 20
# Training: the forward pass, and the backward pass for activations and
# weights; 2 FLOPs per multiply-add.
_TRAINING_FLOPS_PER_MAC = 3 * 2


def _cnn_dim(classes: int) -> int:
  """d of the EMNIST CNN with `classes` outputs."""
  return _CNN_PARAMETERS + 128 * classes + classes


def _cnn_flops(classes: int) -> float:
  """Training FLOPs of one image through the EMNIST CNN."""
  return float(_TRAINING_FLOPS_PER_MAC * (_CNN_MACS + 128 * classes))


def _lstm_dim(vocab_size: int) -> int:
  """d of the word LSTM over a vocabulary of `vocab_size` words."""
  tokens = vocab_size + _SPECIAL_TOKENS
  return tokens * _EMBEDDING + _LSTM_PARAMETERS + _EMBEDDING * tokens + tokens


def _lstm_flops(vocab_size: int) -> float:
  """Training FLOPs of one 20-token sequence through the word LSTM."""
  per_token = (4 * _LSTM * (_EMBEDDING + _LSTM) + _LSTM * _EMBEDDING +
               _EMBEDDING * (vocab_size + _SPECIAL_TOKENS))
  return float(_TRAINING_FLOPS_PER_MAC * per_token * _SEQUENCE_LENGTH)


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """What a run's plan needs to know about one task.

  Attributes:
    name: The task's name (--task).
    num_clients: The real data's training clients; None where it depends on
      the data read (then the plan is checked once the data is loaded).
    examples_per_client: The mean training examples of a real client.
    synthetic: Whether the task has a synthetic stand-in
      (--use_synthetic_data).
    dim: d, the model's trainable parameters, given the vocabulary size
      (ignored by the image tasks).
    flops_per_example: FLOPs of training on one example (forward and
      backward), given the vocabulary size.
  """
  name: str
  num_clients: int | None
  examples_per_client: float
  synthetic: bool
  dim: Callable[[int], int]
  flops_per_example: Callable[[int], float]


TASKS: dict[str, TaskEntry] = {
    entry.name: entry for entry in (
        TaskEntry('emnist_character', num_clients=3_383,
                  examples_per_client=671_585 / 3_383, synthetic=True,
                  dim=lambda vocab_size: _cnn_dim(62),
                  flops_per_example=lambda vocab_size: _cnn_flops(62)),
        TaskEntry('stackoverflow_word', num_clients=342_477,
                  examples_per_client=135_818_730 / 342_477, synthetic=True,
                  dim=_lstm_dim, flops_per_example=_lstm_flops),
        TaskEntry('fashion_mnist', num_clients=1_200, examples_per_client=50.0,
                  synthetic=True, dim=lambda vocab_size: _cnn_dim(10),
                  flops_per_example=lambda vocab_size: _cnn_flops(10)),
        TaskEntry('shakespeare', num_clients=None, examples_per_client=60.0,
                  synthetic=False, dim=_lstm_dim,
                  flops_per_example=_lstm_flops),
    )
}


def task_entry(name: str) -> TaskEntry:
  """The entry of the task `name`.

  Args:
    name: One of `TASKS`.

  Returns:
    Its entry.

  Raises:
    ValueError: if there is no such task.
  """
  if name not in TASKS:
    raise ValueError(f'task must be one of {list(TASKS)}; got {name!r}.')
  return TASKS[name]
