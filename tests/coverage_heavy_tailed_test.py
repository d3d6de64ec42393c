"""benchmarks.coverage's out-of-family cells: Laplace and Gaussian-mixture noise
(benchmarks.heavy_tailed).

The truths are checked against independent ones (the Gaussian mechanism's
exact eps of Balle and Wang when the mixture's two scales are equal;
dp_accounting's Laplace privacy loss distribution), and a small simulation
shows the channel bound, valid for every (eps, delta)-DP mechanism, below
the truth.
"""

import pytest

from benchmarks import heavy_tailed
from one_shot_epe.stats import estimation


def test_mixture_with_equal_scales_is_the_gaussian_mechanism():
  for scale in (0.3, 1.0, 4.0):
    assert heavy_tailed.mixture_epsilon(
        scale, 1e-6, ratio=1.0) == pytest.approx(
            estimation.gaussian_epsilon(scale, 1e-6), rel=1e-5)


def test_mixture_scale_meets_its_epsilon():
  scale = heavy_tailed.mixture_scale(3.0, 1e-6)
  assert heavy_tailed.mixture_epsilon(scale, 1e-6) == pytest.approx(
      3.0, rel=1e-6)
  # Its narrow half alone would be far less private: the tails of the wide
  # half, not a Gaussian's, set eps at delta = 1e-6.
  assert estimation.gaussian_epsilon(scale, 1e-6) > 6.0


def test_laplace_scale_is_dp_accountings_truth():
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  for epsilon in (1.0, 3.0, 10.0):
    scale = heavy_tailed.laplace_scale(epsilon, 1e-6)
    truth = privacy_loss_distribution.from_laplace_mechanism(
        scale, sensitivity=1.0,
        value_discretization_interval=1e-5).get_epsilon_for_delta(1e-6)
    assert truth == pytest.approx(epsilon, rel=1e-6)


@pytest.mark.parametrize('mechanism', ['laplace', 'mixture'])
def test_channel_bound_stays_below_the_truth(mechanism):
  # Imported here: its absl flags (--dim) would clash at collection with
  # those of one_shot_epe.reporting.epsilon_cli, which other test modules import.
  from benchmarks import coverage  # pylint: disable=g-import-not-at-top
  table = coverage.simulate_heavy_tailed(
      mechanism, [3.0], runs=4, dim=10_000, canaries=300, delta=1e-6,
      alpha=0.05, seed=0)
  row = table[mechanism]['3']
  assert row['truth']['epsilon'] == pytest.approx(3.0, rel=1e-5)
  assert row['epsilon_lo_tight_any']['share_above_truth'] == 0.0
  assert 0.0 < row['epsilon_lo_tight_any']['mean'] < 3.0
