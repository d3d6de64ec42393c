"""A whole DP-FedAvg run with canaries on the JAX engine, resumable.

The run of `experiments.train` (Andrew et al., ICLR 2024, Section 5) without
TensorFlow: each round t samples its clients with the same
`one_shot_epe.design.participation` sampler, builds their batches, inserts the
scheduled seen canaries and runs `round_engine.RoundEngine`. As Algorithm 3
(lines 10-16) asks, every canary's cosine with each round's vector is taken
and its running maximum kept; as on the TFF engine, the vectors of B rounds are
buffered and each canary is regenerated once per block (`jax_engine.canaries`
on a [B, d] block), so the maxima are exact and only the per-round summaries
lag. At the end the canaries' cosines with the final model (Algorithm 2) are
taken the same way.

The round's computations are compiled once for the run: the client slots are
fixed to the run's largest cohort and, for 'vmap' local training, the lanes to
one layout chosen from all the run's rounds before the first
(`packing.run_layout`, `round_engine.RoundEngine.fix_layout`), each round
looping only over the batches it needs; `run_stats.RunStats` counts the
compilations, their seconds, the padding and the bytes sent to the device. With
'vmap' local training the training split is put on the device once
(`RoundEngine.upload`) and a round sends only its examples' rows
(`data.client_rows`), unless `resident_data` is False.

Determinism: round t's client sample depends on (seed, t) (the sampler), its
batch shuffles on numpy's generator seeded by (seed, t), and its dropout and
DP noise on `fold_in(PRNGKey(seed), t)` (t 0-based here: training round
t + 1 of `round_record`'s numbering). A checkpoint (`jax_engine.checkpoints`:
an .npz of the server state and the maxima, written after the buffer is
processed) therefore resumes a run exactly: a run killed and rerun gives the
same results as one never interrupted. On Ctrl-C or SIGTERM, a round's
bookkeeping (every run's record, cosines and checkpoint) finishes first
(`interrupts.deferred`), then each run's state after its last recorded
round is checkpointed, its buffered vectors unscored
(`run_loop.RunLoop.save_last_recorded`), and the interrupt goes on: the
rerun resumes from there with the same blocks of rounds, hence the same
results.

The run reports its rounds through a `round_record.RoundObserver` and writes
nothing but its checkpoints. As on the TFF engine, the test set is evaluated
before the first round of a new run (round 0) and after every
`RunPlan.rounds_per_evaluation`-th round (`Evaluation`): those rounds'
metrics hold 'evaluation/<the task's accuracy metric>', 'evaluation/loss'
and 'evaluation/num_examples', TFF's names.

Many runs in one program (`train_program`, the paper's Table 5 and grids at
scale): R runs that share the model, data and shapes are trained together,
each round of all R one call (`round_engine.RoundEngine.run_rounds`: one
computation with a run axis on accelerators, the runs' rounds one after
another on a CPU, whichever the platform runs faster); each run keeps its
own seeds, canaries, noise multiplier, checkpoints and observer, and ends as
it would alone.

The host's share of a run (its state, resume point, canaries and outputs)
is `run_loop.RunLoop`; the device's figures are `run_stats`, its memory
`memory`.
"""

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from one_shot_epe.design import canary_spec
from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays
from one_shot_epe.stats import decorrelation
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import round_record
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packing
from one_shot_epe.jax_engine import round_engine
from one_shot_epe.jax_engine import run_loop
from one_shot_epe.jax_engine import run_stats

__all__ = ['Decorrelation', 'Evaluation', 'ProgramRun', 'evaluate',
           'make_round_engine',
           'optimizer', 'train', 'train_program']


