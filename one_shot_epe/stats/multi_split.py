"""Threshold choice by repeated splits: the median of split-sample bounds.

One split spends part of the canaries on choosing the threshold of a
threshold test ("inserted iff score >= t") and evaluates the bound at that
threshold on the rest; its result depends on the luck of the split.
MultiSplit (Meinshausen, Meier and Buehlmann, 2009, "P-values for
high-dimensional regression", Theorem 3.1) repeats the split and keeps the
median: twice the median of valid p-values is a valid p-value, so the median
of lower bounds each computed at level alpha / 2 is a 1 - alpha lower bound.
This is jax-privacy's `auditing.MultiSplit` (its main branch, newer than
2.0.0), for the bounds it applies to: the one-run certificates of
Steinke, Nasr and Jagielski (2023) and Mahloujifar et al. (2024) (`one_run`)
and the Clopper-Pearson bound of Jagielski et al. (2020) with an empirical
false-positive rate. The splits reproduce its draws: a generator seeded with
`seed` draws one 63-bit seed per split; each split's generator permutes the
seen and then the unseen scores and keeps the first floor(size * fraction)
of each for the choice. Within a split the threshold is the best of the
ROC hull's on the first part at level alpha / 2 (no correction: the other
part pays nothing for it), evaluated on the second part at alpha / 2.
numpy/scipy only.
"""

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import special
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.stats import one_run

__all__ = ['BOUNDS', 'Bound', 'DEFAULT_SPLITS', 'epsilon_multi_split',
           'split_bounds']

Bound = Literal['one_run', 'one_run_fdp', 'clopper_pearson']
BOUNDS = ('one_run', 'one_run_fdp', 'clopper_pearson')
DEFAULT_SPLITS = 100


