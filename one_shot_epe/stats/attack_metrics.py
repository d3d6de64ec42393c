"""Summaries of the canary attack beside eps_est (numpy/scipy only).

The one-shot estimator of Andrew et al. (ICLR 2024) fits two Gaussians and
reports the optimal eps between them (Sec. 3.2). With unequal variances that
eps is driven by extrapolated tails that 50-1000 samples cannot see, so these
robust summaries of the same attack ("the statistic of an inserted canary is
larger") are reported beside it:

* AUROC of the attack: against a closed-form null, the mean of the null's CDF
  at the seen statistics; against a sample of unseen statistics, the
  Mann-Whitney count with ties counted one half (`auroc_against_cdf`,
  `auroc_two_samples`).
* TPR at a fixed FPR, with the threshold taken from the null
  (`tpr_above`, `empirical_threshold`).
* The Gaussian-DP parameter mu = (seen mean - null mean) / null std
  (Dong, Roth and Su, 2022), a single shift between equal-variance Gaussians
  (`gdp_mu`); eps(mu, delta) is the Gaussian mechanism's eps at sigma = 1/mu.
* The mu implied by the AUROC, sqrt(2) Phi^-1(AUROC) (`gdp_mu_from_auroc`):
  mu-GDP's optimal test has AUROC Phi(mu / sqrt(2)) and no test does better,
  so unlike the mean shift it cannot be inflated by a statistic whose spread
  differs between seen and unseen canaries (a maximum over rounds).
* jax-privacy main's ROC-hull summaries (`auditing.CanaryScoreAuditor`):
  the largest TPR at a given FPR of a test that may randomise between two
  thresholds (`tpr_at_given_fpr`, interpolated along the hull of
  `one_run.hull_counts`) and the largest accuracy of a threshold test, or
  its Clopper-Pearson upper bound (`max_accuracy`).
* A percentile bootstrap interval for the headline estimates
  (`bootstrap_means`, `bootstrap_aurocs`, `percentile_bootstrap_interval`).
"""

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import one_run

__all__ = ['auroc_against_cdf', 'auroc_two_samples', 'bootstrap_aurocs',
           'bootstrap_means', 'empirical_threshold', 'gdp_mu',
           'gdp_mu_from_auroc', 'max_accuracy', 'percentile_bootstrap_interval',
           'tpr_above', 'tpr_at_given_fpr']


# Attack statistics: one value is a sample here.
_STATISTICS = validation.Sample(min_size=1)


@validation.arguments(null_cdf_at_seen=_STATISTICS)
def auroc_against_cdf(null_cdf_at_seen: ArrayLike) -> float:
  """AUROC of "seen statistic is larger" against a continuous null.

  P(null < S) for S drawn from the seen sample is the mean over the seen
  statistics s of F_null(s); `null_cdf_at_seen` holds those F_null(s).

  Args:
    null_cdf_at_seen: F_null(s) of each seen statistic s, a non-empty 1-D
      array of probabilities in [0, 1].

  Returns:
    The AUROC, in [0, 1].

  Raises:
    ValueError: `null_cdf_at_seen` is empty, not 1-D, not finite, or has a
      value outside [0, 1].
  """
  if np.any((null_cdf_at_seen < 0.0) | (null_cdf_at_seen > 1.0)):
    raise ValueError('null_cdf_at_seen are probabilities and must lie in '
                     '[0, 1].')
  return float(np.mean(null_cdf_at_seen))


@validation.arguments(seen=_STATISTICS, unseen=_STATISTICS)
def auroc_two_samples(seen: ArrayLike, unseen: ArrayLike) -> float:
  """AUROC of "seen statistic is larger": P(unseen < seen) + P(tie) / 2.

  The Mann-Whitney U statistic over all k m pairs divided by k m, from the
  ranks of the pooled sample (average ranks for ties), in O((k + m) log(k + m)).

  Args:
    seen: Statistics of the inserted canaries, a non-empty 1-D array.
    unseen: Statistics of the canaries never inserted, a non-empty 1-D array.

  Returns:
    The AUROC, in [0, 1]; 0.5 for two equal samples.

  Raises:
    ValueError: a sample is empty, not 1-D or holds NaN or infinities.
  """
  ranks = stats.rankdata(np.concatenate([seen, unseen]))
  k, m = seen.size, unseen.size
  u_statistic = float(np.sum(ranks[:k])) - k * (k + 1) / 2.0
  return u_statistic / (k * m)


