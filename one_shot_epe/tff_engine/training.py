"""A whole DP-FedAvg run with canaries on TFF, resumable, into a run directory.

The TFF engine's counterpart of `jax_engine.training`: DP-FedAvg
(`tff.learning.algorithms.build_unweighted_fed_avg`) with the canary
aggregator, driven by `tff.simulation.run_training_process`, observed by a
`CanaryAudit` (Andrew et al., ICLR 2024, Algorithms 2 and 3) through its
program state manager, which also checkpoints the learning state and the
audit together (`tff.program.FileProgramStateManager`: temporary directory,
then rename). What the loop is given besides the process:

* each round's client datasets (`selection_fn`), shuffled under a TF seed
  that depends on (seed, round) only, so a resumed run trains on the same
  data as an uninterrupted one;
* the test-set evaluation (`evaluation_fn`, TFF's `build_fed_eval`);
* release managers: per-round compact metrics to metrics.csv and TensorBoard
  (`CompactReleaseManager`), the per-round canary cosine summaries to
  canary_cosines.csv, and a progress bar (`ProgressReleaseManager`).

A run without canaries (the accuracy baseline) uses TFF's own DP factory,
whose noise is unseeded, and the same checkpoints without the audit.
"""

import asyncio
import collections
import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

from one_shot_epe import canary_spec
from one_shot_epe import participation
from one_shot_epe import run_directory
from one_shot_epe.tff_engine import audit as audit_lib
from one_shot_epe.tff_engine import checkpoints
from one_shot_epe.tff_engine import distributed_runtime
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine import tff_workers

# The accuracy put in the report, per task. StackOverflow excludes padding,
# out-of-vocabulary and end-of-sentence tokens from the accuracy, as Reddi et
# al. (2020) report it.
ACCURACY_METRICS = {
    'emnist_character': 'sparse_categorical_accuracy',
    'fashion_mnist': 'sparse_categorical_accuracy',
    'stackoverflow_word': 'accuracy_without_out_of_vocab_or_end_of_sentence',
}
CHECKPOINTS_KEPT = 3  # Round 0 and the last two.
_TF_SEED_BITS = 2**31 - 1
# The temporary files of TFF's CSV release managers (`<file>_temp1234`),
# left by a process killed or stopped by a failed write before its rename.
_TFF_CSV_TEMPORARY = re.compile(
    rf'({re.escape(run_directory.METRICS_FILE)}|'
    rf'{re.escape(run_directory.CANARY_COSINES_FILE)})_temp\d+$')
# Where the clip norm is among the compact metrics: the canary aggregator's
# measurement, or that of TFF's DP factory (runs without canaries).
_CLIP_METRICS = ('aggregator/clip', 'aggregator/dp_query_metrics/clip')


def compact_metrics(metrics: Any) -> collections.OrderedDict[str, Any]:
  """Flattens nested round metrics to '/'-joined names of scalars only.

  Non-scalar values (none are expected; the aggregator reports summaries) are
  dropped so that no d-sized vector reaches the CSV or TensorBoard.
  """
  flat = collections.OrderedDict()

  def visit(prefix: str, value: Any) -> None:
    if isinstance(value, Mapping):
      items = value.items()
    elif hasattr(value, '_asdict'):
      items = value._asdict().items()
    elif isinstance(value, (list, tuple)):
      items = ((str(i), v) for i, v in enumerate(value))
    else:
      array = np.asarray(value)
      if array.ndim == 0 and array.dtype.kind in 'biuf':
        flat[prefix] = array.item()
      return
    for key, item in items:
      visit(f'{prefix}/{key}' if prefix else str(key), item)

  visit('', metrics)
  return flat


class CompactReleaseManager(tff.program.ReleaseManager):
  """Releases `compact_metrics(value)` to every target release manager."""

  def __init__(self, targets: Sequence[tff.program.ReleaseManager]):
    self._targets = list(targets)

  async def release(self, value: Any, key: int) -> None:
    """Releases round `key`'s metrics, compacted, to every target."""
    compact = compact_metrics(value)
    await asyncio.gather(*(t.release(compact, key) for t in self._targets))


