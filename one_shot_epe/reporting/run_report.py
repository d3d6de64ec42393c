"""The privacy report that ends every training run (Sections 4 and 5).

Bundles, for one DP-FedAvg run with canaries:
* references, each with the mechanism it assumes, from the run's mechanism
  (`mechanisms.Mechanism.references`): the analytical eps of a canary
  presented r times (for Gaussian noise an r-fold Gaussian mechanism, no
  amplification; r = 1 is the paper's Tables 3 and 4), the accounted eps of
  a real client over the whole run under its sampling (dp_accounting), and
  the final-model reference (the last-iterate heuristic of Steinke et al.,
  2025, or the tree's noised prefix sum);
* the final-model report (Algorithm 2) and the all-iterates report
  (Algorithm 3), `privacy_report.PrivacyReport`: headline estimates that do
  not run away and the paper's fitted ones, lower bounds that hold at
  1 - alpha and the paper's nominal one, attack summaries;
* the run's accuracy and setting.
Written as JSON (machine-readable) and Markdown (for people), atomically.
"""

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import dp_accounting
import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.reporting import privacy_report
from one_shot_epe.runtime import atomic_io

__all__ = ['DECORRELATED_ALL_ITERATES_NOTE', 'RunReport', 'build_run_report']

# The decorrelated all-iterates statistic's report row (`decorrelation`).
DECORRELATED_ALL_ITERATES_NOTE = (
    'the rounds\' released sums multiplied by the strategy C (C x + Z: '
    'independent noise rows), then each canary\'s matched filter C 1_R: '
    'N(mu, 1) inserted, N(0, 1) not, the mechanism\'s own test of the canary '
    '(in simulation within a few % of the release\'s eps)')


