"""End-to-end tests of the `python -m one_shot_epe.reporting.epsilon_cli` command line."""

import json
import subprocess
import sys

import numpy as np
import pytest

from one_shot_epe.reporting import epsilon_cli
from one_shot_epe.reporting import privacy_report

import report_sentences


def _run(*args):
  return subprocess.run([sys.executable, '-m', 'one_shot_epe.reporting.epsilon_cli', *args],
                        capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(name='final_csv')
def _final_csv(tmp_path):
  rng = np.random.default_rng(0)
  values = rng.normal(2e-3, 1e-3, 500)
  path = tmp_path / 'final.csv'
  path.write_text('cosine\n' + '\n'.join(f'{v:.17g}' for v in values) + '\n')
  return path, values


def test_final_model_report_matches_library(final_csv):
  path, values = final_csv
  done = _run(f'--cosines={path}', '--dim=1000000', '--delta=1e-6',
              '--format=json')
  assert done.returncode == 0, done.stderr
  report = json.loads(done.stdout)
  expected = privacy_report.final_model_report(values, 10**6, 1e-6)
  assert report['epsilon_est'] == pytest.approx(expected.epsilon_est, rel=1e-12)
  assert report['epsilon_lo'] == pytest.approx(expected.epsilon_lo, rel=1e-12)
  assert report['threat_model'] == 'final'


def test_final_model_with_unseen_column_gives_one_run_bounds(tmp_path):
  rng = np.random.default_rng(2)
  seen, unseen = rng.normal(3e-3, 1e-3, 300), rng.normal(0.0, 1e-3, 200)
  lines = ['cosine,unseen'] + [
      f'{s!r},{unseen[i]!r}' if i < len(unseen) else f'{s!r},'
      for i, s in enumerate(seen)]
  path = tmp_path / 'final.csv'
  path.write_text('\n'.join(lines) + '\n')
  done = _run(f'--cosines={path}', '--dim=1000000', '--delta=1e-6',
              '--format=json')
  assert done.returncode == 0, done.stderr
  report = json.loads(done.stdout)
  expected = privacy_report.final_model_report(seen, 10**6, 1e-6,
                                               unseen=unseen)
  assert report['num_unseen'] == 200
  assert report['epsilon_one_run'] == pytest.approx(expected.epsilon_one_run,
                                                    rel=1e-12)
  assert report['epsilon_one_run_fdp'] == pytest.approx(
      expected.epsilon_one_run_fdp, rel=1e-12)


def test_seen_unseen_columns_of_different_length(tmp_path):
  rng = np.random.default_rng(1)
  seen, unseen = rng.normal(0.05, 0.01, 30), rng.normal(0.0, 0.01, 20)
  lines = ['seen,unseen'] + [
      f'{s},{unseen[i] if i < len(unseen) else ""}' for i, s in enumerate(seen)
  ]
  path = tmp_path / 'maxima.csv'
  path.write_text('\n'.join(lines) + '\n')
  done = _run(f'--cosines={path}', '--delta=1e-5')
  assert done.returncode == 0, done.stderr
  expected = privacy_report.all_iterates_report(seen, unseen, 1e-5)
  assert f'| epsilon_est | {expected.epsilon_est:.6g} |' in done.stdout


def test_the_printed_report_says_when_each_bound_holds(tmp_path):
  rng = np.random.default_rng(4)
  seen, unseen = rng.normal(3e-3, 1e-3, 300), rng.normal(0.0, 1e-3, 300)
  path = tmp_path / 'maxima.csv'
  path.write_text('seen,unseen\n' + '\n'.join(
      f'{a!r},{b!r}' for a, b in zip(seen, unseen)) + '\n')
  done = _run(f'--cosines={path}', '--delta=1e-5')
  assert done.returncode == 0, done.stderr
  expected = privacy_report.all_iterates_report(seen, unseen, 1e-5)
  low, high = expected.epsilon_est_interval
  assert done.stdout.startswith(
      'All iterates (k = 300 seen against m = 300 unseen canaries): with 95% '
      "confidence this run's mechanism has ε ≥ "
      f'{expected.epsilon_lo:.4g} at δ = 1e-05 (ε_lo, which holds whatever '
      f'the mechanism); the estimate ε_est is {expected.epsilon_est:.4g} (95% '
      f'bootstrap interval of the estimate {low:.4g}–{high:.4g}).\n')
  assert report_sentences.unconditional_claims(done.stdout) == []
  assert report_sentences.named_with_condition(done.stdout) == {
      field.label for field in report_sentences.conditional_fields()}
  assert ('| epsilon_lo_tight_gdp | '
          f'{expected.epsilon_lo_tight_gdp:.6g} | 95% lower bound, only if the '
          "mechanism is Gaussian in the canary's direction |") in done.stdout


@pytest.mark.parametrize('content,flags,message', [
    ('cosine\n0.1\nnan\n', ['--dim=100'], 'not a cosine'),
    ('cosine\n0.1\nabc\n', ['--dim=100'], 'not a number'),
    ('cosine\n0.1\n2.0\n', ['--dim=100'], 'not a cosine'),
    ('seen,unseen\n0.1,0.2\n0.3\n', [], 'row 3 has 1 fields'),
    ('a,b,c\n0.1,0.2,0.3\n', [], 'header'),
    ('cosine\n', ['--dim=100'], 'header row and data rows'),
    ('cosine\n0.1\n0.2\n', [], '--dim is required'),
    ('cosine\n0.1\n0.2\n', ['--dim=2'], 'dim must be >= 3'),
    ('cosine\n0.1\n0.2\n', ['--dim=100', '--alpha=0.7'], 'alpha'),
    ('cosine\n0.1\n0.1\n0.1\n', ['--dim=100'], 'zero spread'),
    ('cosine,unseen\n0.1,0.2\n0.2,\n', ['--dim=100'], 'unseen needs at least 2'),
    ('cosine\n0.1\n0.2\n', ['--dim=100', '--format=xml'], '--format'),
    ('cosine\n0.1\n0.2\n0.3\n', ['--dim=100000000000000000000'],
     '--dim=100000000000000000000: epsilon exceeds 1e12'),
    ('cosine\n0.1\n0.2\n', ['--dim=100', '--threshold_strategy=all'],
     'threshold_strategy'),
])
def test_malformed_input_exits_2_with_message(tmp_path, content, flags, message):
  path = tmp_path / 'bad.csv'
  path.write_text(content)
  done = _run(f'--cosines={path}', '--delta=1e-5', *flags)
  assert done.returncode == 2
  assert message in done.stderr
  assert 'Traceback' not in done.stderr


def test_missing_file_and_bad_delta(tmp_path):
  done = _run(f'--cosines={tmp_path / "absent.csv"}', '--delta=1e-5')
  assert done.returncode == 2 and 'cannot be read' in done.stderr
  path = tmp_path / 'ok.csv'
  path.write_text('cosine\n0.1\n0.2\n0.15\n')
  done = _run(f'--cosines={path}', '--dim=100', '--delta=1.5')
  assert done.returncode == 2 and 'delta' in done.stderr
  assert 'Traceback' not in done.stderr


def _column(values):
  return '\n'.join(f'{v!r}' for v in values) + '\n'


@pytest.mark.parametrize('header', [None, 'cosine', 'score'])
def test_one_column_loses_no_row(tmp_path, header):
  # 200 values, with or without a header row of any name: all 200 are read.
  values = np.random.default_rng(3).normal(2e-3, 1e-3, 200)
  path = tmp_path / 'one.csv'
  path.write_text(('' if header is None else header + '\n') + _column(values))
  assert epsilon_cli.read_cosine_columns(str(path)) == {
      'cosine': list(values)}
  done = _run(f'--cosines={path}', '--dim=1000000', '--delta=1e-6',
              '--format=json')
  assert done.returncode == 0, done.stderr
  assert json.loads(done.stdout)['num_seen'] == 200


@pytest.mark.parametrize('header', ['cosine,unseen', 'seen,unseen'])
def test_two_columns_lose_no_row(tmp_path, header):
  rng = np.random.default_rng(4)
  first, second = rng.normal(0.1, 0.01, 40), rng.normal(0.0, 0.01, 37)
  lines = [header] + [
      f'{a!r},{second[i]!r}' if i < second.size else f'{a!r},'
      for i, a in enumerate(first)]
  path = tmp_path / 'two.csv'
  path.write_text('\n'.join(lines) + '\n')
  names = header.split(',')
  assert epsilon_cli.read_cosine_columns(str(path)) == {
      names[0]: list(first), names[1]: list(second)}


def test_headerless_rows_are_numbered_as_in_the_file(tmp_path):
  path = tmp_path / 'bad.csv'
  path.write_text('0.1\n0.2\nabc\n')
  with pytest.raises(ValueError, match='row 3'):
    epsilon_cli.read_cosine_columns(str(path))


def test_headerless_two_columns_are_refused(tmp_path):
  path = tmp_path / 'two.csv'
  path.write_text('0.1,0.2\n0.3,0.4\n')
  done = _run(f'--cosines={path}', '--delta=1e-5')
  assert done.returncode == 2 and 'no header row' in done.stderr


def test_dim_is_an_error_for_seen_and_unseen(tmp_path):
  path = tmp_path / 'maxima.csv'
  path.write_text('seen,unseen\n0.3,0.1\n0.2,0.05\n0.25,0.0\n')
  done = _run(f'--cosines={path}', '--delta=1e-5', '--dim=1000')
  assert done.returncode == 2
  assert '--dim applies to final-model cosines' in done.stderr


@pytest.mark.parametrize('flags,line', [
    (['--delta=1e-5'], 'pass exactly one of --cosines and --losses'),
    (['--cosines=x.csv'], '--delta is required')])
def test_a_missing_flag_is_one_line(flags, line):
  done = _run(*flags)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines() == [
      f'error: {line} (--helpshort lists the flags).']


def test_a_closed_pipe_ends_quietly(final_csv):
  # The reader is gone before the report is written (`| head` that exited).
  path, _ = final_csv
  process = subprocess.Popen(
      [sys.executable, '-m', 'one_shot_epe.reporting.epsilon_cli',
       f'--cosines={path}', '--dim=1000000', '--delta=1e-6', '--format=json'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  process.stdout.close()
  _, errors = process.communicate(timeout=120)
  assert process.returncode == 0
  assert errors == b''


def test_report_offers_the_tight_bounds(tmp_path):
  rng = np.random.default_rng(5)
  seen, unseen = rng.normal(0.3, 0.1, 100), rng.normal(0.0, 0.1, 100)
  lines = ['seen,unseen'] + [f'{s!r},{u!r}' for s, u in zip(seen, unseen)]
  path = tmp_path / 'maxima.csv'
  path.write_text('\n'.join(lines) + '\n')
  done = _run(f'--cosines={path}', '--delta=1e-5', '--format=json')
  assert done.returncode == 0, done.stderr
  report = json.loads(done.stdout)
  expected = privacy_report.all_iterates_report(seen, unseen, 1e-5)
  assert report['epsilon_lo_tight_any'] == expected.epsilon_lo_tight_any
  assert report['epsilon_lo_tight_gdp'] == expected.epsilon_lo_tight_gdp
  assert expected.epsilon_lo_tight_gdp > 0.5


def test_data_canary_losses_give_the_data_canary_report(tmp_path):
  rng = np.random.default_rng(3)
  seen, unseen = rng.gamma(2.0, 0.3, 40), rng.gamma(2.0, 1.0, 60)
  rows = ['seen,unseen'] + [
      f'{seen[i]:.17g},{unseen[i]:.17g}' if i < 40 else f',{unseen[i]:.17g}'
      for i in range(60)]
  path = tmp_path / 'data_canary_losses.csv'
  path.write_text('\n'.join(rows) + '\n')
  completed = _run(f'--losses={path}', '--delta=1e-5', '--format=json')
  assert completed.returncode == 0, completed.stderr
  printed = json.loads(completed.stdout)
  expected = privacy_report.data_canary_report(seen, unseen, 1e-5)
  assert printed == json.loads(expected.to_json())
  assert printed['canary_kind'] == 'data'
  assert printed['epsilon_lo_gauss_pair'] is None
  both = _run(f'--losses={path}', f'--cosines={path}', '--delta=1e-5')
  assert both.returncode == 2
  assert 'exactly one of --cosines and --losses' in both.stderr
  path.write_text('cosine\n0.5\n')
  wrong = _run(f'--losses={path}', '--delta=1e-5')
  assert wrong.returncode == 2 and '--losses: header' in wrong.stderr


def test_data_canary_drops_give_the_data_all_iterates_report(tmp_path):
  rng = np.random.default_rng(4)
  seen, unseen = rng.normal(1.0, 0.3, 30), rng.normal(0.2, 0.3, 30)
  path = tmp_path / 'data_canary_drops.csv'
  path.write_text('seen_drop,unseen_drop\n' + ''.join(
      f'{a:.17g},{b:.17g}\n' for a, b in zip(seen, unseen)))
  completed = _run(f'--losses={path}', '--delta=1e-5', '--format=json')
  assert completed.returncode == 0, completed.stderr
  printed = json.loads(completed.stdout)
  expected = privacy_report.data_canary_all_iterates_report(seen, unseen,
                                                            1e-5)
  assert printed == json.loads(expected.to_json())
  assert printed['threat_model'] == 'all' and printed['canary_kind'] == 'data'
  assert printed['epsilon_lo'] > 0
  shown = _run(f'--losses={path}', '--delta=1e-5')
  assert shown.returncode == 0, shown.stderr
  assert shown.stdout.startswith('All iterates, data canaries (k = 30 seen')
  path.write_text('seen,unseen_drop\n1,2\n')
  mixed = _run(f'--losses={path}', '--delta=1e-5')
  assert mixed.returncode == 2 and '--losses: header' in mixed.stderr