class ProgressReleaseManager(tff.program.ReleaseManager):
  """A tqdm bar over rounds (ETA, clip norm, loss); counts the rounds run."""

  def __init__(self, total_rounds: int, enabled: bool):
    self._total_rounds = total_rounds
    self._enabled = enabled
    self._bar = None
    self.rounds_trained = 0

  async def release(self, value: Any, key: int) -> None:
    """Advances the bar by training round `key` (round 0 is not counted)."""
    if key < 1:
      return  # Round 0 is the initial evaluation, not a training round.
    self.rounds_trained += 1
    if self._bar is None:
      self._bar = tqdm.tqdm(total=self._total_rounds, initial=key - 1,
                            unit='round', disable=not self._enabled,
                            dynamic_ncols=True, file=sys.stderr)
    flat = compact_metrics(value)
    postfix = collections.OrderedDict()
    for name in _CLIP_METRICS:
      if name in flat:
        postfix['clip'] = f'{flat[name]:.4g}'
    if 'client_work/train/loss' in flat:
      postfix['loss'] = f'{flat["client_work/train/loss"]:.4g}'
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(1)

  def close(self) -> None:
    """Closes the bar, if a round opened it."""
    if self._bar is not None:
      self._bar.close()


class _ScheduledSaves(tff.program.ProgramStateManager):
  """Saves round 0, every `every`-th round and the final round only.

  `run_training_process` offers every round (rounds_per_saving_program_state
  = 1); a multiple-of-k rule alone would miss the final round, which a
  finished run resumes from without training. For runs without an audit,
  whose own manager applies the same rule.
  """

  def __init__(self, inner: tff.program.ProgramStateManager, every: int,
               final_round: int):
    self._inner = inner
    self._every = every
    self._final_round = final_round

  async def get_versions(self) -> Sequence[int] | None:
    """The saved rounds (None while there is no checkpoint directory)."""
    return await self._inner.get_versions()

  async def load(self, version: int, structure: Any) -> Any:
    """The state saved at round `version`."""
    return await self._inner.load(version, structure)

  async def save(self, program_state: Any, version: int) -> None:
    """Saves round `version` if it is one of the rounds to save."""
    if run_directory.is_checkpoint_round(version, self._every,
                                         self._final_round):
      await self._inner.save(program_state, version)


def _round_seed(seed: int, round_num: int) -> int:
  """TF global seed for round `round_num`'s client datasets, pure in both."""
  return int(np.random.SeedSequence(seed, spawn_key=(round_num,))
             .generate_state(1)[0] & _TF_SEED_BITS)


def selection_fn(
    sampler: participation.ClientSampler,
    create_tf_dataset_for_client: Callable[[str], tf.data.Dataset],
    seed: int) -> Callable[[int], list[tf.data.Dataset]]:
  """Round `round_num`'s client datasets, with their shuffles seeded per round.

  The client preprocessing shuffles with TF's global seed; resetting it before
  each round makes the shuffle order depend on (seed, round) only, not on how
  many rounds this process has run (which differs after a resume).

  Args:
    sampler: Selects each round's clients (`participation`).
    create_tf_dataset_for_client: Maps a client id to its preprocessed data.
    seed: The run's seed.
  """
  select = participation.make_training_selection_fn(
      sampler, create_tf_dataset_for_client)

  def seeded_selection_fn(round_num: int) -> list[tf.data.Dataset]:
    tf.random.set_seed(_round_seed(seed, round_num))
    return select(round_num)

  return seeded_selection_fn


def evaluation_fn(
    task: tasks.Task, process: tff.learning.templates.LearningProcess
) -> Callable[[Any, Any], collections.OrderedDict[str, Any]]:
  """Test-set metrics of a training state, through TFF's `build_fed_eval`.

  The (bounded) test set is evaluated as one client; only this evaluation's
  metrics (`current_round_metrics`) are returned.
  """
  evaluation = tff.learning.algorithms.build_fed_eval(task.model_fn)
  initial_state = evaluation.initialize()

  def test_metrics(state: Any, test_data: Any):
    eval_state = evaluation.set_model_weights(initial_state,
                                              process.get_model_weights(state))
    output = evaluation.next(eval_state, test_data)
    return collections.OrderedDict(
        output.metrics['client_work']['eval']['current_round_metrics'])

  return test_metrics


