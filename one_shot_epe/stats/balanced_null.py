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
mistakes, valid at every level for every n >= 1 (docs/bounds.md). It is not
the Bernoulli game's P[Bin(r, 1/2) <= u]: the balance ties the labels
together (covariance -1/(4 (n - 1)) between two of them), which can make
the mistakes more spread out than a binomial's when the guesses mix "in"
and "out". numpy/scipy only.
"""

import math

import numpy as np
from scipy import stats

from one_shot_epe import validation

__all__ = ['permutation_p_value']


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
  weights = stats.hypergeom.pmf(hits, canaries, seen, guesses)
  # X >= c <=> T = a + h - 2 X <= u, with c = ceil((a + h - u) / 2).
  least = -((mistakes_made - guessed_in - hits) // 2)
  tails = stats.hypergeom.sf(least - 1, guesses, hits, guessed_in)
  return float(min(1.0, max(0.0, math.fsum(weights * tails))))
