"""eps_lo: lower bounds on epsilon from thresholding canary cosines (Sec. 5.1).

A threshold test on canary cosines ("inserted iff cosine > t") has a
false-negative rate (FNR, over inserted canaries) and a false-positive rate
(FPR, over the null: the exact law of Theorem 3.1 for the final-model threat
model, never-inserted canaries for the all-iterates one); any (eps,
delta)-DP mechanism forces FPR + e^eps FNR >= 1 - delta (Kairouz et al.,
2015), so upper confidence bounds on both rates bound eps from below
(Jagielski et al., 2020).

Which threshold to test is the crux. The paper (Sec. 5.1) tries every
observed cosine and keeps the best, with one-sided Jeffreys intervals
(Zanella-Beguelin et al., 2022): choosing the threshold on the data it then
evaluates makes that confidence nominal, and on simulated Gaussian
mechanisms its "95%" bound exceeds the true eps in a third of the runs at
eps = 1 (`benchmarks/coverage.py`). It is kept as `threshold_strategy=
'paper'`. The default, 'bonferroni', pays for the choice: a fixed family of
thresholds chosen before seeing the seen canaries, exact Clopper-Pearson
intervals at level alpha / (number of tests), the best of them reported; the
union bound makes the result a true 1 - alpha lower bound. 'split' chooses
one threshold on half the canaries and tests it on the other half (also
exact, usually looser: it spends half the canaries). numpy/scipy only.
"""

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import special
from scipy import stats

from one_shot_epe.stats import null_distribution
from one_shot_epe import validation

__all__ = ['CLOSED_FORM_LOG10_FPRS', 'EMPIRICAL_MAX_RANK_FRACTION',
           'EMPIRICAL_RANK_COUNT', 'NullKind', 'SOUND_STRATEGIES',
           'NULLS', 'THRESHOLD_STRATEGIES', 'ThresholdStrategy', 'UpperBound',
           'check_sound_strategy', 'clopper_pearson_upper',
           'epsilon_lower_bound', 'jeffreys_upper']

NullKind = Literal['exact', 'gaussian']
ThresholdStrategy = Literal['bonferroni', 'split', 'paper']
THRESHOLD_STRATEGIES = ('bonferroni', 'split', 'paper')
# The strategies whose bound holds at 1 - alpha ('paper' picks its threshold
# on the same data and is only nominal).
SOUND_STRATEGIES = ('bonferroni', 'split')

# The 'bonferroni' family for a closed-form null: thresholds at the null's
# upper quantiles of false-positive rates 10^-0.3 ... 10^-8, evenly spaced in
# log (the range over which k <= 10^4 canaries can show a positive bound).
CLOSED_FORM_LOG10_FPRS = np.linspace(-0.3, -8.0, 16)
# ... and for an empirical null: the j-th largest never-inserted cosine, for
# ranks j spread geometrically from 1 to 30% of the unseen canaries.
EMPIRICAL_RANK_COUNT = 24
EMPIRICAL_MAX_RANK_FRACTION = 0.3


NULLS = ('exact', 'gaussian')


def check_sound_strategy(strategy: str) -> str:
  """A threshold strategy whose bound holds at its level (SOUND_STRATEGIES).

  Args:
    strategy: The requested `threshold_strategy`.

  Returns:
    `strategy`, one of SOUND_STRATEGIES.

  Raises:
    ValueError: for 'paper' (only nominal; reports carry it as
      `epsilon_lo_paper`) or any other strategy not in SOUND_STRATEGIES.
  """
  if strategy == 'paper':
    raise ValueError("threshold_strategy='paper' is only nominal; reports "
                     'always carry it as epsilon_lo_paper beside the sound '
                     f'epsilon_lo (one of {list(SOUND_STRATEGIES)}).')
  return validation.Choice(SOUND_STRATEGIES)('threshold_strategy', strategy)


