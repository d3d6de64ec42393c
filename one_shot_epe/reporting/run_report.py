"""The privacy report that ends every training run (Sections 4 and 5).

Bundles, for one DP-FedAvg run with canaries:
* references, each with the mechanism it assumes, from the run's mechanism
  (`mechanisms.Mechanism.references`): the analytical eps of a canary
  presented r times (for Gaussian noise an r-fold Gaussian mechanism, no
  amplification; r = 1 is the paper's Tables 3 and 4), the accounted eps of
  a real client over the whole run under its sampling (dp_accounting), and
  the final-model reference (the last-iterate heuristic of Steinke et al.,
  2025, or under tree or matrix-factorization noise the Gaussian a canary
  meets in the final model);
* the final-model report (Algorithm 2) and the all-iterates report
  (Algorithm 3), `privacy_report.PrivacyReport`: headline estimates that do
  not run away and the paper's fitted ones, lower bounds at 1 - alpha (each
  valid for the mechanisms its family names) and the paper's nominal one,
  attack summaries;
* the run's accuracy and setting;
* where the training framework accounts the run itself (Flower's
  accountant), its epsilon for the same releases, beside the accounted eps
  (given as a number: the core imports no framework).
`build_run_report` builds it from what the run measured
(`design.canary_spec.CanaryOutcome`), what its references rest on
(`accounting.references.RunFacts`) and its mechanism. Written as JSON
(machine-readable; each threat model's fields are `report_fields`' entries)
and Markdown (for people, `run_markdown`), atomically.
"""

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_markdown
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads

__all__ = ['DECORRELATED_ALL_ITERATES_NOTE', 'RunReport', 'build_run_report']

# The decorrelated all-iterates statistic's report row (`decorrelation`).
DECORRELATED_ALL_ITERATES_NOTE = (
    'the rounds\' released sums multiplied by the strategy C (C x + Z: '
    'independent noise rows), then each canary\'s matched filter C 1_R: '
    'N(mu, 1) inserted, N(0, 1) not, the mechanism\'s own test of the canary '
    '(in simulation within a few % of the release\'s eps)')


# A run with both kinds of canaries: the data canaries' reports' keys in
# report.json and their fields' suffixes.
_DATA_REPORTS = {'final_data': 'final_data', 'all_iterates_data': 'all_data'}