@contextlib.contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
  """A fresh current asyncio loop (`run_training_process` runs on it)."""
  loop = asyncio.new_event_loop()
  asyncio.set_event_loop(loop)
  try:
    yield loop
  finally:
    loop.close()
    asyncio.set_event_loop(None)


@contextlib.contextmanager
def execution_context(num_workers: int = 1,
                      worker_addresses: str = '') -> Iterator[None]:
  """The run's TFF execution context; its local workers stop on exit.

  One local C++ worker by default; `num_workers` local workers, or the
  running workers at `worker_addresses`, through `distributed_runtime` (same
  results, clients spread over the workers).
  """
  if worker_addresses:
    with distributed_runtime.remote_cpp_context(worker_addresses):
      yield
  elif num_workers > 1:
    with tff_workers.local_workers(num_workers) as addresses:
      with distributed_runtime.remote_cpp_context(addresses):
        yield
  else:
    with runtime.local_cpp_context():
      yield


def optimizer(name: str, learning_rate: float,
              momentum: float = 0.0) -> tff.learning.optimizers.Optimizer:
  """TFF's optimizer of a run: 'sgd', 'sgdm' (with `momentum`) or 'adam'."""
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def plain_aggregator(
    dp: canary_spec.DPAggregation
) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's own DP factory for `dp` (runs without canaries; unseeded noise)."""
  if not dp.adaptive:
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=dp.noise_multiplier,
        clients_per_round=dp.clients_per_round, clip=dp.clip)
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=dp.noise_multiplier,
      clients_per_round=dp.clients_per_round,
      initial_l2_norm_clip=dp.initial_clip,
      target_unclipped_quantile=dp.target_unclipped_quantile,
      learning_rate=dp.clip_learning_rate,
      clipped_count_stddev=dp.clipped_count_stddev)


def verify_checkpoints(directory: str) -> None:
  """Raises `checkpoints.CheckpointError` if the newest checkpoint is bad.

  Damaged, or saved in the layout of an earlier version.
  """
  latest = checkpoints.verify_latest(directory)
  if latest is not None:
    checkpoints.check_layout(
        os.path.join(directory, f'{checkpoints.PREFIX}{latest}'))


def remove_leftovers(run_dir: str) -> None:
  """Deletes what unfinished TFF writes left: partial checkpoints, CSV temps."""
  checkpoints.remove_partial(os.path.join(run_dir,
                                          run_directory.CHECKPOINT_DIR))
  for name in os.listdir(run_dir):
    if _TFF_CSV_TEMPORARY.match(name):
      os.unlink(os.path.join(run_dir, name))


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything a TFF run depends on besides its run directory.

  Attributes:
    task: The model and the federated data (`tasks`).
    sampler: Who participates in each round (`participation`).
    total_rounds: T.
    dp: The DP aggregation.
    canaries: The canary plan, or None for a run without canaries.
    delta: The delta of the audit's accounting.
    client_optimizer, server_optimizer: TFF's optimizers.
    seed: Seed of the model's initialisation and each round's shuffles.
    noise_seed: Seed of the canary aggregator's DP noise (`seeded_queries`),
      None for unseeded noise.
    rounds_per_evaluation: Test-set evaluation every this many rounds.
    rounds_per_checkpoint: Checkpoint every this many rounds (and at 0, T).
    max_eval_examples: Test examples evaluated; None for all.
    progress_bar: Whether to show the bar on stderr.
    device: TF device of the canary tracking (`accelerators`).
  """
  task: tasks.Task
  sampler: participation.ClientSampler
  total_rounds: int
  dp: canary_spec.DPAggregation
  canaries: canary_spec.CanarySpec | None
  delta: float
  client_optimizer: tff.learning.optimizers.Optimizer
  server_optimizer: tff.learning.optimizers.Optimizer
  seed: int
  noise_seed: int | None
  rounds_per_evaluation: int = 1
  rounds_per_checkpoint: int = 1
  max_eval_examples: int | None = None
  progress_bar: bool = False
  device: str = '/CPU:0'


def _audit(plan: Plan) -> audit_lib.CanaryAudit | None:
  """The run's audit; its tracker buffers <= the rounds between checkpoints."""
  if plan.canaries is None:
    return None
  spec = plan.canaries
  if spec.buffer_rounds is None:
    spec = dataclasses.replace(spec, buffer_rounds=min(
        canary_spec.default_buffer_rounds(plan.task.num_parameters),
        plan.rounds_per_checkpoint, plan.total_rounds))
  return audit_lib.CanaryAudit.from_spec(
      spec, plan.dp, delta=plan.delta, noise_seed=plan.noise_seed,
      device=plan.device)


