"""Tests of experiments/compare_canife.py (Sec. 5.4 comparison program).

Truths: dp_accounting called directly for the analytical epsilons; the
per-run JSON numbers, averaged here, for the printed summary rows; the
program's own exit status and messages for bad flags.
"""

import json
import os
import subprocess
import sys

from absl import flags
import dp_accounting
import numpy as np
import pytest

from experiments import canife_runs
from experiments import compare_canife
from experiments.baselines import canife
from experiments.baselines import dpsgd
from one_shot_epe.design import canary_spec
from one_shot_epe.stats import estimation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_tiny_comparison_runs_both_methods_on_one_training(tmp_path):
  setting = canife_runs.Setting(
      data='synthetic', synthetic_num_train=512, synthetic_num_test=64,
      hidden_units=4,
      training=dpsgd.TrainingConfig(batch_size=64, num_seen=20, num_unseen=20,
                                    buffer_rounds=4),
      audit_every=4, design_pool_size=16,
      canife_config=canife.CanifeConfig(design_steps=10, num_mock_rounds=10),
      num_runs=2, seed=1)
  data = canife_runs.load_data(setting)
  report, details = compare_canife.run(setting, data, str(tmp_path / 'runs'))
  print(report)
  details = json.loads(details)
  # Each run's one-shot reports are also written as a training run's.
  for i, run in enumerate(details['runs']):
    run_dir = tmp_path / 'runs' / f'run_{i}'
    assert {'final_cosines.csv', 'max_cosines.csv', 'report.md',
            'cosine_densities.png'} < set(os.listdir(run_dir))
    written = json.loads((run_dir / 'report.json').read_text())
    assert written['final'] == run['one_shot_final']
    assert written['all_iterates'] == run['one_shot_all']
    assert written['setting']['run'] == i
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
    assert run['one_shot_final']['threat_model'] == 'final'
    assert run['canary_presentations'] == [0, 20]  # Each exactly once.
    assert run['canife_capped_epsilon'] <= run['canife_epsilon']
  assert details['runs'][0]['seed'] != details['runs'][1]['seed']
  assert details['canary_insertion'] == 'once'
  assert details['setting']['training']['canary_insertion'] == 'once'
  assert '| CANIFE eps_hat (Alg. 2;' in report
  assert '| **one-shot, all iterates' in report
  assert '| **one-shot, final model' in report
  assert f'| {canife_runs.PAPER_ANALYTICAL_EPSILON} |' in report
  _check_summary_rows(report, details)


def _mean_std(values):
  values = np.asarray(values, np.float64)
  return f'{values.mean():.3g} ± {values.std(ddof=1):.3g}'


def _check_summary_rows(report, details):
  """Each one-shot summary row is the mean ± std of the per-run JSON values."""
  rows = [line.split(' | ') for line in report.splitlines()
          if line.startswith('| ')]
  for field, title in (('one_shot_all', 'all iterates'),
                       ('one_shot_final', 'final model')):
    runs = [run[field] for run in details['runs']]
    start = next(i for i, row in enumerate(rows)
                 if row[0].startswith(f'| **one-shot, {title}'))
    block = rows[start:start + 12]
    assert block[0][1] == _mean_std([r['epsilon_est_fitted'] for r in runs])
    assert block[1][1] == _mean_std([r['epsilon_est'] for r in runs])
    assert block[2][1] == (
        f'[{_mean_std([r["epsilon_est_interval"][0] for r in runs])}, '
        f'{_mean_std([r["epsilon_est_interval"][1] for r in runs])}]')
    assert block[3][1] == _mean_std([r['epsilon_gdp'] for r in runs])
    assert block[4][1] == _mean_std([r['gdp_mu'] for r in runs])
    assert block[5][1] == _mean_std([r['auroc'] for r in runs])
    assert block[6][1] == _mean_std([r['tpr_at_fpr']['0.01'] for r in runs])
    assert block[7][1] == _mean_std([r['tpr_at_fpr']['0.001'] for r in runs])
    assert block[8][1] == _mean_std([r['epsilon_lo'] for r in runs])
    assert block[9][1] == (
        f'{_mean_std([r["epsilon_one_run"] for r in runs])} / '
        f'{_mean_std([r["epsilon_one_run_fdp"] for r in runs])}')
    assert block[10][1] == _mean_std([r['epsilon_lo_paper'] for r in runs])
    assert 'eps_lo' in block[8][0] and 'FPR 0.001' in block[7][0]
    paper = block[0][2]
    assert paper == ('6.76 ± 1.06 (Sec. 5.4)' if field == 'one_shot_all'
                     else '—')


