"""A zero-initialised linear classifier as a TFF model, shared by TFF tests.

Not collected (no `_test` suffix). Small enough that a DP-FedAvg round traces
and runs in seconds, yet a real `tff.learning` model with trainable weights.
"""

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
