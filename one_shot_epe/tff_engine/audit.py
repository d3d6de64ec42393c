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
3. one call at the end, `report()` (`write_results(run_dir)` also writes
   the launcher's result files), giving both threat models (Algorithm 2:
   cosines with theta_T - theta_0; Algorithm 3: max-over-rounds cosines of seen
   vs unseen canaries) and the references as a `run_report.RunReport`: the
   canary's analytical eps, a real client's eps over the rounds observed
   (the aggregator's own DpEvent, composed with dp_accounting) and the
   last-iterate heuristic; under another mechanism (`mechanisms`: DP-FTRL's
   tree aggregation, distributed DP) the mechanism's own.

The audit builds (the factories), observes (`canary_observer`, and
`audit_state_manager` for TFF's loops) and reports
(`reporting.run_report.build_run_report`, the builder every engine uses).

Example (examples/canaries_in_fedavg.py runs it whole on a tiny model):

  canary_audit = CanaryAudit(num_canaries=1000, rounds=T,
                             clients_per_round=100, delta=1e-6)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn, server_optimizer_fn,
      model_aggregator=canary_audit.gaussian_adaptive(noise_multiplier=0.5))
  tff.simulation.run_training_process(
      process, selection_fn, T,
      program_state_manager=canary_audit.program_state_manager())
  print(canary_audit.report().to_markdown())
"""

import os
import warnings
from collections.abc import Sequence
from typing import Any

from one_shot_epe.tff_engine import quiet

# A script that imports the audit first gets no TensorFlow start-up noise.
quiet.quiet_tensorflow_import()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dataclasses
import dp_accounting
import numpy as np
import tensorflow_federated as tff

from one_shot_epe import validation
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import audit_checks
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import round_record
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import audit_state_manager
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.tff_engine import canary_observer
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import distributed_dp_aggregator
from one_shot_epe.tff_engine import support

__all__ = ['CanaryAudit']


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
  schedule = canary_schedules.periodic_canary_schedule(
      num_canaries, rounds, repetitions, canary_seed)
  spec = canary_spec.CanarySpec(
      seed=canary_seed, num_seen=num_canaries,
      num_unseen=(num_canaries if num_unseen_canaries is None else
                  num_unseen_canaries),
      schedule=schedule.as_round_lists(),
      canary_clip='project' if canary_clip is None else canary_clip,
      repetitions=repetitions)
  return spec, canary_schedules.expected_cohort(
      clients_per_round, num_canaries, repetitions, rounds)


@dataclasses.dataclass(frozen=True)
class _Planned:
  """A mechanism and canaries, as the engine's `supports(plan)` reads them."""
  mechanism: mechanisms.Mechanism
  spec: canary_spec.CanarySpec


class CanaryAudit:
  """The canaries of one training run, from aggregation factory to report.

  One audit audits one DP aggregation under one mechanism: the `dp` and
  `mechanism` given to `from_spec`, or those its first factory method
  (`gaussian_fixed`, `gaussian_adaptive`, `tree_aggregation`) builds; a
  factory method asking for another raises, so `report()` never depends on
  which one ran first.

  Example (a tiny Keras model: `examples/canaries_in_fedavg.py`):

    canary_audit = CanaryAudit(num_canaries=20, rounds=5,
                               clients_per_round=4, delta=1e-5)
    aggregator = canary_audit.gaussian_adaptive(noise_multiplier=0.5)
    # A tff.learning process with model_aggregator=aggregator; observe its
    # states (or hand TFF's loop canary_audit.program_state_manager()).
    report = canary_audit.report()

  Attributes:
    spec: The canary plan (`canary_spec.CanarySpec`): seed, seen and unseen
      counts, schedule and statistics.
    expected_cohort: The expected records per round, canaries included: the
      DP average's denominator and the adaptive clip's expected count.
    mechanism: The audited mechanism (`mechanisms`); None before a factory
      method chose it.
  """

  @validation.arguments('delta')
  def __init__(self, *, delta: float, num_canaries: int | None = None,
               rounds: int | None = None,
               clients_per_round: float | None = None,
               num_unseen_canaries: int | None = None,
               repetitions: int | None = None, canary_seed: int | None = None,
               canary_clip: str | None = None, noise_seed: int | None = None,
               client_participation: dp_fedavg.Participation | None = None,
               spec: canary_spec.CanarySpec | None = None,
               dp: canary_spec.DPAggregation | None = None,
               mechanism: mechanisms.Mechanism | None = None,
               device: str = '/CPU:0'):
    """Plans the canaries of a run of `rounds` rounds, or takes a plan.

    Give either the plan's arguments (`num_canaries`, `rounds`,
    `clients_per_round` and optionally `num_unseen_canaries`,
    `repetitions`, `canary_seed`, `canary_clip`) or a plan made elsewhere
    (`spec` and `dp`, as `from_spec` does).

    Args:
      delta: The delta of every epsilon of the report, in (0, 1).
      num_canaries: k >= 2 seen canaries, inserted `repetitions` times each
        (a Gaussian is fitted to their statistics).
      rounds: T, the number of training rounds.
      clients_per_round: The expected number of real clients per round; the
        expected canaries per round, k r / T, are added to it.
      num_unseen_canaries: m canaries tracked but never inserted (default
        k): 0, or >= 2 for the all-iterates report.
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
      mechanism: With `dp`: the mechanism `aggregator()` builds
        (`mechanisms.Gaussian`, the default; `mechanisms.DistributedDP` or
        `mechanisms.TreeAggregation`, each with a fixed clip).
      device: TF device of the cosine tracking (`accelerators`).

    Raises:
      TypeError: if both or neither of the plan's arguments and (`spec`,
        `dp`) are given, or `spec`, `dp` or `mechanism` has the wrong type.
      ValueError: before any work, if an argument is out of range (fewer
        than 2 seen canaries, 1 unseen), canaries would be over half of a
        round's expected participants
        (`canary_schedules.check_canary_share`), the rounds or canaries
        cannot fit this machine (`run_size.check`), the TFF engine does
        not run `mechanism` (`support.supports`), or `mechanism` needs a
        fixed clip that `dp` lacks.
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
      if mechanism is not None:
        raise TypeError('mechanism goes with spec and dp; otherwise the '
                        'factory method called chooses it.')
      audit_checks.check_audit(rounds, num_canaries,
                               num_canaries if num_unseen_canaries is None
                               else num_unseen_canaries)
      spec, expected_cohort = _plan(**plan)
      audit_checks.check_share(num_canaries, clients_per_round,
                               expected_cohort)
      share = canary_schedules.canary_share_warning(clients_per_round,
                                                     expected_cohort)
      if share is not None:  # The caller's line: past the argument check.
        warnings.warn(share, stacklevel=3)
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
      for name in ('num_seen', 'num_unseen'):
        canary_spec.AUDITED_CANARIES[name](f'spec.{name}',
                                           getattr(spec, name))
      mechanism = mechanisms.Gaussian() if mechanism is None else mechanism
      if not isinstance(mechanism, mechanisms.MECHANISMS):
        raise TypeError(f'mechanism must be one of the mechanisms of '
                        f'accounting.mechanisms; got {mechanism!r}.')
      answer = support.supports(_Planned(mechanism, spec))
      if not answer:
        raise ValueError(f'mechanism={mechanism!r}: the TFF engine does not '
                         f'run it: {answer.reason}.')
      mechanisms.check_clip(mechanism, dp.adaptive)
      expected_cohort = dp.clients_per_round
    self.spec = spec
    self.expected_cohort = expected_cohort
    self.mechanism = mechanism
    self._delta = delta
    self._noise_seed = noise_seed
    self._client_participation = client_participation
    # The audited aggregation: None before the first factory.
    self._dp: canary_spec.DPAggregation | None = dp
    self._observer = canary_observer.CanaryObserver(spec, device)

  @classmethod
  def from_spec(cls, spec: canary_spec.CanarySpec,
                dp: canary_spec.DPAggregation, *, delta: float,
                noise_seed: int | None = None,
                client_participation: dp_fedavg.Participation | None = None,
                mechanism: mechanisms.Mechanism | None = None,
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
      mechanism: As for the constructor.
      device: TF device of the cosine tracking (`accelerators`).

    Returns:
      The audit.

    Raises:
      TypeError: if `spec`, `dp` or `mechanism` has the wrong type.
      ValueError: if `delta` is not in (0, 1).
    """
    return cls(spec=spec, dp=dp, delta=delta, noise_seed=noise_seed,
               client_participation=client_participation,
               mechanism=mechanism, device=device)

  # -- 1. The aggregation factory. --------------------------------------------

  def _record(self, dp: canary_spec.DPAggregation,
              mechanism: mechanisms.Mechanism) -> None:
    """Records the factory's aggregation; one per audit."""
    if self._dp is not None and (self._dp, self.mechanism) != (dp, mechanism):
      raise ValueError(f'this audit audits {self._dp} under {self.mechanism}; '
                       f'one audit audits one aggregation, not also {dp} '
                       f'under {mechanism}.')
    self._dp, self.mechanism = dp, mechanism

  def aggregator(
      self, record_specs: Any = None
  ) -> (canary_aggregator.CanaryDPFactory |
        distributed_dp_aggregator.CanaryDistributedDPFactory):
    """The factory of the `dp` and `mechanism` given to `from_spec`.

    Args:
      record_specs: Under tree aggregation: the `tf.TensorSpec`s of the
        aggregated value (the model's trainable weights); ignored otherwise.

    Returns:
      `canary_aggregator.CanaryDPFactory.from_spec(dp, spec, noise_seed)`;
      under distributed DP `distributed_dp_aggregator`'s factory (the noise
      seed seeds the rotations); under tree aggregation the tree's.

    Raises:
      ValueError: if the audit was not built from a `dp`, or tree
        aggregation is asked for without `record_specs`.
    """
    if self._dp is None:
      raise ValueError('aggregator() needs the audit of from_spec(spec, dp); '
                       'otherwise call gaussian_fixed/gaussian_adaptive.')
    mechanism = self.mechanism
    if isinstance(mechanism, mechanisms.TreeAggregation):
      if record_specs is None:
        raise ValueError('aggregator() of tree aggregation needs '
                         'record_specs, the aggregated value\'s specs.')
      return canary_aggregator.CanaryDPFactory.tree_aggregation(
          noise_multiplier=float(self._dp.noise_multiplier),
          clients_per_round=self.expected_cohort,
          l2_norm_clip=float(self._dp.clip), record_specs=record_specs,
          spec=self.spec, noise_seed=self._noise_seed,
          use_efficient=mechanism.efficient)
    if isinstance(mechanism, mechanisms.DistributedDP):
      return distributed_dp_aggregator.CanaryDistributedDPFactory(
          self._dp, mechanism.params, self.spec, self._noise_seed)
    return canary_aggregator.CanaryDPFactory.from_spec(
        self._dp, self.spec, self._noise_seed)

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
    self._record(factory.dp, mechanisms.Gaussian())
    return factory

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
    self._record(factory.dp, mechanisms.Gaussian())
    return factory

  def tree_aggregation(
      self, *, noise_multiplier: float, l2_norm_clip: float,
      record_specs: Any, use_efficient: bool = True,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FTRL's tree aggregation (TFF's `tree_aggregation`), canaries in.

    One tree over every round, never restarted; `report()` then takes the
    tree's references (`mechanisms.TreeAggregation`).

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
    self._record(
        canary_spec.DPAggregation(noise_multiplier=float(noise_multiplier),
                                  clients_per_round=self.expected_cohort,
                                  clip=float(l2_norm_clip)),
        mechanisms.TreeAggregation(efficient=use_efficient))
    return factory

  def dp_event(self, learning_state: Any) -> dp_accounting.DpEvent:
    """The DpEvent of the round that produced `learning_state`.

    Args:
      learning_state: The state of a process built with this audit's factory.

    Returns:
      The event the aggregator recorded
      (`aggregator_state.extract_dp_event_from_state`).
    """
    return aggregator_state.extract_dp_event_from_state(
        learning_state.aggregator)

  # -- 2. One call per round (`canary_observer.CanaryObserver`). ---------------

  def observe(self,
              learning_state: Any) -> list[round_record.CanaryCosines]:
    """Records a learning state: the initial one first, then every round's.

    Args:
      learning_state: The state of a `tff.learning` process built with this
        audit's factory: `process.initialize()`, then each `next(...).state`.

    Returns:
      Per-round cosine summaries of the rounds computed by this call
      (`canary_observer.CanaryObserver.observe`).

    Raises:
      ValueError: if a round is skipped or repeated, or the initial state was
        not observed first.
    """
    return self._observer.observe(learning_state)

  def flush(self) -> list[round_record.CanaryCosines]:
    """Processes the buffered rounds now (`CanaryObserver.flush`).

    Returns:
      The summaries of the rounds processed.
    """
    return self._observer.flush()

  def state(self) -> dict[str, np.ndarray]:
    """Everything needed to resume the audit (`CanaryObserver.state`).

    Returns:
      numpy arrays that join a checkpoint.
    """
    return self._observer.state()

  def empty_state(self, learning_state: Any) -> dict[str, np.ndarray]:
    """A `state()` template for `learning_state`'s model (to load).

    Args:
      learning_state: A state of the process (its model gives d).

    Returns:
      Zeros shaped as `state()`.
    """
    return self._observer.empty_state(learning_state)

  def restore(self, state: dict[str, Any], learning_state: Any) -> None:
    """Resumes from `state()` saved together with `learning_state`.

    Args:
      state: What `state()` returned (as loaded from a checkpoint).
      learning_state: The learning state saved with it.
    """
    self._observer.restore(state, learning_state)

  @validation.arguments('rounds_per_checkpoint',
                        final_round=validation.Optional(validation.Int(0)))
  def program_state_manager(
      self, inner: tff.program.ProgramStateManager | None = None,
      rounds_per_checkpoint: int = 1, final_round: int | None = None,
      release_managers: Sequence[tff.program.ReleaseManager] = ()
  ) -> tff.program.ProgramStateManager:
    """A program state manager that observes every state a TFF loop saves.

    For `tff.simulation.run_training_process` (with the default
    rounds_per_saving_program_state=1) or `tff.learning.programs.train_model`.

    Args:
      inner: A manager (e.g. `tff.program.FileProgramStateManager`) that
        round 0, every `rounds_per_checkpoint`-th round and `final_round` are
        saved to with the audit's state; a rerun resumes both. None saves
        nothing.
      rounds_per_checkpoint: Rounds between two saves to `inner`, >= 1.
      final_round: A round always saved, if given.
      release_managers: Receive each round's cosine summaries (seen/unseen
        mean and max; key: the 1-based round).

    Returns:
      The manager (`audit_state_manager.AuditingStateManager`).

    Raises:
      ValueError: if `rounds_per_checkpoint` < 1 or `final_round` < 0.
    """
    return audit_state_manager.AuditingStateManager(
        self, inner, rounds_per_checkpoint, final_round, release_managers)

  # -- 3. One call at the end. ------------------------------------------------

  def cosine_maxima(self) -> cosine_tracking.CosineMaxima:
    """Each canary's max-over-rounds cosine so far (Algorithm 3, l. 15-16).

    Returns:
      The seen and unseen canaries' maxima (`CanaryObserver.cosine_maxima`).
    """
    return self._observer.cosine_maxima()

  @property
  def rounds_observed(self) -> int:
    """Training rounds observed so far (0 before the first)."""
    return self._observer.rounds_observed

  def final_cosines(self, unseen: bool = False) -> np.ndarray:
    """Seen (or unseen) canaries' cosines with the model of the latest round.

    Args:
      unseen: Score the unseen canaries instead, whose cosines follow the
        null and serve the one-run certificates.

    Returns:
      float64 cosines, one per canary, in id order
      (`canary_observer.CanaryObserver.final_cosines`).

    Raises:
      ValueError: if no training round was observed yet.
    """
    return self._observer.final_cosines(unseen)

  def _results(self, alpha: float, accuracy: float | None,
               noise_multiplier: float | None
               ) -> tuple[canary_spec.CanaryOutcome, run_report.RunReport]:
    """The rounds observed' cosines and their report (`report`)."""
    maxima = self.cosine_maxima()
    if noise_multiplier is None and self._dp is None:
      raise ValueError('noise_multiplier is unknown: build the factory with '
                       "this audit's gaussian_fixed/gaussian_adaptive or pass "
                       'noise_multiplier.')
    if noise_multiplier is None:
      noise_multiplier = float(self._dp.noise_multiplier)
    spec = self.spec
    rounds = self.rounds_observed
    participation = self._client_participation
    if participation is not None:
      participation = dataclasses.replace(participation, rounds=rounds)
    mechanism = mechanisms.Gaussian() if self.mechanism is None else (
        self.mechanism)
    # The unseen canaries' final cosines serve the one-run bounds from two on.
    outcome = canary_spec.CanaryOutcome(
        final_cosines=self.final_cosines(),
        final_unseen_cosines=(self.final_cosines(unseen=True)
                              if spec.num_unseen >= 2 else np.zeros(0)),
        seen_maxima=maxima.seen, unseen_maxima=maxima.unseen,
        accuracy=float('nan') if accuracy is None else accuracy,
        dim=self._observer.dim, resumed_from_round=0, rounds_trained=rounds)
    facts = mechanisms.RunFacts(
        noise_multiplier=float(noise_multiplier), delta=self._delta,
        dim=self._observer.dim, canary_presentations=spec.repetitions,
        rounds=rounds, clip=None if self._dp is None else self._dp.clip,
        cohort=self.expected_cohort, participation=participation,
        presentation_counts=spec.presentation_counts(rounds),
        schedule=spec.schedule, round_event=self._observer.round_event)
    return outcome, run_report.build_run_report(
        outcome, facts, mechanism, alpha=alpha,
        setting={'num_canaries': spec.num_seen,
                 'num_unseen_canaries': spec.num_unseen,
                 'canary_repeats': spec.repetitions,
                 'rounds_observed': rounds,
                 'canary_clip': spec.canary_clip,
                 'expected_cohort': self.expected_cohort})

  def report(self, *, alpha: float = 0.05, accuracy: float | None = None,
             noise_multiplier: float | None = None) -> run_report.RunReport:
    """Both threat models' estimates and bounds for the rounds observed.

    The report of `reporting.run_report.build_run_report`, the builder of
    every engine, with the audited mechanism's references over the rounds
    observed.

    Args:
      alpha: 1 - confidence of epsilon_lo.
      accuracy: The final model's accuracy, if known, for the report.
      noise_multiplier: The noise multiplier to account with; defaults to
        that of the audited aggregation (`from_spec`'s `dp`,
        `gaussian_fixed`, `gaussian_adaptive`, `tree_aggregation`).

    Returns:
      The `run_report.RunReport`; under Gaussian noise a real client's
      accounted epsilon is composed from the aggregator's own DpEvents.

    Raises:
      ValueError: if no training round was observed yet, or the noise
        multiplier is unknown (no factory built).
    """
    return self._results(alpha, accuracy, noise_multiplier)[1]

  def write_results(self, run_dir: str, *, alpha: float = 0.05,
                    accuracy: float | None = None,
                    noise_multiplier: float | None = None
                    ) -> run_report.RunReport:
    """Writes the rounds observed' result files into `run_dir`, as a launcher.

    final_cosines.csv (and max_cosines.csv with unseen canaries), `report()`
    as report.json and report.md, and cosine_densities.png, each atomically
    and named as in `runtime.run_directory` (`reporting.run_files`).

    Args:
      run_dir: The directory to write into (created if missing).
      alpha: As for `report`.
      accuracy: As for `report`.
      noise_multiplier: As for `report`.

    Returns:
      The report written.

    Raises:
      ValueError: as `report`.
      OSError: a file cannot be written.
    """
    outcome, report = self._results(alpha, accuracy, noise_multiplier)
    os.makedirs(run_dir, exist_ok=True)
    run_files.write_results(
        run_dir, outcome, report,
        title=f'CanaryAudit, noise {report.noise_multiplier:g}, '
        f'{self.spec.repetitions} repetition(s)')
    return report