def _finite_or_none(value: float | None) -> float | None:
  return None if value is None or math.isinf(value) else value


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Privacy estimates of one run under both threat models.

  analytical_epsilon is the canary's bound at canary_presentations = r
  (math.inf without noise); accounted_epsilon the real clients' bound over
  the whole run; last_iterate_epsilon the canary's last-iterate heuristic
  (None where the run's length or schedule was not given).
  """
  noise_multiplier: float
  delta: float
  alpha: float
  dim: int
  analytical_epsilon: float  # math.inf without noise.
  final: privacy_report.PrivacyReport
  all_iterates: privacy_report.PrivacyReport | None
  accuracy: float | None = None
  setting: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  canary_presentations: int = 1
  analytical_mechanism: str = ''
  accounted_epsilon: float | None = None  # math.inf without noise.
  accounted_mechanism: str | None = None
  last_iterate_epsilon: float | None = None  # math.inf without noise.
  last_iterate_mechanism: str | None = None
  # Under matrix-factorization noise: the decorrelated all-iterates report
  # (`decorrelation`), None otherwise.
  all_iterates_decorrelated: privacy_report.PrivacyReport | None = None

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; an infinite reference epsilon becomes None.

    Per threat model, every estimate and bound is repeated at the top level
    with the suffix _final or _all (None without unseen canaries); a report
    with the decorrelated all-iterates statistic also has
    'all_iterates_decorrelated' and the suffix _all_decorrelated.

    Returns:
      The report as nested dicts of str, numbers, lists and None.
    """
    result = {
        'noise_multiplier': self.noise_multiplier,
        'delta': self.delta,
        'alpha': self.alpha,
        'dim': self.dim,
        'canary_presentations': self.canary_presentations,
        'analytical_epsilon': _finite_or_none(self.analytical_epsilon),
        'analytical_epsilon_mechanism': self.analytical_mechanism,
        'accounted_epsilon': _finite_or_none(self.accounted_epsilon),
        'accounted_epsilon_mechanism': self.accounted_mechanism,
        'last_iterate_epsilon': _finite_or_none(self.last_iterate_epsilon),
        'last_iterate_epsilon_mechanism': self.last_iterate_mechanism,
        'accuracy': self.accuracy,
        'final': self.final.to_dict(),
        'all_iterates': (None if self.all_iterates is None else
                         self.all_iterates.to_dict()),
        'setting': dict(self.setting),
    }
    threats = [('final', self.final), ('all', self.all_iterates)]
    if self.all_iterates_decorrelated is not None:
      result['all_iterates_decorrelated'] = (
          self.all_iterates_decorrelated.to_dict())
      threats.append(('all_decorrelated', self.all_iterates_decorrelated))
    for suffix, report in threats:
      fields = None if report is None else report.to_dict()
      for key in _REPEATED_KEYS + _LATER_REPEATED_KEYS:
        result[f'{key}_{suffix}'] = None if fields is None else fields[key]
    return result

  @classmethod
  def from_dict(cls, fields: Mapping[str, Any]) -> 'RunReport':
    """The report whose `to_dict` (or report.json read back) is `fields`.

    Undoes `to_dict`: the mechanisms' keys get their field names back, the
    top-level copies are dropped, and a None reference epsilon is infinite
    where its mechanism is named (the analytical one always is).

    Args:
      fields: `to_dict`'s keys, as JSON gives them back.

    Returns:
      The `RunReport`; `from_dict(r.to_dict()) == r`.

    Raises:
      ValueError: if a key is missing or unknown, or a threat model's report
        is malformed.
    """
    suffixes = ('final', 'all')
    if 'all_iterates_decorrelated' in fields:
      suffixes += ('all_decorrelated',)
    expected = set(_JSON_KEYS) | {
        f'{key}_{suffix}' for key in _REPEATED_KEYS for suffix in suffixes}
    if 'all_iterates_decorrelated' in fields:
      expected.add('all_iterates_decorrelated')
    # Reports written before these keys existed lack them.
    later = {f'{key}_{suffix}' for key in _LATER_REPEATED_KEYS
             for suffix in suffixes}
    missing = sorted(expected - set(fields))
    unknown = sorted(set(fields) - expected - later)
    if missing or unknown:
      raise ValueError(f'not a run report: missing keys {missing}, unknown '
                       f'keys {unknown}.')
    values = {name: fields[key] for key, name in _JSON_KEYS.items()}
    values['analytical_epsilon'] = _none_as_inf(values['analytical_epsilon'])
    for name in ('accounted', 'last_iterate'):
      if values[f'{name}_mechanism'] is not None:
        values[f'{name}_epsilon'] = _none_as_inf(values[f'{name}_epsilon'])
    values['final'] = privacy_report.PrivacyReport.from_dict(fields['final'])
    if fields['all_iterates'] is not None:
      values['all_iterates'] = privacy_report.PrivacyReport.from_dict(
          fields['all_iterates'])
    if 'all_iterates_decorrelated' in fields:
      values['all_iterates_decorrelated'] = (
          privacy_report.PrivacyReport.from_dict(
              fields['all_iterates_decorrelated']))
    values['setting'] = dict(fields['setting'])
    return cls(**values)

  @classmethod
  def read(cls, path: str) -> 'RunReport':
    """The report in the JSON file `path` (a run's report.json).

    Args:
      path: A file `write` wrote.

    Returns:
      The `RunReport` it holds.

    Raises:
      OSError: if the file cannot be read.
      ValueError: if it does not hold a run report (names `path`).
    """
    with open(path, encoding='utf-8') as stream:
      text = stream.read()
    try:
      return cls.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError) as error:
      raise ValueError(f'{path}: {error}') from None

  def to_json(self) -> str:
    """`to_dict` as indented JSON; a NaN or infinity raises ValueError.

    Returns:
      The JSON text, keys sorted, without a trailing newline.

    Raises:
      ValueError: a value is NaN or infinite (not valid JSON).
    """
    return json.dumps(self.to_dict(), indent=2, sort_keys=True,
                      allow_nan=False)

  def to_markdown(self) -> str:
    """Headline row, estimates, bounds, references, attack summaries, fits.

    Returns:
      The report as Markdown, ending with a newline.
    """
    all_it, final = self.all_iterates, self.final
    confidence = f'{1 - self.alpha:.0%}'
    threats = [(name, report) for name, report in (
        ('all iterates', all_it),
        ('all iterates, decorrelated', self.all_iterates_decorrelated),
        ('final model', final)) if report is not None]
    lines = [
        '| noise | analytical ε | accounted ε | ε_lo-all | ε_est-all | '
        'ε_lo-final | ε_est-final | accuracy |',
        '|---|---|---|---|---|---|---|---|',
        f'| {self.noise_multiplier:g} | {_num(self.analytical_epsilon)} | '
        f'{_num(self.accounted_epsilon)} | '
        f'{_num(all_it and all_it.epsilon_lo)} | '
        f'{_estimate(all_it)} | '
        f'{_num(final.epsilon_lo)} | {_estimate(final)} | '
        f'{_num(self.accuracy)} |',
        '',
        f'd = {self.dim}, δ = {self.delta:.3g}. ε_lo are {confidence} lower '
        'bounds; ε_est are estimates, not bounds (≥: the most the canaries '
        'can show).',
        '',
        '**Estimates.** The headline ε_est and the paper\'s (Sec. 3.2, '
        'fitted variances; it runs high when the fitted variances differ).',
        '',
        '| threat model | ε_est | 95% bootstrap interval | how | '
        'paper\'s ε_est |',
        '|---|---|---|---|---|',
    ]
    for name, report in threats:
      low, high = report.epsilon_est_interval
      lines.append(
          f'| {name} | {_estimate(report)} | [{_num(low)}, '
          f'{_num(high)}] | {report.epsilon_est_method} | '
          f'{_num(report.epsilon_est_fitted)} |')
    lines += [
        '',
        f'**Lower bounds.** At {confidence}: ε_lo and ε_one-run (Steinke et '
        'al., 2023) and ε_tight-any (the (ε, δ) channel: final model against '
        'the exact null, all iterates by Xiang et al.\'s 2025 game) for any '
        'mechanism; ε_one-run-fdp (Mahloujifar et al., '
        '2024) and ε_tight-gdp (Xiang et al., 2025, μ-GDP) when the '
        'mechanism is Gaussian in the canary\'s direction. The paper\'s '
        'ε_lo chooses its threshold on the data it tests and is nominal '
        'only.',
        '',
        '| threat model | ε_lo | ε_one-run | ε_tight-any | ε_one-run-fdp '
        '(Gaussian) | ε_tight-gdp (Gaussian) | paper\'s ε_lo (nominal) |',
        '|---|---|---|---|---|---|---|',
    ]
    lines += [f'| {name} | {_num(report.epsilon_lo)} | '
              f'{_num(report.epsilon_one_run)} | '
              f'{_num(report.epsilon_lo_tight_any)} | '
              f'{_num(report.epsilon_one_run_fdp)} | '
              f'{_num(report.epsilon_lo_tight_gdp)} | '
              f'{_num(report.epsilon_lo_paper)} |' for name, report in threats]
    lines += [
        '',
        '**References.**',
        '',
        '| reference | ε | mechanism it assumes |',
        '|---|---|---|',
        f'| analytical ε (canary, r = {self.canary_presentations}) | '
        f'{_num(self.analytical_epsilon)} | {self.analytical_mechanism} |',
    ]
    if self.accounted_mechanism is not None:
      lines.append(f'| accounted ε (real client) | '
                   f'{_num(self.accounted_epsilon)} | '
                   f'{self.accounted_mechanism} |')
    if self.last_iterate_mechanism is not None:
      lines.append(f'| last-iterate heuristic ε (canary, final model) | '
                   f'{_num(self.last_iterate_epsilon)} | '
                   f'{self.last_iterate_mechanism} |')
    lines += [
        '',
        '**The attack.** ε_gdp: Gaussian DP at the seen statistics\' mean '
        'shift in null standard deviations.',
        '',
        '| threat model | ε_gdp | GDP μ | AUROC | TPR at FPR 1e-2 | '
        'TPR at FPR 1e-3 |',
        '|---|---|---|---|---|---|',
    ]
    lines += [f'| {name} | {_num(report.epsilon_gdp)} | '
              f'{_num(report.gdp_mu)} | {_num(report.auroc)} | '
              f'{_num(report.tpr_at_fpr["0.01"])} | '
              f'{_num(report.tpr_at_fpr["0.001"])} |'
              for name, report in threats]
    lines += [
        '',
        '| cosine set | count | mean | std | null mean | null std | '
        'Anderson A² |',
        '|---|---|---|---|---|---|---|',
        f'| final model, seen | {final.num_seen} | '
        f'{final.seen_mean:.4g} | {final.seen_std:.4g} | 0 | '
        f'{final.null_std:.4g} | {_num(final.anderson_seen)} |',
    ]
    if all_it is not None:
      lines.append(
          f'| max over rounds, seen vs unseen | {all_it.num_seen} / '
          f'{all_it.num_unseen} | {all_it.seen_mean:.4g} | '
          f'{all_it.seen_std:.4g} | {all_it.null_mean:.4g} | '
          f'{all_it.null_std:.4g} | {_num(all_it.anderson_seen)} / '
          f'{_num(all_it.anderson_unseen)} |')
    decorrelated = self.all_iterates_decorrelated
    if decorrelated is not None:
      lines.append(
          f'| decorrelated matched filter, seen vs unseen | '
          f'{decorrelated.num_seen} / {decorrelated.num_unseen} | '
          f'{decorrelated.seen_mean:.4g} | {decorrelated.seen_std:.4g} | '
          f'{decorrelated.null_mean:.4g} | {decorrelated.null_std:.4g} | '
          f'{_num(decorrelated.anderson_seen)} / '
          f'{_num(decorrelated.anderson_unseen)} |')
    if self.setting:
      lines += ['', '| setting | value |', '|---|---|']
      lines += [f'| {key} | {value} |' for key, value in self.setting.items()]
    return '\n'.join(lines) + '\n'

  def write(self, json_path: str, markdown_path: str) -> None:
    """Writes `to_json` and `to_markdown`, each atomically (`atomic_io`).

    Args:
      json_path: the JSON report's file (report.json of a run).
      markdown_path: the Markdown report's file (report.md of a run).

    Raises:
      OSError: a write failed; that file's old content is untouched.
    """
    atomic_io.write_text(json_path, self.to_json() + '\n')
    atomic_io.write_text(markdown_path, self.to_markdown())


