"""The grid's tables, from its runs' typed reports (Section 5, Tables 3-6).

`privacy_table` (table.md: each run's quotable sentences, then per
repetition count the main table of the sentences' columns and accuracy, the
table of every other estimate and bound, the paper's nominal Table 3/4
columns among them, and the attack's summaries, with what each assumes),
`summary_table` (the terminal's, at most 100 columns), `anderson_table`
(Table 6) and `accuracy_table` (accuracy with and without canaries). Each
cell comes from a run's `run_report.RunReport`; the bound columns (and the
summary's) are the report fields' entries (`report_fields`), so a new bound
appears here by its entry alone; the sentences are report.md's
(`run_markdown`). Framework-free.
"""

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from experiments import grid
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_markdown
from one_shot_epe.reporting import run_report

__all__ = ['accuracy_table', 'anderson_table', 'privacy_table',
           'summary_table']

_MODELS = ('final', 'all')
# The summary table's names of the threat models.
_SHORT_MODELS = {'all': 'all', 'final': 'fin'}


def accuracy_table(runs: Sequence[grid.GridRun],
                   without_canaries: Mapping[float, float]) -> str:
  """Final accuracy with and without canaries (the earlier version's table).

  One row per noise multiplier, one column per repetition count; the last
  column is the largest |accuracy change| over them, in percentage points.

  Args:
    runs: The grid's runs with canaries.
    without_canaries: Noise multiplier -> final accuracy of its run without
      canaries.

  Returns:
    The Markdown of accuracy.md.
  """
  by_point = {(run.noise_multiplier, run.canary_repeats): run for run in runs}
  repetitions = sorted({run.canary_repeats for run in runs})
  num_canaries = runs[0].report.final.num_seen
  lines = ['| noise | without canaries | ' + ' | '.join(
      f'with {num_canaries} canaries, {repeats} rep.'
      for repeats in repetitions) + ' | max change (points) |',
           '|---|---|' + '---|' * len(repetitions) + '---|']
  for noise, baseline in without_canaries.items():
    with_canaries = [by_point[(noise, repeats)].report.accuracy
                     for repeats in repetitions]
    change = max(abs(value - baseline) for value in with_canaries) * 100
    lines.append(f'| {noise:g} | {baseline:.4f} | ' + ' | '.join(
        f'{value:.4f}' for value in with_canaries) + f' | {change:.2f} |')
  return '\n'.join(lines) + '\n'


def _number(value: float) -> str:
  """A table cell: 4 significant digits, ∞ for infinity."""
  return '∞' if math.isinf(value) else f'{value:.4g}'


def _cell(value: float | None) -> str:
  """A cell of a statistic a report may lack (None): n/a there."""
  return 'n/a' if value is None else _number(value)


def _threat(report: run_report.RunReport,
            model: str) -> privacy_report.PrivacyReport | None:
  """The report's threat model 'all' or 'final' (None: not estimated)."""
  return report.all_iterates if model == 'all' else report.final


def _field(report: run_report.RunReport, model: str, name: str) -> Any:
  """A field of one threat model's report; None where the model is absent."""
  threat = _threat(report, model)
  return None if threat is None else getattr(threat, name)


def _tpr_cell(report: run_report.RunReport, model: str, fpr: str) -> str:
  """TPR at one FPR ('0.01', '0.001'); n/a where absent."""
  value = _field(report, model, 'tpr_at_fpr')
  return 'n/a' if value is None else _number(value[fpr])


def _accounted_cell(report: run_report.RunReport) -> str:
  """The accounted eps; n/a where it was not computed."""
  if report.accounted_mechanism is None:
    return 'n/a'
  return _number(report.accounted_epsilon)


def _last_iterate_cell(report: run_report.RunReport) -> str:
  """The last-iterate heuristic eps; n/a where it was not computed."""
  if report.last_iterate_mechanism is None:
    return 'n/a'
  return _number(report.last_iterate_epsilon)


def _column(key: str) -> report_fields.Column:
  """The (first) column of the report field `key`."""
  return report_fields.by_key(key).columns()[0]


def _estimate_cell(report: run_report.RunReport, model: str) -> str:
  """A headline eps_est, '≥' in front when saturated (seen above unseen)."""
  return _column('epsilon_est').cell(_threat(report, model))


