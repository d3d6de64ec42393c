"""Tests of experiments.baselines.canife_attack (CANIFE Sec. 3.2 and 3.4).

Truths: brute-force enumeration of thresholds and rates; exact
separability when there is no noise and the canary is orthogonal to the
cohorts; the monotone effect of noise on a fixed canary, with fixed seeds.
"""

import math

import numpy as np
import pytest

from experiments.baselines import canife_attack


def _brute_force_epsilon(scores, inserted, delta):
  """eps_hat_r by explicit loops, with CANIFE's reading (see the module)."""
  positives = [s for s, i in zip(scores, inserted) if i]
  negatives = [s for s, i in zip(scores, inserted) if not i]
  best = 0.0
  for gamma in scores:
    fnr = sum(s < gamma for s in positives) / len(positives)
    fpr = sum(s >= gamma for s in negatives) / len(negatives)
    if fpr == 0 and fnr == 0:
      return math.inf
    for numerator, denominator in ((1 - delta - fpr, fnr),
                                   (1 - delta - fnr, fpr)):
      if numerator > 0 and denominator > 0:
        best = max(best, math.log(numerator / denominator))
  return best


def test_epsilon_matches_brute_force_on_random_score_sets():
  rng = np.random.default_rng(0)
  for trial in range(30):
    n = int(rng.integers(4, 40))
    inserted = rng.random(n) < 0.5
    inserted[:2] = [True, False]
    scores = rng.standard_normal(n) + 1.5 * inserted
    scores = np.round(scores, 1)  # Creates ties.
    delta = 1.0 / n
    assert canife_attack.epsilon_from_scores(scores, inserted, delta) == (
        pytest.approx(_brute_force_epsilon(scores, inserted, delta))), trial


def test_epsilon_hand_computed_cases():
  # Perfectly separated: infinite.
  assert canife_attack.epsilon_from_scores(
      [0.0, 1.0, 2.0, 3.0], [False, False, True, True], 0.01) == math.inf
  # 50 + 50 rounds with one negative above every positive: the best threshold
  # (the lowest positive) has FNR = 0, FPR = 1/50, so eps = log((1 - 0.01) /
  # (1/50)) = log(49.5), CANIFE's "at most 3.89" for n = 100.
  negatives = np.concatenate([np.arange(49.0), [200.0]])
  positives = np.arange(100.0, 150.0)
  eps = canife_attack.epsilon_from_scores(
      np.concatenate([negatives, positives]),
      np.concatenate([np.zeros(50, bool), np.ones(50, bool)]), 0.01)
  assert eps == pytest.approx(math.log(0.99 * 50))
  # Identical distributions with interleaved scores: eps is small.
  assert canife_attack.epsilon_from_scores(
      np.arange(100.0), np.arange(100) % 2 == 0, 0.01) < 0.05


def test_max_accuracy_threshold_is_the_bound_at_the_most_accurate_threshold():
  # Brute force over every observed threshold: the first (ascending) of best
  # balanced accuracy, and the eps of its two rates; never above 'best'.
  rng = np.random.default_rng(7)
  for trial in range(30):
    n = int(rng.integers(10, 80))
    inserted = rng.random(n) < 0.5
    inserted[:2] = [True, False]
    scores = np.round(rng.normal(0, 1, n) + 1.5 * inserted, 1)
    delta = 1.0 / n
    best_accuracy, chosen = -1.0, None
    for gamma in np.unique(scores):
      fpr = np.mean(scores[~inserted] >= gamma)
      fnr = np.mean(scores[inserted] < gamma)
      if 1 - (fpr + fnr) / 2 > best_accuracy:
        best_accuracy, chosen = 1 - (fpr + fnr) / 2, (fpr, fnr)
    fpr, fnr = chosen
    terms = [0.0]
    if fnr > 0 and 1 - delta - fpr > 0:
      terms.append(math.log((1 - delta - fpr) / fnr))
    if fpr > 0 and 1 - delta - fnr > 0:
      terms.append(math.log((1 - delta - fnr) / fpr))
    expected = math.inf if fpr == fnr == 0 else max(terms)
    got = canife_attack.epsilon_from_scores(scores, inserted, delta,
                                            threshold='max_accuracy')
    assert got == pytest.approx(expected), trial
    assert got <= canife_attack.epsilon_from_scores(scores, inserted, delta)


