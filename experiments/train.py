r"""DP-FedAvg with canaries on EMNIST or StackOverflow, then a privacy report.

The experiment launcher of Section 5 of Andrew et al., "One-shot Empirical
Privacy Estimation for Federated Learning" (ICLR 2024). One run trains
DP-FedAvg (`tff.learning.algorithms.build_unweighted_fed_avg`) with k seen
canary clients inserted by the canary aggregator
(`one_shot_epe.canary_aggregator`, Algorithms 2 and 3) and m unseen canaries
tracked alongside, driven by `tff.simulation.run_training_process`, and ends
with the privacy report of both threat models (final model: Algorithm 2; all
iterates: Algorithm 3) and the cosine density plot.

  python -m experiments.train --flagfile=configs/demo.cfg --noise_multiplier=0.1
  python -m experiments.train --task=emnist_character --data_dir=~/tff_data \
      --clients_per_round=101 --train_epochs=15 --noise_multiplier=0.0487 ...

Outputs, under `--root_output_dir/--run_name/` (all result files written
atomically):

  config.json            the validated flags; a rerun must match them
  metrics.csv            per-round compact metrics (column `round`), via
                         `tff.program.CSVFileReleaseManager`
  canary_cosines.csv     per-round mean and max cosine of the seen and of the
                         unseen canaries with the round's noised aggregate
                         (or model step, --all_iterates_statistic; written in
                         blocks of --canary_buffer_rounds)
  tensorboard/           both, `tff.program.TensorBoardReleaseManager`
  checkpoints/           `tff.program.FileProgramStateManager` versions:
                         learning state and canary tracker state
  final_cosines.csv      column `cosine`: seen canaries vs the final model
  max_cosines.csv        columns `seen`, `unseen`: max-over-rounds cosines
  report.json, report.md the privacy report (`one_shot_epe.run_report`)
  cosine_densities.png   this run's cosine sets against the null N(0, 1/d)

The cosine CSVs are in the format of `python -m one_shot_epe.estimate`; row i
is canary i (seen ids 0..k-1; unseen canary i has id UNSEEN_ID_OFFSET + i).

Resume: checkpoints are taken at round 0, every --rounds_per_checkpoint rounds
and after the last round. Rerunning the same command (same flags) loads the
latest complete checkpoint and continues from there; a finished run does no
training and rewrites the same results. A checkpoint is complete or absent
(TFF writes it to a temporary directory and renames it); a rerun deletes the
temporary leftovers of a killed run, and refuses with exit status 2 to resume
from a checkpoint whose files fail to read back (`one_shot_epe.checkpoints`).
Per-round metrics after the resumed checkpoint are re-released, replacing
their earlier rows.

Reproducibility: on a given machine and TensorFlow build, a run with canaries
is a pure function of its flags (--num_canaries=0 runs use TFF's own DP
factory, whose noise is unseeded). Each round's client
selection and shuffles depend on (--seed, round) only; the DP noise of round t
is drawn from (noise seed, t) (`one_shot_epe.seeded_queries`, the noise seed
derived from --seed; --noseeded_noise turns this off, as a deployment must);
the EMNIST model's dropout masks are keyed by the layer's input and its
batches kept in order (`one_shot_epe.tasks.determinism`). So a resumed run
(even one killed with SIGKILL mid-round or mid-checkpoint), a second run with
the same flags, and a run spread over --tff_workers processes all write the
same final cosines, maxima and report, byte for byte
(tests/train_resume_test.py); only the wall-clock columns of metrics.csv
differ.

Every flag is checked before anything is written; a bad flag (or a data
directory that does not exist or holds the wrong files, or a run directory
holding a run with other flags) exits with status 2 and a message naming it.

One writer per run directory: a launcher holds an exclusive OS lock on its
run directory (`one_shot_epe.run_lock`, the file `.run.lock`) from before its
first write to its end; a second launcher on the same directory exits with
status 2 naming the holder's pid, writing nothing. The kernel drops the lock
of a killed launcher, so a rerun always gets it and resumes. A failed write
(a full disk, an I/O error: a checkpoint, a CSV, the report, the plot,
config.json) exits with status 2 and one line naming the file and the cause
(`one_shot_epe.write_failures`); the temporary files of the failed write are
removed, everything written before is intact, and rerunning the same
command resumes from the last checkpoint.
The flags are defined only when this module runs as a program (or by
`train_config.define_flags`), so the launcher is also a library:

  run_training(TrainConfig(...)) -> RunResult   train or resume, write outputs
  prepare(TrainConfig(...)) -> PreparedRun      validate only, write nothing
  define_flags(flag_values); config_from_flags(flag_values) -> TrainConfig
                                                the same flags (and flagfiles)
                                                on any absl FlagValues

`TrainConfig`, its checks and the flags are in `experiments.train_config`;
what this module hands to `tff.simulation.run_training_process` besides the
learning process (client selection, evaluation, metric releases, canary
tracking, checkpoints) is in `experiments.train_program`.
"""