def _beta_quantile(a: np.ndarray, b: np.ndarray, prob: float) -> np.ndarray:
  """The lower `prob` quantile of Beta(a, b), elementwise, accurate for tiny prob.

  scipy's betaincinv is only the starting point: for prob below ~1e-6 and
  parameters in the hundreds it can be off by orders of magnitude. A
  bracketed Newton iteration on log I_q(a, b) = log prob, with the accurate
  forward betainc, converges from there (a step leaving the bracket becomes a
  bisection step). An element stops when log I_q is within 1e-10 of log prob,
  its Newton step no longer changes q, or its bracket is a few ulps wide (for
  parameters ~1e6 betainc itself is only good to ~3e-10).
  """
  log_prob = math.log(prob)
  lo, hi = np.zeros_like(a), np.ones_like(a)
  q = special.betaincinv(a, b, prob)
  active = np.ones(q.shape, dtype=bool)
  # A step that overflows or is NaN leaves the bracket and is bisected.
  with np.errstate(divide='ignore', over='ignore', invalid='ignore'):
    for _ in range(200):
      q = np.where(active & ~((q > lo) & (q < hi)), 0.5 * (lo + hi), q)
      log_cdf = np.log(special.betainc(a, b, q))
      error = log_cdf - log_prob
      lo = np.where(error < 0.0, q, lo)
      hi = np.where(error > 0.0, q, hi)
      log_pdf = ((a - 1.0) * np.log(q) + (b - 1.0) * np.log1p(-q) -
                 special.betaln(a, b))
      stepped = q - error * np.exp(log_cdf - log_pdf)
      active &= ((np.abs(error) > 1e-10) & (stepped != q) &
                 (hi - lo > 4.0 * np.spacing(q)))
      if not np.any(active):
        break
      q = np.where(active, stepped, q)
  return q


@validation.arguments('trials', 'alpha')
def jeffreys_upper(failures: ArrayLike, trials: int,
                   alpha: float) -> np.ndarray:
  """One-sided 1-alpha Jeffreys upper confidence bound on a binomial rate.

  The alpha upper quantile of Beta(x + 1/2, n - x + 1/2); 1 when x = n
  (Brown, Cai and DasGupta, 2001). Computed as 1 - q, q the alpha lower
  quantile of the mirrored law Beta(n - x + 1/2, x + 1/2), so that the small
  tail mass alpha is inverted as given: betaincinv(x + 1/2, n - x + 1/2,
  1 - alpha) returns 0.99999999685 instead of 0.0185 for x = 0, n = 1000,
  alpha = 1e-9.

  Args:
    failures: x, the observed failure counts (integers in [0, trials]); any
      shape.
    trials: n, the number of trials, >= 1.
    alpha: The bound's error probability, in (0, 1).

  Returns:
    The upper bounds, float64, of the shape of `failures`.

  Raises:
    ValueError: if `trials` < 1, `alpha` is not a probability or a count is
      not an integer in [0, trials].
  """
  return _jeffreys_upper(_check_failures(failures, trials), trials, alpha)


def _jeffreys_upper(failures: np.ndarray, trials: int,
                    alpha: float) -> np.ndarray:
  """`jeffreys_upper` of arguments already checked (counts as float64)."""
  q = _beta_quantile(trials - failures + 0.5, failures + 0.5, alpha)
  return np.where(failures >= trials, 1.0, 1.0 - q)


def _check_failures(failures: ArrayLike, trials: int) -> np.ndarray:
  x = np.asarray(failures, dtype=np.float64)
  if np.any(~np.isfinite(x)) or np.any(x < 0) or np.any(x > trials) or np.any(
      x != np.round(x)):
    raise ValueError(f'failures must be integers in [0, {trials}].')
  return x


@validation.arguments('trials', 'alpha')
def clopper_pearson_upper(failures: ArrayLike, trials: int,
                          alpha: float) -> np.ndarray:
  """One-sided exact (Clopper-Pearson, 1934) 1-alpha upper bound on a rate.

  The 1 - alpha quantile of Beta(x + 1, n - x); 1 when x = n. Its coverage is
  at least 1 - alpha for every true rate, which the Jeffreys bound does not
  promise. Computed, like `jeffreys_upper`, as 1 minus the alpha lower
  quantile of the mirrored Beta(n - x, x + 1).

  Args:
    failures: x, counts as in `jeffreys_upper`.
    trials: n >= 1.
    alpha: The error probability, in (0, 1).

  Returns:
    float64 upper bounds, one per count.

  Raises:
    ValueError: for the arguments `jeffreys_upper` refuses.
  """
  return _clopper_pearson_upper(_check_failures(failures, trials), trials,
                                alpha)


def _clopper_pearson_upper(failures: np.ndarray, trials: int,
                           alpha: float) -> np.ndarray:
  """`clopper_pearson_upper` of arguments already checked (as above)."""
  q = _beta_quantile(np.maximum(trials - failures, 1.0), failures + 1.0,
                     alpha)
  return np.where(failures >= trials, 1.0, 1.0 - q)


