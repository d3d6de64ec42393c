"""What both engines insert and aggregate: the canary plan and the DP round.

One run of Andrew et al. (ICLR 2024) is defined, beyond the model and data,
by two things that the TFF engine (`tff_engine.canary_aggregator`) and the
JAX engine (`jax_engine.fedavg`) must agree on exactly:

* `CanarySpec`, the canary plan (Sections 4 and 5.2): k seen canaries (ids
  0..k-1) inserted by the round schedule, m unseen canaries (ids
  UNSEEN_ID_OFFSET + 0..m-1) tracked but never inserted, all drawn from one
  canary seed, and how an inserted canary meets the clip S_t;
* `DPAggregation`, DP-FedAvg's aggregation: a fixed clip or the adaptive clip
  of Andrew et al. (2021), the overall noise multiplier z and the expected
  cohort size that the noised sum is divided by, with the noise split of
  adaptive clipping (`value_noise_multiplier`);
* `CanaryOutcome`, what a run measured: the cosines of both threat models.

Framework-free; every check goes through `one_shot_epe.validation`.
"""

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from one_shot_epe.design import run_options
from one_shot_epe import validation

__all__ = ['ALL_ITERATES_STATISTICS', 'AUDITED_CANARIES', 'CANARY_CLIPS',
           'CLIPPED_CANARY_SCALE', 'COUNT_STDDEV_PER_CLIENT', 'CanaryCount',
           'CanaryOutcome', 'CanarySpec', 'DPAggregation',
           'FINAL_MODEL_STATISTICS', 'MAX_SEED', 'SEED', 'UNSEEN_ID_OFFSET',
           'block_rounds', 'check_seed', 'default_buffer_rounds', 'seen_ids',
           'tracked_ids', 'unit_rows', 'unseen_ids', 'value_noise_multiplier']

# Unseen canary i has id UNSEEN_ID_OFFSET + i; seen ids are 0..k-1.
UNSEEN_ID_OFFSET = run_options.UNSEEN_ID_OFFSET
# The one limit of every seed a run takes (--seed, --canary_seed, canary and
# DP noise seeds): both engines' canary generators take a 32-bit seed
# (jax.random's key; TensorFlow's philox takes more), and the DP noise seed
# derived from --seed is a uint32 of numpy's SeedSequence.
MAX_SEED = 2**32 - 1
# How an inserted canary meets the clip S_t: 'project' scales it to norm S_t
# and counts it as unclipped by adaptive clipping (Algorithm 2, line 7);
# 'clip' sends a record of norm CLIPPED_CANARY_SCALE x S_t that the clip cuts
# to S_t and counts as clipped (the paper's published code multiplies the
# unit canary by 10 000).
CANARY_CLIPS = run_options.CANARY_CLIPS
CLIPPED_CANARY_SCALE = 1e4
# The released vector whose cosines with the canaries are tracked each round
# (Algorithm 3): the noised aggregate rho_bar_t, or the model step
# theta_{t-1} - theta_t (they differ under server momentum).
ALL_ITERATES_STATISTICS = ('aggregate', 'model_delta')
# The final-model statistic (Algorithm 2): theta_T - theta_0 or theta_T.
FINAL_MODEL_STATISTICS = ('delta', 'final')
# The canary tracker's buffer when B is not given: <= 768 MiB, <= 128 rounds.
_BUFFER_BYTES = 768 * 2**20
_MAX_BUFFER_ROUNDS = 128
# TFF's default std of the unclipped-count noise, per expected client.
COUNT_STDDEV_PER_CLIENT = 0.05


# What a canary seed, a seen count and an unseen count allow: ids must stay
# apart (UNSEEN_ID_OFFSET) and fit an int32 id table.
SEED = validation.Int(0, MAX_SEED)
_NUM_SEEN = validation.Int(1, UNSEEN_ID_OFFSET)
# Seen ids of a tracker that may insert none: k in [0, UNSEEN_ID_OFFSET].
_SEEN_COUNT = validation.Int(0, UNSEEN_ID_OFFSET)
_NUM_UNSEEN = validation.Int(0, 2**31 - UNSEEN_ID_OFFSET)