import os
import sys

if __name__ == '__main__':
  # --backend=jax never imports TensorFlow: hand over before anything does
  # (and before numpy starts the threads that would stop `isolation` below).
  # Either way the flags are checked before TensorFlow or JAX is imported.
  from one_shot_epe import cli as _cli
  if _cli.requested_backend(sys.argv) == 'jax':
    from experiments import train_config as _train_config
    _train_config.check_flags_or_exit(sys.argv)
    from experiments import train_jax
    train_jax.run_as_program()
  # Run as a program, before TensorFlow starts a thread: local TFF workers in a
  # network namespace with only loopback, then the flags, then a quiet
  # TensorFlow import.
  from one_shot_epe import isolation
  from one_shot_epe import quiet
  isolation.isolate_program(sys.argv)
  from experiments import train_config as _train_config
  _train_config.check_flags_or_exit(sys.argv)
  quiet.quiet_startup(sys.argv, import_tensorflow=True)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import contextlib
import dataclasses
import json
import re
from collections.abc import Iterator, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from experiments import run_outputs
from experiments import train_config
from experiments import train_jax
from experiments import train_program
from one_shot_epe import accelerators
from one_shot_epe import atomic_io
from one_shot_epe import canaries
from one_shot_epe import canary_aggregator
from one_shot_epe import checkpoints
from one_shot_epe import cli
from one_shot_epe import cosine_tracking
from one_shot_epe import distributed_runtime
from one_shot_epe import final_model
from one_shot_epe import participation
from one_shot_epe import run_lock
from one_shot_epe import run_report
from one_shot_epe import runtime
from one_shot_epe import tasks
from one_shot_epe import tff_workers
from one_shot_epe import write_failures

# The accuracy put in the report, per task. StackOverflow excludes padding,
# out-of-vocabulary and end-of-sentence tokens from the accuracy, as Reddi et
# al. (2020) report it.
ACCURACY_METRICS = {
    'emnist_character': 'sparse_categorical_accuracy',
    'fashion_mnist': 'sparse_categorical_accuracy',
    'stackoverflow_word': 'accuracy_without_out_of_vocab_or_end_of_sentence',
}

# Synthetic data stands in for a fixed data set: it does not vary with --seed.
SYNTHETIC_DATA_SEED = 0

# The run directory's files (`experiments.run_outputs`, shared with the JAX
# engine's launcher).
CONFIG_FILE = run_outputs.CONFIG_FILE
METRICS_FILE = run_outputs.METRICS_FILE
CANARY_COSINES_FILE = run_outputs.CANARY_COSINES_FILE
TENSORBOARD_DIR = run_outputs.TENSORBOARD_DIR
CHECKPOINT_DIR = run_outputs.CHECKPOINT_DIR
FINAL_COSINES_FILE = run_outputs.FINAL_COSINES_FILE
MAX_COSINES_FILE = run_outputs.MAX_COSINES_FILE
REPORT_JSON_FILE = run_outputs.REPORT_JSON_FILE
REPORT_MARKDOWN_FILE = run_outputs.REPORT_MARKDOWN_FILE
DENSITY_PLOT_FILE = run_outputs.DENSITY_PLOT_FILE

