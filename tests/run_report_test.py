"""Tests of the end-of-run privacy report."""

import dataclasses
import json
import math
import re

import dp_accounting
import numpy as np
import pytest

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_spec
from one_shot_epe.stats import estimation
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_report

import report_sentences

_EMPTY = np.zeros(0)


def _cosines(seed, mean, size=400, dim=10**5):
  return np.random.default_rng(seed).normal(mean, 1.0, size) / math.sqrt(dim)


def _build(*, final_cosines, dim, final_unseen_cosines=_EMPTY,
           seen_maxima=_EMPTY, unseen_maxima=_EMPTY, accuracy=None,
           decorrelated_scores=(None, None), mechanism=mechanisms.Gaussian(),
           alpha=0.05, setting=None, seed=0, notes=(), **facts):
  """`build_run_report` of an outcome of these scores and these facts."""
  outcome = canary_spec.CanaryOutcome(
      final_cosines=final_cosines, final_unseen_cosines=final_unseen_cosines,
      seen_maxima=seen_maxima, unseen_maxima=unseen_maxima,
      accuracy=math.nan if accuracy is None else accuracy, dim=dim,
      resumed_from_round=0, rounds_trained=0,
      decorrelated_seen=decorrelated_scores[0],
      decorrelated_unseen=decorrelated_scores[1])
  return run_report.build_run_report(
      outcome, references.RunFacts(dim=dim, **facts), mechanism, alpha=alpha,
      setting=setting, seed=seed, notes=notes)


def test_report_combines_both_threat_models():
  dim = 10**5
  final, seen, unseen = _cosines(0, 2.0), _cosines(1, 4.0), _cosines(2, 1.0)
  report = _build(
      final_cosines=final, dim=dim, delta=1e-5, noise_multiplier=0.5,
      seen_maxima=seen, unseen_maxima=unseen, accuracy=0.81,
      setting={'task': 'emnist_character'})
  assert report.analytical_epsilon == estimation.gaussian_epsilon(0.5, 1e-5)
  assert report.final.epsilon_est == estimation.epsilon_from_final_cosines(
      final, dim, 1e-5, variance='null')
  assert (report.all_iterates.epsilon_est_fitted ==
          estimation.epsilon_from_seen_unseen(seen, unseen, 1e-5))
  parsed = json.loads(report.to_json())
  assert parsed['epsilon_lo_all'] == report.all_iterates.epsilon_lo
  assert parsed['setting'] == {'task': 'emnist_character'}
  text = report.to_markdown()
  assert text.split('\n\n')[1].startswith(
      "Final model (k = 400 seen canaries against the exact null): with 95% "
      "confidence this run's mechanism has ε ≥ ")
  assert f'z = 0.5, d = {dim}, δ = 1e-05.' in text
  assert '| task | emnist_character |' in text


def test_no_noise_means_infinite_analytical_epsilon(tmp_path):
  report = _build(final_cosines=_cosines(3, 3.0), dim=10**5, delta=1e-5,
                  noise_multiplier=0)
  assert math.isinf(report.analytical_epsilon)
  assert json.loads(report.to_json())['analytical_epsilon'] is None
  main = _table_with(report.to_markdown(), 'analytical ε')['final model']
  assert (main['analytical ε'], main['accuracy']) == ('∞', 'n/a')
  report.write(str(tmp_path / 'r.json'), str(tmp_path / 'r.md'))
  assert json.loads((tmp_path / 'r.json').read_text())['epsilon_est_all'] is None
  # The facts' int noise multiplier is written as the float it is.
  assert '"noise_multiplier": 0.0,' in report.to_json()


@pytest.mark.parametrize('kwargs,message', [
    (dict(noise_multiplier=-1.0), 'noise_multiplier'),
    # Seen maxima without unseen ones: no all-iterates report to make.
    (dict(seen_maxima=np.zeros(0), unseen_maxima=np.array([0.1, 0.2])),
     'seen'),
    (dict(delta=2.0), 'delta'),
    (dict(canary_presentations=0), 'presentations'),
    (dict(decorrelated_scores=(np.ones(4), np.zeros(4))),
     'matrix-factorization'),
])
def test_bad_arguments(kwargs, message):
  base = dict(final_cosines=_cosines(4, 1.0), dim=10**5, delta=1e-5,
              noise_multiplier=1.0)
  base.update(kwargs)
  with pytest.raises(ValueError, match=message):
    _build(**base)


def test_the_outcome_and_the_facts_must_have_one_dimension():
  outcome = canary_spec.CanaryOutcome(
      final_cosines=_cosines(4, 1.0), final_unseen_cosines=_EMPTY,
      seen_maxima=_EMPTY, unseen_maxima=_EMPTY, accuracy=0.5, dim=10**5,
      resumed_from_round=0, rounds_trained=0)
  facts = references.RunFacts(noise_multiplier=1.0, delta=1e-5, dim=10**4)
  with pytest.raises(ValueError, match='d = 100000'):
    run_report.build_run_report(outcome, facts, mechanisms.Gaussian())


