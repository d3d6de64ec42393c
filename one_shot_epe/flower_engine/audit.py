"""Canaries in Flower's DP-FedAvg: one object from strategy to privacy report.

Flower (`flwr.serverapp.strategy`, 1.42) makes FedAvg differentially private
with a wrapper: `DifferentialPrivacyServerSideFixedClipping` or
`...ServerSideAdaptiveClipping` clips each reply's difference from the
current model inside `aggregate_train`, calls the inner strategy, then adds
Gaussian noise of std z C / num_sampled_clients;
`DifferentialPrivacyClientSideFixedClipping` adds the same noise to replies
the clients clipped (Flower's fixedclipping_mod). `CanaryAudit.wrap` audits
such a strategy (Andrew et al., ICLR 2024, Sections 3-4):

    outer  audited_strategy.AuditedStrategy  seeds, times, observes rounds
    DP     the user's wrapper                clips the replies, adds the noise
    inner  strategies.CanaryStrategy         adds the round's canaries (Sec. 4)
    FedAvg the user's FedAvg                 averages

so the canaries enter inside the noise. Canary j is a client whose update is
S_t c_j, with S_t the clip the round's replies were clipped to (an unclipped
client of norm exactly S_t: 'project', Algorithm 2 line 7; what a client's
fixedclipping_mod sends at most), of the real replies' weight w. FedAvg's
mean being linear, the round's k_t canaries are sent as one reply,
theta + (S_t / k_t) sum_j c_j of weight k_t w, which adds exactly what k_t
such clients would (one message instead of k_t), with the real replies'
metric means (FedAvg's averages of the metrics do not move). The seen
canaries are inserted on
`canary_schedules.periodic_canary_schedule` (each once in each of r periods,
Sec. 5.2), the unseen ones never.

The noise's scale. The mean of N_t records has sensitivity S_t / N_t; the
accounting assumes noise std z S_t / N_t. Flower divides by its fixed
`num_sampled_clients` (wrong with canaries, and with replies missing) and
its adaptive wrapper multiplies by the clip after its update S_{t+1} (the
replies were clipped to S_t). The canary strategy sets the wrapper's
divisor to N_t S_{t+1} / S_t for the round, so the noise std is exactly
z S_t / N_t, and restores it when the next round is configured.

What is refused (`AuditRefused`, naming it): client-side adaptive clipping
(its noise is scaled to the clip it sets after averaging), any other
strategy than these DP wrappers around FedAvg's own aggregation (FedAvgM,
FedAdam, FedMedian, ... move or replace the mean the noise is scaled to),
and, at aggregation, unequal client weights (a weighted mean changes the
sensitivity) or, the clients clipping, an update beyond the clip. A
wrapper's `accountant=` keeps accounting (`flower_accountant`); the report
shows its ε beside the audit's.

Each round the outer strategy takes every canary's cosine with the released
aggregate rho_bar_t = theta_t - theta_{t-1} (Algorithm 3, the max over rounds
kept), B rounds at a time; at the end each canary's
cosine with theta_T - theta_0 (Algorithm 2). It checkpoints every
`rounds_per_checkpoint` rounds (`runtime.npz_checkpoints.NpzCheckpoints`:
the model's arrays, theta_0, the canaries' running maxima and the DP
wrapper's clip, which adaptive clipping moves) and writes the
project's run directory (`runtime.run_directory`): config.json, metrics.csv,
canary_cosines.csv, final_cosines.csv, max_cosines.csv, report.json,
report.md (`reporting.run_report.build_run_report`) and the density plot
(`reporting.run_files.write_results`, the writer of every engine). A
rerun of `start` on the same directory resumes from the newest checkpoint.

The report's references: the canary's analytical eps at the update's noise
multiplier (an r-fold Gaussian mechanism), and a real client's eps accounted
with dp_accounting (PLD) for Flower's actual noise: each round a Gaussian at
z (fixed clip), or at the update's z_v composed with the clipped count's
Gaussian of std sigma_b (adaptive: Flower counts clipped replies, a query of
sensitivity 1, so the round's overall multiplier is (z_v^-2 + sigma_b^-2)^-1/2,
not Flower's (z_v^-2 + (2 sigma_b)^-2)^-1/2); composed over every round: Flower's
FedAvg samples a fixed-size cohort without replacement, and no amplification
is claimed. A wrapper's accountant gives the report's framework_epsilon.

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
import dataclasses
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

import dp_accounting
import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping, Strategy)

from one_shot_epe import validation
from one_shot_epe.flower_engine import audited_strategy
from one_shot_epe.flower_engine import canaries
from one_shot_epe.flower_engine import flower_accountant
from one_shot_epe.flower_engine import strategies
from one_shot_epe.design import audit_checks
from one_shot_epe.design import canary_spec
from one_shot_epe.design import canary_schedules
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import cosine_buffer
from one_shot_epe.runtime import npz_checkpoints
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import training_health

__all__ = ['AuditRefused', 'CSV_FORMAT', 'CanaryAudit']

AuditRefused = strategies.AuditRefused

# The run directory's per-round CSVs: columns as reported, LF (as JAX's).
CSV_FORMAT = run_directory.CsvFormat(sort_new_columns=False,
                                     line_terminator='\n')


@dataclasses.dataclass
class _Rounds:
  """The per-round CSVs' rows so far and the rounds awaiting their cosines."""
  metrics: list[dict[str, object]]
  cosines: list[dict[str, object]]
  vectors: list[np.ndarray]
  round_nums: list[int]


