"""report.md: a run's privacy report for people (`run_report.RunReport`).

It opens with a sentence a reader can quote per threat model
(`headline_sentences`: ε_est with its interval, the lower bound that holds
for any mechanism, the analytical ε), then one sentence where a lower bound
that holds exceeds the estimate (`bound_note`) and the run's training-health
notes; then the main table (the sentence's columns, `report_fields.HEADLINE`,
and the accuracy), the table of every other estimate and bound with what
each assumes (`details_table`), the references with the mechanism each
assumes (the training framework's own accounted ε beside the project's),
the attack's summaries, the cosine sets' fits and the run's setting. Every
column is a report field's entry (`report_fields`).
"""

from collections.abc import Sequence
from typing import Any

from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields

__all__ = ['BOUND_ABOVE_ESTIMATE_REASON', 'bound_note', 'bounds_above_estimate',
           'details_table', 'headline_sentences', 'render', 'threat_table']

_num = report_fields.number_cell
# Why a lower bound that holds can exceed the estimate (`bound_note`).
BOUND_ABOVE_ESTIMATE_REASON = (
    'a lower bound speaks of the most exposed canaries, while ε_est fits one '
    "Gaussian to all the canaries' scores and so averages their exposure "
    '(under adaptive clipping, for one, the canaries enter at different '
    'clips)')


def threat_table(groups: Sequence[str],
                 threats: Sequence[tuple[str, privacy_report.PrivacyReport]]
                 ) -> list[str]:
  """A table with a row per threat model and a column per field of `groups`.

  Args:
    groups: Names of `report_fields.GROUPS`; their fields' columns, in the
      order `report_fields.in_groups` gives.
    threats: (row name, that threat model's report), in row order.

  Returns:
    The table's lines: header, separator, one row per threat model.
  """
  columns = [column for field in report_fields.in_groups(*groups)
             for column in field.columns()]
  lines = ['| threat model | ' + ' | '.join(
      column.header() for column in columns) + ' |',
           '|---|' + '---|' * len(columns)]
  lines += [f'| {name} | ' + ' | '.join(
      column.cell(report) for column in columns) + ' |'
            for name, report in threats]
  return lines


def _threats(report: Any) -> list[tuple[str, privacy_report.PrivacyReport]]:
  """The report's threat models, (row name, report), final model first."""
  return [(name, threat) for name, threat in (
      ('final model', report.final), ('all iterates', report.all_iterates),
      ('all iterates, decorrelated', report.all_iterates_decorrelated))
          if threat is not None]


def headline_sentences(report: Any) -> list[str]:
  """The sentences a reader can quote, one per threat model.

  E.g. 'Final model: ε_est 19.8 (95% CI 16.44–23.33); with 95% confidence
  ε ≥ 15.41 for any (ε, δ)-DP mechanism; analytical ε 278.6.', then the
  same for all iterates where the run has them. The numbers are the
  `report_fields.HEADLINE` fields' and the analytical ε, as the tables show
  them (`report_fields.number_cell`; '≥' before a saturated estimate).

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The sentences, final model first.
  """
  confidence = f'{1 - report.alpha:.0%}'
  bound = report_fields.by_key('epsilon_lo')
  sentences = []
  for name, threat in (('Final model', report.final),
                       ('All iterates', report.all_iterates)):
    if threat is None:
      continue
    estimate = ('≥ ' if threat.epsilon_est_saturated else '') + _num(
        threat.epsilon_est)
    low, high = threat.epsilon_est_interval
    sentences.append(
        f'{name}: ε_est {estimate} (95% CI {_num(low)}–{_num(high)}); with '
        f'{confidence} confidence ε ≥ {_num(threat.epsilon_lo)} for '
        f'{bound.assumes.text}; analytical ε '
        f'{_num(report.analytical_epsilon)}.')
  return sentences


def bounds_above_estimate(report: Any) -> list[tuple[str, str, float, float]]:
  """The lower bounds that hold and exceed their threat model's ε_est.

  A saturated ε_est (the most its canaries can show, '≥') is no estimate
  to be exceeded: its threat model is skipped.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    (threat model, bound's label, bound, ε_est) for each such bound, in the
    order of `_threats` and `report_fields.in_groups('lower bounds')`.
  """
  found = []
  for name, threat in _threats(report):
    if threat.epsilon_est_saturated:
      continue
    for field in report_fields.in_groups('lower bounds'):
      value = getattr(threat, field.key)
      if value is not None and value > threat.epsilon_est:
        found.append((name, field.label, value, threat.epsilon_est))
  return found


def bound_note(report: Any) -> str | None:
  """Why a lower bound that holds exceeds the estimate, in one sentence.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The sentence, naming each such bound; None where no bound exceeds its
    threat model's ε_est (`bounds_above_estimate`).
  """
  found = bounds_above_estimate(report)
  if not found:
    return None
  cases = '; '.join(f'{name}: {label} {_num(bound)} > ε_est {_num(estimate)}'
                    for name, label, bound, estimate in found)
  return (f'A lower bound that holds exceeds the estimate ({cases}) because '
          f'{BOUND_ABOVE_ESTIMATE_REASON}.')


