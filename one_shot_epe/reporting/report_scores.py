"""One threat model's scores, and how a report's fields are computed from them.

`Scores` holds the checked scores of one threat model (Algorithm 2: the
seen canaries' cosines with the final model against the exact null;
Algorithm 3: their max-over-rounds cosines against the unseen canaries')
with the report's arguments, caches what several fields share (the
Gaussian fits, the AUROC, the GDP mu, whether the tight one-run game's 1/2
design holds) and computes each field of `report_fields.FIELDS` (a method
per field, or an entry's own function of a `Scores`).

The statistics are called through their public names; the values a report
gives them were checked once by `privacy_report`, so the bodies are called
without their checks (`.unchecked`, `validation.arguments`).
"""

import functools
import math
from collections.abc import Callable

import numpy as np

from one_shot_epe.stats import attack_metrics
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_pair
from one_shot_epe.stats import gdp_threshold
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import null_distribution
from one_shot_epe.stats import tight_audit

__all__ = ['ALL_ITERATES_ESTIMATE', 'FINAL_ESTIMATE', 'Scores', 'TPR_FPRS',
           'fpr_key']

TPR_FPRS = (0.01, 0.001)  # False-positive rates of `tpr_at_fpr`.
# epsilon_est_method of the two threat models' headline estimates.
FINAL_ESTIMATE = "two Gaussians, variance fixed at the null's 1/d"
ALL_ITERATES_ESTIMATE = 'Gaussian DP at μ = √2 Φ⁻¹(AUROC)'


def fpr_key(fpr: float) -> str:
  """The key of `tpr_at_fpr` for a false-positive rate, e.g. '0.01'.

  Args:
    fpr: One of `TPR_FPRS`.

  Returns:
    The key.
  """
  return f'{fpr:g}'