# The temporary files of TFF's CSV release managers (`<file>_temp1234`),
# left by a process killed or stopped by a failed write before its rename.
_TFF_CSV_TEMPORARY = re.compile(
    rf'({re.escape(METRICS_FILE)}|{re.escape(CANARY_COSINES_FILE)})_temp\d+$')

# What a launcher reports in one line with exit status 2: a bad flag, a run
# directory in use by another launcher, a failed write (a full disk, ...).
REPORTED_ERRORS = run_outputs.REPORTED_ERRORS


# What a run produced (either engine).
RunResult = run_outputs.RunResult


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """A validated run: config, data, participation, aggregator, device."""
  config: train_config.TrainConfig
  task: tasks.Task
  sampler: participation.ClientSampler
  total_rounds: int
  delta: float
  canary_config: canary_aggregator.CanaryConfig | None
  aggregator: tff.aggregators.UnweightedAggregationFactory
  device: str  # TF device of the launcher's canary work.


def prepare(config: train_config.TrainConfig) -> PreparedRun:
  """Validates `config` against the data and builds what training needs.

  Reads the data directory (never downloads) and the run directory's
  `config.json` if there is one; writes nothing.

  Raises:
    train_config.ConfigError: a flag is invalid, the data directory is
      missing or malformed, the run directory holds a run with other flags,
      or the checkpoint a rerun would resume from is damaged.
  """
  config = config.validate()
  try:
    task = tasks.get_task(
        config.task, client_batch_size=config.client_batch_size,
        client_epochs_per_round=config.client_epochs_per_round,
        max_examples_per_client=config.max_examples_per_client,
        data_dir=config.data_dir, use_synthetic_data=config.use_synthetic_data,
        synthetic_num_clients=config.synthetic_num_clients,
        synthetic_examples_per_client=config.synthetic_examples_per_client,
        seed=SYNTHETIC_DATA_SEED, vocab_size=config.vocab_size)
  except (ValueError, FileNotFoundError) as error:
    message = str(error)
    raise train_config.ConfigError(
        message if message.startswith('--data_dir') else
        f'--data_dir: {message}') from None
  num_clients = task.num_train_clients
  if config.clients_per_round > num_clients:
    raise train_config.ConfigError(
        f'--clients_per_round must be in [1, {num_clients}] (the task has '
        f'{num_clients} training clients); got {config.clients_per_round}.')
  sampler, total_rounds, schedule, cohort = train_config.participation_plan(
      config, task.preprocessed_train_data.client_ids)
  delta = config.delta if config.delta is not None else num_clients**-1.1
  canary_config = None
  if schedule is not None:
    canary_config = canary_aggregator.CanaryConfig(
        seed=config.canary_seed, num_seen=config.num_canaries,
        num_unseen=config.num_unseen_canaries,
        schedule=schedule.as_round_lists(),
        canary_clip=config.canary_clip,
        buffer_rounds=config.canary_buffer_rounds or min(
            cosine_tracking.default_tracker_rounds(task.num_parameters),
            config.rounds_per_checkpoint, total_rounds))
  try:
    aggregator = build_aggregator(config, cohort, canary_config)
  except ValueError as error:
    raise train_config.ConfigError(
        f'--noise_multiplier={config.noise_multiplier} with '
        f'--clients_per_round={config.clients_per_round}: {error}') from None
  try:
    device = accelerators.launcher_device(config.accelerator)
  except ValueError as error:
    raise train_config.ConfigError(str(error)) from None
  _check_run_dir(config)
  return PreparedRun(config=config, task=task, sampler=sampler,
                     total_rounds=total_rounds, delta=delta,
                     canary_config=canary_config, aggregator=aggregator,
                     device=device)