@validation.arguments(unseen=_STATISTICS, fpr=validation.Probability())
def empirical_threshold(unseen: ArrayLike, fpr: float) -> float:
  """The smallest order statistic t of `unseen` with #{unseen > t} <= fpr m.

  Flagging "statistic > t" then has empirical FPR at most `fpr` on the unseen
  sample (ties with t only lower it). With fewer than 1/fpr unseen
  statistics, t is their maximum.

  Args:
    unseen: Statistics of the canaries never inserted (the null), a non-empty
      1-D array of m values.
    fpr: Allowed false positive rate, in (0, 1).

  Returns:
    The threshold t, one of the values of `unseen`.

  Raises:
    ValueError: `unseen` is empty, not 1-D or not finite, or `fpr` is outside
      (0, 1) (`validation.ArgumentTypeError` if it is not a number).
  """
  ordered = np.sort(unseen)
  allowed = math.floor(fpr * ordered.size + 1e-9)
  return float(ordered[ordered.size - allowed - 1])


@validation.arguments(seen=_STATISTICS)
def tpr_above(seen: ArrayLike, threshold: float) -> float:
  """Fraction of seen statistics strictly above `threshold` (a tie is a miss).

  Args:
    seen: Statistics of the inserted canaries, a non-empty 1-D array.
    threshold: Detection threshold, e.g. from `empirical_threshold`.

  Returns:
    The true positive rate, in [0, 1].

  Raises:
    ValueError: `seen` is empty, not 1-D or holds NaN or infinities.
  """
  return float(np.mean(seen > threshold))


@validation.arguments(null_std=validation.Real(0.0, low_open=True))
def gdp_mu(seen_mean: float, null_mean: float, null_std: float) -> float:
  """mu of Gaussian DP: the mean shift of the seen statistics in null stds.

  Args:
    seen_mean: Mean statistic of the inserted canaries.
    null_mean: Mean of the null (unseen) distribution.
    null_std: Standard deviation of the null, > 0.

  Returns:
    mu, negative when the seen mean lies below the null mean.

  Raises:
    ValueError: `null_std` is not a finite number > 0.
  """
  return (float(seen_mean) - float(null_mean)) / null_std


@validation.arguments(auroc=validation.Real(0.0, 1.0),
                      num_pairs=validation.Int(1))
def gdp_mu_from_auroc(auroc: float, num_pairs: int) -> float:
  """mu = sqrt(2) Phi^-1(AUROC): the Gaussian-DP mu whose optimal test has this AUROC.

  The ROC curve of mu-GDP is TPR = Phi(Phi^-1(FPR) + mu), whose area is
  Phi(mu / sqrt(2)); the ROC of any test of a mu-GDP mechanism lies below it,
  so this mu is at most the mechanism's. It depends on the statistic only
  through ranks. An empirical AUROC of 0 or 1 over `num_pairs` (seen, unseen)
  pairs is moved half a pair inwards, 1/(2 num_pairs), so perfect separation
  gives the largest mu that many pairs can show rather than infinity.

  Args:
    auroc: The attack's AUROC, in [0, 1].
    num_pairs: Number of (seen, unseen) pairs it was measured on, k m >= 1.

  Returns:
    mu, finite; negative when the AUROC is below 0.5.

  Raises:
    ValueError: `auroc` is outside [0, 1] or `num_pairs` < 1
      (`validation.ArgumentTypeError` for a value of the wrong type).
  """
  margin = 0.5 / num_pairs
  return math.sqrt(2.0) * float(
      stats.norm.ppf(min(max(auroc, margin), 1.0 - margin)))


@validation.arguments('seen', 'unseen')
def tpr_at_given_fpr(seen: ArrayLike, unseen: ArrayLike,
                     fpr: ArrayLike) -> float | np.ndarray:
  """The largest TPR at FPR `fpr` of "score >= t", randomising between two t.

  Along the ROC hull's vertices (true and false positives rising as t
  falls) the first vertex with more false positives than fpr m is found
  (the last one for fpr = 1) and the true positives are interpolated
  linearly between it and the vertex before: the test that flags at the
  lower threshold and, with the right probability, at the upper one.

  Args:
    seen: Scores of the inserted canaries, >= 2 values.
    unseen: Scores of the canaries never inserted, m >= 2 values.
    fpr: A false-positive rate in [0, 1], or an array of them.

  Returns:
    The TPR, a float for a scalar `fpr`, else an array of its shape.

  Raises:
    ValueError: a sample is too small or not finite, or an `fpr` lies
      outside [0, 1].
  """
  rates = np.asarray(fpr, dtype=np.float64)
  if not np.all((rates >= 0.0) & (rates <= 1.0)):
    raise ValueError(f'fpr must lie in [0, 1]; got {fpr!r}.')
  hits, alarms = (counts[::-1] for counts in one_run.hull_counts(seen, unseen))
  target = rates * unseen.size
  right = np.minimum(np.searchsorted(alarms, target, side='right'),
                     alarms.size - 1)
  share = (target - alarms[right - 1]) / (alarms[right] - alarms[right - 1])
  tpr = (hits[right - 1] + share * (hits[right] - hits[right - 1])) / seen.size
  return float(tpr) if tpr.ndim == 0 else tpr


@validation.arguments('seen', 'unseen',
                      prevalence=validation.Optional(validation.Real(0.0, 1.0)),
                      alpha=validation.Optional(
                          validation.PARAMETERS['alpha']))
