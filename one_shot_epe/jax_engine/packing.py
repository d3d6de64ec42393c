"""Packs a round's clients into lanes of batches for the 'vmap' round (numpy).

Padding every client slot to the round's largest client costs 1.8-2.9x the
real local steps on realistic EMNIST and StackOverflow client sizes. A lane
instead carries several clients back to back (`fedavg.packed_round` resets
the model and client optimizer at each client's first batch), so the padded
work is the lanes' empty tail batches only. Lanes are filled by
first-fit-decreasing bin packing; the lane length is the smallest one (the
most lanes, so the most parallelism) whose padded work stays within a bound.

A run compiles its round once (`run_lanes`, `run_layout`): the number of lanes is fixed
for the whole run, the most whose padded work over the run's rounds stays
within the bound, and each round's lanes are only as long as its clients
need at that width (`lane_capacity`: the round's loop trip count), up to the
run's longest. The bound is on processed over real examples (what
`run_stats.RunStats` and `benchmarks.paper_scale` report) when the rounds'
examples are given: a client's partial last batch is padding too (3.8% of
an EMNIST round's batches), so a bound on batches alone let a run process
1.143 x 1.038 = 1.19x its examples. Where partial batches dominate (small
clients), `run_layout` also cuts batches into micro-batches: the counts
these functions pack are then micro-batches.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from one_shot_epe import validation

__all__ = ['MAX_PADDING_RATIO', 'RunLayout', 'first_fit_decreasing',
           'lane_capacity', 'lane_layout', 'padding_ratio', 'run_lanes',
           'run_layout']
# Rounds `run_lanes` samples to choose a run's lane count.
_SAMPLED_ROUNDS = 512

# The padded/real local steps `lane_layout` allows by default.
MAX_PADDING_RATIO = 1.15


def first_fit_decreasing(batch_counts: Sequence[int],
                         lane_batches: int) -> list[list[int]]:
  """Clients (indices into batch_counts) of each lane, FFD bin packing.

  Clients are taken largest first (ties in index order) and each goes into
  the first lane with room for all its batches, or a new lane.

  Args:
    batch_counts: each client's local batches (>= 0 each).
    lane_batches: the lane length, the most batches a lane holds (>= 1).

  Returns:
    The lanes, in the order opened, each a list of client indices in the
    order placed; every client is in exactly one lane.

  Raises:
    ValueError: a client needs more than `lane_batches` batches.
  """
  lane_batches = validation.check_int('lane_batches', lane_batches, low=1)
  counts = np.asarray(batch_counts, np.int64)
  if counts.size and counts.max() > lane_batches:
    raise ValueError(f'lane_batches must be >= {int(counts.max())}, the '
                     f'batches of the largest client; got {lane_batches}.')
  lanes: list[list[int]] = []
  free: list[int] = []
  for client in np.argsort(-counts, kind='stable'):
    need = int(counts[client])
    lane = next((i for i, room in enumerate(free) if room >= need), None)
    if lane is None:
      lanes.append([])
      free.append(lane_batches)
      lane = len(lanes) - 1
    lanes[lane].append(int(client))
    free[lane] -= need
  return lanes


def padding_ratio(batch_counts: Sequence[int], num_lanes: int,
                  lane_batches: int) -> float:
  """Batches processed (num_lanes x lane_batches) over the real batches.

  Args:
    batch_counts: each client's local batches (the real work).
    num_lanes: the lane count.
    lane_batches: the lane length in batches.

  Returns:
    num_lanes x lane_batches / max(sum(batch_counts), 1): 1 without
    padding, more with it.
  """
  real = int(np.sum(batch_counts))
  return num_lanes * lane_batches / max(real, 1)


def lane_layout(batch_counts: Sequence[int], *, min_lane_batches: int = 1,
                lane_multiple: int = 1,
                max_ratio: float = MAX_PADDING_RATIO
                ) -> tuple[list[list[int]], int]:
  """(clients of each lane, lane length in batches) for a round.

  The smallest lane length >= max(min_lane_batches, largest client) whose
  first-fit-decreasing packing, with the lane count rounded up to a multiple
  of `lane_multiple` (devices), processes at most `max_ratio` times the real
  batches; if none does, the one with the least padding (shortest first).
  Empty lanes pad the count to the multiple.

  Args:
    batch_counts: local batches of every client of the round (>= 1 each; a
      client without examples still takes one masked batch).
    min_lane_batches: lower bound on the lane length.
    lane_multiple: the lane count is a multiple of this.
    max_ratio: the bound on processed / real batches (>= 1).

  Returns:
    (the lanes, each a list of client indices, empty lanes last; the lane
    length in batches).

  Raises:
    ValueError: a count < 1, `lane_multiple` or `min_lane_batches` < 1, or
      `max_ratio` < 1.
  """
  counts = np.asarray(batch_counts, np.int64)
  if counts.size and counts.min() < 1:
    raise ValueError(f'batch_counts must be >= 1; got {counts.tolist()}.')
  lane_multiple = validation.check_int('lane_multiple', lane_multiple, low=1)
  if max_ratio < 1:
    raise ValueError(f'max_ratio must be >= 1; got {max_ratio}.')
  total = int(counts.sum())
  length = max(validation.check_int('min_lane_batches', min_lane_batches,
                                    low=1), int(counts.max(initial=1)))
  best = None
  while True:
    lanes = first_fit_decreasing(counts, length)
    num_lanes = -(-max(len(lanes), 1) // lane_multiple) * lane_multiple
    ratio = padding_ratio(counts, num_lanes, length)
    if best is None or ratio < best[0]:
      best = (ratio, lanes + [[] for _ in range(num_lanes - len(lanes))],
              length)
    if ratio <= max_ratio or length >= total:
      return best[1], best[2]
    length += 1


def lane_capacity(batch_counts: Sequence[int], num_lanes: int) -> int:
  """The shortest lane length whose first-fit-decreasing packing of
  `batch_counts` takes at most `num_lanes` lanes (>= the largest client).

  Args:
    batch_counts: each client's local batches (>= 0 each).
    num_lanes: the lane count, >= 1.

  Returns:
    The lane length in batches: at least the largest client (1 without
    clients) and ceil(total / num_lanes); the round's loop trip count.

  Raises:
    ValueError: `num_lanes` < 1.
  """
  counts = np.asarray(batch_counts, np.int64)
  num_lanes = validation.check_int('num_lanes', num_lanes, low=1)
  length = max(int(counts.max(initial=1)),
               -(-int(counts.sum()) // num_lanes))
  while len(first_fit_decreasing(counts, length)) > num_lanes:
    length += 1
  return length


class RunLayout(NamedTuple):
  """A run's compiled 'vmap' layout (`run_layout`).

  Attributes:
    micro_batch: examples per local step; it divides the batch size, and a
      batch of more takes its step after its micro-batches' gradients add up
      (`fedavg.packed_round`).
    lanes: the lane count.
    lane_length: the longest lane, in micro-batches.
  """
  micro_batch: int
  lanes: int
  lane_length: int


def run_layout(round_examples: Sequence[Sequence[int]], batch_size: int, *,
               lane_multiple: int = 1,
               max_ratio: float = MAX_PADDING_RATIO) -> RunLayout:
  """The micro-batch and lanes of a run's rounds: the fewest sequential steps.

  A client's partial last batch is padding at full batch size; a round of
  small clients (Shakespeare's roles: median 13 examples, batches of 16)
  pads 1.33x whatever its lanes. Cutting batches into micro-batches of m
  (a divisor of the batch size) pads each client to a multiple of m
  instead, at the price of b / m steps per full batch. For every m, the
  lanes are `run_lanes`' (bounded on processed / real examples); the m
  whose rounds then loop over the fewest micro-batches in all, among those
  within `max_ratio`, wins (ties: the larger m; none within it: the least
  padding). Whole batches (m = batch size) win on EMNIST's and
  StackOverflow's client sizes, micro-batches of 4 on Shakespeare's
  (`benchmarks/packing.py`).

  Args:
    round_examples: each round's clients' examples (>= 0 each).
    batch_size: examples per batch.
    lane_multiple: the lane count is a multiple of this (devices).
    max_ratio: the bound on processed / real examples (>= 1).

  Returns:
    The run's layout.

  Raises:
    ValueError: `batch_size` or `lane_multiple` < 1, or `max_ratio` < 1.
  """
  batch_size = validation.check_int('batch_size', batch_size, low=1)
  rounds = [np.asarray(e, np.int64) for e in round_examples] or [
      np.zeros(1, np.int64)]
  step = max(1, len(rounds) // _SAMPLED_ROUNDS)
  real = max(float(sum(e.sum() for e in rounds[::step])), 1.0)
  best = None
  for micro in (m for m in range(batch_size, 0, -1) if batch_size % m == 0):
    counts = [np.maximum(-(-e // micro), 1) for e in rounds]
    lanes, length = run_lanes(counts, lane_multiple=lane_multiple,
                              max_ratio=max_ratio,
                              real_batches=[max(e.sum(), 1) / micro
                                            for e in rounds])
    steps = sum(lane_capacity(c, lanes) for c in counts[::step])
    ratio = lanes * steps * micro / real
    # Within the bound first, then the fewest steps, then the least padding.
    rank = (ratio > max_ratio, steps if ratio <= max_ratio else ratio)
    if best is None or rank < best[0]:
      best = (rank, RunLayout(micro, lanes, length))
  return best[1]


def run_lanes(round_counts: Sequence[Sequence[int]], *, lane_multiple: int = 1,
              max_ratio: float = MAX_PADDING_RATIO,
              real_batches: Sequence[float] | None = None
              ) -> tuple[int, int]:
  """(lanes, longest lane length) of a run whose rounds have `round_counts`.

  The lane count is the largest multiple of `lane_multiple` whose padded
  work over the rounds, sum of lanes x `lane_capacity`, is at most
  `max_ratio` times their real work (the fewest lanes if none is),
  assuming padding grows with the lanes; it is chosen on at most 512 of the
  rounds, evenly spaced. The length is the longest any round needs at that
  count: every round fits one compiled layout.

  Args:
    round_counts: each round's clients' local batches (>= 1 each).
    lane_multiple: the lane count is a multiple of this (devices).
    max_ratio: the bound on processed / real work (>= 1).
    real_batches: each round's real work in batches, its examples over the
      batch size, so the bound is on processed / real examples; None: the
      round's batches (`round_counts`' sums: partial last batches count as
      real).

  Returns:
    (the lane count, the longest lane length in batches).

  Raises:
    ValueError: `lane_multiple` < 1, `max_ratio` < 1, or `real_batches`
      not one positive number per round.
  """
  lane_multiple = validation.check_int('lane_multiple', lane_multiple, low=1)
  if max_ratio < 1:
    raise ValueError(f'max_ratio must be >= 1; got {max_ratio}.')
  rounds = [np.asarray(c, np.int64) for c in round_counts] or [
      np.ones(1, np.int64)]
  if real_batches is None:
    work = [float(c.sum()) for c in rounds]
  else:
    work = [float(w) for w in real_batches]
    if len(work) != len(round_counts) or min(work, default=1.0) <= 0:
      raise ValueError('real_batches must be one positive number per round '
                       f'({len(round_counts)}); got {len(work)}.')
    work = work or [1.0]
  step = max(1, len(rounds) // _SAMPLED_ROUNDS)
  sampled = rounds[::step]
  real = max(sum(work[::step]), 1e-9)

  def ratio(num_lanes: int) -> float:
    return sum(num_lanes * lane_capacity(c, num_lanes)
               for c in sampled) / real

  # The most lanes worth having: one per client of the largest round.
  low, high = 1, max(1, -(-max(c.size for c in rounds) // lane_multiple))
  while low < high:  # The largest multiple within the bound.
    middle = (low + high + 1) // 2
    if ratio(middle * lane_multiple) <= max_ratio:
      low = middle
    else:
      high = middle - 1
  num_lanes = low * lane_multiple
  return num_lanes, max(lane_capacity(c, num_lanes) for c in rounds)
