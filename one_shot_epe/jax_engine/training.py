"""A whole DP-FedAvg run with canaries on the JAX engine, resumable.

The run of `experiments.train` (Andrew et al., ICLR 2024, Section 5) without
TensorFlow: each round t samples its clients with the same
`one_shot_epe.design.participation` sampler, builds their batches, inserts the
scheduled seen canaries and runs `fedavg.RoundEngine`. As Algorithm 3 (lines
10-16) asks, every canary's cosine with each round's vector is taken and its
running maximum kept; as on the TFF engine, the vectors of B rounds are
buffered and each canary is regenerated once per block (`jax_engine.canaries`
on a [B, d] block), so the maxima are exact and only the per-round summaries
lag. At the end the canaries' cosines with the final model (Algorithm 2) are
taken the same way.

The round's computations are compiled once for the run: the client slots are
fixed to the run's largest cohort and, for 'vmap' local training, the lanes
to one layout chosen from all the run's rounds before the first
(`packing.run_lanes`, `fedavg.RoundEngine.fix_layout`), each round looping
only over the batches it needs;
`RunStats` counts the compilations, their seconds, the padding and the bytes
sent to the device. With 'vmap' local training the training split is put on
the device once (`RoundEngine.upload`) and a round sends only its examples'
rows (`data.client_rows`), unless `resident_data` is False.

Determinism: round t's client sample depends on (seed, t) (the sampler), its
batch shuffles on numpy's generator seeded by (seed, t), and its dropout and
DP noise on `fold_in(PRNGKey(seed), t)` (t 0-based here: training round
t + 1 of `round_record`'s numbering). A checkpoint (`jax_engine.checkpoints`:
an .npz of the server state and the maxima, written after the buffer is
processed) therefore resumes a run exactly: a run killed and rerun gives the
same results as one never interrupted.

The run reports its rounds through a `round_record.RoundObserver` and writes
nothing but its checkpoints.

Many runs in one program (`train_program`, the paper's Table 5 and grids at
scale): R runs that share the model, data and shapes are trained together,
each round of all R one computation with a run axis
(`fedavg.RoundEngine.run_rounds`); each run keeps its own seeds, canaries,
noise multiplier, checkpoints and observer, and ends as it would alone.
"""

import concurrent.futures
import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.design import canary_spec
from one_shot_epe.data import client_arrays
from one_shot_epe.stats import decorrelation
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packing

__all__ = ['Decorrelation', 'DeviceMemory', 'ProgramRun', 'RunStats',
           'device_memory', 'device_memory_limit', 'evaluate', 'optimizer',
           'round_engine', 'train', 'train_program']

# JAX's monitoring event of one XLA compilation (jax 0.4.14 and 0.11).
_BACKEND_COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'
# 'vmap' rounds pad their batches to one of these fractions of the largest.
_BATCH_BUCKETS = (0.25, 0.5, 1.0)


@dataclasses.dataclass
class RunStats:
  """How the run used the device (`benchmarks/accelerator_round.py`).

  Attributes:
    compiles: the round's computations compiled (`RoundEngine.compiles`).
    compile_seconds: XLA's compile time over the run, every computation.
    real_examples, padded_examples: examples the rounds trained on, and the
      examples their computations processed (padding included).
    vmap_padded_examples: what 'vmap' local training processes for the same
      rounds (the clients packed into lanes, `data.packed_layout`).
    example_bytes: the bytes of the rounds' real examples (model inputs and
      labels).
    host_to_device_bytes: what the rounds sent to the device (their batches,
      or only their examples' rows with the split resident).
    resident_bytes: the split put on each device once (0: host-fed rounds).
    rounds: rounds trained (a round of a program's R runs counts once).
  """
  # What compiling cost.
  compiles: int = 0
  compile_seconds: float = 0.0
  # What the rounds processed and uploaded.
  rounds: int = 0
  real_examples: int = 0
  padded_examples: int = 0
  vmap_padded_examples: int = 0
  example_bytes: int = 0
  host_to_device_bytes: int = 0
  resident_bytes: int = 0

  @property
  def padding_ratio(self) -> float:
    """Processed over real examples (1 without padding)."""
    return self.padded_examples / max(self.real_examples, 1)

  @property
  def vmap_padding_ratio(self) -> float:
    """`padding_ratio` of 'vmap' local training on the same rounds."""
    return self.vmap_padded_examples / max(self.real_examples, 1)