def _epsilon_from_rates(log_fpr: np.ndarray, log_fnr: np.ndarray,
                        delta: float) -> np.ndarray:
  """eps >= max(log((1-delta-FPR)/FNR), log((1-delta-FNR)/FPR)) per threshold.

  Any (eps, delta)-DP mechanism forces FPR + e^eps FNR >= 1 - delta and the
  same with the roles swapped (Kairouz et al., 2015), so upper bounds on both
  rates give a lower bound on eps. Computed in logs; impossible terms are -inf.
  """
  with np.errstate(divide='ignore', invalid='ignore'):
    one_minus_fpr = np.log(np.maximum(1.0 - delta - np.exp(log_fpr), 0.0))
    one_minus_fnr = np.log(np.maximum(1.0 - delta - np.exp(log_fnr), 0.0))
    first = np.where(np.isfinite(one_minus_fpr), one_minus_fpr - log_fnr,
                     -np.inf)
    second = np.where(np.isfinite(one_minus_fnr), one_minus_fnr - log_fpr,
                      -np.inf)
  return np.maximum(first, second)


UpperBound = Callable[[np.ndarray, int], np.ndarray]


def _log_rates_at(thresholds: np.ndarray, seen: np.ndarray, *,
                  dim: int | None, unseen: np.ndarray | None, null: NullKind,
                  upper: UpperBound) -> tuple[np.ndarray, np.ndarray]:
  """Upper-bound log rates of the threshold test at each threshold t.

  `upper(failures, trials)` bounds a binomial rate from above (Jeffreys for
  the paper's bound, Clopper-Pearson for the sound ones), given the counts
  as float64.
  Empirical null (`unseen` given): the test 'seen iff cosine > t'; a seen
  cosine equal to t is a miss and an unseen one equal to t is no alarm.
  Closed-form null: the test 'seen iff cosine >= t', the limit of
  'cosine > t - h' as h -> 0+: a seen cosine equal to t is detected, and the
  false-positive rate is the null's mass at or above t (the null is
  continuous, so that is its survival function at t). A cosine of exactly 1
  (the null puts no mass there) is evaluated at the largest double below 1,
  so the bound stays finite for rounded inputs.
  """
  seen_sorted = np.sort(seen)
  side = 'right' if unseen is not None else 'left'
  misses = np.searchsorted(seen_sorted, thresholds, side=side)
  with np.errstate(divide='ignore'):
    log_fnr = np.log(upper(misses.astype(np.float64), seen.size))
    if unseen is not None:
      unseen_sorted = np.sort(unseen)
      false_alarms = unseen.size - np.searchsorted(
          unseen_sorted, thresholds, side='right')
      log_fpr = np.log(upper(false_alarms.astype(np.float64), unseen.size))
    else:
      log_fpr = _null_logsf(thresholds, dim, null)
  return log_fpr, log_fnr


def _null_logsf(thresholds: np.ndarray, dim: int, null: NullKind) -> np.ndarray:
  """log P(null cosine >= t): exact (Theorem 3.1) or N(0, 1/d)."""
  if null == 'exact':
    # A float cosine of exactly 1 is a rounded value: its FPR is the
    # (positive) null mass above the largest double below 1, not 0.
    return null_distribution.null_logsf.unchecked(
        np.minimum(thresholds, np.nextafter(1.0, 0.0)), dim)
  return stats.norm.logsf(thresholds * math.sqrt(dim))


def _null_upper_quantiles(log10_fprs: np.ndarray, dim: int,
                          null: NullKind) -> np.ndarray:
  """Thresholds t with P(null cosine >= t) = 10^log10_fpr (the null is symmetric)."""
  fprs = 10.0**log10_fprs
  if null == 'exact':
    return -np.asarray(null_distribution.null_ppf.unchecked(fprs, dim),
                       dtype=np.float64)
  return stats.norm.isf(fprs) / math.sqrt(dim)


def _empirical_ranks(num_unseen: int) -> np.ndarray:
  """The 'bonferroni' family's ranks j: 1 ... 30% of m, geometric, distinct."""
  top = max(1.0, EMPIRICAL_MAX_RANK_FRACTION * num_unseen)
  return np.unique(np.round(np.geomspace(1.0, top, EMPIRICAL_RANK_COUNT)))


