"""A mu-GDP lower bound from threshold tests: jax-privacy main's, one-sided.

A threshold test "inserted iff score >= t" of a mu-GDP mechanism (Dong, Roth
and Su, 2022) has false-positive and false-negative rates on the trade-off
curve's safe side: FNR >= Phi(Phi^-1(1 - FPR) - mu), so

  mu >= Phi^-1(1 - FPR) - Phi^-1(FNR)               (their Eq. 6).

Upper confidence bounds on both rates at every threshold make the right
side a lower confidence bound on mu. The thresholds are the vertices of the
ROC hull of the seen and unseen scores (`one_run.hull_counts`), n of them;
each rate's Clopper-Pearson upper bound is taken at level alpha / (2 n)
(Bonferroni over the 2 n limits), the thresholds where either upper bound
reaches 1 - delta are dropped, and the largest value is mu_lo, clamped at 0.
eps_lo is the eps of mu_lo-GDP at delta (`estimation.epsilon_of_gdp`;
jax-privacy searches it in [0, 100] and returns 100 beyond, which takes
mu_lo > 9 at delta >= 1e-10, i.e. over 10^7 canaries per side). Only the
forward rule counts (seen scores above unseen ones). The two-sided bound
of jax-privacy 2.0.0 took the largest |mu| of the same limits, but upper
limits on both rates are the wrong limits for the reverse rule: without
any signal it claims privacy loss almost always (PR #270, 2026-07-27).

This is `auditing.CanaryScoreAuditor.epsilon_from_gdp` of jax-privacy's main
branch, written for this project and checked against that source in
`tests/jax_privacy_main_test.py` and at its level by simulation in
`tests/gdp_threshold_bound_test.py`. The conversion assumes the mechanism
is mu-GDP in the canary's direction (a Gaussian mechanism): for another
(eps, delta)-DP mechanism, mu_lo bounds only the Gaussian trade-off curve
that lies below its rates. numpy/scipy only.
"""

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.stats import estimation
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import one_run

__all__ = ['epsilon_gdp_thresholds', 'gdp_mu_thresholds']


@validation.arguments('seen', 'unseen', 'delta', 'alpha')
def gdp_mu_thresholds(seen: ArrayLike, unseen: ArrayLike, *, delta: float,
                      alpha: float = 0.05) -> float:
  """1 - alpha lower bound on mu from the ROC hull's threshold tests.

  Args:
    seen: Scores of the inserted canaries (higher when inserted), >= 2.
    unseen: Scores of the canaries never inserted, >= 2.
    delta: Thresholds where a rate's upper bound reaches 1 - delta are
      dropped; in (0, 1).
    alpha: 1 - the confidence, in (0, 0.5).

  Returns:
    mu_lo >= 0 (0 where no threshold counts or every value is <= 0).

  Raises:
    ValueError: a sample has fewer than 2 values or non-finite ones, or
      `delta` or `alpha` is out of range (`validation.ArgumentTypeError` for
      a value of the wrong type).
  """
  true_positives, false_positives = one_run.hull_counts(seen, unseen)
  level = alpha / (2 * true_positives.size)
  fnr_up = lower_bound.clopper_pearson_upper.unchecked(
      (seen.size - true_positives).astype(np.float64), seen.size, level)
  fpr_up = lower_bound.clopper_pearson_upper.unchecked(
      false_positives.astype(np.float64), unseen.size, level)
  counted = np.maximum(fnr_up, fpr_up) < 1.0 - delta
  if not np.any(counted):
    return 0.0
  mus = stats.norm.isf(fpr_up[counted]) - stats.norm.ppf(fnr_up[counted])
  return max(0.0, float(np.max(mus)))


@validation.arguments('seen', 'unseen', 'delta', 'alpha')
def epsilon_gdp_thresholds(seen: ArrayLike, unseen: ArrayLike, *,
                           delta: float, alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps of a mu-GDP mechanism (one-sided).

  The eps at `delta` of `gdp_mu_thresholds`' mu_lo.

  Args:
    seen: Scores of the inserted canaries (higher when inserted), >= 2.
    unseen: Scores of the canaries never inserted, >= 2.
    delta: The delta of eps, in (0, 1).
    alpha: 1 - the confidence, in (0, 0.5).

  Returns:
    eps_lo >= 0.

  Raises:
    ValueError: as `gdp_mu_thresholds`.
  """
  mu = gdp_mu_thresholds.unchecked(seen, unseen, delta=delta, alpha=alpha)
  return estimation.epsilon_of_gdp.unchecked(mu, delta)
