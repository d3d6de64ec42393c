"""Tests of the grid's tables and figures on typed reports, without training.

The reports are built by `run_report.build_run_report` from synthetic
cosines; the independent truth is each report's own fields, formatted here
(4 significant digits, ∞ for an infinite reference, n/a for a statistic the
run lacks, ≥ for a saturated estimate). Cells are found by their column's
header, never by position.
"""

import dataclasses
import math

import numpy as np
import pytest

from experiments import grid
from experiments import grid_figures
from experiments import grid_tables
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_report

import report_sentences

_DIM = 10**4
_EMPTY = np.zeros(0)


def _cosines(seed: int, mean: float, size: int = 200) -> np.ndarray:
  return np.random.default_rng(seed).normal(mean, 1.0, size) / math.sqrt(_DIM)


def _run(noise: float, repeats: int, *, seen_maxima=_EMPTY,
         unseen_maxima=_EMPTY, accuracy=math.nan, rounds=None) -> grid.GridRun:
  final = _cosines(repeats, 2.0)
  outcome = canary_spec.CanaryOutcome(
      final_cosines=final, final_unseen_cosines=_EMPTY,
      seen_maxima=seen_maxima, unseen_maxima=unseen_maxima,
      accuracy=accuracy, dim=_DIM, resumed_from_round=0, rounds_trained=0)
  facts = references.RunFacts(noise_multiplier=noise, delta=1e-4, dim=_DIM,
                              canary_presentations=repeats, rounds=rounds)
  report = run_report.build_run_report(outcome, facts, mechanisms.Gaussian())
  return grid.GridRun(noise_multiplier=noise, canary_repeats=repeats,
                      run_dir=f'runs/noise{noise:g}_rep{repeats}',
                      report=report, final_cosines=final)


def _runs() -> list[grid.GridRun]:
  return [
      # No noise: every reference is infinite.
      _run(0.0, 1, rounds=20, seen_maxima=_cosines(3, 4.0),
           unseen_maxima=_cosines(4, 0.0), accuracy=0.75),
      # Seen maxima all above unseen ones: a saturated estimate (spread
      # enough that the Gaussian-pair bound stays below it).
      _run(0.0, 2, rounds=20, seen_maxima=np.linspace(0.11, 0.6, 50),
           unseen_maxima=np.linspace(-0.4, 0.1, 50), accuracy=0.5),
      # Final model only, no rounds and no accuracy: n/a everywhere else.
      _run(1.0, 1),
      _run(1.0, 2, rounds=20, seen_maxima=_cosines(5, 3.0),
           unseen_maxima=_cosines(6, 0.0), accuracy=0.25),
  ]


def _tables(text: str) -> list[list[dict[str, str]]]:
  """The Markdown tables of `text`: each a list of rows, header -> cell."""
  tables, lines = [], text.splitlines()
  for i, line in enumerate(lines[:-1]):
    if line.startswith('| ') and lines[i + 1].startswith('|---'):
      headers = [cell.strip() for cell in line.strip('|').split('|')]
      rows = []
      for row in lines[i + 2:]:
        if not row.startswith('| '):
          break
        cells = [cell.strip() for cell in row.strip('|').split('|')]
        assert len(cells) == len(headers), row
        rows.append(dict(zip(headers, cells)))
      tables.append(rows)
  return tables


def _g(value: float) -> str:
  return f'{value:.4g}'


def _cell(value):
  """A table cell of the report's: n/a for None."""
  return 'n/a' if value is None else _g(value)