def build_aggregator(
    config: train_config.TrainConfig, clients_per_round: float,
    canary_config: canary_aggregator.CanaryConfig | None
) -> tff.aggregators.UnweightedAggregationFactory:
  """DP-FedAvg's Gaussian aggregation; fixed or adaptive clip (Andrew+ 2021).

  The noised sum of clipped updates is divided by `clients_per_round`, the
  expected number of participants per round (real clients and canaries), which
  also normalises the adaptive clip's count of unclipped updates. With
  canaries, the canary aggregator inserts and tracks them, drawing its noise
  from `noise_seed(config)`; without (--num_canaries=0, the accuracy
  baseline), TFF's own DP factory does the same clipping, noising and
  normalisation with unseeded noise.
  """
  if config.clipping_norm > 0:
    if canary_config is None:
      return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          noise_multiplier=config.noise_multiplier,
          clients_per_round=clients_per_round, clip=config.clipping_norm)
    return canary_aggregator.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=clients_per_round, clip=config.clipping_norm,
        canary_config=canary_config, noise_seed=noise_seed(config))
  adaptive = dict(noise_multiplier=config.noise_multiplier,
                  clients_per_round=clients_per_round,
                  initial_l2_norm_clip=config.initial_clip,
                  target_unclipped_quantile=config.target_unclipped_quantile,
                  learning_rate=config.clip_learning_rate)
  if canary_config is None:
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        **adaptive)
  return canary_aggregator.CanaryDPFactory.gaussian_adaptive(
      canary_config=canary_config, noise_seed=noise_seed(config), **adaptive)


def _check_run_dir(config: train_config.TrainConfig) -> None:
  """The run directory must be new, empty, or hold a run with the same flags.

  "Empty" allows the lock file (`run_lock`). A run with the same flags must
  have an intact newest checkpoint, if it has any (`checkpoints`).
  """
  root, run_dir = config.root_output_dir, config.run_dir
  if os.path.exists(root) and not os.path.isdir(root):
    raise train_config.ConfigError(f'--root_output_dir {root!r} exists and is '
                                   'not a directory.')
  if not os.path.exists(run_dir):
    return
  if not os.path.isdir(run_dir):
    raise train_config.ConfigError(f'--run_name: {run_dir!r} exists and is '
                                   'not a directory.')
  config_path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(config_path):
    if set(os.listdir(run_dir)) - {run_lock.LOCK_FILE}:
      raise train_config.ConfigError(
          f'--run_name: {run_dir!r} is not empty and holds no {CONFIG_FILE}; '
          'choose another --run_name or --root_output_dir.')
    return
  try:
    with open(config_path, encoding='utf-8') as stream:
      saved = json.load(stream)
  except (OSError, ValueError) as error:
    raise train_config.ConfigError(
        f'--run_name: cannot read {config_path!r}: {error}.') from None
  train_config.check_resumable(config, saved, run_dir)
  try:
    checkpoints.verify_latest(os.path.join(run_dir, CHECKPOINT_DIR))
  except checkpoints.CheckpointError as error:
    raise train_config.ConfigError(f'--run_name: {error}.') from None


def _remove_leftovers(run_dir: str) -> None:
  """Deletes what unfinished writes left (never complete, never read).

  Temporary files and checkpoint directories of a killed run or of a failed
  write (`atomic_io`, TFF's CSV release managers, `checkpoints`).
  """
  atomic_io.remove_temporaries(run_dir)
  checkpoints.remove_partial(os.path.join(run_dir, CHECKPOINT_DIR))
  for name in os.listdir(run_dir):
    if _TFF_CSV_TEMPORARY.match(name):
      os.unlink(os.path.join(run_dir, name))


@contextlib.contextmanager
def _owned_run_dir(config: train_config.TrainConfig) -> Iterator[None]:
  """The run directory, locked by this process for the block's duration.

  Takes `run_lock` (creating the directory) and checks the directory again,
  as another launcher may have written it since `prepare` looked. A failed
  write under --root_output_dir becomes `write_failures.WriteFailure`, and
  the temporary files of unfinished writes are removed while the lock is
  still held.

  Raises:
    run_lock.RunLockedError: another process holds the lock.
    train_config.ConfigError: the directory no longer passes `prepare`'s
      checks.
    write_failures.WriteFailure: a write under --root_output_dir failed.
  """
  with write_failures.reported(config.root_output_dir), run_lock.acquire(
      config.run_dir):
    _check_run_dir(config)
    _remove_leftovers(config.run_dir)
    try:
      yield
    except BaseException:
      # Best effort on a failing disk: the next run removes them too.
      with contextlib.suppress(OSError):
        _remove_leftovers(config.run_dir)
      raise


