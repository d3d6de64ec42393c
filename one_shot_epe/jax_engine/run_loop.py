"""The host side of one run on the JAX engine: state, resume point, canaries.

`training.train_program` drives the rounds; each of its runs keeps here what
the host holds for it (`RunLoop`): the server state and theta_0 restored
from the newest checkpoint (or saved as checkpoint 0), the fixed client
slots and batch buckets of its rounds, each round's batches (or their rows
with the split resident), canary directions, key and correlated-noise row,
and what a trained round leaves: its report to the observer, its vector in
Algorithm 3's block buffer (lines 10-16: B rounds scored against every
canary at once, regenerating each canary once per block, folded into
`cosine_buffer.CosineBuffer`) and the checkpoints; with an evaluation, the
test-set metrics of round 0 (a new run) and of every
`RunPlan.rounds_per_evaluation`-th round in that round's record. At the end,
the canaries' cosines with the final model (Algorithm 2) and the maxima.
On an interrupt, `save_last_recorded` checkpoints the state after the last
round recorded, its block's buffered vectors unscored, so that the blocks
of a resumed run start at the same rounds as an uninterrupted run's.
"""

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_spec
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import round_engine
from one_shot_epe.runtime import cosine_buffer
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import loss_drops
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory

__all__ = ['RunLoop']

# 'vmap' rounds pad their batches to one of these fractions of the largest.
_BATCH_BUCKETS = (0.25, 0.5, 1.0)


class _BlockScorer:
  """Rounds' vectors on the device, B at a time, scored against every canary.

  Each scored block is folded into the run's `cosine_buffer.CosineBuffer`
  (`folded`), which keeps the maxima, the projections and the summaries.
  """

  def __init__(self, spec: canary_spec.CanarySpec, maxima: np.ndarray,
               rounds: int, projections: np.ndarray | None = None,
               pending: np.ndarray | None = None, last_round: int = 0):
    self._spec = spec
    self._ids = spec.tracked_ids()
    self.folded = cosine_buffer.CosineBuffer(spec.num_seen, spec.num_unseen,
                                             maxima, projections)
    self._rounds = rounds
    # A checkpoint's buffered vectors: its last len(pending) rounds.
    pending = [] if pending is None else list(np.asarray(pending, np.float32))
    self._vectors: list[Any] = pending
    self._round_nums = list(range(last_round - len(pending) + 1,
                                  last_round + 1))

  def pending(self) -> np.ndarray | None:
    """The buffered rounds' vectors, float32 [p, d]; None if none."""
    if not self._vectors:
      return None
    return np.stack([np.asarray(vector, np.float32)
                     for vector in self._vectors])

  def add(self, round_num: int,
          vector: jax.Array) -> list[round_record.CanaryCosines]:
    """Buffers round `round_num`'s vector; scores a full block."""
    self._vectors.append(vector)
    self._round_nums.append(round_num)
    return self.flush() if len(self._vectors) == self._rounds else []

  def flush(self) -> list[round_record.CanaryCosines]:
    """Scores the buffered rounds now (before a checkpoint, at the end)."""
    if not self._vectors:
      return []
    # A fixed block shape compiles once: short blocks repeat their first row.
    count = len(self._vectors)
    rows = self._vectors + [self._vectors[0]] * (self._rounds - count)
    stacked = jnp.stack(rows)
    block = np.asarray(canaries.cosines(self._spec.seed, self._ids,
                                        stacked))[:, :count]
    norms = (None if self.folded.projections is None else
             np.asarray(jnp.linalg.norm(stacked, axis=1))[:count])
    summaries = self.folded.fold(self._round_nums, block, norms)
    self._vectors, self._round_nums = [], []
    return summaries


def _slot_ids(ids: Sequence[int], slots: int) -> tuple[np.ndarray, np.ndarray]:
  """Ids padded to `slots` (padding repeats id 0) and their 0/1 mask."""
  padded = np.zeros(slots, np.int64)
  padded[:len(ids)] = ids
  return padded, (np.arange(slots) < len(ids)).astype(np.float32)


def _examples_used(plan: run_plan.RunPlan,
                   train_data: client_arrays.ClientArrays) -> np.ndarray:
  """Each client's examples in a round of `plan`."""
  return data.examples_used(train_data, epochs=plan.epochs,
                            max_examples=plan.max_examples)