def test_empty_unseen_scores_are_omitted_and_given_ones_reported():
  dim = 10**5
  final, seen, unseen = _cosines(20, 2.0), _cosines(21, 4.0), _cosines(22, 0.0)
  common = dict(final_cosines=final, dim=dim, delta=1e-5,
                noise_multiplier=1.0, seed=3)
  without = _build(**common, seen_maxima=seen)
  assert without.all_iterates is None
  assert without.final.num_unseen == 0
  assert without.final.epsilon_one_run is None
  assert without.accuracy is None  # NaN in the outcome: unknown.
  both = _build(**common, seen_maxima=seen, unseen_maxima=unseen,
                final_unseen_cosines=unseen, accuracy=0.25)
  # The threat models' reports are privacy_report's of the same scores.
  assert both.final == privacy_report.final_model_report(
      final, dim, 1e-5, unseen=unseen, seed=3)
  assert both.all_iterates == privacy_report.all_iterates_report(
      seen, unseen, 1e-5, dim=dim, seed=3)
  assert both.accuracy == 0.25


def test_report_carries_both_bounds_with_their_mechanisms():
  dim = 10**5
  final, seen, unseen = _cosines(5, 2.0), _cosines(6, 4.0), _cosines(7, 1.0)
  participation = dp_fedavg.Participation('bernoulli', 20, 200, 30)
  report = _build(
      final_cosines=final, dim=dim, delta=1e-5, noise_multiplier=0.8,
      seen_maxima=seen, unseen_maxima=unseen, canary_presentations=4,
      participation=participation)
  # r = 4 presentations: one Gaussian at 0.8 / 2.
  assert report.analytical_epsilon == estimation.gaussian_epsilon(0.4, 1e-5)
  accounted = dp_fedavg.client_epsilon_of_event(
      dp_accounting.GaussianDpEvent(0.8), 1e-5, participation, 30)
  # The same mechanism as the noise multiplier's account.
  assert accounted.epsilon == dp_fedavg.client_epsilon(
      0.8, 1e-5, participation).epsilon
  assert report.accounted_epsilon == accounted.epsilon
  parsed = json.loads(report.to_json())
  assert parsed['canary_presentations'] == 4
  assert parsed['accounted_epsilon'] == accounted.epsilon
  assert parsed['accounted_epsilon_mechanism'] == accounted.mechanism
  assert 'r = 4' in parsed['analytical_epsilon_mechanism']
  # Every canary presented 4 times in 30 rounds: the heuristic is one
  # Gaussian at 0.8 sqrt(30) / 4.
  assert report.last_iterate_epsilon == estimation.gaussian_epsilon(
      0.8 * math.sqrt(30) / 4, 1e-5)
  assert parsed['last_iterate_epsilon'] == report.last_iterate_epsilon
  assert 'heuristic' in parsed['last_iterate_epsilon_mechanism']
  for suffix, threat in (('final', report.final),
                         ('all', report.all_iterates)):
    for key in ('epsilon_est_fitted', 'epsilon_lo_paper', 'epsilon_lo'):
      assert parsed[f'{key}_{suffix}'] == getattr(threat, key)
    assert parsed[f'epsilon_gdp_{suffix}'] == threat.epsilon_gdp
    assert parsed[f'epsilon_est_interval_{suffix}'] == list(
        threat.epsilon_est_interval)
    assert parsed[f'auroc_{suffix}'] == threat.auroc
    assert parsed[f'tpr_at_fpr_{suffix}'] == threat.tpr_at_fpr
  text = report.to_markdown()
  assert (f'| analytical ε (canary, r = 4) | {report.analytical_epsilon:.4g} | '
          f'{report.analytical_mechanism} |') in text
  assert (f'| accounted ε (real client) | {accounted.epsilon:.4g} | '
          f'{accounted.mechanism} |') in text
  low, high = report.final.epsilon_est_interval
  main = _table_with(text, 'analytical ε')['final model']
  assert (main['ε_est'], main['95% bootstrap interval of the estimate']) == (
      f'{report.final.epsilon_est:.4g}', f'[{low:.4g}, {high:.4g}]')
  details = _table_with(text, 'what it assumes', 'statistic')
  assert details['how ε_est is computed']['final model'] == (
      report.final.epsilon_est_method)
  assert details["paper's ε_est"]['final model'] == (
      f'{report.final.epsilon_est_fitted:.4g}')
  assert (f'| last-iterate heuristic ε (canary, final model) | '
          f'{report.last_iterate_epsilon:.4g} |') in text
  assert '| all iterates | ' in text


