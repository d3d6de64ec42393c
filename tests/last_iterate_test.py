"""The final-model references under server momentum, against simulation.

Truth, written out here in numpy: the server's heavy-ball recursion of
TFF's `build_sgdm` (a <- beta a + u, theta <- theta - lr a) run on the
rounds' released updates u_t, which are the differences of the released
prefix sums: x_t + N(0, z^2) for independent noise, B (C x + Z) for a
banded or BLT-like Toeplitz strategy C (B = A C^-1 by numpy's inverse), and
the tree's noised prefix sums (its nodes and Honaker's recursion built
here). The canaries are orthonormal directions (by rotation invariance, the
coordinate axes of a space holding only the canaries); a seen canary's
score is its projection on the final model over the unseen canaries'
standard deviation, whose mean over runs is the canary's mu. Each seen
canary's empirical mu must match the references' closed form
(`last_iterate.canary_signals` over z sens ||w^T C^-1|| or the tree's
`tree_final_noise_norm`) by a chi-square test, a closed form that ignores
the momentum or reverses its weights must fail it, the report's eps must lie
between the mixture eps of the empirical mus -+ 4 standard errors, and at
beta = 0 every reference must be the server-SGD number.
"""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from one_shot_epe.accounting import correlated_final_model
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import last_iterate
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.accounting import tree_aggregation
from one_shot_epe.design import run_plan
from one_shot_epe.stats import estimation

ROUNDS, SEEN, UNSEEN, RUNS = 12, 48, 240, 500
BETA, DELTA = 0.8, 1e-5


def _schedule():
  """Seen canary j in round j mod T; canaries 0..11 again in round 11 - j."""
  schedule = [[] for _ in range(ROUNDS)]
  for canary in range(SEEN):
    schedule[canary % ROUNDS].append(canary)
  for canary in range(ROUNDS):
    if ROUNDS - 1 - canary != canary % ROUNDS:
      schedule[ROUNDS - 1 - canary].append(canary)
  return schedule


def _heavy_ball(updates, beta):
  """-theta_T / lr of TFF's sgdm from theta_0 = 0 over updates [T, n]."""
  accumulator = np.zeros(updates.shape[1:])
  model = np.zeros(updates.shape[1:])
  for update in updates:
    accumulator = beta * accumulator + update
    model = model + accumulator
  return model


def _sums(schedule):
  """x [T, SEEN + UNSEEN]: round t's inserted seen canaries' unit vectors."""
  x = np.zeros((ROUNDS, SEEN + UNSEEN))
  for t, ids in enumerate(schedule):
    x[t, ids] = 1.0
  return x


def _empirical_mus(rng, updates_of, beta):
  """Each seen canary's mean score over RUNS, and its standard error.

  `updates_of(x, rng)` gives the released updates [T, SEEN + UNSEEN].
  """
  x = _sums(_schedule())
  finals = np.array([_heavy_ball(updates_of(x, rng), beta)
                     for _ in range(RUNS)])
  scores = finals / finals[:, SEEN:].std(ddof=1)
  seen = scores[:, :SEEN]
  return seen.mean(axis=0), seen.std(axis=0, ddof=1) / math.sqrt(RUNS)


def _chi_square(mus, stderr, closed):
  return float(np.sum(((mus - closed) / stderr)**2))


# The bound of a chi-square with SEEN degrees of freedom (p ~ 1e-7).
_CHI_BOUND = SEEN + 6 * math.sqrt(2 * SEEN)


def _toeplitz(coefs):
  n = len(coefs)
  return np.array([[coefs[i - j] if i >= j else 0.0 for j in range(n)]
                   for i in range(n)])


def _blt_like():
  lags = np.arange(1, ROUNDS)
  coefs = np.ones(ROUNDS)
  coefs[1:] = 0.3 * 0.8**(lags - 1) + 0.1 * 0.3**(lags - 1)
  return coefs


def _banded_like():
  coefs = np.zeros(ROUNDS)
  coefs[:4] = [1.0, 0.5, 0.375, 0.3125]
  return coefs


def _tree_updates(efficient, z):
  """The tree's released updates: differences of its noised prefix sums."""

  def updates_of(x, rng):
    values = {}
    for level in range(ROUNDS.bit_length()):
      for index in range(ROUNDS >> level):
        start, end = index << level, (index + 1) << level
        node = x[start:end].sum(axis=0) + z * rng.standard_normal(x.shape[1])
        if efficient and level:
          node += 0.5 * (values[level - 1, 2 * index] +
                         values[level - 1, 2 * index + 1])
        values[level, index] = node
    prefixes = [np.zeros(x.shape[1])]
    for end in range(1, ROUNDS + 1):
      total, start = np.zeros(x.shape[1]), 0
      for level in reversed(range(end.bit_length())):
        if end >> level & 1:
          weight = 1.0 / (2.0 - 0.5**level) if efficient else 1.0
          total += weight * values[level, start >> level]
          start += 1 << level
      prefixes.append(total)
    return np.diff(np.array(prefixes), axis=0)

  return updates_of


