"""Canaries in any `tff.learning` pipeline: one object from factory to report.

A `CanaryAudit` holds everything the method needs besides the user's model and
data (Andrew et al., ICLR 2024, Sections 3-4):

1. the canary schedule (every seen canary once in each of r equal periods,
   Sec. 5.2) and the DP aggregation factory that inserts the canaries
   (`gaussian_adaptive` / `gaussian_fixed`, TFF's argument names), with the DP
   average's denominator and the adaptive clip's expected record count
   including the expected canaries per round (canaries participate as clients
   do, Sec. 4);
2. one call per round, `observe(learning_state)`, or a
   `tff.program.ProgramStateManager` that calls it for TFF's own loops
   (`tff.simulation.run_training_process`, `tff.learning.programs.
   train_model`) and adds the audit's state to their checkpoints;
3. one call at the end, `report()`, giving both threat models (Algorithm 2:
   cosines with theta_T - theta_0; Algorithm 3: max-over-rounds cosines of seen
   vs unseen canaries) and the references as a `run_report.RunReport`: the
   canary's analytical eps, a real client's eps over the rounds observed
   (the aggregator's own DpEvent, composed with dp_accounting) and the
   last-iterate heuristic; under DP-FTRL's tree aggregation
   (`tree_aggregation`) the tree's own (`tree_accounting`).

Example (examples/canaries_in_fedavg.py runs it on a tiny model):

  audit = CanaryAudit(num_canaries=1000, rounds=T, clients_per_round=100,
                      delta=1e-6)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn, server_optimizer_fn,
      model_aggregator=audit.gaussian_adaptive(noise_multiplier=0.5))
  tff.simulation.run_training_process(
      process, selection_fn, T,
      program_state_manager=audit.program_state_manager())
  print(audit.report().to_markdown())
"""

import asyncio
import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from one_shot_epe.tff_engine import quiet

# A script that imports the audit first gets no TensorFlow start-up noise.
quiet.quiet_tensorflow_import()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.plan import canary_spec
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.plan import participation as participation_lib
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.report import run_report
from one_shot_epe.accounting import tree_aggregation
from one_shot_epe import validation
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import distributed_dp_aggregator
from one_shot_epe.tff_engine import final_model

__all__ = ['CanaryAudit']


def _flat_trainable(learning_state: Any) -> np.ndarray:
  """The global model's trainable weights as float32 [d] (tf.nest order)."""
  return np.concatenate([
      np.asarray(w, np.float32).reshape(-1)
      for w in tf.nest.flatten(learning_state.global_model_weights.trainable)
  ])


def _learning_state(program_state: Any) -> Any:
  """The learning state inside what a TFF loop saves.

  `run_training_process` saves the learning state itself; `train_model`
  saves a `ProgramState` whose `state` field holds it.
  """
  if hasattr(program_state, 'round_number') and hasattr(program_state,
                                                          'state'):
    return program_state.state
  return program_state


# The audited aggregation of `CanaryAudit.tree_aggregation`: its correlated
# noise has no per-round Gaussian event to account.
_TREE_AGGREGATION = 'tree aggregation'


def _plan(*, num_canaries: int, rounds: int, clients_per_round: float,
          num_unseen_canaries: int | None, repetitions: int | None,
          canary_seed: int | None, canary_clip: str | None
          ) -> tuple[canary_spec.CanarySpec, float]:
  """The canary plan of `CanaryAudit`'s arguments and its expected cohort.

  Every seen canary once in each of r equal periods (Sec. 5.2); the
  expected canaries per round, k r / T, join the cohort.
  """
  repetitions = 1 if repetitions is None else repetitions
  canary_seed = 0 if canary_seed is None else canary_seed
  schedule = participation_lib.periodic_canary_schedule(
      num_canaries, rounds, repetitions, canary_seed)
  spec = canary_spec.CanarySpec(
      seed=canary_seed, num_seen=num_canaries,
      num_unseen=(num_canaries if num_unseen_canaries is None else
                  num_unseen_canaries),
      schedule=schedule.as_round_lists(),
      canary_clip='project' if canary_clip is None else canary_clip,
      repetitions=repetitions)
  return spec, participation_lib.expected_cohort(
      clients_per_round, num_canaries, repetitions, rounds)


