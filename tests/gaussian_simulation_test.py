"""Tests for one_shot_epe.stats.gaussian_simulation and experiments.gaussian_mechanism.

Section 3 of the paper (Algorithm 1, Theorem 3.3, Table 2). Distributional
checks use two-sample Kolmogorov-Smirnov tests on statistics that are i.i.d.
across simulations (the first cosine g_1, and the per-simulation mean and ddof=0
std of the k cosines; cosines within one simulation share rho and are not
independent); comparisons of mean eps_est use Welch / one-sample t-tests. Every
test rejects at ALPHA = 1e-3 with fixed seeds.
"""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from experiments import gaussian_mechanism as table2
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_simulation as gm

ALPHA = 1e-3
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _brute_force_cosines(gaussians: np.ndarray, noise: np.ndarray,
                         sigma: float) -> np.ndarray:
  """Algorithm 1 on materialised vectors, batched: (r,k,d), (r,d) -> (r,k)."""
  canaries = gaussians / np.sqrt(np.sum(gaussians**2, axis=-1, keepdims=True))
  rho = canaries.sum(axis=1) + sigma * noise
  rho_norm = np.sqrt(np.sum(rho**2, axis=-1))
  return np.einsum('rkd,rd->rk', canaries, rho) / rho_norm[:, np.newaxis]


def _summaries(cosines: np.ndarray) -> dict[str, np.ndarray]:
  """Per-simulation statistics that are i.i.d. across simulations."""
  return {
      'first cosine': cosines[:, 0],
      'mean': cosines.mean(axis=1),
      'std': cosines.std(axis=1),
  }


def _assert_same_distribution(cosines_a: np.ndarray, cosines_b: np.ndarray):
  for name, sample_a in _summaries(cosines_a).items():
    sample_b = _summaries(cosines_b)[name]
    p_value = stats.ks_2samp(sample_a, sample_b).pvalue
    assert p_value > ALPHA, f'{name}: KS p-value {p_value:.2e} <= {ALPHA}'


def _simulate(num_simulations: int, seed: int, **kwargs) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return np.stack(
      [gm.simulate_cosines(rng=rng, **kwargs) for _ in range(num_simulations)])


class TestCosinesFromGaussians:

  @pytest.mark.parametrize('dim,num_vectors', [(40, 6), (4, 7)])
  def test_depends_only_on_inner_products(self, dim, num_vectors):
    # Coordinates in an orthonormal basis of the span (from QR) give the same
    # cosines as the d-dimensional vectors, also when d < k + 1.
    vectors = np.random.default_rng(0).standard_normal((dim, num_vectors))
    _, triangular = np.linalg.qr(vectors, mode='reduced')
    coordinates = triangular.T
    assert coordinates.shape == (num_vectors, min(dim, num_vectors))
    expected = _brute_force_cosines(vectors.T[np.newaxis, :-1],
                                    vectors.T[np.newaxis, -1], 0.7)[0]
    actual = gm.cosines_from_gaussians(coordinates[:-1], coordinates[-1], 0.7)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-12)

  def test_single_canary_without_noise_has_cosine_one(self):
    cosines = gm.cosines_from_gaussians([[3.0, -4.0, 1.0]], [0.0, 0.0, 0.0],
                                        sigma=2.0)
    np.testing.assert_allclose(cosines, [1.0], rtol=0, atol=1e-15)

  @pytest.mark.parametrize('gaussians,noise,match', [
      ([[1.0, 2.0]], [1.0], 'noise'),
      ([1.0, 2.0], [1.0, 2.0], 'gaussians'),
      ([[0.0, 0.0]], [1.0, 2.0], 'zero row'),
      ([[np.nan, 1.0]], [1.0, 2.0], 'finite'),
  ])
  def test_rejects_bad_arrays(self, gaussians, noise, match):
    with pytest.raises(ValueError, match=match):
      gm.cosines_from_gaussians(gaussians, noise, 1.0)


