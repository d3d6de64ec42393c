"""`--backend=tff`: the launcher's run on TensorFlow Federated.

The task (`one_shot_epe.tff_engine.tasks`: TFF's SQLite files read offline,
Fashion-MNIST's IDX files, or synthetic stand-ins) and the run loop
(`one_shot_epe.tff_engine.training`: DP-FedAvg with the canary aggregator,
observed and checkpointed by a `CanaryAudit`), in the execution context the
flags ask for: one local C++ worker, --tff_workers local workers, or the
running workers at --tff_worker_addresses.

Reproducibility: on a given machine and TensorFlow build, a run with canaries
is a pure function of its flags (--num_canaries=0 runs use TFF's own DP
factory, whose noise is unseeded). The DP noise of round t is drawn from
(noise seed, t) with the noise seed derived from --seed (`noise_seed`;
--noseeded_noise turns this off, as a deployment must); each round's client
selection and shuffles depend on (--seed, round) only; the EMNIST model's
dropout masks are keyed by the layer's input and its batches kept in order
(`tasks.determinism`).
"""

import os

import numpy as np

from experiments import engine
from experiments import train_config
from one_shot_epe import canary_spec
from one_shot_epe import run_directory
from one_shot_epe.tff_engine import accelerators
from one_shot_epe.tff_engine import checkpoints
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine import training


def check_supported(config: train_config.TrainConfig) -> None:
  """--accelerator=gpu needs a GPU that this process's TensorFlow sees."""
  try:
    accelerators.launcher_device(config.accelerator)
  except ValueError as error:
    raise train_config.ConfigError(str(error)) from None


def load_data(config: train_config.TrainConfig) -> tasks.Task:
  """The task (model and data) of the flags, read offline."""
  try:
    return tasks.get_task(
        config.task, client_batch_size=config.client_batch_size,
        client_epochs_per_round=config.client_epochs_per_round,
        max_examples_per_client=config.max_examples_per_client,
        data_dir=config.data_dir, use_synthetic_data=config.use_synthetic_data,
        synthetic_num_clients=config.synthetic_num_clients,
        synthetic_examples_per_client=config.synthetic_examples_per_client,
        synthetic_client_sizes=config.synthetic_client_sizes,
        seed=engine.SYNTHETIC_DATA_SEED, vocab_size=config.vocab_size)
  except (ValueError, FileNotFoundError) as error:
    message = str(error)
    raise train_config.ConfigError(
        message if message.startswith('--data_dir') else
        f'--data_dir: {message}') from None


def noise_seed(config: train_config.TrainConfig) -> int | None:
  """Seed of the DP noise (`seeded_queries`), None for unseeded noise.

  A pure function of --seed, independent of the round seeds
  (`training.selection_fn`). Noise that anyone holding the config can
  regenerate is fine for a simulated audit, never for a deployment
  (--noseeded_noise).
  """
  if not config.seeded_noise:
    return None
  return int(np.random.SeedSequence([config.seed, 1]).generate_state(1)[0])


# Round 0 and the last two (`tff_engine.training`).
CHECKPOINTS_KEPT = training.CHECKPOINTS_KEPT
# Float32 vectors of size d per optimizer in the server state.
_OPTIMIZER_SLOTS = {'sgd': 0, 'sgdm': 1, 'adam': 2}


def saved_checkpoints(run_dir: str) -> list[int]:
  """The versions of the run's `FileProgramStateManager` checkpoints."""
  return checkpoints.versions(os.path.join(run_dir,
                                           run_directory.CHECKPOINT_DIR))


def checkpoint_bytes(run: engine.PreparedRun) -> int:
  """A checkpoint: the model, the server optimizer's slots, the aggregator's
  last aggregate and, with canaries, the audit's theta_0 and maxima."""
  dim = run.data.num_parameters
  vectors = 2 + _OPTIMIZER_SLOTS[run.config.server_optimizer]
  if run.canaries is None:
    return 4 * vectors * dim
  return 4 * ((vectors + 1) * dim + run.canaries.num_seen +
              run.canaries.num_unseen)


def verify_checkpoints(directory: str) -> None:
  """Raises ValueError unless the newest TFF checkpoint reads back."""
  training.verify_checkpoints(directory)


def remove_leftovers(run_dir: str) -> None:
  """Deletes partial checkpoints and TFF's CSV temporaries."""
  training.remove_leftovers(run_dir)


def train(run: engine.PreparedRun) -> canary_spec.CanaryOutcome:
  """Trains (or resumes) `run` in its execution context."""
  config = run.config
  plan = training.Plan(
      task=run.data, sampler=run.sampler, total_rounds=run.total_rounds,
      dp=run.dp, canaries=run.canaries, delta=run.delta,
      client_optimizer=training.optimizer(config.client_optimizer,
                                          config.client_learning_rate,
                                          config.client_momentum),
      server_optimizer=training.optimizer(config.server_optimizer,
                                          config.server_learning_rate,
                                          config.server_momentum),
      seed=config.seed, noise_seed=noise_seed(config),
      rounds_per_evaluation=config.rounds_per_evaluation,
      rounds_per_checkpoint=config.rounds_per_checkpoint,
      max_eval_examples=(None if config.max_eval_examples == -1 else
                         config.max_eval_examples),
      progress_bar=config.progress_bar,
      device=accelerators.launcher_device(config.accelerator))
  with training.execution_context(config.tff_workers,
                                  config.tff_worker_addresses):
    return training.train(plan, config.run_dir)
