"""Tests of one_shot_epe.stats.decorrelation: the decorrelated all-iterates scores.

Independent truths: DP-FedAvg's independent noise (C = I, where the score of
a canary inserted once is its projection on that round over the noise std),
an explicit loop over rounds for the matched filter, and the scores' laws
simulated under correlated noise C^{-1} Z: N(S ||C 1_R|| / s, 1) inserted,
N(0, 1) never inserted.
"""

import numpy as np
import pytest

from one_shot_epe.stats import decorrelation


def test_toeplitz_strategy_is_lower_triangular_with_the_coefficients():
  np.testing.assert_array_equal(decorrelation.toeplitz_strategy([2., 1., .5]),
                                [[2, 0, 0], [1, 2, 0], [.5, 1, 2]])
  with pytest.raises(ValueError, match='coefs'):
    decorrelation.toeplitz_strategy([])


def test_independent_noise_scores_the_projection_of_the_insertion_round():
  rng = np.random.default_rng(0)
  projections = rng.normal(size=(4, 3))
  seen, unseen = decorrelation.matched_filter_scores(
      projections, np.eye(3), [[0], [1], []], num_seen=2, noise_std=0.5)
  np.testing.assert_allclose(seen, [projections[0, 0] / 0.5,
                                    projections[1, 1] / 0.5])
  # Unseen canary j takes seen canary j's filter.
  np.testing.assert_allclose(unseen, [projections[2, 0] / 0.5,
                                      projections[3, 1] / 0.5])


def test_matched_filter_equals_an_explicit_sum_over_rounds():
  rng = np.random.default_rng(1)
  strategy = decorrelation.toeplitz_strategy([1.0, 0.6, 0.3, 0.1])
  projections = rng.normal(size=(5, 4))
  schedule = [[0, 2], [1], [0], []]
  seen, unseen = decorrelation.matched_filter_scores(
      projections, strategy, schedule, num_seen=3, noise_std=2.0)
  expected = []
  for j in range(5):
    rounds = [t for t, ids in enumerate(schedule) if j % 3 in ids]
    w = sum(strategy[:, t] for t in rounds)
    y = [sum(strategy[t, s] * projections[j, s] for s in range(4))
         for t in range(4)]
    expected.append(np.dot(y, w) / np.linalg.norm(w) / 2.0)
  np.testing.assert_allclose(np.concatenate([seen, unseen]), expected)


def test_scores_under_correlated_noise_have_the_gaussian_laws():
  rng = np.random.default_rng(2)
  rounds, canaries, clip, sigma = 6, 20_000, 1.0, 0.8
  strategy = decorrelation.toeplitz_strategy(0.7**np.arange(rounds))
  schedule = [[] for _ in range(rounds)]
  schedule[1] = list(range(canaries))  # Every seen canary in round 1 ...
  schedule[4] = list(range(canaries // 2))  # ... half of them in round 4.
  signal = np.zeros((2 * canaries, rounds))
  for t, ids in enumerate(schedule):
    signal[ids, t] = clip
  # Each round's released noise is (C^{-1} Z)_t, projected on a canary.
  noise = rng.normal(scale=sigma, size=(2 * canaries, rounds)) @ np.linalg.inv(
      strategy).T
  seen, unseen = decorrelation.matched_filter_scores(
      signal + noise, strategy, schedule, num_seen=canaries, noise_std=sigma)
  once = np.linalg.norm(strategy[:, 1]) * clip / sigma
  twice = np.linalg.norm(strategy[:, 1] + strategy[:, 4]) * clip / sigma
  for scores, mean in ((seen[:canaries // 2], twice),
                       (seen[canaries // 2:], once), (unseen, 0.0)):
    assert abs(scores.mean() - mean) < 4 / np.sqrt(scores.size)
    assert abs(scores.std() - 1.0) < 0.03


def test_canaries_never_inserted_are_left_out_and_bad_input_refused():
  seen, unseen = decorrelation.matched_filter_scores(
      np.ones((4, 2)), np.eye(2), [[0], []], num_seen=2, noise_std=1.0)
  assert seen.shape == (1,) and unseen.shape == (2,)
  empty = decorrelation.matched_filter_scores(
      np.ones((2, 2)), np.eye(2), [[], []], num_seen=1, noise_std=1.0)
  assert empty[0].size == empty[1].size == 0
  with pytest.raises(ValueError, match='noise_std'):
    decorrelation.matched_filter_scores(np.ones((2, 2)), np.eye(2), [[0], []],
                                        num_seen=1, noise_std=0.0)
  with pytest.raises(ValueError, match='strategy'):
    decorrelation.matched_filter_scores(np.ones((2, 2)), np.eye(3), [[0], []],
                                        num_seen=1, noise_std=1.0)