def _columns(model: str, *groups: str) -> list[report_fields.Column]:
  """The columns of `groups`' fields computed for threat model `model`."""
  return [column for field in report_fields.in_groups(*groups)
          if model in field.threat_models for column in field.columns()]


def _summary_fields(model: str) -> list[report_fields.ReportField]:
  """The fields the summary shows for `model`, in one '/'-separated cell."""
  return [field for field in report_fields.in_groups(*report_fields.GROUPS)
          if model in field.summary]


def _summary_cell(report: run_report.RunReport, model: str) -> str:
  threat = _threat(report, model)
  return '/'.join(column.cell(threat) for field in _summary_fields(model)
                  for column in field.columns())


def _summary_header(model: str) -> str:
  names = '/'.join(field.short for field in _summary_fields(model))
  return f'{names}-{_SHORT_MODELS[model]}'


def _families_sentence(fields: Sequence[report_fields.ReportField],
                       confidence: str) -> str:
  """'ε_lo, ...: 95% lower bound, whatever the mechanism; ...': the fields by
  what they assume (`run_markdown.assumption_cell` of their family)."""
  parts = []
  for family in report_fields.FAMILIES:
    chosen = [field for field in fields if field.assumes == family]
    if chosen:
      parts.append(f'{", ".join(field.label for field in chosen)}: '
                   f'{run_markdown.assumption_cell(chosen[0], confidence)}')
  return '; '.join(parts)


def _blocks(runs: Sequence[grid.GridRun]
            ) -> list[tuple[int, list[grid.GridRun]]]:
  """The runs grouped by canary repetitions r, ascending."""
  return [(repeats, [run for run in runs if run.canary_repeats == repeats])
          for repeats in sorted({run.canary_repeats for run in runs})]


def _setting_line(runs: Sequence[grid.GridRun]) -> str:
  first = runs[0].report
  return (f'd = {first.dim}, δ = {first.delta:.3g}; bounds at '
          f'{1 - first.alpha:.0%} confidence.')


