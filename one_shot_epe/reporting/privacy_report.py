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
* lower bounds at 1 - alpha, each valid where its entry's family says
  (`report_fields.Family`): for every (eps, delta)-DP mechanism,
  `epsilon_lo` (`lower_bound`, Bonferroni over a fixed family of
  thresholds), the one-run certificate `epsilon_one_run` (Steinke, Nasr and
  Jagielski, 2023) and the tight one-run bound `epsilon_lo_tight_any` (Xiang
  et al., 2025, `tight_audit`); only when the mechanism is Gaussian in the
  canary's direction, `epsilon_one_run_fdp` (Mahloujifar et al., 2024),
  `epsilon_lo_tight_gdp`, the Gaussian-pair bound `epsilon_lo_gauss_pair`
  (`gaussian_pair`: the fitted pair's mean shift; the final model's from
  d = `gaussian_pair.MIN_FINAL_DIM` on) and `epsilon_lo_gdp_thresholds`;
  and the paper's nominal bound `epsilon_lo_paper`;
* the Anderson-Darling statistics of Table 6 and the attack's summaries
  (mean-shift Gaussian-DP eps, AUROC, TPR at fixed FPRs, `attack_metrics`).

Each of these fields is an entry of `report_fields.FIELDS`, which says how
it is computed and shown; this module checks the scores once and builds the
report from the entries. numpy/scipy only.
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import report_scores
from one_shot_epe.stats import lower_bound
from one_shot_epe import validation

__all__ = ['ALL_ITERATES_ESTIMATE', 'DEFAULT_BOOTSTRAP_RESAMPLES',
           'FINAL_ESTIMATE', 'PrivacyReport', 'TPR_FPRS', 'all_iterates_report',
           'data_canary_all_iterates_report', 'data_canary_report',
           'drop_scores', 'final_model_report', 'loss_scores']

DEFAULT_BOOTSTRAP_RESAMPLES = 1000
# False-positive rates of `PrivacyReport.tpr_at_fpr`.
TPR_FPRS = report_scores.TPR_FPRS
# epsilon_est_method of the two threat models' headline estimates.
FINAL_ESTIMATE = report_scores.FINAL_ESTIMATE
ALL_ITERATES_ESTIMATE = report_scores.ALL_ITERATES_ESTIMATE


def _with_report_fields(cls: type) -> type:
  """`cls` as a frozen dataclass with one field per `report_fields.FIELDS`.

  The fields written in the class (the scores' facts) come first, then the
  entries' in their order; every field is passed by keyword.
  """
  cls.__annotations__ = {
      **cls.__annotations__,
      **{field.key: field.kind for field in report_fields.FIELDS}}
  return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