class TestBartlettFactor:

  @pytest.mark.parametrize('dim,num_vectors', [(6, 4), (3, 5), (1, 2)])
  def test_shape_and_structure(self, dim, num_vectors):
    factor = gm.bartlett_factor(dim, num_vectors, np.random.default_rng(1))
    rank = min(dim, num_vectors)
    assert factor.shape == (num_vectors, rank)
    np.testing.assert_array_equal(np.triu(factor, k=1), 0.0)
    assert np.all(np.diag(factor) > 0)

  @pytest.mark.parametrize('dim,num_vectors', [(6, 4), (3, 5)])
  def test_gram_matrix_is_wishart(self, dim, num_vectors):
    # L L^T against the Gram matrix X^T X of materialised N(0, I_d) vectors.
    num_samples = 4000
    rng = np.random.default_rng(2)
    factors = [gm.bartlett_factor(dim, num_vectors, rng)
               for _ in range(num_samples)]
    gram = np.stack([f @ f.T for f in factors])
    vectors = np.random.default_rng(3).standard_normal(
        (num_samples, dim, num_vectors))
    brute_force = np.einsum('sdi,sdj->sij', vectors, vectors)
    last = num_vectors - 1
    for i, j in [(0, 0), (last, last), (last, 0), (1, 2)]:
      p_value = stats.ks_2samp(gram[:, i, j], brute_force[:, i, j]).pvalue
      assert p_value > ALPHA, f'W[{i},{j}]: KS p-value {p_value:.2e}'


class TestSimulateCosines:

  @pytest.mark.parametrize('dim,num_canaries,sigma', [
      (3, 1, 0.5),
      (5, 8, 1.0),  # d < k + 1: the span is all of R^d.
      (20, 4, 0.3),
  ])
  def test_gram_matches_brute_force(self, dim, num_canaries, sigma):
    num_simulations = 3000
    gram = _simulate(num_simulations, 4, dim=dim, num_canaries=num_canaries,
                     sigma=sigma)
    rng = np.random.default_rng(5)
    brute_force = _brute_force_cosines(
        rng.standard_normal((num_simulations, num_canaries, dim)),
        rng.standard_normal((num_simulations, dim)), sigma)
    _assert_same_distribution(gram, brute_force)

  @pytest.mark.parametrize('dim,num_canaries,sigma,chunk_size', [
      (500, 50, 0.7, 64),  # 8 chunks, the last one partial.
      (2000, 20, 2.0, None),  # One chunk.
  ])
  def test_stream_and_gram_agree_in_distribution(self, dim, num_canaries,
                                                 sigma, chunk_size):
    num_simulations = 400
    stream = _simulate(num_simulations, 6, dim=dim, num_canaries=num_canaries,
                       sigma=sigma, method='stream', chunk_size=chunk_size)
    gram = _simulate(num_simulations, 7, dim=dim, num_canaries=num_canaries,
                     sigma=sigma, method='gram')
    _assert_same_distribution(stream, gram)

  def test_distribution_test_detects_ten_percent_change_in_sigma(self):
    # Power check of the comparison above: 10% more noise must be rejected.
    stream = _simulate(400, 6, dim=500, num_canaries=50, sigma=0.7,
                       method='stream', chunk_size=64)
    gram = _simulate(400, 7, dim=500, num_canaries=50, sigma=0.77)
    p_value = stats.ks_2samp(stream.mean(axis=1), gram.mean(axis=1)).pvalue
    assert p_value < ALPHA

  @pytest.mark.parametrize('chunk_size', [1, 7, 30, 64])
  def test_stream_equals_its_materialised_vectors(self, chunk_size):
    # The two streamed passes give exactly the cosines of the full vectors that
    # the chunks make up.
    dim, num_canaries, sigma = 30, 5, 0.9
    actual = gm.simulate_cosines(dim, num_canaries, sigma,
                                 np.random.default_rng(8), method='stream',
                                 chunk_size=chunk_size)
    seeds = gm.stream_chunk_seeds(dim, chunk_size, np.random.default_rng(8))
    chunks = [
        gm.stream_chunk(seed, num_canaries,
                        min(chunk_size, dim - c * chunk_size))
        for c, seed in enumerate(seeds)
    ]
    gaussians = np.concatenate([g for g, _ in chunks], axis=1)
    noise = np.concatenate([z for _, z in chunks])
    assert gaussians.shape == (num_canaries, dim)
    expected = _brute_force_cosines(gaussians[np.newaxis], noise[np.newaxis],
                                    sigma)[0]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-13)

  @pytest.mark.parametrize('method', gm.METHODS)
  def test_reproducible_from_seed(self, method):
    first = gm.simulate_cosines(100, 10, 1.0, np.random.default_rng(9), method)
    second = gm.simulate_cosines(100, 10, 1.0, np.random.default_rng(9), method)
    np.testing.assert_array_equal(first, second)
    assert first.shape == (10,)
    assert np.all(np.abs(first) <= 1)

  @pytest.mark.parametrize('sigma', [0.5, 2.0])
  def test_theorem_3_3(self, sigma):
    # sqrt(d) * mean -> 1/sigma and d * var -> 1 for k = o(d), k = omega(1).
    # Writing rho = sum_i c_i + sigma z, to leading order
    #   sqrt(d) * mean = sqrt(d / (k + sigma^2 d)) * (1 + A + sigma <c_bar, z>),
    # with Var(A) = 2(k-1)/(k d) and Var(<c_bar, z>) ~ 1/k, so its sd over
    # simulations is s_mean = sqrt(1/k + 2/(sigma^2 d)) and its bias is
    # 1/sqrt(sigma^2 + k/d) - 1/sigma ~ -k/(2 sigma^3 d). d * var (ddof=0) is a
    # sample variance of k nearly Gaussian values of variance ~1/d, so its sd
    # is s_var = sqrt(2/k) and its bias ~ -1/k. We allow 4 standard errors of
    # the average over R simulations plus twice the bias.
    dim, num_canaries, num_simulations = 10**7, 1000, 40
    cosines = _simulate(num_simulations, 10, dim=dim,
                        num_canaries=num_canaries, sigma=sigma)
    scaled_means = np.sqrt(dim) * cosines.mean(axis=1)
    scaled_vars = dim * cosines.var(axis=1)

    s_mean = np.sqrt(1 / num_canaries + 2 / (sigma**2 * dim))
    bias_mean = num_canaries / (sigma**3 * dim)
    assert abs(scaled_means.mean() - 1 / sigma) <= (
        4 * s_mean / np.sqrt(num_simulations) + bias_mean)
    s_var = np.sqrt(2 / num_canaries)
    assert abs(scaled_vars.mean() - 1) <= (
        4 * s_var / np.sqrt(num_simulations) + 2 / num_canaries)
    # The spread over simulations matches the derivation (the sample sd of 40
    # values is within 11% of the truth at one standard error).
    assert 0.6 <= scaled_means.std(ddof=1) / s_mean <= 1.5
    assert 0.6 <= scaled_vars.std(ddof=1) / s_var <= 1.5

  @pytest.mark.parametrize('kwargs,name', [
      (dict(dim=2), 'dim'),
      (dict(dim=10.0), 'dim'),
      (dict(dim=True), 'dim'),
      (dict(num_canaries=0), 'num_canaries'),
      (dict(num_canaries=2.5), 'num_canaries'),
      (dict(sigma=0.0), 'sigma'),
      (dict(sigma=-1.0), 'sigma'),
      (dict(sigma=float('inf')), 'sigma'),
      (dict(sigma=float('nan')), 'sigma'),
      (dict(sigma='1'), 'sigma'),
      (dict(rng=0), 'rng'),
      (dict(method='qr'), 'method'),
      (dict(method='stream', chunk_size=0), 'chunk_size'),
      (dict(method='gram', chunk_size=16), 'chunk_size'),
  ])
  def test_rejects_bad_arguments(self, kwargs, name):
    arguments = dict(dim=10, num_canaries=3, sigma=1.0,
                     rng=np.random.default_rng(0))
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=name):
      gm.simulate_cosines(**arguments)

  def test_accepts_numpy_scalars(self):
    cosines = gm.simulate_cosines(np.int64(10), np.int32(3), np.float32(1.5),
                                  np.random.default_rng(0))
    assert cosines.shape == (3,)


