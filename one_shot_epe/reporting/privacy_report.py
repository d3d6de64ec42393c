"""One report per threat model: estimates and bounds, each named for what it is.

`final_model_report` (Algorithm 2: cosines with the final model against the
exact null) and `all_iterates_report` (Algorithm 3: max-over-rounds cosines of
seen against unseen canaries) bundle, from the same canary scores:

* the headline estimate `epsilon_est`, chosen because it does not run away
  (final model: the two-Gaussian eps with the variance fixed at the null's
  1/d, unbiased on a Gaussian mechanism; all iterates: the Gaussian-DP eps
  implied by the attack's AUROC, which cannot exceed the mechanism's eps in
  expectation), with a bootstrap interval, and the paper's estimate as
  written, `epsilon_est_fitted` (Sec. 3.2: fitted variances, biased upwards
  because unequal-variance Gaussians have unbounded privacy loss);
* lower bounds that hold at 1 - alpha: `epsilon_lo` (`lower_bound`,
  Bonferroni over a fixed family of thresholds) and the one-run certificates
  `epsilon_one_run` (Steinke, Nasr and Jagielski, 2023) and
  `epsilon_one_run_fdp` (Mahloujifar et al., 2024) of `one_run`, and the
  tight one-run bounds of Xiang et al. (2025, `tight_audit`),
  `epsilon_lo_tight_any` (valid for every (eps, delta)-DP mechanism) and
  `epsilon_lo_tight_gdp` (valid when the mechanism is Gaussian in the
  canary's direction), which need unseen canaries; and the paper's nominal
  bound `epsilon_lo_paper`;
* the Anderson-Darling statistics of Table 6 and the attack's summaries
  (mean-shift Gaussian-DP eps, AUROC, TPR at fixed FPRs, `attack_metrics`).
numpy/scipy only.
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.stats import attack_metrics
from one_shot_epe.stats import estimation
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import null_distribution
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit
from one_shot_epe import validation

# The report is the public boundary of its call path: its arguments are
# checked once, here, and the statistics modules' unchecked helpers
# (`_name`, each the body of the public `name`) are given checked values.
# pylint: disable=protected-access

__all__ = ['ALL_ITERATES_ESTIMATE', 'DEFAULT_BOOTSTRAP_RESAMPLES',
           'FINAL_ESTIMATE', 'PrivacyReport', 'TPR_FPRS', 'all_iterates_report',
           'final_model_report']

DEFAULT_BOOTSTRAP_RESAMPLES = 1000
TPR_FPRS = (0.01, 0.001)  # False-positive rates of `PrivacyReport.tpr_at_fpr`.
# epsilon_est_method of the two threat models' headline estimates.
FINAL_ESTIMATE = "two Gaussians, variance fixed at the null's 1/d"
ALL_ITERATES_ESTIMATE = 'Gaussian DP at μ = √2 Φ⁻¹(AUROC)'


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """Everything one threat model's estimates and bounds rest on, ready for JSON.

  threat_model is 'final' (Algorithm 2: cosines with the final model, null
  N(0, 1/d) / exact) or 'all' (Algorithm 3: max-over-rounds cosines, empirical
  null from unseen canaries).

  Estimates (not bounds):
    epsilon_est: the headline estimate, described by epsilon_est_method (see
      the module docstring); epsilon_est_saturated: True when it is the
      largest value the sample size can show (all iterates: every seen
      statistic above every unseen one), so the truth may be larger;
      epsilon_est_interval: its percentile bootstrap 95%
      interval (seen, and unseen where used, resampled with replacement).
    epsilon_est_fitted: Algorithm 2 (final) or 3 (all) as written.
    gdp_mu, epsilon_gdp: mu = (seen mean - null mean) / null std and the eps of
      mu-Gaussian DP at delta (`estimation.epsilon_of_gdp`); null N(0, 1/d) for
      'final', the unseen sample's fit for 'all'.
  Lower bounds at 1 - alpha: epsilon_lo (`lower_bound`, 'bonferroni');
    epsilon_one_run and epsilon_one_run_fdp (`one_run`; None without unseen
    canaries); epsilon_lo_tight_any and epsilon_lo_tight_gdp (`tight_audit`,
    the (eps, delta) channel family, valid for any (eps, delta)-DP mechanism,
    and the mu-GDP family, valid for a mechanism Gaussian in the canary's
    direction; docs/bounds.md). The one-run game gives both for 'all' and
    the GDP one for 'final': it assumes each canary was inserted with
    probability 1/2 and is None without unseen canaries or when the seen and
    unseen counts cannot come from that design (`tight_audit.check_design`).
    For 'final' the channel family is tested against the exact null instead
    (`tight_audit.epsilon_lo_known_null`), with or without unseen canaries.
    Nominal only: epsilon_lo_paper (the paper's Sec. 5.1 bound).
  Attack summaries: auroc, P(null statistic < seen statistic), ties one half,
    against the exact null (Theorem 3.1) for 'final', the unseen sample for
    'all'; tpr_at_fpr, the fraction of seen statistics above the threshold
    whose FPR is the key ('0.01', '0.001'): the exact null's quantile for
    'final', the unseen sample's (`attack_metrics.empirical_threshold`) for
    'all'.
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
  epsilon_est_method: str
  epsilon_est_saturated: bool
  epsilon_est_interval: tuple[float, float]
  epsilon_est_fitted: float
  epsilon_lo: float
  epsilon_lo_paper: float
  epsilon_one_run: float | None
  epsilon_one_run_fdp: float | None
  anderson_seen: float | None
  anderson_unseen: float | None
  epsilon_gdp: float
  gdp_mu: float
  auroc: float
  tpr_at_fpr: dict[str, float]
  epsilon_lo_tight_any: float | None = None
  epsilon_lo_tight_gdp: float | None = None

  def to_dict(self) -> dict[str, object]:
    """The fields by name (None for a statistic not computed).

    Returns:
      A dict of every field; the interval is a two-element list, as JSON
      gives it back.
    """
    fields = dataclasses.asdict(self)
    fields['epsilon_est_interval'] = list(self.epsilon_est_interval)
    return fields

  def to_json(self) -> str:
    """`to_dict` as indented JSON with sorted keys.

    Returns:
      The JSON text.
    """
    return json.dumps(self.to_dict(), indent=2, sort_keys=True)

  @classmethod
  def from_dict(cls, fields: Mapping[str, Any]) -> 'PrivacyReport':
    """The report whose `to_dict` (or that read back from JSON) is `fields`.

    Args:
      fields: Every field by name, the interval a two-element sequence.

    Returns:
      The `PrivacyReport`; `from_dict(r.to_dict()) == r`.

    Raises:
      ValueError: if a field is missing or unknown, or the interval does not
        have two elements. The tight bounds may be missing (reports written
        before they existed): they read as None.
    """
    names = [field.name for field in dataclasses.fields(cls)]
    missing = [name for name in names
               if name not in fields and name not in _OPTIONAL_FIELDS]
    unknown = sorted(set(fields) - set(names))
    if missing or unknown:
      raise ValueError(f'a privacy report needs exactly the fields {names}; '
                       f'missing {missing}, unknown {unknown}.')
    values = dict(fields)
    interval = tuple(values['epsilon_est_interval'])
    if len(interval) != 2:
      raise ValueError('epsilon_est_interval must have two elements; got '
                       f'{values["epsilon_est_interval"]!r}.')
    values['epsilon_est_interval'] = interval
    values['tpr_at_fpr'] = dict(values['tpr_at_fpr'])
    return cls(**values)


# Fields added after reports were first written; `from_dict` defaults them.
_OPTIONAL_FIELDS = ('epsilon_lo_tight_any', 'epsilon_lo_tight_gdp')


def _anderson_or_none(sample: np.ndarray) -> float | None:
  # The sample has spread: its Gaussian fit succeeded.
  return estimation._anderson_darling(sample) if sample.size >= 8 else None


def _fpr_key(fpr: float) -> str:
  return f'{fpr:g}'


def _one_run_bounds(seen: np.ndarray, unseen: np.ndarray | None, delta: float,
                    alpha: float) -> tuple[float | None, float | None]:
  """(epsilon_one_run, epsilon_one_run_fdp), None without unseen scores."""
  if unseen is None:
    return None, None
  # Seen scores have spread (their Gaussian fit succeeded), so the two sets
  # are not all one value.
  return (one_run._epsilon_one_run(seen, unseen, delta, alpha),
          one_run._epsilon_one_run_fdp(seen, unseen, delta, alpha))


def _tight_bounds(seen: np.ndarray, unseen: np.ndarray | None, delta: float,
                  alpha: float, seed: int, *,
                  dim: int | None = None) -> dict[str, float | None]:
  """epsilon_lo_tight_any and _gdp.

  With `dim` (final model) the channel family is tested against the exact
  null of Theorem 3.1 (`tight_audit.epsilon_lo_known_null`); otherwise, and
  for the GDP family, by the one-run game, None without unseen scores or a
  1/2 design.
  """
  names = {'epsilon_lo_tight_any': 'channel', 'epsilon_lo_tight_gdp': 'gdp'}
  bounds = dict.fromkeys(names)
  if dim is not None:
    bounds['epsilon_lo_tight_any'] = tight_audit._epsilon_lo_known_null(
        seen, lambda t: null_distribution.null_logsf(t, dim), delta, alpha)
    del names['epsilon_lo_tight_any']
  if unseen is not None:
    try:
      tight_audit.check_design(seen.size, unseen.size)
    except ValueError:
      return bounds
    for name, family in names.items():
      bounds[name] = tight_audit._epsilon_lo_tight(seen, unseen, delta, family,
                                                   alpha, 'bernoulli', seed)
  return bounds


def _lower_bounds(seen: np.ndarray, delta: float, alpha: float,
                  threshold_strategy: str, seed: int, *, dim: int | None,
                  unseen: np.ndarray | None) -> dict[str, float]:
  """The report's sound epsilon_lo and the paper's nominal one (Sec. 5.1).

  Against the exact null of dimension `dim` or the empirical null `unseen`
  (the other None).
  """
  return {
      name: lower_bound._epsilon_lower_bound(
          seen, delta=delta, dim=dim, unseen=unseen, alpha=alpha,
          null='exact', threshold_strategy=strategy, seed=seed)
      for name, strategy in (('epsilon_lo', threshold_strategy),
                             ('epsilon_lo_paper', 'paper'))
  }


def _sound_strategy(name: str, strategy: object) -> str:
  """The rule of `threshold_strategy` (`lower_bound.check_sound_strategy`)."""
  del name  # The strategy's check names the argument itself.
  return lower_bound.check_sound_strategy(strategy)


# The rules of the reports' arguments narrower than validation.PARAMETERS.
_RESAMPLES = validation.Int(20)
_DIM = validation.Int(3)


@validation.arguments('cosines', 'delta', 'seed', dim=_DIM,
                      alpha=lower_bound.ALPHA,
                      unseen=validation.Optional(validation.Cosines()),
                      threshold_strategy=_sound_strategy,
                      bootstrap_resamples=_RESAMPLES)
def final_model_report(cosines: ArrayLike, dim: int, delta: float,
                       alpha: float = 0.05,
                       unseen: ArrayLike | None = None,
                       threshold_strategy: str = 'bonferroni',
                       bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> PrivacyReport:
  """Report for the final-model threat model (Algorithm 2, exact null).

  Args:
    cosines: The seen canaries' cosines with the final model, in [-1, 1].
    dim: d >= 3, the model dimension (the null is that of Theorem 3.1).
    delta: The delta of every eps, in (0, 1).
    alpha: The lower bounds hold with probability 1 - alpha; in (0, 0.5).
    unseen: Optional never-inserted canaries' cosines (their law is the
      exact null, so only the one-run certificates and the tight one-run
      bounds, which compare the two sets, use them).
    threshold_strategy: epsilon_lo's sound threshold choice, 'bonferroni' or
      'split' (`lower_bound.epsilon_lower_bound`); the paper's is always
      reported as epsilon_lo_paper.
    bootstrap_resamples: Resamples (>= 20) of the headline's interval.
    seed: Makes the bootstrap (and the 'split' halves, and the tight bounds'
      tie-breaking) reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'final'.

  Raises:
    ValueError: if an argument is out of range (also 'paper' as
      `threshold_strategy`) or the cosines have zero spread.
  """
  null_std = 1.0 / math.sqrt(dim)

  def headline(mean: float) -> float:
    # `estimation.epsilon_from_final_cosines(variance='null')` from a mean.
    return estimation._epsilon_two_gaussians(0.0, null_std, mean, null_std,
                                             delta)

  mean, std = estimation.fit_gaussian(cosines, 'cosines')
  epsilon_est = headline(mean)
  rng = np.random.default_rng(seed)
  # The headline increases with |mean|: its percentile interval is that of
  # |mean| carried through it.
  low, high = attack_metrics._percentile_interval(
      np.abs(attack_metrics._bootstrap_means(cosines, bootstrap_resamples,
                                             rng)))
  mu = attack_metrics.gdp_mu(mean, 0.0, null_std)
  one_run_bound, one_run_fdp = _one_run_bounds(cosines, unseen, delta, alpha)
  return PrivacyReport(
      threat_model='final', dim=dim, delta=delta, alpha=alpha,
      num_seen=cosines.size, num_unseen=0 if unseen is None else unseen.size,
      seen_mean=mean, seen_std=std, null_mean=0.0, null_std=null_std,
      epsilon_est=epsilon_est, epsilon_est_method=FINAL_ESTIMATE,
      epsilon_est_saturated=False,
      epsilon_est_interval=(headline(low), headline(high)),
      epsilon_est_fitted=estimation._epsilon_two_gaussians(
          0.0, null_std, mean, std, delta),
      **_lower_bounds(cosines, delta, alpha, threshold_strategy, seed,
                      dim=dim, unseen=None),
      epsilon_one_run=one_run_bound, epsilon_one_run_fdp=one_run_fdp,
      anderson_seen=_anderson_or_none(cosines), anderson_unseen=None,
      epsilon_gdp=estimation._epsilon_of_gdp(mu, delta), gdp_mu=mu,
      auroc=attack_metrics.auroc_against_cdf(
          null_distribution.null_cdf(cosines, dim)),
      tpr_at_fpr={  # The null is symmetric: its upper-fpr point is -ppf(fpr).
          _fpr_key(fpr): attack_metrics._tpr_above(
              cosines, float(-null_distribution.null_ppf(fpr, dim)))
          for fpr in TPR_FPRS
      },
      **_tight_bounds(cosines, unseen, delta, alpha, seed, dim=dim))


@validation.arguments('delta', 'seed', seen=validation.Cosines(),
                      unseen=validation.Cosines(), alpha=lower_bound.ALPHA,
                      dim=validation.Optional(_DIM),
                      threshold_strategy=_sound_strategy,
                      bootstrap_resamples=_RESAMPLES)
def all_iterates_report(seen: ArrayLike, unseen: ArrayLike, delta: float,
                        alpha: float = 0.05, dim: int | None = None,
                        threshold_strategy: str = 'bonferroni',
                        bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                        seed: int = 0) -> PrivacyReport:
  """Report for the all-iterates threat model (Algorithm 3, empirical null).

  Args:
    seen: Max-over-rounds cosines of the inserted canaries, in [-1, 1].
    unseen: Those of the never-inserted canaries, the empirical null.
    delta: The delta of every eps, in (0, 1).
    alpha: The lower bounds hold with probability 1 - alpha; in (0, 0.5).
    dim: Optional d >= 3, recorded in the report.
    threshold_strategy: As for `final_model_report`.
    bootstrap_resamples: Resamples (>= 20) of the headline's interval.
    seed: Makes the bootstrap (seen and unseen resampled independently), the
      'split' halves and the tight bounds' tie-breaking reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'all'.

  Raises:
    ValueError: if an argument is out of range (also 'paper' as
      `threshold_strategy`) or a sample has zero spread.
  """
  pairs = seen.size * unseen.size

  def headline(auroc: float) -> float:
    return estimation._epsilon_of_gdp(
        attack_metrics.gdp_mu_from_auroc(auroc, pairs), delta)

  mu_seen, std_seen = estimation.fit_gaussian(seen, 'seen')
  mu_unseen, std_unseen = estimation.fit_gaussian(unseen, 'unseen')
  auroc = attack_metrics._auroc_two_samples(seen, unseen)
  epsilon_est = headline(auroc)
  rng = np.random.default_rng(seed)
  # The headline increases with the AUROC: its percentile interval is the
  # AUROC's carried through it.
  low, high = attack_metrics._percentile_interval(
      attack_metrics._bootstrap_aurocs(seen, unseen, bootstrap_resamples,
                                       rng))
  mu = attack_metrics.gdp_mu(mu_seen, mu_unseen, std_unseen)
  one_run_bound, one_run_fdp = _one_run_bounds(seen, unseen, delta, alpha)
  return PrivacyReport(
      threat_model='all', dim=dim, delta=delta, alpha=alpha,
      num_seen=seen.size, num_unseen=unseen.size, seen_mean=mu_seen,
      seen_std=std_seen, null_mean=mu_unseen, null_std=std_unseen,
      epsilon_est=epsilon_est, epsilon_est_method=ALL_ITERATES_ESTIMATE,
      epsilon_est_saturated=auroc in (0.0, 1.0),
      epsilon_est_interval=(headline(low), headline(high)),
      epsilon_est_fitted=estimation._epsilon_two_gaussians(
          mu_unseen, std_unseen, mu_seen, std_seen, delta),
      **_lower_bounds(seen, delta, alpha, threshold_strategy, seed,
                      dim=None, unseen=unseen),
      epsilon_one_run=one_run_bound, epsilon_one_run_fdp=one_run_fdp,
      anderson_seen=_anderson_or_none(seen),
      anderson_unseen=_anderson_or_none(unseen),
      epsilon_gdp=estimation._epsilon_of_gdp(mu, delta), gdp_mu=mu,
      auroc=auroc,
      tpr_at_fpr={
          _fpr_key(fpr): attack_metrics._tpr_above(
              seen, attack_metrics._empirical_threshold(unseen, fpr))
          for fpr in TPR_FPRS
      },
      **_tight_bounds(seen, unseen, delta, alpha, seed))
