"""Tests of one_shot_epe.privacy_report: each field against the module it comes from.

The robust summaries (GDP, bootstrap interval, AUROC, TPR) are tested against
simulation in attack_metrics_test.py.
"""

import json

import numpy as np
import pytest
from scipy import stats

from one_shot_epe import estimation as est
from one_shot_epe import lower_bound
from one_shot_epe import privacy_report


def test_reports_bundle_estimates_and_serialise():
  rng = np.random.default_rng(8)
  dim = 10**6
  cos = rng.normal(1e-3, 1e-3, 1000)
  report = privacy_report.final_model_report(cos, dim, 1e-6)
  assert report.epsilon_est == est.epsilon_from_final_cosines(cos, dim, 1e-6)
  assert report.epsilon_lo == lower_bound.epsilon_lower_bound(
      cos, dim=dim, delta=1e-6)
  assert report.null_std == pytest.approx(1e-3)
  assert json.loads(report.to_json())['epsilon_est'] == report.epsilon_est
  unseen = rng.normal(0, 1e-3, 1000)
  all_report = privacy_report.all_iterates_report(cos, unseen, 1e-6)
  assert all_report.epsilon_est == est.epsilon_from_seen_unseen(
      cos, unseen, 1e-6)
  assert all_report.anderson_unseen == pytest.approx(
      stats.anderson(unseen).statistic)
