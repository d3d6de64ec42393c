"""benchmarks.coverage under the distributed discrete Gaussian: known truth.

The truth (`benchmarks.discrete_gaussian.discrete_gaussian_epsilon`, from
dp_accounting's discrete Gaussian privacy loss) is checked against a brute
force over the exact law of the privacy loss for a small integer canary and
against the continuous Gaussian at a large sigma; the sampler against the
exact variance; and a small coverage run of the benchmark, in a subprocess
(its absl flags clash with one_shot_epe.reporting.epsilon_cli's in one process), keeps
every labelled bound at its level (Sections 3.1 and 3.2 of the paper).
"""

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import discrete_gaussian
from one_shot_epe.stats import estimation

_ROOT = pathlib.Path(__file__).resolve().parent.parent
# benchmarks.coverage_cells.BOUNDS: the bounds the report labels as holding.
_BOUNDS = ('epsilon_lo', 'epsilon_one_run', 'epsilon_one_run_fdp')


def _brute_force_epsilon(sensitivity: list[int], sigma: float,
                         delta: float) -> float:
  """eps at delta from the exact law of W = <x, z>, x ~ N_Z(0, sigma^2 I).

  The privacy loss of inserting z is (2 W + ||z||^2) / (2 sigma^2) under
  the inserted world and (2 W - ||z||^2) / (2 sigma^2) without it, so
  delta(eps) = P[W > sigma^2 eps - ||z||^2 / 2]
               - e^eps P[W > sigma^2 eps + ||z||^2 / 2].
  """
  support, pmf = discrete_gaussian.discrete_gaussian_pmf(sigma)
  low, law = 0, np.ones(1)
  for value in sensitivity:
    spread = np.zeros(value * (support.size - 1) + 1)
    spread[::value] = pmf
    law = np.convolve(law, spread)
    low += value * int(support[0])
  values = low + np.arange(law.size)
  norm2 = float(sum(v * v for v in sensitivity))

  def divergence(epsilon: float) -> float:
    upper = law[values > sigma**2 * epsilon - norm2 / 2].sum()
    lower = law[values > sigma**2 * epsilon + norm2 / 2].sum()
    return float(upper - math.exp(epsilon) * lower)

  low_eps, high_eps = 0.0, 100.0
  for _ in range(100):
    middle = (low_eps + high_eps) / 2
    if divergence(middle) > delta:
      low_eps = middle
    else:
      high_eps = middle
  return high_eps


@pytest.mark.parametrize('sensitivity,sigma', [([1, 2, 1, 3], 1.0),
                                               ([1, 1], 0.6), ([2], 0.8)])
def test_truth_matches_brute_force(sensitivity, sigma):
  delta = 1e-5
  truth = discrete_gaussian.discrete_gaussian_epsilon(sensitivity, sigma,
                                                      delta)
  exact = _brute_force_epsilon(sensitivity, sigma, delta)
  assert truth == pytest.approx(exact, rel=2e-3, abs=2e-3)
  assert truth >= exact - 1e-9  # connect-the-dots is an upper bound


def test_small_sigma_differs_from_gaussian_and_large_sigma_meets_it():
  delta = 1e-5
  # sigma = 0.6 per coordinate: the lattice matters, the eps is not the
  # continuous Gaussian's at the same ratio.
  small = discrete_gaussian.discrete_gaussian_epsilon([1, 1], 0.6, delta)
  assert abs(small - estimation.gaussian_epsilon(0.6 / math.sqrt(2),
                                                 delta)) > 0.1
  rng = np.random.default_rng(0)
  rounded = discrete_gaussian.stochastic_round(
      rng, 3.0 * math.sqrt(400) * discrete_gaussian.unit_directions(
          rng, 1, 400)[0])
  norm = float(np.linalg.norm(rounded))
  for epsilon in (1.0, 5.0):
    sigma = norm * estimation.gaussian_sigma(epsilon, delta)
    assert discrete_gaussian.discrete_gaussian_epsilon(
        rounded, sigma, delta) == pytest.approx(epsilon, rel=1e-3)


def test_sampler_variance_and_rounding_are_exact():
  rng = np.random.default_rng(1)
  support, pmf = discrete_gaussian.discrete_gaussian_pmf(0.7)
  variance = float(pmf @ support.astype(float) ** 2)
  draws = discrete_gaussian.sample_discrete_gaussian(rng, 0.7, 400_000)
  assert np.all(draws == np.round(draws))
  assert draws.mean() == pytest.approx(0.0, abs=0.01)
  assert draws.var() == pytest.approx(variance, rel=0.02)
  assert variance < 0.7**2  # not the continuous Gaussian's
  values = np.full(200_000, 2.3)
  rounded = discrete_gaussian.stochastic_round(rng, values)
  assert set(np.unique(rounded)) == {2.0, 3.0}
  assert rounded.mean() == pytest.approx(2.3, abs=0.01)
  with pytest.raises(ValueError, match='sigma'):
    discrete_gaussian.discrete_gaussian_epsilon([1], 0.0, 1e-5)
  with pytest.raises(ValueError, match='integer'):
    discrete_gaussian.discrete_gaussian_epsilon([1.5], 1.0, 1e-5)


def test_coverage_run_keeps_bounds_at_level(tmp_path):
  output = tmp_path / 'coverage.json'
  result = subprocess.run(
      [sys.executable, '-m', 'benchmarks.coverage',
       '--mechanism=discrete_gaussian', '--epsilons=3', '--runs=12',
       '--dim=3000', '--canaries=120', '--rounds=8', '--dg_scale=2',
       '--delta=1e-5', '--seed=3', f'--json={output}'],
      capture_output=True, text=True, check=False, timeout=120, cwd=_ROOT)
  assert result.returncode == 0, result.stderr
  table = json.loads(output.read_text())
  for threat in ('final', 'all'):
    row = table[threat]['3']
    for name in _BOUNDS:
      assert row[name]['holds'], (threat, name, row[name])
    assert row['truth']['epsilon'] == pytest.approx(
        row['truth']['gaussian_epsilon'], rel=1e-3)
    assert row['truth']['epsilon'] == pytest.approx(3.0, rel=0.05)
  assert 0.75 < table['final']['3']['epsilon_est']['mean_ratio'] < 1.1
  assert table['all']['3']['epsilon_est']['mean_ratio'] < 0.9


def test_bad_scale_names_the_flag():
  result = subprocess.run(
      [sys.executable, '-m', 'benchmarks.coverage',
       '--mechanism=discrete_gaussian', '--dg_scale=0', '--runs=1'],
      capture_output=True, text=True, check=False, timeout=60, cwd=_ROOT)
  assert result.returncode == 2
  assert '--dg_scale' in result.stderr
