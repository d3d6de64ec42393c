"""report.md: a run's privacy report for people (`run_report.RunReport`).

It opens with a line naming the run's canaries and what each measured
(`canaries_line`), then a sentence a reader can quote per threat model
(`headline_sentences`: the canaries compared, this run's lower bound that
holds whatever the mechanism at the run's δ, ε_est with its bootstrap
interval or, saturated, the most its canaries can show, the analytical ε),
then a sentence per threat model where a bound that holds only for a
Gaussian mechanism exceeds every bound that holds whatever it is
(`assumption_notes`), one where a lower bound exceeds the estimate
(`bound_note`) and the run's training-health notes; then the main table
(the sentence's columns, `report_fields.HEADLINE`, and the accuracy), the
table of every other estimate and bound with what each assumes
(`details_table`), why a statistic is n/a where its entry says
(`missing_notes`), when each bound holds (`bounds_sentences`), the
references with the mechanism each assumes (the training framework's own
accounted ε beside the project's), the attack's summaries, the cosine sets'
fits and the run's setting. Every column, and every sentence on the
bounds, is read from the report fields' entries and their families
(`report_fields`): a bound is said to hold exactly where its family does.
"""

from collections.abc import Sequence
from typing import Any

from one_shot_epe.design import canary_kinds
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields

__all__ = ['BOUND_ABOVE_ESTIMATE_REASON', 'assumption_cell',
           'assumption_notes', 'bound_fields', 'bound_note',
           'bounds_above_estimate', 'bounds_sentences', 'canaries_line',
           'details_table',
           'headline_sentences', 'missing_notes', 'render', 'threat_models',
           'threat_sentence', 'threat_table']

_num = report_fields.number_cell
# Why a lower bound can exceed the estimate (`bound_note`).
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


def threat_models(
    report: Any) -> list[tuple[str, privacy_report.PrivacyReport]]:
  """The report's threat models, (row name, report), final model first.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    ('final model', ...), then 'all iterates' and 'all iterates,
    decorrelated' where the run has them; data canaries' rows say so.
  """
  data = ', data canaries' if report.canary_kind == 'data' else ''
  return [(name, threat) for name, threat in (
      ('final model' + data, report.final),
      ('all iterates' + data, report.all_iterates),
      ('all iterates, decorrelated', report.all_iterates_decorrelated),
      ('final model, data canaries', report.final_data),
      ('all iterates, data canaries', report.all_iterates_data))
          if threat is not None]


def canaries_line(report: Any) -> str:
  """report.md's first line: which canaries measured what.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    E.g. 'Canaries: gradient (random unit directions ..., inserted ...,
    scored by ...) measure the final model and all iterates.'
  """
  names = {'final': 'the final model', 'all': 'all iterates'}
  parts = []
  for kind in canary_kinds.kinds_of(report.canary_kind):
    # Under 'both' the data canaries' reports are the *_data ones.
    data_beside = kind.name == 'data' and report.canary_kind == 'both'
    reports = {'final': report.final_data if data_beside else report.final,
               'all': (report.all_iterates_data if data_beside else
                       report.all_iterates)}
    measured = ' and '.join(names[model] for model in kind.threat_models
                            if reports[model] is not None)
    unmeasured = ''.join(
        f' ({names[model]}: not measured in this run: no unseen canaries, '
        "or the rounds' models were not scored)"
        for model in kind.threat_models if reports[model] is None)
    parts.append(f'{kind.name} canaries ({kind.made}; {kind.inserted}; '
                 f'scored by {kind.scored}) measure {measured}{unmeasured}')
  return '**Canaries:** ' + '; '.join(parts) + '.'


def _canaries(threat: privacy_report.PrivacyReport) -> str:
  """Which canaries a threat model's statistics compare."""
  if threat.canary_kind == 'data':
    score = ("the final model's loss" if threat.threat_model == 'final' else
             'the largest excess one-round loss drop')
    return (f'k = {threat.num_seen} seen against m = {threat.num_unseen} '
            f'unseen data canaries, {score}')
  if threat.threat_model == 'final':
    return f'k = {threat.num_seen} seen canaries against the exact null'
  return (f'k = {threat.num_seen} seen against m = {threat.num_unseen} '
          'unseen canaries')


