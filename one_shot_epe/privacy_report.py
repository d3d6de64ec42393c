"""One report per threat model: eps_est, eps_lo and robust summaries beside.

`final_model_report` (Algorithm 2: cosines with the final model against the
exact null) and `all_iterates_report` (Algorithm 3: max-over-rounds cosines of
seen against unseen canaries) bundle the paper's estimate (`estimation`), its
lower bound (`lower_bound`), the Anderson-Darling statistics of Table 6 and,
beside them, summaries that cannot run away: the Gaussian-DP eps, a bootstrap
interval for eps_est, AUROC and TPR at fixed FPRs (`attack_metrics`).
numpy/scipy only.
"""

import dataclasses
import json
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe import attack_metrics
from one_shot_epe import estimation
from one_shot_epe import lower_bound
from one_shot_epe import null_distribution
from one_shot_epe import validation

DEFAULT_BOOTSTRAP_RESAMPLES = 400
TPR_FPRS = (0.01, 0.001)  # False-positive rates of `PrivacyReport.tpr_at_fpr`.


def _bootstrap_epsilons(fits: Sequence[tuple[np.ndarray, np.ndarray]],
                        epsilon_of_fits) -> np.ndarray:
  """eps_est of every bootstrap resample whose fitted stds are all positive.

  `fits` holds (means, stds) arrays per resampled sample; a resample that
  drew one value n times has zero spread, no Gaussian fit, and is dropped.
  """
  usable = np.all([stds > 0.0 for _, stds in fits], axis=0)
  if not np.any(usable):
    raise ValueError('every bootstrap resample has zero spread; the sample '
                     'is too small for an interval.')
  columns = [(means[usable], stds[usable]) for means, stds in fits]
  return np.array([
      epsilon_of_fits(*[(m[i], s[i]) for m, s in columns])
      for i in range(int(np.sum(usable)))
  ])


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """Everything one threat model's estimate rests on, ready for JSON.

  threat_model is 'final' (Algorithm 2: cosines with the final model, null
  N(0, 1/d) / exact) or 'all' (Algorithm 3: max-over-rounds cosines, empirical
  null from unseen canaries).

  Beside the paper's eps_est (Sec. 3.2) and eps_lo (Sec. 5.1), robust
  summaries of the same attack, "the seen statistic is larger":
    gdp_mu, epsilon_gdp: mu = (seen mean - null mean) / null std and the eps of
      mu-Gaussian DP at delta (`epsilon_of_gdp`); null N(0, 1/d) for 'final',
      the unseen sample's fit for 'all'.
    epsilon_est_interval: basic bootstrap 95% interval for eps_est (seen, and
      for 'all' unseen, resampled with replacement).
    auroc: P(null statistic < seen statistic), ties one half; against the
      exact null (Theorem 3.1) for 'final', the unseen sample for 'all'.
    tpr_at_fpr: fraction of seen statistics above the threshold whose FPR is
      the key ('0.01', '0.001'): the exact null's quantile for 'final', the
      unseen sample's (`attack_metrics.empirical_threshold`) for 'all'.
  """
  threat_model: str
  dim: int | None
  delta: float
  alpha: float
  num_seen: int
  num_unseen: int
  seen_mean: float
  seen_std: float
  null_mean: float
  null_std: float
  epsilon_est: float
  epsilon_lo: float
  anderson_seen: float | None
  anderson_unseen: float | None
  epsilon_gdp: float
  gdp_mu: float
  epsilon_est_interval: tuple[float, float]
  auroc: float
  tpr_at_fpr: dict[str, float]

  def to_dict(self) -> dict[str, object]:
    """The fields by name (None for an Anderson statistic not computed).

    The interval is a two-element list, as JSON gives it back.
    """
    fields = dataclasses.asdict(self)
    fields['epsilon_est_interval'] = list(self.epsilon_est_interval)
    return fields

  def to_json(self) -> str:
    """`to_dict` as indented JSON with sorted keys."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _anderson_or_none(sample: np.ndarray) -> float | None:
  return estimation.anderson_darling(sample) if sample.size >= 8 else None


def _fpr_key(fpr: float) -> str:
  return f'{fpr:g}'


def final_model_report(cosines: ArrayLike, dim: int, delta: float,
                       alpha: float = 0.05,
                       threshold_strategy: lower_bound.ThresholdStrategy = (
                           'all'),
                       bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> PrivacyReport:
  """Report for the final-model threat model (Algorithm 2 + eps_lo vs the exact null).

  `seed` makes the bootstrap (and the 'split' halves of eps_lo)
  reproducible; `bootstrap_resamples` (>= 20) resamples give the interval.
  """
  sample = validation.check_cosines('cosines', cosines)
  dim = validation.check_int('dim', dim, 3)
  delta = validation.check_probability('delta', delta)
  resamples = validation.check_int('bootstrap_resamples',
                                   bootstrap_resamples, 20)
  null_std = 1.0 / math.sqrt(dim)

  def epsilon_of_fit(fit: tuple[float, float]) -> float:
    # Algorithm 2 as `estimation.epsilon_from_final_cosines` (variance
    # 'fitted'), from a fit: the point estimate and every resample alike.
    return estimation.epsilon_two_gaussians(0.0, null_std, *fit, delta)

  mean, std = estimation.fit_gaussian(sample, 'cosines')
  epsilon_est = epsilon_of_fit((mean, std))
  rng = np.random.default_rng(seed)
  resampled = _bootstrap_epsilons(
      [attack_metrics.bootstrap_fits(sample, resamples, rng)], epsilon_of_fit)
  mu = attack_metrics.gdp_mu(mean, 0.0, null_std)
  return PrivacyReport(
      threat_model='final', dim=dim, delta=delta,
      alpha=lower_bound.check_alpha(alpha), num_seen=sample.size,
      num_unseen=0,
      seen_mean=mean, seen_std=std, null_mean=0.0, null_std=null_std,
      epsilon_est=epsilon_est,
      epsilon_lo=lower_bound.epsilon_lower_bound(
          sample, dim=dim, delta=delta, alpha=alpha,
          threshold_strategy=threshold_strategy, seed=seed),
      anderson_seen=_anderson_or_none(sample), anderson_unseen=None,
      epsilon_gdp=estimation.epsilon_of_gdp(mu, delta), gdp_mu=mu,
      epsilon_est_interval=attack_metrics.basic_bootstrap_interval(
          epsilon_est, resampled),
      auroc=attack_metrics.auroc_against_cdf(
          null_distribution.null_cdf(sample, dim)),
      tpr_at_fpr={  # The null is symmetric: its upper-fpr point is -ppf(fpr).
          _fpr_key(fpr): attack_metrics.tpr_above(
              sample, float(-null_distribution.null_ppf(fpr, dim)))
          for fpr in TPR_FPRS
      })


def all_iterates_report(seen: ArrayLike, unseen: ArrayLike, delta: float,
                        alpha: float = 0.05, dim: int | None = None,
                        threshold_strategy: lower_bound.ThresholdStrategy = (
                            'all'),
                        bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                        seed: int = 0) -> PrivacyReport:
  """Report for the all-iterates threat model (Algorithm 3 + empirical eps_lo).

  `seed` makes the bootstrap (seen and unseen resampled independently) and
  the 'split' halves of eps_lo reproducible.
  """
  seen = validation.check_cosines('seen', seen)
  unseen = validation.check_cosines('unseen', unseen)
  delta = validation.check_probability('delta', delta)
  resamples = validation.check_int('bootstrap_resamples',
                                   bootstrap_resamples, 20)

  def epsilon_of_fits(seen_fit: tuple[float, float],
                      unseen_fit: tuple[float, float]) -> float:
    # Algorithm 3 as `estimation.epsilon_from_seen_unseen`, from the fits: the
    # point estimate and every resample alike.
    return estimation.epsilon_two_gaussians(*unseen_fit, *seen_fit, delta)

  mu_seen, std_seen = estimation.fit_gaussian(seen, 'seen')
  mu_unseen, std_unseen = estimation.fit_gaussian(unseen, 'unseen')
  epsilon_est = epsilon_of_fits((mu_seen, std_seen), (mu_unseen, std_unseen))
  rng = np.random.default_rng(seed)
  resampled = _bootstrap_epsilons(
      [attack_metrics.bootstrap_fits(seen, resamples, rng),
       attack_metrics.bootstrap_fits(unseen, resamples, rng)],
      epsilon_of_fits)
  mu = attack_metrics.gdp_mu(mu_seen, mu_unseen, std_unseen)
  if dim is not None:
    dim = validation.check_int('dim', dim, 3)
  return PrivacyReport(
      threat_model='all', dim=dim,
      delta=delta, alpha=lower_bound.check_alpha(alpha),
      num_seen=seen.size, num_unseen=unseen.size, seen_mean=mu_seen,
      seen_std=std_seen, null_mean=mu_unseen, null_std=std_unseen,
      epsilon_est=epsilon_est,
      epsilon_lo=lower_bound.epsilon_lower_bound(
          seen, unseen=unseen, delta=delta, alpha=alpha,
          threshold_strategy=threshold_strategy, seed=seed),
      anderson_seen=_anderson_or_none(seen),
      anderson_unseen=_anderson_or_none(unseen),
      epsilon_gdp=estimation.epsilon_of_gdp(mu, delta), gdp_mu=mu,
      epsilon_est_interval=attack_metrics.basic_bootstrap_interval(
          epsilon_est, resampled),
      auroc=attack_metrics.auroc_two_samples(seen, unseen),
      tpr_at_fpr={
          _fpr_key(fpr): attack_metrics.tpr_above(
              seen, attack_metrics.empirical_threshold(unseen, fpr))
          for fpr in TPR_FPRS
      })
