"""benchmarks.coverage under DP-FTRL's correlated noise: simulated truth.

The strategies are jax-privacy's (`make test-jax`). Every labelled bound
exceeds its threat model's true eps in at most alpha + 2 standard errors of
the runs; the final-model and decorrelated all-iterates headline estimates,
whose truths are Gaussian, are within 10% of them; the raw per-round
statistic, weaker under correlated noise, stays below its truth.
"""

import importlib.util

import pytest

from benchmarks import coverage_cells
from benchmarks import gaussian_scores

# Collected everywhere, run where jax-privacy is installed.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec('jax_privacy') is None,
    reason='jax-privacy is not installed here (.venv-jax: make test-jax).')


@pytest.mark.parametrize('mechanism', ['blt', 'banded'])
def test_bounds_hold_and_gaussian_truths_are_met(mechanism):
  # Imported here: its absl flags (--dim) would clash at collection with
  # those of one_shot_epe.reporting.epsilon_cli, which other test modules import.
  from benchmarks import coverage  # pylint: disable=g-import-not-at-top
  strategy = gaussian_scores.strategy_matrix(mechanism, rounds=8)
  table = coverage.simulate_correlated(
      [3.0], runs=30, dim=10_000, canaries=400, strategy=strategy,
      delta=1e-5, alpha=0.05, seed=1)
  for threat, rows in table.items():
    row = rows['3']
    for name in coverage_cells.BOUNDS:
      assert row[name]['holds'], (threat, name, row[name])
    if threat == 'all':
      assert row['epsilon_est']['mean_ratio'] < 0.9
    else:
      assert row['epsilon_est']['mean_ratio'] == pytest.approx(1.0, abs=0.1)
  assert table['final']['3']['truth']['epsilon'] < 3.0