class TestTable2:
  """Table 2 at 20 simulations per epsilon, full d = 10^6 and k = 10^3."""

  NUM_SIMULATIONS = 20
  EPSILONS = (1.0, 3.0, 10.0)

  @pytest.fixture(scope='class')
  def setting(self):
    return table2.Setting(num_simulations=self.NUM_SIMULATIONS, seed=0)

  @pytest.fixture(scope='class')
  def rows(self, setting):
    return table2.run_table(setting, self.EPSILONS)

  def test_calibration_matches_paper(self, rows):
    for row in rows:
      paper = table2.PAPER_TABLE2[row.epsilon]
      assert f'{row.sigma:#.3g}' == f'{paper.sigma:#.3g}'
      assert row.analytical_epsilon == pytest.approx(row.epsilon, rel=1e-9)

  def test_fixed_variance_estimate_agrees_with_paper_and_analytical(self,
                                                                   rows):
    # Welch t-test of our mean (n = 20) against the paper's (n = 50), and a
    # one-sample t-test against the analytical epsilon, each at level ALPHA.
    for row in rows:
      paper = table2.PAPER_TABLE2[row.epsilon]
      estimates = row.fixed_variance
      p_paper = stats.ttest_ind_from_stats(
          estimates.mean, estimates.std, estimates.values.size, paper.mean,
          paper.std, table2.PAPER_NUM_SIMULATIONS, equal_var=False).pvalue
      assert p_paper > ALPHA, (row.epsilon, estimates.mean, p_paper)
      p_analytical = stats.ttest_1samp(estimates.values,
                                       row.analytical_epsilon).pvalue
      assert p_analytical > ALPHA, (row.epsilon, estimates.mean, p_analytical)

  def test_fitted_estimate_agrees_with_iid_gaussian_cosine_model(self, rows):
    # Algorithm 1's fitted-variance eps_est is biased upwards at k = 10^3 (the
    # fitted std's sampling error inflates eps). Check that this comes from the
    # estimator, not the sampler: model the k cosines as i.i.d. Gaussians with
    # the leading-order moments of Algorithm 1's cosines,
    #   mean 1/sqrt(k + sigma^2 d), var (sigma^2 + (k-1)/d) / (k + sigma^2 d),
    # and compare mean eps_est by a Welch t-test at level ALPHA.
    dim, k, delta = 10**6, 10**3, 1e-6
    rng = np.random.default_rng(100)
    for row in rows:
      scale = k + row.sigma**2 * dim
      mean = 1 / np.sqrt(scale)
      std = np.sqrt((row.sigma**2 + (k - 1) / dim) / scale)
      model = [
          estimation.epsilon_from_final_cosines(
              rng.normal(mean, std, size=k), dim, delta) for _ in range(100)
      ]
      p_value = stats.ttest_ind(row.fitted.values, model,
                                equal_var=False).pvalue
      assert p_value > ALPHA, (row.epsilon, row.fitted.mean, np.mean(model))

  def test_prefix_of_a_longer_run(self, setting, rows):
    shorter = dataclasses.replace(setting, num_simulations=4)
    row = table2.run_row(shorter, self.EPSILONS[1], index=1)
    np.testing.assert_array_equal(row.fitted.values, rows[1].fitted.values[:4])

  def test_markdown_table(self, setting, rows):
    text = table2.format_table(setting, rows, total_wall_time_s=1.0)
    assert '| 4.22 | 1.00 | 0.972 ± 0.148 |' in text
    assert '| 1.54 | 3.00 | 3.04 ± 0.137 |' in text
    assert '| 0.541 | 10.0 | 9.98 ± 0.190 |' in text
    assert len([line for line in text.splitlines()
                if line.startswith('| ')]) == 1 + len(rows)