def train(plan: Plan, run_dir: str) -> canary_spec.CanaryOutcome:
  """Trains (or resumes) the run of `plan`, writing into `run_dir`.

  Writes metrics.csv, canary_cosines.csv, tensorboard/ and checkpoints/
  (`run_directory` names them); resumes from the newest checkpoint there.
  Calls `tf.keras.utils.set_random_seed(plan.seed)` once the aggregator is
  built, before the model is.
  Call it inside `execution_context`.
  """
  task = plan.task
  audit = _audit(plan)
  progress = ProgressReleaseManager(plan.total_rounds, plan.progress_bar)
  tensorboard = tff.program.TensorBoardReleaseManager(
      os.path.join(run_dir, run_directory.TENSORBOARD_DIR))

  def csv_manager(name: str) -> tff.program.CSVFileReleaseManager:
    return tff.program.CSVFileReleaseManager(
        os.path.join(run_dir, name), save_mode=tff.program.CSVSaveMode.WRITE,
        key_fieldname='round')

  files = tff.program.FileProgramStateManager(
      os.path.join(run_dir, run_directory.CHECKPOINT_DIR),
      keep_total=CHECKPOINTS_KEPT, keep_first=True)
  if audit is None:
    aggregator = plain_aggregator(plan.dp)
    state_manager = _ScheduledSaves(files, plan.rounds_per_checkpoint,
                                    plan.total_rounds)
  else:
    aggregator = audit.aggregator()
    state_manager = audit.program_state_manager(
        files, plan.rounds_per_checkpoint, final_round=plan.total_rounds,
        release_managers=[csv_manager(run_directory.CANARY_COSINES_FILE),
                          tensorboard])
  # Python, numpy and TF global seeds, reset once the aggregator is built
  # (building it may draw from them) and before the model is.
  tf.keras.utils.set_random_seed(plan.seed)
  with event_loop() as loop:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn, client_optimizer_fn=plan.client_optimizer,
        server_optimizer_fn=plan.server_optimizer,
        model_aggregator=aggregator)
    evaluate = evaluation_fn(task, process)
    test_data = [task.test_dataset(plan.max_eval_examples)]
    versions = loop.run_until_complete(state_manager.get_versions())
    resumed_from = max(versions) if versions else 0
    try:
      state = tff.simulation.run_training_process(
          process,
          selection_fn(
              plan.sampler,
              task.preprocessed_train_data.create_tf_dataset_for_client,
              plan.seed),
          plan.total_rounds,
          evaluation_fn=evaluate,
          evaluation_selection_fn=lambda round_num: test_data,
          rounds_per_evaluation=plan.rounds_per_evaluation,
          program_state_manager=state_manager,
          rounds_per_saving_program_state=1,
          metrics_managers=[
              CompactReleaseManager([csv_manager(run_directory.METRICS_FILE),
                                     tensorboard]),
              progress,
          ])
    finally:
      progress.close()
    accuracy = float(evaluate(state, test_data)[ACCURACY_METRICS[task.name]])
  empty = np.zeros(0)
  if audit is None:
    return canary_spec.CanaryOutcome(
        empty, empty, empty, empty, accuracy, task.num_parameters,
        resumed_from, progress.rounds_trained)
  maxima = audit.cosine_maxima()
  return canary_spec.CanaryOutcome(
      final_cosines=audit.final_cosines(),
      final_unseen_cosines=audit.final_cosines(unseen=True),
      seen_maxima=maxima.seen.astype(np.float64),
      unseen_maxima=maxima.unseen.astype(np.float64), accuracy=accuracy,
      dim=task.num_parameters, resumed_from_round=resumed_from,
      rounds_trained=progress.rounds_trained)