def _best_bound(thresholds: np.ndarray, seen: np.ndarray, *, dim: int | None,
                unseen: np.ndarray | None, null: NullKind, upper: UpperBound,
                delta: float) -> tuple[float, float]:
  """(threshold, bound) of the threshold whose eps bound is largest."""
  log_fpr, log_fnr = _log_rates_at(thresholds, seen, dim=dim, unseen=unseen,
                                   null=null, upper=upper)
  bounds = _epsilon_from_rates(log_fpr, log_fnr, delta)
  index = int(np.argmax(bounds))
  return float(thresholds[index]), float(bounds[index])


def _observed_thresholds(seen: np.ndarray,
                         unseen: np.ndarray | None) -> np.ndarray:
  """Every threshold at which the test's counts change: the observed cosines."""
  return np.unique(seen if unseen is None else np.concatenate([seen, unseen]))


def _bonferroni_bound(seen: np.ndarray, *, dim: int | None,
                      unseen: np.ndarray | None, null: NullKind, alpha: float,
                      delta: float) -> float:
  """The best of a fixed family of tests, each at level alpha / (tests).

  Closed-form null: the thresholds `CLOSED_FORM_LOG10_FPRS` fix the FPRs
  exactly, so only the M FNRs need intervals: Clopper-Pearson at alpha / M.
  Empirical null: the threshold is the j-th largest unseen cosine for each
  rank j of `_empirical_ranks`; the null mass above it is distributed as
  Beta(j, m - j + 1) whatever the null (for a continuous null; stochastically
  smaller otherwise), whose 1 - alpha/(2M) quantile is the Clopper-Pearson
  bound for j - 1 of m; the seen canaries are independent of that threshold,
  so their misses get Clopper-Pearson at alpha / (2M) too. By the union bound
  all the intervals hold together with probability >= 1 - alpha, so the
  largest of the M bounds is a 1 - alpha lower bound on eps.
  """
  if unseen is None:
    thresholds = _null_upper_quantiles(CLOSED_FORM_LOG10_FPRS, dim, null)
    level = alpha / thresholds.size
  else:
    ranks = _empirical_ranks(unseen.size).astype(int)
    thresholds = np.sort(unseen)[::-1][ranks - 1]
    level = alpha / (2 * thresholds.size)

  def upper(failures: np.ndarray, trials: int) -> np.ndarray:
    return _clopper_pearson_upper(failures, trials, level)

  _, bound = _best_bound(thresholds, seen, dim=dim, unseen=unseen, null=null,
                         upper=upper, delta=delta)
  return bound


def _split_bound(seen: np.ndarray, *, dim: int | None,
                 unseen: np.ndarray | None, null: NullKind, alpha: float,
                 delta: float, seed: int) -> float:
  """One threshold chosen on half the canaries, tested on the other half.

  The choice uses the paper's rule on the first halves; the test on the
  second halves is exact: Clopper-Pearson at alpha on the FNR (closed-form
  null) or at alpha / 2 on each rate (empirical null).
  """
  if seen.size < 4 or (unseen is not None and unseen.size < 4):
    raise ValueError("threshold_strategy='split' needs at least 4 cosines in "
                     'each set.')
  rng = np.random.default_rng(seed)
  seen_choose, seen_test = np.array_split(rng.permutation(seen), 2)
  unseen_choose = unseen_test = None
  if unseen is not None:
    unseen_choose, unseen_test = np.array_split(rng.permutation(unseen), 2)
  threshold, _ = _best_bound(
      _observed_thresholds(seen_choose, unseen_choose), seen_choose, dim=dim,
      unseen=unseen_choose, null=null, delta=delta,
      upper=lambda x, n: _jeffreys_upper(x, n, alpha))
  level = alpha if unseen is None else alpha / 2

  def upper(failures: np.ndarray, trials: int) -> np.ndarray:
    return _clopper_pearson_upper(failures, trials, level)

  _, bound = _best_bound(np.array([threshold]), seen_test, dim=dim,
                         unseen=unseen_test, null=null, upper=upper,
                         delta=delta)
  return bound


@validation.arguments('delta', 'seed', 'alpha', seen=validation.Cosines(),
                      dim=validation.Optional(null_distribution.DIM),
                      unseen=validation.Optional(validation.Cosines()),
                      null=validation.Choice(NULLS),
                      threshold_strategy=validation.Choice(
                          THRESHOLD_STRATEGIES))