class Evaluation:
  """The test-set metrics of a model's parameters, TFF's evaluation names.

  The test examples are batched once and the metrics compiled once.
  """

  def __init__(self, model: Any, test: client_arrays.ClientArrays,
               accuracy_metric: str = 'accuracy', batch_size: int = 256):
    """Batches `test` (all clients pooled) for `model`.

    Args:
      model: The model (its `correct` and `loss`).
      test: The evaluation examples.
      accuracy_metric: The accuracy's name (the task entry's, TFF's name).
      batch_size: Examples per evaluated batch.
    """
    pooled = client_arrays.ClientArrays(
        kind=test.kind, client_ids=np.asarray(['all']),
        offsets=np.asarray([0, test.offsets[-1]]), features=test.features)
    self._batches = data.client_batches(
        pooled, [0], batch_size=batch_size, epochs=1, max_examples=None,
        rng=np.random.default_rng(0), shuffle_buffer=1)
    self.accuracy_name = f'evaluation/{accuracy_metric}'

    def sums(params, inputs, labels, mask):
      hits, counted = model.correct(params, inputs, labels, mask)
      examples = jnp.sum(mask)
      return hits, counted, model.loss(params, inputs, labels, mask) * (
          examples), examples

    self._sums = jax.jit(sums)

  def __call__(self, params: Any) -> dict[str, float]:
    """The metrics of `params` on every test example.

    Args:
      params: The model's parameters.

    Returns:
      {accuracy_name: the fraction predicted correctly of the targets the
      metric counts, 'evaluation/loss': the mean of the batches' losses
      weighted by their examples (Keras'), 'evaluation/num_examples'}; 0
      for an empty set.
    """
    batches = self._batches
    totals = np.zeros(4)
    for m in range(batches.example_mask.shape[1]):
      totals += np.asarray(jax.device_get(self._sums(
          params, batches.inputs[0, m], batches.labels[0, m],
          batches.example_mask[0, m])), np.float64)
    hits, counted, loss, examples = totals
    return {self.accuracy_name: hits / max(counted, 1.0),
            'evaluation/loss': loss / max(examples, 1.0),
            'evaluation/num_examples': int(examples)}


def evaluate(model: Any, params: Any, test: client_arrays.ClientArrays,
             batch_size: int = 256) -> float:
  """Accuracy of `params` on every example of `test` (TFF's metric).

  Args:
    model: The model (its `correct`).
    params: The model's parameters.
    test: The evaluation examples, all clients pooled.
    batch_size: Examples per evaluated batch.

  Returns:
    The fraction of the counted targets predicted correctly (0 without
    any).
  """
  evaluation = Evaluation(model, test, batch_size=batch_size)
  return evaluation(params)[evaluation.accuracy_name]


def optimizer(spec: run_plan.OptimizerSpec) -> optimizers.Optimizer:
  """The JAX optimizer of `spec` (TFF's sgd, sgdm or adam).

  Args:
    spec: The optimizer's name, learning rate and momentum.

  Returns:
    The optimizer.
  """
  return optimizers.Optimizer(spec.name, spec.learning_rate,
                              momentum=spec.momentum)


