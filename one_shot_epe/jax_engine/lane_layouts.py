"""The lanes of each 'vmap' round: a fixed layout, a compiled one, or a new one.

`round_engine.RoundEngine` runs a round's clients packed back to back into
lanes (`packing`, `packed_batches`), and each (lanes, lane length) layout is
one compiled computation. `LaneLayouts` keeps the layouts compiled so far and
the one `fix` sets for every later round, and gives each round, or each run
of a program, its lanes in one layout (`choose`): the fixed layout, looping
only over the batches its clients need at that width; else a compiled layout
they fit at no more padded work than one slot per client; else a new one.
"""

from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.jax_engine import packing

__all__ = ['LaneLayouts', 'round_up']


def round_up(count: int, multiple: int) -> int:
  """The least multiple of `multiple` that is >= max(count, 1).

  Args:
    count: what is to be covered, >= 0 (0 counts as 1): clients or lanes.
    multiple: the step, >= 1: the devices the client axis is spread over.

  Returns:
    The least positive multiple of `multiple` not below `count`.
  """
  return -(-max(count, 1) // multiple) * multiple


class LaneLayouts:
  """The (lanes, lane length) layouts of an engine's 'vmap' rounds.

  Args:
    num_devices: the devices the lanes are spread over; every layout has a
      multiple of them as its number of lanes.
  """

  def __init__(self, num_devices: int):
    self._num_devices = num_devices
    self._compiled: set[tuple[int, int]] = set()
    self._fixed: tuple[int, int] | None = None

  def fix(self, num_lanes: int, lane_batches: int) -> None:
    """Every later round in `num_lanes` lanes of at most `lane_batches`.

    Args:
      num_lanes: lanes of every later round, >= 1, a multiple of the devices.
      lane_batches: the most (micro-)batches of a lane, >= 1.

    Raises:
      ValueError: `num_lanes` or `lane_batches` is below 1, or `num_lanes`
        is not a multiple of the devices.
    """
    num_lanes = validation.check_int('num_lanes', num_lanes, low=1)
    if num_lanes % self._num_devices:
      raise ValueError(f'num_lanes must be a multiple of the '
                       f'{self._num_devices} devices; got {num_lanes}.')
    self._fixed = (num_lanes,
                   validation.check_int('lane_batches', lane_batches, low=1))

  def choose(self, runs: Sequence[data.RoundBatches | data.RoundRows]
             ) -> tuple[list[list[list[int]]], int, int]:
    """Each run's lanes in one layout: a compiled one if they fit, else new.

    With `fix`, that layout, its lanes only as long as the longest run's
    clients need at its width (`packing.lane_capacity`). Otherwise a
    compiled (lanes, lane length) is reused, smallest first, when every
    run's clients fit it (first-fit-decreasing) with no more padded work
    than one slot per client padded to the round's batches would cost; else
    the longest of the runs' `packed_batches.packed_layout` lane lengths,
    with as many lanes as the runs need at that length (one more compile,
    remembered).

    Args:
      runs: each run's batches or rows for the round (one run: a round).

    Returns:
      (each run's slots of each lane, lane length, the batches each lane
      loops over); every run has the same number of lanes, a multiple of
      the devices.

    Raises:
      ValueError: a round's clients do not fit the fixed layout.
    """
    present = [np.flatnonzero(batches.client_mask > 0) for batches in runs]
    counts = [packed_batches.slot_batch_counts(batches) for batches in runs]
    budget = min(batches.example_mask.shape[0] * batches.example_mask.shape[1]
                 for batches in runs)

    def slots(lanes: list[list[int]], run: int,
              num_lanes: int) -> list[list[int]]:
      return ([[int(present[run][i]) for i in lane] for lane in lanes] +
              [[] for _ in range(num_lanes - len(lanes))])

    if self._fixed is not None:
      num_lanes, lane_batches = self._fixed
      steps = max(packing.lane_capacity(c, num_lanes) for c in counts)
      if steps > lane_batches:
        raise ValueError(f'the round needs lanes of {steps} batches; the '
                         f'fixed layout has {lane_batches} (fix_layout).')
      packed = [packing.first_fit_decreasing(c, steps) for c in counts]
      return ([slots(lanes, run, num_lanes)
               for run, lanes in enumerate(packed)], lane_batches, steps)
    for num_lanes, lane_batches in sorted(self._compiled,
                                          key=lambda s: s[0] * s[1]):
      if (max(c.max(initial=1) for c in counts) > lane_batches
          or num_lanes * lane_batches > budget):
        continue
      packed = [packing.first_fit_decreasing(c, lane_batches) for c in counts]
      if all(len(lanes) <= num_lanes for lanes in packed):
        return ([slots(lanes, run, num_lanes)
                 for run, lanes in enumerate(packed)], lane_batches,
                lane_batches)
    lane_batches = max(
        packed_batches.packed_layout(batches, self._num_devices)[1]
        for batches in runs)
    packed = [packing.first_fit_decreasing(c, lane_batches) for c in counts]
    num_lanes = round_up(max(len(lanes) for lanes in packed),
                         self._num_devices)
    self._compiled.add((num_lanes, lane_batches))
    return ([slots(lanes, run, num_lanes) for run, lanes in enumerate(packed)],
            lane_batches, lane_batches)