class TestTableHelpers:

  @pytest.mark.parametrize('kwargs,name', [
      (dict(dim=2), 'dim'),
      (dict(num_canaries=0), 'num_canaries'),
      (dict(num_simulations=0), 'num_simulations'),
      (dict(seed=-1), 'seed'),
      (dict(delta=1.0), 'delta'),
      (dict(method='qr'), 'method'),
  ])
  def test_setting_rejects_bad_values(self, kwargs, name):
    with pytest.raises(ValueError, match=name):
      table2.Setting(**kwargs)


class TestProgram:
  """The absl program run as `python -m experiments.gaussian_mechanism`."""

  @staticmethod
  def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'experiments.gaussian_mechanism', *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        check=False)

  @pytest.mark.parametrize('argument,flag', [
      ('--num_simulations=1', '--num_simulations'),
      ('--delta=1.5', '--delta'),
      ('--epsilons=1,-2', '--epsilons'),
      ('--method=qr', '--method'),
      ('--output=/nonexistent-directory/table2.md', '--output'),
  ])
  def test_bad_flag_exits_2_naming_it(self, argument, flag):
    result = self._run(argument)
    assert result.returncode == 2
    assert flag in result.stderr
    assert 'Traceback' not in result.stderr + result.stdout

  def test_a_positional_argument_exits_2_before_any_simulation(self):
    result = self._run('--num_simulations=2', 'stray')
    assert result.returncode == 2
    assert "unexpected arguments: ['stray']" in result.stderr
    assert 'Traceback' not in result.stderr and result.stdout == ''

  def test_small_run_writes_its_table(self, tmp_path):
    output = tmp_path / 'table2.md'
    result = self._run('--dim=1000', '--num_canaries=10',
                       '--num_simulations=3', '--epsilons=2',
                       f'--output={output}')
    assert result.returncode == 0, result.stderr
    assert output.read_text(encoding='utf-8') == result.stdout
    assert '| — |' in result.stdout  # No paper values outside its setting.
    assert os.listdir(tmp_path) == ['table2.md']  # No temporary file left.