def _orthogonal_setup(dim=64, cohort=8, seed=0):
  """Cohort updates in the first dim-1 coordinates, canary along the last."""
  rng = np.random.default_rng(seed)
  canary = np.zeros(dim)
  canary[-1] = 1.0

  def clipped_sum(r):
    updates = rng.standard_normal((cohort, dim))
    updates[:, -1] = 0.0
    updates /= np.maximum(1.0, np.linalg.norm(updates, axis=1))[:, None]
    return updates.sum(axis=0)

  return clipped_sum, canary


def test_without_noise_the_attack_separates_perfectly():
  clipped_sum, canary = _orthogonal_setup()
  result = canife_attack.mock_round_scores(
      clipped_sum, canary, noise_std=0.0, num_rounds=100,
      rng=np.random.default_rng(1))
  np.testing.assert_allclose(result.scores, result.inserted.astype(float),
                             atol=1e-12)
  assert 30 < result.inserted.sum() < 70  # Bernoulli(1/2), p > 0.9999.
  assert canife_attack.epsilon_from_scores(result.scores, result.inserted,
                                           0.01) == math.inf
  assert canife_attack.attack_accuracy(result.scores, result.inserted) == 1.0


def test_per_round_epsilon_falls_as_noise_grows():
  clipped_sum, canary = _orthogonal_setup()
  epsilons = []
  for noise_std in (0.0, 0.3, 1.0, 3.0):
    result = canife_attack.mock_round_scores(
        clipped_sum, canary * 1.0, noise_std=noise_std, num_rounds=400,
        rng=np.random.default_rng(7))
    epsilons.append(canife_attack.epsilon_from_scores(
        result.scores, result.inserted, 1.0 / 400))
  print('eps_hat_r at noise std 0, 0.3, 1, 3:', epsilons)
  assert epsilons[0] == math.inf
  assert all(a > b for a, b in zip(epsilons, epsilons[1:]))
  # (No closed-form target: the empirical best-threshold eps_hat_r is biased
  # upwards by tail thresholds with few errors, more so for larger n.)


def test_noise_has_the_stated_law():
  """Score noise is N(0, noise_std^2 ||u_c||^2): checked on 20 000 rounds."""
  dim = 5
  canary = np.array([3.0, 4.0, 0.0, 0.0, 0.0])  # ||u_c|| = 5.
  result = canife_attack.mock_round_scores(
      lambda r: np.zeros(dim), canary, noise_std=0.2, num_rounds=20000,
      rng=np.random.default_rng(3))
  noise = result.scores - 25.0 * result.inserted
  # std of the sample std is about 1/sqrt(2 n) relative: 0.5%; allow 4 sigma.
  assert abs(np.std(noise) / 1.0 - 1.0) < 0.02
  assert abs(np.mean(noise)) < 4 * 1.0 / math.sqrt(20000)


def test_bad_arguments_are_rejected():
  with pytest.raises(ValueError, match='num_rounds'):
    canife_attack.mock_round_scores(lambda r: np.zeros(2), np.ones(2),
                                    noise_std=1.0, num_rounds=1,
                                    rng=np.random.default_rng(0))
  with pytest.raises(ValueError, match='noise_std'):
    canife_attack.mock_round_scores(lambda r: np.zeros(2), np.ones(2),
                                    noise_std=-1.0, num_rounds=4,
                                    rng=np.random.default_rng(0))
  with pytest.raises(ValueError, match='shape'):
    canife_attack.mock_round_scores(lambda r: np.zeros(3), np.ones(2),
                                    noise_std=1.0, num_rounds=4,
                                    rng=np.random.default_rng(0))
  with pytest.raises(ValueError, match='delta'):
    canife_attack.epsilon_from_scores([0.0, 1.0], [True, False], 0.0)
  with pytest.raises(ValueError, match='at least one round'):
    canife_attack.epsilon_from_scores([0.0, 1.0], [True, True], 0.1)


def test_perfect_separation_cap_is_the_largest_finite_value():
  inserted = np.array([True] * 3 + [False] * 5)
  separated = np.where(inserted, 10.0, 0.0) + np.arange(8) * 0.01
  capped = canife_attack.epsilon_from_scores(separated, inserted, 0.1,
                                             perfect='cap')
  assert capped == pytest.approx(math.log(0.9 * 5))
  # Every imperfect arrangement of the same class sizes shows at most the cap.
  rng = np.random.default_rng(0)
  for _ in range(200):
    scores = rng.permutation(8).astype(float)
    value = canife_attack.epsilon_from_scores(scores, inserted, 0.1,
                                              perfect='cap')
    assert value <= capped + 1e-12
  with pytest.raises(ValueError, match='perfect'):
    canife_attack.epsilon_from_scores(separated, inserted, 0.1, perfect='max')
