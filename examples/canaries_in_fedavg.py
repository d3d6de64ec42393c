"""Canaries in an existing `tff.learning` FedAvg pipeline, end to end.

The pipeline is TFF's own: `build_unweighted_fed_avg` trained by
`tff.simulation.run_training_process`. Auditing it takes the four marked
lines: plan the canaries, use the audit's DP aggregator, let the loop's
program state manager observe every round, print the report (Andrew et al.,
ICLR 2024: Algorithm 2 for the final model, Algorithm 3 for all iterates).

The model and data are stand-ins small enough to run in seconds (softmax
regression on random points). From the repository root (`examples` is not an
installed package):

  python -m examples.canaries_in_fedavg

or from any directory, by path: `python <repo>/examples/canaries_in_fedavg.py`.
"""

# The project first: it imports TensorFlow without its start-up noise.
from one_shot_epe.tff_engine import audit, runtime
# pylint: disable=g-bad-import-order
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# 20 canaries over 10 rounds: 2 a round beside 20 clients, under a tenth of
# a round's participants (more would change the training they audit).
NUM_CLIENTS, CLIENTS_PER_ROUND, ROUNDS, FEATURES, CLASSES = 50, 20, 10, 20, 4


def model_fn() -> tff.learning.models.VariableModel:
  """Softmax regression from FEATURES inputs to CLASSES classes.

  Returns:
    A fresh TFF model (TFF calls this once per use).
  """
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(CLASSES, kernel_initializer='zeros')])
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def client_dataset(client: int) -> tf.data.Dataset:
  """Client `client`'s 16 random examples in batches of 8.

  Args:
    client: The client's index, which seeds its examples.

  Returns:
    The client's dataset of (features, label) batches.
  """
  rng = np.random.default_rng(client)
  x = rng.normal(size=(16, FEATURES)).astype(np.float32)
  y = rng.integers(0, CLASSES, size=16).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(8)


def select_clients(round_num: int) -> list[tf.data.Dataset]:
  """Round `round_num`'s cohort: CLIENTS_PER_ROUND clients, seeded by round.

  Args:
    round_num: The round, as `tff.simulation.run_training_process` counts.

  Returns:
    The cohort's datasets.
  """
  rng = np.random.default_rng(round_num)
  chosen = rng.choice(NUM_CLIENTS, CLIENTS_PER_ROUND, replace=False)
  return [client_dataset(int(client)) for client in chosen]


def main() -> None:
  """Trains with canaries and prints the privacy report."""
  canary_audit = audit.CanaryAudit(  # 1. Plan the canaries.
      num_canaries=20, rounds=ROUNDS, clients_per_round=CLIENTS_PER_ROUND,
      delta=NUM_CLIENTS**-1.1, noise_seed=0)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=canary_audit.gaussian_adaptive(  # 2. The DP aggregator.
          noise_multiplier=0.5))
  with runtime.local_cpp_context():
    tff.simulation.run_training_process(
        process, select_clients, ROUNDS,
        program_state_manager=canary_audit.program_state_manager())  # 3.
  print(canary_audit.report().to_markdown())  # 4. Both threat models.


if __name__ == '__main__':
  main()
