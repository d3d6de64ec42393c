"""Padding of the 'vmap' round: one slot per client vs packed client lanes.

For the realistic client-size laws of EMNIST and StackOverflow
(`client_arrays.client_sizes(..., 'realistic')`, means of the real training
splits: 198 and 397 examples per client, batches of 16, one epoch, no
per-client example cap: the paper, Sec. 5.1-5.2, states none), and cohorts of
10, 40, 101 and 167 clients, prints the processed / real local batches of

* per-slot: every client slot padded to the round's largest client (the
  'vmap' round before packing; the baseline, computed in the same run);
* packed: `packing.lane_layout` (first-fit-decreasing lanes, bound 1.15),

the mean over seeds, the packed lane count and length, and packed / per-slot.
Real batches are the batches each client needs (at full batch size).

  python -m benchmarks.packing [seeds]
"""

import sys

import numpy as np

from one_shot_epe import client_arrays
from one_shot_epe.jax_engine import packing

_MEAN_EXAMPLES = {'emnist': 198, 'stackoverflow': 397}
_BATCH_SIZE = 16
_COHORTS = (10, 40, 101, 167)


def main(argv: list[str]) -> None:
  """Prints the padding of both layouts per kind and cohort; argv[1]: seeds."""
  seeds = int(argv[1]) if len(argv) > 1 else 10
  print(f'{"kind":<14}{"cohort":>7}{"per-slot":>10}{"packed":>8}'
        f'{"lanes":>7}{"length":>8}{"packed/per-slot":>17}')
  for kind, mean in _MEAN_EXAMPLES.items():
    for cohort in _COHORTS:
      slot_ratios, packed_ratios, shapes = [], [], []
      for seed in range(seeds):
        sizes = client_arrays.client_sizes(kind, cohort, mean, 'realistic',
                                           seed)
        counts = np.maximum(-(-sizes // _BATCH_SIZE), 1)
        lanes, length = packing.lane_layout(counts)
        slot_ratios.append(cohort * counts.max() / counts.sum())
        packed_ratios.append(
            packing.padding_ratio(counts, len(lanes), length))
        shapes.append((len(lanes), length))
      slot, packed = np.mean(slot_ratios), np.mean(packed_ratios)
      lanes, length = np.mean(shapes, axis=0)
      print(f'{kind:<14}{cohort:>7}{slot:>10.2f}{packed:>8.3f}'
            f'{lanes:>7.1f}{length:>8.1f}{packed / slot:>17.3f}')


if __name__ == '__main__':
  main(sys.argv)