def _optimizer(name: str, learning_rate: float,
               momentum: float) -> tff.learning.optimizers.Optimizer:
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def noise_seed(config: train_config.TrainConfig) -> int | None:
  """Seed of the DP noise (`seeded_queries`), None for unseeded noise.

  A pure function of --seed, independent of the round seeds
  (`train_program.selection_fn`). Noise
  that anyone holding the config can regenerate is fine for a simulated
  audit, never for a deployment (--noseeded_noise).
  """
  if not config.seeded_noise:
    return None
  return int(np.random.SeedSequence([config.seed, 1]).generate_state(1)[0])


@contextlib.contextmanager
def tff_runtime(config: train_config.TrainConfig) -> Iterator[None]:
  """The run's TFF execution context; its local workers stop on exit.

  One local C++ worker by default; --tff_workers=N local workers, or the
  running workers at --tff_worker_addresses, through `distributed_runtime`
  (same results, clients spread over the workers).
  """
  if config.tff_worker_addresses:
    with distributed_runtime.remote_cpp_context(config.tff_worker_addresses):
      yield
  elif config.tff_workers > 1:
    with tff_workers.local_workers(config.tff_workers) as addresses:
      with distributed_runtime.remote_cpp_context(addresses):
        yield
  else:
    with runtime.local_cpp_context():
      yield


def run_training(config: train_config.TrainConfig) -> RunResult:
  """Trains (or resumes) a run and writes its outputs (see module docstring).

  Calls `tf.keras.utils.set_random_seed(config.seed)` (Python, numpy and TF
  global seeds) before building the model.

  The run directory is locked for the whole run (`run_lock`): one writer per
  run directory.

  Raises:
    train_config.ConfigError: before anything is written, for an invalid
      config.
    run_lock.RunLockedError: before anything is written, when another
      process is running in the run directory.
    write_failures.WriteFailure: a write failed (e.g. the disk is full);
      the outputs written before are intact and a rerun resumes.
  """
  if config.backend == 'jax':
    return train_jax.run_training(config)
  setup = prepare(config)
  with _owned_run_dir(setup.config):
    return _train_and_write(setup)


