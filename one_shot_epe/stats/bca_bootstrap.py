"""Bias-corrected and accelerated (BCa) bootstrap quantiles of a statistic.

A statistic of the seen and unseen scores (an AUROC, a TPR at a fixed FPR,
an eps estimate) is recomputed on resamples: each set is drawn again with
replacement, independently. The percentile interval takes the resampled
values' quantiles as they are; BCa (Efron, 1987, "Better bootstrap
confidence intervals", JASA 82, Sec. 2-3) moves the quantile levels q to

  Phi(z0 + (z0 + z_q) / (1 - a (z0 + z_q))),

z0 = Phi^-1 of the share of resampled values below the full-sample estimate
(bias correction; Laplace-smoothed, (count + 1) / (resamples + 2), so it is
never 0 or 1) and a the acceleration from the jackknife (every seen score
left out once, then every unseen one): a = sum (mean - J_i)^3 /
(6 (sum (mean - J_i)^2)^(3/2)), 0 when the jackknife values are all equal.
This is jax-privacy's `auditing.BootstrapParams` (bias_correction,
acceleration) of its main branch, newer than 2.0.0; the resamples reproduce
its draws: a generator seeded with `seed` draws one 63-bit seed per
resample, whose generator draws the seen and then the unseen resample
(`Generator.choice`). Quantiles of the (corrected) levels interpolate
linearly. numpy/scipy only.
"""

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from one_shot_epe import validation

__all__ = ['Statistic', 'bca_levels', 'bca_quantiles', 'jackknife_values',
           'resampled_values']

Statistic = Callable[[np.ndarray, np.ndarray], float]


def _check_levels(name: str, quantiles: ArrayLike) -> np.ndarray:
  """The rule of `quantiles`: a non-empty array of levels in (0, 1)."""
  levels = np.asarray(quantiles, dtype=np.float64)
  if levels.size == 0 or np.any(~((levels > 0.0) & (levels < 1.0))):
    raise ValueError(f'{name} must be levels in (0, 1); got {quantiles}.')
  return levels


# Resampled and leave-one-out values need only one score each.
_VALUES = validation.Sample(min_size=1)


@validation.arguments('resamples', 'seed', seen=_VALUES, unseen=_VALUES)
def resampled_values(seen: ArrayLike, unseen: ArrayLike,
                     statistic: Statistic, resamples: int,
                     seed: int) -> np.ndarray:
  """The statistic on `resamples` bootstrap resamples (module docstring).

  Args:
    seen: Scores of the inserted canaries.
    unseen: Scores of the canaries never inserted.
    statistic: f(seen, unseen) -> float.
    resamples: Number of resamples, >= 1.
    seed: Seed of the generator that draws each resample's seed.

  Returns:
    The values, in the order of their seeds.

  Raises:
    ValueError: if a set is not a 1-D sample of finite numbers,
      `resamples` < 1 or `seed` < 0.
  """
  return _resampled_values(seen, unseen, statistic, resamples, seed)


def _resampled_values(seen: np.ndarray, unseen: np.ndarray,
                      statistic: Statistic, resamples: int,
                      seed: int) -> np.ndarray:
  """`resampled_values` of checked arguments."""
  seeds = np.random.default_rng(seed).integers(np.iinfo(np.int64).max,
                                               size=resamples)
  values = []
  for resample_seed in seeds:
    rng = np.random.default_rng(resample_seed)
    drawn_seen = rng.choice(seen, size=seen.size)
    values.append(statistic(drawn_seen, rng.choice(unseen, size=unseen.size)))
  return np.asarray(values, dtype=np.float64)


@validation.arguments('seen', 'unseen')
def jackknife_values(seen: ArrayLike, unseen: ArrayLike,
                     statistic: Statistic) -> np.ndarray:
  """The statistic with each seen, then each unseen score left out.

  Args:
    seen: Scores of the inserted canaries (at least 2).
    unseen: Scores of the canaries never inserted (at least 2).
    statistic: f(seen, unseen) -> float.

  Returns:
    len(seen) + len(unseen) values.

  Raises:
    ValueError: if a set is not a 1-D sample of at least 2 finite numbers.
  """
  return _jackknife_values(seen, unseen, statistic)


