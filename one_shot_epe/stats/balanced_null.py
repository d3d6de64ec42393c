"""The one-run game's exact p-value when the scores carry no signal.

The project inserts a uniformly random k of its n canaries (k seen of 2k, a
balanced assignment; a Bernoulli(1/2) design given its count is the same).
When the scores carry no signal (they are independent of which canaries were
inserted), the game's guesses are a function of the scores alone
(`tight_audit.mistakes`, with identical scores ordered against the auditor),
so given the guesses the seen set is still a uniformly random k-subset of
the n canaries. Of the r guesses, a say "in" and r - a say "out". The seen
canaries among the r guessed, H, are hypergeometric: n canaries, k seen, r
drawn. Given H = h, the seen canaries among the a "in" guesses, X, are
hypergeometric too: r canaries, h seen, a drawn. A guess is wrong when an
"in" canary is unseen or an "out" canary is seen, so the mistakes are
T = (a - X) + (h - X), and

  P[T <= u] = sum_h P[H = h] P[X >= ceil((a + h - u) / 2) | H = h]

exactly: the p-value of "the scores carry no signal" for u observed
mistakes, valid at every level for every n >= 1 (docs/bounds.md). Terms
with P[H = h] <= `NEGLIGIBLE` count with tail 1: the value returned is at
most n * 1e-20 above the exact one, never below it (valid still; below
1e-19 it reads as "about 0"), and takes 0.1 s at n = 20,000. It is not
the Bernoulli game's P[Bin(r, 1/2) <= u]: the balance ties the labels
together (covariance -1/(4 (n - 1)) between two of them), which can make
the mistakes more spread out than a binomial's when the guesses mix "in"
and "out". numpy/scipy only.
"""

import math

import numpy as np
from scipy import special
from scipy import stats

from one_shot_epe import validation

__all__ = ['NEGLIGIBLE', 'permutation_p_value']

# P[H = h] below which a term's tail is taken as 1 (its whole weight).
NEGLIGIBLE = 1e-20


@validation.arguments(canaries=validation.Int(1))
def permutation_p_value(mistakes_made: int, guessed_in: int, guesses: int,
                        seen: int, canaries: int) -> float:
  """P[T <= u] when the seen set is a uniformly random subset of its size.

  Args:
    mistakes_made: u, the mistakes among the r guesses, in [0, r].
    guessed_in: a, the "in" guesses among the r, in [0, r].
    guesses: r, the guessed canaries, in [1, n].
    seen: k, the seen (inserted) canaries, in [0, n].
    canaries: n >= 1, all canaries of the game.

  Returns:
    The p-value, in [0, 1] (module docstring).

  Raises:
    ValueError: if an argument is out of range.
  """
  # Their ranges depend on each other: checked here, not by the decorator.
  guesses = validation.check_int('guesses', guesses, 1, canaries)
  seen = validation.check_int('seen', seen, 0, canaries)
  guessed_in = validation.check_int('guessed_in', guessed_in, 0, guesses)
  mistakes_made = validation.check_int('mistakes_made', mistakes_made, 0,
                                       guesses)
  hits = np.arange(max(0, guesses - (canaries - seen)),
                   min(guesses, seen) + 1)
  # P[H = h] from log-binomials (scipy's vectorised pmf takes seconds at
  # n = 20,000); the tails only where P[H = h] > NEGLIGIBLE, the rest
  # counted as tail 1, so the p-value can only grow (by < n * NEGLIGIBLE).
  weights = np.exp(_log_choose(seen, hits) +
                   _log_choose(canaries - seen, guesses - hits) -
                   _log_choose(canaries, guesses))
  kept = weights > NEGLIGIBLE
  # X >= c <=> T = a + h - 2 X <= u, with c = ceil((a + h - u) / 2).
  least = -((mistakes_made - guessed_in - hits[kept]) // 2)
  tails = stats.hypergeom.sf(least - 1, guesses, hits[kept], guessed_in)
  return float(min(1.0, max(0.0, math.fsum(weights[kept] * tails) +
                            math.fsum(weights[~kept]))))


def _log_choose(n: int, k: np.ndarray) -> np.ndarray:
  """log C(n, k), elementwise, for 0 <= k <= n."""
  return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(
      n - k + 1)
