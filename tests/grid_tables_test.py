"""Tests of the grid's tables and figures on typed reports, without training.

The reports are built by `run_report.build_run_report` from synthetic
cosines; the independent truth is each report's own fields, formatted here
(4 significant digits, ∞ for an infinite reference, n/a for a statistic the
run lacks, ≥ for a saturated estimate).
"""

import math

import numpy as np
import pytest

from experiments import grid
from experiments import grid_figures
from experiments import grid_tables
from one_shot_epe.reporting import run_report

_DIM = 10**4


def _cosines(seed: int, mean: float, size: int = 200) -> np.ndarray:
  return np.random.default_rng(seed).normal(mean, 1.0, size) / math.sqrt(_DIM)


def _run(noise: float, repeats: int, **kwargs) -> grid.GridRun:
  final = _cosines(repeats, 2.0)
  report = run_report.build_run_report(
      final_cosines=final, dim=_DIM, delta=1e-4, noise_multiplier=noise,
      canary_presentations=repeats, **kwargs)
  return grid.GridRun(noise_multiplier=noise, canary_repeats=repeats,
                      run_dir=f'runs/noise{noise:g}_rep{repeats}',
                      report=report, final_cosines=final)


def _runs() -> list[grid.GridRun]:
  return [
      # No noise: every reference is infinite.
      _run(0.0, 1, rounds=20, seen_maxima=_cosines(3, 4.0),
           unseen_maxima=_cosines(4, 0.0), accuracy=0.75),
      # Seen maxima all above unseen ones: a saturated estimate.
      _run(0.0, 2, rounds=20, seen_maxima=np.linspace(0.5, 0.6, 50),
           unseen_maxima=np.linspace(0.0, 0.1, 50), accuracy=0.5),
      # Final model only, no rounds and no accuracy: n/a everywhere else.
      _run(1.0, 1),
      _run(1.0, 2, rounds=20, seen_maxima=_cosines(5, 3.0),
           unseen_maxima=_cosines(6, 0.0), accuracy=0.25),
  ]


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
  """The summary table's data rows by (noise, r)."""
  rows = {}
  for line in text.splitlines():
    if line.startswith('| ') and not line.startswith(('| noise', '| z ')):
      cells = [cell.strip() for cell in line.strip('|').split('|')]
      rows[(cells[0], cells[1])] = cells[2:]
  return rows


def _g(value: float) -> str:
  return f'{value:.4g}'


def _cell(value):
  """A table cell of the report's: n/a for None."""
  return 'n/a' if value is None else _g(value)


def test_summary_table_shows_each_report_field():
  runs = _runs()
  rows = _rows(grid_tables.summary_table(runs))
  assert set(rows) == {('0', '1'), ('0', '2'), ('1', '1'), ('1', '2')}
  assert rows[('0', '1')][0:2] == ['∞', '∞']  # analytical, accounted
  assert rows[('0', '1')][7:] == ['∞', '0.75']  # last-iterate, accuracy
  saturated = runs[1].report.all_iterates
  assert saturated.epsilon_est_saturated
  assert rows[('0', '2')][2] == '≥' + _g(saturated.epsilon_est)
  assert rows[('1', '1')] == [
      _g(runs[2].report.analytical_epsilon), 'n/a', 'n/a', 'n/a',
      _g(runs[2].report.final.epsilon_est),
      _g(runs[2].report.final.epsilon_lo),
      # Without unseen canaries: the channel bound against the exact null
      # only.
      f'{_g(runs[2].report.final.epsilon_lo_tight_any)}/n/a', 'n/a', 'n/a']
  report = runs[3].report
  assert rows[('1', '2')] == [
      _g(report.analytical_epsilon), _g(report.accounted_epsilon),
      _g(report.all_iterates.epsilon_est), _g(report.all_iterates.epsilon_lo),
      _g(report.final.epsilon_est), _g(report.final.epsilon_lo),
      f'{_cell(report.final.epsilon_lo_tight_any)}/'
      f'{_cell(report.final.epsilon_lo_tight_gdp)}',
      _g(report.last_iterate_epsilon), '0.25']


def test_privacy_table_puts_the_sound_columns_first_and_labels_the_papers():
  runs = _runs()
  text = grid_tables.privacy_table(runs)
  report = runs[3].report
  all_it, final = report.all_iterates, report.final
  all_low, all_high = all_it.epsilon_est_interval
  low, high = final.epsilon_est_interval
  # The first table of a block: references, estimates, sound bounds.
  sound_row = (
      f'| 1 | {_g(report.analytical_epsilon)} | '
      f'{_g(report.accounted_epsilon)} | {_g(report.last_iterate_epsilon)} | '
      f'{_g(all_it.epsilon_est)} [{_g(all_low)}, {_g(all_high)}] | '
      f'{_g(all_it.epsilon_lo)} | {_g(all_it.epsilon_one_run)} | '
      f'{_g(all_it.epsilon_one_run_fdp)} | '
      f'{_cell(all_it.epsilon_lo_tight_any)} | '
      f'{_cell(all_it.epsilon_lo_tight_gdp)} | '
      f'{_g(final.epsilon_est)} [{_g(low)}, {_g(high)}] | '
      f'{_g(final.epsilon_lo)} | n/a | n/a | '
      f'{_cell(final.epsilon_lo_tight_any)} | '
      f'{_cell(final.epsilon_lo_tight_gdp)} | 0.25 |')
  assert sound_row in text
  paper_row = (f'| 1 | {_g(all_it.epsilon_lo_paper)} | '
               f'{_g(all_it.epsilon_est_fitted)} | '
               f'{_g(final.epsilon_lo_paper)} | '
               f'{_g(final.epsilon_est_fitted)} |')
  assert paper_row in text
  final_only = runs[2].report.final
  assert (f'| 1 | n/a | n/a | n/a | n/a | {_g(final_only.epsilon_gdp)} | '
          f'{_g(final_only.auroc)} | ') in text
  assert text.count('canary repetition') == 2  # One block per r.
  # In each block the sound table comes first, the paper's last, labelled.
  for block in text.split('canary repetition')[1:]:
    sound = block.index('lower bounds that hold')
    attack = block.index('The attack:')
    paper = block.index("The paper's own columns")
    assert sound < attack < paper
  assert "paper's ε_lo-final (nominal)" in text
  assert "paper's ε_est-all (fitted)" in text
  assert text.index(sound_row) < text.index(paper_row)


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
