"""Tests of one_shot_epe.stats.balanced_null: the game's no-signal p-value.

The p-value is checked against a count over every labelling, and its level
against the game as it runs: for n = 2 ... 20 canaries with k = floor(n/2)
seen (the project's k of 2k for even n) and scores that carry no signal
(with and without ties), `tight_audit.mistakes` is run on every possible
seen set (n <= 16: all C(n, k) of them, so P(p <= v) <= v is checked
exactly at every value v the p-value takes) or on 20,000 uniformly random
ones (n = 17 ... 20: P(p <= alpha) <= alpha + 3 standard errors
sqrt(alpha (1 - alpha) / 20000), at most 0.0106 at alpha = 0.5). The
Bernoulli(1/2) game's p-value P[Bin(r, 1/2) <= u] fails the same check at
n = 2 ... 8, which shows the check can fail.
"""

import itertools

import numpy as np
import pytest

from one_shot_epe.stats import balanced_null
from one_shot_epe.stats import tight_audit

_ALPHAS = (0.01, 0.05, 0.1, 0.25, 0.5)
_ENUMERATED = 16
_DRAWS = 20000


def _counted_p_value(u, guessed_in, guesses, seen, canaries):
  """P[T <= u] counted over every seen set (the first a guesses say in)."""
  hits = total = 0
  for chosen in itertools.combinations(range(canaries), seen):
    inserted = np.zeros(canaries, bool)
    inserted[list(chosen)] = True
    made = (np.sum(~inserted[:guessed_in]) +
            np.sum(inserted[guessed_in:guesses]))
    hits += made <= u
    total += 1
  return hits / total


@pytest.mark.parametrize('canaries,seen,guesses,guessed_in', [
    (2, 1, 2, 1), (8, 4, 5, 3), (9, 3, 6, 0), (9, 3, 6, 6), (10, 7, 4, 2),
    (7, 0, 3, 1), (7, 7, 7, 4), (12, 6, 12, 6)])
def test_p_value_is_the_count_over_every_seen_set(canaries, seen, guesses,
                                                  guessed_in):
  for u in range(guesses + 1):
    assert balanced_null.permutation_p_value(
        u, guessed_in, guesses, seen, canaries) == pytest.approx(
            _counted_p_value(u, guessed_in, guesses, seen, canaries),
            abs=1e-12)


def test_balanced_mistakes_are_not_binomial():
  # docs/bounds.md: n = 2, one "in" and one "out" guess, no signal: both
  # right (u = 0) with probability 1/2, not Bernoulli's 1/4.
  assert balanced_null.permutation_p_value(0, 1, 2, 1, 2) == 0.5


def _seen_sets(canaries, seen, rng):
  """Every seen set (as boolean masks) for small n, else _DRAWS of them."""
  if canaries <= _ENUMERATED:
    for chosen in itertools.combinations(range(canaries), seen):
      inserted = np.zeros(canaries, bool)
      inserted[list(chosen)] = True
      yield inserted
    return
  for _ in range(_DRAWS):
    inserted = np.zeros(canaries, bool)
    inserted[rng.permutation(canaries)[:seen]] = True
    yield inserted


def _worst_excess(scores, p_value, rng):
  """max over r and levels v of P(p_r <= v) - v (less the draws' margin)."""
  canaries, seen = scores.size, scores.size // 2
  made, said_in = [], None
  for inserted in _seen_sets(canaries, seen, rng):
    mistakes, guessed_in = tight_audit.mistakes.unchecked(
        scores[inserted], scores[~inserted])
    # The "in" guesses depend on the scores only.
    assert said_in is None or np.array_equal(guessed_in, said_in)
    made.append(mistakes)
    said_in = guessed_in
  made = np.array(made)
  worst = -1.0
  for guesses in range(1, canaries + 1):
    table = np.array([p_value(u, int(said_in[guesses - 1]), guesses, seen,
                              canaries) for u in range(guesses + 1)])
    p = table[made[:, guesses - 1]]
    if canaries <= _ENUMERATED:
      levels, margins = np.unique(table), 0.0
    else:
      levels = np.array(_ALPHAS)
      margins = 3.0 * np.sqrt(levels * (1.0 - levels) / _DRAWS)
    rates = np.mean(p[:, None] <= levels[None, :], axis=0)
    worst = max(worst, float(np.max(rates - levels - margins)))
  return worst


def _bernoulli_p_value(u, guessed_in, guesses, seen, canaries):
  """The Bernoulli game's p-value at no signal: P[Bin(r, 1/2) <= u]."""
  del guessed_in, seen
  return tight_audit.tight_p_value(u, guesses, canaries, 'gdp', 0.0, 1e-6)


@pytest.mark.parametrize('canaries', range(2, 21))
@pytest.mark.parametrize('ties', [True, False])
def test_no_signal_level_holds_for_the_game_as_it_guesses(canaries, ties):
  rng = np.random.default_rng(canaries)
  scores = (rng.integers(0, 3, canaries).astype(float) if ties else
            rng.normal(size=canaries))
  assert _worst_excess(scores, balanced_null.permutation_p_value,
                       rng) <= 1e-12


def test_the_bernoulli_p_value_fails_the_same_check():
  rng = np.random.default_rng(0)
  # n = 2, one seen: the guesses are one "in" and one "out", both right half
  # the time, where the Bernoulli p-value of that outcome is 1/4.
  assert _worst_excess(np.array([0.0, 1.0]), _bernoulli_p_value,
                       rng) == pytest.approx(0.25)
  assert min(_worst_excess(rng.normal(size=n), _bernoulli_p_value, rng)
             for n in range(3, 9)) > 0.1


@pytest.mark.parametrize('kwargs,message', [
    ({'mistakes_made': 6}, 'mistakes_made'), ({'guessed_in': -1},
                                              'guessed_in'),
    ({'guesses': 11}, 'guesses'), ({'seen': 11}, 'seen'),
    ({'canaries': 0}, 'canaries')])
def test_bad_arguments(kwargs, message):
  arguments = dict(mistakes_made=1, guessed_in=2, guesses=5, seen=5,
                   canaries=10) | kwargs
  with pytest.raises(ValueError, match=message):
    balanced_null.permutation_p_value(**arguments)