@dataclasses.dataclass(frozen=True)
class CanaryCount:
  """The rule of an audit's canary count: 2 or more, or 0 where allowed.

  An audit fits a Gaussian to its canaries' statistics (Sec. 3.2), so a set
  of canaries it reports on needs at least two; 0 means none (no unseen
  canaries: no all-iterates report; no seen ones: a run without an audit).

  Attributes:
    high: The largest count (the ids must stay apart, `UNSEEN_ID_OFFSET`).
    allow_zero: Whether 0 (none) is allowed.
  """
  high: int
  allow_zero: bool

  def __call__(self, name: str, value: object) -> int:
    """`value` as an int in [2, high] (or 0 where allowed).

    Args:
      name: The argument's or flag's name, as the error names it.
      value: The count.

    Returns:
      `value` as an int.

    Raises:
      validation.ArgumentTypeError: `value` is not an integer.
      ValueError: it is out of range.
    """
    if self.allow_zero and validation.check_int(name, value) == 0:
      return 0
    try:
      return validation.check_int(name, value, 2, self.high)
    except validation.ArgumentTypeError:
      raise
    except ValueError:
      zero = ', or 0 for none' if self.allow_zero else ''
      raise ValueError(f'{name} must be in [2, {self.high}] (2 or more to '
                       f'fit a Gaussian to their statistics){zero}; got '
                       f'{value}.') from None


AUDITED_CANARIES = {
    'num_seen': CanaryCount(_NUM_SEEN.high, allow_zero=False),
    'num_unseen': CanaryCount(_NUM_UNSEEN.high, allow_zero=True)}
_POSITIVE = validation.Real(0.0, low_open=True)
_NON_NEGATIVE = validation.Real(0.0)


def check_seed(seed: object, name: str = 'canary_seed') -> int:
  """A canary seed as an int in [0, MAX_SEED].

  Args:
    seed: The seed to check.
    name: The flag or argument named in the error.

  Returns:
    `seed` as an int.

  Raises:
    ValueError: if `seed` is not an integer in [0, MAX_SEED].
  """
  return SEED(name, seed)