def test_a_saturated_estimate_is_marked_at_least():
  dim = 10**5
  seen = np.linspace(0.5, 0.6, 50)
  unseen = np.linspace(0.0, 0.1, 50)
  report = _build(
      final_cosines=_cosines(9, 2.0), dim=dim, delta=1e-5,
      noise_multiplier=0.5, seen_maxima=seen, unseen_maxima=unseen)
  text = report.to_markdown()
  row = _table_with(text, 'analytical ε')['all iterates']
  assert row['ε_est'] == f'≥{report.all_iterates.epsilon_est:.4g}'
  # No interval: a saturated estimate has none to give.
  assert row['95% bootstrap interval of the estimate'] == (
      'no interval (saturated)')
  # Its sentence opens with it: the canaries cannot support an estimate.
  assert ('All iterates (k = 50 seen against m = 50 unseen canaries): these '
          'canaries cannot support an estimate: ε_est is at least '
          f'{report.all_iterates.epsilon_est:.4g}, the most 50 + 50 canaries '
          'can show at this δ; with 95% confidence') in text
  assert json.loads(report.to_json())['all_iterates']['epsilon_est_saturated']


def test_without_rounds_there_are_no_whole_run_references():
  report = _build(final_cosines=_cosines(8, 2.0), dim=10**5, delta=1e-5,
                  noise_multiplier=1.0)
  parsed = json.loads(report.to_json())
  assert parsed['accounted_epsilon'] is None
  assert parsed['accounted_epsilon_mechanism'] is None
  assert parsed['last_iterate_epsilon_mechanism'] is None
  assert parsed['epsilon_gdp_all'] is None
  assert 'accounted ε (real client)' not in report.to_markdown()


def test_without_sampling_a_client_is_accounted_in_every_round():
  report = _build(final_cosines=_cosines(8, 2.0), dim=10**5, delta=1e-5,
                  noise_multiplier=1.0, rounds=50)
  # 50 Gaussian rounds at z = 1 are one Gaussian at 1 / sqrt(50); PLD's
  # pessimistic discretisation is within 1e-3 of the exact value.
  exact = estimation.gaussian_epsilon(1 / math.sqrt(50), 1e-5)
  assert report.accounted_epsilon == pytest.approx(exact, rel=1e-3)
  assert report.accounted_epsilon >= exact * (1 - 1e-9)
  assert 'every one of 50 rounds' in report.accounted_mechanism


def _round_trip_cases():
  """Reports as the launchers build them: each kind of reference and model."""
  dim = 10**5
  final, seen, unseen = _cosines(10, 2.0), _cosines(11, 4.0), _cosines(12, 1.0)
  participation = dp_fedavg.Participation('bernoulli', 20, 200, 30)
  common = dict(final_cosines=final, dim=dim, delta=1e-5)
  return {
      # No noise: every reference infinite, written as None.
      'no noise, with rounds': dict(common, noise_multiplier=0.0, rounds=30,
                                    seen_maxima=seen, unseen_maxima=unseen),
      # Nothing but the final model: the references are not computed.
      'final only': dict(common, noise_multiplier=1.0, accuracy=None),
      'all iterates, sampled': dict(
          common, noise_multiplier=0.8, seen_maxima=seen,
          unseen_maxima=unseen, final_unseen_cosines=unseen,
          canary_presentations=4, participation=participation, accuracy=0.5,
          setting={'task': 'emnist_character', 'clients_per_round': 10}),
      'saturated': dict(common, noise_multiplier=0.5, rounds=10,
                        seen_maxima=np.linspace(0.5, 0.6, 50),
                        unseen_maxima=np.linspace(0.0, 0.1, 50)),
  }


@pytest.mark.parametrize('case', sorted(_round_trip_cases()))
def test_from_dict_undoes_to_dict(case, tmp_path):
  report = _build(**_round_trip_cases()[case])
  text = report.to_json()
  back = run_report.RunReport.from_dict(json.loads(text))
  assert back == report
  # inf and None are told apart: the mechanism says a reference was computed.
  assert back.analytical_epsilon == report.analytical_epsilon
  assert back.accounted_epsilon == report.accounted_epsilon
  assert back.last_iterate_epsilon == report.last_iterate_epsilon
  assert back.to_json() == text
  report.write(str(tmp_path / 'r.json'), str(tmp_path / 'r.md'))
  assert run_report.RunReport.read(str(tmp_path / 'r.json')) == report


def test_from_dict_keeps_infinite_and_missing_references_apart():
  cases = _round_trip_cases()
  no_noise = run_report.RunReport.from_dict(json.loads(
      _build(**cases['no noise, with rounds']).to_json()))
  assert math.isinf(no_noise.analytical_epsilon)
  assert math.isinf(no_noise.accounted_epsilon)
  assert math.isinf(no_noise.last_iterate_epsilon)
  final_only = run_report.RunReport.from_dict(json.loads(
      _build(**cases['final only']).to_json()))
  assert final_only.accounted_epsilon is None
  assert final_only.last_iterate_epsilon is None
  assert final_only.all_iterates is None
  assert final_only.accuracy is None


