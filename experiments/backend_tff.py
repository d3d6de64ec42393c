"""`--backend=tff`: the launcher's run on TensorFlow Federated.

The task (`one_shot_epe.tff_engine.tasks`: TFF's SQLite files read offline,
Fashion-MNIST's IDX files, or the synthetic stand-ins' numpy arrays that
the JAX engine trains on) and the run loop
(`one_shot_epe.tff_engine.training`: DP-FedAvg with the canary aggregator,
observed and checkpointed by a `CanaryAudit`), in the execution context the
flags ask for: one local C++ worker, --tff_workers local workers, or the
running workers at --tff_worker_addresses. Besides the launcher's files
(`experiments.run_outputs`), a TFF run shows its rounds in TensorBoard
(tensorboard/).

Reproducibility: on a given machine and TensorFlow build, a run with canaries
is a pure function of its flags (--num_canaries=0 runs use TFF's own DP
factory, whose noise is unseeded). The DP noise of round t is drawn from
(noise seed, t) with the noise seed derived from --seed (`noise_seed`;
--noseeded_noise turns this off, as a deployment must, `experiments.train`);
each round's client
selection and shuffles depend on (--seed, round) only; the EMNIST model's
dropout masks are keyed by the layer's input and its batches kept in order
(`tasks.determinism`).
"""

import os
from collections.abc import Mapping, Sequence

import tensorflow as tf

from experiments import engine
from experiments import train_config
from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import accelerators
from one_shot_epe.tff_engine import checkpoints as checkpoints_lib
from one_shot_epe.tff_engine import support
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine import training

__all__ = ['CSV_FORMAT', 'PROGRAMS', 'check_device_memory', 'check_options',
           'checkpoint_bytes', 'checkpoints', 'correlated_report', 'load_data',
           'supports', 'train']

# Which plans the engine runs (`tff_engine.support`).
supports = support.supports
# TFF's runtime trains one run at a time.
PROGRAMS = False

# The TFF engine's per-round CSVs, as TFF's CSV release managers wrote them.
CSV_FORMAT = run_directory.CsvFormat(sort_new_columns=True,
                                     line_terminator='\r\n')


def check_options(config: train_config.TrainConfig) -> None:
  """--accelerator=gpu needs a GPU that this process's TensorFlow sees.

  Args:
    config: the validated launcher config.

  Raises:
    train_config.ConfigError: --noresident_data is set (JAX only), or the
      --accelerator is not available to TensorFlow.
  """
  if not config.resident_data:
    raise train_config.ConfigError(
        '--noresident_data applies to --backend=jax only (TFF\'s workers '
        'read their clients\' datasets themselves).')
  try:
    accelerators.launcher_device(config.accelerator)
  except ValueError as error:
    raise train_config.ConfigError(str(error)) from None


def load_data(config: train_config.TrainConfig) -> tasks.Task:
  """The task (model and data) of the flags, read offline.

  Args:
    config: the validated launcher config (task, --data_dir or synthetic
      data sizes, client batch size and epochs).

  Returns:
    The task: its model, preprocessed client data and test data.

  Raises:
    train_config.ConfigError: naming --data_dir, if the data cannot be read
      or does not fit the flags.
  """
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
  except (ValueError, FileNotFoundError, ModuleNotFoundError) as error:
    message = str(error)
    raise train_config.ConfigError(
        message if message.startswith('--') else
        f'--data_dir: {message}') from None


def checkpoints(directory: str) -> checkpoints_lib.ProgramStateCheckpoints:
  """The run's TFF program state checkpoints in `directory`.

  Args:
    directory: the run directory's checkpoint folder.

  Returns:
    The store over TFF's program state versions there (creates nothing).
  """
  return checkpoints_lib.ProgramStateCheckpoints(directory)


def correlated_report(run: engine.PreparedRun) -> None:
  """None: the TFF engine runs no correlated (matrix-factorization) noise.

  Args:
    run: the prepared run (unused).
  """
  del run


def check_device_memory(run: engine.PreparedRun, runs: int = 1) -> None:
  """Nothing to check: TFF's workers hold one client's batches at a time.

  Args:
    run: the prepared run (unused).
    runs: the runs of one program (unused: TFF trains one at a time).
  """
  del run, runs


def checkpoint_bytes(run: engine.PreparedRun) -> int:
  """A checkpoint: the model, the server optimizer's slots, the aggregator's
  last aggregate and, with canaries, the audit's theta_0 and maxima.

  Args:
    run: the prepared run (its model dimension d, server optimizer and
      canary spec).

  Returns:
    The estimate in bytes: 4 bytes per float32 of those vectors.
  """
  dim = run.data.num_parameters
  vectors = 2 + run.plan.server_optimizer.slots
  spec = run.plan.spec
  if spec is None:
    return 4 * vectors * dim
  return 4 * ((vectors + 1) * dim + spec.num_seen + spec.num_unseen)


class _TensorBoard:
  """TensorBoard scalars of every round's metrics and canary cosines."""

  def __init__(self, directory: str):
    self._writer = tf.summary.create_file_writer(directory)

  def _write(self, step: int, values: Mapping[str, float]) -> None:
    with self._writer.as_default():
      for name, value in values.items():
        tf.summary.scalar(name, value, step=step)
    self._writer.flush()

  def on_round(self, record: round_record.RoundRecord) -> None:
    """The round's metrics at step `round_num`."""
    self._write(record.round_num, record.metrics)

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Each round's cosine summaries at step `round_num`."""
    for row in cosines:
      self._write(row.round_num, dict(zip(
          run_directory.COSINE_FIELDS[1:], row[1:])))

  def on_checkpoint(self, round_num: int) -> None:
    """Nothing: every scalar is flushed as it is written."""
    del round_num


def train(run: engine.PreparedRun,
          store: checkpoints_lib.ProgramStateCheckpoints,
          observer: round_record.RoundObserver) -> canary_spec.CanaryOutcome:
  """Trains (or resumes) `run` in its execution context.

  The context is the one the flags ask for (one local C++ worker,
  --tff_workers local workers or --tff_worker_addresses); besides
  `observer`, the rounds go to TensorBoard in the run's tensorboard/.

  Args:
    run: the prepared run.
    store: the run's program state checkpoints; training resumes from the
      newest.
    observer: receives every round's record and the canary cosines.

  Returns:
    The run's `canary_spec.CanaryOutcome`, as `engine.Backend.train`
    describes it.
  """
  config = run.config
  tensorboard = _TensorBoard(os.path.join(config.run_dir,
                                          run_directory.TENSORBOARD_DIR))
  with training.execution_context(config.tff_workers,
                                  config.tff_worker_addresses):
    return training.train(
        run.plan, run.data, store,
        round_record.Observers([observer, tensorboard]),
        device=accelerators.launcher_device(config.accelerator),
        canaries=run.canaries)