def _facts(z, beta, **facts):
  schedule = _schedule()
  counts = np.bincount([i for ids in schedule for i in ids], minlength=SEEN)
  return references.RunFacts(z, DELTA, 10**6, rounds=ROUNDS,
                             presentation_counts=counts, schedule=schedule,
                             server_momentum=beta, **facts)


def _check(mus, stderr, closed, broken, reference):
  """The closed form passes, the broken ones fail, eps inside the band."""
  assert _chi_square(mus, stderr, closed) < _CHI_BOUND
  for wrong in broken:
    assert _chi_square(mus, stderr, wrong) > 10 * _CHI_BOUND
  low, high = (last_iterate.mixture_epsilon(mus + sign * 4 * stderr, 1.0,
                                            DELTA) for sign in (-1, 1))
  assert low < reference.epsilon < high, (low, reference.epsilon, high)
  assert f'momentum {BETA:g}' in reference.mechanism


def _broken_signals(z_noise):
  """mu_i with beta ignored (w = 1) and with the weights reversed."""
  counts = _facts(1.0, 0.0).seen_presentations
  weights = last_iterate.momentum_weights(ROUNDS, BETA)
  reversed_signals = last_iterate.canary_signals(_schedule(), weights[::-1],
                                                 SEEN)
  return counts / z_noise(np.ones(ROUNDS)), reversed_signals / z_noise(
      weights[::-1])


def test_momentum_weights_are_the_heavy_ball_recursion():
  weights = last_iterate.momentum_weights(ROUNDS, BETA)
  np.testing.assert_allclose(weights, _heavy_ball(np.eye(ROUNDS), BETA),
                             rtol=1e-12)
  np.testing.assert_array_equal(last_iterate.momentum_weights(5, 0.0),
                                np.ones(5))
  signals = last_iterate.canary_signals([[0, 2], [2], []], [3.0, 2.0, 1.0])
  np.testing.assert_array_equal(signals, [3.0, 0.0, 5.0])


def test_independent_noise_under_momentum_matches_simulation():
  z = 0.23
  rng = np.random.default_rng(1)
  mus, stderr = _empirical_mus(
      rng, lambda x, rng: x + z * rng.standard_normal(x.shape), BETA)
  facts = _facts(z, BETA)
  weights = last_iterate.momentum_weights(ROUNDS, BETA)
  closed = facts.seen_signals / (z * np.linalg.norm(weights))
  reference = mechanisms.Gaussian().references(facts).last_iterate
  _check(mus, stderr, closed,
         _broken_signals(lambda w: z * np.linalg.norm(w)), reference)


@pytest.mark.parametrize('mechanism, coefs', [
    (mechanisms.MatrixFactorization('banded', 4), _banded_like()),
    (mechanisms.MatrixFactorization('blt'), _blt_like())],
                         ids=['banded', 'blt'])
def test_matrix_factorization_under_momentum_matches_simulation(mechanism,
                                                                 coefs):
  z = 0.4
  strategy = _toeplitz(coefs)
  decoder = np.tril(np.ones((ROUNDS, ROUNDS))) @ np.linalg.inv(strategy)
  sensitivity = float(np.linalg.norm(strategy[:, 0]))
  sigma = z * sensitivity

  def updates_of(x, rng):
    prefixes = decoder @ (strategy @ x + sigma * rng.standard_normal(x.shape))
    return np.diff(prefixes, axis=0, prepend=0.0)

  mus, stderr = _empirical_mus(np.random.default_rng(2), updates_of, BETA)
  correlated = dp_fedavg.CorrelatedNoise(mechanism.strategy, sensitivity, 1.0,
                                         coefs)
  facts = _facts(z, BETA, correlated=correlated)
  weights = last_iterate.momentum_weights(ROUNDS, BETA)
  norm = correlated_final_model.final_noise_norm(coefs, weights)
  inverse = np.linalg.inv(strategy)
  assert norm == pytest.approx(np.linalg.norm(weights @ inverse), rel=1e-12)
  closed = facts.seen_signals / (sigma * norm)

  def noise(w):
    return sigma * np.linalg.norm(w @ inverse)

  reference = mechanism.references(facts).last_iterate
  _check(mus, stderr, closed, _broken_signals(noise), reference)
  # Momentum on the signal alone, the noise left at 1^T C^-1: also off.
  wrong = facts.seen_signals / noise(np.ones(ROUNDS))
  assert _chi_square(mus, stderr, wrong) > 10 * _CHI_BOUND


@pytest.mark.parametrize('efficient', [True, False])
def test_tree_under_momentum_matches_simulation(efficient):
  z = 0.7
  mus, stderr = _empirical_mus(np.random.default_rng(3),
                               _tree_updates(efficient, z), BETA)
  facts = _facts(z, BETA)
  weights = last_iterate.momentum_weights(ROUNDS, BETA)
  closed = facts.seen_signals / (
      z * correlated_final_model.tree_final_noise_norm(weights, efficient))

  def noise(w):
    return z * correlated_final_model.tree_final_noise_norm(w, efficient)

  reference = mechanisms.TreeAggregation(efficient).references(
      facts).last_iterate
  _check(mus, stderr, closed, _broken_signals(noise), reference)