def test_from_dict_rejects_what_is_not_a_report(tmp_path):
  fields = json.loads(_build(**_round_trip_cases()['final only']).to_json())
  with pytest.raises(ValueError, match=r"missing keys \['accuracy'\]"):
    run_report.RunReport.from_dict(
        {k: v for k, v in fields.items() if k != 'accuracy'})
  with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
    run_report.RunReport.from_dict(dict(fields, extra=1))
  final = dict(fields['final'])
  del final['auroc']
  with pytest.raises(ValueError, match='missing'):
    run_report.RunReport.from_dict(dict(fields, final=final))
  path = tmp_path / 'report.json'
  path.write_text('[1, 2]')
  with pytest.raises(ValueError, match='report.json'):
    run_report.RunReport.read(str(path))


# C's first column for 20 rounds with ||1^T C^-1|| = 2.5: sqrt(20) / 2.5 I.
_SCALED_IDENTITY = (math.sqrt(20) / 2.5,) + (0.0,) * 19


def test_correlated_noise_references_are_the_strategys():
  correlated = dp_fedavg.CorrelatedNoise('banded', sensitivity=1.8,
                                          canary_column_norm=1.2,
                                          coefs=_SCALED_IDENTITY)
  report = _build(
      final_cosines=_cosines(4, 2.0), dim=10**5, delta=1e-5,
      noise_multiplier=0.7, rounds=20, correlated=correlated,
      mechanism=mechanisms.MatrixFactorization('banded', 4),
      participation=dp_fedavg.Participation('shuffle', 5, 20, 20))
  assert report.analytical_epsilon == pytest.approx(
      estimation.gaussian_epsilon(0.7 * 1.8 / 1.2, 1e-5), rel=1e-12)
  assert report.accounted_epsilon == pytest.approx(
      estimation.gaussian_epsilon(0.7, 1e-5), rel=1e-12)
  assert 'banded' in report.analytical_mechanism
  assert 'banded' in report.accounted_mechanism
  # The final model's noise std is z sens ||1^T C^-1|| S; one presentation.
  assert report.last_iterate_epsilon == pytest.approx(
      estimation.gaussian_epsilon(0.7 * 1.8 * 2.5, 1e-5), rel=1e-9)
  assert 'banded correlated noise' in report.last_iterate_mechanism
  assert run_report.RunReport.from_dict(report.to_dict()) == report
  # Without all-iterates maxima there is no statistic to qualify; with them
  # the report says what it estimates under correlated noise.
  assert 'all_iterates_under_correlated_noise' not in report.setting
  maxima = _build(
      final_cosines=_cosines(4, 2.0), dim=10**5, delta=1e-5,
      noise_multiplier=0.7, rounds=20, correlated=correlated,
      mechanism=mechanisms.MatrixFactorization('banded', 4),
      seen_maxima=_cosines(4, 3.0), unseen_maxima=_cosines(4, 0.0),
      participation=dp_fedavg.Participation('shuffle', 5, 20, 20))
  assert maxima.setting['all_iterates_under_correlated_noise'] == (
      mechanisms.CORRELATED_ALL_ITERATES_NOTE)
  assert (maxima.setting['mechanism'], maxima.setting['num_bands']) == (
      'banded', 4)


def _markdown_tables(text):
  """report.md's tables: each a list of rows, each a dict header -> cell."""
  tables, lines = [], text.splitlines()
  for i, line in enumerate(lines):
    if line.startswith('|') and i + 1 < len(lines) and (
        lines[i + 1].startswith('|---')):
      headers = [cell.strip() for cell in line.strip('|').split('|')]
      rows = []
      for row in lines[i + 2:]:
        if not row.startswith('|'):
          break
        rows.append(dict(zip(headers, (cell.strip() for cell in
                                       row.strip('|').split('|')))))
      tables.append(rows)
  return tables


def _table_with(text, header, key='threat model'):
  """The one table of report.md with a column `header`, rows by `key`."""
  found = [rows for rows in _markdown_tables(text) if header in rows[0]]
  assert len(found) == 1, header
  return {row.get(key): row for row in found[0]}


def _g(value):
  return 'n/a' if value is None else f'{value:.4g}'


