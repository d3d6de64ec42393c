"""Padding of the 'vmap' round: one slot per client vs packed client lanes.

For the realistic client-size laws of EMNIST and StackOverflow
(`client_arrays.client_sizes(..., 'realistic')`, means of the real training
splits: 198 and 397 examples per client, batches of 16, one epoch, no
per-client example cap: the paper, Sec. 5.1-5.2, states none), and cohorts of
10, 40, 101 and 167 clients, prints the processed / real local batches of

* per-slot: every client slot padded to the round's largest client (the
  'vmap' round before packing; the baseline, computed in the same run);
* packed: `packing.lane_layout` (first-fit-decreasing lanes, bound 1.15),
  a fresh layout per round;
* run: the seeds' rounds as the rounds of one run, compiled once: the run's
  micro-batch and lane count (`packing.run_layout`, bounded on processed /
  real examples), each round's lanes only as long as it needs
  (`packing.lane_capacity`), as the JAX engine runs them; 'run ex.' is its
  processed over real examples (what `run_stats.RunStats` reports, partial
  last batches included), 'micro' its micro-batch;

the mean over seeds, the packed lane count and length, and packed / per-slot.
Real batches are the batches each client needs (at full batch size).

  python -m benchmarks.packing [seeds] [--tiny]

--tiny (benchmarks/tiny.py): one seed, cohorts of 10 only.
"""

import dataclasses
import sys
from collections.abc import Sequence

import numpy as np

from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import packing

_MEAN_EXAMPLES = {'emnist': 198, 'stackoverflow': 397}
_BATCH_SIZE = 16
_COHORTS = (10, 40, 101, 167)


@dataclasses.dataclass(frozen=True)
class CohortLayout:
  """A round's local batches under both layouts (one cohort, one seed).

  Attributes:
    examples: the real examples of the round's clients.
    batches: the batches they need (at full batch size; per-client partial
      last batches included): what 'loop' local training processes.
    per_slot_batches: every client slot padded to the largest client.
    lanes, lane_batches: the packed layout (`packing.lane_layout`), lanes
      of `lane_batches` micro-batches.
    micro_batch: the examples of a local step (`packing.run_layout`; the
      batch size for a layout of whole batches).
  """
  examples: int
  batches: int
  per_slot_batches: int
  lanes: int
  lane_batches: int
  micro_batch: int = _BATCH_SIZE

  @property
  def packed_examples(self) -> int:
    """Examples the packed lanes process (lanes x length x micro-batch)."""
    return self.lanes * self.lane_batches * self.micro_batch