def _old_tree_epsilon(z, efficient, presented):
  """The server-SGD tree reference: one Gaussian at K / (z sqrt(v(T)))."""
  variance = tree_aggregation.tree_prefix_variance(ROUNDS, efficient)
  return estimation.gaussian_epsilon(z * math.sqrt(variance) / presented,
                                     DELTA)


def test_zero_momentum_is_the_server_sgd_reference():
  z, counts = 0.7, np.array([0, 1, 1, 2, 2, 3])
  schedule = [[1, 2, 3, 4, 5], [3, 4, 5], [5]] + [[]] * (ROUNDS - 3)
  facts = references.RunFacts(z, DELTA, 100, rounds=ROUNDS,
                              presentation_counts=counts, schedule=schedule)
  np.testing.assert_array_equal(facts.seen_signals, counts)
  gaussian = mechanisms.Gaussian().references(facts).last_iterate
  assert gaussian.epsilon == dp_fedavg.last_iterate_epsilon(
      z, DELTA, ROUNDS, counts).epsilon
  assert 'server SGD assumed' in gaussian.mechanism
  # Matrix factorization: the independent rounds at z sens ||1^T C^-1|| /
  # sqrt(T), ||1^T C^-1|| from numpy's inverse.
  coefs = _blt_like()
  correlated = dp_fedavg.CorrelatedNoise('blt', 1.3, 1.0, coefs)
  final = mechanisms.MatrixFactorization('blt').references(
      references.RunFacts(z, DELTA, 100, rounds=ROUNDS,
                          presentation_counts=counts, schedule=schedule,
                          correlated=correlated)).last_iterate
  row = np.linalg.inv(_toeplitz(coefs)).sum(axis=0)
  assert final.epsilon == pytest.approx(dp_fedavg.last_iterate_epsilon(
      z * 1.3 * np.linalg.norm(row) / math.sqrt(ROUNDS), DELTA, ROUNDS,
      counts).epsilon, rel=1e-12)
  # The tree: one Gaussian at K / (z sqrt(v(T))) when every seen canary is
  # presented K times.
  even = [[0, 1], [2], [], [0, 1, 2]] + [[]] * (ROUNDS - 4)
  for efficient in (True, False):
    tree = mechanisms.TreeAggregation(efficient).references(
        references.RunFacts(z, DELTA, 100, rounds=ROUNDS,
                            schedule=even)).last_iterate
    assert tree.epsilon == pytest.approx(_old_tree_epsilon(z, efficient, 2),
                                         rel=1e-12)


def _mixture_delta_by_quadrature(epsilon, signals):
  """max of both hockey-stick divergences at unit noise, integrated."""
  def q(x):
    return np.mean([stats.norm.pdf(x, s, 1.0) for s in signals])

  lo, hi = -12.0, max(signals) + 12.0
  points = list(np.linspace(lo, hi, 60))
  forward = integrate.quad(
      lambda x: max(q(x) - math.exp(epsilon) * stats.norm.pdf(x), 0), lo, hi,
      points=points, limit=400, epsabs=1e-13)[0]
  backward = integrate.quad(
      lambda x: max(stats.norm.pdf(x) - math.exp(epsilon) * q(x), 0), lo, hi,
      points=points, limit=400, epsabs=1e-13)[0]
  return max(forward, backward)


@pytest.mark.parametrize('signals, delta', [
    ([0.0, 0.4, 1.7, 2.25, 2.25], 1e-3), ([0.3, 3.1], 1e-4)])
def test_real_valued_mixture_matches_numerical_integration(signals, delta):
  got = last_iterate.mixture_epsilon(signals, 1.0, delta)
  assert got > 0
  assert _mixture_delta_by_quadrature(got, signals) == pytest.approx(
      delta, rel=1e-4)
  # Scaling the signals and the noise together changes nothing.
  assert last_iterate.mixture_epsilon(np.array(signals) * 3.0, 3.0,
                                      delta) == pytest.approx(got, rel=1e-9)


def test_server_momentum_has_the_launchers_rule():
  assert (references.RunFacts.rules['server_momentum'] is
          run_plan.OptimizerSpec.rules['momentum'])
  for bad in (1.0, -0.1, math.nan):
    with pytest.raises(ValueError, match='server_momentum'):
      references.RunFacts(1.0, DELTA, 10, server_momentum=bad)
  with pytest.raises(TypeError, match='server_momentum'):
    references.RunFacts(1.0, DELTA, 10, server_momentum='0.9')
  # Momentum needs each canary's rounds.
  with pytest.raises(ValueError, match='schedule'):
    mechanisms.Gaussian().references(references.RunFacts(
        1.0, DELTA, 10, rounds=3, server_momentum=0.5))
  with pytest.raises(ValueError, match='reals'):
    dp_fedavg.last_iterate_epsilon(1.0, DELTA, 3, [5.0], momentum=0.5)
