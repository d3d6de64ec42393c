"""Small synthetic runs that learn, shared by the engines' tests (not collected).

EMNIST: 4 synthetic writers of 128 images, 2 per round for 10 rounds, 2
local epochs (16 local steps a round); StackOverflow: 4 users of 64 sentences
over a 100-word vocabulary, 2 per round for 20 rounds. Both with a fixed
clip of 10 (no clipping in effect), no noise and two canaries of each kind,
evaluated on the whole synthetic test split. Chance accuracy is 1/62 for
EMNIST and about 1/104 for the next word (104 tokens); a model that learned
the stand-in's structure scores far above: the class templates, and the next
word 1 to 3 ranks after the last (a third of the in-vocabulary targets at
best).
"""

from experiments import train_config

# Accuracies that chance does not reach on these test splits (64 images;
# 32 sentences, about 500 targets): 19 and 5 times chance.
EMNIST_ACCURACY = 0.3
STACKOVERFLOW_ACCURACY = 0.05
_TASKS = {
    'emnist_character': dict(
        synthetic_num_clients=4, synthetic_examples_per_client=128,
        total_rounds=10, client_learning_rate=0.1),
    'stackoverflow_word': dict(
        vocab_size=100, synthetic_num_clients=4,
        synthetic_examples_per_client=64, total_rounds=20,
        client_learning_rate=0.3),
}


def config(backend: str, task: str, root: str) -> train_config.TrainConfig:
  """The task's small learning run on `backend`, writing under `root`."""
  settings = dict(
      backend=backend, task=task, use_synthetic_data=True,
      clients_per_round=2, client_epochs_per_round=2, client_batch_size=16,
      client_optimizer='sgd', server_optimizer='sgdm',
      server_learning_rate=1.0, server_momentum=0.9, clipping_norm=10.0,
      noise_multiplier=0.0, num_canaries=2, num_unseen_canaries=2,
      max_eval_examples=-1, root_output_dir=root, run_name=task,
      progress_bar=False, **_TASKS[task])
  settings['rounds_per_evaluation'] = settings['total_rounds']
  settings['rounds_per_checkpoint'] = settings['total_rounds']
  return train_config.TrainConfig(**settings)