def _finite_or_none(value: float | None) -> float | None:
  return None if value is None or math.isinf(value) else value


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Privacy estimates of one run under both threat models.

  analytical_epsilon is the canary's bound at canary_presentations = r
  (math.inf without noise); accounted_epsilon the real clients' bound over
  the whole run; last_iterate_epsilon the canary's final-model reference,
  the last-iterate heuristic or its correlated-noise form (None where the
  run's length or schedule was not given); framework_epsilon the training
  framework's own accountant's eps at delta for the same releases (None
  where it has none), beside accounted_epsilon.
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
  # What the run's training health says (`runtime.training_health`), one
  # sentence each; empty for a healthy run.
  notes: tuple[str, ...] = ()
  framework_epsilon: float | None = None  # math.inf without noise.
  framework_mechanism: str | None = None
  # --canary_kind: what `final` and `all_iterates` measure ('gradient':
  # gradient canaries; 'data': data canaries; 'both': gradient canaries
  # there and the data canaries' reports in `final_data` and
  # `all_iterates_data`).
  canary_kind: str = 'gradient'
  final_data: privacy_report.PrivacyReport | None = None
  all_iterates_data: privacy_report.PrivacyReport | None = None

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; an infinite reference epsilon becomes None.

    Per threat model, every field whose entry is `repeated`
    (`report_fields.FIELDS`: the estimates, bounds and attack summaries) is
    repeated at the top level with the suffix _final or _all (None without
    unseen canaries); a report with the decorrelated all-iterates statistic
    also has 'all_iterates_decorrelated' and the suffix _all_decorrelated.
    'notes' lists the training-health notes; 'framework_epsilon' and
    'framework_epsilon_mechanism' are there only where the framework's
    accountant was given.

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
        'notes': list(self.notes),
        'canary_kind': self.canary_kind,
    }
    if self.framework_mechanism is not None:
      result['framework_epsilon'] = _finite_or_none(self.framework_epsilon)
      result['framework_epsilon_mechanism'] = self.framework_mechanism
    threats = [('final', self.final), ('all', self.all_iterates)]
    if self.all_iterates_decorrelated is not None:
      result['all_iterates_decorrelated'] = (
          self.all_iterates_decorrelated.to_dict())
      threats.append(('all_decorrelated', self.all_iterates_decorrelated))
    for key, suffix, report in (
        ('final_data', 'final_data', self.final_data),
        ('all_iterates_data', 'all_data', self.all_iterates_data)):
      if report is not None:
        result[key] = report.to_dict()
        threats.append((suffix, report))
    for suffix, report in threats:
      fields = None if report is None else report.to_dict()
      for key in _repeated_keys():
        result[f'{key}_{suffix}'] = None if fields is None else fields[key]
    return result

  @classmethod
  def from_dict(cls, fields: Mapping[str, Any]) -> 'RunReport':
    """The report whose `to_dict` (or report.json read back) is `fields`.

    Undoes `to_dict`: the mechanisms' keys get their field names back, the
    top-level copies are dropped, a report written before 'notes' existed
    has none, one without 'framework_epsilon_mechanism' no framework
    epsilon, and a None reference epsilon is infinite
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
    for key, suffix in _DATA_REPORTS.items():
      if key in fields:
        suffixes += (suffix,)
    expected = set(_JSON_KEYS) | {
        f'{key}_{suffix}' for key in _repeated_keys(later=False)
        for suffix in suffixes}
    for optional in ('all_iterates_decorrelated', *_DATA_REPORTS):
      if optional in fields:
        expected.add(optional)
    framework = 'framework_epsilon_mechanism' in fields
    if framework:
      expected |= set(_FRAMEWORK_KEYS)
    # Reports written before these keys existed lack them.
    later = {f'{key}_{suffix}' for key in _repeated_keys(later=True)
             for suffix in suffixes} | {'notes', 'canary_kind'}
    missing = sorted(expected - set(fields))
    unknown = sorted(set(fields) - expected - later)
    if missing or unknown:
      raise ValueError(f'not a run report: missing keys {missing}, unknown '
                       f'keys {unknown}.')
    values = {name: fields[key] for key, name in _JSON_KEYS.items()}
    if framework:
      values.update((name, fields[key])
                    for key, name in _FRAMEWORK_KEYS.items())
    values['analytical_epsilon'] = _none_as_inf(values['analytical_epsilon'])
    for name in ('accounted', 'last_iterate', 'framework'):
      if values.get(f'{name}_mechanism') is not None:
        values[f'{name}_epsilon'] = _none_as_inf(values[f'{name}_epsilon'])
    values['final'] = privacy_report.PrivacyReport.from_dict(fields['final'])
    if fields['all_iterates'] is not None:
      values['all_iterates'] = privacy_report.PrivacyReport.from_dict(
          fields['all_iterates'])
    if 'all_iterates_decorrelated' in fields:
      values['all_iterates_decorrelated'] = (
          privacy_report.PrivacyReport.from_dict(
              fields['all_iterates_decorrelated']))
    for key in _DATA_REPORTS:
      if key in fields:
        values[key] = privacy_report.PrivacyReport.from_dict(fields[key])
    values['setting'] = dict(fields['setting'])
    values['notes'] = tuple(fields.get('notes', ()))
    values['canary_kind'] = fields.get('canary_kind', 'gradient')
    return cls(**values)

  @classmethod
  def read(cls, path: str) -> 'RunReport':
    """The report in the JSON file `path` (a run's report.json).

    Args:
      path: A file `write` wrote.

    Returns:
      The `RunReport` it holds.

    Raises:
      bounded_reads.InputRefused: the file cannot be read, is not a regular
        file, not text or past `bounded_reads.RUN_REPORT`.
      ValueError: if it does not hold a run report (names `path`).
    """
    text = bounded_reads.read_text(path, bounded_reads.RUN_REPORT)
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
    """Quotable sentences, notes, main table, details, references, fits.

    Returns:
      The report as Markdown (`run_markdown.render`), ending with a newline.
    """
    return run_markdown.render(self)

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


def _repeated_keys(later: bool | None = None) -> list[str]:
  """Per-threat-model fields repeated at the top level of `RunReport.to_dict`.

  `later`: only those added after reports were first written (True: older
  report.json files lack them), only the others (False), or all (None).
  """
  return [field.key for field in report_fields.FIELDS if field.repeated and (
      later is None or
      later == (field.old_default is not report_fields.REQUIRED))]


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
# The framework's own accountant's keys (only in reports that have it).
_FRAMEWORK_KEYS = {'framework_epsilon': 'framework_epsilon',
                   'framework_epsilon_mechanism': 'framework_mechanism'}


def _none_as_inf(value: float | None) -> float:
  """Undoes `_finite_or_none` for a reference epsilon that was computed."""
  return math.inf if value is None else value


def _present(scores: np.ndarray | None) -> np.ndarray | None:
  """An outcome's scores, None where they were omitted (empty)."""
  return None if scores is None or not scores.size else scores


def build_run_report(outcome: canary_spec.CanaryOutcome,
                     facts: references.RunFacts,
                     mechanism: mechanisms.Mechanism, *, alpha: float = 0.05,
                     setting: Mapping[str, Any] | None = None,
                     seed: int = 0, notes: Sequence[str] = (),
                     framework_epsilon: dp_fedavg.MechanismEpsilon | None = None,
                     canary_kind: str = 'gradient') -> RunReport:
  """The one report builder: both threat models and the mechanism's references.

  Every engine's launcher (`experiments.run_outputs`), both `CanaryAudit`s
  and the CANIFE comparison build their reports here. The estimates and
  bounds come from the canary scores (`privacy_report`: Algorithm 2 on the
  final-model cosines, Algorithm 3 on the max-over-rounds cosines); the
  references from the run's mechanism (`mechanisms.Mechanism.references`),
  which alone knows its rules.

  Example:

    >>> import numpy as np
    >>> from one_shot_epe.accounting import mechanisms
    >>> from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
    >>> from one_shot_epe.reporting import run_report
    >>> rng = np.random.default_rng(0)
    >>> empty = np.zeros(0)
    >>> outcome = canary_spec.CanaryOutcome(
    ...     final_cosines=rng.normal(0.02, 0.01, 100),
    ...     final_unseen_cosines=empty, seen_maxima=empty,
    ...     unseen_maxima=empty, accuracy=float('nan'), dim=10_000,
    ...     resumed_from_round=0, rounds_trained=0)
    >>> facts = references.RunFacts(noise_multiplier=1.0, delta=1e-5,
    ...                             dim=10_000)
    >>> report = run_report.build_run_report(outcome, facts,
    ...                                      mechanisms.Gaussian())
    >>> round(report.analytical_epsilon, 2)
    4.38

  Args:
    outcome: What the run measured: the seen canaries' final cosines, the
      unseen canaries' (empty: omitted, no final-model one-run bounds), the
      seen and unseen max-over-rounds cosines (unseen empty: no all-iterates
      report), the accuracy (NaN: unknown), d and, under
      matrix-factorization noise, the decorrelated matched-filter scores
      (`decorrelation.matched_filter_scores`, N(0, 1) never inserted) for a
      second all-iterates report that tests the mechanism itself (None or
      empty: omitted; rescaled by one common factor into [-1, 1], which no
      estimate or bound depends on).
    facts: What the references rest on (z, delta, d, r, the rounds, the
      clip, cohort, sampling, schedule, one round's DpEvent, the strategy's
      numbers); a `participation` gives the rounds when `rounds` is None.
    mechanism: The run's DP mechanism (`mechanisms`).
    alpha: 1 - the confidence of the lower bounds.
    setting: The run's setting, shown in the report; the mechanism's
      entries are added after it.
    seed: Seeds the bootstrap intervals.
    notes: What the run's training health says
      (`runtime.training_health.TrainingHealth.notes`), shown in report.md
      and kept in report.json's 'notes'.
    framework_epsilon: The training framework's own accountant's epsilon at
      `facts.delta` for the same releases (e.g. Flower's RdpAccountant, as
      the Flower audit computes it), with what it accounts; None: none.
    canary_kind: The run's canaries (`design.canary_kinds`): 'gradient',
      'data' (the report's threat models are the data canaries', from the
      outcome's losses and, where measured, loss drops) or 'both' (the
      data canaries' reports as `final_data` and `all_iterates_data`).

  Returns:
    The `RunReport`.

  Raises:
    ValueError: if the outcome's d is not the facts', decorrelated scores
      come without matrix-factorization noise, or the mechanism lacks a
      fact it needs.
  """
  if outcome.dim != facts.dim:
    raise ValueError(f'the outcome\'s d = {outcome.dim} is not the facts\' '
                     f'{facts.dim}.')
  decorrelated_seen = _present(outcome.decorrelated_seen)
  decorrelated_unseen = _present(outcome.decorrelated_unseen)
  decorrelated_scores = (None if decorrelated_seen is None or
                         decorrelated_unseen is None else
                         (decorrelated_seen, decorrelated_unseen))
  if decorrelated_scores is not None and not isinstance(
      mechanism, mechanisms.MatrixFactorization):
    raise ValueError('decorrelated scores need matrix-factorization noise.')
  facts = dataclasses.replace(
      facts, noise_multiplier=float(facts.noise_multiplier),
      rounds=(facts.participation.rounds if facts.rounds is None and
              facts.participation is not None else facts.rounds))
  dim, delta = facts.dim, facts.delta
  references = mechanism.references(facts)
  kinds = [kind.name for kind in canary_kinds.kinds_of(canary_kind)]
  final_data = all_iterates_data = None
  if 'data' in kinds:
    if outcome.data_seen_losses is None or outcome.data_unseen_losses is None:
      raise ValueError(f'canary_kind {canary_kind!r} needs the data '
                       "canaries' losses in the outcome.")
    final_data = privacy_report.data_canary_report(
        outcome.data_seen_losses, outcome.data_unseen_losses, delta, alpha,
        dim=dim, seed=seed)
    if outcome.data_seen_drops is not None and (
        outcome.data_unseen_drops is not None):
      all_iterates_data = privacy_report.data_canary_all_iterates_report(
          outcome.data_seen_drops, outcome.data_unseen_drops, delta, alpha,
          dim=dim, seed=seed)
  all_iterates = None
  if 'gradient' in kinds:
    final = privacy_report.final_model_report(
        outcome.final_cosines, dim, delta, alpha,
        unseen=_present(outcome.final_unseen_cosines), seed=seed)
    if _present(outcome.unseen_maxima) is not None:
      all_iterates = privacy_report.all_iterates_report(
          outcome.seen_maxima, outcome.unseen_maxima, delta, alpha, dim=dim,
          seed=seed)
  else:
    final, all_iterates = final_data, all_iterates_data
    final_data = all_iterates_data = None
  setting = {**(setting or {}), **references.setting}
  if (references.all_iterates_note is not None and all_iterates is not None
      and 'gradient' in kinds):
    key, note = references.all_iterates_note
    setting[key] = note
  decorrelated = None
  if decorrelated_scores is not None:
    seen, unseen = (np.asarray(x, np.float64) for x in decorrelated_scores)
    scale = max(math.sqrt(dim), float(np.abs(np.concatenate(
        [seen, unseen])).max(initial=0.0)))
    decorrelated = privacy_report.all_iterates_report(
        seen / scale, unseen / scale, delta, alpha, dim=dim, seed=seed)
    setting['all_iterates_decorrelated'] = DECORRELATED_ALL_ITERATES_NOTE
  accounted, heuristic = references.accounted, references.last_iterate
  accuracy = None if math.isnan(outcome.accuracy) else outcome.accuracy
  return RunReport(
      noise_multiplier=references.noise_multiplier, delta=delta, alpha=alpha,
      dim=dim, analytical_epsilon=references.analytical.epsilon, final=final,
      all_iterates=all_iterates, accuracy=accuracy,
      setting=setting, canary_presentations=facts.canary_presentations,
      analytical_mechanism=references.analytical.mechanism,
      accounted_epsilon=None if accounted is None else accounted.epsilon,
      accounted_mechanism=None if accounted is None else accounted.mechanism,
      last_iterate_epsilon=None if heuristic is None else heuristic.epsilon,
      last_iterate_mechanism=None if heuristic is None else heuristic.mechanism,
      all_iterates_decorrelated=decorrelated, notes=tuple(notes),
      framework_epsilon=(None if framework_epsilon is None else
                         framework_epsilon.epsilon),
      framework_mechanism=(None if framework_epsilon is None else
                           framework_epsilon.mechanism),
      canary_kind=canary_kind, final_data=final_data,
      all_iterates_data=all_iterates_data)