def test_markdown_shows_every_field_of_its_groups_under_its_label():
  dim = 10**5
  final, seen, unseen = _cosines(30, 2.0), _cosines(31, 4.0), _cosines(32, 0.0)
  report = _build(final_cosines=final, dim=dim, delta=1e-5,
                  noise_multiplier=0.5, seen_maxima=seen, unseen_maxima=unseen,
                  final_unseen_cosines=unseen, rounds=10, accuracy=0.5)
  text = report.to_markdown()
  main = _table_with(text, 'analytical ε')
  details = _table_with(text, 'what it assumes', 'statistic')
  for name, threat in (('final model', report.final),
                       ('all iterates', report.all_iterates)):
    low, high = threat.epsilon_est_interval
    # The main table: the sentence's columns and the accuracy, nothing else.
    assert main[name] == {
        'threat model': name, 'ε_est': _g(threat.epsilon_est),
        '95% bootstrap interval of the estimate': f'[{_g(low)}, {_g(high)}]',
        'ε_lo': _g(threat.epsilon_lo),
        'analytical ε': _g(report.analytical_epsilon), 'accuracy': '0.5'}
    # Every other estimate and bound, with what it assumes.
    for key, label, assumes in (
        ('epsilon_one_run', 'ε_one-run',
         '95% lower bound, whatever the mechanism'),
        ('epsilon_lo_tight_any', 'ε_tight-any',
         '95% lower bound, whatever the mechanism'),
        ('epsilon_one_run_fdp', 'ε_one-run-fdp',
         "95% lower bound, only if the mechanism is Gaussian in the canary's "
         'direction'),
        ('epsilon_lo_tight_gdp', 'ε_tight-gdp',
         "95% lower bound, only if the mechanism is Gaussian in the canary's "
         'direction'),
        ('epsilon_lo_paper', "paper's ε_lo", 'nothing it can keep'),
        ('epsilon_est_fitted', "paper's ε_est", 'Gaussian canary scores')):
      assert details[label][name] == _g(getattr(threat, key)), (name, label)
      assert details[label]['what it assumes'].startswith(assumes), label
    assert details['how ε_est is computed'][name] == threat.epsilon_est_method
    attack = _table_with(text, 'AUROC')[name]
    assert attack['ε_gdp'] == _g(threat.epsilon_gdp)
    assert attack['GDP μ'] == _g(threat.gdp_mu)
    assert attack['AUROC'] == _g(threat.auroc)
    assert attack['TPR at FPR 1e-2'] == _g(threat.tpr_at_fpr['0.01'])
    assert attack['TPR at FPR 1e-3'] == _g(threat.tpr_at_fpr['0.001'])
  # The headline fields are not repeated among the details.
  assert {'ε_est', 'ε_lo', '95% bootstrap interval of the estimate'
         }.isdisjoint(details)


_OPENING = (r'^(Final model|All iterates) \(k = (\d+) seen (?:canaries '
            r'against the exact null|against m = (\d+) unseen canaries)\): ')
_BOUND = (r"with 95% confidence this run's mechanism has ε ≥ (\S+) at "
          r'δ = (\S+) \(ε_lo, which holds whatever the mechanism\)')
_ANALYTICAL = r'analytical ε (\S+)\.$'
_SENTENCE = re.compile(
    _OPENING + _BOUND + r'; the estimate ε_est is (\S+) \(95% bootstrap '
    r'interval of the estimate (\S+)–(\S+)\); ' + _ANALYTICAL)
_SATURATED_SENTENCE = re.compile(
    _OPENING + r'these canaries cannot support an estimate: ε_est is at '
    r'least (\S+), the most (\d+) \+ (\d+) canaries can show at this δ; ' +
    _BOUND + '; ' + _ANALYTICAL)


def _shows(cell, value):
  """A 4-significant-digit cell shows `value` (None: infinity)."""
  if value is None:
    return cell == '∞'
  return abs(float(cell) - value) <= 5e-4 * abs(value)


@pytest.mark.parametrize('case', sorted(_round_trip_cases()))
def test_the_report_opens_with_sentences_of_report_jsons_numbers(case):
  report = _build(**_round_trip_cases()[case])
  parsed = json.loads(report.to_json())
  first, blank, *lines = report.to_markdown().splitlines()
  # The first line names the canaries and what each measured.
  assert first.startswith('**Canaries:** gradient canaries (') and not blank
  models = [('Final model', 'final', 'final')]
  if parsed['all_iterates'] is not None:
    models.append(('All iterates', 'all', 'all_iterates'))
  for i, (name, suffix, key) in enumerate(models):
    threat = parsed[key]
    line = lines[2 * i]
    if threat['epsilon_est_saturated']:
      match = _SATURATED_SENTENCE.match(line)
      assert match, line
      assert (match[5], match[6]) == (str(threat['num_seen']),
                                      str(threat['num_unseen']))
      cells = {'bound': match[7], 'delta': match[8], 'estimate': match[4],
               'analytical': match[9]}
    else:
      match = _SENTENCE.match(line)
      assert match, line
      low, high = parsed[f'epsilon_est_interval_{suffix}']
      assert _shows(match[7], low) and _shows(match[8], high), line
      cells = {'bound': match[4], 'delta': match[5], 'estimate': match[6],
               'analytical': match[9]}
    assert match[1] == name
    assert match[2] == str(threat['num_seen'])
    assert match[3] == (None if suffix == 'final' else
                        str(threat['num_unseen']))
    for cell, value in ((cells['estimate'], parsed[f'epsilon_est_{suffix}']),
                        (cells['bound'], parsed[f'epsilon_lo_{suffix}']),
                        (cells['analytical'], parsed['analytical_epsilon'])):
      assert _shows(cell, value), (name, cell, value)
    assert float(cells['delta']) == pytest.approx(parsed['delta'], rel=5e-3)
  assert not _SENTENCE.match(lines[2 * len(models)])
  assert not _SATURATED_SENTENCE.match(lines[2 * len(models)])