class _CompileClock:
  """Seconds XLA spends compiling, from JAX's monitoring events."""

  total = 0.0
  _registered = False

  @classmethod
  def start(cls) -> float:
    if not cls._registered:
      jax.monitoring.register_event_duration_secs_listener(cls._listen)
      cls._registered = True
    return cls.total

  @classmethod
  def _listen(cls, event: str, duration: float, **unused_details: Any) -> None:
    # jax 0.11 also passes the function's name and other details.
    if event == _BACKEND_COMPILE_EVENT:
      cls.total += duration


class _CosineBuffer:
  """Rounds' vectors, B at a time, scored against every tracked canary."""

  def __init__(self, spec: canary_spec.CanarySpec, maxima: np.ndarray,
               rounds: int, projections: np.ndarray | None = None):
    self._spec = spec
    self._ids = spec.tracked_ids()
    self.maxima = maxima
    # [k + m, T]: each canary's projection <v_t, c> on round t's vector
    # (cosine times |v_t|), kept for the decorrelated statistic; or None.
    self.projections = projections
    self._rounds = rounds
    self._vectors: list[jax.Array] = []
    self._round_nums: list[int] = []

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
    rows = self._vectors + [self._vectors[0]] * (self._rounds -
                                                 len(self._vectors))
    stacked = jnp.stack(rows)
    block = np.asarray(canaries.cosines(self._spec.seed, self._ids,
                                        stacked))[:, :len(self._vectors)]
    self.maxima = np.maximum(self.maxima, block.max(axis=1))
    if self.projections is not None:
      norms = np.asarray(jnp.linalg.norm(stacked, axis=1))[:len(self._vectors)]
      self.projections[:, np.asarray(self._round_nums) - 1] = block * norms
    k = self._spec.num_seen
    nan = float('nan')
    summaries = [
        round_record.CanaryCosines(round_num, float(column[:k].mean()),
                      float(column[:k].max()),
                      float(column[k:].mean()) if column.size > k else nan,
                      float(column[k:].max()) if column.size > k else nan)
        for round_num, column in zip(self._round_nums, block.T)]
    self._vectors, self._round_nums = [], []
    return summaries


def _slot_ids(ids: Sequence[int], slots: int) -> tuple[np.ndarray, np.ndarray]:
  """Ids padded to `slots` (padding repeats id 0) and their 0/1 mask."""
  padded = np.zeros(slots, np.int64)
  padded[:len(ids)] = ids
  return padded, (np.arange(slots) < len(ids)).astype(np.float32)


def evaluate(model: Any, params: Any, test: client_arrays.ClientArrays,
             batch_size: int = 256) -> float:
  """Accuracy of `params` on every example of `test` (TFF's metric)."""
  pooled = client_arrays.ClientArrays(
      kind=test.kind, client_ids=np.asarray(['all']),
      offsets=np.asarray([0, test.offsets[-1]]), features=test.features)
  batches = data.client_batches(
      pooled, [0], batch_size=batch_size, epochs=1, max_examples=None,
      rng=np.random.default_rng(0), shuffle_buffer=1)
  correct = jax.jit(model.correct)
  hits = total = 0.0
  for m in range(batches.example_mask.shape[1]):
    got, count = correct(params, batches.inputs[0, m], batches.labels[0, m],
                         batches.example_mask[0, m])
    hits, total = hits + float(got), total + float(count)
  return hits / max(total, 1.0)


def optimizer(spec: run_plan.OptimizerSpec) -> optimizers.Optimizer:
  """The JAX optimizer of `spec` (TFF's sgd, sgdm or adam)."""
  return optimizers.Optimizer(spec.name, spec.learning_rate,
                              momentum=spec.momentum)


def round_engine(plan: run_plan.RunPlan, model: Any,
                 local_training: str = 'auto') -> fedavg.RoundEngine:
  """The round of `plan` on `model`, compiled as the backend runs it fastest.

  `local_training`: `fedavg.RoundEngine`'s strategy ('auto': the backend's).
  """
  return fedavg.RoundEngine(model.loss, optimizer(plan.client_optimizer),
                            optimizer(plan.server_optimizer), plan.dp,
                            canary_clip=plan.spec.canary_clip,
                            local_training=local_training)


