"""Data canaries on the TFF engine: their clients' datasets and their losses.

A data canary (`design.canary_kinds`, `data.canary_examples`) is a client
whose examples are the canary's: here its dataset is built from the
canary's arrays in the task's preprocessed element structure (images
(x [n, 28, 28, 1], y [n]), token sequences (x = tokens[:, :-1],
y = tokens[:, 1:]), as TFF's preprocessing gives them), repeated for the
client epochs, cut to the client's example cap and batched as any client's
(not shuffled: the canary's examples are fixed, their order immaterial to
the audit), so it trains through `tff.learning`'s client path, its clip and
its noise. `LossScorer` scores the canaries on a model's weights (every
round's, for their all-iterates score): the keras model's loss on each
canary's examples, without dropout; `losses` once.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays

__all__ = ['LossScorer', 'canary_batch', 'client_dataset', 'client_datasets',
           'losses', 'round_datasets']


def canary_batch(arrays: client_arrays.ClientArrays, index: int,
                 element_spec: Sequence[tf.TensorSpec]
                 ) -> tuple[np.ndarray, np.ndarray]:
  """Canary `index`'s examples as one batch of the task's (x, y) structure.

  Args:
    arrays: The canaries, one client each.
    index: The canary's client index in `arrays`.
    element_spec: The task's preprocessed (x, y) TensorSpecs.

  Returns:
    (x, y), numpy arrays of the spec's dtypes and shapes.
  """
  rows = slice(int(arrays.offsets[index]), int(arrays.offsets[index + 1]))
  if arrays.kind == 'emnist':
    inputs = np.asarray(arrays.features['pixels'][rows])
    labels = np.asarray(arrays.features['label'][rows])
  else:
    tokens = np.asarray(arrays.features['tokens'][rows])
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
  x_spec, y_spec = element_spec
  return (inputs.reshape((-1, *x_spec.shape[1:])).astype(
      x_spec.dtype.as_numpy_dtype),
          labels.reshape((-1, *y_spec.shape[1:])).astype(
              y_spec.dtype.as_numpy_dtype))


def client_dataset(arrays: client_arrays.ClientArrays, index: int,
                   element_spec: Sequence[tf.TensorSpec], *, batch_size: int,
                   epochs: int, max_examples: int | None) -> tf.data.Dataset:
  """Canary `index`'s client dataset, preprocessed as a training client's.

  Args:
    arrays: The canaries, one client each.
    index: The canary's client index in `arrays`.
    element_spec: The task's preprocessed (x, y) TensorSpecs.
    batch_size: The client batch size.
    epochs: The client epochs per round.
    max_examples: A client's example cap per round (after the epochs);
      None for all.

  Returns:
    Its examples, repeated for the epochs, capped and batched.
  """
  dataset = tf.data.Dataset.from_tensor_slices(
      canary_batch(arrays, index, element_spec)).repeat(epochs)
  if max_examples is not None:
    dataset = dataset.take(max_examples)
  return dataset.batch(batch_size)


def client_datasets(arrays: client_arrays.ClientArrays,
                    element_spec: Sequence[tf.TensorSpec], *,
                    batch_size: int, epochs: int,
                    max_examples: int | None) -> list[tf.data.Dataset]:
  """Each canary's client dataset (`client_dataset`), in the order of `arrays`.

  Args:
    arrays: The seen canaries, one client each.
    element_spec: The task's preprocessed (x, y) TensorSpecs.
    batch_size: The client batch size.
    epochs: The client epochs per round.
    max_examples: A client's example cap per round; None for all.

  Returns:
    One dataset per canary.
  """
  return [client_dataset(arrays, index, element_spec, batch_size=batch_size,
                         epochs=epochs, max_examples=max_examples)
          for index in range(arrays.num_clients)]


def round_datasets(datasets: Sequence[tf.data.Dataset],
                   clients: Callable[[int], np.ndarray], num_real_clients: int
                   ) -> Callable[[int], list[tf.data.Dataset]]:
  """The canary datasets joining each 0-based round.

  Args:
    datasets: The seen canaries' datasets (`client_datasets`), canary j at
      index j.
    clients: 0-based round -> the canary clients that join it, client
      indices from `num_real_clients` on (`DataCanaryPlan.clients`).
    num_real_clients: The real training clients before the canaries.

  Returns:
    0-based round -> the joining canaries' datasets.
  """
  return lambda t: [datasets[int(i) - num_real_clients] for i in clients(t)]


class LossScorer:
  """Scores data canaries on model weights: each canary's mean loss.

  The model is built once and every canary's examples stacked once
  ([canaries, examples, ...]: each canary holds the same number); each
  call assigns the weights and maps the model's loss (no dropout) over
  the canaries in one traced function, so scoring every round's model
  costs one call per round.
  """

  def __init__(self, model_fn: Callable[[], Any],
               arrays: client_arrays.ClientArrays,
               element_spec: Sequence[tf.TensorSpec]):
    """Builds the model and stacks the canaries' examples.

    Args:
      model_fn: Builds the task's `tff.learning` model.
      arrays: The canaries, one client each, equal in examples.
      element_spec: The task's preprocessed (x, y) TensorSpecs.

    Raises:
      ValueError: the canaries hold different numbers of examples.
    """
    canary_examples.examples_per_canary(arrays)  # Equal, or ValueError.
    batches = [canary_batch(arrays, index, element_spec)
               for index in range(arrays.num_clients)]
    self._inputs = tf.constant(np.stack([x for x, _ in batches]))
    self._labels = tf.constant(np.stack([y for _, y in batches]))
    self._model = model_fn()

    @tf.function
    def scores(inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
      return tf.map_fn(
          lambda pair: tf.cast(self._model.forward_pass(
              pair, training=False).loss, tf.float32),
          (inputs, labels), fn_output_signature=tf.float32)

    self._scores = scores

  def __call__(self, weights: Any) -> np.ndarray:
    """Each canary's mean loss under `weights`.

    Args:
      weights: The model's weights (`tff.learning.models.ModelWeights`, as
        `LearningProcess.get_model_weights` returns them).

    Returns:
      float64 [canaries].
    """
    tff.learning.models.ModelWeights(
        trainable=list(weights.trainable),
        non_trainable=list(weights.non_trainable)).assign_weights_to(
            self._model)
    return np.asarray(self._scores(self._inputs, self._labels), np.float64)


def losses(model_fn: Callable[[], Any], weights: Any,
           arrays: client_arrays.ClientArrays,
           element_spec: Sequence[tf.TensorSpec]) -> np.ndarray:
  """The model's mean loss on each canary's examples (no dropout), once.

  Args:
    model_fn: Builds the task's `tff.learning` model.
    weights: The model's weights (`tff.learning.models.ModelWeights`, as
      `LearningProcess.get_model_weights` returns them).
    arrays: The canaries, one client each.
    element_spec: The task's preprocessed (x, y) TensorSpecs.

  Returns:
    float64 [canaries].
  """
  return LossScorer(model_fn, arrays, element_spec)(weights)