@validation.arguments('dim')
def default_buffer_rounds(dim: int) -> int:
  """B, the rounds buffered per cosine block: <= 768 MiB and <= 128 rounds.

  Scoring a block holds the buffer, about two chunks of canaries and the
  framework's working memory, ~2.5 GiB in all at d = 4.05M on the TFF engine
  (benchmarks/canary_tracking.py).

  Args:
    dim: d >= 1, the model dimension.

  Returns:
    B in [1, 128].

  Raises:
    ValueError: if `dim` is not an integer >= 1.
  """
  return max(1, min(_MAX_BUFFER_ROUNDS, _BUFFER_BYTES // (4 * dim)))


def unit_rows(block: np.ndarray) -> np.ndarray:
  """The rows of `block` over their norms: a zero row stays zero.

  The one rule of every engine for a released vector of norm 0 (an all-zero
  aggregate): its cosine with every canary is 0, not NaN. Each engine's
  cosines divide by the norm where it is positive and by 1 elsewhere.

  Args:
    block: [B, d] vectors.

  Returns:
    float64 [B, d]: each nonzero row scaled to norm 1, each zero row zero.
  """
  block = np.asarray(block, np.float64)
  norms = np.linalg.norm(block, axis=-1, keepdims=True)
  return block / np.where(norms > 0, norms, 1.0)


@validation.arguments(num_seen=_SEEN_COUNT)
def seen_ids(num_seen: int) -> np.ndarray:
  """Ids of the seen canaries: 0..num_seen-1 (int64).

  Args:
    num_seen: k, in [0, UNSEEN_ID_OFFSET].

  Returns:
    The ids, int64 [k].

  Raises:
    ValueError: if `num_seen` is out of range.
  """
  return np.arange(num_seen, dtype=np.int64)


@validation.arguments(num_unseen=_NUM_UNSEEN)
def unseen_ids(num_unseen: int) -> np.ndarray:
  """Ids of the unseen canaries: UNSEEN_ID_OFFSET + 0..num_unseen-1 (int64).

  Args:
    num_unseen: m, in [0, 2^31 - UNSEEN_ID_OFFSET] (the ids fit an int32).

  Returns:
    The ids, int64 [m].

  Raises:
    ValueError: if `num_unseen` is out of range.
  """
  return UNSEEN_ID_OFFSET + np.arange(num_unseen, dtype=np.int64)


@validation.arguments(num_seen=_SEEN_COUNT, num_unseen=_NUM_UNSEEN)
def tracked_ids(num_seen: int, num_unseen: int) -> np.ndarray:
  """Ids whose cosines are tracked: the seen ones, then the unseen ones.

  Args:
    num_seen: k, as for `seen_ids`.
    num_unseen: m, as for `unseen_ids`.

  Returns:
    `seen_ids(k)` then `unseen_ids(m)`, int64 [k + m].

  Raises:
    ValueError: if a count is out of range.
  """
  return np.concatenate([seen_ids.unchecked(num_seen),
                         unseen_ids.unchecked(num_unseen)])


def _check_schedule(schedule: object, num_seen: int
                    ) -> tuple[np.ndarray, ...]:
  """The schedule as a tuple of int64 id arrays, each of distinct seen ids."""
  if isinstance(schedule, (str, bytes)) or not isinstance(
      schedule, (Sequence, np.ndarray)):
    raise ValueError('schedule must be a sequence (one entry per round) of '
                     f'sequences of canary ids; got {schedule!r}.')
  rounds = []
  for t, ids in enumerate(schedule):
    ids = np.asarray(ids)
    if ids.size == 0:
      rounds.append(np.zeros(0, np.int64))
      continue
    if (ids.ndim != 1 or ids.dtype.kind not in 'iu' or ids.min() < 0 or
        ids.max() >= num_seen or np.unique(ids).size != ids.size):
      raise ValueError(
          f'schedule[{t}] must hold distinct seen-canary ids in '
          f'[0, {num_seen - 1}]; got {ids.tolist()}.')
    rounds.append(ids.astype(np.int64))
  return tuple(rounds)


@validation.fields(
    'repetitions', seed=SEED, num_seen=_NUM_SEEN, num_unseen=_NUM_UNSEEN,
    canary_clip=validation.Choice(CANARY_CLIPS),
    all_iterates_statistic=validation.Choice(ALL_ITERATES_STATISTICS),
    final_model_statistic=validation.Choice(FINAL_MODEL_STATISTICS),
    buffer_rounds=validation.Optional(validation.Int(1, 2**16)),
    chunk_size=validation.Optional(validation.Int(1, 2**20)))
@dataclasses.dataclass(frozen=True, eq=False)
class CanarySpec:
  """Which canaries exist, when the seen ones are inserted, how they are seen.

  Attributes:
    seed: Canary seed s; canary j is a pure function of (s, j) in each
      engine (`tff_engine.canaries`, `jax_engine.canaries`).
    num_seen: k >= 1 seen canaries (ids 0..k-1).
    num_unseen: m >= 0 unseen canaries (ids UNSEEN_ID_OFFSET + 0..m-1).
    schedule: Entry t lists the distinct seen ids inserted in 0-based round t
      (e.g. `canary_schedules.CanarySchedule.rounds`); rounds past its end insert
      none. Empty for a tracker that inserts nothing.
    canary_clip: 'project' or 'clip' (see CANARY_CLIPS above).
    repetitions: r >= 1, the presentations of each seen canary that the
      schedule was built for (Sec. 5.2; reported beside the estimates).
    all_iterates_statistic: The vector each round's cosines are taken with
      (ALL_ITERATES_STATISTICS above).
    final_model_statistic: The final-model vector (FINAL_MODEL_STATISTICS).
    buffer_rounds: B >= 1 aggregates buffered between two cosine
      computations (the lag of the per-round summaries is B - 1); None lets
      the engine pick by memory.
    chunk_size: Canaries regenerated at once while computing cosines; None
      lets the engine pick by memory.

  Raises:
    ValueError: at construction, if a field is outside its range or a
      schedule entry holds ids that are not distinct seen-canary ids.
  """
  seed: int
  num_seen: int
  num_unseen: int
  schedule: Sequence[Sequence[int]] = ()
  canary_clip: str = 'project'
  repetitions: int = 1
  all_iterates_statistic: str = 'aggregate'
  final_model_statistic: str = 'delta'
  buffer_rounds: int | None = None
  chunk_size: int | None = None

  def __post_init__(self):
    object.__setattr__(self, 'schedule',
                       _check_schedule(self.schedule, self.num_seen))

  def schedule_table(self) -> tuple[np.ndarray, np.ndarray]:
    """The schedule as two flat arrays, for a lookup inside a computation.

    Returns:
      (ids, offsets): int64 ids and int32 offsets [T + 1]; round t inserts
      ids[offsets[t]:offsets[t + 1]].
    """
    counts = [len(ids) for ids in self.schedule]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ids = (np.concatenate(self.schedule) if self.schedule else
           np.zeros(0, np.int64)).astype(np.int64)
    return ids, offsets

  def tracked_ids(self) -> np.ndarray:
    """Ids whose cosines are tracked: the seen ones, then the unseen ones.

    Returns:
      `tracked_ids(num_seen, num_unseen)`, int64 [k + m].
    """
    return tracked_ids.unchecked(self.num_seen, self.num_unseen)

  def presentation_counts(self, rounds: int | None = None) -> np.ndarray:
    """Each seen canary's insertions in the schedule's first rounds.

    Args:
      rounds: How many rounds to count; None for the whole schedule.

    Returns:
      int64 [k]: the insertions of seen canary j at index j.
    """
    inserted = [i for ids in self.schedule[:rounds] for i in ids]
    return np.bincount(np.asarray(inserted, np.int64), minlength=self.num_seen)

  def buffer_rounds_for(self, dim: int, cap: int | None = None) -> int:
    """B, Algorithm 3's rounds buffered per cosine block, for d parameters.

    Every engine asks here (`block_rounds` with this spec's
    `buffer_rounds`).

    Args:
      dim: d >= 1, the model dimension.
      cap: The engine's cap on the default, >= 1; None for none.

    Returns:
      B >= 1.

    Raises:
      ValueError: if `buffer_rounds` is None and `dim` or `cap` is not an
        integer >= 1.
    """
    return block_rounds(self.buffer_rounds, dim, cap)


def block_rounds(buffer_rounds: int | None, dim: int,
                 cap: int | None = None) -> int:
  """B, Algorithm 3's rounds buffered per cosine block: the one rule.

  `buffer_rounds` when set (--canary_buffer_rounds), else
  `default_buffer_rounds(dim)` (the memory bound), at most `cap` where the
  engine caps it (e.g. at the rounds between two checkpoints).

  Args:
    buffer_rounds: B as given, or None to choose it.
    dim: d >= 1, the model dimension.
    cap: The engine's cap on the default, >= 1; None for none.

  Returns:
    B >= 1.

  Raises:
    ValueError: if `buffer_rounds` is None and `dim` or `cap` is not an
      integer >= 1.
  """
  if buffer_rounds is not None:
    return buffer_rounds
  default = default_buffer_rounds(dim)
  if cap is None:
    return default
  return min(default, validation.check_int('cap', cap, low=1))


def value_noise_multiplier(noise_multiplier: float,
                           clipped_count_stddev: float) -> float:
  """Noise multiplier z_v of the update sum that leaves z overall.

  Adaptive clipping releases a noised count of unclipped records, a Gaussian
  query of sensitivity 1/2 and std sigma_b (Andrew et al. 2021, Sec. 3).
  Composed with the update sum's Gaussian query (sensitivity 1, std z_v) it is
  a Gaussian mechanism with 1/z^2 = 1/z_v^2 + 1/(2 sigma_b)^2, so
  z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2) gives the requested overall z (the
  convention of `tff.aggregators.DifferentiallyPrivateFactory.
  gaussian_adaptive`).

  Args:
    noise_multiplier: z >= 0, the overall noise multiplier wanted.
    clipped_count_stddev: sigma_b, the std of the unclipped count's noise.

  Returns:
    z_v; 0 when z = 0.

  Raises:
    ValueError: sigma_b <= z / 2 (no z_v reaches z).
  """
  if noise_multiplier == 0.0:
    return 0.0
  if noise_multiplier >= 2.0 * clipped_count_stddev:
    raise ValueError(
        f'clipped_count_stddev must exceed noise_multiplier / 2 = '
        f'{noise_multiplier / 2} for the overall noise multiplier to be '
        f'{noise_multiplier}; got {clipped_count_stddev}.')
  return (noise_multiplier**-2 - (2.0 * clipped_count_stddev)**-2)**-0.5


@validation.fields(
    'noise_multiplier', 'clients_per_round', clip=validation.Optional(_POSITIVE),
    initial_clip=_POSITIVE,
    target_unclipped_quantile=validation.Probability(),
    clip_learning_rate=_NON_NEGATIVE,
    clipped_count_stddev=validation.Optional(_NON_NEGATIVE))
@dataclasses.dataclass(frozen=True)
class DPAggregation:
  """DP-FedAvg's aggregation: a fixed clip if `clip` is set, else adaptive.

  Attributes:
    noise_multiplier: z >= 0, the overall noise multiplier.
    clients_per_round: the expected cohort size (the mean's denominator, real
      clients and canaries), > 0.
    clip: a fixed clip S > 0, or None for adaptive clipping.
    initial_clip: S_0 of adaptive clipping (TFF's default 0.1).
    target_unclipped_quantile: gamma in [0, 1].
    clip_learning_rate: eta >= 0 of the geometric update.
    clipped_count_stddev: sigma_b of the unclipped count; None:
      COUNT_STDDEV_PER_CLIENT x clients_per_round if z > 0, else 0 (TFF's
      default).

  Raises:
    ValueError: at construction, if a field is outside its range, or with
      adaptive clipping if sigma_b <= z / 2 (`value_noise_multiplier`).
  """
  noise_multiplier: float
  clients_per_round: float
  clip: float | None = None
  initial_clip: float = 0.1
  target_unclipped_quantile: float = 0.5
  clip_learning_rate: float = 0.2
  clipped_count_stddev: float | None = None

  def __post_init__(self):
    if self.adaptive:
      value_noise_multiplier(self.noise_multiplier, self.count_stddev)

  @property
  def adaptive(self) -> bool:
    """Whether the clip adapts (no fixed clip given)."""
    return self.clip is None

  @property
  def count_stddev(self) -> float:
    """sigma_b, the std of the noise on the unclipped count."""
    if self.clipped_count_stddev is not None:
      return self.clipped_count_stddev
    if self.noise_multiplier > 0:
      return COUNT_STDDEV_PER_CLIENT * self.clients_per_round
    return 0.0

  @property
  def update_noise_multiplier(self) -> float:
    """z_v: the update sum's noise std is z_v S_t."""
    if not self.adaptive:
      return self.noise_multiplier
    return value_noise_multiplier(self.noise_multiplier, self.count_stddev)


class CanaryOutcome(NamedTuple):
  """What a training run with canaries measured, whichever engine ran it.

  Attributes:
    final_cosines: Seen canaries' cosines with the final-model statistic
      (Algorithm 2, line 11); empty without canaries.
    final_unseen_cosines: Unseen canaries' cosines with it (the null).
    seen_maxima, unseen_maxima: Max-over-rounds cosines (Algorithm 3, lines
      15-16).
    accuracy: The final model's test accuracy.
    dim: d, the number of model parameters.
    resumed_from_round: The checkpoint round this invocation started from.
    rounds_trained: Training rounds this invocation ran.
    decorrelated_seen, decorrelated_unseen: Under matrix-factorization
      noise, the canaries' decorrelated all-iterates scores
      (`decorrelation.matched_filter_scores`); None otherwise.
    data_seen_losses, data_unseen_losses: With data canaries
      (`canary_kinds`), the final model's mean loss on each seen and unseen
      data canary's examples; None otherwise.
    data_seen_drops, data_unseen_drops: With data canaries, each seen and
      unseen data canary's largest excess one-round loss drop, max over
      rounds t of its drop L(theta_{t-1}) - L(theta_t) less the round's
      median drop over every tracked canary (the all-iterates score,
      `runtime.loss_drops`); None otherwise.
  """
  final_cosines: np.ndarray
  final_unseen_cosines: np.ndarray
  seen_maxima: np.ndarray
  unseen_maxima: np.ndarray
  accuracy: float
  dim: int
  resumed_from_round: int
  rounds_trained: int
  decorrelated_seen: np.ndarray | None = None
  decorrelated_unseen: np.ndarray | None = None
  data_seen_losses: np.ndarray | None = None
  data_unseen_losses: np.ndarray | None = None
  data_seen_drops: np.ndarray | None = None
  data_unseen_drops: np.ndarray | None = None
