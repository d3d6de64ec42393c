"""Tests of experiments/compare_canife.py (Sec. 5.4 comparison program).

Truths: dp_accounting called directly for the analytical epsilons; the
program's own exit status and messages for bad flags.
"""

import json
import os
import subprocess
import sys

import dp_accounting
import pytest

from experiments import compare_canife
from one_shot_epe.baselines import canife
from one_shot_epe.baselines import dpsgd

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tiny_comparison_runs_both_methods_on_one_training():
  setting = compare_canife.Setting(
      data='synthetic', synthetic_num_train=512, synthetic_num_test=64,
      hidden_units=4,
      training=dpsgd.TrainingConfig(batch_size=64, num_seen=20, num_unseen=20,
                                    buffer_rounds=4),
      audit_every=4, design_pool_size=16,
      canife_config=canife.CanifeConfig(design_steps=10, num_mock_rounds=10),
      num_runs=2, seed=1)
  data = compare_canife.load_data(setting)
  report, details = compare_canife.run(setting, data)
  print(report)
  details = json.loads(details)
  delta = 1 / 512
  single = dp_accounting.rdp.RdpAccountant()
  single.compose(dp_accounting.GaussianDpEvent(0.2))
  composed = dp_accounting.rdp.RdpAccountant()
  composed.compose(dp_accounting.PoissonSampledDpEvent(
      64 / 512, dp_accounting.GaussianDpEvent(0.2)), 8)
  assert details['analytical_epsilon_single_release'] == pytest.approx(
      single.get_epsilon(delta))
  assert details['analytical_epsilon_poisson_rdp'] == pytest.approx(
      composed.get_epsilon(delta))
  assert len(details['runs']) == 2
  for run in details['runs']:
    assert len(run['audits']) == 2  # Rounds 0 and 4 of 8.
    assert run['canife_estimate']['round_counts'] == [4, 4]
    assert run['one_shot_all']['num_seen'] == 20
    assert run['canife_capped_epsilon'] <= run['canife_epsilon']
  assert details['runs'][0]['seed'] != details['runs'][1]['seed']
  assert '| CANIFE eps_hat (Alg. 2;' in report
  assert '| one-shot eps_est, all iterates' in report


def _run_program(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run(
      [sys.executable, '-m', 'experiments.compare_canife', *args], cwd=REPO,
      env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize('args, flag', [
    (['--noise_multiplier=-1'], '--noise_multiplier'),
    (['--data=real', '--data_dir=/nonexistent/fmnist'], '--data_dir'),
    (['--data=synthetic', '--synthetic_num_train=500',
      '--synthetic_num_test=100'], '--design_pool_size'),
])
def test_bad_flags_exit_2_naming_the_flag(args, flag):
  result = _run_program(*args)
  assert result.returncode == 2, result.stderr[-2000:]
  assert flag in result.stderr
  assert 'Traceback' not in result.stderr