def threat_sentence(name: str, threat: privacy_report.PrivacyReport,
                    analytical_epsilon: float | None = None) -> str:
  """The sentence a reader can quote about one threat model of one run.

  E.g. 'Final model (k = 50 seen canaries against the exact null): with
  95% confidence this run's mechanism has ε ≥ 0.6859 at δ = 0.00041
  (ε_lo, which holds whatever the mechanism); the estimate ε_est is 3.437
  (95% bootstrap interval of the estimate 2.433–4.549); analytical ε
  24.68.' A
  saturated estimate opens the sentence instead: 'All iterates (k = 50
  seen against m = 50 unseen canaries): these canaries cannot support an
  estimate: ε_est is at least 28.52, the most 50 + 50 canaries can show at
  this δ; with 95% confidence ...'. The bound is `report_fields.HEADLINE`'s,
  named with when it holds (its `Family`); the numbers are shown as the
  tables show them (`report_fields.number_cell`).

  Args:
    name: The threat model's name, e.g. 'Final model'.
    threat: Its report.
    analytical_epsilon: The run's analytical ε, None to leave it out.

  Returns:
    The sentence.
  """
  estimate, interval, bound = (report_fields.by_key(key)
                               for key in report_fields.HEADLINE)
  value = _num(getattr(threat, bound.key))
  claim = (f'with {1 - threat.alpha:.0%} confidence '
           f"this run's mechanism has ε ≥ {value} at "
           f'δ = {threat.delta:.3g} ({bound.label}, which holds '
           f'{bound.assumes.holds})')
  est = _num(getattr(threat, estimate.key))
  if threat.epsilon_est_saturated:
    parts = [f'these canaries cannot support an estimate: {estimate.label} '
             f'is at least {est}, the most {threat.num_seen} + '
             f'{threat.num_unseen} canaries can show at this δ', claim]
  else:
    low, high = getattr(threat, interval.key)
    parts = [claim, f'the estimate {estimate.label} is {est} ('
             f'{interval.label} {_num(low)}–{_num(high)})']
  if analytical_epsilon is not None:
    parts.append(f'analytical ε {_num(analytical_epsilon)}')
  return f'{name} ({_canaries(threat)}): ' + '; '.join(parts) + '.'


def headline_sentences(report: Any) -> list[str]:
  """The sentences a reader can quote, one per threat model (`threat_sentence`).

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The sentences, final model first, then all iterates where the run has
    them.
  """
  return [threat_sentence(name, threat, report.analytical_epsilon)
          for name, threat in (('Final model', report.final),
                               ('All iterates', report.all_iterates),
                               ('Final model', report.final_data),
                               ('All iterates', report.all_iterates_data))
          if threat is not None]


def bound_fields(
    family: report_fields.Family) -> list[report_fields.ReportField]:
  """The report's lower bounds of one family, in the tables' order.

  Args:
    family: One of `report_fields.FAMILIES` whose `bound` is set.

  Returns:
    The 'lower bounds' entries that assume `family`.
  """
  return [field for field in report_fields.in_groups('lower bounds')
          if field.assumes == family]


def bounds_sentences(confidence: str) -> list[str]:
  """When each of the report's lower bounds holds, a sentence per family.

  E.g. 'ε_lo (...), ε_one-run (Steinke et al., 2023) and ε_tight-any (...)
  hold at 95% whatever the mechanism.' and 'ε_one-run-fdp (...), ... hold
  at 95% only if the mechanism is Gaussian in the canary's direction: ...'.
  Read from the entries' families (`report_fields.FAMILIES`), so a bound is
  said to hold exactly where its family does.

  Args:
    confidence: The bounds' confidence, e.g. '95%'.

  Returns:
    The sentences, in `report_fields.FAMILIES`' order.
  """
  sentences = []
  for family in report_fields.FAMILIES:
    fields = bound_fields(family) if family.bound else []
    if not fields:
      continue
    listed, verb = _listed(
        [f'{field.label} ({field.source})' if field.source else field.label
         for field in fields], 'holds', 'hold')
    caveat = f': {family.caveat}' if family.caveat else ''
    sentences.append(f'{listed} {verb} at {confidence} {family.holds}'
                     f'{caveat}.')
  return sentences