def cohort_counts(kind: str, cohort: int, mean: int, seed: int,
                  batch_size: int = _BATCH_SIZE,
                  max_examples: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
  """(examples, local batches) of a round of `cohort` realistic clients.

  Args:
    kind: the client-size law, 'emnist' or 'stackoverflow'.
    cohort: the round's clients, >= 1.
    mean: the law's mean examples per client.
    seed: the draw's seed (`client_arrays.client_sizes`).
    batch_size: examples per local batch, >= 1.
    max_examples: the most examples a client uses (None: no cap).

  Returns:
    (examples, local batches), int arrays [cohort]: each client's examples
    (`client_arrays.client_sizes(kind, cohort, mean, 'realistic', seed)`,
    capped) and ceil(examples / batch_size), at least 1.
  """
  sizes = client_arrays.client_sizes(kind, cohort, mean, 'realistic', seed)
  if max_examples is not None:
    sizes = np.minimum(sizes, max_examples)
  return sizes, np.maximum(-(-sizes // batch_size), 1)


def cohort_layout(kind: str, cohort: int, mean: int, seed: int,
                  batch_size: int = _BATCH_SIZE,
                  max_examples: int | None = None) -> CohortLayout:
  """Both layouts of one round (`cohort_counts`), packed afresh.

  Args:
    kind: the client-size law, 'emnist' or 'stackoverflow'.
    cohort: the round's clients, >= 1.
    mean: the law's mean examples per client.
    seed: the draw's seed.
    batch_size: examples per local batch, >= 1.
    max_examples: the most examples a client uses (None: no cap).

  Returns:
    The round's per-slot and packed (`packing.lane_layout`, whole
    batches) layouts.
  """
  sizes, counts = cohort_counts(kind, cohort, mean, seed, batch_size,
                                max_examples)
  lanes, length = packing.lane_layout(counts)
  return CohortLayout(examples=int(sizes.sum()), batches=int(counts.sum()),
                      per_slot_batches=int(cohort * counts.max()),
                      lanes=len(lanes), lane_batches=length)


def run_layouts(kind: str, cohort: int, mean: int, seeds: Sequence[int],
                batch_size: int = _BATCH_SIZE,
                max_examples: int | None = None) -> list[CohortLayout]:
  """The seeds' rounds (`cohort_counts`) laid out as one run's rounds.

  As `layouts_of`.

  Args:
    kind: the client-size law, 'emnist' or 'stackoverflow'.
    cohort: each round's clients, >= 1.
    mean: the law's mean examples per client.
    seeds: one seed per round, in round order.
    batch_size: examples per local batch, >= 1.
    max_examples: the most examples a client uses (None: no cap).

  Returns:
    The rounds' layouts, one per seed, in order.
  """
  return layouts_of([
      cohort_counts(kind, cohort, mean, seed, batch_size, max_examples)
      for seed in seeds], batch_size)


def layouts_of(drawn: Sequence[tuple[np.ndarray, np.ndarray]],
               batch_size: int) -> list[CohortLayout]:
  """Rounds of given (examples, local batches) per client as one run's.

  One micro-batch and lane count for all (`packing.run_layout`, its bound
  on processed over real examples), each round's lanes as long as its
  clients need at that count (`packing.lane_capacity`).

  Args:
    drawn: per round, each client's examples and local batches.
    batch_size: the examples of a full batch.

  Returns:
    The rounds' layouts, in order.
  """
  layout = packing.run_layout([sizes for sizes, _ in drawn], batch_size)
  micro = layout.micro_batch
  return [CohortLayout(examples=int(sizes.sum()), batches=int(counts.sum()),
                       per_slot_batches=int(counts.size * counts.max()),
                       lanes=layout.lanes,
                       lane_batches=packing.lane_capacity(
                           np.maximum(-(-sizes // micro), 1), layout.lanes),
                       micro_batch=micro)
          for sizes, counts in drawn]


def main(argv: list[str]) -> None:
  """Prints the padding of both layouts per kind and cohort.

  Args:
    argv: `sys.argv`: the program's name, then optionally the number of
      seeds (rounds) per cohort (default 10, --tiny 1) and --tiny.
  """
  small = '--tiny' in argv[1:]
  numbers = [arg for arg in argv[1:] if arg != '--tiny']
  seeds = int(numbers[0]) if numbers else (1 if small else 10)
  print(f'{"kind":<14}{"cohort":>7}{"per-slot":>10}{"packed":>8}'
        f'{"lanes":>7}{"length":>8}{"packed/per-slot":>17}'
        f'{"run ex.":>9}{"run lanes":>11}{"micro":>7}')
  for kind, mean in _MEAN_EXAMPLES.items():
    for cohort in _COHORTS[:1] if small else _COHORTS:
      layouts = [cohort_layout(kind, cohort, mean, seed)
                 for seed in range(seeds)]
      slot = np.mean([l.per_slot_batches / l.batches for l in layouts])
      packed = np.mean([l.lanes * l.lane_batches / l.batches
                        for l in layouts])
      lanes = np.mean([l.lanes for l in layouts])
      length = np.mean([l.lane_batches for l in layouts])
      run = run_layouts(kind, cohort, mean, range(seeds))
      run_examples = (sum(l.packed_examples for l in run) /
                      sum(l.examples for l in run))
      print(f'{kind:<14}{cohort:>7}{slot:>10.2f}{packed:>8.3f}'
            f'{lanes:>7.1f}{length:>8.1f}{packed / slot:>17.3f}'
            f'{run_examples:>9.3f}{run[0].lanes:>11}{run[0].micro_batch:>7}')


if __name__ == '__main__':
  main(sys.argv)