def details_table(
    threats: Sequence[tuple[str, privacy_report.PrivacyReport]]) -> list[str]:
  """Every estimate and bound but the headline ones, with what each assumes.

  A row per column of `report_fields.details` of the estimate, bound and
  nominal groups, a column per threat model, and the field's assumption
  (its `Family`'s text), stated once.

  Args:
    threats: (column name, that threat model's report), in column order.

  Returns:
    The table's lines: header, separator, one row per statistic.
  """
  names = [name for name, _ in threats]
  lines = ['| statistic | ' + ' | '.join(names) + ' | what it assumes |',
           '|---|' + '---|' * (len(names) + 1)]
  for field in report_fields.details('estimates', 'lower bounds', 'nominal'):
    for column in field.columns():
      lines.append(f'| {column.label} | ' + ' | '.join(
          column.cell(threat) for _, threat in threats) +
                   f' | {field.assumes.text} |')
  return lines


def _main_table(report: Any) -> list[str]:
  """The sentence's columns, a row per threat model, and the accuracy."""
  columns = [column for key in report_fields.HEADLINE
             for column in report_fields.by_key(key).columns()]
  lines = ['| threat model | ' + ' | '.join(
      column.header() for column in columns) + ' | analytical ε | accuracy |',
           '|---|' + '---|' * (len(columns) + 2)]
  lines += [f'| {name} | ' + ' | '.join(
      column.cell(threat) for column in columns) +
            f' | {_num(report.analytical_epsilon)} | {_num(report.accuracy)} |'
            for name, threat in _threats(report)]
  return lines


def render(report: Any) -> str:
  """The quotable sentences, notes, main table, details, references, fits.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The report as Markdown, ending with a newline.
  """
  confidence = f'{1 - report.alpha:.0%}'
  threats = _threats(report)
  lines = []
  for sentence in headline_sentences(report):
    lines += [sentence, '']
  note = bound_note(report)
  if note is not None:
    lines += [note, '']
  for health in report.notes:
    lines += [f'**Training health:** {health}', '']
  lines += [
      *_main_table(report),
      '',
      f'z = {report.noise_multiplier:g}, d = {report.dim}, '
      f'δ = {report.delta:.3g}. ε_lo is a {confidence} lower bound; ε_est '
      'is an estimate, not a bound (≥: the most the canaries can show).',
      '',
      '**Other estimates and bounds**, with what each assumes:',
      '',
      *details_table(threats),
      '',
      f'At {confidence}, ε_lo (Clopper-Pearson, Bonferroni over a fixed '
      'family of thresholds), ε_one-run (Steinke et al., 2023), '
      'ε_one-run-fdp (Mahloujifar et al., 2024) and ε_tight-any, '
      'ε_tight-gdp (Xiang et al., 2025: the final model against the exact '
      'null, all iterates by their game) hold. The paper\'s ε_lo (Sec. 5.1) '
      'chooses its threshold on the data it tests and is nominal only; its '
      'ε_est (Sec. 3.2) fits both variances and runs high when they differ.',
      '',
      '**References.**',
      '',
      '| reference | ε | mechanism it assumes |',
      '|---|---|---|',
      f'| analytical ε (canary, r = {report.canary_presentations}) | '
      f'{_num(report.analytical_epsilon)} | {report.analytical_mechanism} |',
  ]
  if report.accounted_mechanism is not None:
    lines.append(f'| accounted ε (real client) | '
                 f'{_num(report.accounted_epsilon)} | '
                 f'{report.accounted_mechanism} |')
  if report.framework_mechanism is not None:
    lines.append(f'| framework\'s own accounted ε (real client) | '
                 f'{_num(report.framework_epsilon)} | '
                 f'{report.framework_mechanism} |')
  if report.last_iterate_mechanism is not None:
    lines.append(f'| last-iterate heuristic ε (canary, final model) | '
                 f'{_num(report.last_iterate_epsilon)} | '
                 f'{report.last_iterate_mechanism} |')
  lines += [
      '',
      '**The attack.** ε_gdp: Gaussian DP at the seen statistics\' mean '
      'shift in null standard deviations.',
      '',
      *threat_table(['attack'], threats),
      '',
      *_fit_table(report),
  ]
  if report.setting:
    lines += ['', '| setting | value |', '|---|---|']
    lines += [f'| {key} | {value} |' for key, value in report.setting.items()]
  return '\n'.join(lines) + '\n'


def _fit_table(report: Any) -> list[str]:
  """Each cosine set's count, mean, std, its null's and Anderson's A²."""
  final, all_it = report.final, report.all_iterates
  lines = [
      '| cosine set | count | mean | std | null mean | null std | '
      'Anderson A² |',
      '|---|---|---|---|---|---|---|',
      f'| final model, seen | {final.num_seen} | '
      f'{final.seen_mean:.4g} | {final.seen_std:.4g} | 0 | '
      f'{final.null_std:.4g} | {_num(final.anderson_seen)} |',
  ]
  for name, threat in (
      ('max over rounds, seen vs unseen', all_it),
      ('decorrelated matched filter, seen vs unseen',
       report.all_iterates_decorrelated)):
    if threat is not None:
      lines.append(
          f'| {name} | {threat.num_seen} / {threat.num_unseen} | '
          f'{threat.seen_mean:.4g} | {threat.seen_std:.4g} | '
          f'{threat.null_mean:.4g} | {threat.null_std:.4g} | '
          f'{_num(threat.anderson_seen)} / {_num(threat.anderson_unseen)} |')
  return lines
