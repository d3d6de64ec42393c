"""A whole DP-FedAvg run with canaries on TFF, resumable.

The TFF engine's counterpart of `jax_engine.training`: the `run_plan.RunPlan`
as DP-FedAvg (`tff.learning.algorithms.build_unweighted_fed_avg`) with the
canary aggregator, driven by `tff.simulation.run_training_process`, observed
by a `CanaryAudit` (Andrew et al., ICLR 2024, Algorithms 2 and 3) through its
program state manager, which also checkpoints the learning state and the
audit together (`checkpoints.ProgramStateCheckpoints`: temporary directory,
then rename). What the loop is given besides the process:

* each round's client datasets (`selection_fn`), shuffled under a TF seed
  that depends on (seed, round) only, so a resumed run trains on the same
  data as an uninterrupted one;
* the test-set evaluation (`evaluation_fn`, TFF's `build_fed_eval`);
* release managers that hand each round's compact metrics and canary
  cosines to a `round_record.RoundObserver` (`loop_managers`): the engine
  writes nothing but its checkpoints, each announced to the observer first
  (`on_checkpoint`).

A run without canaries (the accuracy baseline) uses TFF's own DP factory,
whose noise is unseeded, and the same checkpoints without the audit.

Ctrl-C or SIGTERM: a round's bookkeeping (its record, the audit's
observation, a checkpoint) finishes first (`interrupts.deferred`); then the
state after the last round observed is saved as a checkpoint, unless it is
one already, with the audit's buffered rounds unscored
(`AuditingStateManager.save_last_observed`), and the interrupt goes on.
"""

import asyncio
import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.runtime import round_record
from one_shot_epe.design import run_plan
from one_shot_epe.design import tasks as task_entries
from one_shot_epe.tff_engine import audit as audit_lib
from one_shot_epe.tff_engine import checkpoints
from one_shot_epe.tff_engine import canary_clients
from one_shot_epe.tff_engine import distributed_runtime
from one_shot_epe.tff_engine import loop_managers
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine import tff_workers

__all__ = ['evaluation_fn', 'event_loop', 'execution_context', 'optimizer',
           'plain_aggregator', 'selection_fn', 'train']

_TF_SEED_BITS = 2**31 - 1
def _round_seed(seed: int, round_num: int) -> int:
  """TF global seed for round `round_num`'s client datasets, pure in both."""
  return int(np.random.SeedSequence(seed, spawn_key=(round_num,))
             .generate_state(1)[0] & _TF_SEED_BITS)


def selection_fn(
    sampler: participation.ClientSampler,
    create_tf_dataset_for_client: Callable[[str], tf.data.Dataset],
    seed: int,
    canaries: Callable[[int], list[tf.data.Dataset]] | None = None
) -> Callable[[int], list[tf.data.Dataset]]:
  """Round `round_num`'s client datasets, with their shuffles seeded per round.

  The client preprocessing shuffles with TF's global seed; resetting it before
  each round makes the shuffle order depend on (seed, round) only, not on how
  many rounds this process has run (which differs after a resume).

  Args:
    sampler: Selects each round's clients (`participation`).
    create_tf_dataset_for_client: Maps a client id to its preprocessed data.
    seed: The run's seed.
    canaries: 0-based round -> the data canaries' datasets that join it
      (`canary_clients.round_datasets`), after the real clients'; None for
      none.

  Returns:
    round_num -> the round's client datasets.
  """
  select = participation.make_training_selection_fn(
      sampler, create_tf_dataset_for_client)

  def seeded_selection_fn(round_num: int) -> list[tf.data.Dataset]:
    tf.random.set_seed(_round_seed(seed, round_num))
    datasets = select(round_num)
    if canaries is not None:
      datasets = datasets + canaries(round_num - 1)
    return datasets

  return seeded_selection_fn