def make_round_engine(plan: run_plan.RunPlan, model: Any,
                      local_training: str = 'auto'
                      ) -> round_engine.RoundEngine:
  """The round of `plan` on `model`, compiled as the backend runs it fastest.

  Args:
    plan: the run.
    model: its model (its `loss`).
    local_training: `round_engine.RoundEngine`'s strategy ('auto': the
      platform's).

  Returns:
    The engine.
  """
  return round_engine.RoundEngine(model.loss, optimizer(plan.client_optimizer),
                                  optimizer(plan.server_optimizer), plan.dp,
                                  canary_clip=plan.spec.canary_clip,
                                  local_training=local_training)


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
    plan: The run (its canary spec must not be None).
    store: The run's checkpoints (as `train`'s).
    observer: Told of the run's rounds (as `train`'s), or None.
    noise_rows: The run's correlated noise (as `train`'s), or None.
    decorrelation: With correlated noise, its decorrelated statistic
      (`Decorrelation`; the all-iterates statistic must be 'aggregate'), or
      None.
    data_canaries: With data canaries (`plan.data_canaries`), every
      tracked data canary's examples, seen ones first
      (`data.canary_examples.canary_arrays` of `DataCanaryPlan.tracked_ids`):
      the seen ones train as clients after the real ones, all are scored.
  """
  plan: run_plan.RunPlan
  store: checkpoints.TrainingStateCheckpoints
  observer: round_record.RoundObserver | None = None
  noise_rows: Callable[[int, int], Iterator[jax.Array]] | None = None
  decorrelation: Decorrelation | None = None
  data_canaries: client_arrays.ClientArrays | None = None


def train(plan: run_plan.RunPlan, model: Any,
          train_data: client_arrays.ClientArrays,
          test_data: client_arrays.ClientArrays | None,
          store: checkpoints.TrainingStateCheckpoints,
          observer: round_record.RoundObserver | None = None, *,
          local_training: str = 'auto',
          stats: run_stats.RunStats | None = None,
          resident_data: bool = True,
          noise_rows: Callable[[int, int], Iterator[jax.Array]] | None = None,
          decorrelation: Decorrelation | None = None,
          accuracy_metric: str = 'accuracy',
          data_canaries: client_arrays.ClientArrays | None = None
          ) -> canary_spec.CanaryOutcome:
  """Trains (or resumes from `store`'s newest checkpoint); returns the outcome.

  Args:
    plan: The run (its canary spec must not be None).
    model: A `models.EmnistCnn` or `models.WordLstm` (loss, init, correct).
    train_data: The training clients (the sampler's indices).
    test_data: The evaluation examples (all clients pooled), or None.
    store: The run's checkpoints: written after round 0 (the initial state),
      every `RunPlan.rounds_per_checkpoint` rounds and after the last round,
      and on Ctrl-C or SIGTERM after the last round recorded.
    observer: Told of every round trained now (`on_round`), of the rounds'
      canary cosines as their block is scored (`on_cosines`), and of each
      checkpoint before it is saved (`on_checkpoint`; `round_record` says
      which cosines precede it).
    local_training: `round_engine.RoundEngine`'s strategy ('auto': the
      platform's, `round_engine.default_local_training`).
    stats: If given, gathers the run's `run_stats.RunStats`.
    resident_data: With 'vmap' local training, put `train_data` on the
      device once and send each round only its examples' rows (same
      results as host-fed batches); False: send every round's batches.
    noise_rows: None for DP-FedAvg's independent noise; else (d, first
      round) -> the rounds' rows of correlated noise from that round on
      (`correlated_noise.NoiseStream.rows`), each replacing a round's draw.
    decorrelation: With `noise_rows`, the decorrelated all-iterates
      statistic to end with (`Decorrelation`), or None.
    accuracy_metric: The name of the model's accuracy in the evaluated
      rounds' metrics (the task entry's `accuracy_metric`, TFF's name).
    data_canaries: With data canaries, their examples (`ProgramRun`).

  Returns:
    The run's outcome: its cosines of both threat models, maxima, final
    accuracy and, with `decorrelation`, the decorrelated scores; with data
    canaries, their losses.
  """
  return train_program([ProgramRun(plan, store, observer, noise_rows,
                                   decorrelation, data_canaries)], model,
                       train_data, test_data, local_training=local_training,
                       stats=stats, resident_data=resident_data,
                       accuracy_metric=accuracy_metric)[0]


def train_program(runs: Sequence[ProgramRun], model: Any,
                  train_data: client_arrays.ClientArrays,
                  test_data: client_arrays.ClientArrays | None, *,
                  local_training: str = 'auto',
                  stats: run_stats.RunStats | None = None,
                  resident_data: bool = True,
                  accuracy_metric: str = 'accuracy'
                  ) -> list[canary_spec.CanaryOutcome]:
  """Trains (or resumes) R runs as one program; each run's outcome.

  One run is `train`. Several (R > 1) share the model, the data and every
  shape, and differ in their seeds, canaries, noise multiplier and canary
  schedule: each round of all R is one call of
  `round_engine.RoundEngine.run_rounds` (a run axis with 'vmap' local
  training, the runs in turn with 'loop'), and each run keeps its own
  checkpoints, observer and outcome, as if trained alone (up to float
  rounding). Runs resumed from different rounds start together from the
  earliest; a run sits out the rounds before its own (its state is kept,
  nothing is reported).

  Args:
    runs: The runs (`ProgramRun`); their plans must have the same rounds,
      DP aggregation but for the noise multiplier, optimizers and batches.
    model: As `train`'s.
    train_data: As `train`'s.
    test_data: As `train`'s.
    local_training: As `train`'s, for the runs' clients and the run axis.
    stats: As `train`'s, for the whole program.
    resident_data: As `train`'s.
    accuracy_metric: As `train`'s.

  Returns:
    Each run's outcome, in order.

  Raises:
    ValueError: the runs' plans differ in rounds.
    KeyboardInterrupt: Ctrl-C or SIGTERM (under
      `interrupts.stop_on_signals`), once each run's state after its last
      recorded round is saved.
  """
  stats = run_stats.RunStats() if stats is None else stats
  compile_start = run_stats.CompileClock.start()
  program = len(runs) > 1
  if len({run.plan.total_rounds for run in runs}) > 1:
    raise ValueError('runs of one program must have the same rounds; got '
                     f'{[run.plan.total_rounds for run in runs]}.')
  with_canaries = [run for run in runs if run.data_canaries is not None]
  if with_canaries:
    if program:
      raise ValueError('data canaries train as clients of their own run: '
                       'train such a run alone, not in a program.')
    train_data = canary_examples.append_clients(
        train_data, canary_examples.select_clients(
            runs[0].data_canaries, runs[0].plan.data_canaries.num_seen))
  engine = make_round_engine(runs[0].plan, model, local_training)
  evaluation = (None if test_data is None else
                Evaluation(model, test_data, accuracy_metric))
  loops = [run_loop.RunLoop(run.plan, run.store, engine, model, train_data,
                            observer=run.observer, noise_rows=run.noise_rows,
                            decorrelate=run.decorrelation is not None,
                            evaluate=evaluation,
                            score_canaries=(
                                None if run.data_canaries is None else
                                canary_losses(model, run.data_canaries)))
           for run in runs]
  if engine.local_training == 'vmap':
    # One layout for every round of every run: one compile.
    layout = packing.run_layout(
        [e for loop in loops for e in loop.round_examples(train_data)],
        runs[0].plan.batch_size, lane_multiple=engine.num_devices)
    engine.set_micro_batch(layout.micro_batch)
    engine.fix_layout(layout.lanes, layout.lane_length)
  total_rounds = runs[0].plan.total_rounds
  first = min(loop.resumed_from for loop in loops)
  canary_slots = max(loop.canary_slots for loop in loops)
  resident = resident_data and engine.local_training == 'vmap'
  if resident:
    engine.upload(train_data)
  stats.resident_bytes = engine.resident_bytes
  # Bytes of one example's model inputs and labels.
  example_bytes = sum(
      int(a.nbytes) // max(a.shape[0], 1) for a in client_arrays.model_inputs(
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
      run_stats.count_round(stats, engine, batches, example_bytes)
      evaluated = [loop.evaluation(t, result[1]) if is_active else None
                   for loop, is_active, result in zip(loops, active, results)]
      with interrupts.deferred():  # Every run records the whole round.
        for loop, is_active, result, metrics in zip(loops, active, results,
                                                    evaluated):
          if is_active:
            loop.record(t, *result, seconds, metrics)
  except KeyboardInterrupt:
    with interrupts.deferred():
      for loop in loops:
        loop.save_last_recorded()
    raise
  finally:
    prefetch.shutdown(cancel_futures=True)
  stats.compiles = engine.compiles
  stats.compile_seconds = run_stats.CompileClock.total - compile_start
  return [_outcome(run, loop, evaluation)
          for run, loop in zip(runs, loops)]


def canary_losses(model: Any, canaries: client_arrays.ClientArrays
                  ) -> Callable[[Any], np.ndarray]:
  """Scores data canaries: parameters -> each canary's mean loss.

  Every canary holds the same number of examples (`canary_examples`), so
  their examples sit on the device once as [canaries, examples, ...] and
  one compiled call maps the model's loss (no dropout) over the canaries
  in turn (`lax.map`: one canary's forward pass at a time, no vmapped
  convolutions).

  Args:
    model: The model (its `loss`).
    canaries: The canaries, one client each (`data.canary_examples`).

  Returns:
    params -> float64 [canaries], each canary's mean loss over its
    examples.

  Raises:
    ValueError: the canaries hold different numbers of examples.
  """
  examples = canary_examples.examples_per_canary(canaries)
  count = canaries.num_clients
  inputs, labels = client_arrays.model_inputs(canaries.kind, {
      name: np.asarray(array) for name, array in canaries.features.items()})
  inputs = jnp.asarray(inputs.reshape((count, examples, *inputs.shape[1:])))
  labels = jnp.asarray(labels.reshape((count, examples, *labels.shape[1:])))
  mask = jnp.ones(examples, jnp.float32)

  @jax.jit
  def losses(params: Any) -> jax.Array:
    return jax.lax.map(lambda pair: model.loss(params, *pair, mask),
                       (inputs, labels))

  return lambda params: np.asarray(losses(params), np.float64)


def _outcome(run: ProgramRun, loop: run_loop.RunLoop,
             evaluation: Evaluation | None) -> canary_spec.CanaryOutcome:
  """The outcome of a trained run: cosines, accuracy, decorrelated scores
  and the data canaries' final losses and largest loss drops."""
  if evaluation is None:
    accuracy = float('nan')
  else:
    # The last round's evaluation, if it was evaluated (the same model).
    metrics = loop.evaluated.get(run.plan.total_rounds) or evaluation(
        loop.state.params)
    accuracy = float(metrics[evaluation.accuracy_name])
  outcome = loop.outcome(accuracy)
  if run.data_canaries is not None:
    seen = run.plan.data_canaries.num_seen
    losses = loop.drops.last
    seen_drops, unseen_drops = loop.drops.split(seen)
    outcome = outcome._replace(
        data_seen_losses=losses[:seen], data_unseen_losses=losses[seen:],
        data_seen_drops=seen_drops, data_unseen_drops=unseen_drops)
  if run.decorrelation is None:
    return outcome
  spec = run.plan.spec
  seen, unseen = decorrelation.matched_filter_scores(
      loop.projections, run.decorrelation.strategy, spec.schedule,
      spec.num_seen, run.decorrelation.noise_std)
  return outcome._replace(decorrelated_seen=seen, decorrelated_unseen=unseen)