# Per-threat-model fields repeated at the top level of `RunReport.to_dict`.
_REPEATED_KEYS = ('epsilon_est', 'epsilon_est_interval', 'epsilon_est_fitted',
                  'epsilon_lo', 'epsilon_lo_paper', 'epsilon_one_run',
                  'epsilon_one_run_fdp', 'epsilon_gdp', 'gdp_mu', 'auroc',
                  'tpr_at_fpr')
# The same, of fields added later (older report.json files lack them).
_LATER_REPEATED_KEYS = ('epsilon_lo_tight_any', 'epsilon_lo_tight_gdp')
# `RunReport.to_dict`'s own keys -> the fields they hold.
_JSON_KEYS = {
    'noise_multiplier': 'noise_multiplier', 'delta': 'delta',
    'alpha': 'alpha', 'dim': 'dim',
    'canary_presentations': 'canary_presentations',
    'analytical_epsilon': 'analytical_epsilon',
    'analytical_epsilon_mechanism': 'analytical_mechanism',
    'accounted_epsilon': 'accounted_epsilon',
    'accounted_epsilon_mechanism': 'accounted_mechanism',
    'last_iterate_epsilon': 'last_iterate_epsilon',
    'last_iterate_epsilon_mechanism': 'last_iterate_mechanism',
    'accuracy': 'accuracy', 'final': 'final', 'all_iterates': 'all_iterates',
    'setting': 'setting',
}