# The lower bounds, as report.json names them, and those that hold only if
# the mechanism is Gaussian in the canary's direction.
_BOUNDS = ('epsilon_lo', 'epsilon_one_run', 'epsilon_one_run_fdp',
           'epsilon_lo_tight_any', 'epsilon_lo_tight_gdp',
           'epsilon_lo_gauss_pair', 'epsilon_lo_gdp_thresholds')
_GAUSSIAN_BOUNDS = ('epsilon_one_run_fdp', 'epsilon_lo_tight_gdp',
                    'epsilon_lo_gauss_pair', 'epsilon_lo_gdp_thresholds')
_IF_GAUSSIAN = "if the mechanism is Gaussian in the canary's direction"


def _with_bound(report, threat_name, key, value):
  threat = dataclasses.replace(getattr(report, threat_name), **{key: value})
  return dataclasses.replace(report, **{threat_name: threat})


def _bound_reports():
  """Reports with and without a lower bound above their estimate."""
  reports = {case: _build(**kwargs)
             for case, kwargs in _round_trip_cases().items()}
  base = reports['all iterates, sampled']
  final = base.final
  below = dataclasses.replace(base, final=dataclasses.replace(
      final, **{key: 0.5 * final.epsilon_est for key in _BOUNDS}))
  below = dataclasses.replace(below, all_iterates=dataclasses.replace(
      base.all_iterates, **{key: 0.5 * base.all_iterates.epsilon_est
                            for key in _BOUNDS}))
  reports['every bound below'] = below
  reports['tight-any above, final'] = _with_bound(
      below, 'final', 'epsilon_lo_tight_any', 2 * final.epsilon_est)
  reports['equal is not above'] = _with_bound(
      below, 'final', 'epsilon_one_run', final.epsilon_est)
  reports['gdp above, all'] = _with_bound(
      below, 'all_iterates', 'epsilon_lo_tight_gdp',
      1.5 * base.all_iterates.epsilon_est)
  # The nominal bound holds nothing: above the estimate, no note.
  reports['nominal above'] = _with_bound(
      below, 'final', 'epsilon_lo_paper', 3 * final.epsilon_est)
  return reports


@pytest.mark.parametrize('case', sorted(_bound_reports()))
def test_the_note_appears_exactly_when_a_bound_exceeds_the_estimate(case):
  report = _bound_reports()[case]
  parsed = json.loads(report.to_json())
  # A saturated estimate ('≥', the most the canaries can show) is not
  # exceeded by a bound: no note.
  above = [(suffix, key) for suffix in ('final', 'all')
           for key in _BOUNDS
           if parsed[f'{key}_{suffix}'] is not None and
           parsed[f'epsilon_est_{suffix}'] is not None and
           not (parsed.get({'final': 'final', 'all': 'all_iterates'}[suffix])
                or {}).get('epsilon_est_saturated') and
           parsed[f'{key}_{suffix}'] > parsed[f'epsilon_est_{suffix}']]
  text = report.to_markdown()
  assert text.count('A lower bound exceeds the estimate') == (
      1 if above else 0), case
  assert text.count('the canaries enter at different clips') == (
      1 if above else 0)
  if case in ('tight-any above, final', 'gdp above, all'):
    assert above
  if case in ('every bound below', 'equal is not above', 'nominal above'):
    assert not above
  note = next((line for line in text.splitlines()
               if line.startswith('A lower bound exceeds')), '')
  assert note.count(' > ε_est ') == len(above)
  # Each bound of the Gaussian family is named with its condition.
  assert note.count(_IF_GAUSSIAN) == len(
      [key for _, key in above if key in _GAUSSIAN_BOUNDS])


