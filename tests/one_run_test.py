"""Tests of one_shot_epe.stats.one_run: one-run lower bounds (Steinke et al. 2023;
Mahloujifar et al. 2024).

Truths: the binomial tail in closed form for perfectly separated scores, the
upper convex hull by brute force over point triples, and coverage by
simulation against the exact eps of a Gaussian mechanism. The comparison with
jax-privacy's implementation is in one_run_jax_privacy_test.py.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import special

from one_shot_epe.stats import estimation
from one_shot_epe.stats import one_run


def test_perfect_separation_is_the_binomial_tail_in_closed_form():
  # Every seen above every unseen: the ROC hull has 3 vertices (guess all,
  # guess the seen ones, guess none), so the level is alpha / 3; guessing the
  # 50 seen ones right rejects eps while q^50 <= alpha / 3, q = e^eps/(1 + e^eps)
  # (delta's share vanishes at delta = 1e-12).
  seen, unseen = np.arange(50) + 100.0, np.arange(30, dtype=np.float64)
  got = one_run.epsilon_one_run(seen, unseen, delta=1e-12, alpha=0.05)
  expected = special.logit((0.05 / 3)**(1 / 50))
  assert got == pytest.approx(expected, rel=1e-6)
  assert one_run.hull_counts(seen, unseen)[0].size == 3


def test_hull_keeps_exactly_the_strict_upper_hull_vertices():
  # Brute force over the points (misses, rejections) in threshold order: the
  # two ends stay; an interior point stays iff no chord between a point
  # before it and one after it passes on or above it.
  rng = np.random.default_rng(3)
  for _ in range(20):
    seen = np.round(rng.normal(1.0, 1.0, 15), 1)
    unseen = np.round(rng.normal(0.0, 1.0, 12), 1)
    thresholds = np.append(np.union1d(seen, unseen), np.inf)
    points = [(int(np.sum(seen < t)), int(np.sum(unseen < t)))
              for t in thresholds]
    last = len(points) - 1

    def dominated(i):
      x, y = points[i]
      for j, k in itertools.product(range(i), range(i + 1, last + 1)):
        (x0, y0), (x1, y1) = points[j], points[k]
        if x1 == x0 or y <= y0 + (y1 - y0) * (x - x0) / (x1 - x0):
          return True
      return False

    vertices = [points[i] for i in range(last + 1)
                if i in (0, last) or not dominated(i)]
    correct, wrong = one_run.hull_counts(seen, unseen)
    got = [(seen.size - c, unseen.size - w) for c, w in zip(correct, wrong)]
    assert got == vertices


def _gaussian_scores(rng, mu, size):
  return rng.normal(mu, 1.0, size), rng.normal(0.0, 1.0, size)


@pytest.mark.parametrize('bound', [one_run.epsilon_one_run,
                                   one_run.epsilon_one_run_fdp])
def test_bounds_hold_at_their_level_by_simulation(bound):
  # Scores N(mu, 1) of inserted canaries against N(0, 1): each canary is a
  # Gaussian mechanism at sigma = 1/mu. A 95% bound exceeds the true eps in
  # at most 5% of runs, plus three standard errors.
  delta, mu, runs = 1e-5, 3.0, 120
  truth = estimation.gaussian_epsilon(1 / mu, delta)
  rng = np.random.default_rng(4)
  values = [bound(*_gaussian_scores(rng, mu, 150), delta=delta)
            for _ in range(runs)]
  assert np.mean(np.array(values) > truth) <= 0.05 + 3 * math.sqrt(
      0.05 * 0.95 / runs)
  assert np.mean(values) > 0.3  # Not vacuous.


def test_bounds_grow_with_separation_and_alpha_and_vanish_without_signal():
  rng = np.random.default_rng(5)
  noise_seen, noise_unseen = rng.normal(0, 1, 300), rng.normal(0, 1, 300)
  for bound in (one_run.epsilon_one_run, one_run.epsilon_one_run_fdp):
    values = [bound(noise_seen + shift, noise_unseen, delta=1e-5)
              for shift in (0.0, 1.0, 2.0, 4.0)]
    assert values[0] < 0.2 and all(np.diff(values) > 0), values
    assert bound(noise_seen + 2, noise_unseen, delta=1e-5, alpha=0.01) <= (
        bound(noise_seen + 2, noise_unseen, delta=1e-5, alpha=0.2))


def test_fdp_bound_is_tighter_on_gaussian_scores():
  # Mahloujifar et al.: auditing the Gaussian trade-off curve gains over the
  # eps-only binomial test when the scores are Gaussian.
  rng = np.random.default_rng(6)
  pairs = [(one_run.epsilon_one_run(s, u, delta=1e-5),
            one_run.epsilon_one_run_fdp(s, u, delta=1e-5))
           for s, u in (_gaussian_scores(rng, 2.0, 400) for _ in range(5))]
  assert np.mean([fdp for _, fdp in pairs]) > np.mean([e for e, _ in pairs])


@pytest.mark.parametrize('call,message', [
    (lambda f: f([], [0.1, 0.2], delta=1e-5), 'seen'),
    (lambda f: f([0.3], [0.1, 0.2], delta=1e-5), 'seen needs at least 2'),
    (lambda f: f([0.3, 0.4], [0.1], delta=1e-5), 'unseen needs at least 2'),
    (lambda f: f([0.3, float('nan')], [0.1, 0.2], delta=1e-5), 'seen'),
    (lambda f: f([0.1, 0.1], [0.1, 0.1], delta=1e-5), 'all equal'),
    (lambda f: f([0.3, 0.4], [0.1, 0.2], delta=0.0), 'delta'),
    (lambda f: f([0.3, 0.4], [0.1, 0.2], delta=1.0), 'delta'),
    (lambda f: f([0.3, 0.4], [0.1, 0.2], delta=1e-5, alpha=0.0), 'alpha'),
    (lambda f: f([0.3, 0.4], [0.1, 0.2], delta=1e-5, alpha=1.5), 'alpha'),
])
@pytest.mark.parametrize('function', [one_run.epsilon_one_run,
                                      one_run.epsilon_one_run_fdp])
def test_bad_input_names_the_argument(call, message, function):
  with pytest.raises(ValueError, match=message):
    call(function)