def _examples_used(plan: run_plan.RunPlan,
                   train_data: client_arrays.ClientArrays) -> np.ndarray:
  """Each client's examples in a round: its size x epochs, capped."""
  sizes = train_data.client_sizes() * plan.epochs
  if plan.max_examples is not None:
    sizes = np.minimum(sizes, plan.max_examples)
  return sizes


def _round_shapes(plan: run_plan.RunPlan,
                  train_data: client_arrays.ClientArrays,
                  engine: fedavg.RoundEngine) -> tuple[int, list[int]]:
  """The run's fixed client slots and the batch buckets of its rounds."""
  cohort = max(len(plan.sampler.indices(t)) for t in range(plan.total_rounds))
  sizes = _examples_used(plan, train_data)
  largest = data.max_batches_for(int(sizes.max()), plan.batch_size)
  buckets = sorted({max(1, math.ceil(f * largest)) for f in _BATCH_BUCKETS})
  return engine.num_slots(cohort), buckets


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
  """What a run holds on each device at once, estimated before it starts.

  Attributes:
    data_bytes: the resident split (`RoundEngine.upload`), or a round's
      host-fed batches (every slot at the largest client's batches).
    state_bytes: the server's model, optimizer slots and first model, and a
      block of `canary_spec.CanarySpec.buffer_rounds` round vectors.
    lane_bytes: one lane's local training: the model, the client optimizer's
      slots, the gradient, the update and the lane's clipped sum, plus every
      intermediate value of one local step (the sizes in its jaxpr: an upper
      bound on its activations, whatever the backend).
    lanes: the lanes on one device (at most one client per lane).
    resident: whether the split is resident ('vmap' with resident data).
    runs: the runs of the program (`train_program`), each with its own
      state, lanes and host-fed batches; a resident split is shared.
  """
  data_bytes: int
  state_bytes: int
  lane_bytes: int
  lanes: int
  resident: bool
  runs: int = 1

  @property
  def total_bytes(self) -> int:
    """The estimate: data + runs x (state + lanes x lane)."""
    data_bytes = self.data_bytes * (1 if self.resident else self.runs)
    return data_bytes + self.runs * (self.state_bytes +
                                     self.lanes * self.lane_bytes)


def _values_bytes(jaxpr: Any) -> int:
  """Bytes of every value an equation of `jaxpr` outputs (no sub-jaxprs)."""
  return sum(int(np.prod(var.aval.shape)) * var.aval.dtype.itemsize
             for eqn in jaxpr.eqns for var in eqn.outvars
             if hasattr(var.aval, 'shape'))


