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

The audit plans (`audit_plan`), builds (the factories of
`audit_factories.AuditedAggregation`, which it is), observes
(`canary_observer`, and `audit_state_manager` for TFF's loops) and reports
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
import numpy as np
import tensorflow_federated as tff

from one_shot_epe import validation
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import loss_drops
from one_shot_epe.runtime import round_record
from one_shot_epe.tff_engine import audit_factories
from one_shot_epe.tff_engine import audit_plan
from one_shot_epe.tff_engine import audit_state_manager
from one_shot_epe.tff_engine import canary_clients
from one_shot_epe.tff_engine import canary_observer
from one_shot_epe.tff_engine import cosine_tracking

__all__ = ['CanaryAudit']


class CanaryAudit(audit_factories.AuditedAggregation):
  """The canaries of one training run, from aggregation factory to report.

  One audit audits one DP aggregation under one mechanism: the `dp` and
  `mechanism` given to `from_spec`, or those its first factory method
  (`gaussian_fixed`, `gaussian_adaptive`, `tree_aggregation`) builds; a
  factory method asking for another raises, so `report()` never depends on
  which one ran first (`audit_factories.AuditedAggregation`).

  Example (a tiny Keras model: `examples/canaries_in_fedavg.py`):

    canary_audit = CanaryAudit(num_canaries=20, rounds=5,
                               clients_per_round=4, delta=1e-5)
    aggregator = canary_audit.gaussian_adaptive(noise_multiplier=0.5)
    # A tff.learning process with model_aggregator=aggregator; observe its
    # states (or hand TFF's loop canary_audit.program_state_manager()).
    report = canary_audit.report()

  Attributes:
    spec: The gradient canaries the factories insert
      (`canary_spec.CanarySpec`): seed, seen and unseen counts, schedule
      (no rounds under canary_kind 'data') and statistics.
    schedule_spec: The canary plan whichever the kind: `spec` with the
      canaries' rounds (data canaries join the rounds gradient ones would).
    canary_kind: 'gradient', 'data' or 'both' (`design.canary_kinds`).
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
               device: str = '/CPU:0', canary_kind: str = 'gradient'):
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
      canary_kind: 'gradient' (the factories insert the canaries), 'data'
        (the canaries are clients of the caller's rounds, `canary_datasets`,
        scored by `score_data_canaries`; the factories insert nothing, so
        the server's aggregation is TFF's DP aggregation as it is) or
        'both' (`design.canary_kinds`); 'data' and 'both' need m >= 2
        unseen canaries.

    Raises:
      TypeError: if both or neither of the plan's arguments and (`spec`,
        `dp`) are given, or `spec`, `dp` or `mechanism` has the wrong type.
      ValueError: before any work, if an argument is out of range (fewer
        than 2 seen canaries, 1 unseen), canaries would be over half of a
        round's expected participants
        (`audit_checks.check_share`), the rounds or canaries
        cannot fit this machine (`run_size.check`), the TFF engine does
        not run `mechanism` (`support.supports`), or `mechanism` needs a
        fixed clip that `dp` lacks.
    """
    kinds = [kind.name for kind in canary_kinds.kinds_of(canary_kind)]
    plan = dict(num_canaries=num_canaries, rounds=rounds,
                clients_per_round=clients_per_round,
                num_unseen_canaries=num_unseen_canaries,
                repetitions=repetitions, canary_seed=canary_seed,
                canary_clip=canary_clip)
    if spec is None and dp is None:
      spec, expected_cohort, share = audit_plan.plan(mechanism=mechanism,
                                                     **plan)
      if share is not None:  # The caller's line: past the argument check.
        warnings.warn(share, stacklevel=3)
    else:
      mechanism = audit_plan.check_plan(
          spec, dp, mechanism,
          sorted(name for name, value in plan.items() if value is not None))
      expected_cohort = dp.clients_per_round
    if 'data' in kinds and spec.num_unseen < 2:
      raise ValueError(f'canary_kind={canary_kind!r} needs '
                       'num_unseen_canaries >= 2 (data canaries are scored '
                       f'against unseen ones); got {spec.num_unseen}.')
    if canary_kind == 'both' and dp is None:
      # A data canary client joins each round a gradient canary does.
      expected_cohort += spec.num_seen * spec.repetitions / len(spec.schedule)
    self.canary_kind = canary_kind
    self._data = 'data' in kinds
    # Whichever kind: the canaries' rounds, for the report's references.
    self.schedule_spec = spec
    if 'gradient' not in kinds:
      spec = dataclasses.replace(spec, schedule=[()] * len(spec.schedule))
    self._losses: tuple[np.ndarray, np.ndarray] | None = None
    # With data canaries scored every round (`track_data_canaries`).
    self._scorer: canary_clients.LossScorer | None = None
    self._weights_of: Any = None
    self._drops: loss_drops.LossDrops | None = None
    # The audited aggregation (`dp`): None before the first factory.
    super().__init__(spec, expected_cohort, dp, mechanism, noise_seed)
    self._delta = delta
    self._client_participation = client_participation
    self._observer = canary_observer.CanaryObserver(spec, device)

  @classmethod
  def from_spec(cls, spec: canary_spec.CanarySpec,
                dp: canary_spec.DPAggregation, *, delta: float,
                noise_seed: int | None = None,
                client_participation: dp_fedavg.Participation | None = None,
                mechanism: mechanisms.Mechanism | None = None,
                device: str = '/CPU:0',
                canary_kind: str = 'gradient') -> 'CanaryAudit':
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
      canary_kind: As for the constructor.

    Returns:
      The audit.

    Raises:
      TypeError: if `spec`, `dp` or `mechanism` has the wrong type.
      ValueError: if `delta` is not in (0, 1).
    """
    return cls(spec=spec, dp=dp, delta=delta, noise_seed=noise_seed,
               client_participation=client_participation,
               mechanism=mechanism, device=device, canary_kind=canary_kind)

  # -- 2. One call per round (`canary_observer.CanaryObserver`). ---------------

  def observe(self,
              learning_state: Any) -> list[round_record.CanaryCosines]:
    """Records a learning state: the initial one first, then every round's.

    With data canaries tracked (`track_data_canaries`), also scores them on
    the state's model.

    Args:
      learning_state: The state of a `tff.learning` process built with this
        audit's factory: `process.initialize()`, then each `next(...).state`.

    Returns:
      Per-round cosine summaries of the rounds computed by this call
      (`canary_observer.CanaryObserver.observe`).

    Raises:
      ValueError: if a round is skipped or repeated, the initial state was
        not observed first, or the data canaries were tracked only after
        it.
    """
    summaries = self._observer.observe(learning_state)
    if self._scorer is not None:
      losses = self._scorer(self._weights_of(learning_state))
      if not self._observer.rounds_observed:  # The initial state.
        self._drops = loss_drops.LossDrops(losses)
      elif self._drops is None:
        raise ValueError('track_data_canaries was called after the initial '
                         'state was observed; call it before.')
      else:
        self._drops.update(losses)
    return summaries

  def flush(self) -> list[round_record.CanaryCosines]:
    """Processes the buffered rounds now (`CanaryObserver.flush`).

    Returns:
      The summaries of the rounds processed.
    """
    return self._observer.flush()

  def state(self) -> dict[str, np.ndarray]:
    """Everything needed to resume the audit (`CanaryObserver.state`).

    Returns:
      numpy arrays that join a checkpoint (with data canaries tracked,
      their last losses and largest drops too).
    """
    state = self._observer.state()
    if self._drops is not None:
      state.update(self._drops.state())
    return state

  def empty_state(self, learning_state: Any) -> dict[str, np.ndarray]:
    """A `state()` template for `learning_state`'s model (to load).

    Args:
      learning_state: A state of the process (its model gives d).

    Returns:
      Zeros shaped as `state()`.
    """
    state = self._observer.empty_state(learning_state)
    if self._scorer is not None:
      tracked = self.schedule_spec.num_seen + self.schedule_spec.num_unseen
      state.update((name, np.zeros(tracked, np.float64))
                   for name in loss_drops.LossDrops.names())
    return state

  def restore(self, state: dict[str, Any], learning_state: Any) -> None:
    """Resumes from `state()` saved together with `learning_state`.

    Args:
      state: What `state()` returned (as loaded from a checkpoint).
      learning_state: The learning state saved with it.
    """
    self._observer.restore(state, learning_state)
    if self._scorer is not None:
      self._drops = loss_drops.LossDrops.from_state(state)

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
    If Ctrl-C stops the loop between checkpoints,
    `manager.save_last_observed()` saves the last round it observed to
    `inner`, so that a rerun resumes from there
    (`audit_state_manager.AuditingStateManager.save_last_observed`).

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
    if noise_multiplier is None and self.dp is None:
      raise ValueError('noise_multiplier is unknown: build the factory with '
                       "this audit's gaussian_fixed/gaussian_adaptive or pass "
                       'noise_multiplier.')
    if noise_multiplier is None:
      noise_multiplier = float(self.dp.noise_multiplier)
    spec = self.schedule_spec
    rounds = self.rounds_observed
    seen_losses, unseen_losses = self._losses or (None, None)
    seen_drops = unseen_drops = None
    if self._drops is not None and self._drops.maxima.size and np.all(
        np.isfinite(self._drops.maxima)):
      seen_drops, unseen_drops = self._drops.split(spec.num_seen)
      if self._losses is None:  # The last model observed scored them.
        seen_losses = self._drops.last[:spec.num_seen]
        unseen_losses = self._drops.last[spec.num_seen:]
    if self._data and seen_losses is None:
      raise ValueError(f'canary_kind={self.canary_kind!r}: score the data '
                       'canaries first (score_data_canaries, or '
                       'track_data_canaries before the rounds).')
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
        dim=self._observer.dim, resumed_from_round=0, rounds_trained=rounds,
        data_seen_losses=seen_losses, data_unseen_losses=unseen_losses,
        data_seen_drops=seen_drops, data_unseen_drops=unseen_drops)
    facts = references.RunFacts(
        noise_multiplier=float(noise_multiplier), delta=self._delta,
        dim=self._observer.dim, canary_presentations=spec.repetitions,
        rounds=rounds, clip=None if self.dp is None else self.dp.clip,
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
                 'expected_cohort': self.expected_cohort},
        canary_kind=self.canary_kind)

  # -- Data canaries: clients of the caller's rounds (`canary_kind`). ------

  def canary_datasets(self, round_num: int,
                      canaries: client_arrays.ClientArrays,
                      element_spec: Sequence[Any], *, batch_size: int,
                      epochs: int = 1, max_examples: int | None = None
                      ) -> list[Any]:
    """The data canaries' client datasets that join TFF round `round_num`.

    Add them to the round's client datasets (a `selection_fn`'s list): they
    train through the process's own client work, clip and noise.

    Args:
      round_num: TFF's 1-based round number, in [1, T].
      canaries: Every tracked data canary's examples, seen ones first
        (`data.canary_examples.canary_arrays` of
        `canary_spec.tracked_ids(k, m)` and this audit's canary seed, or
        arrays of the caller's own in the same order).
      element_spec: The model's preprocessed (x, y) `tf.TensorSpec`s.
      batch_size: The clients' batch size.
      epochs: The clients' epochs per round.
      max_examples: A client's example cap per round; None for all.

    Returns:
      The joining canaries' `tf.data.Dataset`s (none in most rounds).

    Raises:
      ValueError: the audit has no data canaries, or `round_num` is out of
        range.
    """
    if not self._data:
      raise ValueError('canary_datasets needs canary_kind data or both; got '
                       f'{self.canary_kind!r}.')
    rounds = len(self.schedule_spec.schedule)
    round_num = validation.check_int('round_num', round_num, 1, rounds)
    # Seen canary j is client j of `canaries` (seen ones first).
    return [canary_clients.client_dataset(
        canaries, j, element_spec, batch_size=batch_size, epochs=epochs,
        max_examples=max_examples)
            for j in sorted(self.schedule_spec.schedule[round_num - 1])]

  def track_data_canaries(self, canaries: client_arrays.ClientArrays,
                          model_fn: Any, element_spec: Sequence[Any],
                          model_weights: Any) -> None:
    """Scores the data canaries on every state observed (all iterates).

    From the next `observe` on (the initial state first), each state's
    model is scored on every tracked canary's examples
    (`canary_clients.LossScorer`): the report's all-iterates threat model
    is each canary's largest excess one-round loss drop, seen against unseen
    (`runtime.loss_drops`), and its final model the last state's losses
    (`score_data_canaries` is then not needed). The drops join the
    audit's `state()`, so a run resumed through `program_state_manager`
    ends with an uninterrupted run's. Call it before the first state is
    observed or loaded.

    Args:
      canaries: As for `canary_datasets` (k + m canaries, seen first).
      model_fn: Builds the `tff.learning` model.
      element_spec: As for `canary_datasets`.
      model_weights: learning state -> its model's weights (the process's
        `get_model_weights`).

    Raises:
      ValueError: the audit has no data canaries, or `canaries` does not
        hold k + m of them.
    """
    self._check_data_canaries('track_data_canaries', canaries)
    self._scorer = canary_clients.LossScorer(model_fn, canaries, element_spec)
    self._weights_of = model_weights

  def _check_data_canaries(self, method: str,
                           canaries: client_arrays.ClientArrays) -> None:
    """ValueError unless the audit has data canaries and `canaries` k + m."""
    if not self._data:
      raise ValueError(f'{method} needs canary_kind data or both; got '
                       f'{self.canary_kind!r}.')
    spec = self.schedule_spec
    if canaries.num_clients != spec.num_seen + spec.num_unseen:
      raise ValueError(f'canaries must hold the {spec.num_seen} seen and '
                       f'{spec.num_unseen} unseen data canaries; got '
                       f'{canaries.num_clients}.')

  def data_canary_drops(self) -> loss_drops.LossDrops:
    """The tracked data canaries' last losses and largest excess one-round drops.

    Returns:
      The tracker (`runtime.loss_drops.LossDrops`): `last` the losses
      under the last state observed, `maxima` the drops.

    Raises:
      ValueError: the data canaries are not tracked, or no state was
        observed (`track_data_canaries`).
    """
    if self._drops is None:
      raise ValueError('no data canary was scored on a state: call '
                       'track_data_canaries before the first state.')
    return self._drops

  def score_data_canaries(self, canaries: client_arrays.ClientArrays,
                          model_fn: Any, model_weights: Any,
                          element_spec: Sequence[Any]) -> np.ndarray:
    """Scores the data canaries on the final model, for `report`.

    Args:
      canaries: As for `canary_datasets` (k + m canaries, seen first).
      model_fn: Builds the `tff.learning` model.
      model_weights: The final model's weights
        (`LearningProcess.get_model_weights`).
      element_spec: As for `canary_datasets`.

    Returns:
      Each canary's mean loss, seen ones first.

    Raises:
      ValueError: the audit has no data canaries, or `canaries` does not
        hold k + m of them.
    """
    self._check_data_canaries('score_data_canaries', canaries)
    losses = canary_clients.losses(model_fn, model_weights, canaries,
                                   element_spec)
    seen = self.schedule_spec.num_seen
    self._losses = losses[:seen], losses[seen:]
    return losses

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
      accounted epsilon is composed from the aggregator's own DpEvents. The
      audit does not see the server optimizer: the final-model reference
      assumes server SGD (momentum 0), as its description says.

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