def _jackknife_values(seen: np.ndarray, unseen: np.ndarray,
                      statistic: Statistic) -> np.ndarray:
  """`jackknife_values` of checked samples."""
  return np.array(
      [statistic(np.delete(seen, i), unseen) for i in range(seen.size)] +
      [statistic(seen, np.delete(unseen, i)) for i in range(unseen.size)],
      dtype=np.float64)


@validation.arguments(resampled=_VALUES, estimate=validation.Real(),
                      quantiles=_check_levels,
                      jackknife=validation.Optional(_VALUES))
def bca_levels(resampled: ArrayLike, estimate: float, quantiles: ArrayLike,
               jackknife: ArrayLike | None = None) -> np.ndarray:
  """The BCa-corrected quantile levels (module docstring).

  Args:
    resampled: The statistic on the resamples.
    estimate: The statistic on the full sample.
    quantiles: The requested levels, each in (0, 1).
    jackknife: Leave-one-out values for the acceleration; None for none
      (bias correction only).

  Returns:
    The corrected levels, of the shape of `quantiles`.

  Raises:
    ValueError: if a level is not in (0, 1) or a sample is not finite.
  """
  return _bca_levels(resampled, estimate, quantiles, jackknife)


def _bca_levels(resampled: np.ndarray, estimate: float, levels: np.ndarray,
                jackknife: np.ndarray | None) -> np.ndarray:
  """`bca_levels` of checked arguments."""
  below = (np.sum(resampled < estimate) + 1.0) / (resampled.size + 2.0)
  bias = stats.norm.ppf(below)
  acceleration = 0.0
  if jackknife is not None:
    deviations = np.mean(jackknife) - jackknife
    spread = 6.0 * np.sum(deviations**2)**1.5
    acceleration = 0.0 if spread == 0 else np.sum(deviations**3) / spread
  shifted = bias + stats.norm.ppf(levels)
  return stats.norm.cdf(bias + shifted / (1.0 - acceleration * shifted))


@validation.arguments('seen', 'unseen', 'resamples', 'seed',
                      quantiles=_check_levels)
def bca_quantiles(seen: ArrayLike, unseen: ArrayLike, statistic: Statistic, *,
                  quantiles: ArrayLike = (0.025, 0.975),
                  resamples: int = 1000, bias_correction: bool = True,
                  acceleration: bool = False, seed: int = 0) -> np.ndarray:
  """Bootstrap quantiles of `statistic`: percentile, bias-corrected or BCa.

  Args:
    seen: Scores of the inserted canaries (at least 2).
    unseen: Scores of the canaries never inserted (at least 2).
    statistic: f(seen, unseen) -> float.
    quantiles: The levels, each in (0, 1); (0.025, 0.975) is a 95% interval.
    resamples: Number of resamples, >= 1.
    bias_correction: Correct the levels for the median bias z0.
    acceleration: Also for the skewness a (needs `bias_correction`; costs
      one evaluation per score).
    seed: Seed of the resamples (`resampled_values`).

  Returns:
    The quantiles of the resampled values at the (corrected) levels.

  Raises:
    ValueError: if an argument is out of range, or `acceleration` without
      `bias_correction`.
  """
  levels = np.asarray(quantiles, dtype=np.float64)  # Default unconverted.
  if acceleration and not bias_correction:
    raise ValueError('acceleration needs bias_correction.')
  values = _resampled_values(seen, unseen, statistic, resamples, seed)
  if bias_correction:
    jackknife = (_jackknife_values(seen, unseen, statistic)
                 if acceleration else None)
    levels = _bca_levels(values, float(statistic(seen, unseen)), levels,
                         jackknife)
  return np.quantile(values, levels, method='linear')
