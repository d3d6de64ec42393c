"""Canaries in Flower's DP-FedAvg: one object from strategy to privacy report.

Flower (`flwr.serverapp.strategy`, 1.42) makes FedAvg differentially private
with a wrapper: `DifferentialPrivacyServerSideFixedClipping` or
`...ServerSideAdaptiveClipping` clips each reply's difference from the
current model, calls the inner strategy, then adds Gaussian noise of std
z C / num_sampled_clients; `DifferentialPrivacyClientSideFixedClipping` adds
the same noise to replies the clients clipped (Flower's fixedclipping_mod).
`CanaryAudit.wrap` audits such a strategy (Andrew et al., ICLR 2024, Sec. 4):

    outer  audited_strategy.AuditedStrategy  seeds, times, observes rounds
    DP     the user's wrapper                clips the replies, adds the noise
    inner  strategies.CanaryStrategy         adds the round's canaries
    FedAvg the user's FedAvg                 averages

so the canaries enter inside the noise, each a client whose update is
S_t c_j (S_t the round's clip: 'project', Algorithm 2 line 7), inserted on
`canary_schedules.periodic_canary_schedule` (Sec. 5.2); the unseen ones
never. The noise keeps Flower's calibration to the sample, the canaries
counted in it: std z S_t / (n + k_t), z S_t / N_t when every sampled client
replied, an effective multiplier z N_t / (n + k_t) when fewer did
(`strategies.CanaryStrategy`). A round Flower's wrapper skips (an error
reply: a lost node) releases nothing and the audit goes on, as Flower does;
its canaries stay seen, presented fewer times (the seen/unseen split is the
design's random draw, made before the run), and the accounting composes
each released round at its own noise (`releases`). A round's bookkeeping is
whole or absent, and an interrupt saves the state after the last completed
round (`round_book`).

What is refused (`AuditRefused`, naming it): client-side adaptive clipping
(its noise is scaled to the clip it sets after averaging), any other
strategy than these DP wrappers around FedAvg's own aggregation (FedAvgM,
FedAdam, FedMedian, ... move or replace the mean the noise is scaled to),
and, at aggregation, unequal client weights (a weighted mean changes the
sensitivity) or, the clients clipping, an update beyond the clip; before
round 1, a model of fewer than 3 parameters. A wrapper's `accountant=` keeps
accounting (`flower_accountant`); the report shows its ε beside the audit's.

Each round the outer strategy takes every canary's cosine with the released
aggregate theta_t - theta_{t-1} (Algorithm 3, the max over rounds kept), B
rounds at a time; at the end each canary's cosine with theta_T - theta_0
(Algorithm 2). It checkpoints every `rounds_per_checkpoint` rounds and
writes the project's run directory (`runtime.run_directory`, the result
files by `reporting.run_files.write_results`, the writer of every engine);
a rerun of `start` on the same directory resumes from the newest checkpoint.
The report's references: the canary's analytical eps at the update's noise
multiplier (an r-fold Gaussian mechanism), and a real client's eps
accounted with dp_accounting (PLD), each released round a Gaussian at its
(effective) z, or, adaptive, the update's z_v composed with the clipped
count's Gaussian of std sigma_b (Flower counts clipped replies, a query of
sensitivity 1); no amplification is claimed (Flower's FedAvg samples a
fixed-size cohort).

Example (examples/flower_fashion_mnist.py runs it):

  auditor = CanaryAudit(run_dir='out/run', num_canaries=500, rounds=T,
                        delta=1e-5)
  strategy = auditor.wrap(DifferentialPrivacyServerSideFixedClipping(
      FedAvg(fraction_train=0.1), noise_multiplier=1.0, clipping_norm=1.0,
      num_sampled_clients=10))
  strategy.start(grid, initial_arrays, num_rounds=T)
  print(auditor.report.to_markdown())
"""

import contextlib
import functools
import math
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping, Strategy)

