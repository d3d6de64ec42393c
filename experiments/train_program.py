"""The tff.program side of a training run of `experiments.train`.

What `tff.simulation.run_training_process` is given besides DP-FedAvg: each
round's client datasets (`selection_fn`, seeded per round so that a resumed
run trains on the same data) and the test-set evaluation (`evaluation_fn`);
the release managers of the per-round metrics (`CompactReleaseManager`, to
CSV and TensorBoard, and the `ProgressReleaseManager` bar); the tracking of
the canaries' per-round cosines with the noised aggregate (or, with
--all_iterates_statistic=model_delta, the model step; `all_iterates_state`),
whose max-over-rounds values are Algorithm 3's statistics in Andrew et al.,
"One-shot Empirical Privacy Estimation for Federated Learning" (ICLR 2024),
Sec. 4.1 (`CanaryTracking`, fed by `ObservedProcess`); and the checkpoints of
the run (`RunStateManager`: learning state and tracker state together, so a
resumed run's maxima are exact).
"""

import asyncio
import collections
import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

from experiments import train_config
from one_shot_epe import canary_aggregator
from one_shot_epe import cosine_tracking
from one_shot_epe import participation
from one_shot_epe import tasks

_CHECKPOINTS_KEPT = 3  # Round 0 (it holds the initial model) and the last two.


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


# Where the clip norm is among the compact metrics: the canary aggregator's
# measurement, or that of TFF's DP factory (runs without canaries).
_CLIP_METRICS = ('aggregator/clip', 'aggregator/dp_query_metrics/clip')


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


class CanaryTracking:
  """Exact max-over-rounds canary cosines, tracked outside TFF (Algorithm 3).

  The aggregator keeps each round's noised aggregate in its state; `ObservedProcess` hands it (or the model step,
  `all_iterates_state`) to a `cosine_tracking.CosineTracker` in this process,
  which buffers them
  and every B rounds (and at every checkpoint) computes their cosines with all
  canaries, releasing each round's cosine summaries (key: the round, 1-based
  as in metrics.csv) to `release_managers`.
  """

  def __init__(self, canary_config: canary_aggregator.CanaryConfig, dim: int,
               release_managers: Sequence[tff.program.ReleaseManager],
               loop: asyncio.AbstractEventLoop, device: str):
    self._config = canary_config
    self._dim = dim
    self._release_managers = list(release_managers)
    self._loop = loop
    self._device = device
    self.tracker = cosine_tracking.CosineTracker(canary_config, dim,
                                                 device=device)

  def observe(self, aggregator_state: Any) -> None:
    """Records a round; called between rounds, outside the event loop."""
    self._loop.run_until_complete(
        self._release(self.tracker.observe(aggregator_state)))

  async def flush(self) -> None:
    """Processes the buffered rounds (before a checkpoint)."""
    await self._release(self.tracker.flush())

  async def _release(
      self, summaries: Sequence[cosine_tracking.RoundSummary]) -> None:
    for summary in summaries:
      values = collections.OrderedDict(
          seen_cosine_mean=summary.seen_mean, seen_cosine_max=summary.seen_max,
          unseen_cosine_mean=summary.unseen_mean,
          unseen_cosine_max=summary.unseen_max)
      await asyncio.gather(*(m.release(values, summary.round_num + 1)
                             for m in self._release_managers))

  def empty_state(self) -> cosine_tracking.TrackerState:
    """A tracker state of the right structure (the template for loading)."""
    return cosine_tracking.TrackerState(
        rounds_observed=0,
        cosine_maxima=np.zeros([self._config.num_seen +
                                self._config.num_unseen], np.float32),
        pending=np.zeros([0, self._dim], np.float32))

  def restore(self, state: cosine_tracking.TrackerState) -> None:
    """Continues from a checkpointed tracker state (after a resume)."""
    self.tracker = cosine_tracking.CosineTracker(self._config, self._dim,
                                                 state=state,
                                                 device=self._device)


def _flat_trainable(learning_state: Any) -> np.ndarray:
  """The global model's trainable weights as float32 [d] (tf.nest order)."""
  return np.concatenate([
      np.asarray(w, np.float32).reshape(-1)
      for w in tf.nest.flatten(learning_state.global_model_weights.trainable)
  ])


