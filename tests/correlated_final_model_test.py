"""The final-model references under correlated noise, against simulation.

Truth: the released prefix sums B (C x + Z) of a factorization A = B C
simulated in d dimensions with numpy (B = A C^-1 from numpy's inverse of
the materialised strategy; the tree's node matrix and Honaker's recursion
written out here), canaries inserted in random rounds in orthonormal
directions; the final model is B's last row. The empirical mu, the seen
canaries' mean cosine less the unseen ones' over the unseen ones' std,
averaged over runs, must match the references' closed forms
(`correlated_final_model`, `tree_aggregation.final_model_epsilon`) within
4 Monte Carlo standard errors, and a wrong closed form (B's first row, or
the plain tree's variance for the efficient estimator) must miss by more.
"""

import math

import numpy as np
import pytest
from scipy import special

from one_shot_epe.accounting import correlated_final_model
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.accounting import tree_aggregation
from one_shot_epe.stats import estimation

DIM, SEEN, ROUNDS, RUNS = 2000, 400, 12, 30
Z, DELTA = 0.9, 1e-5


def _toeplitz(coefs):
  n = len(coefs)
  return np.array([[coefs[i - j] if i >= j else 0.0 for j in range(n)]
                   for i in range(n)])


def _banded(bands):
  """The first `bands` coefficients of (1 - x)^-1/2 (optimal max error)."""
  coefs = np.zeros(ROUNDS)
  for lag in range(bands):
    coefs[lag] = special.comb(2 * lag, lag) / 4.0**lag
  return coefs


def _blt():
  """A buffered linear Toeplitz strategy with two buffers."""
  lags = np.arange(1, ROUNDS)
  coefs = np.ones(ROUNDS)
  coefs[1:] = 0.3 * 0.8**(lags - 1) + 0.1 * 0.3**(lags - 1)
  return coefs


def _directions(rng):
  """2 SEEN orthonormal canary directions in R^DIM, seen ones first."""
  return np.linalg.qr(rng.standard_normal((DIM, 2 * SEEN)))[0].T


def _insertions(rng, presentations):
  """[ROUNDS, SEEN]: each seen canary in `presentations` random rounds."""
  incidence = np.zeros((ROUNDS, SEEN))
  for canary in range(SEEN):
    incidence[rng.choice(ROUNDS, presentations, replace=False), canary] = 1.0
  return incidence


def _empirical_mu(rng, release):
  """Mean and standard error over RUNS of the final model's canary mu.

  `release(x, rng)` maps the rounds' sums x [ROUNDS, DIM] to the released
  prefix sums [ROUNDS, DIM]; the final model is the last one.
  """
  directions = _directions(rng)
  estimates = []
  for _ in range(RUNS):
    x = _insertions(rng, 2) @ directions[:SEEN]
    final = release(x, rng)[-1]
    cosines = directions @ final / np.linalg.norm(final)
    seen, unseen = cosines[:SEEN], cosines[SEEN:]
    estimates.append((seen.mean() - unseen.mean()) / unseen.std(ddof=1))
  return np.mean(estimates), np.std(estimates, ddof=1) / math.sqrt(RUNS)


@pytest.mark.parametrize('mechanism, coefs', [
    (mechanisms.MatrixFactorization('banded', 4), _banded(4)),
    (mechanisms.MatrixFactorization('blt'), _blt())], ids=['banded', 'blt'])
def test_matrix_factorization_final_model_mu_matches_simulation(mechanism,
                                                                coefs):
  rng = np.random.default_rng(7)
  strategy = _toeplitz(coefs)
  decoder = np.tril(np.ones((ROUNDS, ROUNDS))) @ np.linalg.inv(strategy)
  sensitivity = float(np.linalg.norm(strategy[:, 0]))  # One participation.
  sigma = Z * sensitivity  # S = 1.

  def release(x, rng):
    noise = sigma * rng.standard_normal((ROUNDS, DIM))
    return decoder @ (strategy @ x + noise)

  mu, stderr = _empirical_mu(rng, release)
  norm = correlated_final_model.final_noise_norm(coefs)
  assert norm == pytest.approx(np.linalg.norm(decoder[-1]), rel=1e-12)
  closed = 2 / (Z * sensitivity * norm)
  assert abs(mu - closed) < 4 * stderr, (mu, stderr, closed)
  # B's first row (the first round's noise alone) is far off.
  broken = 2 / (Z * sensitivity * np.linalg.norm(decoder[0]))
  assert abs(mu - broken) > 10 * stderr, (mu, stderr, broken)
  # The report's reference is the Gaussian eps at the closed form's mu,
  # inside the eps of the simulation's mu +- 4 standard errors.
  correlated = dp_fedavg.CorrelatedNoise(mechanism.strategy, sensitivity,
                                         1.0, coefs)
  facts = references.RunFacts(Z, DELTA, DIM, rounds=ROUNDS,
                              presentation_counts=np.full(SEEN, 2),
                              correlated=correlated)
  reference = mechanism.references(facts).last_iterate
  assert reference.epsilon == pytest.approx(
      estimation.gaussian_epsilon(1 / closed, DELTA), rel=1e-9)
  low, high = (estimation.gaussian_epsilon(1 / (mu + sign * 4 * stderr),
                                           DELTA) for sign in (-1, 1))
  assert low < reference.epsilon < high