def _hull_thresholds(
    seen: np.ndarray,
    unseen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(thresholds, misses, rejections) at the ROC hull's vertices.

  The thresholds are every distinct score and +infinity in increasing order;
  misses (seen below t) and rejections (unseen below t) as in
  `one_run.hull_counts`, whose hull this keeps.
  """
  thresholds = np.append(np.union1d(seen, unseen), np.inf)
  misses = np.searchsorted(np.sort(seen), thresholds, side='left')
  rejections = np.searchsorted(np.sort(unseen), thresholds, side='left')
  keep = one_run.upper_hull(
      np.stack([misses, rejections], axis=1).astype(np.float64))
  return thresholds[keep], misses[keep], rejections[keep]


def _clopper_pearson_upper(failures: np.ndarray, trials: np.ndarray,
                           level: float) -> np.ndarray:
  """The 1 - level quantile of Beta(x + 1, n - x); 1 where x = n."""
  failures = np.asarray(failures, dtype=np.float64)
  trials = np.broadcast_to(np.asarray(trials, dtype=np.float64),
                           failures.shape)
  inside = failures < trials
  return np.where(
      inside,
      stats.beta.ppf(1.0 - level, failures + 1.0,
                     np.where(inside, trials - failures, 1.0)), 1.0)


def _best_clopper_pearson(misses: np.ndarray, alarms: np.ndarray,
                          seen_size: int, unseen_size: int, level: float,
                          delta: float, one_sided: bool) -> tuple[float, int]:
  """(eps, index) of the threshold with the largest Clopper-Pearson bound.

  Upper bounds at level/2 on both rates; eps = log(1 - FNR_up - delta) -
  log(FPR_up) where 1 - FNR_up > delta (the first maximum wins ties), then,
  two-sided, with the rates' roles swapped if that is larger; (0, -1) when no
  threshold counts.
  """
  fnr_up = _clopper_pearson_upper(misses, seen_size, level / 2.0)
  fpr_up = _clopper_pearson_upper(alarms, unseen_size, level / 2.0)

  def best(miss_up, alarm_up):
    valid = np.flatnonzero(1.0 - miss_up > delta)
    if valid.size == 0:
      return 0.0, -1
    values = np.log(1.0 - miss_up[valid] - delta) - np.log(alarm_up[valid])
    index = int(np.argmax(values))
    return max(0.0, float(values[index])), int(valid[index])

  epsilon, index = best(fnr_up, fpr_up)
  if not one_sided:
    reverse, reverse_index = best(fpr_up, fnr_up)
    if reverse > epsilon:
      epsilon, index = reverse, reverse_index
  return epsilon, index


def _clopper_pearson_at(seen: np.ndarray, unseen: np.ndarray, threshold: float,
                        level: float, delta: float, one_sided: bool) -> float:
  epsilon, _ = _best_clopper_pearson(
      np.array([np.sum(seen < threshold)]),
      np.array([np.sum(unseen >= threshold)]), seen.size, unseen.size, level,
      delta, one_sided)
  return epsilon


def _clopper_pearson_threshold(seen: np.ndarray, unseen: np.ndarray,
                               level: float, delta: float,
                               one_sided: bool) -> float:
  """The hull threshold of the largest bound (+infinity if none counts)."""
  thresholds, misses, rejections = _hull_thresholds(seen, unseen)
  _, index = _best_clopper_pearson(misses, unseen.size - rejections,
                                   seen.size, unseen.size, level, delta,
                                   one_sided)
  return float(thresholds[index])


def _one_run_bound(kind: str, canaries: int, guesses: int, correct: int,
                   level: float, delta: float, floor: float) -> float:
  """The one-run certificate of one threshold's counts, or `floor`."""
  if kind == 'one_run':
    if one_run.steinke_p_value(canaries, guesses, correct, floor,
                               0.0) > level:
      return floor
    return one_run.largest_rejected(
        lambda eps: level - one_run.steinke_p_value(canaries, guesses,
                                                    correct, eps, delta),
        floor)
  return one_run.largest_rejected(
      lambda eps: one_run.fdp_excess(canaries, guesses, correct, level, eps,
                                     delta), floor)


def _one_run_threshold(kind: str, seen: np.ndarray, unseen: np.ndarray,
                       level: float, delta: float) -> float:
  """The hull threshold of the largest one-run certificate at `level`.

  Thresholds are tried in order of decreasing Clopper-Pearson lower bound on
  their precision, skipping those whose raw precision cannot beat the best
  eps so far, as `one_run.epsilon_one_run` does, keeping the first best.
  """
  thresholds, misses, rejections = _hull_thresholds(seen, unseen)
  correct = seen.size - misses
  guesses = correct + unseen.size - rejections
  precision_low = 1.0 - _clopper_pearson_upper(guesses - correct, guesses,
                                               level)
  canaries = seen.size + unseen.size
  best, best_index, best_precision = 0.0, -1, 0.5
  for index in np.argsort(-precision_low):
    n_guess, n_correct = int(guesses[index]), int(correct[index])
    if n_guess == 0 or n_correct / n_guess <= best_precision:
      continue
    candidate = _one_run_bound(kind, canaries, n_guess, n_correct, level,
                               delta, best)
    if candidate > best:
      best, best_index = candidate, int(index)
      best_precision = float(special.expit(candidate))
  return float(thresholds[best_index])


def _one_run_at(kind: str, seen: np.ndarray, unseen: np.ndarray,
                threshold: float, level: float, delta: float) -> float:
  correct = int(np.sum(seen >= threshold))
  guesses = correct + int(np.sum(unseen >= threshold))
  return _one_run_bound(kind, seen.size + unseen.size, guesses, correct,
                        level, delta, 0.0)


def _split(scores: np.ndarray, rng: np.random.Generator,
           fraction: float) -> tuple[np.ndarray, np.ndarray]:
  order = rng.permutation(scores.size)
  cut = int(scores.size * fraction)
  return scores[order[:cut]], scores[order[cut:]]


def _split_bound(kind: str, seen: np.ndarray, unseen: np.ndarray,
                 fraction: float, level: float, delta: float, one_sided: bool,
                 seed: int) -> float:
  """One split: the threshold chosen on the first parts, bounded on the rest."""
  rng = np.random.default_rng(seed)
  seen_choose, seen_test = _split(seen, rng, fraction)
  unseen_choose, unseen_test = _split(unseen, rng, fraction)
  if kind == 'clopper_pearson':
    threshold = _clopper_pearson_threshold(seen_choose, unseen_choose, level,
                                           delta, one_sided)
    return _clopper_pearson_at(seen_test, unseen_test, threshold, level,
                               delta, one_sided)
  threshold = _one_run_threshold(kind, seen_choose, unseen_choose, level,
                                 delta)
  return _one_run_at(kind, seen_test, unseen_test, threshold, level, delta)


def _check_parts(seen: np.ndarray, unseen: np.ndarray, bound: str,
                 fraction: float, one_sided: bool) -> None:
  """The checks that combine checked arguments (no signature carries them)."""
  if min(math.floor(seen.size * fraction),
         math.floor(unseen.size * fraction)) < 1 or min(
             seen.size - math.floor(seen.size * fraction),
             unseen.size - math.floor(unseen.size * fraction)) < 1:
    raise ValueError(f'fraction={fraction} leaves a part of the seen or '
                     'unseen scores empty.')
  if not one_sided and bound != 'clopper_pearson':
    raise ValueError('the one-run certificates are one-sided only.')


@validation.arguments('seen', 'unseen', 'delta', 'seed', 'alpha',
                      bound=validation.Choice(BOUNDS),
                      splits=validation.Int(1),
                      fraction=validation.Probability())
def split_bounds(seen: ArrayLike, unseen: ArrayLike, *, bound: str,
                 delta: float, alpha: float = 0.05,
                 splits: int = DEFAULT_SPLITS, fraction: float = 0.5,
                 one_sided: bool = True, seed: int = 0) -> np.ndarray:
  """Each split's lower bound at level alpha / 2 (their median is the result).

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    unseen: Scores of the canaries never inserted.
    bound: 'one_run', 'one_run_fdp' or 'clopper_pearson'.
    delta: The delta of the (eps, delta) claim, in (0, 1).
    alpha: 1 - confidence of the median, in (0, 0.5).
    splits: Number of random splits, >= 1.
    fraction: Share of each set that chooses the threshold, in (0, 1).
    one_sided: 'clopper_pearson' only: False also tries "inserted iff score
      < t" (the one-run certificates are one-sided).
    seed: Seed of the generator that draws each split's seed.

  Returns:
    The `splits` bounds, in the order of their seeds.

  Raises:
    ValueError: if an argument is out of range or a part would be empty.
  """
  _check_parts(seen, unseen, bound, fraction, one_sided)
  return _split_bounds(bound, seen, unseen, delta, alpha, splits, fraction,
                       one_sided, seed)


def _split_bounds(bound: str, seen: np.ndarray, unseen: np.ndarray,
                  delta: float, alpha: float, splits: int, fraction: float,
                  one_sided: bool, seed: int) -> np.ndarray:
  """`split_bounds` of checked arguments."""
  seeds = np.random.default_rng(seed).integers(np.iinfo(np.int64).max,
                                               size=splits)
  return np.array([
      _split_bound(bound, seen, unseen, fraction, alpha / 2.0, delta,
                   one_sided, int(split_seed)) for split_seed in seeds
  ])


def epsilon_multi_split(seen: ArrayLike, unseen: ArrayLike, *, bound: str,
                        delta: float, alpha: float = 0.05,
                        splits: int = DEFAULT_SPLITS, fraction: float = 0.5,
                        one_sided: bool = True, seed: int = 0) -> float:
  """1 - alpha lower bound on eps: the median of `split_bounds`.

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    unseen: Scores of the canaries never inserted.
    bound: 'one_run', 'one_run_fdp' or 'clopper_pearson'.
    delta: The delta of the (eps, delta) claim, in (0, 1).
    alpha: 1 - confidence, in (0, 0.5).
    splits: Number of random splits, >= 1.
    fraction: Share of each set that chooses the threshold, in (0, 1).
    one_sided: As for `split_bounds`.
    seed: Seed of the generator that draws each split's seed.

  Returns:
    eps_lo >= 0.

  Raises:
    ValueError: if an argument is out of range or a part would be empty.
  """
  return float(np.median(split_bounds(
      seen, unseen, bound=bound, delta=delta, alpha=alpha, splits=splits,
      fraction=fraction, one_sided=one_sided, seed=seed)))