def epsilon_lower_bound(seen: ArrayLike,
                        *,
                        delta: float,
                        dim: int | None = None,
                        unseen: ArrayLike | None = None,
                        alpha: float = 0.05,
                        null: NullKind = 'exact',
                        threshold_strategy: ThresholdStrategy = 'bonferroni',
                        seed: int = 0) -> float:
  """eps_lo: a lower bound on eps from thresholding canary cosines.

  Section 5.1, after Jagielski et al. (2020): the test says "inserted" when a
  canary's cosine exceeds a threshold t. Its false-negative rate is bounded
  above on the observed (`seen`) canaries; its false-positive rate is exact,
  from the null's survival function (give `dim`: the final-model threat
  model), or bounded on never-inserted canaries (give `unseen`: the
  all-iterates threat model). The rates then bound eps from below as in
  `_epsilon_from_rates`.

  threshold_strategy:
    'bonferroni' (default): a 1 - alpha lower bound. The best of a family of
      thresholds fixed before the seen cosines are looked at, each tested at
      level alpha / (family size) with Clopper-Pearson intervals
      (`_bonferroni_bound`). Of the sound choices it is the tightest in
      `benchmarks/coverage.py`: a split spends half the canaries on choosing
      the threshold, which costs more than the union bound over ~40 tests.
    'split': also a 1 - alpha lower bound (`_split_bound`).
    'paper': the paper's eps_lo, nominal only. Every observed cosine is a
      candidate threshold, each approached from the side that favours the
      test (closed-form null: "cosine >= s" for each seen s; empirical null:
      "cosine > v" for each seen or unseen v, as in the paper's reference
      code), one-sided Jeffreys intervals (Zanella-Beguelin et al., 2022) at
      level alpha on each rate, and the largest bound is reported. Choosing
      the threshold on the data it is evaluated on voids the confidence
      level: at eps = 1 the "95%" bound exceeds the true eps in about a third
      of simulated Gaussian mechanisms.
  Ties between a seen and an unseen cosine count against the attacker: no
  threshold separates them.

  Args:
    seen: Statistics of inserted canaries (cosines in [-1, 1], at least 2).
    delta: The delta of (eps, delta)-DP, in (0, 1).
    dim: d >= 3, the model dimension, for the closed-form null (final
      model); exactly one of `dim` and `unseen` must be given.
    unseen: Statistics of never-inserted canaries, the empirical null (all
      iterates).
    alpha: The bound holds with probability 1 - alpha; in (0, 0.5).
    null: With `dim`: 'exact' (Theorem 3.1) or 'gaussian' (N(0, 1/d)).
    threshold_strategy: 'bonferroni', 'split' or 'paper' (above).
    seed: Seed of the random halves of 'split'.

  Returns:
    eps_lo >= 0; 0 when no threshold gives a positive bound.

  Raises:
    ValueError: if both or neither of `dim` and `unseen` are given, an
      argument is out of range, or 'split' has fewer than 4 cosines in a set.

  Example:
    A 95% lower bound for the Gaussian mechanism at sigma = 1 (true eps 4.38
    at delta = 1e-5), final-model threat model:

    >>> import numpy as np
    >>> from one_shot_epe.stats import gaussian_simulation, lower_bound
    >>> cosines = gaussian_simulation.simulate_cosines(
    ...     dim=10**6, num_canaries=1000, sigma=1.0,
    ...     rng=np.random.default_rng(0))
    >>> round(lower_bound.epsilon_lower_bound(cosines, delta=1e-5, dim=10**6),
    ...       2)
    2.85
  """
  if (dim is None) == (unseen is None):
    raise ValueError('give exactly one of dim (exact/Gaussian null) or unseen '
                     '(empirical null).')
  if threshold_strategy == 'bonferroni':
    bound = _bonferroni_bound(seen, dim=dim, unseen=unseen, null=null,
                              alpha=alpha, delta=delta)
  elif threshold_strategy == 'split':
    bound = _split_bound(seen, dim=dim, unseen=unseen, null=null, alpha=alpha,
                         delta=delta, seed=seed)
  else:
    _, bound = _best_bound(_observed_thresholds(seen, unseen), seen, dim=dim,
                           unseen=unseen, null=null, delta=delta,
                           upper=lambda x, n: _jeffreys_upper(x, n, alpha))
  return max(bound, 0.0)
