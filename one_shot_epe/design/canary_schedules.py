"""When canaries are presented: the canary schedules of a run (Sec. 5.2).

`participation` decides who takes part in each round; this module, when each
seen canary is presented. The one-shot estimator (Andrew et al., ICLR 2024,
Sec. 4) asks that canaries participate as real clients do; Sec. 5.2 presents
each canary a fixed number of times (1, 2, 4, 8), once in every period.
Rounds are 0-based and every random choice is a pure function of `(seed,
kind of draw, period)` (`seeded_rng`), as in `participation`.

Canary clients (`CanarySchedule`, consumed by the canary-injecting aggregator
as one sequence of canary ids per round):

* `periodic_canary_schedule`: `T` rounds are cut into `r` consecutive periods
  whose lengths differ by at most one (`period_lengths`); every canary is
  presented exactly once in each period, at a round drawn afresh for each
  period, with per-round canary counts within a period differing by at most
  one and the rounds that take the extra canary chosen at random. With
  `r = 1` each canary appears once at a uniformly random round, as a real
  client does in one epoch (paper Sec. 5.1); `r` in (2, 4, 8) gives Sec. 5.2.
* `last_rounds_canary_schedule`: the worst case for the final-model threat
  model, all presentations packed into the final rounds. Without a cap, every
  canary is presented in each of the last `r` rounds (the most compact pattern
  allowed by at most one presentation per canary per round). With
  `max_canaries_per_round = c`, the `k r` presentations fill the last
  `L = ceil(k r / min(c, k))` rounds, the fewest possible, in canary order
  repeated `r` times, at near-equal counts per round.
* `participation.ClientSampler.canary_schedule`: canaries drawn by the same
  rule as the real clients, with the same expected participation per
  client: once per epoch of `R` rounds for `ShuffledEpochs`, inclusion
  probability `q` for `BernoulliSampling`, a Poisson(`k * expected / m`)
  count for `PoissonSampling`.

`expected_cohort` is the DP average's expected participants per round, the
canaries' share included; `canary_share_warning` says when that share is
large enough to change the training being audited.
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.design import run_size

__all__ = ['CANARY_SHARE_WARNING', 'CanarySchedule', 'MAX_CANARY_SHARE',
           'canary_share_warning', 'check_canary_share',
           'even_split', 'expected_cohort', 'last_rounds_canary_schedule',
           'period_lengths', 'periodic_canary_schedule',
           'place_once_per_period', 'seeded_rng']

# The spawn-key tag of canary placement (`participation` holds the others).
_CANARY_PLACEMENT_TAG = 3


def seeded_rng(seed: int, tag: int, index: int) -> np.random.Generator:
  """The generator for draw `tag` at round/period/epoch `index` of `seed`.

  Args:
    seed: The non-negative seed of the run's draws.
    tag: The kind of draw (a spawn-key tag that keeps kinds independent).
    index: The round, period or epoch.

  Returns:
    A generator that is a pure function of the three.
  """
  return np.random.default_rng(
      np.random.SeedSequence(seed, spawn_key=(tag, index)))


def even_split(total: int, parts: int) -> np.ndarray:
  """Sizes of `parts` near-equal parts of `total`, larger ones first.

  Args:
    total: The items to split, >= 0.
    parts: The parts, >= 1.

  Returns:
    int64 sizes summing to `total`, the first `total % parts` one larger.
  """
  sizes = np.full(parts, total // parts, dtype=np.int64)
  sizes[:total % parts] += 1
  return sizes


def place_once_per_period(num_canaries: int, lengths: Sequence[int],
                           seed: int) -> list[np.ndarray]:
  """Presents every canary once in each period of the given lengths.

  Within period `p` (pure function of `(seed, p)`), the canaries are permuted
  and dealt to the period's rounds in consecutive chunks whose sizes differ by
  at most one; which rounds take the larger chunks is itself random.

  Args:
    num_canaries: k, the canaries.
    lengths: Each period's rounds.
    seed: The placement seed.

  Returns:
    The sorted canary ids of each round, periods in order.
  """
  rounds = []
  for period, length in enumerate(lengths):
    rng = seeded_rng(seed, _CANARY_PLACEMENT_TAG, period)
    counts = rng.permutation(even_split(num_canaries, int(length)))
    chunks = np.split(rng.permutation(num_canaries), np.cumsum(counts)[:-1])
    rounds.extend(np.sort(chunk).astype(np.int64) for chunk in chunks)
  return rounds


@validation.fields('num_canaries')
@dataclasses.dataclass(frozen=True, eq=False)
class CanarySchedule:
  """Which canaries (ids `0..num_canaries-1`) are presented in each round.

  Attributes:
    num_canaries: The number k of seen canaries.
    rounds: Entry `t` is the sorted int64 array of canaries presented in
      round `t` (0-based); its length is the number of training rounds.

  Raises:
    ValueError: at construction, if num_canaries < 1, `rounds` is empty, or
      an entry is not sorted distinct ids in [0, num_canaries).
  """
  num_canaries: int
  rounds: tuple[np.ndarray, ...]

  def __post_init__(self):
    num_canaries = self.num_canaries
    rounds = []
    for t, ids in enumerate(self.rounds):
      given = np.asarray(ids)
      ids = given.astype(np.int64)
      if given.size and (given.ndim != 1 or given.dtype.kind not in 'iu' or
                         ids[0] < 0 or ids[-1] >= num_canaries or
                         np.any(np.diff(ids) <= 0)):
        raise ValueError(f'rounds[{t}] must hold sorted distinct canary ids in '
                         f'[0, {num_canaries - 1}]; got {given.tolist()}')
      ids = ids.reshape(-1)
      ids.setflags(write=False)
      rounds.append(ids)
    if not rounds:
      raise ValueError('rounds must cover at least one round; got none')
    object.__setattr__(self, 'rounds', tuple(rounds))

  @property
  def num_rounds(self) -> int:
    """T, the number of rounds the schedule covers."""
    return len(self.rounds)

  def canaries(self, round_index: int) -> np.ndarray:
    """The sorted ids of the canaries presented in round `round_index`.

    Args:
      round_index: the 0-based round, in [0, num_rounds).

    Returns:
      A read-only sorted int64 array of canary ids (possibly empty).

    Raises:
      ValueError: `round_index` is not an int in [0, num_rounds).
    """
    return self.rounds[validation.check_int('round_index', round_index, 0,
                                  self.num_rounds - 1)]

  def appearance_counts(self) -> np.ndarray:
    """Number of rounds in which each canary is presented (length k).

    Returns:
      An int64 array; entry i is canary i's presentations.
    """
    return np.bincount(np.concatenate(self.rounds),
                       minlength=self.num_canaries).astype(np.int64)

  def round_counts(self) -> np.ndarray:
    """Number of canaries presented in each round (length T).

    Returns:
      An int64 array; entry t is round t's canary count.
    """
    return np.array([ids.size for ids in self.rounds], dtype=np.int64)

  def as_round_lists(self) -> tuple[tuple[int, ...], ...]:
    """The schedule as the aggregator takes it: a tuple of ints per round.

    Returns:
      T tuples of Python ints, the sorted canary ids of each round.
    """
    return tuple(tuple(int(i) for i in ids) for ids in self.rounds)


@validation.arguments('num_rounds')
def period_lengths(num_rounds: int, repetitions: int) -> np.ndarray:
  """Lengths of `repetitions` consecutive periods covering `num_rounds` rounds.

  The lengths differ by at most one; the first `num_rounds % repetitions`
  periods are the longer ones.

  Args:
    num_rounds: the number of training rounds T (>= 1).
    repetitions: the number of periods r, in [1, T].

  Returns:
    An int64 array of `repetitions` lengths summing to `num_rounds`.

  Raises:
    ValueError: an argument is not an int in its range.
  """
  repetitions = validation.check_int('repetitions', repetitions, 1, num_rounds)
  return even_split(num_rounds, repetitions)


@validation.arguments('num_canaries', 'num_rounds', 'seed')
def periodic_canary_schedule(num_canaries: int, num_rounds: int,
                             repetitions: int, seed: int) -> CanarySchedule:
  """Every canary exactly once in each of `repetitions` periods (Sec. 5.2).

  The periods are those of `period_lengths`; within each, the canaries are
  dealt at random to the period's rounds in near-equal groups.

  Args:
    num_canaries: the number k of seen canaries (>= 1).
    num_rounds: the number of training rounds T (>= 1).
    repetitions: the presentations r of each canary, in [1, T].
    seed: the non-negative placement seed; the schedule is a pure function
      of it and the other arguments.

  Returns:
    The schedule, in which every canary appears exactly r times.

  Raises:
    ValueError: an argument is not an int in its range.
  """
  lengths = period_lengths.unchecked(num_rounds, repetitions)
  return CanarySchedule(
      num_canaries, tuple(place_once_per_period(num_canaries, lengths, seed)))


@validation.arguments('clients_per_round', 'num_rounds',
                      num_canaries=validation.Int(0))
def expected_cohort(clients_per_round: float, num_canaries: int,
                    repetitions: int, num_rounds: int) -> float:
  """Expected participants per round: real clients plus k r / T canaries.

  Canary clients participate as real clients do (Sec. 4), so the DP average's
  denominator and the adaptive clip's expected record count include them: k
  canaries presented r times each over T rounds add k r / T per round.

  Args:
    clients_per_round: the real clients' mean cohort size (> 0).
    num_canaries: the number k of seen canaries (>= 0).
    repetitions: the presentations r of each canary, in [1, T].
    num_rounds: the number of training rounds T (>= 1).

  Returns:
    clients_per_round + k r / T.

  Raises:
    ValueError: an argument is not a number in its range.
  """
  repetitions = validation.check_int('repetitions', repetitions, 1, num_rounds)
  return clients_per_round + num_canaries * repetitions / num_rounds


@validation.arguments('num_canaries', 'num_rounds',
                      max_canaries_per_round=validation.Optional(
                          validation.Int(1)))
def last_rounds_canary_schedule(
    num_canaries: int, num_rounds: int, repetitions: int,
    max_canaries_per_round: int | None = None) -> CanarySchedule:
  """All `repetitions` presentations of every canary in the final rounds.

  Presentations, listed as canaries 0..k-1 repeated `repetitions` times, are
  cut into `L = ceil(k r / c)` consecutive chunks of near-equal size, with
  `c = min(max_canaries_per_round, k)` (`c = k` without a cap), and chunk `i`
  goes to round `T - L + i`. A chunk holds at most `c <= k` consecutive
  presentations, so no canary appears twice in a round, and `L` is the least
  number of rounds that fits `k r` presentations at most `c` per round.

  Args:
    num_canaries: the number k of seen canaries (>= 1).
    num_rounds: the number of training rounds T (>= 1).
    repetitions: the presentations r of each canary, in [1, T].
    max_canaries_per_round: the cap on canaries in one round (>= 1), or None
      for no cap beyond k.

  Returns:
    The schedule: empty rounds, then the L rounds holding the canaries.

  Raises:
    ValueError: if the `L` rounds needed exceed `num_rounds`, or an argument
      is not an int in its range.
  """
  repetitions = validation.check_int('repetitions', repetitions, 1, num_rounds)
  cap = num_canaries
  if max_canaries_per_round is not None:
    cap = min(cap, max_canaries_per_round)
  presentations = num_canaries * repetitions
  used_rounds = math.ceil(presentations / cap)
  if used_rounds > num_rounds:
    raise ValueError(
        f'max_canaries_per_round={max_canaries_per_round} needs '
        f'{used_rounds} rounds for {num_canaries} canaries x {repetitions} '
        f'repetitions but num_rounds={num_rounds}; allow at least '
        f'{math.ceil(presentations / num_rounds)} canaries per round')
  order = np.tile(np.arange(num_canaries, dtype=np.int64), repetitions)
  chunks = np.split(order, np.cumsum(even_split(presentations,
                                                 used_rounds))[:-1])
  empty = [np.zeros(0, np.int64)] * (num_rounds - used_rounds)
  return CanarySchedule(num_canaries,
                        tuple(empty + [np.sort(c) for c in chunks]))


# Above this share of a round's expected participants, canaries change the
# training they audit noticeably (the demo's 2.5 of 42.5 move its accuracy
# by less than a point; experiments/reproduce.py --accuracy_table).
CANARY_SHARE_WARNING = 0.1
# The most of a round's expected participants that canaries may be: above it
# the run is mostly canaries, no longer the training it audits (the paper:
# 1,000 canaries among 341k StackOverflow clients, 2 per round of 167).
MAX_CANARY_SHARE = 0.5


def canary_share_warning(clients_per_round: float,
                         cohort: float) -> str | None:
  """A warning when canaries are a large share of each round's participants.

  Args:
    clients_per_round: The expected real clients per round.
    cohort: The expected participants per round, canaries included
      (`expected_cohort`, `canary_plan`).

  Returns:
    One line saying how many of the expected participants are canaries and
    what to change, if more than `CANARY_SHARE_WARNING` of them are; else
    None.
  """
  canaries = cohort - clients_per_round
  if canaries <= CANARY_SHARE_WARNING * cohort:
    return None
  return (f'{canaries:.3g} of the {cohort:.3g} expected participants per '
          f'round ({canaries / cohort:.0%}) are canaries, which changes the '
          'training they audit: use fewer canaries, more rounds or more '
          'clients per round.')


def _count(value: float) -> str:
  """An expected count: 4 significant digits, whole numbers from 100 on."""
  return f'{value:,.0f}' if value >= 100 else f'{value:.4g}'


def check_canary_share(clients_per_round: float, cohort: float) -> None:
  """Refuses canaries that would be over `MAX_CANARY_SHARE` of a round.

  Args:
    clients_per_round: The expected real clients per round.
    cohort: The expected participants per round, canaries included
      (`expected_cohort`).

  Raises:
    run_size.PlanRefused: naming 'num_canaries', if the canaries' share of
      the cohort exceeds `MAX_CANARY_SHARE`.
  """
  canaries = cohort - clients_per_round
  if canaries > MAX_CANARY_SHARE * cohort:
    raise run_size.PlanRefused(
        'num_canaries', f'{_count(canaries)} of the {_count(cohort)} expected '
        f'participants per round ({100 * canaries / cohort:.4g}%) would be '
        f'canaries, more than the {MAX_CANARY_SHARE:.0%} a run may have (the '
        'paper: 1,000 canaries among 341k clients); use fewer canaries, more '
        'rounds or more clients per round')
