"""One-run lower bounds on epsilon from seen and unseen canary scores.

The canaries of one training run are an experiment of their own: which of
them were inserted (seen) and which not (unseen) was decided at random, so
an attacker who guesses "inserted" for the canaries scoring at or above a
threshold t plays the guessing game of Steinke, Nasr and Jagielski (2023,
"Privacy auditing with one (1) training run"). For an (eps, delta)-DP
mechanism the number of correct guesses among n_guess is stochastically
dominated by Binomial(n_guess, e^eps / (1 + e^eps)) up to a delta term
(their Theorem 3.3, one-sided: only "inserted" guesses); a count too large
for that rejects the claim "the mechanism is (eps, delta)-DP" at level alpha,
and the largest rejected eps is a 1 - alpha lower bound. `epsilon_one_run`
computes it. `epsilon_one_run_fdp` replaces the binomial tail by the
recursion of Mahloujifar et al. (2024, "Auditing f-differential privacy in
one run", Algorithm 'audit with cap') for the Gaussian trade-off curve of
each (eps, delta), which is tighter for Gaussian mechanisms.

Both are one-sided and pay for the choice of the threshold with a Bonferroni
correction over the candidate thresholds. Only thresholds on the upper
convex hull of the empirical ROC curve are candidates: a threshold below the
hull is beaten by a mix of its neighbours. These are the choices of
jax-privacy 2.0.0's `CanaryScoreAuditor(seen, unseen).epsilon_one_run` and
`.epsilon_one_run_fdp` with their defaults, whose values the tests reproduce.
numpy/scipy only.
"""

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special
from scipy import stats

from one_shot_epe.stats import estimation
from one_shot_epe import validation

__all__ = ['epsilon_one_run', 'epsilon_one_run_fdp', 'fdp_excess',
           'hull_counts', 'largest_rejected', 'steinke_p_value', 'upper_hull']

# Tolerance of the root in eps (absolute).
_EPSILON_TOLERANCE = 1e-9


def _check_separable(seen: np.ndarray, unseen: np.ndarray) -> None:
  """Raises ValueError when the checked scores are all one value."""
  if np.all(seen == seen[0]) and np.all(unseen == seen[0]):
    raise ValueError('seen and unseen scores are all equal; no threshold '
                     'tells them apart.')


def upper_hull(points: np.ndarray) -> np.ndarray:
  """Indices of the strictly convex upper hull of points sorted by (x, y).

  Andrew's monotone chain: a point stays only if the chain turns strictly
  clockwise there (collinear points go).

  Args:
    points: [n, 2] float points, sorted by x and then y.

  Returns:
    The indices of the hull's vertices, increasing.
  """
  hull: list[int] = []
  for index, (x, y) in enumerate(points):
    while len(hull) >= 2:
      (x0, y0), (x1, y1) = points[hull[-2]], points[hull[-1]]
      if (y1 - y0) * (x - x1) - (y - y1) * (x1 - x0) > 0:
        break
      hull.pop()
    hull.append(index)
  return np.array(hull)