def test_summary_table_shows_each_report_field():
  runs = _runs()
  text = grid_tables.summary_table(runs)
  assert max(len(line) for line in text.splitlines()) <= 100
  (table,) = _tables(text)
  rows = {(row['z'], row['r']): row for row in table}
  assert set(rows) == {('0', '1'), ('0', '2'), ('1', '1'), ('1', '2')}
  assert (rows[('0', '1')]['analyt.'], rows[('0', '1')]['acct.'],
          rows[('0', '1')]['last-it'], rows[('0', '1')]['acc.']) == (
              '∞', '∞', '∞', '0.75')
  saturated = runs[1].report.all_iterates
  assert saturated.epsilon_est_saturated
  assert rows[('0', '2')]['est-all'] == '≥' + _g(saturated.epsilon_est)
  final_only = runs[2].report
  assert rows[('1', '1')] == {
      'z': '1', 'r': '1', 'analyt.': _g(final_only.analytical_epsilon),
      'acct.': 'n/a', 'est-all': 'n/a', 'lo-all': 'n/a',
      'est-fin': _g(final_only.final.epsilon_est),
      # Without unseen canaries: the channel bound against the exact null
      # only.
      'lo/any/gdp-fin': f'{_g(final_only.final.epsilon_lo)}/'
                        f'{_g(final_only.final.epsilon_lo_tight_any)}/n/a',
      'last-it': 'n/a', 'acc.': 'n/a'}
  report = runs[3].report
  assert rows[('1', '2')] == {
      'z': '1', 'r': '2', 'analyt.': _g(report.analytical_epsilon),
      'acct.': _g(report.accounted_epsilon),
      'est-all': _g(report.all_iterates.epsilon_est),
      'lo-all': _g(report.all_iterates.epsilon_lo),
      'est-fin': _g(report.final.epsilon_est),
      'lo/any/gdp-fin': f'{_g(report.final.epsilon_lo)}/'
                        f'{_cell(report.final.epsilon_lo_tight_any)}/'
                        f'{_cell(report.final.epsilon_lo_tight_gdp)}',
      'last-it': _g(report.last_iterate_epsilon), 'acc.': '0.25'}
  legend = text.replace('\n', ' ')
  assert ("gdp = ε_tight-gdp, which holds only if the mechanism is Gaussian "
          "in the canary's direction.") in legend
  assert 'lo = ε_lo, which holds whatever the mechanism;' in legend
  assert report_sentences.unconditional_claims(text) == []


