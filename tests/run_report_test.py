"""Tests of the end-of-run privacy report."""

import json
import math

import dp_accounting
import numpy as np
import pytest

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.stats import estimation
from one_shot_epe.reporting import run_report


def _cosines(seed, mean, size=400, dim=10**5):
  return np.random.default_rng(seed).normal(mean, 1.0, size) / math.sqrt(dim)


def test_report_combines_both_threat_models():
  dim = 10**5
  final, seen, unseen = _cosines(0, 2.0), _cosines(1, 4.0), _cosines(2, 1.0)
  report = run_report.build_run_report(
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
  assert text.splitlines()[2].startswith('| 0.5 | ')
  assert '| task | emnist_character |' in text


def test_no_noise_means_infinite_analytical_epsilon(tmp_path):
  report = run_report.build_run_report(final_cosines=_cosines(3, 3.0),
                                       dim=10**5, delta=1e-5,
                                       noise_multiplier=0.0)
  assert math.isinf(report.analytical_epsilon)
  assert json.loads(report.to_json())['analytical_epsilon'] is None
  assert '| 0 | ∞ | n/a | n/a |' in report.to_markdown()
  report.write(str(tmp_path / 'r.json'), str(tmp_path / 'r.md'))
  assert json.loads((tmp_path / 'r.json').read_text())['epsilon_est_all'] is None


@pytest.mark.parametrize('kwargs,message', [
    (dict(noise_multiplier=-1.0), 'noise_multiplier'),
    (dict(seen_maxima=[0.1, 0.2]), 'both'),
    (dict(delta=2.0), 'delta'),
    (dict(canary_presentations=0), 'presentations'),
])
def test_bad_arguments(kwargs, message):
  base = dict(final_cosines=_cosines(4, 1.0), dim=10**5, delta=1e-5,
              noise_multiplier=1.0)
  base.update(kwargs)
  with pytest.raises(ValueError, match=message):
    run_report.build_run_report(**base)


def test_report_carries_both_bounds_with_their_mechanisms():
  dim = 10**5
  final, seen, unseen = _cosines(5, 2.0), _cosines(6, 4.0), _cosines(7, 1.0)
  participation = dp_fedavg.Participation('bernoulli', 20, 200, 30)
  report = run_report.build_run_report(
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
  assert (f'| final model | {report.final.epsilon_est:.4g} | [{low:.4g}, '
          f'{high:.4g}] | {report.final.epsilon_est_method} | '
          f'{report.final.epsilon_est_fitted:.4g} |') in text
  assert (f'| last-iterate heuristic ε (canary, final model) | '
          f'{report.last_iterate_epsilon:.4g} |') in text
  assert '| all iterates | ' in text


def test_a_saturated_estimate_is_marked_at_least():
  dim = 10**5
  seen = np.linspace(0.5, 0.6, 50)
  unseen = np.linspace(0.0, 0.1, 50)
  report = run_report.build_run_report(
      final_cosines=_cosines(9, 2.0), dim=dim, delta=1e-5,
      noise_multiplier=0.5, seen_maxima=seen, unseen_maxima=unseen)
  row = report.to_markdown().splitlines()[2]
  assert f'| ≥{report.all_iterates.epsilon_est:.4g} |' in row
  assert json.loads(report.to_json())['all_iterates']['epsilon_est_saturated']


def test_without_rounds_there_are_no_whole_run_references():
  report = run_report.build_run_report(final_cosines=_cosines(8, 2.0),
                                       dim=10**5, delta=1e-5,
                                       noise_multiplier=1.0)
  parsed = json.loads(report.to_json())
  assert parsed['accounted_epsilon'] is None
  assert parsed['accounted_epsilon_mechanism'] is None
  assert parsed['last_iterate_epsilon_mechanism'] is None
  assert parsed['epsilon_gdp_all'] is None
  assert 'accounted ε (real client)' not in report.to_markdown()


def test_without_sampling_a_client_is_accounted_in_every_round():
  report = run_report.build_run_report(final_cosines=_cosines(8, 2.0),
                                       dim=10**5, delta=1e-5,
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
  report = run_report.build_run_report(**_round_trip_cases()[case])
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
      run_report.build_run_report(**cases['no noise, with rounds']).to_json()))
  assert math.isinf(no_noise.analytical_epsilon)
  assert math.isinf(no_noise.accounted_epsilon)
  assert math.isinf(no_noise.last_iterate_epsilon)
  final_only = run_report.RunReport.from_dict(json.loads(
      run_report.build_run_report(**cases['final only']).to_json()))
  assert final_only.accounted_epsilon is None
  assert final_only.last_iterate_epsilon is None
  assert final_only.all_iterates is None
  assert final_only.accuracy is None


def test_from_dict_rejects_what_is_not_a_report(tmp_path):
  fields = json.loads(run_report.build_run_report(
      **_round_trip_cases()['final only']).to_json())
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


def test_correlated_noise_references_are_the_strategys():
  correlated = dp_fedavg.CorrelatedNoise('banded', sensitivity=1.8,
                                          canary_column_norm=1.2)
  report = run_report.build_run_report(
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
  assert report.last_iterate_mechanism is None
  assert run_report.RunReport.from_dict(report.to_dict()) == report
  # Without all-iterates maxima there is no statistic to qualify; with them
  # the report says what it estimates under correlated noise.
  assert 'all_iterates_under_correlated_noise' not in report.setting
  maxima = run_report.build_run_report(
      final_cosines=_cosines(4, 2.0), dim=10**5, delta=1e-5,
      noise_multiplier=0.7, rounds=20, correlated=correlated,
      mechanism=mechanisms.MatrixFactorization('banded', 4),
      seen_maxima=_cosines(4, 3.0), unseen_maxima=_cosines(4, 0.0),
      participation=dp_fedavg.Participation('shuffle', 5, 20, 20))
  assert maxima.setting['all_iterates_under_correlated_noise'] == (
      mechanisms.CORRELATED_ALL_ITERATES_NOTE)
  assert (maxima.setting['mechanism'], maxima.setting['num_bands']) == (
      'banded', 4)