def evaluation_fn(
    task: tasks.Task, process: tff.learning.templates.LearningProcess
) -> Callable[[Any, Any], collections.OrderedDict[str, Any]]:
  """Test-set metrics of a training state, through TFF's `build_fed_eval`.

  The (bounded) test set is evaluated as one client; only this evaluation's
  metrics (`current_round_metrics`) are returned.

  Args:
    task: The task whose `model_fn` builds the evaluated model.
    process: The learning process whose states are evaluated.

  Returns:
    test_metrics(state, test_data) -> the metric name -> value mapping.
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
  """A fresh current asyncio loop (`run_training_process` runs on it).

  Yields:
    The new loop, closed (and unset) on exit.
  """
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

  Args:
    num_workers: Local C++ workers to start, >= 1 (ignored with
      `worker_addresses`).
    worker_addresses: Comma list of running workers' addresses
      (`tff_workers.parse_addresses`); '' for local workers.

  Yields:
    None, with the context installed as TFF's default.
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


def optimizer(
    spec: run_plan.OptimizerSpec) -> tff.learning.optimizers.Optimizer:
  """TFF's optimizer of `spec`: sgd, sgdm (with its momentum) or adam.

  Args:
    spec: The plan's optimizer: `name` in ('sgd', 'sgdm', 'adam'),
      `learning_rate` and (sgdm) `momentum`.

  Returns:
    The TFF optimizer.

  Raises:
    KeyError: `spec.name` is another name (`run_plan` admits only these).
  """
  builders = {
      'sgd': lambda: tff.learning.optimizers.build_sgdm(
          learning_rate=spec.learning_rate),
      'sgdm': lambda: tff.learning.optimizers.build_sgdm(
          learning_rate=spec.learning_rate, momentum=spec.momentum),
      'adam': lambda: tff.learning.optimizers.build_adam(
          learning_rate=spec.learning_rate),
  }
  return builders[spec.name]()


def plain_aggregator(
    dp: canary_spec.DPAggregation
) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's own DP factory for `dp` (runs without canaries; unseeded noise).

  Args:
    dp: The DP aggregation: fixed clip (`clip`) or adaptive clipping
      (`initial_clip`, `target_unclipped_quantile`, `clip_learning_rate`,
      `clipped_count_stddev`), with its noise multiplier and clients per round.

  Returns:
    `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed` or
    `gaussian_adaptive` of those values.
  """
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


def _audit(plan: run_plan.RunPlan, task: tasks.Task,
           device: str) -> audit_lib.CanaryAudit | None:
  """The run's audit; its tracker buffers <= the rounds between checkpoints."""
  if plan.spec is None:
    return None
  spec = plan.inserted_spec
  if spec.buffer_rounds is None:
    spec = dataclasses.replace(spec, buffer_rounds=spec.buffer_rounds_for(
        task.num_parameters,
        min(plan.rounds_per_checkpoint, plan.total_rounds)))
  return audit_lib.CanaryAudit.from_spec(
      spec, plan.dp, delta=plan.delta, noise_seed=plan.noise_seed,
      mechanism=plan.mechanism, device=device, canary_kind=plan.canary_kind)


def _trainable_specs(task: tasks.Task) -> list[tf.TensorSpec]:
  """The `tf.TensorSpec`s of the model's trainable weights.

  Tree aggregation's record specs, in the order tff.learning aggregates the
  weights.
  """
  with tf.Graph().as_default():
    model = task.model_fn()
    return [tf.TensorSpec(v.shape, v.dtype)
            for v in model.trainable_variables]