def test_privacy_table_keeps_the_sentences_columns_and_details_the_rest():
  runs = _runs()
  text = grid_tables.privacy_table(runs)
  report = runs[3].report
  all_it, final = report.all_iterates, report.final
  all_low, all_high = all_it.epsilon_est_interval
  low, high = final.epsilon_est_interval
  # A block per r, each with the main table, the details and the attack.
  tables = _tables(text)
  assert len(tables) == 6
  main, details, attack = ({row['noise']: row for row in rows}
                           for rows in tables[3:])
  # The main table: the sentences' columns and the accuracy, nothing else.
  assert main['1'] == {
      'noise': '1', 'analytical ε (r = 2)': _g(report.analytical_epsilon),
      'ε_est-all (95% bootstrap interval of the estimate)': (
          f'{_g(all_it.epsilon_est)} [{_g(all_low)}, {_g(all_high)}]'),
      'ε_lo-all': _g(all_it.epsilon_lo),
      'ε_est-final (95% bootstrap interval of the estimate)': (
          f'{_g(final.epsilon_est)} [{_g(low)}, {_g(high)}]'),
      'ε_lo-final': _g(final.epsilon_lo), 'accuracy': '0.25'}
  expected = {
      'noise': '1', 'accounted ε': _g(report.accounted_epsilon),
      'last-iterate ε': _g(report.last_iterate_epsilon),
      'ε_one-run-all': _g(all_it.epsilon_one_run),
      'ε_one-run-fdp-all (Gaussian)': _g(all_it.epsilon_one_run_fdp),
      'ε_tight-any-all': _cell(all_it.epsilon_lo_tight_any),
      'ε_tight-gdp-all (Gaussian)': _cell(all_it.epsilon_lo_tight_gdp),
      'ε_gauss-pair-all (Gaussian)': _cell(all_it.epsilon_lo_gauss_pair),
      'ε_gdp-thresholds-all (Gaussian)': _cell(
          all_it.epsilon_lo_gdp_thresholds),
      "paper's ε_lo-all (nominal)": _g(all_it.epsilon_lo_paper),
      "paper's ε_est-all": _g(all_it.epsilon_est_fitted),
      'ε_one-run-final': 'n/a', 'ε_one-run-fdp-final (Gaussian)': 'n/a',
      'ε_tight-any-final': _cell(final.epsilon_lo_tight_any),
      'ε_tight-gdp-final (Gaussian)': _cell(final.epsilon_lo_tight_gdp),
      'ε_gauss-pair-final (Gaussian)': _cell(final.epsilon_lo_gauss_pair),
      'ε_gdp-thresholds-final (Gaussian)': 'n/a',
      "paper's ε_lo-final (nominal)": _g(final.epsilon_lo_paper),
      "paper's ε_est-final": _g(final.epsilon_est_fitted)}
  assert details['1'] == expected
  # Every other bound of the report's fields has its column, by its label.
  for field in report_fields.in_groups('lower bounds', 'nominal'):
    for model, threat in (('all', all_it), ('final', final)):
      header = f'{field.label}-{model}' + (
          f' ({field.assumes.tag})' if field.assumes.tag else '')
      table = main if field.key == 'epsilon_lo' else details
      assert table['1'][header] == _cell(getattr(threat, field.key)), header
  assert attack['1']['ε_gdp-all'] == _g(all_it.epsilon_gdp)
  final_only = runs[2].report.final
  first_attack = {row['noise']: row for row in tables[2]}['1']
  assert (first_attack['AUROC-all'], first_attack['ε_gdp-final'],
          first_attack['AUROC-final']) == (
              'n/a', _g(final_only.epsilon_gdp), _g(final_only.auroc))
  assert text.count('canary repetition') == 2  # One block per r.
  # What each assumes, once per family, from the fields' entries.
  legend = text.split('What each assumes: ')[1]
  for family, assumes in (
      (report_fields.ANY_MECHANISM, '95% lower bound, whatever the mechanism'),
      (report_fields.GAUSSIAN, '95% lower bound, only if the mechanism is '
       "Gaussian in the canary's direction"),
      (report_fields.NOMINAL, report_fields.NOMINAL.text),
      (report_fields.ESTIMATE, report_fields.ESTIMATE.text)):
    assert legend.count(f': {assumes}') == 1, family.text
  # A saturated estimate (r = 2, no noise) has no interval to show.
  assert runs[1].report.all_iterates.epsilon_est_saturated
  assert main['0']['ε_est-all (95% bootstrap interval of the estimate)'] == (
      f'≥{_g(runs[1].report.all_iterates.epsilon_est)} no interval '
      '(saturated)')
  # Each bound is said to hold where its family does, and no further.
  assert report_sentences.unconditional_claims(text) == []
  labels = {field.label for field in report_sentences.conditional_fields()}
  assert report_sentences.named_with_condition(legend) == labels