from one_shot_epe import validation
from one_shot_epe.flower_engine import audited_strategy
from one_shot_epe.flower_engine import canaries
from one_shot_epe.flower_engine import flower_accountant
from one_shot_epe.flower_engine import releases as releases_lib
from one_shot_epe.flower_engine import round_book
from one_shot_epe.flower_engine import strategies
from one_shot_epe.design import audit_checks
from one_shot_epe.design import canary_spec
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import run_size
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import npz_checkpoints
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import training_health

__all__ = ['AuditRefused', 'CSV_FORMAT', 'CanaryAudit']

AuditRefused = strategies.AuditRefused

# The run directory's per-round CSVs' layout (`round_book`).
CSV_FORMAT = round_book.CSV_FORMAT


class CanaryAudit:
  """The canaries of one Flower training run, from strategy to report.

  Attributes:
    spec: The canary plan (`canary_spec.CanarySpec`), drawn when first read
      (`wrap` checks the canaries' share of a round before).
    rounds: T.
    run_dir: The run directory.
    report: The run's `run_report.RunReport` once `start` has finished.
    outcome: What the run measured (`canary_spec.CanaryOutcome`), then.
    resumed_from: The checkpoint the last `start` resumed from.
    bank: The tracked canaries (`canaries.CanaryBank`), once started.
    health: Watches the rounds' clip and loss (`training_health`); its
      notes join the report.
  """

  def __init__(self, *, run_dir: str, num_canaries: int, rounds: int,
               delta: float, num_unseen_canaries: int | None = None,
               repetitions: int = 1, canary_seed: int = 0,
               seed: int | None = None, alpha: float = 0.05,
               rounds_per_checkpoint: int = 25,
               cache_bytes: int = canaries.DEFAULT_CACHE_BYTES):
    """Plans the canaries of a run of `rounds` rounds.

    Args:
      run_dir: Where the run's files go (its parent is created as needed);
        it, or its nearest existing parent, must be writable.
      num_canaries: k >= 2 seen canaries, inserted `repetitions` times each
        (a Gaussian is fitted to their statistics).
      rounds: T >= 1 training rounds.
      delta: The delta of every epsilon of the report, in (0, 1).
      num_unseen_canaries: m canaries tracked, never inserted (default k):
        0, or >= 2 for the all-iterates report.
      repetitions: r in [1, T]: each seen canary once in each of r periods.
      canary_seed: Canary j is a pure function of (canary_seed, j).
      seed: None for unpredictable sampling and noise (deployments); an int
        in [0, canary_spec.MAX_SEED] seeds Python's and numpy's global
        generators, which Flower's sampling and DP noise draw from, at each
        round (simulations: a resumed run repeats an uninterrupted one).
      alpha: 1 - the confidence of the report's lower bounds, in (0, 0.5).
      rounds_per_checkpoint: Checkpoint (and score the buffered rounds)
        every this many rounds, and after the last.
      cache_bytes: Memory the tracked canaries may take as a matrix
        (`canaries.CanaryBank`).

    Raises:
      ValueError: before any work, if an argument is out of range (fewer
        than 2 seen canaries, 1 unseen), the rounds or canaries cannot fit
        this machine (`audit_checks.check_audit`), or `run_dir` cannot be
        written (naming 'run_dir').
    """
    self.run_dir = os.path.abspath(run_dir)
    self.rounds, num_canaries, num_unseen_canaries = audit_checks.check_audit(
        rounds, num_canaries,
        num_canaries if num_unseen_canaries is None else num_unseen_canaries)
    self.delta = validation.check_probability('delta', delta)
    self.alpha = validation.PARAMETERS['alpha']('alpha', alpha)
    self.rounds_per_checkpoint = validation.check_int(
        'rounds_per_checkpoint', rounds_per_checkpoint, 1)
    self._cache_bytes = validation.check_int('cache_bytes', cache_bytes, 0)
    self._seed = (None if seed is None else
                  canary_spec.check_seed(seed, 'seed'))
    self._plan = (num_canaries, num_unseen_canaries,
                  validation.check_int('repetitions', repetitions, 1,
                                       self.rounds),
                  canary_spec.check_seed(canary_seed))
    try:
      run_directory.check_writable(self.run_dir)
    except run_directory.RunDirectoryError as error:
      raise ValueError(f'run_dir: {error}') from None
    self.store = npz_checkpoints.NpzCheckpoints(
        os.path.join(self.run_dir, run_directory.CHECKPOINT_DIR))
    self.report: run_report.RunReport | None = None
    self.outcome: canary_spec.CanaryOutcome | None = None
    self.resumed_from = 0
    self.bank: canaries.CanaryBank | None = None
    self._wrapped = False
    self._config: dict[str, Any] = {}
    # The rounds recorded, once `open_run` has started or resumed the run.
    self._book: round_book.RoundBook | None = None
    self.health = training_health.TrainingHealth(name=self.run_dir)

  @functools.cached_property
  def spec(self) -> canary_spec.CanarySpec:
    """The canary plan: the seen canaries' schedule, drawn when first read."""
    num_seen, num_unseen, repetitions, canary_seed = self._plan
    schedule = canary_schedules.periodic_canary_schedule(
        num_seen, self.rounds, repetitions, canary_seed)
    return canary_spec.CanarySpec(
        seed=canary_seed, num_seen=num_seen, num_unseen=num_unseen,
        schedule=schedule.as_round_lists(), repetitions=repetitions)

  def wrap(self, strategy: Strategy) -> Strategy:
    """The strategy to start instead of `strategy`, canaries inside its noise.

    Args:
      strategy: Flower's `DifferentialPrivacyServerSideFixedClipping`,
        `DifferentialPrivacyServerSideAdaptiveClipping` or
        `DifferentialPrivacyClientSideFixedClipping` around `FedAvg`, with
        or without `accountant=`; its inner strategy is replaced by the
        canaries' around the FedAvg.

    Returns:
      A `Strategy` whose `start` trains (or resumes) the run and writes its
      results.

    Raises:
      AuditRefused: a strategy the audit cannot audit soundly (see the
        module docstring), naming it.
      ValueError: the canaries would be more than half of a round's
        participants (`num_sampled_clients` replies and k r / T canaries;
        `audit_checks.check_share`), checked before the schedule is drawn.
      RuntimeError: this audit already wrapped a strategy.
    """
    if self._wrapped:
      raise RuntimeError('a CanaryAudit audits one strategy; make another.')
    dp = strategies.check_strategy(strategy)
    num_seen, _, repetitions, _ = self._plan
    clients = float(dp.num_sampled_clients)
    audit_checks.check_share(num_seen, clients,
                             clients + num_seen * repetitions / self.rounds)
    inner = strategies.CanaryStrategy(self, dp.strategy, dp)
    dp.strategy = inner
    self._wrapped = True
    return audited_strategy.AuditedStrategy(self, dp, inner, self.health)

  @property
  def opening(self) -> str:
    """The line a started run opens with: 'new run in <dir>' or 'resumed ...'.

    Returns:
      'new run in <run_dir>', or 'resumed from round N in <run_dir>'.
    """
    if self.resumed_from:
      return f'resumed from round {self.resumed_from} in {self.run_dir}'
    return f'new run in {self.run_dir}'

  def seed_round(self, round_num: int, stage: int) -> None:
    """Seeds Python's and numpy's generators for a stage of a round.

    Args:
      round_num: The training round.
      stage: 0 before the round's sampling, 1 before its noise.
    """
    if self._seed is None:
      return
    state = np.random.SeedSequence(
        self._seed, spawn_key=(round_num, stage)).generate_state(2)
    random.seed(int(state[0]))
    np.random.seed(int(state[1]))

  def _run_config(self, dim: int, dp: Strategy) -> dict[str, Any]:
    """What config.json holds: the plan and Flower's DP settings."""
    spec = self.spec
    config = {
        'engine': 'flower', 'dp_wrapper': type(dp).__name__, 'dim': dim,
        'rounds': self.rounds, 'num_canaries': spec.num_seen,
        'num_unseen_canaries': spec.num_unseen,
        'canary_repeats': spec.repetitions, 'canary_seed': spec.seed,
        'seed': self._seed, 'delta': self.delta, 'alpha': self.alpha,
        'rounds_per_checkpoint': self.rounds_per_checkpoint,
        'noise_multiplier': float(dp.noise_multiplier),
        'num_sampled_clients': self._inner(dp).num_sampled_clients}
    if isinstance(dp, DifferentialPrivacyServerSideAdaptiveClipping):
      config.update(
          clipped_count_stddev=float(dp.clipped_count_stddev),
          target_clipped_quantile=float(dp.target_clipped_quantile),
          clip_norm_lr=float(dp.clip_norm_lr),
          initial_clipping_norm=self._inner(dp).clip)
    else:
      config['clipping_norm'] = float(dp.clipping_norm)
    return config

  @staticmethod
  def _inner(dp: Strategy) -> strategies.CanaryStrategy:
    return dp.strategy

  def _accept(self, saved: Mapping[str, Any]) -> None:
    """Raises RunDirectoryError unless `saved` is this run's config."""
    differ = sorted(key for key in set(saved) | set(self._config)
                    if saved.get(key) != self._config.get(key))
    if differ:
      raise run_directory.RunDirectoryError(
          f'{self.run_dir!r} holds another run: its config.json differs in '
          f'{differ}; use another run_dir.', flag='run_dir')

  def _recheck(self) -> None:
    run_directory.check(self.run_dir, accept_config=self._accept,
                        checkpoints=self.store)

  def _check_model(self, dim: int) -> None:
    """ValueError naming initial_arrays for a model the audit cannot score.

    The cosines need d >= 3 (the null law of a canary's cosine,
    `stats.null_distribution`), and the run's canaries, buffered rounds
    and model copies must fit this machine (`run_size.check`).
    """
    if dim < 3:
      raise ValueError(
          f'initial_arrays: the model has {dim} parameter(s); the canaries\' '
          'cosines need at least 3 (their null law is that of a uniform '
          'direction on the sphere S^(d-1), d >= 3).')
    spec = self.spec
    cached = min(self._cache_bytes,
                 4 * (spec.num_seen + spec.num_unseen) * dim)
    try:
      run_size.check(run_size.RunShape(
          total_rounds=self.rounds, num_seen=spec.num_seen,
          num_unseen=spec.num_unseen, dim=dim,
          state_vectors=4 + math.ceil(cached / (4 * dim)),
          buffer_rounds=spec.buffer_rounds_for(dim)))
    except run_size.PlanRefused as error:
      raise ValueError(f'initial_arrays: a model of {dim} parameters: '
                       f'{error}.') from None

  def open_run(self, initial_arrays: ArrayRecord,
               dp: Strategy) -> ArrayRecord:
    """Checks the model and the run directory; the arrays to start from.

    Nothing is written: a model or directory refused here leaves the
    directory as it was.

    Args:
      initial_arrays: theta_0 (its layout also that of a resumed model).
      dp: The audited DP wrapper (its clip is restored on resume).

    Returns:
      theta_0, or the newest checkpoint's model.

    Raises:
      ValueError: naming initial_arrays, for a model of fewer than 3
        parameters or one whose audit cannot fit this machine.
      run_directory.RunDirectoryError: the directory holds another run.
      AuditRefused: the wrapper's accountant holds other releases than the
        rounds released (`flower_accountant.resume`).
    """
    initial = strategies.flatten(initial_arrays)
    self._check_model(initial.size)
    self._config = self._run_config(initial.size, dp)
    self._recheck()
    self.bank = canaries.CanaryBank(self.spec, initial.size,
                                    cache_bytes=self._cache_bytes)
    book = round_book.RoundBook(self.run_dir, self.store, self.bank,
                                self.spec, self.rounds,
                                self.rounds_per_checkpoint)
    latest = self.store.latest()
    self.resumed_from = latest or 0
    if latest is None:
      book.start(initial)
      arrays = initial_arrays
    else:
      saved = book.resume(latest)
      dp.clipping_norm = float(saved['clip'])
      arrays = ArrayRecord({key: Array(saved[f'array_{i}'])
                            for i, key in enumerate(initial_arrays.keys())})
    self._book = book
    flower_accountant.resume(dp, self._inner(dp).num_sampled_clients,
                             self._releases(dp).released)
    return arrays

  @contextlib.contextmanager
  def owned(self) -> Iterator[None]:
    """The block in which this process alone writes the run directory.

    `run_directory.owned` (the run lock held, the directory checked again),
    config.json written.

    Yields:
      None.
    """
    with run_directory.owned(self.run_dir, recheck=self._recheck,
                             checkpoints=self.store):
      run_directory.write_config(self.run_dir, self._config)
      yield

  def on_round(self, round_num: int, vector: np.ndarray, seconds: float,
               inner: strategies.CanaryStrategy, arrays: ArrayRecord,
               dp: Strategy) -> None:
    """Records training round `round_num`; checkpoints on its rounds.

    Args:
      round_num: The training round (1-based).
      vector: rho_bar_t = theta_t - theta_{t-1}, the released aggregate.
      seconds: The round's time (clients' training included).
      inner: The canary strategy (its round's counts and noise std).
      arrays: theta_t.
      dp: The DP wrapper (its clip).

    Raises:
      interrupts.Interrupted: the audit was stopped (`stop`) meanwhile.
    """
    self._book.record({
        'round': round_num, 'clip': inner.clip,
        'aggregate_norm': float(np.linalg.norm(vector)),
        **inner.round_stats, 'released': 1,
        'training_time_in_seconds': seconds}, vector, arrays,
                      float(dp.clipping_norm))

  def on_skipped_round(self, round_num: int, seconds: float, clip: float,
                       replies: int, failures: int, arrays: ArrayRecord,
                       dp: Strategy) -> None:
    """Records a round the DP wrapper released nothing for.

    Its scheduled canaries were never inserted (the canary strategy never
    ran); the model stays theta_{t-1}.

    Args:
      round_num: The training round (1-based).
      seconds: The round's time.
      clip: The clip the round's replies were to be clipped to.
      replies: The replies free of errors.
      failures: The error replies.
      arrays: theta_{t-1}, still the model.
      dp: The DP wrapper (its clip).

    Raises:
      interrupts.Interrupted: the audit was stopped (`stop`) meanwhile.
    """
    self._book.record({
        'round': round_num, 'clip': clip, 'aggregate_norm': '',
        'num_clients': replies, 'failures': failures,
        'canaries_inserted': 0, 'noise_std': '',
        'effective_noise_multiplier': '', 'released': 0,
        'training_time_in_seconds': seconds}, None, arrays,
                      float(dp.clipping_norm))

  def stop(self) -> str:
    """Saves the state after the last completed round; the interrupt's line.

    Called when the run is interrupted, from any thread but one inside a
    round's bookkeeping (the main thread defers its signals there): waits
    for a round's bookkeeping under way to end, checkpoints the last
    completed round unless it is saved (`round_book.RoundBook.stop`), and
    stops the run: a round recorded later raises `interrupts.Interrupted`.
    A finished or stopped run saves nothing.

    Returns:
      'interrupted after round N of T (<run_dir>); rerun the same command
      to resume', N the round the rerun resumes from.
    """
    if self._book is None:
      return interrupts.resume_line(self.resumed_from, self.rounds,
                                    self.run_dir)
    return self._book.stop()

  def _releases(self, dp: Strategy) -> releases_lib.Releases:
    """The rounds recorded, as released (`releases`)."""
    adaptive = isinstance(dp, DifferentialPrivacyServerSideAdaptiveClipping)
    return releases_lib.Releases.of_rounds(
        self._book.metrics, self.spec.schedule, self.spec.num_seen,
        float(dp.noise_multiplier),
        float(dp.clipped_count_stddev) if adaptive else None)

  def _dp_setting(self, dp: Strategy) -> dict[str, Any]:
    """The report setting's DP entries."""
    z = float(dp.noise_multiplier)
    if isinstance(dp, DifferentialPrivacyServerSideAdaptiveClipping):
      return {'clipping': 'adaptive', 'update_noise_multiplier': z,
              'clipped_count_stddev': float(dp.clipped_count_stddev),
              'final_clip': float(dp.clipping_norm)}
    return {'clipping': float(dp.clipping_norm), 'noise_multiplier': z}

  def finish(self, final_arrays: ArrayRecord, dp: Strategy,
             accuracy: float | None) -> run_report.RunReport:
    """Algorithm 2's cosines, the report and the result files.

    Args:
      final_arrays: theta_T.
      dp: The audited DP wrapper.
      accuracy: The final model's accuracy, or None.

    Returns:
      The report (also `self.report`).
    """
    book = self._book
    book.finish()
    spec, k = self.spec, self.spec.num_seen
    final = self.bank.cosines(
        (strategies.flatten(final_arrays) - book.initial)[None])[:, 0]
    maxima = book.maxima
    self.outcome = canary_spec.CanaryOutcome(
        final_cosines=final[:k], final_unseen_cosines=final[k:],
        seen_maxima=maxima[:k], unseen_maxima=maxima[k:],
        accuracy=float('nan') if accuracy is None else accuracy,
        dim=self.bank.dim, resumed_from_round=self.resumed_from,
        rounds_trained=self.rounds - self.resumed_from)
    released = self._releases(dp)
    z = float(dp.noise_multiplier)
    setting = {'engine': 'flower', 'dp_wrapper': type(dp).__name__,
               'rounds': self.rounds,
               'num_sampled_clients': self._inner(dp).num_sampled_clients,
               **self._dp_setting(dp), 'num_canaries': k,
               'num_unseen_canaries': spec.num_unseen,
               'canary_repeats': spec.repetitions, 'seed': self._seed,
               'canary_seed': spec.seed, **released.setting()}
    # Without unseen canaries their arrays are empty: the final model's
    # report alone. The accounting composes the rounds released, each at
    # its own noise; the final-model reference sums the released rounds.
    facts = references.RunFacts(
        noise_multiplier=z, delta=self.delta, dim=self.bank.dim,
        canary_presentations=spec.repetitions,
        rounds=max(1, released.released),
        presentation_counts=released.presentation_counts,
        round_event=releases_lib.round_event(
            z, setting.get('clipped_count_stddev')),
        round_events=None if released.uniform else released.round_events())
    # Flower's accountant composes the rounds its wrapper released; with an
    # accountant the wrapper releases no short round (its strict check).
    self.report = run_report.build_run_report(
        self.outcome, facts, mechanisms.Gaussian(), alpha=self.alpha,
        setting=setting, notes=(*released.notes(), *self.health.notes()),
        framework_epsilon=flower_accountant.flower_epsilon(
            dp, self.delta, self._inner(dp).num_sampled_clients))
    run_files.write_results(
        self.run_dir, self.outcome, self.report,
        title=f'Flower, noise {self.report.noise_multiplier:g}, '
        f'{spec.repetitions} repetition(s)')
    return self.report
