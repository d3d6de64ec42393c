"""CANIFE's mock-round attack and per-round epsilon (Maddock et al. 2022).

Sec. 3.4: with the model frozen, the server runs n mock rounds; each draws a
fresh cohort of real clients, and the canary client joins with probability
1/2. The released aggregate of a round is the noised sum of clipped updates

  u~ = sum_i u_i [+ u_c] + N(0, sigma^2 C^2 I_d)

(DP-FedSGD, Sec. 2.2; sigma is the noise multiplier, C the clip norm), and
the attack score is s = <u~, u_c> (Algorithm 1, line 10). Without the canary
s ~ sum_i <u_i, u_c> + N(0, sigma^2 C^2 ||u_c||^2); with it the mean moves by
||u_c||^2 (Sec. 3.2).

The noise enters the score only through <N(0, sigma^2 C^2 I_d), u_c>, which
is exactly N(0, sigma^2 C^2 ||u_c||^2) by rotation invariance, so it is
sampled as that scalar: the same law as materialising the d-dimensional
noise, at a fraction of the cost.

Per-round epsilon (Sec. 3.4 and Appendix C.1, after Kairouz et al. 2015): a
test "inserted iff s >= gamma" with false-positive rate FPR and
false-negative rate FNR bounds any (eps, delta)-DP mechanism by

  eps_hat_r = max_gamma max(log((1 - delta - FPR) / FNR),
                            log((1 - delta - FNR) / FPR)),

maximised over thresholds gamma in the observed scores, with delta = 1/n. The
rates are empirical, so a rate of 0 makes a term's ratio undefined rather
than infinite. CANIFE states both that n bounds eps_hat_r ("with n = 100,
eps_hat_r is at most 3.89", i.e. about log((1 - delta) n/2): one error in
n/2 rounds) and that eps_hat_r = inf happens exactly when the attack's
accuracy reaches 100%. Both hold with this reading, implemented here: a term
with a zero denominator is left out, and eps_hat_r = inf when some threshold
has FPR = FNR = 0 (perfect separation). The result is floored at 0.

Which threshold: the paper's text takes the supremum over thresholds
(`threshold='best'`); CANIFE's reference code takes the threshold of the
attack's best accuracy and the eps bound at that one threshold
(`threshold='max_accuracy'`, smaller or equal), which is how its published
numbers were computed.

A single perfect audit makes CANIFE's cumulative estimate infinite. For a
finite figure, `perfect='cap'` replaces inf by the largest finite value the
same scores could show, log((1 - delta) max(n_in, n_out)) (one error among
the larger class; about 3.9 for n = 100): the most the n scores can certify.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from one_shot_epe import validation

__all__ = ['AttackScores', 'THRESHOLDS', 'attack_accuracy',
           'epsilon_from_scores', 'mock_round_scores', 'threshold_rates']


@dataclasses.dataclass(frozen=True)
class AttackScores:
  """Scores of the mock rounds and which rounds held the canary."""
  scores: np.ndarray
  inserted: np.ndarray


@validation.arguments(noise_std=validation.Real(0.0),
                      num_rounds=validation.Int(2),
                      insertion_probability=validation.Probability())
def mock_round_scores(clipped_sum: Callable[[int], Any], canary_update: Any, *,
                      noise_std: float, num_rounds: int,
                      rng: np.random.Generator,
                      insertion_probability: float = 0.5) -> AttackScores:
  """Runs `num_rounds` mock rounds and returns their attack scores.

  Args:
    clipped_sum: `clipped_sum(r)` returns sum_i u_i of mock round r's cohort,
      a [d] vector (its cohort must be drawn afresh for each r).
    canary_update: u_c, the canary client's clipped update, [d].
    noise_std: sigma * C, the std of each noise coordinate (>= 0).
    num_rounds: n >= 2.
    rng: Draws the insertions and the noise.
    insertion_probability: Probability that the canary joins a round.

  Returns:
    Each round's score <u_c, noised sum> and whether it held the canary.

  Raises:
    ValueError: `clipped_sum` returns a vector of the wrong shape.
  """
  update = np.asarray(canary_update, np.float64).reshape(-1)
  update_norm_sq = float(update @ update)
  scores = np.empty(num_rounds)
  inserted = rng.random(num_rounds) < insertion_probability
  noise = (rng.standard_normal(num_rounds) * noise_std *
           math.sqrt(update_norm_sq))
  for r in range(num_rounds):
    total = np.asarray(clipped_sum(r), np.float64).reshape(-1)
    if total.shape != update.shape:
      raise ValueError(f'clipped_sum({r}) has shape {total.shape}; expected '
                       f'{update.shape}.')
    signal = update_norm_sq if inserted[r] else 0.0
    scores[r] = total @ update + noise[r] + signal
  return AttackScores(scores=scores, inserted=inserted)


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
  """log(num/den) where num > 0 and den > 0; -inf elsewhere (term left out)."""
  valid = (numerator > 0.0) & (denominator > 0.0)
  out = np.full(numerator.shape, -np.inf)
  out[valid] = np.log(numerator[valid]) - np.log(denominator[valid])
  return out


def threshold_rates(scores: Any,
                    inserted: Any) -> tuple[np.ndarray, np.ndarray]:
  """FPR and FNR of "inserted iff score >= gamma" for every observed gamma.

  Args:
    scores: The rounds' attack scores.
    inserted: Whether each round held the canary.

  Returns:
    (FPR, FNR), arrays aligned with the sorted distinct scores.

  Raises:
    ValueError: the arrays differ in length, a score is not finite, or no
      round (or every round) held the canary.
  """
  scores = np.asarray(scores, np.float64).reshape(-1)
  inserted = np.asarray(inserted, bool).reshape(-1)
  if scores.shape != inserted.shape:
    raise ValueError('scores and inserted must have the same length; got '
                     f'{scores.size} and {inserted.size}.')
  if not np.all(np.isfinite(scores)):
    raise ValueError('scores must be finite.')
  positives, negatives = np.sort(scores[inserted]), np.sort(scores[~inserted])
  if positives.size == 0 or negatives.size == 0:
    raise ValueError('need at least one round with and one without the canary; '
                     f'got {positives.size} and {negatives.size}.')
  thresholds = np.unique(scores)
  false_negatives = np.searchsorted(positives, thresholds, side='left')
  false_positives = negatives.size - np.searchsorted(negatives, thresholds,
                                                     side='left')
  return false_positives / negatives.size, false_negatives / positives.size


THRESHOLDS = ('best', 'max_accuracy')


@validation.arguments('delta', perfect=validation.Choice(('inf', 'cap')),
                      threshold=validation.Choice(THRESHOLDS))
def epsilon_from_scores(scores: Any, inserted: Any, delta: float,
                        perfect: str = 'inf', threshold: str = 'best') -> float:
  """eps_hat_r (module docstring), >= 0.

  Args:
    scores: The n attack scores.
    inserted: Whether each round held the canary.
    delta: delta of the bound (CANIFE: 1/n).
    perfect: What perfect separation gives: 'inf' (CANIFE) or 'cap' (the
      largest finite value these class sizes allow).
    threshold: 'best' (the supremum over thresholds) or 'max_accuracy' (the
      bound at the threshold of best balanced accuracy, the first such in
      ascending order, as CANIFE's reference code).

  Returns:
    eps_hat_r.
  """
  fpr, fnr = threshold_rates(scores, inserted)
  if threshold == 'max_accuracy':
    best = int(np.argmax(1.0 - 0.5 * (fpr + fnr)))
    fpr, fnr = fpr[best:best + 1], fnr[best:best + 1]
  if np.any((fpr == 0.0) & (fnr == 0.0)):
    if perfect == 'inf':
      return math.inf
    inserted = np.asarray(inserted, bool)
    larger = max(int(inserted.sum()), int((~inserted).sum()))
    return math.log((1.0 - delta) * larger)
  eps = np.maximum(_log_ratio(1.0 - delta - fpr, fnr),
                   _log_ratio(1.0 - delta - fnr, fpr))
  return max(float(np.max(eps)), 0.0)


def attack_accuracy(scores: Any, inserted: Any) -> float:
  """Best balanced accuracy 1 - (FPR + FNR)/2 over thresholds.

  CANIFE reports the attack's accuracy at its best ("calibrated") threshold;
  with insertion probability 1/2 the balanced accuracy is its expectation.

  Args:
    scores: The rounds' attack scores.
    inserted: Whether each round held the canary.

  Returns:
    The best balanced accuracy, in [1/2, 1].
  """
  fpr, fnr = threshold_rates(scores, inserted)
  return float(np.max(1.0 - 0.5 * (fpr + fnr)))