def hull_counts(seen: np.ndarray,
                unseen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(true positives, false positives) of "score >= t" on the ROC hull.

  The thresholds are every distinct score and +infinity; the points (missed
  seen, rejected unseen) rise with t, and the candidates are the vertices of
  their upper convex hull.

  Args:
    seen: Scores of the inserted canaries, a 1-D float array.
    unseen: Scores of the canaries never inserted, a 1-D float array.

  Returns:
    (true positives, false positives): integer arrays, one entry per hull
    vertex, of the seen and unseen scores >= that vertex's threshold.
  """
  thresholds = np.append(np.union1d(seen, unseen), np.inf)
  misses = np.searchsorted(np.sort(seen), thresholds, side='left')
  rejections = np.searchsorted(np.sort(unseen), thresholds, side='left')
  keep = upper_hull(np.stack([misses, rejections], axis=1).astype(np.float64))
  return seen.size - misses[keep], unseen.size - rejections[keep]


def steinke_p_value(canaries: int, guesses: int, correct: int,
                    epsilon: float, delta: float) -> float:
  """P-value of `correct` right guesses of `guesses` under (eps, delta)-DP.

  Steinke, Nasr and Jagielski (2023), Theorem 3.3 with k_- = 0: the
  binomial tail beta = P[Bin(guesses, q) >= correct], q = e^eps/(1 + e^eps),
  plus 2 m delta max_i (P[Bin >= correct - i] - beta) / i over i = 1 ...
  correct, m the number of canaries; capped at 1. The counts come from
  `hull_counts` of checked scores.

  Args:
    canaries: m, the seen and unseen canaries together.
    guesses: The "inserted" guesses, in [1, m].
    correct: The right ones among them, in [0, guesses].
    epsilon: The eps of the claim tested, >= 0.
    delta: Its delta, in [0, 1).

  Returns:
    The p-value, in [0, 1].
  """
  q = special.expit(epsilon)
  beta = float(stats.binom.sf(correct - 1, guesses, q))
  if delta == 0:
    return beta
  shifts = np.arange(1, correct + 1)
  excess = (stats.binom.sf(correct - shifts - 1, guesses, q) - beta) / shifts
  return min(beta + float(np.max(excess, initial=0.0)) * delta * 2 * canaries,
             1.0)


def _gaussian_sigma(epsilon: float, delta: float) -> float:
  """Noise of the Gaussian mechanism that is exactly (eps, delta)-DP.

  Balle and Wang (`estimation.gaussian_sigma`); at eps = 0,
  delta = 2 Phi(1/(2 sigma)) - 1 gives sigma in closed form.
  """
  if epsilon == 0:
    return 0.5 / float(stats.norm.ppf((1.0 + delta) / 2.0))
  return estimation.gaussian_sigma.unchecked(epsilon, delta)


def fdp_excess(canaries: int, guesses: int, correct: int, alpha: float,
               epsilon: float, delta: float) -> float:
  """Positive when the guesses falsify the Gaussian f-DP of (eps, delta).

  Mahloujifar et al. (2024), the recursion with a cap: starting from the
  alpha-scaled shares of right (r) and wrong (h) guesses, wrong guesses are
  raised to the trade-off curve's inverse f^-1(r) = Phi(Phi^-1(r) - 1/sigma),
  for sigma the Gaussian mechanism's noise at (eps, delta), and right ones
  by the share they imply, once for each correct guess; the claim is
  falsified when r + h ends below guesses / canaries.

  Args:
    canaries: m, the seen and unseen canaries together.
    guesses: The "inserted" guesses, in [1, m].
    correct: The right ones among them, in [0, guesses].
    alpha: The test's level, in (0, 1).
    epsilon: The eps of the Gaussian mechanism claimed, >= 0.
    delta: Its delta, in (0, 1).

  Returns:
    The excess r + h - guesses / canaries: positive rejects the claim.
  """
  shift = 1.0 / _gaussian_sigma(epsilon, delta)
  right = alpha * correct / canaries
  wrong = alpha * (guesses - correct) / canaries
  for i in range(correct - 1, -1, -1):
    # special.ndtr/ndtri are what norm.cdf/ppf compute, without their
    # per-call overhead (this loop runs once per correct guess).
    raised = max(wrong, float(special.ndtr(special.ndtri(right) - shift)))
    if raised == wrong:
      break
    right = min(right + i / (guesses - i) * (raised - wrong), 1.0)
    wrong = raised
  return right + wrong - guesses / canaries


def largest_rejected(rejects: Callable[[float], float], floor: float) -> float:
  """The eps >= floor where `rejects` (positive: claim rejected) turns <= 0.

  `floor` itself when the claim at `floor` stands; else the root, bracketed
  by doubling.

  Args:
    rejects: eps -> a number that is positive where the claim "the mechanism
      is eps-private" is rejected, decreasing in eps.
    floor: The smallest eps of interest, >= 0 (the best bound so far).

  Returns:
    The largest rejected eps, at least `floor`.
  """
  if rejects(floor) <= 0:
    return floor
  low, high = floor, max(1.0, 2.0 * floor)
  while rejects(high) > 0:
    low, high = high, 2.0 * high
  return optimize.brentq(rejects, low, high, xtol=_EPSILON_TOLERANCE)


_Bound = Callable[[int, float, float, int, int], float]


def _best_over_thresholds(seen: np.ndarray, unseen: np.ndarray, alpha: float,
                          bound: _Bound) -> float:
  """The largest bound over the hull's thresholds, each at a shared level.

  The level is alpha / (number of `hull_counts` thresholds), and
  `bound(canaries, level, floor, guesses, correct)` is a threshold's bound,
  or `floor` when it does not exceed it. Thresholds are tried in order of
  decreasing Clopper-Pearson lower bound on their precision, and one whose
  raw precision is at most e^eps / (1 + e^eps) of the best eps so far is
  skipped: its right guesses cannot reject that eps.
  """
  canaries = seen.size + unseen.size
  correct, wrong = hull_counts(seen, unseen)
  level = alpha / correct.size
  guesses = correct + wrong
  wrong_upper = np.where(
      wrong < guesses,
      stats.beta.ppf(1.0 - level, wrong + 1, np.maximum(guesses - wrong, 1)),
      1.0)
  best, best_precision = 0.0, 0.5
  for index in np.argsort(-(1.0 - wrong_upper), kind='stable'):
    n_guess, n_correct = int(guesses[index]), int(correct[index])
    if n_guess == 0 or n_correct / n_guess <= best_precision:
      continue
    candidate = bound(canaries, level, best, n_guess, n_correct)
    if candidate > best:
      best, best_precision = candidate, float(special.expit(candidate))
  return best


@validation.arguments('seen', 'unseen', 'delta', 'alpha')
def epsilon_one_run(seen: ArrayLike, unseen: ArrayLike, *, delta: float,
                    alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps of Steinke, Nasr and Jagielski (2023).

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    unseen: Scores of the canaries never inserted.
    delta: The delta of the (eps, delta) claim tested, in (0, 1).
    alpha: 1 - confidence, in (0, 1).

  Returns:
    The largest eps whose (eps, delta)-DP claim the best threshold's guesses
    reject at level alpha / (number of hull thresholds); 0 if none.

  Raises:
    ValueError: if a set of scores is not a 1-D sample of at least 2 finite
      numbers, all scores are equal, or `delta` or `alpha` is not in (0, 1).
  """
  _check_separable(seen, unseen)

  def bound(canaries: int, level: float, floor: float, guesses: int,
            correct: int) -> float:
    if steinke_p_value(canaries, guesses, correct, floor, 0.0) > level:
      return floor  # Not rejected even without delta's share.
    return largest_rejected(
        lambda eps: level - steinke_p_value(canaries, guesses, correct, eps,
                                            delta), floor)

  return _best_over_thresholds(seen, unseen, alpha, bound)


@validation.arguments('seen', 'unseen', 'delta', 'alpha')
def epsilon_one_run_fdp(seen: ArrayLike, unseen: ArrayLike, *, delta: float,
                        alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps of Mahloujifar et al. (2024), Gaussian f-DP.

  The claim tested at each eps is that the mechanism is as private as the
  Gaussian mechanism that is exactly (eps, delta)-DP; the arguments and their
  checks are those of `epsilon_one_run`.

  Args:
    seen: The inserted canaries' scores.
    unseen: The never-inserted canaries' scores.
    delta: The delta of the Gaussian mechanism each claim names.
    alpha: 1 - confidence.

  Returns:
    The largest eps whose Gaussian f-DP claim the best threshold's guesses
    reject at level alpha / (number of hull thresholds); 0 if none.

  Raises:
    ValueError: as `epsilon_one_run`.
  """
  _check_separable(seen, unseen)

  def bound(canaries: int, level: float, floor: float, guesses: int,
            correct: int) -> float:
    return largest_rejected(
        lambda eps: fdp_excess(canaries, guesses, correct, level, eps, delta),
        floor)

  return _best_over_thresholds(seen, unseen, alpha, bound)