def all_iterates_state(statistic: str, previous_state: Any,
                       state: Any) -> Any:
  """The canary aggregator's state for the tracker, holding the vector to track.

  The all-iterates statistic of Algorithm 3 is each canary's max over rounds
  of its cosine with a per-round vector:

  * 'aggregate' (the paper's text, lines 9-12): the round's noised aggregate
    rho_bar_t, as the aggregator exported it (`state.aggregator`, unchanged);
  * 'model_delta' (the paper's published code): the model step after the
    server optimizer, signed as theta_{t-1} - theta_t. TFF's client update is
    initial - trained weights and the server optimizer applies rho_bar_t as a
    gradient, so with plain SGD at learning rate 1, theta_{t-1} - theta_t =
    rho_bar_t and the two statistics agree (inserted canaries have positive
    cosines under both). They agree only up to float32 rounding: theta_t is
    stored rounded, so the step recovered from it differs from rho_bar_t by
    at most 2^-24 (|theta_t| + |step|) per coordinate. Under server momentum
    the step also carries earlier rounds' aggregates.

  The previous model is in `previous_state`, the learning state `next` was
  called with, which is the checkpointed state after a resume: the tracked
  vectors, hence the maxima, do not depend on where a run was resumed.

  Args:
    statistic: One of `train_config.ALL_ITERATES_STATISTICS`.
    previous_state: The learning state before the round (theta_{t-1}).
    state: The learning state after it (theta_t), with a canary aggregator's
      state.

  Returns:
    The aggregator's state for `CosineTracker.observe`: `state.aggregator`
    itself, or a `canary_aggregator.CanaryAggregatorState` whose `aggregate` is
    the model step.

  Raises:
    ValueError: for another `statistic`.
  """
  if statistic not in train_config.ALL_ITERATES_STATISTICS:
    raise ValueError('statistic must be one of '
                     f'{list(train_config.ALL_ITERATES_STATISTICS)}; got '
                     f'{statistic!r}.')
  aggregator = state.aggregator
  if statistic == 'aggregate':
    return aggregator
  return aggregator._replace(
      aggregate=_flat_trainable(previous_state) - _flat_trainable(state))


class ObservedProcess:
  """A learning process whose `next` also feeds the round to the tracking.

  `run_training_process` only calls `initialize` and `next`.
  """

  def __init__(self, process: tff.learning.templates.LearningProcess,
               tracking: CanaryTracking, statistic: str = 'aggregate'):
    """Wraps `process`.

    Args:
      process: The DP-FedAvg learning process (external canary tracking).
      tracking: Receives each round's vector to track.
      statistic: The all-iterates statistic (`all_iterates_state`), one of
        `train_config.ALL_ITERATES_STATISTICS`.

    Raises:
      ValueError: for another `statistic`.
    """
    if statistic not in train_config.ALL_ITERATES_STATISTICS:
      raise ValueError('statistic must be one of '
                       f'{list(train_config.ALL_ITERATES_STATISTICS)}; got '
                       f'{statistic!r}.')
    self._process = process
    self._tracking = tracking
    self._statistic = statistic

  def initialize(self) -> Any:
    """The wrapped process's initial state."""
    return self._process.initialize()

  def next(self, state: Any, client_data: Any) -> Any:
    """Runs one round, then hands the vector it tracks to the tracking."""
    output = self._process.next(state, client_data)
    self._tracking.observe(
        all_iterates_state(self._statistic, state, output.state))
    return output


class RunStateManager(tff.program.ProgramStateManager):
  """Checkpoints of a run: the learning state and the canary tracker's state.

  Saves at round 0, every `every` rounds and at `final_round` only:
  `run_training_process` offers to save after every round (it is given
  `rounds_per_saving_program_state=1`), and a multiple-of-k rule alone would
  miss the final round, which a finished run resumes from without training.
  The tracker is flushed before it is saved, so a checkpoint holds no
  buffered aggregates. Each checkpoint is a `FileProgramStateManager` version
  (written to a temporary directory, then renamed: a checkpoint is complete or
  absent), the first one kept for the initial model.
  """

  def __init__(self, directory: str, every: int, final_round: int,
               tracking: CanaryTracking | None):
    self._files = tff.program.FileProgramStateManager(
        directory, keep_total=_CHECKPOINTS_KEPT, keep_first=True)
    self._every = every
    self._final_round = final_round
    self._tracking = tracking

  async def get_versions(self) -> list[int] | None:
    """The saved rounds (None while there is no checkpoint directory)."""
    return await self._files.get_versions()

  def _structure(self, learning_structure: Any) -> dict[str, Any]:
    structure = {'learning': learning_structure}
    if self._tracking is not None:
      structure['tracker'] = self._tracking.empty_state()
    return structure

  async def load_learning_state(self, version: int, structure: Any) -> Any:
    """The learning state of `version`; the tracker is left as it is."""
    saved = await self._files.load(version, self._structure(structure))
    return saved['learning']

  async def load(self, version: int, structure: Any) -> Any:
    """The learning state of `version`; the tracker resumes from it too."""
    saved = await self._files.load(version, self._structure(structure))
    if self._tracking is not None:
      self._tracking.restore(cosine_tracking.TrackerState(*saved['tracker']))
    return saved['learning']

  async def save(self, program_state: Any, version: int) -> None:
    """Checkpoints round `version` if it is one of the rounds to save."""
    if version % self._every and version != self._final_round:
      return
    saved = {'learning': program_state}
    if self._tracking is not None:
      await self._tracking.flush()
      saved['tracker'] = self._tracking.tracker.state()
    await self._files.save(saved, version)


def _round_seed(seed: int, round_num: int) -> int:
  """TF global seed for round `round_num`'s client datasets, pure in both."""
  return int(np.random.SeedSequence(seed, spawn_key=(round_num,))
             .generate_state(1)[0] & train_config.MAX_SEED)


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
    seed: The run's --seed.
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