class CanaryAudit:
  """The canaries of one training run, from aggregation factory to report.

  One audit audits one DP aggregation: the `dp` given to `from_spec`, or the
  one its first factory method (`gaussian_fixed`, `gaussian_adaptive`,
  `tree_aggregation`) builds; a factory method asking for another raises, so
  `report()` never depends on which one ran first.

  Attributes:
    spec: The canary plan (`canary_spec.CanarySpec`): seed, seen and unseen
      counts, schedule and statistics.
    expected_cohort: The expected records per round, canaries included: the
      DP average's denominator and the adaptive clip's expected count.
  """

  def __init__(self, *, delta: float, num_canaries: int | None = None,
               rounds: int | None = None,
               clients_per_round: float | None = None,
               num_unseen_canaries: int | None = None,
               repetitions: int | None = None, canary_seed: int | None = None,
               canary_clip: str | None = None, noise_seed: int | None = None,
               client_participation: dp_fedavg.Participation | None = None,
               spec: canary_spec.CanarySpec | None = None,
               dp: canary_spec.DPAggregation | None = None,
               distributed: distributed_dp.DistributedDP | None = None,
               tree_aggregation: bool = False,
               device: str = '/CPU:0'):
    """Plans the canaries of a run of `rounds` rounds, or takes a plan.

    Give either the plan's arguments (`num_canaries`, `rounds`,
    `clients_per_round` and optionally `num_unseen_canaries`,
    `repetitions`, `canary_seed`, `canary_clip`) or a plan made elsewhere
    (`spec` and `dp`, as `from_spec` does).

    Args:
      delta: The delta of every epsilon of the report, in (0, 1).
      num_canaries: k >= 1 seen canaries, inserted `repetitions` times each.
      rounds: T, the number of training rounds.
      clients_per_round: The expected number of real clients per round; the
        expected canaries per round, k r / T, are added to it.
      num_unseen_canaries: m canaries tracked but never inserted (default k).
      repetitions: r, presentations of each seen canary, one per period of
        T / r rounds (Sec. 5.2; default 1).
      canary_seed: Canary j is a pure function of (canary_seed, j) (default
        0).
      canary_clip: 'project' (the paper, the default) or 'clip' (its
        published code); see `canary_spec.CanarySpec`.
      noise_seed: None for unpredictable DP noise (deployments); an int in
        [0, canary_spec.MAX_SEED] makes a simulation reproducible.
      client_participation: How real clients are sampled, for the report's
        accounted epsilon (`dp_fedavg.client_epsilon_of_event`, over the
        rounds observed); None accounts a client taking part in every round.
      spec: A canary plan made elsewhere, schedule and statistics included.
      dp: With `spec`: the run's DP aggregation; its `clients_per_round` is
        the expected cohort, canaries included.
      distributed: With `dp` (a fixed clip): audit distributed DP with
        secure aggregation instead of the server's Gaussian noise
        (`distributed_dp_aggregator.CanaryDistributedDPFactory`); None for
        the Gaussian mechanism.
      tree_aggregation: With `dp` (a fixed clip): audit DP-FTRL's tree
        aggregation at `dp`'s noise multiplier and clip instead
        (`aggregator(record_specs)` builds `tree_aggregation`'s factory).
      device: TF device of the cosine tracking (`accelerators`).

    Raises:
      TypeError: if both or neither of the plan's arguments and (`spec`,
        `dp`) are given, or `spec` or `dp` has the wrong type.
      ValueError: if an argument is out of range.
    """
    plan = dict(num_canaries=num_canaries, rounds=rounds,
                clients_per_round=clients_per_round,
                num_unseen_canaries=num_unseen_canaries,
                repetitions=repetitions, canary_seed=canary_seed,
                canary_clip=canary_clip)
    given = sorted(name for name, value in plan.items() if value is not None)
    if spec is None and dp is None:
      if num_canaries is None or rounds is None or clients_per_round is None:
        raise TypeError('CanaryAudit needs num_canaries, rounds and '
                        'clients_per_round (or spec and dp).')
      spec, expected_cohort = _plan(**plan)
    else:
      if given:
        raise TypeError(f'CanaryAudit takes spec and dp or the arguments of '
                        f'a plan, not both; got spec/dp and {given}.')
      if not isinstance(spec, canary_spec.CanarySpec):
        raise TypeError(f'spec must be a canary_spec.CanarySpec; got '
                        f'{spec!r}.')
      if not isinstance(dp, canary_spec.DPAggregation):
        raise TypeError(f'dp must be a canary_spec.DPAggregation; got '
                        f'{dp!r}.')
      expected_cohort = dp.clients_per_round
    self.spec = spec
    self.expected_cohort = expected_cohort
    self._delta = validation.check_probability('delta', delta)
    self._noise_seed = noise_seed
    self._client_participation = client_participation
    self._device = device
    # The audited aggregation: a DPAggregation, _TREE_AGGREGATION or None
    # before the first factory.
    self._aggregation: canary_spec.DPAggregation | str | None = dp
    if distributed is not None and not isinstance(
        distributed, distributed_dp.DistributedDP):
      raise TypeError(f'distributed must be a distributed_dp.DistributedDP; '
                      f'got {distributed!r}.')
    self._distributed = distributed
    # (noise multiplier, efficient estimator) of the audited tree
    # aggregation, once its factory is built.
    self._tree: tuple[float, bool] | None = None
    self._tree_dp: canary_spec.DPAggregation | None = None
    if tree_aggregation:
      if dp is None or dp.adaptive or distributed is not None:
        raise ValueError('tree_aggregation needs the dp of a fixed clip and '
                         'no distributed DP.')
      self._tree_dp, self._aggregation = dp, _TREE_AGGREGATION
    self._ddp_factory: (
        distributed_dp_aggregator.CanaryDistributedDPFactory | None) = None
    self._tracker: cosine_tracking.CosineTracker | None = None
    self._initial: np.ndarray | None = None
    self._latest: np.ndarray | None = None
    self._round_event: dp_accounting.DpEvent | None = None

  @classmethod
  def from_spec(cls, spec: canary_spec.CanarySpec,
                dp: canary_spec.DPAggregation, *, delta: float,
                noise_seed: int | None = None,
                client_participation: dp_fedavg.Participation | None = None,
                distributed: distributed_dp.DistributedDP | None = None,
                tree_aggregation: bool = False,
                device: str = '/CPU:0') -> 'CanaryAudit':
    """The audit of a run planned elsewhere (`tff_engine.training`).

    The same as `CanaryAudit(spec=spec, dp=dp, ...)`.

    Args:
      spec: The canary plan, schedule and statistics included.
      dp: The run's DP aggregation; its `clients_per_round` is the expected
        cohort, canaries included. `aggregator()` builds its factory.
      delta: The delta of every epsilon of the report, in (0, 1).
      noise_seed: As for the constructor.
      client_participation: As for the constructor.
      distributed: As for the constructor.
      tree_aggregation: As for the constructor.
      device: TF device of the cosine tracking (`accelerators`).

    Returns:
      The audit.

    Raises:
      TypeError: if `spec` or `dp` has the wrong type.
      ValueError: if `delta` is not in (0, 1).
    """
    return cls(spec=spec, dp=dp, delta=delta, noise_seed=noise_seed,
               client_participation=client_participation,
               distributed=distributed, tree_aggregation=tree_aggregation,
               device=device)

  # -- 1. The aggregation factory. --------------------------------------------

  def _record_aggregation(
      self, factory: canary_aggregator.CanaryDPFactory
  ) -> canary_aggregator.CanaryDPFactory:
    """Records the aggregation `factory` implements; one per audit."""
    aggregation = _TREE_AGGREGATION if factory.dp is None else factory.dp
    if self._aggregation is not None and self._aggregation != aggregation:
      raise ValueError(f'this audit audits {self._aggregation}; one audit '
                       f'audits one aggregation, not also {aggregation}.')
    self._aggregation = aggregation
    return factory

  def aggregator(
      self, record_specs: Any = None
  ) -> (canary_aggregator.CanaryDPFactory |
        distributed_dp_aggregator.CanaryDistributedDPFactory):
    """The factory of the `dp` given to `from_spec`, canaries inserted.

    Args:
      record_specs: With `tree_aggregation`: the `tf.TensorSpec`s of the
        aggregated value (the model's trainable weights); ignored otherwise.

    Returns:
      `canary_aggregator.CanaryDPFactory.from_spec(dp, spec, noise_seed)`,
      or with `distributed`, `distributed_dp_aggregator.
      CanaryDistributedDPFactory(dp, distributed, spec, noise_seed)` (the
      noise seed seeds the rotations), or with `tree_aggregation`, this audit's
      `tree_aggregation` at dp's noise multiplier and clip (the noise seed
      seeds the tree's noise).

    Raises:
      ValueError: if the audit was not built from a `dp`, or `distributed`
        is given with adaptive clipping, or `tree_aggregation` without
        `record_specs`.
    """
    if self._tree_dp is not None:
      if record_specs is None:
        raise ValueError('aggregator() of tree aggregation needs '
                         'record_specs, the aggregated value\'s specs.')
      return self.tree_aggregation(
          noise_multiplier=float(self._tree_dp.noise_multiplier),
          l2_norm_clip=float(self._tree_dp.clip), record_specs=record_specs)
    if not isinstance(self._aggregation, canary_spec.DPAggregation):
      raise ValueError('aggregator() needs the audit of from_spec(spec, dp); '
                       'otherwise call gaussian_fixed/gaussian_adaptive.')
    if self._distributed is not None:
      self._ddp_factory = (
          distributed_dp_aggregator.CanaryDistributedDPFactory(
              self._aggregation, self._distributed, self.spec,
              self._noise_seed))
      return self._ddp_factory
    return canary_aggregator.CanaryDPFactory.from_spec(
        self._aggregation, self.spec, self._noise_seed)

  def gaussian_fixed(
      self, *, noise_multiplier: float, clip: float,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with a fixed clip, canaries inserted.

    Args:
      noise_multiplier: z >= 0; the noise std is z S.
      clip: The clip S > 0.
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.gaussian_fixed`) over
      the expected cohort.

    Raises:
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, clip=clip, spec=self.spec,
        noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    return self._record_aggregation(factory)

  def gaussian_adaptive(
      self, *, noise_multiplier: float, initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5, learning_rate: float = 0.2,
      clipped_count_stddev: float | None = None,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with adaptive clipping (TFF's defaults).

    Args:
      noise_multiplier: z >= 0, the overall noise multiplier.
      initial_l2_norm_clip: S_0 > 0.
      target_unclipped_quantile: gamma in (0, 1).
      learning_rate: eta >= 0 of the geometric clip update.
      clipped_count_stddev: sigma_b of the unclipped count; None for TFF's
        default (`canary_spec.DPAggregation`).
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.gaussian_adaptive`)
      over the expected cohort.

    Raises:
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.gaussian_adaptive(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort,
        initial_l2_norm_clip=initial_l2_norm_clip,
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=learning_rate, clipped_count_stddev=clipped_count_stddev,
        spec=self.spec, noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    return self._record_aggregation(factory)

  def tree_aggregation(
      self, *, noise_multiplier: float, l2_norm_clip: float,
      record_specs: Any, use_efficient: bool = True,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FTRL's tree aggregation (TFF's `tree_aggregation`), canaries in.

    One tree over every round, never restarted. `report()` then takes its
    references from the tree (`tree_accounting`): the canary's analytical
    eps over every node it shifts, the final model's noised prefix sum and
    a real client's exact eps at its largest node shift.

    Args:
      noise_multiplier: Noise std per tree node over `l2_norm_clip`, >= 0.
      l2_norm_clip: The clip norm, > 0.
      record_specs: `tf.TensorSpec`s of the aggregated value.
      use_efficient: Whether to use the efficient tree estimator.
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.tree_aggregation`).

    Raises:
      TypeError: if `record_specs` or `use_efficient` has the wrong type.
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.tree_aggregation(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, l2_norm_clip=l2_norm_clip,
        record_specs=record_specs, spec=self.spec,
        noise_seed=self._noise_seed, use_efficient=use_efficient,
        record_aggregation_factory=record_aggregation_factory)
    tree = (float(noise_multiplier), use_efficient)
    if self._tree is not None and self._tree != tree:
      raise ValueError(f'this audit audits tree aggregation at (noise '
                       f'multiplier, efficient) = {self._tree}, not also '
                       f'{tree}.')
    factory = self._record_aggregation(factory)
    self._tree = tree
    return factory

  def dp_event(self, learning_state: Any) -> dp_accounting.DpEvent:
    """The DpEvent of the round that produced `learning_state`.

    Args:
      learning_state: The state of a process built with this audit's factory.

    Returns:
      The event the aggregator recorded
      (`canary_aggregator.extract_dp_event_from_state`).
    """
    return canary_aggregator.extract_dp_event_from_state(
        learning_state.aggregator)

  # -- 2. One call per round. -------------------------------------------------

  def _start(self, initial_weights: np.ndarray) -> None:
    self._initial = initial_weights
    self._latest = initial_weights
    self._tracker = cosine_tracking.CosineTracker(
        self.spec, initial_weights.size, device=self._device)

  def observe(self,
              learning_state: Any) -> list[round_record.CanaryCosines]:
    """Records a learning state: the initial one first, then every round's.

    Each round's cosines are taken with the spec's all-iterates statistic:
    the noised aggregate rho_bar_t the aggregator exported ('aggregate', the
    paper's Algorithm 3), or the model step theta_{t-1} - theta_t
    ('model_delta', its published code; the two differ under server
    momentum and, by float32 rounding, even without).

    Args:
      learning_state: The state of a `tff.learning` process built with this
        audit's factory: `process.initialize()`, then each `next(...).state`.

    Returns:
      Per-round cosine summaries of the rounds computed by this call (the
      tracker works in blocks of rounds; see `cosine_tracking`).

    Raises:
      ValueError: if a round is skipped or repeated, or the initial state was
        not observed first.
    """
    round_num = int(np.asarray(learning_state.aggregator.round_num))
    weights = _flat_trainable(learning_state)
    if round_num == 0:
      self._start(weights)
      return []
    if self._tracker is None:
      raise ValueError('observe the initial learning state (round 0) before '
                       f'round {round_num}.')
    aggregator = learning_state.aggregator
    if self.spec.all_iterates_statistic == 'model_delta':
      aggregator = aggregator._replace(aggregate=self._latest - weights)
    summaries = self._tracker.observe(aggregator)
    self._latest = weights
    self._round_event = self.dp_event(learning_state)
    return summaries

  def flush(self) -> list[round_record.CanaryCosines]:
    """Processes the buffered rounds now (before a checkpoint, say).

    Returns:
      The summaries of the rounds processed (none before the first round).
    """
    return [] if self._tracker is None else self._tracker.flush()

  def state(self) -> dict[str, np.ndarray]:
    """Everything needed to resume the audit (numpy; joins a checkpoint).

    Returns:
      The initial weights, the rounds observed, the cosine maxima and the
      pending (unprocessed) rounds' vectors.

    Raises:
      ValueError: if no learning state was observed yet.
    """
    if self._tracker is None:
      raise ValueError('the audit has observed no learning state yet.')
    tracker = self._tracker.state()
    return {'initial_weights': self._initial,
            'rounds_observed': np.int64(tracker.rounds_observed),
            'cosine_maxima': tracker.cosine_maxima,
            'pending': tracker.pending}

  def empty_state(self, learning_state: Any) -> dict[str, np.ndarray]:
    """A `state()` of the right structure for `learning_state` (to load).

    Args:
      learning_state: A state of the process (its model gives d).

    Returns:
      Zeros shaped as `state()` of a run of this model.
    """
    dim = _flat_trainable(learning_state).size
    tracked = self.spec.num_seen + self.spec.num_unseen
    return {'initial_weights': np.zeros([dim], np.float32),
            'rounds_observed': np.int64(0),
            'cosine_maxima': np.zeros([tracked], np.float32),
            'pending': np.zeros([0, dim], np.float32)}

  def restore(self, state: dict[str, Any], learning_state: Any) -> None:
    """Resumes from `state()` saved together with `learning_state`.

    Args:
      state: What `state()` returned (as loaded from a checkpoint).
      learning_state: The learning state saved with it.
    """
    initial = np.asarray(state['initial_weights'], np.float32)
    tracker_state = cosine_tracking.TrackerState(
        rounds_observed=int(state['rounds_observed']),
        cosine_maxima=np.asarray(state['cosine_maxima'], np.float32),
        pending=np.asarray(state['pending'], np.float32).reshape(
            -1, initial.size))
    self._initial = initial
    self._latest = _flat_trainable(learning_state)
    if tracker_state.rounds_observed > 0:
      self._round_event = self.dp_event(learning_state)
    self._tracker = cosine_tracking.CosineTracker(
        self.spec, initial.size, state=tracker_state, device=self._device)

  def program_state_manager(
      self, inner: tff.program.ProgramStateManager | None = None,
      rounds_per_checkpoint: int = 1, final_round: int | None = None,
      release_managers: Sequence[tff.program.ReleaseManager] = ()
  ) -> tff.program.ProgramStateManager:
    """A program state manager that observes every state a TFF loop saves.

    Give it to `tff.simulation.run_training_process` (with the default
    rounds_per_saving_program_state=1, so that every round is observed) or
    to `tff.learning.programs.train_model`.

    Args:
      inner: A manager (e.g. `tff.program.FileProgramStateManager`) that
        round 0, every `rounds_per_checkpoint`-th round and `final_round` are
        saved to, together with the audit's state (its buffered rounds
        processed first, so a checkpoint holds no buffer); a rerun resumes
        both. None saves nothing.
      rounds_per_checkpoint: Rounds between two saves to `inner`, >= 1.
      final_round: A round always saved, if given.
      release_managers: Each round's cosine summaries (seen/unseen mean and
        max; key: the 1-based round) are released to them as they are
        computed.

    Returns:
      The manager.

    Raises:
      ValueError: if `rounds_per_checkpoint` < 1 or `final_round` < 0.
    """
    return _AuditingStateManager(self, inner, rounds_per_checkpoint,
                                 final_round, release_managers)

  # -- 3. One call at the end. ------------------------------------------------

  def _check_observed(self) -> cosine_tracking.CosineTracker:
    if self._tracker is None or self._tracker.rounds_observed == 0:
      raise ValueError('the audit has observed no training round yet.')
    return self._tracker

  def cosine_maxima(self) -> cosine_tracking.CosineMaxima:
    """Each canary's max-over-rounds cosine so far (Algorithm 3, l. 15-16).

    Returns:
      The seen and unseen canaries' maxima.

    Raises:
      ValueError: if no training round was observed yet.
    """
    return self._check_observed().maxima()

  @property
  def rounds_observed(self) -> int:
    """Training rounds observed so far (0 before the first)."""
    return 0 if self._tracker is None else self._tracker.rounds_observed

  def final_cosines(self, unseen: bool = False) -> np.ndarray:
    """Seen (or unseen) canaries' cosines with the model of the latest round.

    Algorithm 2, line 11, with the spec's final-model statistic
    (`final_model`): theta_0 - theta_t ('delta', the default, in
    tff.learning's sign convention) or theta_t ('final').

    Args:
      unseen: Score the unseen canaries instead, whose cosines follow the
        null and serve the one-run certificates.

    Returns:
      float64 cosines, one per canary, in id order.

    Raises:
      ValueError: if no training round was observed yet.
    """
    self._check_observed()
    spec = self.spec
    ids = (canary_spec.unseen_ids(spec.num_unseen) if unseen else
           canary_spec.seen_ids(spec.num_seen))
    with tf.device(self._device):
      return final_model.final_model_cosines(
          self._latest, canary_seed=spec.seed, canary_ids=ids,
          initial_weights=self._initial,
          statistic=spec.final_model_statistic)

  def report(self, *, alpha: float = 0.05, accuracy: float | None = None,
             noise_multiplier: float | None = None) -> run_report.RunReport:
    """Both threat models' estimates and bounds for the rounds observed.

    Args:
      alpha: 1 - confidence of epsilon_lo.
      accuracy: The final model's accuracy, if known, for the report.
      noise_multiplier: The noise multiplier to account with; defaults to
        that of the audited aggregation (`from_spec`'s `dp`,
        `gaussian_fixed`, `gaussian_adaptive`, `tree_aggregation`).

    Returns:
      The `run_report.RunReport`; a real client's accounted epsilon is
      composed from the aggregator's own DpEvents when the audited
      aggregation is Gaussian. Under tree aggregation the references are
      the tree's over the rounds observed (`tree_accounting`: the
      canary's eps over every node it shifts, the final model's noised
      prefix sum, a real client's exact Gaussian eps at its largest node
      shift).

    Raises:
      ValueError: if no training round was observed yet, or the noise
        multiplier is unknown (no factory built).
    """
    tracker = self._check_observed()
    gaussian = isinstance(self._aggregation, canary_spec.DPAggregation)
    mechanism = {}
    if self._ddp_factory is not None:
      # Distributed DP: both epsilons are those of z_eff, the Gaussian of
      # the summed local variance after scaling (`distributed_dp`).
      calibration = self._ddp_factory.calibration(int(self._initial.size))
      if noise_multiplier is None:
        noise_multiplier = calibration.noise_multiplier
      mechanism = calibration.setting()
    if noise_multiplier is None and gaussian:
      noise_multiplier = float(self._aggregation.noise_multiplier)
    if noise_multiplier is None and self._tree is not None:
      noise_multiplier = self._tree[0]
    if noise_multiplier is None:
      raise ValueError('noise_multiplier is unknown: build the factory with '
                       "this audit's gaussian_fixed/gaussian_adaptive or pass "
                       'noise_multiplier.')
    spec = self.spec
    maxima = self.cosine_maxima()
    rounds = tracker.rounds_observed
    participation = self._client_participation
    if participation is not None:
      participation = dataclasses.replace(participation, rounds=rounds)
    if mechanism.get('ddp_noise') == 'skellam':
      # The Skellam RDP bound over the rounds a real client may join.
      joins = (participation.epochs if participation is not None and
               participation.sampling == 'shuffle' else rounds)
      mechanism['ddp_skellam_epsilon'] = distributed_dp.skellam_epsilon(
          self._ddp_factory.calibration(int(self._initial.size)),
          self._delta, joins)
    tree = None
    if self._tree is not None:
      tree = tree_aggregation.TreeAggregation.of_schedule(
          spec.schedule, rounds, efficient=self._tree[1])
      mechanism = {'mechanism': 'tree', 'tree_estimator': tree.estimator}
    return run_report.build_run_report(
        final_cosines=self.final_cosines(),
        final_unseen_cosines=(self.final_cosines(unseen=True)
                              if spec.num_unseen >= 2 else None),
        dim=int(self._initial.size),
        delta=self._delta, noise_multiplier=noise_multiplier,
        alpha=alpha, seen_maxima=maxima.seen, unseen_maxima=maxima.unseen,
        accuracy=accuracy, canary_presentations=spec.repetitions,
        rounds=rounds, participation=participation,
        presentation_counts=spec.presentation_counts(rounds),
        round_event=self._round_event if gaussian else None, tree=tree,
        setting={'num_canaries': spec.num_seen,
                 'num_unseen_canaries': spec.num_unseen,
                 'canary_repeats': spec.repetitions,
                 'rounds_observed': tracker.rounds_observed,
                 'canary_clip': spec.canary_clip,
                 'expected_cohort': self.expected_cohort, **mechanism})


class _AuditingStateManager(tff.program.ProgramStateManager):
  """Observes each saved program state; saves the audit beside it."""

  def __init__(self, audit: CanaryAudit,
               inner: tff.program.ProgramStateManager | None,
               rounds_per_checkpoint: int, final_round: int | None,
               release_managers: Sequence[tff.program.ReleaseManager]):
    self._audit = audit
    self._inner = inner
    self._every = validation.check_int('rounds_per_checkpoint',
                                       rounds_per_checkpoint, 1)
    self._final_round = (None if final_round is None else
                         validation.check_int('final_round', final_round, 0))
    self._release_managers = list(release_managers)

  async def get_versions(self) -> Sequence[int] | None:
    """The inner manager's versions (None without one: nothing to resume)."""
    if self._inner is None:
      return None
    return await self._inner.get_versions()

  async def load(self, version: int, structure: Any) -> Any:
    """Loads `version` from the inner manager and resumes the audit from it."""
    if self._inner is None:
      raise ValueError('nothing to load: the audit has no inner manager.')
    template = self._audit.empty_state(_learning_state(structure))
    saved = await self._inner.load(version, {'program': structure,
                                             'audit': template})
    self._audit.restore(saved['audit'], _learning_state(saved['program']))
    return saved['program']

  async def _release(
      self, summaries: Sequence[round_record.CanaryCosines]) -> None:
    for summary in summaries:
      values = collections.OrderedDict(
          seen_cosine_mean=summary.seen_mean, seen_cosine_max=summary.seen_max,
          unseen_cosine_mean=summary.unseen_mean,
          unseen_cosine_max=summary.unseen_max)
      await asyncio.gather(*(m.release(values, summary.round_num)
                             for m in self._release_managers))

  async def save(self, program_state: Any, version: int) -> None:
    """Observes the state of round `version`; checkpoints it when due."""
    await self._release(self._audit.observe(_learning_state(program_state)))
    due = run_directory.is_checkpoint_round(version, self._every,
                                            self._final_round)
    if self._inner is None or not due:
      return
    await self._release(self._audit.flush())
    await self._inner.save({'program': program_state,
                            'audit': self._audit.state()}, version)