def _round_shapes(plan: run_plan.RunPlan,
                  train_data: client_arrays.ClientArrays,
                  engine: round_engine.RoundEngine) -> tuple[int, list[int]]:
  """The run's fixed client slots and the batch buckets of its rounds."""
  cohort = max(len(plan.cohort(t)) for t in range(plan.total_rounds))
  sizes = _examples_used(plan, train_data)
  largest = data.max_batches_for(int(sizes.max()), plan.batch_size)
  buckets = sorted({max(1, math.ceil(f * largest)) for f in _BATCH_BUCKETS})
  return engine.num_slots(cohort), buckets


def _bucket(needed: int, buckets: Sequence[int]) -> int:
  """The smallest bucket that holds `needed` batches."""
  return next(b for b in buckets if b >= needed)


class RunLoop:
  """The host side of one run: its state, resume point, canaries and outputs.

  Attributes:
    plan: The run.
    spec: The canaries the server inserts (`plan.inserted_spec`).
    store: Its checkpoints.
    dim: d, the model's parameters.
    resumed_from: The checkpoint round the run starts from (0: a new run).
    state: The server state after the last round recorded.
    initial: theta_0, float32 [d].
    canary_slots: The most canaries a round of the run inserts (>= 1).
    slots: The run's fixed client slots.
    buckets: The batch counts its 'vmap' rounds are padded to.
    observer: Told of the run's rounds.
    evaluated: The test-set metrics of the rounds evaluated now, by round.
    drops: With data canaries, their losses under the last model recorded
      and largest excess one-round loss drops (`loss_drops.LossDrops`); else None.
  """

  def __init__(self, plan: run_plan.RunPlan,
               store: checkpoints.TrainingStateCheckpoints,
               engine: round_engine.RoundEngine, model: Any,
               train_data: client_arrays.ClientArrays, *,
               observer: round_record.RoundObserver | None = None,
               noise_rows: (
                   Callable[[int, int], Iterator[jax.Array]] | None) = None,
               decorrelate: bool = False,
               evaluate: (
                   Callable[[Any], Mapping[str, float]] | None) = None,
               score_canaries: Callable[[Any], np.ndarray] | None = None):
    """Restores the run from `store`'s newest checkpoint, or saves round 0.

    Args:
      plan: The run (its canary spec must not be None).
      store: The run's checkpoints.
      engine: The program's compiled round.
      model: The model (its `init`).
      train_data: The training clients (the sampler's indices).
      observer: Told of the run's rounds, or None.
      noise_rows: (d, first round) -> the rounds' rows of correlated noise
        from that round on, or None for independent noise.
      decorrelate: Keep every tracked canary's projection on every round,
        for the decorrelated all-iterates statistic (`projections`).
      evaluate: The test-set metrics of parameters (`training.Evaluation`),
        or None for no evaluation. A new run reports round 0's.
      score_canaries: With data canaries, parameters -> each tracked data
        canary's loss (`training.canary_losses`), scored on theta_0 and
        after every round (`drops`); None without.

    Raises:
      ValueError: `decorrelate` without the all-iterates statistic
        'aggregate'.
    """
    self.plan = plan
    # The canaries the server inserts (none for data canaries alone).
    self.spec = spec = plan.inserted_spec
    self.store = store
    state = engine.init_state(model.init(jax.random.PRNGKey(plan.seed)))
    self.dim = int(ravel_pytree(state.params)[0].shape[0])
    tracked = spec.num_seen + spec.num_unseen
    if decorrelate and spec.all_iterates_statistic != 'aggregate':
      raise ValueError('decorrelation needs the all-iterates statistic '
                       "'aggregate' (the released sums); got "
                       f'{spec.all_iterates_statistic!r}.')
    saved = checkpoints.TrainingState(
        state, np.full(tracked, -np.inf, np.float32),
        np.asarray(ravel_pytree(state.params)[0]),
        np.zeros((tracked, plan.total_rounds), np.float32) if decorrelate
        else None)
    resumed_from = store.latest()
    new = resumed_from is None
    if new:
      resumed_from = 0
      if score_canaries is not None:
        saved = saved._replace(drops=loss_drops.LossDrops(
            score_canaries(state.params)))
    else:
      saved = store.load(resumed_from, saved)
      if score_canaries is not None and saved.drops is None:
        raise checkpoint_store.CheckpointError(
            f'checkpoint {resumed_from} holds no data canaries\' losses: '
            'it was written by a run without data canaries; use another '
            'output directory.')
    self._score_canaries = score_canaries
    # With data canaries, their last losses and largest excess one-round drops.
    self.drops = saved.drops
    self.resumed_from = resumed_from
    # The last round recorded, and the last saved.
    self._recorded = self._saved = resumed_from
    self.state, self.initial = saved.server, saved.initial
    self._rows = (None if noise_rows is None else
                  noise_rows(self.dim, resumed_from))
    self._blocks = _BlockScorer(
        spec, np.asarray(saved.maxima, np.float32),
        spec.buffer_rounds_for(self.dim, plan.rounds_per_checkpoint),
        None if saved.projections is None else
        np.array(saved.projections, np.float32), saved.pending,
        resumed_from)
    self.canary_slots = max(1, max(len(ids) for ids in spec.schedule))
    self.slots, self.buckets = _round_shapes(plan, train_data, engine)
    self._key = jax.random.PRNGKey(plan.seed)
    self.observer = observer or round_record.Observers([])
    self._evaluate = evaluate
    self.evaluated: dict[int, Mapping[str, float]] = {}
    if new:
      # A new run: round 0's evaluation, then checkpoint 0 (its rows first).
      metrics = None if evaluate is None else evaluate(self.state.params)
      with interrupts.deferred():
        if metrics is not None:
          self.evaluated[0] = metrics
          self.observer.on_round(round_record.RoundRecord(
              round_num=0, metrics=dict(metrics)))
        self.observer.on_checkpoint(0)
        store.save(saved, 0)

  @property
  def projections(self) -> np.ndarray | None:
    """float32 [k + m, T] projections on the rounds so far, or None.

    Returns:
      Each tracked canary's projection on each round's vector when the run
      decorrelates (`decorrelate`), else None.
    """
    return self._blocks.folded.projections

  def batches(self, t: int, train_data: client_arrays.ClientArrays,
              engine: round_engine.RoundEngine,
              resident: bool) -> data.RoundBatches | data.RoundRows:
    """Round t's batches (their rows with the split resident).

    Args:
      t: The 0-based round.
      train_data: The training clients.
      engine: The program's compiled round (its local training strategy).
      resident: Whether the split is resident on the device.

    Returns:
      The round's batches, or their rows when `resident`.
    """
    plan = self.plan
    clients = plan.cohort(t)
    bucket = _bucket(data.batches_needed(
        train_data, clients, batch_size=plan.batch_size, epochs=plan.epochs,
        max_examples=plan.max_examples), self.buckets)
    # 'loop': each client runs only its own batches, however many.
    return (data.client_rows if resident else data.client_batches)(
        train_data, clients, batch_size=plan.batch_size, epochs=plan.epochs,
        max_examples=plan.max_examples,
        rng=np.random.default_rng([plan.seed, t]), num_slots=self.slots,
        max_batches=bucket if engine.local_training == 'vmap' else None)

  def round_examples(self, train_data: client_arrays.ClientArrays
                     ) -> list[np.ndarray]:
    """Every round's clients' examples (`packing.run_layout`).

    Args:
      train_data: The training clients.

    Returns:
      Per round, the examples each of its clients uses.
    """
    examples = _examples_used(self.plan, train_data)
    return [examples[self.plan.cohort(t)]
            for t in range(self.plan.total_rounds)]

  def inputs(self, t: int, canary_slots: int
             ) -> tuple[jax.Array, np.ndarray, jax.Array, jax.Array | None]:
    """Round t's (canary directions, canary mask, key, noise row).

    Args:
      t: The 0-based round.
      canary_slots: The program's canary slots (>= this run's).

    Returns:
      The directions [canary_slots, d], their 0/1 mask, the round's key and
      its correlated-noise row (None for independent noise).
    """
    ids, mask = _slot_ids(self.spec.schedule[t], canary_slots)
    noise = None
    if self._rows is not None:
      # A run that resumed later sits this round out: its stream waits.
      noise = (next(self._rows) if t >= self.resumed_from else
               jnp.zeros(self.dim, jnp.float32))
    return (canaries.directions(self.spec.seed, ids, self.dim), mask,
            jax.random.fold_in(self._key, t), noise)

  def evaluation(self, t: int, state: fedavg.ServerState
                 ) -> Mapping[str, float] | None:
    """The test-set metrics of the state after round t, if it is evaluated.

    Args:
      t: The 0-based round just trained.
      state: The server state after it.

    Returns:
      The metrics every `RunPlan.rounds_per_evaluation`-th round (for
      `record`), else None (also without an evaluation).
    """
    if (self._evaluate is None or
        (t + 1) % self.plan.rounds_per_evaluation != 0):
      return None
    return self._evaluate(state.params)

  def record(self, t: int, previous: fedavg.ServerState,
             state: fedavg.ServerState, output: fedavg.RoundOutput,
             seconds: float,
             evaluated: Mapping[str, float] | None = None) -> None:
    """Reports round t, scores its block, checkpoints; `state` is after t.

    Call it inside `interrupts.deferred`: the run's state, outputs and
    checkpoints move by whole rounds.

    Args:
      t: The 0-based round just trained.
      previous: The server state before it.
      state: The server state after it.
      output: The round's output (aggregate, clip, counts).
      seconds: The round's training time.
      evaluated: The round's test-set metrics (`evaluation`), or None.
    """
    self.state = state
    vector = output.aggregate
    if self.spec.all_iterates_statistic == 'model_delta':
      vector = ravel_pytree(previous.params)[0] - ravel_pytree(state.params)[0]
    if jax.process_count() > 1:
      # Under jax.distributed the canaries are scored by each process on
      # its own device, from the replicated vector.
      vector = np.asarray(vector)
    clip = float(output.clip)
    metrics = {'clip': clip,
               'aggregate_norm': float(jnp.linalg.norm(output.aggregate)),
               'canaries_inserted': int(output.canaries_inserted),
               'num_clients': int(output.num_clients),
               'training_time_in_seconds': seconds}
    if evaluated is not None:
      self.evaluated[t + 1] = evaluated
      metrics.update(evaluated)
    # Before its block may be scored and reported.
    if self._score_canaries is not None:
      self.drops.update(self._score_canaries(state.params))
    self.observer.on_round(round_record.RoundRecord(
        round_num=t + 1, metrics=metrics, seconds=seconds, clip=clip))
    self.observer.on_cosines(self._blocks.add(t + 1, vector))
    self._recorded = t + 1
    if run_directory.is_checkpoint_round(t + 1, self.plan.rounds_per_checkpoint,
                                         self.plan.total_rounds):
      self.observer.on_cosines(self._blocks.flush())
      self._save()

  def _save(self) -> None:
    """Checkpoints the state after the last round recorded, announced first."""
    self.observer.on_checkpoint(self._recorded)
    self.store.save(checkpoints.TrainingState(
        self.state, self._blocks.folded.maxima, self.initial,
        self._blocks.folded.projections, self._blocks.pending(),
        self.drops), self._recorded)
    self._saved = self._recorded

  def save_last_recorded(self) -> None:
    """Checkpoints the last round recorded unless it is saved (an interrupt).

    Its cosine block's buffered vectors are saved unscored, so that the
    run resumed from it scores the same blocks as an uninterrupted run.
    """
    if self._recorded != self._saved:
      self._save()

  def outcome(self, accuracy: float) -> canary_spec.CanaryOutcome:
    """The run's cosines of both threat models, with its final accuracy.

    Args:
      accuracy: The final model's test accuracy.

    Returns:
      The outcome (without decorrelated scores).
    """
    spec = self.spec
    final = np.asarray(ravel_pytree(self.state.params)[0])
    vector = (self.initial - final if spec.final_model_statistic == 'delta'
              else final)
    final_cosines = np.asarray(canaries.cosines(
        spec.seed, spec.tracked_ids(), vector), np.float64)
    maxima = np.asarray(self._blocks.folded.maxima, np.float64)
    return canary_spec.CanaryOutcome(
        final_cosines=final_cosines[:spec.num_seen],
        final_unseen_cosines=final_cosines[spec.num_seen:],
        seen_maxima=maxima[:spec.num_seen],
        unseen_maxima=maxima[spec.num_seen:], accuracy=accuracy,
        dim=self.dim, resumed_from_round=self.resumed_from,
        rounds_trained=self.plan.total_rounds - self.resumed_from)