def _none_as_inf(value: float | None) -> float:
  """Undoes `_finite_or_none` for a reference epsilon that was computed."""
  return math.inf if value is None else value


def _estimate(report: privacy_report.PrivacyReport | None) -> str:
  """A headline estimate's cell, '≥' in front when it is saturated."""
  if report is None:
    return 'n/a'
  return ('≥' if report.epsilon_est_saturated else '') + _num(
      report.epsilon_est)


def _num(value: float | None) -> str:
  """A table cell: 4 significant digits, n/a for None, ∞ for infinity."""
  if value is None:
    return 'n/a'
  return '∞' if math.isinf(value) else f'{value:.4g}'


def build_run_report(*, final_cosines: ArrayLike, dim: int, delta: float,
                     noise_multiplier: float, alpha: float = 0.05,
                     mechanism: mechanisms.Mechanism = mechanisms.Gaussian(),
                     final_unseen_cosines: ArrayLike | None = None,
                     seen_maxima: ArrayLike | None = None,
                     unseen_maxima: ArrayLike | None = None,
                     accuracy: float | None = None,
                     setting: Mapping[str, Any] | None = None,
                     canary_presentations: int = 1,
                     rounds: int | None = None,
                     presentation_counts: ArrayLike | None = None,
                     participation: dp_fedavg.Participation | None = None,
                     round_event: dp_accounting.DpEvent | None = None,
                     clip: float | None = None,
                     cohort: float | None = None,
                     schedule: Sequence[ArrayLike] | None = None,
                     correlated: dp_fedavg.CorrelatedNoise | None = None,
                     decorrelated_scores: tuple[ArrayLike, ArrayLike] | None
                     = None) -> RunReport:
  """The one report builder: both threat models and the mechanism's references.

  Every engine's launcher (`experiments.run_outputs`) and `CanaryAudit`
  build their reports here. The estimates and bounds come from the canary
  scores (`privacy_report`: Algorithm 2 on the final-model cosines,
  Algorithm 3 on the max-over-rounds cosines); the references from the
  run's mechanism (`mechanisms.Mechanism.references`), which alone knows
  its rules.

  Example:

    >>> import numpy as np
    >>> from one_shot_epe.reporting import run_report
    >>> rng = np.random.default_rng(0)
    >>> report = run_report.build_run_report(
    ...     final_cosines=rng.normal(0.02, 0.01, 100), dim=10_000,
    ...     delta=1e-5, noise_multiplier=1.0)
    >>> round(report.analytical_epsilon, 2)
    4.38

  Args:
    final_cosines: The seen canaries' cosines with the final model.
    dim: d, the model's trainable parameters (the null's dimension).
    delta: The delta of every epsilon, in (0, 1).
    noise_multiplier: z, the run's noise multiplier (>= 0).
    alpha: 1 - the confidence of the lower bounds.
    mechanism: The run's DP mechanism (`mechanisms`); default independent
      Gaussian noise.
    final_unseen_cosines: Never-inserted canaries' cosines with the final
      model, for the final-model one-run certificates (None omits them).
    seen_maxima: The seen canaries' max-over-rounds cosines (Algorithm 3).
    unseen_maxima: The unseen canaries' (both or neither).
    accuracy: The final model's accuracy, if known.
    setting: The run's setting, shown in the report; the mechanism's
      entries are added after it.
    canary_presentations: r, how many times each seen canary was inserted;
      the analytical eps is at r.
    rounds: T; with it the report has an accounted eps (a client in every
      round when `participation` is None) and the final-model reference.
    presentation_counts: Each seen canary's presentations, for the
      last-iterate heuristic; default r for every canary.
    participation: The real clients' sampling (its rounds are the run's).
    round_event: One round's DpEvent as the aggregator recorded it; default
      a Gaussian at `noise_multiplier`.
    clip: The fixed clip (distributed DP's calibration needs it).
    cohort: The expected records per round, canaries included (distributed
      DP's calibration).
    schedule: The canary schedule (tree aggregation's references).
    correlated: The strategy's numbers under matrix-factorization noise.
    decorrelated_scores: Under matrix-factorization noise, the seen and
      unseen canaries' decorrelated matched-filter scores
      (`decorrelation.matched_filter_scores`, N(0, 1) never inserted), for a
      second all-iterates report that tests the mechanism itself; None
      omits it. The scores are rescaled by one common factor into [-1, 1],
      which no estimate or bound depends on.

  Returns:
    The `RunReport`.

  Raises:
    ValueError: if only one of `seen_maxima` and `unseen_maxima` is given,
      `decorrelated_scores` come without matrix-factorization noise, or the
      mechanism lacks a fact it needs.
  """
  if (seen_maxima is None) != (unseen_maxima is None):
    raise ValueError('give both seen_maxima and unseen_maxima, or neither.')
  if decorrelated_scores is not None and not isinstance(
      mechanism, mechanisms.MatrixFactorization):
    raise ValueError('decorrelated_scores need matrix-factorization noise.')
  if rounds is None and participation is not None:
    rounds = participation.rounds
  references = mechanism.references(mechanisms.RunFacts(
      noise_multiplier=float(noise_multiplier), delta=delta, dim=dim,
      canary_presentations=canary_presentations, rounds=rounds, clip=clip,
      cohort=cohort, participation=participation,
      presentation_counts=presentation_counts, schedule=schedule,
      round_event=round_event, correlated=correlated))
  final = privacy_report.final_model_report(
      final_cosines, dim, delta, alpha, unseen=final_unseen_cosines)
  all_iterates = None
  if seen_maxima is not None:
    all_iterates = privacy_report.all_iterates_report(seen_maxima,
                                                      unseen_maxima, delta,
                                                      alpha, dim=dim)
  setting = {**(setting or {}), **references.setting}
  if references.all_iterates_note is not None and all_iterates is not None:
    key, note = references.all_iterates_note
    setting[key] = note
  decorrelated = None
  if decorrelated_scores is not None:
    seen, unseen = (np.asarray(x, np.float64) for x in decorrelated_scores)
    scale = max(math.sqrt(dim), float(np.abs(np.concatenate(
        [seen, unseen])).max(initial=0.0)))
    decorrelated = privacy_report.all_iterates_report(
        seen / scale, unseen / scale, delta, alpha, dim=dim)
    setting['all_iterates_decorrelated'] = DECORRELATED_ALL_ITERATES_NOTE
  accounted, heuristic = references.accounted, references.last_iterate
  return RunReport(
      noise_multiplier=references.noise_multiplier, delta=delta, alpha=alpha,
      dim=dim, analytical_epsilon=references.analytical.epsilon, final=final,
      all_iterates=all_iterates, accuracy=accuracy,
      setting=setting, canary_presentations=canary_presentations,
      analytical_mechanism=references.analytical.mechanism,
      accounted_epsilon=None if accounted is None else accounted.epsilon,
      accounted_mechanism=None if accounted is None else accounted.mechanism,
      last_iterate_epsilon=None if heuristic is None else heuristic.epsilon,
      last_iterate_mechanism=None if heuristic is None else heuristic.mechanism,
      all_iterates_decorrelated=decorrelated)
