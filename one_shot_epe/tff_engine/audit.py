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
   last-iterate heuristic.

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

from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import quiet

# A script that imports the audit before numpy and TensorFlow gets local TFF
# workers reachable only over loopback, and no TensorFlow start-up noise.
isolation.isolate_on_import()
quiet.quiet_tensorflow_import()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe import accounting
from one_shot_epe import canary_spec
from one_shot_epe import participation as participation_lib
from one_shot_epe import run_directory
from one_shot_epe import run_report
from one_shot_epe import validation
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import final_model


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


class CanaryAudit:
  """The canaries of one training run, from aggregation factory to report."""

  def __init__(self, *, num_canaries: int, rounds: int,
               clients_per_round: float, delta: float,
               num_unseen_canaries: int | None = None, repetitions: int = 1,
               canary_seed: int = 0, canary_clip: str = 'project',
               noise_seed: int | None = None,
               client_participation: accounting.Participation | None = None):
    """Plans the canaries of a run of `rounds` rounds.

    Args:
      num_canaries: k >= 1 seen canaries, inserted `repetitions` times each.
      rounds: T, the number of training rounds.
      clients_per_round: The expected number of real clients per round; the
        expected canaries per round, k r / T, are added to it.
      delta: The delta of every epsilon of the report.
      num_unseen_canaries: m canaries tracked but never inserted (default k).
      repetitions: r, presentations of each seen canary (one per period).
      canary_seed: Canary j is a pure function of (canary_seed, j).
      canary_clip: 'project' (the paper) or 'clip' (its published code); see
        `canary_spec.CanarySpec`.
      noise_seed: None for unpredictable DP noise (deployments); an int makes
        a simulation reproducible.
      client_participation: How real clients are sampled, for the report's
        accounted epsilon (`accounting.client_epsilon_of_event`, over the
        rounds observed); None accounts a client taking part in every round.
    """
    num_unseen = (num_canaries if num_unseen_canaries is None else
                  num_unseen_canaries)
    schedule = participation_lib.periodic_canary_schedule(
        num_canaries, rounds, repetitions, canary_seed)
    spec = canary_spec.CanarySpec(
        seed=canary_seed, num_seen=num_canaries, num_unseen=num_unseen,
        schedule=schedule.as_round_lists(), canary_clip=canary_clip,
        repetitions=repetitions)
    self._setup(spec, participation_lib.expected_cohort(
        clients_per_round, num_canaries, repetitions, rounds), delta,
                noise_seed, client_participation, device='/CPU:0')

  @classmethod
  def from_spec(cls, canaries: canary_spec.CanarySpec,
                dp: canary_spec.DPAggregation, *, delta: float,
                noise_seed: int | None = None,
                client_participation: accounting.Participation | None = None,
                device: str = '/CPU:0') -> 'CanaryAudit':
    """The audit of a run planned elsewhere (`tff_engine.training`).

    Args:
      canaries: The canary plan, schedule and statistics included.
      dp: The run's DP aggregation; its `clients_per_round` is the expected
        cohort, canaries included. `aggregator()` builds its factory.
      delta, noise_seed, client_participation: As for the constructor.
      device: TF device of the cosine tracking (`accelerators`).
    """
    if not isinstance(canaries, canary_spec.CanarySpec):
      raise TypeError(f'canaries must be a canary_spec.CanarySpec; got '
                      f'{canaries!r}.')
    audit = cls.__new__(cls)
    audit._setup(canaries, dp.clients_per_round, delta, noise_seed,
                 client_participation, device)
    audit._dp = dp
    return audit

  def _setup(self, spec: canary_spec.CanarySpec, expected_cohort: float,
             delta: float, noise_seed: int | None,
             client_participation: accounting.Participation | None,
             device: str) -> None:
    self.canary_config = spec
    self.expected_cohort = expected_cohort
    self._delta = validation.check_probability('delta', delta)
    self._noise_seed = noise_seed
    self._client_participation = client_participation
    self._device = device
    self._dp: canary_spec.DPAggregation | None = None
    self._noise_multiplier: float | None = None
    self._tracker: cosine_tracking.CosineTracker | None = None
    self._initial: np.ndarray | None = None
    self._latest: np.ndarray | None = None
    self._round_event: dp_accounting.DpEvent | None = None

  # -- 1. The aggregation factory. --------------------------------------------

  def aggregator(self) -> canary_aggregator.CanaryDPFactory:
    """The factory of the `dp` given to `from_spec`, canaries inserted."""
    if self._dp is None:
      raise ValueError('aggregator() needs the audit of from_spec(canaries, '
                       'dp); otherwise call gaussian_fixed/gaussian_adaptive.')
    factory = canary_aggregator.CanaryDPFactory.from_spec(
        self._dp, self.canary_config, self._noise_seed)
    self._noise_multiplier = self._dp.noise_multiplier
    return factory

  def gaussian_fixed(
      self, *, noise_multiplier: float, clip: float,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with a fixed clip, canaries inserted."""
    factory = canary_aggregator.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, clip=clip,
        canary_config=self.canary_config, noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    self._noise_multiplier = float(noise_multiplier)
    return factory

  def gaussian_adaptive(
      self, *, noise_multiplier: float, initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5, learning_rate: float = 0.2,
      clipped_count_stddev: float | None = None,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with adaptive clipping (TFF's defaults)."""
    factory = canary_aggregator.CanaryDPFactory.gaussian_adaptive(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort,
        initial_l2_norm_clip=initial_l2_norm_clip,
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=learning_rate, clipped_count_stddev=clipped_count_stddev,
        canary_config=self.canary_config, noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    self._noise_multiplier = float(noise_multiplier)
    return factory

  def tree_aggregation(
      self, *, noise_multiplier: float, l2_norm_clip: float,
      record_specs: Any, use_efficient: bool = True,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FTRL's tree aggregation (TFF's `tree_aggregation`), canaries in.

    The report's analytical epsilon assumes independent Gaussian noise per
    round, which tree aggregation does not add: pass the noise multiplier
    to account with to `report(noise_multiplier=...)` explicitly.
    """
    factory = canary_aggregator.CanaryDPFactory.tree_aggregation(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, l2_norm_clip=l2_norm_clip,
        record_specs=record_specs, canary_config=self.canary_config,
        noise_seed=self._noise_seed, use_efficient=use_efficient,
        record_aggregation_factory=record_aggregation_factory)
    self._noise_multiplier = None
    return factory

  def dp_event(self, learning_state: Any) -> dp_accounting.DpEvent:
    """The DpEvent of the round that produced `learning_state`."""
    return canary_aggregator.extract_dp_event_from_state(
        learning_state.aggregator)

  # -- 2. One call per round. -------------------------------------------------

  def _start(self, initial_weights: np.ndarray) -> None:
    self._initial = initial_weights
    self._latest = initial_weights
    self._tracker = cosine_tracking.CosineTracker(
        self.canary_config, initial_weights.size, device=self._device)

  def observe(self, learning_state: Any) -> list[cosine_tracking.RoundSummary]:
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
    if self.canary_config.all_iterates_statistic == 'model_delta':
      aggregator = aggregator._replace(aggregate=self._latest - weights)
    summaries = self._tracker.observe(aggregator)
    self._latest = weights
    self._round_event = self.dp_event(learning_state)
    return summaries

  def flush(self) -> list[cosine_tracking.RoundSummary]:
    """Processes the buffered rounds now (before a checkpoint, say)."""
    return [] if self._tracker is None else self._tracker.flush()

  def state(self) -> dict[str, np.ndarray]:
    """Everything needed to resume the audit (numpy; joins a checkpoint)."""
    if self._tracker is None:
      raise ValueError('the audit has observed no learning state yet.')
    tracker = self._tracker.state()
    return {'initial_weights': self._initial,
            'rounds_observed': np.int64(tracker.rounds_observed),
            'cosine_maxima': tracker.cosine_maxima,
            'pending': tracker.pending}

  def empty_state(self, learning_state: Any) -> dict[str, np.ndarray]:
    """A `state()` of the right structure for `learning_state` (to load)."""
    dim = _flat_trainable(learning_state).size
    tracked = self.canary_config.num_seen + self.canary_config.num_unseen
    return {'initial_weights': np.zeros([dim], np.float32),
            'rounds_observed': np.int64(0),
            'cosine_maxima': np.zeros([tracked], np.float32),
            'pending': np.zeros([0, dim], np.float32)}

  def restore(self, state: dict[str, Any], learning_state: Any) -> None:
    """Resumes from `state()` saved together with `learning_state`."""
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
        self.canary_config, initial.size, state=tracker_state,
        device=self._device)

  def program_state_manager(
      self, inner: tff.program.ProgramStateManager | None = None,
      rounds_per_checkpoint: int = 1, final_round: int | None = None,
      release_managers: Sequence[tff.program.ReleaseManager] = ()
  ) -> tff.program.ProgramStateManager:
    """A program state manager that observes every state a TFF loop saves.

    Give it to `tff.simulation.run_training_process` (with the default
    rounds_per_saving_program_state=1, so that every round is observed) or
    to `tff.learning.programs.train_model`. With `inner` (e.g. a
    `tff.program.FileProgramStateManager`), round 0, every
    `rounds_per_checkpoint`-th round and `final_round` are saved to it
    together with the audit's state (its buffered rounds processed first, so
    a checkpoint holds no buffer), and a rerun resumes both. Each round's
    cosine summaries (seen/unseen mean and max; key: the 1-based round) are
    released to `release_managers` as they are computed.
    """
    return _AuditingStateManager(self, inner, rounds_per_checkpoint,
                                 final_round, release_managers)

  # -- 3. One call at the end. ------------------------------------------------

  def _check_observed(self) -> cosine_tracking.CosineTracker:
    if self._tracker is None or self._tracker.rounds_observed == 0:
      raise ValueError('the audit has observed no training round yet.')
    return self._tracker

  def cosine_maxima(self) -> cosine_tracking.CosineMaxima:
    """Each canary's max-over-rounds cosine so far (Algorithm 3, l. 15-16)."""
    return self._check_observed().maxima()

  @property
  def rounds_observed(self) -> int:
    """Training rounds observed so far (0 before the first)."""
    return 0 if self._tracker is None else self._tracker.rounds_observed

  def final_cosines(self, unseen: bool = False) -> np.ndarray:
    """Seen (or unseen) canaries' cosines with the model of the latest round.

    Algorithm 2, line 11, with the spec's final-model statistic
    (`final_model`): theta_0 - theta_t ('delta', the default, in
    tff.learning's sign convention) or theta_t ('final'). The unseen
    canaries' cosines follow the null and serve the one-run certificates.
    """
    self._check_observed()
    config = self.canary_config
    ids = (canary_spec.unseen_ids(config.num_unseen) if unseen else
           canary_spec.seen_ids(config.num_seen))
    with tf.device(self._device):
      return final_model.final_model_cosines(
          self._latest, canary_seed=config.seed, canary_ids=ids,
          initial_weights=self._initial,
          statistic=config.final_model_statistic)

  def report(self, *, alpha: float = 0.05, accuracy: float | None = None,
             noise_multiplier: float | None = None) -> run_report.RunReport:
    """Both threat models' estimates and bounds for the rounds observed.

    Args:
      alpha: 1 - confidence of epsilon_lo.
      accuracy: The final model's accuracy, if known, for the report.
      noise_multiplier: The noise multiplier of the factory; defaults to the
        one given to `gaussian_fixed`/`gaussian_adaptive`.
    """
    tracker = self._check_observed()
    if noise_multiplier is None:
      noise_multiplier = self._noise_multiplier
    if noise_multiplier is None:
      raise ValueError('noise_multiplier is unknown: build the factory with '
                       "this audit's gaussian_fixed/gaussian_adaptive or pass "
                       'noise_multiplier.')
    config = self.canary_config
    maxima = self.cosine_maxima()
    rounds = tracker.rounds_observed
    participation = self._client_participation
    if participation is not None:
      participation = dataclasses.replace(participation, rounds=rounds)
    return run_report.build_run_report(
        final_cosines=self.final_cosines(),
        final_unseen_cosines=(self.final_cosines(unseen=True)
                              if config.num_unseen >= 2 else None),
        dim=int(self._initial.size),
        delta=self._delta, noise_multiplier=noise_multiplier, alpha=alpha,
        seen_maxima=maxima.seen, unseen_maxima=maxima.unseen,
        accuracy=accuracy, canary_presentations=config.repetitions,
        rounds=rounds, participation=participation,
        presentation_counts=config.presentation_counts(rounds),
        round_event=(self._round_event if self._noise_multiplier is not None
                     else None),
        setting={'num_canaries': config.num_seen,
                 'num_unseen_canaries': config.num_unseen,
                 'canary_repeats': config.repetitions,
                 'rounds_observed': tracker.rounds_observed,
                 'canary_clip': config.canary_clip,
                 'expected_cohort': self.expected_cohort})


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
      self, summaries: Sequence[cosine_tracking.RoundSummary]) -> None:
    for summary in summaries:
      values = collections.OrderedDict(
          seen_cosine_mean=summary.seen_mean, seen_cosine_max=summary.seen_max,
          unseen_cosine_mean=summary.unseen_mean,
          unseen_cosine_max=summary.unseen_max)
      await asyncio.gather(*(m.release(values, summary.round_num + 1)
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
