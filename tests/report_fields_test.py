"""Tests of one_shot_epe.reporting.report_fields: the report's field entries.

Truths: the report's own dataclass fields and JSON, the statistics modules
called directly, and tables rendered from a stand-in report with a field
added for the test (a new entry must show up under its label alone).
"""

import dataclasses
import json
import math
import types

import numpy as np
import pytest

from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_markdown
from one_shot_epe.stats import estimation
from one_shot_epe.stats import tight_audit

_FACTS = ('threat_model', 'dim', 'delta', 'alpha', 'num_seen', 'num_unseen',
          'seen_mean', 'seen_std', 'null_mean', 'null_std', 'canary_kind')


def _scores(seed, mean, size=400, dim=10**5):
  return np.random.default_rng(seed).normal(mean, 1.0, size) / math.sqrt(dim)


def test_the_reports_fields_are_the_facts_then_the_entries():
  names = [field.name for field in dataclasses.fields(
      privacy_report.PrivacyReport)]
  assert names == list(_FACTS) + [field.key for field in report_fields.FIELDS]
  keys = [field.key for field in report_fields.FIELDS]
  assert len(set(keys)) == len(keys)
  labels = [column.header() for field in report_fields.FIELDS
            for column in field.columns()]
  assert len(set(labels)) == len(labels)
  # Everything from epsilon_est on is an entry: the estimates, bounds,
  # nominal bound, attack summaries and Anderson-Darling statistics.
  assert {'epsilon_est', 'epsilon_lo', 'epsilon_lo_paper', 'tpr_at_fpr',
          'anderson_unseen', 'epsilon_lo_tight_gdp'} <= set(keys)


def test_each_field_is_computed_for_its_threat_models_only():
  dim = 10**5
  seen, unseen = _scores(1, 3.0), _scores(2, 0.0)
  final = privacy_report.final_model_report(seen, dim, 1e-5, unseen=unseen,
                                            bootstrap_resamples=20)
  every = privacy_report.all_iterates_report(seen, unseen, 1e-5,
                                             bootstrap_resamples=20)
  unseen_fit = report_fields.by_key('anderson_unseen')
  assert unseen_fit.threat_models == ('all',)
  assert final.anderson_unseen is None
  assert every.anderson_unseen == pytest.approx(
      estimation.anderson_darling(unseen))
  # The tight channel bound: against the exact null for the final model,
  # by the one-run game for all iterates.
  assert every.epsilon_lo_tight_any == tight_audit.epsilon_lo_tight(
      seen, unseen, delta=1e-5, family='channel')
  assert final.epsilon_lo_tight_any != every.epsilon_lo_tight_any


def test_shared_intermediates_are_computed_once(monkeypatch):
  fits = []
  fit_gaussian = estimation.fit_gaussian

  def counted(sample, name):
    fits.append(name)
    return fit_gaussian(sample, name)

  monkeypatch.setattr(estimation, 'fit_gaussian', counted)
  privacy_report.final_model_report(_scores(3, 2.0), 10**5, 1e-5,
                                    bootstrap_resamples=20)
  assert fits == ['cosines']
  fits.clear()
  privacy_report.all_iterates_report(_scores(4, 2.0), _scores(5, 0.0), 1e-5,
                                     bootstrap_resamples=20)
  assert fits == ['seen', 'unseen']


def test_old_reports_read_each_later_field_as_its_default():
  report = privacy_report.all_iterates_report(
      _scores(6, 2.0), _scores(7, 0.0), 1e-5, bootstrap_resamples=20)
  later = [field for field in report_fields.FIELDS
           if field.old_default is not report_fields.REQUIRED]
  assert {'epsilon_lo_tight_any', 'epsilon_lo_tight_gdp'} <= {
      field.key for field in later}
  fields = json.loads(report.to_json())
  for field in later:
    del fields[field.key]
  old = privacy_report.PrivacyReport.from_dict(fields)
  assert old == dataclasses.replace(
      report, **{field.key: field.old_default for field in later})
  del fields['auroc']  # Every report has held the AUROC.
  with pytest.raises(ValueError, match=r"missing \['auroc'\]"):
    privacy_report.PrivacyReport.from_dict(fields)