def test_training_notes_are_shown_and_kept_in_report_json():
  notes = ('The adaptive clip grew from 0.1 (round 1) to 50 (round 9).',
           'The training loss became nan in round 9.')
  report = _build(**_round_trip_cases()['all iterates, sampled'], notes=notes)
  parsed = json.loads(report.to_json())
  assert parsed['notes'] == list(notes)
  assert run_report.RunReport.from_dict(parsed) == report
  text = report.to_markdown()
  for note in notes:
    assert text.count(f'**Training health:** {note}') == 1
  # Written before notes existed: none; a healthy run shows none.
  del parsed['notes']
  assert run_report.RunReport.from_dict(parsed).notes == ()
  healthy = _build(**_round_trip_cases()['all iterates, sampled'])
  assert json.loads(healthy.to_json())['notes'] == []
  assert 'Training health' not in healthy.to_markdown()


def test_every_repeated_field_is_at_the_top_level_and_older_reports_load():
  report = _build(**_round_trip_cases()['all iterates, sampled'])
  fields = report.to_dict()
  for key in ('epsilon_est', 'epsilon_lo', 'epsilon_one_run_fdp', 'auroc',
              'epsilon_lo_tight_any', 'epsilon_lo_tight_gdp'):
    assert fields[f'{key}_final'] == fields['final'][key]
    assert fields[f'{key}_all'] == fields['all_iterates'][key]
  for key in ('epsilon_est_method', 'epsilon_est_saturated',
              'anderson_seen'):
    assert f'{key}_final' not in fields
  # A report written before the tight bounds existed: they read as None.
  old = {key: value for key, value in fields.items()
         if not key.startswith('epsilon_lo_tight')}
  for threat in ('final', 'all_iterates'):
    old[threat] = {key: value for key, value in fields[threat].items()
                   if not key.startswith('epsilon_lo_tight')}
  back = run_report.RunReport.from_dict(old)
  assert back.final.epsilon_lo_tight_any is None
  assert back.all_iterates.epsilon_lo_tight_gdp is None
  assert back.final.epsilon_lo == report.final.epsilon_lo
  with pytest.raises(ValueError, match='epsilon_lo_all'):
    run_report.RunReport.from_dict(
        {key: value for key, value in old.items() if key != 'epsilon_lo_all'})


def test_decorrelated_scores_get_a_report_of_their_own():
  dim = 10**5
  seen = np.random.default_rng(40).normal(3.0, 1.0, 400)
  unseen = np.random.default_rng(41).normal(0.0, 1.0, 400)
  common = dict(
      final_cosines=_cosines(42, 2.0), dim=dim, delta=1e-5,
      noise_multiplier=0.7, rounds=20,
      correlated=dp_fedavg.CorrelatedNoise('banded', sensitivity=1.8,
                                           canary_column_norm=1.2,
                                           coefs=_SCALED_IDENTITY),
      mechanism=mechanisms.MatrixFactorization('banded', 4),
      seen_maxima=_cosines(43, 3.0), unseen_maxima=_cosines(44, 0.0))
  report = _build(**common, decorrelated_scores=(seen, unseen))
  # One common factor, sqrt(d) here, brings the scores into [-1, 1].
  scale = math.sqrt(dim)
  assert report.all_iterates_decorrelated == privacy_report.all_iterates_report(
      seen / scale, unseen / scale, 1e-5, dim=dim)
  parsed = json.loads(report.to_json())
  assert parsed['epsilon_lo_all_decorrelated'] == (
      report.all_iterates_decorrelated.epsilon_lo)
  assert run_report.RunReport.from_dict(parsed) == report
  assert '| all iterates, decorrelated | ' in report.to_markdown()
  # Empty decorrelated scores: omitted, as without them.
  omitted = _build(**common, decorrelated_scores=(_EMPTY, _EMPTY))
  assert omitted.all_iterates_decorrelated is None
  assert 'all_iterates_decorrelated' not in omitted.to_dict()


def test_a_frameworks_own_epsilon_stands_beside_the_accounted_one():
  # Without one (every engine but an accounted Flower run), nothing changes.
  plain = _build(**_round_trip_cases()['all iterates, sampled'])
  assert plain.framework_epsilon is None
  assert 'framework_epsilon' not in plain.to_dict()
  assert "framework's own" not in plain.to_markdown()
  outcome = canary_spec.CanaryOutcome(
      final_cosines=_cosines(10, 2.0), final_unseen_cosines=_EMPTY,
      seen_maxima=_EMPTY, unseen_maxima=_EMPTY, accuracy=math.nan,
      dim=10**5, resumed_from_round=0, rounds_trained=0)
  facts = references.RunFacts(noise_multiplier=1.5, delta=1e-5, dim=10**5,
                              rounds=8)
  flower = dp_fedavg.MechanismEpsilon(
      9.98, "Flower's RdpAccountant (rdp, no-amplification): 8 releases")
  report = run_report.build_run_report(outcome, facts, mechanisms.Gaussian(),
                                       framework_epsilon=flower)
  assert (report.framework_epsilon, report.framework_mechanism) == (
      9.98, flower.mechanism)
  assert dataclasses.replace(
      report, framework_epsilon=None, framework_mechanism=None) == (
          run_report.build_run_report(outcome, facts, mechanisms.Gaussian()))
  parsed = json.loads(report.to_json())
  assert (parsed['framework_epsilon'],
          parsed['framework_epsilon_mechanism']) == (9.98, flower.mechanism)
  assert run_report.RunReport.from_dict(parsed) == report
  lines = report.to_markdown().splitlines()
  at = next(i for i, line in enumerate(lines)
            if line.startswith('| accounted ε (real client) |'))
  assert lines[at + 1] == ("| framework's own accounted ε (real client) | "
                           f'9.98 | {flower.mechanism} |')
  # Infinite (no noise) stays apart from absent, as the other references.
  endless = dataclasses.replace(report, framework_epsilon=math.inf)
  assert math.isinf(run_report.RunReport.from_dict(
      json.loads(endless.to_json())).framework_epsilon)
  del parsed['framework_epsilon']
  with pytest.raises(ValueError, match="missing keys \\['framework_epsilon'"):
    run_report.RunReport.from_dict(parsed)