def summary_table(runs: Sequence[grid.GridRun]) -> str:
  """The terminal's table: references, headline estimates, sound bounds.

  One row per run, at most 100 columns wide; `privacy_table` and each run's
  report.md hold the rest.

  Args:
    runs: The grid's runs.

  Returns:
    The table and its legend, as Markdown.
  """
  summary = [field for field in report_fields.in_groups(*report_fields.GROUPS)
             if field.summary]
  lines = [
      "**Privacy of the grid's runs**: estimates, and lower bounds (each "
      'holds where its legend says)',
      '',
      '| z | r | analyt. | acct. | est-all | '
      f'{_summary_header("all")} | est-fin | {_summary_header("final")} | '
      'last-it | acc. |',
      '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for _, block in _blocks(runs):
    for run in block:
      report = run.report
      lines.append(
          f'| {run.noise_multiplier:g} | {run.canary_repeats} | '
          f'{_number(report.analytical_epsilon)} | '
          f'{_accounted_cell(report)} | '
          f'{_estimate_cell(report, "all")} | '
          f'{_summary_cell(report, "all")} | '
          f'{_estimate_cell(report, "final")} | '
          f'{_summary_cell(report, "final")} | '
          f'{_last_iterate_cell(report)} | {_cell(report.accuracy)} |')
  confidence = f'{1 - runs[0].report.alpha:.0%}'
  lines += [
      '',
      _setting_line(runs),
      'z: noise multiplier; analyt.: ε of a canary presented r times in known '
      'rounds; acct.: a real',
      'client, whole run (dp_accounting); last-it: the last-iterate '
      'heuristic, reference for est-fin.',
      'est-*: ε estimates (not bounds; ≥: the most the canaries can show); '
      'acc.: accuracy.',
      *textwrap.wrap(
          "The '/'-separated cells (-all: all iterates, -fin: final model), "
          f'{confidence} lower bounds: ' +
          '; '.join(f'{field.short} = {field.label}, which holds '
                    f'{field.assumes.holds}' for field in summary) + '.', 100,
          break_on_hyphens=False),
      "table.md adds each run's sentences, both threat models' bounds and "
      'their intervals,',
      "and the paper's nominal columns.",
  ]
  return '\n'.join(lines) + '\n'


def _run_name(run: grid.GridRun) -> str:
  return f'noise {run.noise_multiplier:g}, r = {run.canary_repeats}'


def _opening(runs: Sequence[grid.GridRun]) -> list[str]:
  """Each run's quotable sentences and assumption notes, why bounds exceed
  estimates, the training-health notes."""
  lines = []
  for run in runs:
    sentences = ' '.join(
        run_markdown.headline_sentences(run.report) +
        run_markdown.assumption_notes(run_markdown.threat_models(run.report)))
    lines += [f'**{_capitalized(_run_name(run))}.** {sentences}', '']
  above = [_run_name(run) for run in runs
           if run_markdown.bounds_above_estimate(run.report)]
  if above:
    runs_named = (f'the run at {above[0]}' if len(above) == 1 else
                  f'{len(above)} runs ({"; ".join(above)})')
    lines += [f'In {runs_named}, a lower bound exceeds the estimate (each '
              "run's report.md names it and when it holds) because "
              f'{run_markdown.BOUND_ABOVE_ESTIMATE_REASON}.', '']
  for run in runs:
    lines += [f'**Training health, {_run_name(run)}:** {note}'
              for note in run.report.notes]
    if run.report.notes:
      lines.append('')
  return lines


def _capitalized(text: str) -> str:
  return text[:1].upper() + text[1:]


def _detail_columns(model: str) -> list[report_fields.Column]:
  """The table of details' columns of threat model `model`: numbers only."""
  return [column for field in report_fields.details(
      'estimates', 'lower bounds', 'nominal')
          if model in field.threat_models and field.layout != 'text'
          for column in field.columns()]


def privacy_table(runs: Sequence[grid.GridRun]) -> str:
  """Each run's quotable sentences, then per r the main table and the details.

  Opens with each run's sentences (`run_markdown.headline_sentences`: the
  lower bound that holds whatever the mechanism at the run's δ, ε_est with
  its bootstrap interval, the analytical ε, per threat model, and
  `run_markdown.assumption_notes`: where a bound that holds only for a
  Gaussian mechanism exceeds every other), one sentence on why a lower
  bound exceeds its estimate where one does (`run_markdown.bound_note`'s
  reason) and the runs' training-health notes. Then per block of r: the
  main table (the sentences' columns, `report_fields.HEADLINE`, with the
  analytical ε at the block's r and the accuracy); the table of details
  (the accounted and last-iterate ε, and every other estimate and bound of
  `report_fields.details`, the paper's nominal Table 3/4 columns among
  them, marked); the attack's summaries (Gaussian-DP eps from the mean
  shift, AUROC, TPR at FPR 1e-2 and 1e-3). Last, what each column assumes,
  stated once per family (`report_fields.FAMILIES`), and when each bound
  holds (`run_markdown.bounds_sentences`).

  Args:
    runs: The grid's runs.

  Returns:
    The Markdown of table.md.
  """
  estimate, interval, bound = (_column(key) for key in report_fields.HEADLINE)
  lines = _opening(runs)
  for repeats, block in _blocks(runs):
    details = {model: _detail_columns(model) for model in _MODELS}
    main_header = ' | '.join(
        f'{estimate.header(f"-{model}")} ({interval.label}) | '
        f'{bound.header(f"-{model}")}' for model in _MODELS)
    lines += [
        f'**{repeats} canary repetition{"s" if repeats != 1 else ""}**',
        '',
        "The sentences' estimates and lower bounds:",
        '',
        f'| noise | analytical ε (r = {repeats}) | {main_header} | accuracy |',
        '|---|---|' + '---|' * 2 * len(_MODELS) + '---|',
    ]
    for run in block:
      cells = ' | '.join(
          f'{estimate.cell(_threat(run.report, model))} '
          f'{interval.cell(_threat(run.report, model))} | '
          f'{bound.cell(_threat(run.report, model))}' for model in _MODELS)
      lines.append(f'| {run.noise_multiplier:g} | '
                   f'{_number(run.report.analytical_epsilon)} | {cells} | '
                   f'{_cell(run.report.accuracy)} |')
    detail_header = ' | '.join(column.header(f'-{model}')
                               for model in _MODELS
                               for column in details[model])
    lines += [
        '',
        'Other estimates and bounds (what each assumes: below):',
        '',
        f'| noise | accounted ε | last-iterate ε | {detail_header} |',
        '|---|---|---|' + '---|' * sum(map(len, details.values())),
    ]
    for run in block:
      cells = ' | '.join(column.cell(_threat(run.report, model))
                         for model in _MODELS for column in details[model])
      lines.append(f'| {run.noise_multiplier:g} | '
                   f'{_accounted_cell(run.report)} | '
                   f'{_last_iterate_cell(run.report)} | {cells} |')
    attack_header = ' | '.join(
        f'ε_gdp-{model} | AUROC-{model} | TPR@1e-2-{model} | '
        f'TPR@1e-3-{model}' for model in _MODELS)
    lines += ['', 'The attack:', '', f'| noise | {attack_header} |',
              '|---|' + '---|' * 4 * len(_MODELS)]
    for run in block:
      cells = ' | '.join(
          f'{_cell(_field(run.report, model, "epsilon_gdp"))} | '
          f'{_cell(_field(run.report, model, "auroc"))} | '
          f'{_tpr_cell(run.report, model, "0.01")} | '
          f'{_tpr_cell(run.report, model, "0.001")}'
          for model in _MODELS)
      lines.append(f'| {run.noise_multiplier:g} | {cells} |')
    lines.append('')
  sampling = runs[0].report.setting.get('sampling', 'the configured')
  shown = [report_fields.by_key(key) for key in report_fields.HEADLINE] + (
      report_fields.details('estimates', 'lower bounds', 'nominal'))
  confidence = f'{1 - runs[0].report.alpha:.0%}'
  lines += [
      _setting_line(runs),
      '',
      'What each assumes: ' + _families_sentence(
          [field for field in shown if field.layout != 'text'],
          confidence) + '. '
      'Analytical ε: a canary presented r times in known rounds (r-fold '
      'Gaussian mechanism, no amplification). Accounted ε: a real client '
      f'under {sampling} sampling over the whole run (each run\'s report.md '
      'names the mechanism). Last-iterate ε: the heuristic of Steinke et al. '
      '(2025) for the final model, not a bound. ε_est: final model, two '
      'Gaussians with the variance fixed at 1/d; all iterates, Gaussian DP '
      f'at the AUROC\'s μ; its {interval.label}: a percentile bootstrap '
      'over resampled canaries; the paper\'s ε_est fits both variances (it '
      'runs high). ' + ' '.join(run_markdown.bounds_sentences(confidence)) +
      ' The paper\'s ε_lo picks its threshold on the data it tests (nominal '
      'confidence, not a bound). ε_gdp: Gaussian-DP estimate from the mean '
      'shift in null standard deviations; AUROC and TPR of the attack "the '
      'statistic is larger".',
  ]
  return '\n'.join(lines) + '\n'


def anderson_table(runs: Sequence[grid.GridRun]) -> str:
  """Table 6: the Anderson-Darling A^2 of each cosine set.

  Normality is rejected above 0.656 at 10% and 1.092 at 1%, for about 1000
  samples.

  Args:
    runs: The grid's runs.

  Returns:
    The Markdown of anderson.md.
  """

  def cell(value: float | None) -> str:
    return 'n/a' if value is None else f'{value:.3f}'

  lines = ['**Table 6: Anderson-Darling A² of each cosine set** (normality is '
           'rejected above 0.656 at 10%, 1.092 at 1%)', '',
           '| noise | repetitions | final model, seen | max over rounds, seen '
           '| max over rounds, unseen |', '|---|---|---|---|---|']
  for run in runs:
    lines.append(
        f'| {run.noise_multiplier:g} | {run.canary_repeats} | '
        f'{cell(run.report.final.anderson_seen)} | '
        f'{cell(_field(run.report, "all", "anderson_seen"))} | '
        f'{cell(_field(run.report, "all", "anderson_unseen"))} |')
  return '\n'.join(lines) + '\n'
