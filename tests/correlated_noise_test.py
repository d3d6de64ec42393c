"""Tests of DP-FTRL's correlated noise (jax_engine.correlated_noise).

Truths: C^{-1} from numpy's inverse of the materialised Toeplitz strategy,
the sensitivity by brute force over participation patterns, and the eps
against jax-privacy's accountant and the core's Gaussian closed form.
Needs jax-privacy (.venv-jax; `make test-jax`).
"""

import csv
import itertools
import math
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from experiments import train
from experiments import train_config
from one_shot_epe.accounting import correlated_final_model
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import last_iterate
from one_shot_epe.runtime import run_directory
from one_shot_epe.reporting import run_report
from one_shot_epe.stats import estimation

try:
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
except ImportError:  # jax-privacy is not installed here: collected, skipped.
  correlated_noise = None

pytestmark = pytest.mark.skipif(
    correlated_noise is None,
    reason='jax-privacy is not installed here (.venv-jax: make test-jax).')

ROUNDS = 8


def _matrix(strategy):
  n = strategy.rounds
  return np.array([[strategy.coefs[i - j] if i >= j else 0.0
                    for j in range(n)] for i in range(n)])


@pytest.fixture(scope='module', params=['blt', 'banded'])
def strategy(request):
  bounds = correlated_noise.participation_bounds('shuffle', ROUNDS, 3)
  return correlated_noise.build_strategy(request.param, ROUNDS, bounds,
                                         num_bands=3)


def test_noise_covariance_is_sigma_squared_c_inverse_c_inverse_t(strategy):
  noise_multiplier, clip, dim = 0.7, 2.0, 4000
  transform = correlated_noise.privatizer(strategy, noise_multiplier, clip,
                                          seed=0)
  rows = []
  for seed in range(5):
    transform = correlated_noise.privatizer(strategy, noise_multiplier, clip,
                                            seed=seed)
    state = transform.init(jnp.zeros(dim))
    noise = []
    for _ in range(ROUNDS):
      out, state = transform.update(jnp.zeros(dim), state)
      noise.append(np.asarray(out, np.float64))
    rows.append(np.stack(noise))
  samples = np.concatenate(rows, axis=1)  # [rounds, 5 seeds x dim]
  empirical = samples @ samples.T / samples.shape[1]
  inverse = np.linalg.inv(_matrix(strategy))
  sigma = noise_multiplier * clip * strategy.sensitivity
  expected = sigma**2 * inverse @ inverse.T
  # Entry-wise standard error of a covariance estimate from N samples.
  stderr = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) +
                    expected**2) / samples.shape[1])
  assert np.all(np.abs(empirical - expected) <= 5 * stderr + 1e-6)


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_final_model_noise_is_the_reports_final_noise_norm(strategy,
                                                           momentum):
  # The final model's noise is the privatizer's rows weighted by the
  # server's w_t (all ones under SGD): std sigma ||w^T C^{-1}|| per
  # coordinate (under SGD B's last row, not its first).
  numbers = correlated_noise.report_numbers(strategy,
                                            [[0]] + [[]] * (ROUNDS - 1))
  weights = last_iterate.momentum_weights(ROUNDS, momentum)
  inverse = np.linalg.inv(_matrix(strategy))
  norm = correlated_final_model.final_noise_norm(numbers.coefs, weights)
  assert norm == pytest.approx(np.linalg.norm(weights @ inverse), rel=1e-9)
  noise_multiplier, clip, dim = 0.7, 2.0, 40_000
  stream = correlated_noise.NoiseStream(
      correlated_noise.privatizer(strategy, noise_multiplier, clip, seed=9))
  rows = stream.rows(dim, 0)
  total = sum(w * np.asarray(next(rows), np.float64) for w in weights)
  sigma = noise_multiplier * clip * strategy.sensitivity
  stderr = sigma * norm / math.sqrt(2 * dim)
  assert abs(total.std() - sigma * norm) < 5 * stderr
  unweighted = np.linalg.norm(inverse[0] if momentum == 0 else
                              inverse.sum(axis=0))
  assert abs(total.std() - sigma * unweighted) > 20 * stderr


def test_sensitivity_is_the_brute_force_worst_participation(strategy):
  matrix = _matrix(strategy)
  worst = 0.0
  for count in range(1, strategy.bounds.max_participations + 1):
    for rounds in itertools.combinations(range(ROUNDS), count):
      worst = max(worst, np.linalg.norm(matrix[:, list(rounds)].sum(axis=1)))
  assert strategy.sensitivity == pytest.approx(worst, rel=1e-6)
  assert correlated_noise.canary_column_norm(
      strategy, [0, 3, 5]) == pytest.approx(
          np.linalg.norm(matrix[:, [0, 3, 5]].sum(axis=1)), rel=1e-9)


def test_accounted_epsilon_matches_the_worst_participant(strategy):
  delta = 1e-5
  mu_worst = dp_fedavg.matrix_factorization_canary_epsilon(
      1.3, delta, strategy.sensitivity, strategy.sensitivity,
      strategy.mechanism)
  accounted = correlated_noise.accounted_epsilon(1.3, delta, num_samples=100)
  assert accounted == pytest.approx(mu_worst.epsilon, rel=1e-3)


def test_identity_strategy_gives_the_gaussian_canary_epsilon():
  for repeats in (1, 4):
    mf = dp_fedavg.matrix_factorization_canary_epsilon(
        0.8, 1e-6, math.sqrt(repeats), 1.0, 'gaussian')
    assert mf.epsilon == pytest.approx(
        dp_fedavg.canary_epsilon(0.8, 1e-6, repeats).epsilon, rel=1e-9)