def _every_field_set():
  """A report with every field of every threat model set, the Gaussian
  family's bounds above the estimate and every bound for any mechanism."""
  base = _build(**_round_trip_cases()['all iterates, sampled'])
  base = dataclasses.replace(base, all_iterates_decorrelated=base.all_iterates)
  threats = {}
  for name in ('final', 'all_iterates', 'all_iterates_decorrelated'):
    threat = getattr(base, name)
    top = max([threat.epsilon_est] + [
        getattr(threat, key) for key in _BOUNDS if key not in _GAUSSIAN_BOUNDS])
    threats[name] = dataclasses.replace(threat, **{
        key: (2 + index) * top for index, key in enumerate(_GAUSSIAN_BOUNDS)})
  return dataclasses.replace(base, **threats)


def test_every_field_is_set_in_the_sentences_report():
  report = _every_field_set()
  for name, threat in (('final', report.final),
                       ('all', report.all_iterates),
                       ('all', report.all_iterates_decorrelated)):
    unset = [field.key for field in report_fields.FIELDS
             if name in field.threat_models and
             getattr(threat, field.key) is None]
    assert not unset, (name, unset)


def test_the_gaussian_familys_bounds_are_never_said_to_hold_bare():
  assert set(report_sentences.GAUSSIAN_BOUNDS) == {
      field.key for field in report_sentences.conditional_fields()}
  report = _every_field_set()
  text = report.to_markdown()
  assert report_sentences.unconditional_claims(text) == []
  labels = {report_fields.by_key(key).label
            for key in report_sentences.GAUSSIAN_BOUNDS}
  assert report_sentences.named_with_condition(text) == labels
  # Each Gaussian bound above every bound for any mechanism is said to
  # rest on the assumption alone, once per threat model.
  notes = [line for line in text.splitlines()
           if 'carries the difference' in line]
  assert [line.split(':')[0] for line in notes] == [
      'Final model', 'All iterates', 'All iterates, decorrelated']
  for line in notes:
    assert all(label in line for label in labels), line
  # The note on bounds above the estimate names each with its condition.
  note = next(line for line in text.splitlines()
              if line.startswith('A lower bound exceeds'))
  assert note.count(_IF_GAUSSIAN) == 3 * len(_GAUSSIAN_BOUNDS)


@pytest.mark.parametrize('text', [
    'ε_lo and ε_one-run-fdp hold at 95%.',
    '| ε_gauss-pair | 2.1 | 95% lower bound |',
    'At 95%, ε_lo, ε_tight-gdp (Xiang et al., 2025) and\nε_one-run hold.',
])
def test_a_bare_claim_is_caught(text):
  assert report_sentences.unconditional_claims(text)


def test_a_sentence_on_the_bound_for_any_mechanism_is_no_claim():
  # ε_one-run is not ε_one-run-fdp; the paper's nominal ε_lo is no bound.
  assert report_sentences.unconditional_claims(
      'ε_one-run holds. Nothing here: ε_gdp-thresholds 2.') == []


def test_a_bound_refused_below_its_dimension_says_why():
  dim = 2000  # Below gaussian_pair.MIN_FINAL_DIM = 10,000.
  report = _build(final_cosines=_cosines(50, 2.0, dim=dim), dim=dim,
                  delta=1e-5, noise_multiplier=1.0)
  assert report.final.epsilon_lo_gauss_pair is None
  text = report.to_markdown()
  assert _table_with(text, 'what it assumes', 'statistic')['ε_gauss-pair'][
      'final model'] == 'n/a'
  assert ('n/a: ε_gauss-pair, final model: d = 2000 is below 10,000, where '
          "the cosines' laws are too far from Gaussian for it "
          '(docs/bounds.md).') in text