def max_accuracy(seen: ArrayLike, unseen: ArrayLike, *,
                 prevalence: float | None = None,
                 alpha: float | None = None) -> float:
  """The largest accuracy of "score >= t" over the ROC hull's thresholds.

  Accuracy is prevalence TPR + (1 - prevalence) TNR. With `alpha`, TPR and
  TNR are replaced by their Clopper-Pearson upper bounds at level alpha / 2
  each: a bound on the accuracy, as jax-privacy main computes it.

  Args:
    seen: Scores of the inserted canaries, >= 2 values.
    unseen: Scores of the canaries never inserted, >= 2 values.
    prevalence: The share of inserted canaries, in [0, 1]; None for the
      samples' own, k / (k + m).
    alpha: None for the observed rates; else 1 - the confidence of the upper
      bounds, in (0, 0.5).

  Returns:
    The accuracy, in [0, 1].

  Raises:
    ValueError: a sample is too small or not finite, or `prevalence` or
      `alpha` is out of range.
  """
  hits, alarms = one_run.hull_counts(seen, unseen)
  rejections = unseen.size - alarms
  if prevalence is None:
    prevalence = seen.size / (seen.size + unseen.size)
  if alpha is None:
    tpr, tnr = hits / seen.size, rejections / unseen.size
  else:
    tpr = lower_bound.clopper_pearson_upper.unchecked(
        hits.astype(np.float64), seen.size, alpha / 2.0)
    tnr = lower_bound.clopper_pearson_upper.unchecked(
        rejections.astype(np.float64), unseen.size, alpha / 2.0)
  return float(np.max(prevalence * tpr + (1.0 - prevalence) * tnr))


@validation.arguments('resamples', seen=_STATISTICS, unseen=_STATISTICS)
def bootstrap_aurocs(seen: ArrayLike, unseen: ArrayLike, resamples: int,
                     rng: np.random.Generator) -> np.ndarray:
  """AUROCs (`auroc_two_samples`) of `resamples` bootstrap resamples.

  Seen and unseen are resampled independently, each with replacement.

  Args:
    seen: Statistics of the inserted canaries, a non-empty 1-D array.
    unseen: Statistics of the canaries never inserted, a non-empty 1-D array.
    resamples: Number of bootstrap resamples, >= 1.
    rng: Source of the resampling indices.

  Returns:
    The [resamples] AUROCs, float64.

  Raises:
    ValueError: a sample is empty, not 1-D or not finite, or `resamples` < 1.
    TypeError: `rng` is not a `numpy.random.Generator`, or `resamples` is not
      an int.
  """
  _check_rng(rng)
  return np.array([
      auroc_two_samples.unchecked(
          seen[rng.integers(0, seen.size, seen.size)],
          unseen[rng.integers(0, unseen.size, unseen.size)])
      for _ in range(resamples)
  ])


def _check_rng(rng: object) -> None:
  if not isinstance(rng, np.random.Generator):
    raise TypeError('rng must be a numpy.random.Generator.')


@validation.arguments('resamples', sample=_STATISTICS)
def bootstrap_means(sample: ArrayLike, resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
  """Means of `resamples` bootstrap resamples of `sample`.

  Each resample draws len(sample) values with replacement; all resamples are
  drawn and summarised at once ([resamples, n] indices).

  Args:
    sample: The values to resample, a non-empty 1-D array.
    resamples: Number of bootstrap resamples, >= 1.
    rng: Source of the resampling indices.

  Returns:
    The [resamples] means, float64.

  Raises:
    ValueError: `sample` is empty, not 1-D or not finite, or `resamples` < 1.
    TypeError: `rng` is not a `numpy.random.Generator`, or `resamples` is not
      an int.
  """
  _check_rng(rng)
  drawn = sample[rng.integers(0, sample.size, size=(resamples, sample.size))]
  return drawn.mean(axis=1)


@validation.arguments(resampled=_STATISTICS, level=validation.Probability())
def percentile_bootstrap_interval(resampled: ArrayLike,
                                  level: float = 0.95) -> tuple[float, float]:
  """Percentile bootstrap interval (Efron; Davison and Hinkley, 1997, Sec. 5.3).

  The (1 - level)/2 and (1 + level)/2 quantiles of the resampled estimates.
  The headline estimates are monotone functions of a nearly unbiased
  statistic (a mean, an AUROC), for which the percentile interval is the
  interval of that statistic carried through the function: it respects the
  transformation, where the basic interval's reflection would not.

  Args:
    resampled: The estimate on each bootstrap resample, a non-empty 1-D array.
    level: Coverage of the two-sided interval, in (0, 1).

  Returns:
    (low, high), the interval's end points.

  Raises:
    ValueError: `resampled` is empty, not 1-D or not finite, or `level` is
      outside (0, 1).
  """
  low, high = np.quantile(resampled, [(1.0 - level) / 2.0,
                                      (1.0 + level) / 2.0])
  return float(low), float(high)