def train(plan: run_plan.RunPlan, task: tasks.Task,
          store: checkpoints.ProgramStateCheckpoints,
          observer: round_record.RoundObserver, *,
          device: str = '/CPU:0',
          canaries: client_arrays.ClientArrays | None = None
          ) -> canary_spec.CanaryOutcome:
  """Trains (or resumes from `store`'s newest checkpoint) the run of `plan`.

  Args:
    plan: The run; its client training settings are those `task` was built
      with.
    task: The model and the federated data (`tasks`).
    store: The run's checkpoints: round 0, every `plan.rounds_per_checkpoint`
      rounds and round T are saved, and on Ctrl-C or SIGTERM the last round
      observed.
    observer: Told of round 0's evaluation and every round trained now
      (`on_round`), of the rounds' canary cosines as the audit scores them
      (`on_cosines`), and of each checkpoint before it is saved
      (`on_checkpoint`; `round_record` says which cosines precede it).
    device: TF device of the canary tracking (`accelerators`).
    canaries: With data canaries (`plan.data_canaries`), every tracked data
      canary's examples, seen ones first: the seen ones join their rounds
      as clients, all are scored on the final model.

  Calls `tf.keras.utils.set_random_seed(plan.seed)` once the aggregator is
  built, before the model is. Call it inside `execution_context`.

  Returns:
    The run's `canary_spec.CanaryOutcome`; its cosine arrays are empty for a
    run without canaries; with data canaries it holds their losses.

  Raises:
    KeyboardInterrupt: Ctrl-C or SIGTERM (under
      `interrupts.stop_on_signals`), once the state after the last round
      observed is saved.
  """
  audit = _audit(plan, task, device)
  rounds = loop_managers.RoundReleases(observer)
  checkpoints_made = loop_managers.AnnouncedSaves(
      store.program_state_manager(), observer)
  if audit is None:
    aggregator = plain_aggregator(plan.dp)
    state_manager = loop_managers.ScheduledSaves(checkpoints_made,
                                    plan.rounds_per_checkpoint,
                                    plan.total_rounds)
  else:
    aggregator = audit.aggregator(
        _trainable_specs(task) if audit.needs_record_specs else None)
    state_manager = audit.program_state_manager(
        checkpoints_made, plan.rounds_per_checkpoint,
        final_round=plan.total_rounds,
        release_managers=[loop_managers.CosineReleases(observer)])
  # Python, numpy and TF global seeds, reset once the aggregator is built
  # (building it may draw from them) and before the model is.
  tf.keras.utils.set_random_seed(plan.seed)
  with event_loop():
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=optimizer(plan.client_optimizer),
        server_optimizer_fn=optimizer(plan.server_optimizer),
        model_aggregator=aggregator)
    evaluate = evaluation_fn(task, process)
    test_data = [task.test_dataset(plan.max_eval_examples)]
    resumed_from = store.latest() or 0
    joining = None
    if canaries is not None:
      # Every round's model scored on every data canary (all iterates).
      audit.track_data_canaries(canaries, task.model_fn, task.element_spec,
                                process.get_model_weights)
      seen = canary_examples.select_clients(canaries,
                                            plan.data_canaries.num_seen)
      joining = canary_clients.round_datasets(
          canary_clients.client_datasets(
              seen, task.element_spec, batch_size=plan.batch_size,
              epochs=plan.epochs, max_examples=plan.max_examples),
          plan.data_canaries.clients, plan.data_canaries.num_real_clients)
    try:
      state = tff.simulation.run_training_process(
          process,
          selection_fn(
              plan.sampler,
              task.preprocessed_train_data.create_tf_dataset_for_client,
              plan.seed, joining),
          plan.total_rounds,
          evaluation_fn=evaluate,
          evaluation_selection_fn=lambda round_num: test_data,
          rounds_per_evaluation=plan.rounds_per_evaluation,
          program_state_manager=loop_managers.ReportedRounds(
              state_manager, rounds),
          rounds_per_saving_program_state=1,
          metrics_managers=[rounds])
    except KeyboardInterrupt:
      state_manager.save_last_observed()  # On an event loop of its own.
      raise
    # The task's accuracy (its entry's): StackOverflow and Shakespeare count
    # in-vocabulary words only, as Reddi et al. (2020) report it.
    metric = task_entries.task_entry(task.name).tff.accuracy_metric
    accuracy = float(evaluate(state, test_data)[metric])
  empty = np.zeros(0)
  if audit is None:
    return canary_spec.CanaryOutcome(
        empty, empty, empty, empty, accuracy, task.num_parameters,
        resumed_from, rounds.rounds_trained)
  maxima = audit.cosine_maxima()
  outcome = canary_spec.CanaryOutcome(
      final_cosines=audit.final_cosines(),
      final_unseen_cosines=audit.final_cosines(unseen=True),
      seen_maxima=maxima.seen.astype(np.float64),
      unseen_maxima=maxima.unseen.astype(np.float64), accuracy=accuracy,
      dim=task.num_parameters, resumed_from_round=resumed_from,
      rounds_trained=rounds.rounds_trained)
  if canaries is None:
    return outcome
  # The final model's losses and the largest excess one-round drops, as tracked.
  drops = audit.data_canary_drops()
  seen = plan.data_canaries.num_seen
  seen_drops, unseen_drops = drops.split(seen)
  return outcome._replace(
      data_seen_losses=drops.last[:seen], data_unseen_losses=drops.last[seen:],
      data_seen_drops=seen_drops, data_unseen_drops=unseen_drops)