@pytest.mark.parametrize('bound_above', [False, True])
def test_table_md_opens_with_each_runs_sentences_and_the_bounds_note(
    bound_above):
  runs = _runs()
  if bound_above:  # A holding bound above the estimate in one run.
    final = runs[2].report.final
    runs[2] = dataclasses.replace(runs[2], report=dataclasses.replace(
        runs[2].report, final=dataclasses.replace(
            final, epsilon_lo_tight_any=2 * final.epsilon_est)))
  text = grid_tables.privacy_table(runs)
  lines = text.splitlines()
  for i, run in enumerate(runs):
    report = run.report
    line = lines[2 * i]
    assert line.startswith(f'**Noise {run.noise_multiplier:g}, r = '
                           f'{run.canary_repeats}.** Final model (k = 200 '
                           'seen canaries against the exact null): ')
    low, high = report.final.epsilon_est_interval
    assert ("Final model (k = 200 seen canaries against the exact null): "
            "with 95% confidence this run's mechanism has ε ≥ "
            f'{_g(report.final.epsilon_lo)} at δ = 0.0001 (ε_lo, which holds '
            'whatever the mechanism); the estimate ε_est is '
            f'{_g(report.final.epsilon_est)} (95% bootstrap interval of the '
            f'estimate {_g(low)}–{_g(high)}); analytical ε '
            f'{_number(report.analytical_epsilon)}.') in line
    all_it = report.all_iterates
    assert ('All iterates (' in line) == (all_it is not None)
    if all_it is not None and all_it.epsilon_est_saturated:
      assert ('All iterates (k = 50 seen against m = 50 unseen canaries): '
              'these canaries cannot support an estimate: ε_est is at least '
              f'{_g(all_it.epsilon_est)}, the most 50 + 50 canaries can show '
              'at this δ;') in line
  above = [run for run in runs if any(
      value is not None and value > threat.epsilon_est
      for threat in (run.report.final, run.report.all_iterates)
      if threat is not None and not threat.epsilon_est_saturated
      for value in (threat.epsilon_lo, threat.epsilon_one_run,
                    threat.epsilon_one_run_fdp, threat.epsilon_lo_tight_any,
                    threat.epsilon_lo_tight_gdp,
                    threat.epsilon_lo_gauss_pair,
                    threat.epsilon_lo_gdp_thresholds))]
  notes = [line for line in lines if 'a lower bound exceeds' in line]
  assert bool(above) == bound_above
  if above:
    (note,) = notes
    for run in runs:
      name = f'noise {run.noise_multiplier:g}, r = {run.canary_repeats}'
      assert (name in note) == (run in above), name
  else:
    assert not notes


def _number(value: float) -> str:
  return '∞' if math.isinf(value) else _g(value)


def test_training_health_notes_of_a_run_are_in_table_md():
  runs = _runs()
  noted = runs[3]
  runs[3] = dataclasses.replace(noted, report=dataclasses.replace(
      noted.report, notes=('The adaptive clip grew 300x.',)))
  text = grid_tables.privacy_table(runs)
  assert text.count('**Training health, noise 1, r = 2:** The adaptive clip '
                    'grew 300x.') == 1
  assert text.count('Training health') == 1


def test_anderson_table_shows_each_cosine_sets_statistic():
  runs = _runs()
  text = grid_tables.anderson_table(runs)
  report = runs[3].report
  assert (f'| 1 | 2 | {report.final.anderson_seen:.3f} | '
          f'{report.all_iterates.anderson_seen:.3f} | '
          f'{report.all_iterates.anderson_unseen:.3f} |') in text
  assert (f'| 1 | 1 | {runs[2].report.final.anderson_seen:.3f} | n/a | '
          'n/a |') in text


def test_accuracy_table_compares_with_the_runs_without_canaries():
  runs = [run for run in _runs() if run.noise_multiplier == 0.0]
  text = grid_tables.accuracy_table(runs, {0.0: 0.7})
  assert ('| 0 | 0.7000 | 0.7500 | 0.5000 | 20.00 |') in text
  assert 'with 200 canaries, 1 rep.' in text


def test_figures_are_drawn_only_where_every_run_has_the_model(tmp_path):
  runs = _runs()
  assert not grid_figures.has_all_iterates(runs)
  with_all = [runs[0], runs[1]]
  assert grid_figures.has_all_iterates(with_all)
  for model in ('final', 'all'):
    path = tmp_path / f'{model}.png'
    grid_figures.epsilon_bars(with_all, [0.0], [1, 2], model, str(path), 't')
    assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  density = tmp_path / 'density.png'
  grid_figures.cosine_densities(runs, [0.0, 1.0], str(density), 't')
  assert density.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  with pytest.raises(ValueError, match='model'):
    grid_figures.epsilon_bars(with_all, [0.0], [1, 2], 'both',
                              str(tmp_path / 'x.png'), 't')
