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
* A basic (pivotal) bootstrap interval for any estimate (`bootstrap_fits`,
  `basic_bootstrap_interval`): the bootstrap's own bias is subtracted, which
  matters because the fitted-variance eps_est is biased upwards at small delta.
"""

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from one_shot_epe import validation


def auroc_against_cdf(null_cdf_at_seen: ArrayLike) -> float:
  """AUROC of "seen statistic is larger" against a continuous null.

  P(null < S) for S drawn from the seen sample is the mean over the seen
  statistics s of F_null(s); `null_cdf_at_seen` holds those F_null(s).
  """
  values = validation.check_sample('null_cdf_at_seen', null_cdf_at_seen,
                                   min_size=1)
  if np.any((values < 0.0) | (values > 1.0)):
    raise ValueError('null_cdf_at_seen are probabilities and must lie in '
                     '[0, 1].')
  return float(np.mean(values))


def auroc_two_samples(seen: ArrayLike, unseen: ArrayLike) -> float:
  """AUROC of "seen statistic is larger": P(unseen < seen) + P(tie) / 2.

  The Mann-Whitney U statistic over all k m pairs divided by k m, from the
  ranks of the pooled sample (average ranks for ties), in O((k + m) log(k + m)).
  """
  seen = validation.check_sample('seen', seen, min_size=1)
  unseen = validation.check_sample('unseen', unseen, min_size=1)
  ranks = stats.rankdata(np.concatenate([seen, unseen]))
  k, m = seen.size, unseen.size
  u_statistic = float(np.sum(ranks[:k])) - k * (k + 1) / 2.0
  return u_statistic / (k * m)


def empirical_threshold(unseen: ArrayLike, fpr: float) -> float:
  """The smallest order statistic t of `unseen` with #{unseen > t} <= fpr m.

  Flagging "statistic > t" then has empirical FPR at most `fpr` on the unseen
  sample (ties with t only lower it). With fewer than 1/fpr unseen
  statistics, t is their maximum.
  """
  unseen = np.sort(validation.check_sample('unseen', unseen, min_size=1))
  fpr = validation.check_probability('fpr', fpr)
  allowed = math.floor(fpr * unseen.size + 1e-9)
  return float(unseen[unseen.size - allowed - 1])


def tpr_above(seen: ArrayLike, threshold: float) -> float:
  """Fraction of seen statistics strictly above `threshold` (a tie is a miss)."""
  seen = validation.check_sample('seen', seen, min_size=1)
  return float(np.mean(seen > threshold))


def gdp_mu(seen_mean: float, null_mean: float, null_std: float) -> float:
  """mu of Gaussian DP: the mean shift of the seen statistics in null stds."""
  null_std = validation.check_real('null_std', null_std, 0.0, low_open=True)
  return (float(seen_mean) - float(null_mean)) / null_std


def bootstrap_fits(sample: ArrayLike, resamples: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """Means and population stds of `resamples` bootstrap resamples of `sample`.

  Each resample draws len(sample) values with replacement; all resamples are
  drawn and summarised at once ([resamples, n] indices).
  """
  sample = validation.check_sample('sample', sample, min_size=1)
  resamples = validation.check_int('resamples', resamples, 1)
  if not isinstance(rng, np.random.Generator):
    raise TypeError('rng must be a numpy.random.Generator.')
  drawn = sample[rng.integers(0, sample.size, size=(int(resamples), sample.size))]
  return drawn.mean(axis=1), drawn.std(axis=1)


def basic_bootstrap_interval(estimate: float, resampled: ArrayLike,
                             level: float = 0.95,
                             lower_limit: float = 0.0) -> tuple[float, float]:
  """Basic (pivotal) bootstrap interval (Davison and Hinkley, 1997, eq. 5.6).

  (2 theta_hat - q_{(1+level)/2}, 2 theta_hat - q_{(1-level)/2}) with q the
  quantiles of the resampled estimates. It treats theta* - theta_hat as the
  law of theta_hat - theta, so a bias that the bootstrap reproduces is
  removed (a percentile interval would keep it). Endpoints below
  `lower_limit` (eps >= 0) are raised to it.
  """
  level = validation.check_probability('level', level)
  resampled = validation.check_sample('resampled', resampled, min_size=1)
  low_q, high_q = np.quantile(resampled, [(1.0 - level) / 2.0,
                                          (1.0 + level) / 2.0])
  return (max(2.0 * estimate - float(high_q), lower_limit),
          max(2.0 * estimate - float(low_q), lower_limit))