def test_tables_order_bounds_for_any_mechanism_before_gaussian_ones():
  bounds = report_fields.in_groups('lower bounds', 'nominal')
  families = [field.assumes for field in bounds]
  assert families == sorted(families, key=report_fields.FAMILIES.index)
  keys = [field.key for field in bounds]
  known = ['epsilon_lo', 'epsilon_one_run', 'epsilon_lo_tight_any',
           'epsilon_one_run_fdp', 'epsilon_lo_tight_gdp', 'epsilon_lo_paper']
  assert [key for key in keys if key in known] == known
  with pytest.raises(ValueError, match='unknown group'):
    report_fields.in_groups('bounds')


def test_columns_and_cells():
  assert [report_fields.number_cell(v) for v in (None, math.inf, 1 / 3)] == [
      'n/a', '∞', '0.3333']
  fdp = report_fields.by_key('epsilon_one_run_fdp').columns()[0]
  assert fdp.header('-all') == 'ε_one-run-fdp-all (Gaussian)'
  rates = report_fields.by_key('tpr_at_fpr').columns()
  assert [column.header() for column in rates] == ['TPR at FPR 1e-2',
                                                   'TPR at FPR 1e-3']
  threat = types.SimpleNamespace(tpr_at_fpr={'0.01': 0.5, '0.001': 0.25},
                                 epsilon_est=2.0, epsilon_est_saturated=True)
  assert [column.cell(threat) for column in rates] == ['0.5', '0.25']
  assert [column.cell(None) for column in rates] == ['n/a', 'n/a']
  estimate = report_fields.by_key('epsilon_est').columns()[0]
  assert estimate.cell(threat) == '≥2'
  assert report_fields.by_key('epsilon_est_saturated').columns() == ()
  with pytest.raises(KeyError):
    report_fields.by_key('epsilon_nothing')


@pytest.mark.parametrize('change,message', [
    (dict(group='bounds'), 'group'),
    (dict(layout='bar'), 'layout'),
    (dict(summary=('final',)), 'summary'),
    (dict(short='x'), 'summary'),
    (dict(threat_models=('all',), summary=('final',), short='x'), 'summary'),
])
def test_a_malformed_entry_is_refused(change, message):
  entry = dict(key='toy', label='ε_toy', group='lower bounds',
               threat_models=report_fields.THREAT_MODELS,
               assumes=report_fields.ANY_MECHANISM,
               compute=lambda scores: 0.0)
  with pytest.raises(ValueError, match=message):
    report_fields.ReportField(**{**entry, **change})


def test_a_new_entry_shows_in_its_groups_table_under_its_label(monkeypatch):
  toy = report_fields.ReportField(
      'epsilon_toy', 'ε_toy', 'lower bounds', report_fields.THREAT_MODELS,
      report_fields.GAUSSIAN, lambda scores: 1.5)
  monkeypatch.setattr(report_fields, 'FIELDS',
                      report_fields.FIELDS + (toy,))
  threat = types.SimpleNamespace(**{
      field.key: 0.125 for field in report_fields.FIELDS})
  lines = run_markdown.threat_table(['lower bounds'], [('final model',
                                                        threat)])
  headers = [cell.strip() for cell in lines[0].strip('|').split('|')]
  cells = [cell.strip() for cell in lines[2].strip('|').split('|')]
  assert dict(zip(headers, cells))['ε_toy (Gaussian)'] == '0.125'
  # After the bounds for any mechanism, with the Gaussian ones.
  assert headers.index('ε_toy (Gaussian)') > headers.index('ε_tight-any')
