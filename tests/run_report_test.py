"""Tests of the end-of-run privacy report."""

import json
import math

import numpy as np
import pytest

from one_shot_epe import estimation
from one_shot_epe import run_report


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
      final, dim, 1e-5)
  assert report.all_iterates.epsilon_est == estimation.epsilon_from_seen_unseen(
      seen, unseen, 1e-5)
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
])
def test_bad_arguments(kwargs, message):
  base = dict(final_cosines=_cosines(4, 1.0), dim=10**5, delta=1e-5,
              noise_multiplier=1.0)
  base.update(kwargs)
  with pytest.raises(ValueError, match=message):
    run_report.build_run_report(**base)