class CanaryAudit:
  """The canaries of one Flower training run, from strategy to report.

  Attributes:
    spec: The canary plan (`canary_spec.CanarySpec`).
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
      run_dir: Where the run's files go (its parent is created as needed).
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
      alpha: 1 - the confidence of the report's lower bounds, in (0, 1).
      rounds_per_checkpoint: Checkpoint (and score the buffered rounds)
        every this many rounds, and after the last.
      cache_bytes: Memory the tracked canaries may take as a matrix
        (`canaries.CanaryBank`).

    Raises:
      ValueError: before any work, if an argument is out of range (fewer
        than 2 seen canaries, 1 unseen), or the rounds or canaries cannot
        fit this machine (`audit_checks.check_audit`).
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
    canary_seed = canary_spec.check_seed(canary_seed)
    schedule = canary_schedules.periodic_canary_schedule(
        num_canaries, self.rounds,
        validation.check_int('repetitions', repetitions, 1, self.rounds),
        canary_seed)
    self.spec = canary_spec.CanarySpec(
        seed=canary_seed, num_seen=num_canaries,
        num_unseen=num_unseen_canaries,
        schedule=schedule.as_round_lists(), repetitions=repetitions)
    self.store = npz_checkpoints.NpzCheckpoints(
        os.path.join(self.run_dir, run_directory.CHECKPOINT_DIR))
    self.report: run_report.RunReport | None = None
    self.outcome: canary_spec.CanaryOutcome | None = None
    self.resumed_from = 0
    self.bank: canaries.CanaryBank | None = None
    self._wrapped = False
    self._config: dict[str, Any] = {}
    self._initial = np.zeros(0)
    self._folded: cosine_buffer.CosineBuffer | None = None
    self._rows = _Rounds([], [], [], [])
    self.health = training_health.TrainingHealth(name=self.run_dir)

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
        `audit_checks.check_share`).
      RuntimeError: this audit already wrapped a strategy.
    """
    if self._wrapped:
      raise RuntimeError('a CanaryAudit audits one strategy; make another.')
    dp = strategies.check_strategy(strategy)
    spec = self.spec
    clients = float(dp.num_sampled_clients)
    audit_checks.check_share(
        spec.num_seen, clients,
        clients + spec.num_seen * spec.repetitions / self.rounds)
    inner = strategies.CanaryStrategy(self, dp.strategy, dp)
    dp.strategy = inner
    self._wrapped = True
    return audited_strategy.AuditedStrategy(self, dp, inner, self.health)

  @property
  def last_round(self) -> int:
    """The last training round recorded (the round resumed from before any)."""
    metrics = self._rows.metrics
    return int(metrics[-1]['round']) if metrics else self.resumed_from

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

  def open_run(self, initial_arrays: ArrayRecord,
               dp: Strategy) -> ArrayRecord:
    """Checks the run directory; the arrays to start from (resumed or not).

    Args:
      initial_arrays: theta_0 (its layout also that of a resumed model).
      dp: The audited DP wrapper (its clip is restored on resume).

    Returns:
      theta_0, or the newest checkpoint's model.

    Raises:
      run_directory.RunDirectoryError: the directory holds another run.
      AuditRefused: the wrapper's accountant holds other releases than the
        rounds trained (`flower_accountant.resume`).
    """
    initial = strategies.flatten(initial_arrays)
    self._config = self._run_config(initial.size, dp)
    self._recheck()
    self.bank = canaries.CanaryBank(self.spec, initial.size,
                                    cache_bytes=self._cache_bytes)
    latest = self.store.latest()
    self.resumed_from = latest or 0
    flower_accountant.resume(dp, self._inner(dp).num_sampled_clients,
                             self.resumed_from)
    self._rows = _Rounds([], [], [], [])
    if latest is None:
      self._initial = initial
      self._folded = cosine_buffer.CosineBuffer(self.spec.num_seen,
                                                self.spec.num_unseen)
      return initial_arrays
    saved = self.store.load(latest, None)
    self._initial = saved['initial']
    self._folded = cosine_buffer.CosineBuffer(
        self.spec.num_seen, self.spec.num_unseen, saved['maxima'])
    dp.clipping_norm = float(saved['clip'])
    for name, rows in (('metrics', self._rows.metrics),
                       ('cosines', self._rows.cosines)):
      rows.extend(run_directory.read_rounds(
          os.path.join(self.run_dir, _CSV[name]), latest)[1])
    keys = list(initial_arrays.keys())
    return ArrayRecord({key: Array(saved[f'array_{i}'])
                        for i, key in enumerate(keys)})

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

  def _save(self, round_num: int, arrays: ArrayRecord | None,
            dp: Strategy) -> None:
    """Scores the buffered rounds, writes the CSVs, saves the checkpoint."""
    self._flush()
    for name, rows in (('metrics', self._rows.metrics),
                       ('cosines', self._rows.cosines)):
      columns = (list(run_directory.COSINE_FIELDS) if name == 'cosines' else
                 list(dict.fromkeys(c for row in rows for c in row)))
      run_directory.write_rounds(os.path.join(self.run_dir, _CSV[name]),
                                 columns or ['round'], rows, CSV_FORMAT)
    if arrays is not None:
      state = {f'array_{i}': a
               for i, a in enumerate(arrays.to_numpy_ndarrays())}
      state.update(initial=self._initial, maxima=self._folded.maxima,
                   clip=np.float64(dp.clipping_norm))
      self.store.save(state, round_num)

  def _flush(self) -> None:
    """Scores the buffered rounds' vectors against every tracked canary."""
    rows = self._rows
    if not rows.vectors:
      return
    block = self.bank.cosines(np.stack(rows.vectors))
    for summary in self._folded.fold(rows.round_nums, block):
      rows.cosines.append(dict(zip(run_directory.COSINE_FIELDS, summary)))
    rows.vectors, rows.round_nums = [], []

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
    """
    rows = self._rows
    rows.metrics.append({
        'round': round_num, 'clip': inner.clip,
        'aggregate_norm': float(np.linalg.norm(vector)),
        **inner.round_stats, 'training_time_in_seconds': seconds})
    rows.vectors.append(vector)
    rows.round_nums.append(round_num)
    if len(rows.vectors) >= self.spec.buffer_rounds_for(vector.size):
      self._flush()
    if run_directory.is_checkpoint_round(round_num,
                                         self.rounds_per_checkpoint,
                                         self.rounds):
      self._save(round_num, arrays, dp)

  def _round_event(self, dp: Strategy) -> tuple[float, Any, dict[str, Any]]:
    """The update's noise multiplier, a round's DpEvent, the DP setting."""
    z = float(dp.noise_multiplier)
    if isinstance(dp, DifferentialPrivacyServerSideAdaptiveClipping):
      sigma = float(dp.clipped_count_stddev)
      event = dp_accounting.ComposedDpEvent([
          dp_accounting.GaussianDpEvent(z),
          dp_accounting.GaussianDpEvent(sigma)])
      return z, event, {'clipping': 'adaptive',
                        'update_noise_multiplier': z,
                        'clipped_count_stddev': sigma,
                        'final_clip': float(dp.clipping_norm)}
    return z, dp_accounting.GaussianDpEvent(z), {
        'clipping': float(dp.clipping_norm), 'noise_multiplier': z}

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
    self._flush()
    spec, k = self.spec, self.spec.num_seen
    final = self.bank.cosines(
        (strategies.flatten(final_arrays) - self._initial)[None])[:, 0]
    maxima = self._folded.maxima.astype(np.float64)
    self.outcome = canary_spec.CanaryOutcome(
        final_cosines=final[:k], final_unseen_cosines=final[k:],
        seen_maxima=maxima[:k], unseen_maxima=maxima[k:],
        accuracy=float('nan') if accuracy is None else accuracy,
        dim=self.bank.dim, resumed_from_round=self.resumed_from,
        rounds_trained=self.rounds - self.resumed_from)
    z, event, dp_setting = self._round_event(dp)
    setting = {'engine': 'flower', 'dp_wrapper': type(dp).__name__,
               'rounds': self.rounds,
               'num_sampled_clients': self._inner(dp).num_sampled_clients,
               **dp_setting, 'num_canaries': k,
               'num_unseen_canaries': spec.num_unseen,
               'canary_repeats': spec.repetitions, 'seed': self._seed,
               'canary_seed': spec.seed}
    # Without unseen canaries their arrays are empty: the final model's
    # report alone.
    facts = references.RunFacts(
        noise_multiplier=z, delta=self.delta, dim=self.bank.dim,
        canary_presentations=spec.repetitions, rounds=self.rounds,
        presentation_counts=spec.presentation_counts(), round_event=event)
    self.report = run_report.build_run_report(
        self.outcome, facts, mechanisms.Gaussian(), alpha=self.alpha,
        setting=setting, notes=self.health.notes(),
        framework_epsilon=flower_accountant.flower_epsilon(
            dp, self.delta, self._inner(dp).num_sampled_clients))
    run_files.write_results(
        self.run_dir, self.outcome, self.report,
        title=f'Flower, noise {self.report.noise_multiplier:g}, '
        f'{spec.repetitions} repetition(s)')
    return self.report


_CSV = {'metrics': run_directory.METRICS_FILE,
        'cosines': run_directory.CANARY_COSINES_FILE}