@_with_report_fields
class PrivacyReport:
  """Everything one threat model's estimates and bounds rest on, ready for JSON.

  threat_model is 'final' (Algorithm 2: cosines with the final model, null
  N(0, 1/d) / exact) or 'all' (Algorithm 3: max-over-rounds cosines, empirical
  null from unseen canaries). The scores' facts are written here: dim (None
  for 'all' without it), delta, alpha, num_seen, num_unseen, seen_mean and
  seen_std (the seen scores' Gaussian fit), null_mean and null_std (0 and
  1/sqrt(d) for 'final', the unseen scores' fit for 'all').

  Then one field per entry of `report_fields.FIELDS`, each described there
  (its label, what it assumes, how it is computed):

  Estimates (not bounds):
    epsilon_est: the headline estimate, described by epsilon_est_method (see
      the module docstring); epsilon_est_saturated: True when it is the
      largest value the sample size can show (all iterates: every seen
      statistic above every unseen one), so the truth may be larger;
      epsilon_est_interval: its percentile bootstrap 95%
      interval, an interval of the estimate (seen, and unseen where used,
      resampled with replacement), not a confidence bound on eps.
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
    epsilon_lo_gdp_thresholds (`gdp_threshold`, jax-privacy main's one-sided
    mu-GDP bound from Clopper-Pearson limits at the ROC hull's thresholds,
    valid for a mechanism Gaussian in the canary's direction; None without
    unseen canaries). epsilon_lo_gauss_pair (`gaussian_pair`: a lower
    confidence bound on the mean shift in units of the larger std, as
    mu-GDP's eps at delta; valid when seen and null scores are Gaussian,
    any stds): against the exact null's mean 0 and std 1/sqrt(d) for
    'final' (None for d below `gaussian_pair.MIN_FINAL_DIM`), against the
    unseen scores for 'all'.
    Nominal only: epsilon_lo_paper (the paper's Sec. 5.1 bound).
  Attack summaries: auroc, P(null statistic < seen statistic), ties one half,
    against the exact null (Theorem 3.1) for 'final', the unseen sample for
    'all'; tpr_at_fpr, the fraction of seen statistics above the threshold
    whose FPR is the key ('0.01', '0.001'): the exact null's quantile for
    'final', the unseen sample's (`attack_metrics.empirical_threshold`) for
    'all'; tpr_at_given_fpr (same keys) and max_accuracy, jax-privacy main's
    summaries of the ROC hull of seen against unseen statistics
    (`attack_metrics`; None without unseen canaries).
  Normality (Table 6): anderson_seen, anderson_unseen ('all' only), None for
    fewer than 8 scores.
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
  canary_kind: str = 'gradient'

  def to_dict(self) -> dict[str, object]:
    """The fields by name (None for a statistic not computed).

    Returns:
      A dict of every field; the interval is a two-element list, as JSON
      gives it back.
    """
    fields = dataclasses.asdict(self)
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in fields.items()}

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
        have two elements. A field added after reports were first written
        (the tight bounds) may be missing: it reads as its entry's
        `old_default`.
    """
    names = [field.name for field in dataclasses.fields(cls)]
    optional = {field.key: field.old_default for field in report_fields.FIELDS
                if field.old_default is not report_fields.REQUIRED}
    # Reports written before data canaries existed are of gradient canaries.
    optional['canary_kind'] = 'gradient'
    missing = [name for name in names
               if name not in fields and name not in optional]
    unknown = sorted(set(fields) - set(names))
    if missing or unknown:
      raise ValueError(f'a privacy report needs exactly the fields {names}; '
                       f'missing {missing}, unknown {unknown}.')
    values = {**optional, **fields}
    for field in report_fields.FIELDS:
      if field.key in fields:
        values[field.key] = field.read(values[field.key])
    return cls(**values)


def _report(scores: report_scores.Scores) -> PrivacyReport:
  """The report of one threat model's checked scores."""
  seen_mean, seen_std = scores.seen_fit
  null_mean, null_std = scores.null_fit
  return PrivacyReport(
      threat_model=scores.threat_model, dim=scores.dim, delta=scores.delta,
      alpha=scores.alpha, num_seen=scores.seen.size,
      num_unseen=0 if scores.unseen is None else scores.unseen.size,
      seen_mean=seen_mean, seen_std=seen_std, null_mean=null_mean,
      null_std=null_std, canary_kind=scores.canary_kind,
      **{field.key: field.value(scores) for field in report_fields.FIELDS})


def _sound_strategy(name: str, strategy: object) -> str:
  """The rule of `threshold_strategy` (`lower_bound.check_sound_strategy`)."""
  del name  # The strategy's check names the argument itself.
  return lower_bound.check_sound_strategy(strategy)


# The rules of the reports' arguments narrower than validation.PARAMETERS.
_RESAMPLES = validation.Int(20)
_DIM = validation.Int(3)


