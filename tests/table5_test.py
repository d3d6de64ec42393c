"""Tests for experiments/table5.py (one run vs several runs, Section 5.3).

The end-to-end run of Table 5 is in reproduce_test; here the experiment
layout (independent seeds, canary counts, run directories), the argument
checks, the pooled estimate and the quantile table are checked directly.
"""

import numpy as np
import pytest

from experiments import table5
from experiments import train_config
from one_shot_epe.stats import estimation


def _base(**overrides):
  settings = dict(task='emnist_character', use_synthetic_data=True,
                  total_rounds=4, num_canaries=16, num_unseen_canaries=16,
                  canary_repeats=2, seed=3, canary_seed=5)
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


def test_experiments_layout():
  found = table5.experiments(_base(), [0.0, 0.2], num_experiments=3,
                             num_runs=4, output_dir='/out')
  assert len(found) == 2 * 2 * 3
  for noise in (0.0, 0.2):
    mine = [e for e in found if e.noise_multiplier == noise]
    single = [e for e in mine if e.arm == '1/16']
    split = [e for e in mine if e.arm == '4/4']
    assert [e.index for e in single] == [e.index for e in split] == [0, 1, 2]
    assert all(len(e.configs) == 1 for e in single)
    assert all(len(e.configs) == 4 for e in split)
    configs = [c for e in mine for c in e.configs]
    # Every run of a noise level is independent: its own seeds.
    assert len({c.seed for c in configs}) == len(configs) == 15
    assert len({c.canary_seed for c in configs}) == 15
    assert {c.num_canaries for e in single for c in e.configs} == {16}
    assert {c.num_canaries for e in split for c in e.configs} == {4}
    for config in configs:
      assert config.noise_multiplier == noise
      assert (config.num_unseen_canaries, config.canary_repeats) == (0, 1)
      assert config.root_output_dir == '/out/table5'
  names = [c.run_name for e in found for c in e.configs]
  assert len(set(names)) == len(names)


@pytest.mark.parametrize('kwargs, flag', [
    (dict(num_experiments=0, num_runs=2), '--table5_experiments'),
    (dict(num_experiments=True, num_runs=2), '--table5_experiments'),
    (dict(num_experiments=1, num_runs=1), '--table5_runs'),
    (dict(num_experiments=1, num_runs=3), '--table5_runs'),  # 16 % 3 != 0.
    (dict(num_experiments=1, num_runs=16), '--table5_runs'),  # 1 per run.
])
def test_bad_arguments_name_the_flag(kwargs, flag):
  with pytest.raises(train_config.ConfigError, match=flag):
    table5.experiments(_base(), [0.0], output_dir='/out', **kwargs)


def test_pooled_epsilon_is_the_estimate_of_the_concatenation():
  rng = np.random.default_rng(0)
  parts = [rng.normal(0.01, 0.002, size=50) for _ in range(3)]
  assert table5.pooled_epsilon(parts, 10_000, 1e-5) == (
      estimation.epsilon_from_final_cosines(np.concatenate(parts), 10_000,
                                            1e-5))


def test_table_lists_the_quantiles():
  text = table5.table({(0.05, '1/1000'): [5.0, 1.0, 3.0, 2.0, 4.0],
                       (0.05, '10/100'): [2.0, 2.0]})
  lines = text.splitlines()
  assert lines[0] == ('| noise | runs/canaries | q0.1 | q0.3 | q0.5 | q0.7 | '
                      'q0.9 | experiments |')
  # numpy's linear quantiles of 1..5: 1.4, 2.2, 3, 3.8, 4.6.
  assert lines[2] == '| 0.05 | 1/1000 | 1.4 | 2.2 | 3 | 3.8 | 4.6 | 5 |'
  assert lines[3] == '| 0.05 | 10/100 | 2 | 2 | 2 | 2 | 2 | 2 |'
