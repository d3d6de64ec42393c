"""The tiny launcher run shared by the train*_test files (not collected).

Four rounds of 3 of 12 synthetic EMNIST clients with 4 seen canaries, each
presented twice, and 16 unseen: 2 canaries among 5 expected participants per
round (at most half may be canaries: `canary_schedules.MAX_CANARY_SHARE`).
It trains in seconds, and every flag check has a valid config to start from.
"""

from experiments import train_config

NUM_CLIENTS = 12
TOTAL_ROUNDS = 4
NOISE = 0.05
NUM_CANARIES = 4
NUM_UNSEEN_CANARIES = 16
CANARY_REPEATS = 2


def config(root: str, **overrides) -> train_config.TrainConfig:
  """4 rounds of 3 clients with 4 seen canaries (twice each), 16 unseen."""
  settings = dict(
      task='emnist_character', use_synthetic_data=True,
      synthetic_num_clients=NUM_CLIENTS, synthetic_examples_per_client=8,
      clients_per_round=3, total_rounds=TOTAL_ROUNDS, client_batch_size=4,
      noise_multiplier=NOISE, num_canaries=NUM_CANARIES,
      num_unseen_canaries=NUM_UNSEEN_CANARIES, canary_repeats=CANARY_REPEATS,
      rounds_per_evaluation=2,
      rounds_per_checkpoint=3, max_eval_examples=16, root_output_dir=root,
      run_name='tiny', progress_bar=False)
  settings.update(overrides)
  return train_config.TrainConfig(**settings)