def _listed(items: Sequence[str], singular: str,
            plural: str) -> tuple[str, str]:
  """'a', 'a and b' or 'a, b and c', with the verb that agrees with it."""
  if len(items) == 1:
    return items[0], singular
  return ', '.join(items[:-1]) + ' and ' + items[-1], plural


def assumption_notes(
    threats: Sequence[tuple[str, privacy_report.PrivacyReport]]) -> list[str]:
  """Where a bound with an assumption exceeds every bound without one.

  Per threat model, the bounds of a family with an assumption (the
  Gaussian one) above the largest bound that holds whatever the mechanism:
  only that assumption carries the difference.

  Args:
    threats: (name, that threat model's report), e.g. `threat_models`'.

  Returns:
    A sentence per threat model where it happens, in the order given.
  """
  unconditional = [field for family in report_fields.FAMILIES
                   if family.bound and not family.assumption
                   for field in bound_fields(family)]
  notes = []
  for name, threat in threats:
    known = [(getattr(threat, field.key), field.label)
             for field in unconditional
             if getattr(threat, field.key) is not None]
    if not known:
      continue
    best, best_label = max(known)
    for family in report_fields.FAMILIES:
      if not (family.bound and family.assumption):
        continue
      above = [f'{field.label} {_num(getattr(threat, field.key))}'
               for field in bound_fields(family)
               if getattr(threat, field.key) is not None and
               getattr(threat, field.key) > best]
      if not above:
        continue
      listed, verb = _listed(above, 'exceeds', 'exceed')
      notes.append(
          f'{_capitalized(name)}: {listed} {verb} {best_label} {_num(best)}, '
          'the largest bound that holds whatever the mechanism; only the '
          f'assumption that {family.assumption} carries the difference.')
  return notes


def _capitalized(text: str) -> str:
  return text[:1].upper() + text[1:]


def bounds_above_estimate(
    report: Any) -> list[tuple[str, str, float, float, str]]:
  """The lower bounds that exceed their threat model's ε_est.

  A saturated ε_est (the most its canaries can show, '≥') is no estimate
  to be exceeded: its threat model is skipped.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    (threat model, bound's label, bound, ε_est, the condition under which
    the bound holds, '' for none) for each such bound, in the order of
    `threat_models` and `report_fields.in_groups('lower bounds')`.
  """
  found = []
  for name, threat in threat_models(report):
    if threat.epsilon_est_saturated:
      continue
    for field in report_fields.in_groups('lower bounds'):
      value = getattr(threat, field.key)
      if value is not None and value > threat.epsilon_est:
        found.append((name, field.label, value, threat.epsilon_est,
                      field.assumes.condition))
  return found


def bound_note(report: Any) -> str | None:
  """Why a lower bound exceeds the estimate, in one sentence.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The sentence, naming each such bound and the condition under which it
    holds, if any; None where no bound exceeds its threat model's ε_est
    (`bounds_above_estimate`).
  """
  found = bounds_above_estimate(report)
  if not found:
    return None
  cases = '; '.join(
      f'{name}: {label} {_num(bound)} > ε_est {_num(estimate)}' +
      (f', a bound {condition}' if condition else '')
      for name, label, bound, estimate, condition in found)
  return (f'A lower bound exceeds the estimate ({cases}) because '
          f'{BOUND_ABOVE_ESTIMATE_REASON}.')


def assumption_cell(field: report_fields.ReportField, confidence: str) -> str:
  """What a field assumes, as the tables of details say it.

  Args:
    field: The entry.
    confidence: The bounds' confidence, e.g. '95%'.

  Returns:
    For a bound, '95% lower bound' and when it holds; else its family's
    text.
  """
  if field.assumes.bound:
    return f'{confidence} lower bound, {field.assumes.holds}'
  return field.assumes.text