def _run_program(*args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run(
      [sys.executable, '-m', 'experiments.compare_canife', *args], cwd=REPO,
      env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_quick_config_prints_every_estimate_and_records_insertion(tmp_path):
  output = tmp_path / 'details.json'
  result = _run_program('--flagfile=configs/compare_canife_quick.cfg',
                        f'--output_json={output}')
  assert result.returncode == 0, result.stderr[-2000:]
  for row in ('| analytical eps, one unamplified Gaussian release',
              '| — the same release, exact',
              '| accounted eps of real clients: RDP of 32 Poisson-subsampled',
              '| **one-shot, all iterates', '| **one-shot, final model',
              '| — headline eps_est, 95% bootstrap interval of the estimate',
              '| — eps_gdp',
              '| — attack AUROC', '| — attack TPR at FPR 0.01',
              '| — attack TPR at FPR 0.001', '| — eps_lo', '| — one-run eps',
              "| — paper's eps_lo"):
    assert row in result.stdout
  assert result.stdout.count('| — eps_gdp') == 2  # Both threat models.
  details = json.loads(output.read_text())
  assert details['canary_insertion'] == 'once'
  for run in details['runs']:
    assert run['canary_presentations'] == [0, 200]
  # Noise 0.2 at delta = 1/4000: RDP's 34-odd against the exact value.
  assert details['analytical_epsilon_single_release_exact'] == pytest.approx(
      estimation.gaussian_epsilon(0.2, 1 / 4000), rel=1e-12)
  assert (details['analytical_epsilon_single_release_exact'] <
          details['analytical_epsilon_single_release'])


@pytest.mark.parametrize('args, flag', [
    (['--canary_insertion=twice'], '--canary_insertion'),
    (['--noise_multiplier=-1'], '--noise_multiplier'),
    (['--server_momentum=1.0'], '--server_momentum'),
    (['--canary_statistic=final'], '--canary_statistic'),
    (['--all_iterates_statistic=update'], '--all_iterates_statistic'),
    (['--num_seen=1'], '--num_seen'),
    (['--clipping_norm=0'], '--clipping_norm'),
    (['--canife_threshold=mean'], '--canife_threshold'),
    (['--data=real', '--data_dir=/nonexistent/fmnist'], '--data_dir'),
    (['--data=synthetic', '--synthetic_num_train=500',
      '--synthetic_num_test=100'], '--design_pool_size'),
])
def test_bad_flags_exit_2_naming_the_flag(args, flag):
  result = _run_program(*args)
  assert result.returncode == 2, result.stderr[-2000:]
  assert flag in result.stderr
  assert 'Traceback' not in result.stderr



def _setting(*args):
  values = flags.FlagValues()
  compare_canife.define_flags(values)
  values(['compare_canife', '--data=synthetic', *args])
  return compare_canife.setting_from_flags(values)


def test_the_launchers_flag_names_set_the_training(capsys):
  training = _setting('--clipping_norm=0.5', '--num_canaries=30',
                      '--num_unseen_canaries=40', '--canary_buffer_rounds=8',
                      '--all_iterates_statistic=model_delta').training
  assert (training.clip, training.num_seen, training.num_unseen,
          training.buffer_rounds, training.statistic) == (
              0.5, 30, 40, 8, 'model_delta')
  assert capsys.readouterr().err == ''
  values = flags.FlagValues()
  compare_canife.define_flags(values)
  assert values['all_iterates_statistic'].parser.enum_values == list(
      canary_spec.ALL_ITERATES_STATISTICS)
  # The launcher's 'aggregate' is the noised update, DP-SGD's default.
  assert _setting('--all_iterates_statistic=aggregate').training.statistic == (
      'update') == dpsgd.TrainingConfig().statistic


@pytest.mark.parametrize('old, new, field, value, expected', [
    ('clip', 'clipping_norm', 'clip', '0.5', 0.5),
    ('num_seen', 'num_canaries', 'num_seen', '30', 30),
    ('num_unseen', 'num_unseen_canaries', 'num_unseen', '40', 40),
    ('buffer_rounds', 'canary_buffer_rounds', 'buffer_rounds', '8', 8),
    ('canary_statistic', 'all_iterates_statistic', 'statistic',
     'model_delta', 'model_delta'),
])
def test_a_former_flag_name_still_works_and_prints_one_line(
    capsys, old, new, field, value, expected):
  assert compare_canife.DEPRECATED_FLAGS[old] == new
  training = _setting(f'--{old}={value}').training
  assert getattr(training, field) == expected
  assert capsys.readouterr().err == f'--{old} is deprecated; use --{new}\n'


def test_a_former_and_a_new_name_together_exit_2(capsys):
  with pytest.raises(SystemExit) as exit_info:
    _setting('--num_seen=30', '--num_canaries=40')
  assert exit_info.value.code == 2
  assert '--num_seen' in capsys.readouterr().err