def _train_and_write(setup: PreparedRun) -> RunResult:
  """`run_training` in its locked run directory: trains, then writes."""
  config = setup.config
  run_dir = config.run_dir
  atomic_io.write_text(os.path.join(run_dir, CONFIG_FILE),
                       json.dumps(config.to_json_dict(), indent=2,
                                  sort_keys=True) + '\n')
  tf.keras.utils.set_random_seed(config.seed)
  task = setup.task
  max_eval = (None if config.max_eval_examples == -1 else
              config.max_eval_examples)
  progress = train_program.ProgressReleaseManager(setup.total_rounds,
                                                  config.progress_bar)
  with tff_runtime(config), train_program.event_loop() as loop:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=_optimizer(config.client_optimizer,
                                       config.client_learning_rate,
                                       config.client_momentum),
        server_optimizer_fn=_optimizer(config.server_optimizer,
                                       config.server_learning_rate,
                                       config.server_momentum),
        model_aggregator=setup.aggregator)
    evaluation_fn = train_program.evaluation_fn(task, process)
    test_data = [task.test_dataset(max_eval)]
    tensorboard = tff.program.TensorBoardReleaseManager(
        os.path.join(run_dir, TENSORBOARD_DIR))
    tracking = None
    if setup.canary_config is not None:
      tracking = train_program.CanaryTracking(
          setup.canary_config, task.num_parameters, [
              tff.program.CSVFileReleaseManager(
                  os.path.join(run_dir, CANARY_COSINES_FILE),
                  save_mode=tff.program.CSVSaveMode.WRITE,
                  key_fieldname='round'),
              tensorboard,
          ], loop, setup.device)
    state_manager = train_program.RunStateManager(
        os.path.join(run_dir, CHECKPOINT_DIR), config.rounds_per_checkpoint,
        setup.total_rounds, tracking)
    versions = loop.run_until_complete(state_manager.get_versions())
    resumed_from = max(versions) if versions else 0
    metrics_managers = [
        train_program.CompactReleaseManager([
            tff.program.CSVFileReleaseManager(
                os.path.join(run_dir, METRICS_FILE),
                save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname='round'),
            tensorboard,
        ]),
        progress,
    ]
    try:
      state = tff.simulation.run_training_process(
          process if tracking is None else train_program.ObservedProcess(
              process, tracking, config.all_iterates_statistic),
          train_program.selection_fn(
              setup.sampler,
              task.preprocessed_train_data.create_tf_dataset_for_client,
              config.seed),
          setup.total_rounds,
          evaluation_fn=evaluation_fn,
          evaluation_selection_fn=lambda round_num: test_data,
          rounds_per_evaluation=config.rounds_per_evaluation,
          program_state_manager=state_manager,
          rounds_per_saving_program_state=1,
          metrics_managers=metrics_managers)
    finally:
      progress.close()
    final_metrics = evaluation_fn(state, test_data)
    accuracy = float(final_metrics[ACCURACY_METRICS[task.name]])
    final_cosines = final_unseen = seen_maxima = unseen_maxima = np.zeros(0)
    if tracking is not None:
      initial_state = loop.run_until_complete(
          state_manager.load_learning_state(0, process.initialize()))
      with tf.device(setup.device):
        cosines = final_model.final_model_cosines(
            process.get_model_weights(state).trainable,
            canary_seed=config.canary_seed,
            canary_ids=np.concatenate([
                canaries.seen_ids(config.num_canaries),
                canaries.unseen_ids(config.num_unseen_canaries)]),
            initial_weights=process.get_model_weights(initial_state).trainable,
            statistic=config.final_model_statistic)
      final_cosines = cosines[:config.num_canaries]
      final_unseen = cosines[config.num_canaries:]
      maxima = tracking.tracker.maxima()
      seen_maxima = maxima.seen.astype(np.float64)
      unseen_maxima = maxima.unseen.astype(np.float64)
  report = _write_results(setup, accuracy, final_cosines, final_unseen,
                          seen_maxima, unseen_maxima)
  return RunResult(config=config, run_dir=run_dir,
                   total_rounds=setup.total_rounds,
                   resumed_from_round=resumed_from,
                   rounds_trained=progress.rounds_trained,
                   dim=task.num_parameters, delta=setup.delta,
                   accuracy=accuracy, final_cosines=final_cosines,
                   final_unseen_cosines=final_unseen,
                   seen_maxima=seen_maxima, unseen_maxima=unseen_maxima,
                   report=report)


def _write_results(setup: PreparedRun, accuracy: float,
                   final_cosines: np.ndarray, final_unseen: np.ndarray,
                   seen_maxima: np.ndarray,
                   unseen_maxima: np.ndarray) -> run_report.RunReport | None:
  """Writes the cosine CSVs, the privacy report and the density plot."""
  if setup.canary_config is None:
    return None
  return run_outputs.write_results(
      setup.config, dim=setup.task.num_parameters, delta=setup.delta,
      num_train_clients=setup.task.num_train_clients,
      total_rounds=setup.total_rounds, data_source=setup.task.data_source,
      accuracy=accuracy, final_cosines=final_cosines,
      final_unseen_cosines=final_unseen, seen_maxima=seen_maxima,
      unseen_maxima=unseen_maxima, schedule=setup.canary_config.schedule)


def main(argv: Sequence[str]) -> None:
  """Trains (or resumes) the run of the flags and prints its report.

  A bad flag, or a run directory in use by another launcher, exits with
  status 2 before anything is written; a failed write (a full disk) exits
  with status 2 naming the file and the cause (`REPORTED_ERRORS`).
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # TFF logs every round at INFO.
  try:
    result = run_training(train_config.config_from_flags())
  except REPORTED_ERRORS as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  print(f'Run directory: {result.run_dir}')
  print(run_outputs.rounds_line(result))
  if result.report is not None:
    print(result.report.to_markdown(), end='')
    print(f'Report: {os.path.join(result.run_dir, REPORT_MARKDOWN_FILE)}; '
          f'plot: {os.path.join(result.run_dir, DENSITY_PLOT_FILE)}')


if __name__ == '__main__':
  flags.adopt_module_key_flags(train_config)  # Listed by --helpshort.
  app.run(main, flags_parser=cli.parse_flags_or_exit)
