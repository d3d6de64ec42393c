"""A zero-initialised linear classifier as a TFF model, and data for it.

Shared by TFF tests; not collected (no `_test` suffix). Small enough that a
DP-FedAvg round traces and runs in seconds, yet a real `tff.learning` model
with trainable weights.
"""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def model_fn_for(features: int, classes: int):
  """A `model_fn` of softmax regression from `features` inputs to `classes`."""

  def model_fn() -> tff.learning.models.VariableModel:
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(features,)),
        tf.keras.layers.Dense(classes, kernel_initializer='zeros'),
    ])
    return tff.learning.models.from_keras_model(
        keras_model,
        input_spec=(tf.TensorSpec([None, features], tf.float32),
                    tf.TensorSpec([None], tf.int32)),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  return model_fn


def client_datasets(num_clients: int, features: int, classes: int,
                    examples: int, batch_size: int,
                    seed: int) -> list[tf.data.Dataset]:
  """`num_clients` batched datasets of Gaussian inputs and uniform labels."""
  rng = np.random.default_rng(seed)
  datasets = []
  for _ in range(num_clients):
    x = rng.normal(size=(examples, features)).astype(np.float32)
    y = rng.integers(0, classes, size=examples).astype(np.int32)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size))
  return datasets