class Scores:
  """One threat model's checked scores, and what several fields share.

  The Gaussian fits, the AUROC, the GDP mu and whether the tight one-run
  game's design holds are computed once, when a field first asks.

  Attributes:
    threat_model: 'final' (seen canaries' cosines with the final model
      against the exact null of dimension `dim`) or 'all' (seen canaries'
      max-over-rounds cosines against the unseen canaries').
    seen: The seen canaries' scores.
    unseen: The unseen canaries' scores; None where not given (final model).
    dim: d (the exact null's dimension for 'final'; recorded for 'all').
    delta: The delta of every eps.
    alpha: The lower bounds hold with probability 1 - alpha.
    seed: Seeds the bootstrap and the 'split' halves.
    threshold_strategy: epsilon_lo's sound threshold choice.
    bootstrap_resamples: Resamples of the headline's interval.
    canary_kind: 'gradient' (cosines) or 'data' (the final model's losses,
      negated, or the largest excess one-round loss drops: higher is more
      member-like), whose null is always the unseen canaries' scores.
  """

  def __init__(self, threat_model: str, seen: np.ndarray,
               unseen: np.ndarray | None, *, dim: int | None, delta: float,
               alpha: float, seed: int, threshold_strategy: str,
               bootstrap_resamples: int, canary_kind: str = 'gradient'):
    """Keeps the checked scores and arguments; computes nothing yet.

    Args:
      threat_model: 'final' or 'all'.
      seen: The seen scores (a checked float64 sample).
      unseen: The unseen scores, or None.
      dim: d, or None ('all' without it).
      delta: The delta of every eps.
      alpha: 1 - the bounds' confidence.
      seed: The report's seed.
      threshold_strategy: 'bonferroni' or 'split'.
      bootstrap_resamples: The bootstrap's resamples.
    """
    self.threat_model = threat_model
    self.seen = seen
    self.unseen = unseen
    self.dim = dim
    self.delta = delta
    self.alpha = alpha
    self.seed = seed
    self.threshold_strategy = threshold_strategy
    self.bootstrap_resamples = bootstrap_resamples
    self.canary_kind = canary_kind

  @property
  def final(self) -> bool:
    """Whether the null is the exact one of Theorem 3.1.

    True for gradient canaries' final-model cosines; every other score
    (all iterates; data canaries' losses) is tested against the unseen
    canaries' scores.
    """
    return self.threat_model == 'final' and self.canary_kind == 'gradient'

  @functools.cached_property
  def seen_fit(self) -> tuple[float, float]:
    """The seen scores' mean and std (Algorithm 1, line 9).

    Data canaries' losses may tie (a saturated model gives every canary
    the same loss): their std may be 0 (`fits`); cosines' may not.
    """
    if self.canary_kind == 'data':
      return float(np.mean(self.seen)), float(np.std(self.seen))
    return estimation.fit_gaussian(self.seen,
                                   'cosines' if self.final else 'seen')

  @functools.cached_property
  def null_fit(self) -> tuple[float, float]:
    """The null's mean and std: (0, 1/sqrt(d)), or the unseen scores' fit."""
    if self.final:
      return 0.0, 1.0 / math.sqrt(self.dim)
    if self.canary_kind == 'data':
      return float(np.mean(self.unseen)), float(np.std(self.unseen))
    return estimation.fit_gaussian(self.unseen, 'unseen')

  @property
  def fits(self) -> bool:
    """Whether both samples have spread, so Gaussians can be fit to them."""
    return self.seen_fit[1] > 0 and self.null_fit[1] > 0

  @functools.cached_property
  def auroc(self) -> float:
    """P(null score < seen score): exact null ('final') or unseen sample."""
    if self.final:
      return attack_metrics.auroc_against_cdf(
          null_distribution.null_cdf(self.seen, self.dim))
    return attack_metrics.auroc_two_samples.unchecked(self.seen, self.unseen)

  @functools.cached_property
  def gdp_mu(self) -> float:
    """The seen scores' mean shift in null standard deviations."""
    null_mean, null_std = self.null_fit
    return attack_metrics.gdp_mu(self.seen_fit[0], null_mean, null_std)

  @functools.cached_property
  def one_half_design(self) -> bool:
    """Whether the tight one-run game applies (unseen given, a 1/2 design)."""
    if self.unseen is None:
      return False
    try:
      tight_audit.check_design(self.seen.size, self.unseen.size)
    except ValueError:
      return False
    return True

  def headline(self, statistic: float) -> float:
    """The headline eps of the statistic the bootstrap resamples.

    Args:
      statistic: 'final': the seen mean (two Gaussians with the null's
        variance); 'all': the AUROC (Gaussian DP at its mu).

    Returns:
      The eps at delta.
    """
    if self.final:
      null_std = self.null_fit[1]
      return estimation.epsilon_two_gaussians.unchecked(
          0.0, null_std, statistic, null_std, self.delta)
    mu = attack_metrics.gdp_mu_from_auroc(statistic,
                                          self.seen.size * self.unseen.size)
    return estimation.epsilon_of_gdp.unchecked(mu, self.delta)

  def epsilon_est(self) -> float:
    """The headline estimate: of the seen mean ('final') or the AUROC.

    Returns:
      `headline` of the threat model's statistic.
    """
    return self.headline(self.seen_fit[0] if self.final else self.auroc)

  def saturated(self) -> bool:
    """Whether the headline is the most the sample sizes can show.

    Returns:
      True for all iterates when every seen score is above every unseen one
      (or below); False for the final model.
    """
    return not self.final and self.auroc in (0.0, 1.0)

  def interval(self) -> tuple[float, float]:
    """The headline's percentile bootstrap 95% interval.

    The headline increases with |mean| (final) or the AUROC (all): its
    interval is that statistic's carried through it.

    Returns:
      (low, high).
    """
    rng = np.random.default_rng(self.seed)
    if self.final:
      resampled = np.abs(attack_metrics.bootstrap_means.unchecked(
          self.seen, self.bootstrap_resamples, rng))
    else:
      resampled = attack_metrics.bootstrap_aurocs.unchecked(
          self.seen, self.unseen, self.bootstrap_resamples, rng)
    low, high = attack_metrics.percentile_bootstrap_interval.unchecked(
        resampled)
    return self.headline(low), self.headline(high)

  def method(self) -> str:
    """How the headline is computed, in words.

    Returns:
      `FINAL_ESTIMATE` or `ALL_ITERATES_ESTIMATE`.
    """
    return FINAL_ESTIMATE if self.final else ALL_ITERATES_ESTIMATE

  def fitted(self) -> float:
    """The paper's estimate: two Gaussians with fitted variances (Sec. 3.2).

    Returns:
      The eps between the null's and the seen scores' Gaussian fits.
    """
    null_mean, null_std = self.null_fit
    seen_mean, seen_std = self.seen_fit
    return estimation.epsilon_two_gaussians.unchecked(
        null_mean, null_std, seen_mean, seen_std, self.delta)

  def lower_bound(self, strategy: str) -> float:
    """`lower_bound.epsilon_lower_bound` against the threat model's null.

    Args:
      strategy: The threshold strategy ('paper' for the nominal bound).

    Returns:
      eps_lo >= 0.
    """
    return lower_bound.epsilon_lower_bound.unchecked(
        self.seen, delta=self.delta, dim=self.dim if self.final else None,
        unseen=None if self.final else self.unseen, alpha=self.alpha,
        null='exact', threshold_strategy=strategy, seed=self.seed)

  def one_run(self, bound: Callable[..., float]) -> float | None:
    """A one-run certificate of `one_run` comparing seen and unseen scores.

    Args:
      bound: `one_run.epsilon_one_run` or `one_run.epsilon_one_run_fdp`.

    Returns:
      Its eps_lo; None without unseen scores; 0 when every score ties.
    """
    if self.unseen is None:
      return None
    if np.all(self.seen == self.seen[0]) and np.all(
        self.unseen == self.seen[0]):
      return 0.0  # All scores tie: no guess beats chance, nothing certified.
    return bound.unchecked(self.seen, self.unseen, delta=self.delta,
                           alpha=self.alpha)

  @staticmethod
  def anderson(sample: np.ndarray | None) -> float | None:
    """Anderson-Darling A² of a sample whose Gaussian fit succeeded.

    Args:
      sample: The scores, or None.

    Returns:
      A², None for no sample or fewer than 8 scores.
    """
    if sample is None or sample.size < 8:
      return None
    return estimation.anderson_darling.unchecked(sample)

  def tpr_at_fpr(self) -> dict[str, float]:
    """TPR at each of `TPR_FPRS`: the exact null's or the unseen's threshold.

    Returns:
      `fpr_key(fpr)` -> the fraction of seen scores above the threshold.
    """
    rates = {}
    for fpr in TPR_FPRS:
      if self.final:
        # The null is symmetric: its upper-fpr point is -ppf(fpr).
        threshold = float(-null_distribution.null_ppf(fpr, self.dim))
      else:
        threshold = attack_metrics.empirical_threshold.unchecked(self.unseen,
                                                                 fpr)
      rates[fpr_key(fpr)] = attack_metrics.tpr_above.unchecked(self.seen,
                                                               threshold)
    return rates

  def tight_game(self, family: str) -> float | None:
    """`tight_audit.epsilon_lo_tight`, the one-run game of Xiang et al.

    Args:
      family: 'channel' or 'gdp'.

    Returns:
      Its eps_lo; None without unseen scores or their 1/2 design.
    """
    if not self.one_half_design:
      return None
    return tight_audit.epsilon_lo_tight.unchecked(
        self.seen, self.unseen, delta=self.delta, family=family,
        alpha=self.alpha)

  def tight_any(self) -> float | None:
    """The tight bound for any (eps, delta)-DP mechanism.

    Returns:
      Final model: the channel family against the exact null of Theorem
      3.1 (`tight_audit.epsilon_lo_known_null`); all iterates: the game's.
    """
    if self.final:
      return tight_audit.epsilon_lo_known_null.unchecked(
          self.seen, lambda t: null_distribution.null_logsf(t, self.dim),
          delta=self.delta, alpha=self.alpha)
    return self.tight_game('channel')

  def gauss_pair(self) -> float | None:
    """The Gaussian-pair bound (`gaussian_pair`, docs/bounds.md).

    Returns:
      Final model: the seen scores against the exact null's mean 0 and
      std 1/sqrt(d) (`gaussian_pair.epsilon_lo_known_null`), None for d
      below `gaussian_pair.MIN_FINAL_DIM`, where the cosines' laws are too
      far from Gaussian; all iterates: against the unseen scores
      (`gaussian_pair.epsilon_lo_two_sample`).
    """
    if self.final:
      if self.dim < gaussian_pair.MIN_FINAL_DIM:
        return None
      return gaussian_pair.epsilon_lo_known_null.unchecked(
          self.seen, null_std=self.null_fit[1], delta=self.delta,
          alpha=self.alpha)
    return gaussian_pair.epsilon_lo_two_sample.unchecked(
        self.seen, self.unseen, delta=self.delta, alpha=self.alpha)

  def gdp_thresholds(self) -> float | None:
    """jax-privacy main's one-sided mu-GDP bound (`gdp_threshold`).

    Returns:
      Its eps_lo; None without unseen scores.
    """
    if self.unseen is None:
      return None
    return gdp_threshold.epsilon_gdp_thresholds.unchecked(
        self.seen, self.unseen, delta=self.delta, alpha=self.alpha)

  def tpr_at_given_fpr(self) -> dict[str, float] | None:
    """The ROC hull's largest TPR at each of `TPR_FPRS` (jax-privacy main's).

    Returns:
      `fpr_key(fpr)` -> `attack_metrics.tpr_at_given_fpr`; None without
      unseen scores.
    """
    if self.unseen is None:
      return None
    rates = attack_metrics.tpr_at_given_fpr.unchecked(
        self.seen, self.unseen, list(TPR_FPRS))
    return {fpr_key(fpr): float(rate) for fpr, rate in zip(TPR_FPRS, rates)}

  def max_accuracy(self) -> float | None:
    """The largest accuracy of a threshold test (`attack_metrics`).

    Returns:
      At the samples' own prevalence; None without unseen scores.
    """
    if self.unseen is None:
      return None
    return attack_metrics.max_accuracy.unchecked(self.seen, self.unseen)