@validation.arguments('cosines', 'delta', 'seed', 'alpha', dim=_DIM,
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
    seed: Makes the bootstrap (and the 'split' halves) reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'final'.

  Raises:
    ValueError: if an argument is out of range (also 'paper' as
      `threshold_strategy`) or the cosines have zero spread.
  """
  return _report(report_scores.Scores(
      'final', cosines, unseen, dim=dim, delta=delta, alpha=alpha, seed=seed,
      threshold_strategy=threshold_strategy,
      bootstrap_resamples=bootstrap_resamples))


@validation.arguments('delta', 'seed', 'alpha', seen=validation.Cosines(),
                      unseen=validation.Cosines(),
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
    seed: Makes the bootstrap (seen and unseen resampled independently) and
      the 'split' halves reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'all'.

  Raises:
    ValueError: if an argument is out of range (also 'paper' as
      `threshold_strategy`) or a sample has zero spread.
  """
  return _report(report_scores.Scores(
      'all', seen, unseen, dim=dim, delta=delta, alpha=alpha, seed=seed,
      threshold_strategy=threshold_strategy,
      bootstrap_resamples=bootstrap_resamples))


def _scaled(name: str, seen: ArrayLike, unseen: ArrayLike,
            sign: float) -> tuple[np.ndarray, np.ndarray]:
  """`sign` x the values, both sets divided by one factor into [-1, 1].

  The factor is the largest |value|, at least 1; no estimate or bound of a
  report against unseen scores depends on it (they compare ranks,
  thresholds of the unseen sample and Gaussian fits in units of their own
  spread).
  """
  seen = np.asarray(seen, np.float64).reshape(-1)
  unseen = np.asarray(unseen, np.float64).reshape(-1)
  both = np.concatenate([seen, unseen])
  if not np.all(np.isfinite(both)):
    raise ValueError(f'data canaries\' {name} must be finite; got '
                     f'{both[~np.isfinite(both)][:3].tolist()}.')
  scale = max(1.0, float(np.abs(both).max(initial=0.0)))
  return sign * seen / scale, sign * unseen / scale


def loss_scores(seen_losses: ArrayLike, unseen_losses: ArrayLike
                ) -> tuple[np.ndarray, np.ndarray]:
  """Data canaries' losses as scores in [-1, 1]: negated, one common scale.

  A lower loss is more member-like, so the score is -loss; both sets are
  divided by one factor (the largest |loss|, at least 1), which no estimate
  or bound of a report against unseen scores depends on.

  Args:
    seen_losses: The seen canaries' losses, finite.
    unseen_losses: The unseen canaries' losses, finite.

  Returns:
    (seen scores, unseen scores), float64.

  Raises:
    ValueError: a loss is not finite.
  """
  return _scaled('losses', seen_losses, unseen_losses, -1.0)


def drop_scores(seen_drops: ArrayLike, unseen_drops: ArrayLike
                ) -> tuple[np.ndarray, np.ndarray]:
  """Data canaries' largest excess one-round loss drops as scores in [-1, 1].

  A larger drop (the round's model fits the canary's examples better than
  the model before it, beyond what it did for every canary) is more
  member-like, so the score is the drop, both sets divided by one common
  factor (as `loss_scores`).

  Args:
    seen_drops: The seen canaries' max over rounds t of d_jt - median_i
      d_it, d_jt = L_j(theta_{t-1}) - L_j(theta_t) (`runtime.loss_drops`),
      finite.
    unseen_drops: The unseen canaries', finite.

  Returns:
    (seen scores, unseen scores), float64.

  Raises:
    ValueError: a drop is not finite.
  """
  return _scaled('loss drops', seen_drops, unseen_drops, 1.0)


@validation.arguments('delta', 'seed', 'alpha',
                      dim=validation.Optional(_DIM),
                      threshold_strategy=_sound_strategy,
                      bootstrap_resamples=_RESAMPLES)
def data_canary_report(seen_losses: ArrayLike, unseen_losses: ArrayLike,
                       delta: float, alpha: float = 0.05,
                       dim: int | None = None,
                       threshold_strategy: str = 'bonferroni',
                       bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> PrivacyReport:
  """Report for data canaries on the final model (black box, empirical null).

  The seen canaries' losses under the final model against the unseen
  ones' (`loss_scores`). The threshold tests (epsilon_lo, the one-run
  bounds for any mechanism) hold at 1 - alpha whatever the mechanism: each
  is a test of seen against unseen scores. The headline is the Gaussian DP
  eps of the AUROC (an estimate); the bounds that assume a Gaussian
  mechanism in the canary's direction are None
  (`report_fields.DATA_CANARY_GAUSSIAN`).

  Args:
    seen_losses: The inserted data canaries' mean losses, finite.
    unseen_losses: The never-inserted ones', finite.
    delta: The delta of every eps, in (0, 1).
    alpha: The lower bounds hold with probability 1 - alpha; in (0, 0.5).
    dim: Optional d >= 3, recorded in the report.
    threshold_strategy: As for `final_model_report`.
    bootstrap_resamples: Resamples (>= 20) of the headline's interval.
    seed: Makes the bootstrap and the 'split' halves reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'final' and canary_kind 'data'.

  Raises:
    ValueError: an argument is out of range, a loss is not finite or a
      sample has fewer than two scores or zero spread.
  """
  seen, unseen = loss_scores(seen_losses, unseen_losses)
  seen = validation.Cosines()('seen_losses', seen)
  unseen = validation.Cosines()('unseen_losses', unseen)
  return _report(report_scores.Scores(
      'final', seen, unseen, dim=dim, delta=delta, alpha=alpha, seed=seed,
      threshold_strategy=threshold_strategy,
      bootstrap_resamples=bootstrap_resamples, canary_kind='data'))


@validation.arguments('delta', 'seed', 'alpha',
                      dim=validation.Optional(_DIM),
                      threshold_strategy=_sound_strategy,
                      bootstrap_resamples=_RESAMPLES)
def data_canary_all_iterates_report(
    seen_drops: ArrayLike, unseen_drops: ArrayLike, delta: float,
    alpha: float = 0.05, dim: int | None = None,
    threshold_strategy: str = 'bonferroni',
    bootstrap_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = 0) -> PrivacyReport:
  """Report for data canaries on every round's model (empirical null).

  Each canary's score is its largest excess one-round loss drop, max over
  t of d_jt - median_i d_it with d_jt = L_j(theta_{t-1}) - L_j(theta_t)
  (`runtime.loss_drops`, `drop_scores`): an adversary who sees every model
  tests whether some round fitted the canary's examples better than the
  round before, beyond that round's drop for every canary. Seen against
  unseen canaries, as Algorithm 3 tests the
  gradient canaries' max cosines; the threshold tests hold at 1 - alpha
  whatever the mechanism, the Gaussian-family bounds are None
  (`report_fields.DATA_CANARY_GAUSSIAN`).

  Args:
    seen_drops: The inserted data canaries' largest loss drops, finite.
    unseen_drops: The never-inserted ones', finite.
    delta: The delta of every eps, in (0, 1).
    alpha: The lower bounds hold with probability 1 - alpha; in (0, 0.5).
    dim: Optional d >= 3, recorded in the report.
    threshold_strategy: As for `final_model_report`.
    bootstrap_resamples: Resamples (>= 20) of the headline's interval.
    seed: Makes the bootstrap and the 'split' halves reproducible.

  Returns:
    The `PrivacyReport` with threat_model 'all' and canary_kind 'data'.

  Raises:
    ValueError: an argument is out of range, a drop is not finite or a
      sample has fewer than two scores.
  """
  seen, unseen = drop_scores(seen_drops, unseen_drops)
  seen = validation.Cosines()('seen_drops', seen)
  unseen = validation.Cosines()('unseen_drops', unseen)
  return _report(report_scores.Scores(
      'all', seen, unseen, dim=dim, delta=delta, alpha=alpha, seed=seed,
      threshold_strategy=threshold_strategy,
      bootstrap_resamples=bootstrap_resamples, canary_kind='data'))