def _tree_release(efficient):
  """B (C x + Z) of the tree (module docstring of `tree_aggregation`).

  Node (l, j) over the rounds [j 2^l, (j + 1) 2^l) < ROUNDS holds their sum
  plus N(0, Z^2) noise; the prefix of p rounds sums the nodes of p's binary
  decomposition, plainly or as Honaker's v = (v_left + v_right) / 2 + node
  weighted by 1 / (2 - 2^-l).
  """

  def release(x, rng):
    values = {}
    for level in range(ROUNDS.bit_length()):
      for index in range(ROUNDS >> level):
        start, end = index << level, (index + 1) << level
        node = x[start:end].sum(axis=0) + Z * rng.standard_normal(DIM)
        if efficient and level:
          node += 0.5 * (values[level - 1, 2 * index] +
                         values[level - 1, 2 * index + 1])
        values[level, index] = node
    prefixes = []
    for end in range(1, ROUNDS + 1):
      total, start = np.zeros(DIM), 0
      for level in reversed(range(end.bit_length())):
        if end >> level & 1:
          weight = 1.0 / (2.0 - 0.5**level) if efficient else 1.0
          total += weight * values[level, start >> level]
          start += 1 << level
      prefixes.append(total)
    return np.array(prefixes)

  return release


@pytest.mark.parametrize('efficient', [True, False])
def test_tree_final_model_mu_matches_simulation(efficient):
  rng = np.random.default_rng(11)
  mu, stderr = _empirical_mu(rng, _tree_release(efficient))
  variance = tree_aggregation.tree_prefix_variance(ROUNDS, efficient)
  closed = 2 / (Z * math.sqrt(variance))
  assert abs(mu - closed) < 4 * stderr, (mu, stderr, closed)
  # The first prefix's variance (one leaf), or for the efficient estimator
  # the plain sum's, is far off.
  wrong = 1.0 if not efficient else tree_aggregation.tree_prefix_variance(
      ROUNDS, False)
  broken = 2 / (Z * math.sqrt(wrong))
  assert abs(mu - broken) > 10 * stderr, (mu, stderr, broken)
  schedule = [[] for _ in range(ROUNDS)]
  schedule[0], schedule[5] = [0], [0]
  facts = references.RunFacts(Z, DELTA, DIM, rounds=ROUNDS,
                              schedule=schedule)
  reference = mechanisms.TreeAggregation(efficient).references(
      facts).last_iterate
  low, high = (estimation.gaussian_epsilon(1 / (mu + sign * 4 * stderr),
                                           DELTA) for sign in (-1, 1))
  assert low < reference.epsilon < high


def test_identity_strategy_gives_the_last_iterate_heuristic():
  # C = I, sens 1: the final model sums ROUNDS independent rounds.
  coefs = np.zeros(ROUNDS)
  coefs[0] = 1.0
  norm = correlated_final_model.final_noise_norm(coefs)
  assert norm == pytest.approx(math.sqrt(ROUNDS), rel=1e-12)
  counts = np.array([1, 1, 2, 3])
  correlated = dp_fedavg.CorrelatedNoise('identity', 1.0, 1.0, coefs)
  ours = correlated_final_model.final_model_epsilon(Z, DELTA, correlated,
                                                  ROUNDS, counts)
  heuristic = dp_fedavg.last_iterate_epsilon(Z, DELTA, ROUNDS, counts)
  assert ours.epsilon == pytest.approx(heuristic.epsilon, rel=1e-9)
  assert 'identity correlated noise' in ours.mechanism
  # A scaled strategy is the same mechanism (sigma scales with sens).
  scaled = correlated_final_model.final_noise_norm(3.0 * _blt())
  assert scaled == pytest.approx(
      correlated_final_model.final_noise_norm(_blt()) / 3.0, rel=1e-12)


def test_references_without_rounds_and_bad_coefficients():
  correlated = dp_fedavg.CorrelatedNoise('blt', 1.2, 1.0, _blt())
  facts = references.RunFacts(Z, DELTA, DIM, correlated=correlated)
  assert mechanisms.MatrixFactorization('blt').references(
      facts).last_iterate is None
  assert math.isinf(correlated_final_model.final_model_epsilon(
      0.0, DELTA, correlated, ROUNDS, [1]).epsilon)
  for coefs in ([], [0.0, 1.0], [[1.0]], [1.0, math.nan]):
    with pytest.raises(ValueError, match='coefs'):
      correlated_final_model.final_noise_norm(coefs)