def test_bad_arguments():
  bounds = correlated_noise.participation_bounds('poisson', ROUNDS, 1)
  assert bounds == correlated_noise.ParticipationBounds(1, ROUNDS)
  with pytest.raises(ValueError, match='num_bands'):
    correlated_noise.build_strategy('banded', ROUNDS, bounds,
                                    num_bands=ROUNDS + 1)
  with pytest.raises(ValueError, match='sampling'):
    correlated_noise.participation_bounds('cyclic', ROUNDS, 1)


def test_a_resumed_stream_continues_the_uninterrupted_one(strategy):
  stream = correlated_noise.NoiseStream(
      correlated_noise.privatizer(strategy, 1.0, 1.0, seed=3))
  whole = stream.rows(16, 0)
  rows = [np.asarray(next(whole)) for _ in range(5)]
  resumed = stream.rows(16, 3)
  np.testing.assert_array_equal(np.asarray(next(resumed)), rows[3])
  np.testing.assert_array_equal(np.asarray(next(resumed)), rows[4])


def _column(path, name: str) -> np.ndarray:
  """The column over training rounds (metrics.csv's round 0: evaluation)."""
  with open(path, newline='', encoding='utf-8') as stream:
    return np.asarray([float(row[name]) for row in csv.DictReader(stream)
                       if int(row['round']) > 0])


def _config(root, **overrides):
  settings = dict(backend='jax', task='emnist_character',
                  use_synthetic_data=True, synthetic_num_clients=4,
                  synthetic_examples_per_client=16, clients_per_round=2,
                  total_rounds=3, num_canaries=5, num_unseen_canaries=5,
                  noise_multiplier=0.1, clipping_norm=1.0, mechanism='blt',
                  rounds_per_checkpoint=2, progress_bar=False,
                  root_output_dir=str(root), run_name='run')
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


@pytest.mark.parametrize('overrides', [dict(mechanism='blt'),
                                       dict(mechanism='banded', num_bands=2)])
def test_launcher_run_with_correlated_noise_resumes_exactly(tmp_path,
                                                            overrides):
  whole = train.run_training(_config(tmp_path / 'whole', **overrides))
  gaussian = train.run_training(_config(tmp_path / 'gaussian',
                                        mechanism='gaussian'))
  # Same seeds and clients, other noise.
  assert not np.array_equal(whole.final_cosines, gaussian.final_cosines)
  shutil.copytree(tmp_path / 'whole', tmp_path / 'cut')
  cut_dir = tmp_path / 'cut' / 'run'
  os.unlink(cut_dir / run_directory.CHECKPOINT_DIR / 'round_00000003.npz')
  resumed = train.run_training(_config(tmp_path / 'cut', **overrides))
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (2, 1)
  np.testing.assert_array_equal(resumed.final_cosines, whole.final_cosines)
  np.testing.assert_array_equal(resumed.seen_maxima, whole.seen_maxima)
  # The decorrelated statistic: its projections survive the checkpoint ...
  for name in ('decorrelated_seen', 'decorrelated_unseen'):
    np.testing.assert_allclose(getattr(resumed, name), getattr(whole, name),
                               rtol=1e-5, atol=1e-6)
  assert gaussian.decorrelated_seen is None
  # ... and are each round's vector's projections: their seen mean is the
  # round's mean cosine (canary_cosines.csv) times its norm (metrics.csv).
  with np.load(cut_dir / run_directory.CHECKPOINT_DIR /
               'round_00000003.npz') as saved:
    projections = saved['projections']
  assert projections.shape == (10, 3)
  cosines = _column(cut_dir / run_directory.CANARY_COSINES_FILE,
                    'seen_cosine_mean')
  norms = _column(cut_dir / run_directory.METRICS_FILE, 'aggregate_norm')
  np.testing.assert_allclose(projections[:5].mean(axis=0), cosines * norms,
                             rtol=1e-4, atol=1e-7)
  # At this low noise the inserted canaries' scores stand out.
  assert whole.decorrelated_seen.min() > whole.decorrelated_unseen.max()
  report = run_report.RunReport.read(str(cut_dir /
                                         run_directory.REPORT_JSON_FILE))
  assert report.all_iterates_decorrelated.num_seen == 5
  assert 'all_iterates_decorrelated' in report.setting
  # The final-model reference: each canary once, against the final model's
  # noise z sens ||1^T C^{-1}|| (3 rounds of 2 of 4 clients: 2 epochs).
  run_strategy = correlated_noise.build_strategy(
      overrides['mechanism'], 3,
      correlated_noise.participation_bounds('shuffle', 3, 2),
      overrides.get('num_bands'))
  final_std = 0.1 * run_strategy.sensitivity * np.linalg.norm(
      np.linalg.inv(_matrix(run_strategy)).sum(axis=0))
  assert report.last_iterate_epsilon == pytest.approx(
      estimation.gaussian_epsilon(final_std, report.delta), rel=1e-6)
  assert 'correlated noise' in report.last_iterate_mechanism
  with pytest.raises(train_config.ConfigError, match='--mechanism'):
    train.run_training(_config(tmp_path / 'cut', mechanism='gaussian'))


def test_num_bands_beyond_the_epochs_rounds_is_refused(tmp_path):
  # 2 rounds; 4 canaries, 2 of a round's 4 expected participants (the most
  # the plan's checks, made first, allow).
  config = _config(tmp_path, mechanism='banded', num_bands=3,
                   total_rounds=None, train_epochs=1, num_canaries=4)
  with pytest.raises(train_config.ConfigError, match='--num_bands'):
    train.run_training(config)
  assert not (tmp_path / 'run').exists()
