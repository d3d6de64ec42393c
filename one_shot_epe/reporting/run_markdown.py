"""report.md: a run's privacy report for people (`run_report.RunReport`).

The headline row, then one table per group of report fields (estimates,
lower bounds with the paper's nominal one, the attack's summaries), whose
columns are the fields' entries (`report_fields`), the references with the
mechanism each assumes, the cosine sets' fits and the run's setting.
"""

from collections.abc import Sequence
from typing import Any

from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields

__all__ = ['render', 'threat_table']

_num = report_fields.number_cell


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


def render(report: Any) -> str:
  """Headline row, estimates, bounds, references, attack summaries, fits.

  Args:
    report: The `run_report.RunReport`.

  Returns:
    The report as Markdown, ending with a newline.
  """
  all_it, final = report.all_iterates, report.final
  confidence = f'{1 - report.alpha:.0%}'
  threats = [(name, threat) for name, threat in (
      ('all iterates', all_it),
      ('all iterates, decorrelated', report.all_iterates_decorrelated),
      ('final model', final)) if threat is not None]
  lo, est = (report_fields.by_key(key).columns()[0]
             for key in ('epsilon_lo', 'epsilon_est'))
  lines = [
      f'| noise | analytical ε | accounted ε | {lo.header("-all")} | '
      f'{est.header("-all")} | {lo.header("-final")} | '
      f'{est.header("-final")} | accuracy |',
      '|---|---|---|---|---|---|---|---|',
      f'| {report.noise_multiplier:g} | {_num(report.analytical_epsilon)} | '
      f'{_num(report.accounted_epsilon)} | {lo.cell(all_it)} | '
      f'{est.cell(all_it)} | {lo.cell(final)} | {est.cell(final)} | '
      f'{_num(report.accuracy)} |',
      '',
      f'd = {report.dim}, δ = {report.delta:.3g}. ε_lo are {confidence} lower '
      'bounds; ε_est are estimates, not bounds (≥: the most the canaries '
      'can show).',
      '',
      '**Estimates.** The headline ε_est and the paper\'s (Sec. 3.2, '
      'fitted variances; it runs high when the fitted variances differ).',
      '',
      *threat_table(['estimates'], threats),
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
      *threat_table(['lower bounds', 'nominal'], threats),
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
