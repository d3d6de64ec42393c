"""The `Task` object the experiment launcher trains on, and its argument checks.

A task bundles what DP-FedAvg with random canaries (paper, Section 4, Algorithms 2
and 3; experiments in Section 5) needs from a learning problem: a `tff.learning`
model function, the federated train data (one dataset per real client), a
centralized test set, the client-side preprocessing (epochs, batch size, example
cap), and the model dimension d that sets the null distribution N(0, 1/d) of the
canary cosines (Section 3, Theorems 3.1 and 3.2).
"""

from collections.abc import Callable
import dataclasses
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe import validation

__all__ = ['Task', 'client_spec', 'count_trainable_parameters']


@validation.arguments(client_epochs_per_round=validation.Int(1),
                      client_batch_size=validation.Int(1))
def client_spec(
    client_epochs_per_round: int, client_batch_size: int,
    max_examples_per_client: int | None
) -> tff.simulation.baselines.ClientSpec:
  """Validates the client preprocessing flags and returns TFF's `ClientSpec`.

  Args:
    client_epochs_per_round: passes over each client's data per round (>= 1).
    client_batch_size: examples per local step (>= 1).
    max_examples_per_client: cap on examples a client uses per round, applied
      after repeating for the epochs (TFF's `ClientSpec.max_elements`); `None` or
      -1 means no cap.

  Returns:
    TFF's client spec.

  Raises:
    ValueError: naming the argument that is out of range.
  """
  if max_examples_per_client == -1:
    max_examples_per_client = None
  if max_examples_per_client is not None:
    if (isinstance(max_examples_per_client, bool) or
        not isinstance(max_examples_per_client, (int, np.integer)) or
        max_examples_per_client < 1):
      raise ValueError(
          'max_examples_per_client must be an integer >= 1, or -1/None for all '
          f'examples; got {max_examples_per_client!r}.')
    max_examples_per_client = int(max_examples_per_client)
  return tff.simulation.baselines.ClientSpec(
      num_epochs=client_epochs_per_round,
      batch_size=client_batch_size,
      max_elements=max_examples_per_client,
  )


def count_trainable_parameters(
    model_fn: Callable[[], tff.learning.models.VariableModel]) -> int:
  """Number of trainable scalars of the model `model_fn` builds (the paper's d).

  Args:
    model_fn: Builds a fresh TFF model.

  Returns:
    d, the sum of the trainable weights' sizes.
  """
  with tf.Graph().as_default():
    model = model_fn()
    return int(sum(np.prod(v.shape.as_list()) for v in model.trainable_variables))


@dataclasses.dataclass(frozen=True)
class Task:
  """A federated learning task: model, data and client preprocessing.

  Attributes:
    name: registry name ('emnist_character' or 'stackoverflow_word').
    baseline: TFF's `BaselineTask` (model_fn, raw data, preprocessing functions).
    num_parameters: d, the number of trainable model parameters.
    data_source: 'synthetic' or the absolute data directory the data came from.
  """
  name: str
  baseline: tff.simulation.baselines.BaselineTask
  num_parameters: int
  data_source: str

  @classmethod
  def from_baseline(cls, name: str, baseline: tff.simulation.baselines.BaselineTask,
                    data_source: str) -> 'Task':
    """A `Task` of TFF's `baseline`, with d counted from its model.

    Args:
      name: The task's registry name.
      baseline: TFF's baseline task (model and datasets).
      data_source: 'synthetic' or the data directory, recorded in the task.

    Returns:
      The task.
    """
    return cls(name=name, baseline=baseline,
               num_parameters=count_trainable_parameters(baseline.model_fn),
               data_source=data_source)

  @property
  def model_fn(self) -> Callable[[], tff.learning.models.VariableModel]:
    """No-arg builder of a fresh `tff.learning.models.VariableModel`."""
    return self.baseline.model_fn

  @property
  def train_data(self) -> tff.simulation.datasets.ClientData:
    """Raw (unpreprocessed) federated training data, one dataset per client."""
    return self.baseline.datasets.train_data

  @functools.cached_property
  def preprocessed_train_data(self) -> tff.simulation.datasets.ClientData:
    """Training data after shuffle/repeat/take/batch: what a round's clients see."""
    return self.train_data.preprocess(self.baseline.datasets.train_preprocess_fn)

  @property
  def train_preprocess_fn(self) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """TFF's training preprocessing of one client's dataset.

    Shuffle, repeat for the client epochs, take the example cap, batch (and
    the task's reshaping); see the task modules.
    """
    return self.baseline.datasets.train_preprocess_fn

  @property
  def element_spec(self):
    """Element structure of preprocessed client datasets (the model input spec)."""
    return self.baseline.datasets.element_type_structure

  @property
  def client_ids(self) -> list[str]:
    """The training clients' ids, in the data's order (participation's)."""
    return self.preprocessed_train_data.client_ids

  @property
  def num_train_clients(self) -> int:
    """m, the number of real training clients (Section 5.1 sets delta = m^-1.1)."""
    return len(self.train_data.client_ids)

  @validation.arguments(max_examples=validation.Optional(validation.Int(1)))
  def test_dataset(self, max_examples: int | None = None) -> tf.data.Dataset:
    """The centralized, batched test set; its first `max_examples` if given.

    The examples come client by client, clients in a fixed pseudo-random order
    (seed 0), so a cap keeps whole clients' examples rather than a uniform
    sample of examples.

    Args:
      max_examples: The most examples to keep; None (or -1) for all.

    Returns:
      The test set, preprocessed and batched by the baseline's evaluation
      preprocessing.
    """
    test_data = self.baseline.datasets.test_data
    dataset = test_data.create_tf_dataset_from_all_clients(seed=0)
    if max_examples is not None:
      dataset = dataset.take(max_examples)
    return self.baseline.datasets.eval_preprocess_fn(dataset)