def device_memory(plan: run_plan.RunPlan, model: Any,
                  train_data: client_arrays.ClientArrays, *,
                  local_training: str = 'auto',
                  resident_data: bool = True, runs: int = 1) -> DeviceMemory:
  """The device memory `train` needs on each local device (`DeviceMemory`).

  `runs` > 1: a program of that many runs like `plan` (`train_program`,
  'vmap' local training).

  Computed from shapes only (nothing is compiled or uploaded): the split's
  bytes, d = the model's parameters, the run's largest cohort spread over
  `jax.local_devices()` ('loop': one device, one lane) and the jaxpr of one
  local step on a batch of `plan.batch_size` examples.
  """
  if local_training == 'auto':
    local_training = ('vmap' if runs > 1 else
                      fedavg.default_local_training())
  devices = 1 if local_training == 'loop' else len(jax.local_devices())
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  dim = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
  sample = {name: array[:1] for name, array in train_data.features.items()}
  example = sum(int(a.nbytes) for a in data.model_inputs(train_data.kind,
                                                         sample))
  sizes = _examples_used(plan, train_data)
  largest = data.max_batches_for(int(sizes.max(initial=1)), plan.batch_size)
  cohort = max(len(plan.sampler.indices(t)) for t in range(plan.total_rounds))
  lanes = 1 if local_training == 'loop' else -(-max(cohort, 1) // devices)
  resident = local_training == 'vmap' and resident_data
  if resident:
    data_bytes = example * int(train_data.offsets[-1])
  else:
    data_bytes = example * lanes * largest * plan.batch_size
  spec = plan.spec
  buffer = (spec.buffer_rounds or min(canary_spec.default_buffer_rounds(dim),
                                      plan.rounds_per_checkpoint)
            if spec is not None else 0)
  state_bytes = 4 * dim * (2 + plan.server_optimizer.slots + buffer)
  batch = {name: np.zeros((plan.batch_size,) + a.shape[1:], a.dtype)
           for name, a in sample.items()}
  inputs, labels = data.model_inputs(train_data.kind, batch)
  step = jax.make_jaxpr(jax.grad(model.loss))(
      params, inputs, labels, np.ones(plan.batch_size, np.float32),
      jax.random.PRNGKey(0))
  lane_bytes = (4 * dim * (4 + plan.client_optimizer.slots) +
                _values_bytes(step.jaxpr))
  return DeviceMemory(data_bytes=data_bytes, state_bytes=state_bytes,
                      lane_bytes=lane_bytes, lanes=lanes, resident=resident,
                      runs=runs)


def device_memory_limit() -> int | None:
  """Bytes a local device can hold: XLA's limit, or free host RAM on a CPU.

  None where neither is known.
  """
  stats = jax.local_devices()[0].memory_stats() or {}
  if 'bytes_limit' in stats:
    return int(stats['bytes_limit'])
  if jax.default_backend() == 'cpu':
    try:
      return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    except (ValueError, OSError):
      return None
  return None


@dataclasses.dataclass(frozen=True)
class Decorrelation:
  """The decorrelated all-iterates statistic of correlated noise.

  `one_shot_epe.stats.decorrelation`: under matrix-factorization noise the run
  keeps every tracked canary's projection on every round's aggregate and
  ends with their matched-filter scores (`CanaryOutcome.decorrelated_seen`).

  Attributes:
    strategy: C, float64 [T, T] lower triangular.
    noise_std: s > 0, the std of a coordinate of a round's noise row Z_t in
      the aggregate's units (z S sens(C) over the expected cohort).
  """
  strategy: np.ndarray
  noise_std: float


@dataclasses.dataclass(frozen=True)
class ProgramRun:
  """One run of `train_program`: its plan and where its outputs go.

  Attributes:
    plan: The run (`plan.spec` must not be None).
    store: The run's checkpoints (as `train`'s).
    observer: Told of the run's rounds (as `train`'s), or None.
    noise_rows: The run's correlated noise (as `train`'s), or None.
    decorrelation: With correlated noise, its decorrelated statistic
      (`Decorrelation`; the all-iterates statistic must be 'aggregate'), or
      None.
  """
  plan: run_plan.RunPlan
  store: checkpoints.NpzCheckpoints
  observer: round_record.RoundObserver | None = None
  noise_rows: Callable[[int, int], Iterator[jax.Array]] | None = None
  decorrelation: Decorrelation | None = None


class _RunLoop:
  """The host side of one run: its state, resume point, canaries and outputs."""

  def __init__(self, run: ProgramRun, engine: fedavg.RoundEngine, model: Any,
               train_data: client_arrays.ClientArrays):
    self.plan = plan = run.plan
    self.spec = spec = plan.spec
    self.store = run.store
    state = engine.init_state(model.init(jax.random.PRNGKey(plan.seed)))
    self.dim = int(ravel_pytree(state.params)[0].shape[0])
    tracked = spec.num_seen + spec.num_unseen
    self.decorrelation = run.decorrelation
    if (self.decorrelation is not None and
        spec.all_iterates_statistic != 'aggregate'):
      raise ValueError('decorrelation needs the all-iterates statistic '
                       "'aggregate' (the released sums); got "
                       f'{spec.all_iterates_statistic!r}.')
    saved = checkpoints.TrainingState(
        state, np.full(tracked, -np.inf, np.float32),
        np.asarray(ravel_pytree(state.params)[0]),
        None if self.decorrelation is None else np.zeros(
            (tracked, plan.total_rounds), np.float32))
    resumed_from = run.store.latest()
    if resumed_from is None:
      resumed_from = 0
      run.store.save(saved, 0)
    else:
      saved = run.store.load(resumed_from, saved)
    self.resumed_from = resumed_from
    self.state, self.initial = saved.server, saved.initial
    self.rows = (None if run.noise_rows is None else
                 run.noise_rows(self.dim, resumed_from))
    self.buffer = _CosineBuffer(spec, np.asarray(saved.maxima, np.float32),
                                spec.buffer_rounds or min(
                                    canary_spec.default_buffer_rounds(
                                        self.dim),
                                    plan.rounds_per_checkpoint),
                                None if saved.projections is None else
                                np.array(saved.projections, np.float32))
    self.canary_slots = max(1, max(len(ids) for ids in spec.schedule))
    self.slots, self.buckets = _round_shapes(plan, train_data, engine)
    self.key = jax.random.PRNGKey(plan.seed)
    self.observer = run.observer or round_record.Observers([])

  def batches(self, t: int, train_data: client_arrays.ClientArrays,
              engine: fedavg.RoundEngine,
              resident: bool) -> data.RoundBatches | data.RoundRows:
    """Round t's batches (their rows with the split resident)."""
    plan = self.plan
    clients = plan.sampler.indices(t)
    bucket = _bucket(data.batches_needed(
        train_data, clients, batch_size=plan.batch_size, epochs=plan.epochs,
        max_examples=plan.max_examples), self.buckets)
    # 'loop': each client runs only its own batches, however many.
    return (data.client_rows if resident else data.client_batches)(
        train_data, clients, batch_size=plan.batch_size, epochs=plan.epochs,
        max_examples=plan.max_examples,
        rng=np.random.default_rng([plan.seed, t]), num_slots=self.slots,
        max_batches=bucket if engine.local_training == 'vmap' else None)

  def round_counts(self, train_data: client_arrays.ClientArrays
                   ) -> list[np.ndarray]:
    """Every round's clients' local batches (`data.slot_batch_counts`)."""
    plan = self.plan
    batches = np.maximum(
        -(-_examples_used(plan, train_data) // plan.batch_size), 1)
    return [batches[np.asarray(plan.sampler.indices(t), np.int64)]
            for t in range(plan.total_rounds)]

  def inputs(self, t: int, canary_slots: int
             ) -> tuple[jax.Array, np.ndarray, jax.Array, jax.Array | None]:
    """Round t's (canary directions, canary mask, key, noise row)."""
    ids, mask = _slot_ids(self.spec.schedule[t], canary_slots)
    noise = None
    if self.rows is not None:
      # A run that resumed later sits this round out: its stream waits.
      noise = (next(self.rows) if t >= self.resumed_from else
               jnp.zeros(self.dim, jnp.float32))
    return (canaries.directions(self.spec.seed, ids, self.dim), mask,
            jax.random.fold_in(self.key, t), noise)

  def record(self, t: int, previous: fedavg.ServerState,
             state: fedavg.ServerState, output: fedavg.RoundOutput,
             seconds: float) -> None:
    """Reports round t, scores its block, checkpoints; `state` is after t."""
    self.state = state
    vector = output.aggregate
    if self.spec.all_iterates_statistic == 'model_delta':
      vector = ravel_pytree(previous.params)[0] - ravel_pytree(state.params)[0]
    if jax.process_count() > 1:
      # Under jax.distributed the canaries are scored by each process on
      # its own device, from the replicated vector.
      vector = np.asarray(vector)
    clip = float(output.clip)
    # Before its block may be scored and reported.
    self.observer.on_round(round_record.RoundRecord(
        round_num=t + 1, metrics={
            'clip': clip,
            'aggregate_norm': float(jnp.linalg.norm(output.aggregate)),
            'canaries_inserted': int(output.canaries_inserted),
            'num_clients': int(output.num_clients),
            'training_time_in_seconds': seconds},
        seconds=seconds, clip=clip))
    self.observer.on_cosines(self.buffer.add(t + 1, vector))
    if run_directory.is_checkpoint_round(t + 1, self.plan.rounds_per_checkpoint,
                                         self.plan.total_rounds):
      self.observer.on_cosines(self.buffer.flush())
      self.store.save(checkpoints.TrainingState(
          state, self.buffer.maxima, self.initial, self.buffer.projections),
                      t + 1)

  def outcome(self, model: Any, test_data: client_arrays.ClientArrays | None
              ) -> canary_spec.CanaryOutcome:
    """The run's cosines of both threat models and its final accuracy."""
    spec = self.spec
    final = np.asarray(ravel_pytree(self.state.params)[0])
    vector = (self.initial - final if spec.final_model_statistic == 'delta'
              else final)
    final_cosines = np.asarray(canaries.cosines(
        spec.seed, spec.tracked_ids(), vector), np.float64)
    maxima = np.asarray(self.buffer.maxima, np.float64)
    accuracy = (evaluate(model, self.state.params, test_data)
                if test_data is not None else float('nan'))
    seen = unseen = None
    if self.decorrelation is not None:
      seen, unseen = decorrelation.matched_filter_scores(
          self.buffer.projections, self.decorrelation.strategy,
          spec.schedule, spec.num_seen, self.decorrelation.noise_std)
    return canary_spec.CanaryOutcome(
        final_cosines=final_cosines[:spec.num_seen],
        final_unseen_cosines=final_cosines[spec.num_seen:],
        seen_maxima=maxima[:spec.num_seen],
        unseen_maxima=maxima[spec.num_seen:], accuracy=accuracy,
        dim=self.dim, resumed_from_round=self.resumed_from,
        rounds_trained=self.plan.total_rounds - self.resumed_from,
        decorrelated_seen=seen, decorrelated_unseen=unseen)


def train(plan: run_plan.RunPlan, model: Any,
          train_data: client_arrays.ClientArrays,
          test_data: client_arrays.ClientArrays | None,
          store: checkpoints.NpzCheckpoints,
          observer: round_record.RoundObserver | None = None, *,
          local_training: str = 'auto', stats: RunStats | None = None,
          resident_data: bool = True,
          noise_rows: Callable[[int, int], Iterator[jax.Array]] | None = None,
          decorrelation: Decorrelation | None = None
          ) -> canary_spec.CanaryOutcome:
  """Trains (or resumes from `store`'s newest checkpoint); returns the outcome.

  Args:
    plan: The run (`plan.spec` must not be None).
    model: A `models.EmnistCnn` or `models.WordLstm` (loss, init, correct).
    train_data: The training clients (the sampler's indices).
    test_data: The evaluation examples (all clients pooled), or None.
    store: The run's checkpoints: written after round 0 (the initial state),
      every `plan.rounds_per_checkpoint` rounds and after the last round.
    observer: Told of every round trained now (`on_round`) and of the
      rounds' canary cosines as their block is scored (`on_cosines`, always
      before a checkpoint).
    local_training: `fedavg.RoundEngine`'s strategy ('auto': the backend's).
    stats: If given, gathers the run's `RunStats`.
    resident_data: With 'vmap' local training, put `train_data` on the
      device once and send each round only its examples' rows (same
      results as host-fed batches); False: send every round's batches.
    noise_rows: None for DP-FedAvg's independent noise; else (d, first
      round) -> the rounds' rows of correlated noise from that round on
      (`correlated_noise.NoiseStream.rows`), each replacing a round's draw.
    decorrelation: With `noise_rows`, the decorrelated all-iterates
      statistic to end with (`Decorrelation`), or None.
  """
  return train_program([ProgramRun(plan, store, observer, noise_rows,
                                   decorrelation)], model,
                       train_data, test_data, local_training=local_training,
                       stats=stats, resident_data=resident_data)[0]


def train_program(runs: Sequence[ProgramRun], model: Any,
                  train_data: client_arrays.ClientArrays,
                  test_data: client_arrays.ClientArrays | None, *,
                  local_training: str = 'auto', stats: RunStats | None = None,
                  resident_data: bool = True
                  ) -> list[canary_spec.CanaryOutcome]:
  """Trains (or resumes) R runs as one program; each run's outcome.

  One run is `train`. Several (R > 1) share the model, the data and every
  shape, and differ in their seeds, canaries, noise multiplier and canary
  schedule: each round of all R is one computation with a run axis
  (`fedavg.RoundEngine.run_rounds`, 'vmap' local training), and each run
  keeps its own checkpoints, observer and outcome, as if trained alone (up
  to float rounding). Runs resumed from different rounds start together
  from the earliest; a run sits out the rounds before its own (its state is
  kept, nothing is reported).

  Args:
    runs: The runs (`ProgramRun`); their plans must have the same rounds,
      DP aggregation but for the noise multiplier, optimizers and batches.
    model, train_data, test_data, stats, resident_data: as `train`'s.
    local_training: as `train`'s; R > 1 needs 'vmap' ('auto' picks it).

  Raises:
    ValueError: the runs' plans differ in rounds, or R > 1 with 'loop'.
  """
  stats = RunStats() if stats is None else stats
  compile_start = _CompileClock.start()
  program = len(runs) > 1
  if program and local_training == 'auto':
    local_training = 'vmap'
  if len({run.plan.total_rounds for run in runs}) > 1:
    raise ValueError('runs of one program must have the same rounds; got '
                     f'{[run.plan.total_rounds for run in runs]}.')
  engine = round_engine(runs[0].plan, model, local_training)
  if program and engine.local_training != 'vmap':
    raise ValueError('runs_per_program > 1 needs local_training=\'vmap\'; '
                     f'got {local_training!r}.')
  loops = [_RunLoop(run, engine, model, train_data) for run in runs]
  if engine.local_training == 'vmap':
    # One layout for every round of every run: one compile.
    engine.fix_layout(*packing.run_lanes(
        [counts for loop in loops for counts in loop.round_counts(train_data)],
        lane_multiple=engine.num_devices))
  total_rounds = runs[0].plan.total_rounds
  first = min(loop.resumed_from for loop in loops)
  canary_slots = max(loop.canary_slots for loop in loops)
  resident = resident_data and engine.local_training == 'vmap'
  if resident:
    engine.upload(train_data)
  stats.resident_bytes = engine.resident_bytes
  # Bytes of one example's model inputs and labels.
  example_bytes = sum(
      int(a.nbytes) // max(a.shape[0], 1) for a in data.model_inputs(
          train_data.kind, {name: array[:1] for name, array
                            in train_data.features.items()}))
  scales = np.stack([fedavg.noise_scales(run.plan.dp) for run in runs])
  stacked = fedavg.stack_states([loop.state for loop in loops])

  def round_batches(t: int) -> list[data.RoundBatches | data.RoundRows]:
    return [loop.batches(t, train_data, engine, resident) for loop in loops]

  # The next round's batches are built on the host while this one trains.
  prefetch = concurrent.futures.ThreadPoolExecutor(1)
  upcoming = (prefetch.submit(round_batches, first)
              if first < total_rounds else None)
  try:
    for t in range(first, total_rounds):
      start = time.perf_counter()
      batches = upcoming.result()
      if t + 1 < total_rounds:
        upcoming = prefetch.submit(round_batches, t + 1)
      active = np.asarray([t >= loop.resumed_from for loop in loops])
      directions, masks, keys, noises = zip(
          *[loop.inputs(t, canary_slots) for loop in loops])
      if program:
        previous = stacked
        stacked, outputs = engine.run_rounds(
            stacked, batches, directions, masks, keys,
            None if noises[0] is None else noises, scales, active)
        results = [(fedavg.run_state(previous, r),
                    fedavg.run_state(stacked, r),
                    jax.tree_util.tree_map(lambda x, r=r: x[r], outputs))
                   for r in range(len(loops))]
      else:
        previous = loops[0].state
        state, output = engine(previous, batches[0], directions[0], masks[0],
                               keys[0], noises[0])
        results = [(previous, state, output)]
      # The round's training time, as TFF's metrics report it: without the
      # canaries' scoring (amortised over the buffer's blocks on both engines).
      jax.block_until_ready(results)
      seconds = time.perf_counter() - start
      _count(stats, engine, batches, example_bytes)
      for loop, is_active, result in zip(loops, active, results):
        if is_active:
          loop.record(t, *result, seconds)
  finally:
    prefetch.shutdown(cancel_futures=True)
  stats.compiles = engine.compiles
  stats.compile_seconds = _CompileClock.total - compile_start
  return [loop.outcome(model, test_data) for loop in loops]


def _bucket(needed: int, buckets: Sequence[int]) -> int:
  """The smallest bucket that holds `needed` batches."""
  return next(b for b in buckets if b >= needed)


def _count(stats: RunStats, engine: fedavg.RoundEngine,
           runs: Sequence[data.RoundBatches | data.RoundRows],
           example_bytes: int) -> None:
  """Adds a round's examples, padding and uploads to `stats` (all its runs).

  The uploads are what the round's call sent to the device
  (`RoundEngine.upload_bytes`; the canaries are generated on the device).
  example_bytes: one example's model inputs and labels.
  """
  real = sum(int(batches.example_mask.sum()) for batches in runs)
  stats.real_examples += real
  stats.example_bytes += real * example_bytes
  if len(runs) > 1:
    padded = engine.program_padded_examples(runs)
    stats.padded_examples += padded
    stats.vmap_padded_examples += padded
  elif engine.local_training == 'vmap':
    stats.padded_examples += engine.padded_examples(runs[0])
    stats.vmap_padded_examples += engine.padded_examples(runs[0])
  else:
    stats.padded_examples += engine.padded_examples(runs[0])
    lanes, lane_batches = data.packed_layout(runs[0])
    stats.vmap_padded_examples += (len(lanes) * lane_batches *
                                   runs[0].example_mask.shape[2])
  stats.host_to_device_bytes += engine.upload_bytes
  stats.rounds += 1