def missing_notes(
    threats: Sequence[tuple[str, privacy_report.PrivacyReport]]) -> list[str]:
  """Why a statistic shows n/a, where its entry says (`ReportField.missing`).

  Args:
    threats: (name, that threat model's report).

  Returns:
    'n/a: <labels>, <threat model>: <reason>.' per threat model and reason
    (the statistics that share a reason listed together).
  """
  reasons: dict[tuple[str, str], list[str]] = {}
  for field in report_fields.FIELDS:
    for name, threat in threats:
      if getattr(threat, field.key) is None:
        reason = field.why_missing(threat)
        if reason:
          reasons.setdefault((name, reason), []).append(field.label)
  return [f'n/a: {", ".join(labels)}, {name}: {reason}.'
          for (name, reason), labels in reasons.items()]


def details_table(threats: Sequence[tuple[str, privacy_report.PrivacyReport]],
                  confidence: str = '95%') -> list[str]:
  """Every estimate and bound but the headline ones, with what each assumes.

  A row per column of `report_fields.details` of the estimate, bound and
  nominal groups, a column per threat model, and what the field assumes
  (`assumption_cell`: for a bound, when it holds), stated once.

  Args:
    threats: (column name, that threat model's report), in column order.
    confidence: The bounds' confidence, e.g. '95%'.

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
                   f' | {assumption_cell(field, confidence)} |')
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
            for name, threat in threat_models(report)]
  return lines


def render(report: Any) -> str:
  """The quotable sentences, notes, main table, details, references, fits.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The report as Markdown, ending with a newline.
  """
  confidence = f'{1 - report.alpha:.0%}'
  threats = threat_models(report)
  headline_bound = report_fields.by_key(report_fields.HEADLINE[-1])
  lines = [canaries_line(report), '']
  for sentence in headline_sentences(report):
    lines += [sentence, '']
  for note in assumption_notes(threats):
    lines += [note, '']
  note = bound_note(report)
  if note is not None:
    lines += [note, '']
  for health in report.notes:
    lines += [f'**Training health:** {health}', '']
  lines += [
      *_main_table(report),
      '',
      f'z = {report.noise_multiplier:g}, d = {report.dim}, '
      f'δ = {report.delta:.3g}. {headline_bound.label} is a {confidence} '
      f'lower bound that holds {headline_bound.assumes.holds}; ε_est is an '
      'estimate, not a bound (≥: the most the canaries can show).',
      '',
      '**Other estimates and bounds**, with what each assumes:',
      '',
      *details_table(threats, confidence),
      '',
      *[line for note in missing_notes(threats) for line in (note, '')],
      ' '.join(bounds_sentences(confidence)) + ' The paper\'s ε_lo (Sec. '
      '5.1) chooses its threshold on the data it tests and is nominal only; '
      'its ε_est (Sec. 3.2) fits both variances and runs high when they '
      'differ.',
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
  data = report.canary_kind == 'data'
  lines = [
      '| cosine set | count | mean | std | null mean | null std | '
      'Anderson A² |',
      '|---|---|---|---|---|---|---|',
  ]
  if final.canary_kind == 'gradient':
    lines.append(
        f'| final model, seen | {final.num_seen} | '
        f'{final.seen_mean:.4g} | {final.seen_std:.4g} | 0 | '
        f'{final.null_std:.4g} | {_num(final.anderson_seen)} |')
  for name, threat in (
      ('final model loss score, data canaries, seen vs unseen',
       final if data else report.final_data),
      ('max over rounds, seen vs unseen', None if data else all_it),
      ('largest excess one-round loss drop, data canaries, seen vs unseen',
       all_it if data else report.all_iterates_data),
      ('decorrelated matched filter, seen vs unseen',
       report.all_iterates_decorrelated)):
    if threat is not None:
      lines.append(
          f'| {name} | {threat.num_seen} / {threat.num_unseen} | '
          f'{threat.seen_mean:.4g} | {threat.seen_std:.4g} | '
          f'{threat.null_mean:.4g} | {threat.null_std:.4g} | '
          f'{_num(threat.anderson_seen)} / {_num(threat.anderson_unseen)} |')
  return lines
