"""End-to-end tests of experiments/reproduce.py on a tiny synthetic grid.

The program runs a 2 (noise) x 2 (repetitions) grid of 4-round runs through
the real command line (module fixture). Its tables are checked against the
runs' own report.json files and, for the Anderson statistics, against
`estimation.anderson_darling` applied here to the cosine CSVs the runs wrote;
its figures must be readable PNGs. A rerun skips finished runs. A grid
stopped with SIGTERM in its second run ends with the line naming that run
and the round it saved, and its rerun resumes it there and ends with the
module grid's files. The grid parser is checked on the project's configs,
--scale against hand-computed values, and a bad --scale exits with status 2
before writing anything.
"""

import csv
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

from absl import flags
import matplotlib.image
import pytest

from experiments import grid as grid_lib
from experiments import reproduce
from experiments import run_planning
from experiments import train_config
from experiments import train_flags
from one_shot_epe.stats import estimation
from one_shot_epe.runtime import run_directory
from one_shot_epe.reporting import run_report

import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NOISES = ('0', '0.2')
_REPETITIONS = ('1', '2')
# 8 seen canaries, the fewest Table 6's Anderson-Darling statistics take;
# presented twice over 4 rounds, 4 of them join each round's 4 clients (at
# most half of a round may be canaries).
_TINY = (f'--config={os.path.join(_REPO, "configs", "demo.cfg")}',
         '--synthetic_num_clients=12', '--synthetic_examples_per_client=8',
         '--clients_per_round=4', '--total_rounds=4', '--client_batch_size=4',
         '--client_epochs_per_round=1', '--num_canaries=8',
         '--num_unseen_canaries=16', '--rounds_per_evaluation=2',
         '--rounds_per_checkpoint=4', '--max_eval_examples=16',
         '--noprogress_bar', f'--noise_multipliers={",".join(_NOISES)}',
         f'--repetitions={",".join(_REPETITIONS)}')


def _reproduce(*args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return programs.run([sys.executable, '-m', 'experiments.reproduce', *args],
                      cwd=_REPO, env=env, timeout=1200)


@pytest.fixture(scope='module', name='grid')
def fixture_grid(tmp_path_factory):
  output_dir = str(tmp_path_factory.mktemp('grid'))
  completed = _reproduce(*_TINY, '--accuracy_table',
                         '--table5_experiments=1', '--table5_runs=2',
                         f'--output_dir={output_dir}')
  assert completed.returncode == 0, completed.stderr[-3000:]
  return output_dir, completed.stdout


def _reports(output_dir: str) -> dict[tuple[str, str], dict]:
  """report.json of each grid run, keyed by (noise, repetitions) text."""
  reports = {}
  for noise in _NOISES:
    for repeats in _REPETITIONS:
      path = os.path.join(output_dir, grid_lib.RUNS_DIR,
                          f'noise{noise}_rep{repeats}', run_directory.REPORT_JSON_FILE)
      with open(path, encoding='utf-8') as stream:
        reports[(noise, repeats)] = json.load(stream)
  return reports


def _table_rows(text: str) -> dict[str, dict[tuple[str, str],
                                             dict[str, str]]]:
  """Data rows of each table of the privacy table, by the line that opens it.

  {section: {(noise, repetitions): {column header: cell}}}; sections are
  'main', 'details' and 'attack'.
  """
  openers = {"The sentences' estimates": 'main',
             'Other estimates and bounds': 'details', 'The attack:': 'attack'}
  tables, repeats, section, headers = {}, None, None, []
  for line in text.splitlines():
    if line.startswith('**'):
      repeats = line.strip('*').split()[0]
    for opener, name in openers.items():
      if line.startswith(opener):
        section = name
    if line.startswith('| '):
      cells = [cell.strip() for cell in line.strip('|').split('|')]
      if line.startswith('| noise'):
        headers = cells
      else:
        tables.setdefault(section, {})[(cells[0], repeats)] = dict(
            zip(headers, cells))
  return tables


def _summary(stdout: str) -> list[str]:
  """The lines of the terminal's privacy table (`grid_tables.summary_table`)."""
  start = stdout.index("**Privacy of the grid's runs**")
  return stdout[start:].split('\n\n**Table 6')[0].splitlines()


def _close(cell: str, value: float | None) -> bool:
  """A 4-significant-digit cell shows `value` (None: infinity; a saturated
  estimate's '≥' ignored)."""
  if value is None:
    return cell in ('∞', 'n/a')
  return abs(float(cell.lstrip('≥')) - value) <= 5e-4 * abs(value)


@pytest.mark.slow
def test_every_grid_point_ran_in_its_own_directory(grid):
  output_dir, _ = grid
  for noise in _NOISES:
    for repeats in _REPETITIONS:
      with open(os.path.join(output_dir, grid_lib.RUNS_DIR,
                             f'noise{noise}_rep{repeats}', run_directory.CONFIG_FILE),
                encoding='utf-8') as stream:
        config = json.load(stream)
      assert (config['noise_multiplier'], config['canary_repeats'],
              config['total_rounds'], config['num_canaries']) == (
                  float(noise), int(repeats), 4, 8)


@pytest.mark.slow
def test_privacy_table_equals_run_reports(grid):
  output_dir, stdout = grid
  with open(os.path.join(output_dir, reproduce.TABLE_FILE),
            encoding='utf-8') as stream:
    table = stream.read()
  tables = _table_rows(table)
  reports = _reports(output_dir)
  assert set(tables) == {'main', 'details', 'attack'}
  for point, report in reports.items():
    # The paper's Table 3/4 columns, among the details, hold its statistics.
    cells = tables['details'][point]
    for model in ('all', 'final'):
      for header, key in ((f"paper's ε_lo-{model} (nominal)",
                           'epsilon_lo_paper'),
                          (f"paper's ε_est-{model}", 'epsilon_est_fitted')):
        assert _close(cells[header], report[f'{key}_{model}']), (point, key)
    # The sentences' columns: headline estimates (with their interval), the
    # bound for any mechanism, the analytical eps; and the accuracy.
    main = tables['main'][point]
    assert _close(main[f'analytical ε (r = {point[1]})'],
                  report['analytical_epsilon'])
    assert _close(main['accuracy'], report['accuracy'])
    for model in ('all', 'final'):
      assert _close(main[f'ε_est-{model} (95% bootstrap interval of the '
                         'estimate)'].split()[0],
                    report[f'epsilon_est_{model}'])
      assert _close(main[f'ε_lo-{model}'], report[f'epsilon_lo_{model}'])
      for header, key in (('ε_one-run', 'epsilon_one_run'),
                          ('ε_one-run-fdp', 'epsilon_one_run_fdp'),
                          ('ε_tight-any', 'epsilon_lo_tight_any'),
                          ('ε_tight-gdp', 'epsilon_lo_tight_gdp')):
        gaussian = ' (Gaussian)' if key in ('epsilon_one_run_fdp',
                                            'epsilon_lo_tight_gdp') else ''
        assert _close(cells[f'{header}-{model}{gaussian}'],
                      report[f'{key}_{model}']), (point, key)
  # table.md opens with each run's sentence, of report.json's numbers.
  opening = table.split('canary repetition')[0]
  for (noise, repeats), report in reports.items():
    line = next(line for line in opening.splitlines()
                if line.startswith(f'**Noise {noise}, r = {repeats}.**'))
    bound, estimate, low, high = re.match(
        r'.*Final model \(k = \d+ seen canaries against the exact null\): '
        r"with 95% confidence this run's mechanism has ε ≥ (\S+) at "
        r'δ = \S+ \(ε_lo, which holds whatever the mechanism\); the '
        r'estimate ε_est is (\S+) \(95% bootstrap interval of the estimate '
        r'(\S+)–(\S+)\)', line).groups()
    for cell, value in ((estimate, report['epsilon_est_final']),
                        (low, report['epsilon_est_interval_final'][0]),
                        (high, report['epsilon_est_interval_final'][1]),
                        (bound, report['epsilon_lo_final'])):
      assert _close(cell, value), (noise, repeats, cell, value)
  # The terminal gets the compact table: every line fits 100 columns.
  printed = _summary(stdout)
  assert printed and max(len(line) for line in printed) <= 100
  table = [[c.strip() for c in line.strip('|').split('|')] for line in printed
           if line.startswith('| ')]
  rows = {(cells[0], cells[1]): dict(zip(table[0], cells))
          for cells in table[1:]}
  assert set(rows) == set(reports)
  for point, report in reports.items():
    row = rows[point]
    for header, key in (('analyt.', 'analytical_epsilon'),
                        ('est-all', 'epsilon_est_all'),
                        ('lo-all', 'epsilon_lo_all'),
                        ('est-fin', 'epsilon_est_final'),
                        ('last-it', 'last_iterate_epsilon'),
                        ('acc.', 'accuracy')):
      assert _close(row[header], report[key]), (point, key, row[header])
    # The final model's lower bounds, '/'-separated: lo, tight any, gdp.
    for cell, key in zip(re.findall(r'n/a|[^/]+', row['lo/any/gdp-fin']),
                         ('epsilon_lo', 'epsilon_lo_tight_any',
                          'epsilon_lo_tight_gdp')):
      assert _close(cell, report[f'{key}_final']), (point, key, cell)
  # Noise 0: analytical eps is infinite; noise 0.2 is the Gaussian mechanism.
  assert reports[('0', '1')]['analytical_epsilon'] is None
  assert reports[('0.2', '1')]['analytical_epsilon'] == pytest.approx(
      estimation.gaussian_epsilon(0.2, reports[('0.2', '1')]['delta']))
  with open(os.path.join(output_dir, reproduce.RESULTS_FILE),
            encoding='utf-8') as stream:
    results = json.load(stream)
  assert {(f'{entry["noise_multiplier"]:g}', str(entry['canary_repeats'])):
          entry['report'] for entry in results} == reports


def _column(path: str, name: str) -> list[float]:
  with open(path, newline='', encoding='utf-8') as stream:
    return [float(row[name]) for row in csv.DictReader(stream) if row[name]]


@pytest.mark.slow
def test_anderson_table_recomputes_from_cosine_csvs(grid):
  output_dir, _ = grid
  with open(os.path.join(output_dir, reproduce.ANDERSON_FILE),
            encoding='utf-8') as stream:
    title, _, *lines = stream.read().splitlines()
  assert title.startswith('**Table 6')
  lines = lines[2:]
  assert len(lines) == len(_NOISES) * len(_REPETITIONS)
  for line in lines:
    noise, repeats, final, seen, unseen = [
        cell.strip() for cell in line.strip('|').split('|')]
    run_dir = os.path.join(output_dir, grid_lib.RUNS_DIR,
                           f'noise{noise}_rep{repeats}')
    expected = (
        estimation.anderson_darling(_column(
            os.path.join(run_dir, run_directory.FINAL_COSINES_FILE), 'cosine')),
        estimation.anderson_darling(_column(
            os.path.join(run_dir, run_directory.MAX_COSINES_FILE), 'seen')),
        estimation.anderson_darling(_column(
            os.path.join(run_dir, run_directory.MAX_COSINES_FILE), 'unseen')))
    for cell, value in zip((final, seen, unseen), expected):
      assert float(cell) == pytest.approx(value, abs=6e-4)


def _final_accuracy(run_dir: str) -> float:
  """Accuracy of the last evaluation row of a run's metrics.csv."""
  with open(os.path.join(run_dir, run_directory.METRICS_FILE), newline='',
            encoding='utf-8') as stream:
    rows = [row for row in csv.DictReader(stream)
            if row['evaluation/sparse_categorical_accuracy']]
  return float(rows[-1]['evaluation/sparse_categorical_accuracy'])


@pytest.mark.slow
def test_accuracy_table_compares_runs_with_and_without_canaries(grid):
  output_dir, stdout = grid
  with open(os.path.join(output_dir, reproduce.ACCURACY_FILE),
            encoding='utf-8') as stream:
    table = stream.read()
  assert table in stdout
  reports = _reports(output_dir)
  lines = table.splitlines()
  assert lines[0] == ('| noise | without canaries | with 8 canaries, 1 rep. '
                      '| with 8 canaries, 2 rep. | max change (points) |')
  assert len(lines) == 2 + len(_NOISES)
  for line, noise in zip(lines[2:], _NOISES):
    cells = [cell.strip() for cell in line.strip('|').split('|')]
    run_dir = os.path.join(output_dir, grid_lib.RUNS_DIR,
                           f'noise{noise}_nocanaries')
    with open(os.path.join(run_dir, run_directory.CONFIG_FILE),
              encoding='utf-8') as stream:
      assert json.load(stream)['num_canaries'] == 0
    # 4 rounds evaluated every 2: the last evaluation is of the final model.
    without = _final_accuracy(run_dir)
    with_canaries = [reports[(noise, r)]['accuracy'] for r in _REPETITIONS]
    assert cells[0] == noise
    assert float(cells[1]) == pytest.approx(without, abs=6e-5)
    for cell, value in zip(cells[2:4], with_canaries):
      assert float(cell) == pytest.approx(value, abs=6e-5)
    assert float(cells[4]) == pytest.approx(
        100 * max(abs(v - without) for v in with_canaries), abs=6e-3)


@pytest.mark.slow
def test_table5_pools_the_runs_final_cosines(grid):
  output_dir, stdout = grid
  with open(os.path.join(output_dir, reproduce.TABLE5_FILE),
            encoding='utf-8') as stream:
    text = stream.read()
  assert text in stdout
  rows = {}
  for line in text.splitlines()[2:]:
    cells = [cell.strip() for cell in line.strip('|').split('|')]
    rows[(cells[0], cells[1])] = cells[2:]
  assert set(rows) == {(noise, arm) for noise in _NOISES
                       for arm in ('1/8', '2/4')}
  for noise in _NOISES:
    for arm, runs, canaries in (('1/8', ['single_e0_r0'], 8),
                                ('2/4', ['split_e0_r0', 'split_e0_r1'], 4)):
      cosines, report = [], None
      for run in runs:
        run_dir = os.path.join(output_dir, 'table5', f'noise{noise}_{run}')
        with open(os.path.join(run_dir, run_directory.FINAL_COSINES_FILE),
                  encoding='utf-8') as stream:
          column = [float(row['cosine']) for row in csv.DictReader(stream)]
        assert len(column) == canaries
        cosines.extend(column)
        with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE),
                  encoding='utf-8') as stream:
          report = json.load(stream)
      expected = estimation.epsilon_from_final_cosines(
          cosines, report['dim'], report['delta'])
      # One experiment: every quantile is its estimate (3 significant digits).
      for cell in rows[(noise, arm)][:-1]:
        assert abs(float(cell) - expected) <= 5e-3 * abs(expected) + 1e-12
      assert rows[(noise, arm)][-1] == '1'


@pytest.mark.slow
def test_every_report_json_reads_back_as_the_same_typed_report(grid):
  output_dir, _ = grid
  paths = sorted(glob.glob(os.path.join(
      output_dir, '*', '*', run_directory.REPORT_JSON_FILE)))
  # 4 grid runs and per noise 1 + 2 Table 5 runs (none without canaries).
  assert len(paths) == 10
  for path in paths:
    with open(path, encoding='utf-8') as stream:
      text = stream.read()
    report = run_report.RunReport.read(path)
    assert report.to_json() + '\n' == text, path
    assert run_report.RunReport.from_dict(report.to_dict()) == report
  # Noise 0: the analytical eps, written as null, reads back infinite.
  report = run_report.RunReport.read(os.path.join(
      output_dir, grid_lib.RUNS_DIR, 'noise0_rep1',
      run_directory.REPORT_JSON_FILE))
  assert report.analytical_epsilon == float('inf')
  assert report.all_iterates is not None


@pytest.mark.slow
def test_figures_are_png_images(grid):
  output_dir, stdout = grid
  for name in (reproduce.DENSITY_FILE, reproduce.EPSILON_FINAL_FILE,
               reproduce.EPSILON_ALL_FILE):
    path = os.path.join(output_dir, name)
    assert f'Wrote {path}' in stdout
    with open(path, 'rb') as stream:
      assert stream.read(8) == b'\x89PNG\r\n\x1a\n'
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 100


@pytest.mark.slow
def test_rerun_skips_finished_runs(grid):
  output_dir, stdout = grid
  # 4 grid runs, 2 without canaries, and per noise 1 + 2 Table 5 runs.
  assert stdout.count('Running ') == 12
  report = os.path.join(output_dir, grid_lib.RUNS_DIR, 'noise0_rep1',
                        run_directory.REPORT_JSON_FILE)
  before = os.stat(report).st_mtime_ns
  completed = _reproduce(*_TINY, f'--output_dir={output_dir}')
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert 'Running ' not in completed.stdout  # No --accuracy_table this time.
  assert os.stat(report).st_mtime_ns == before
  assert _summary(completed.stdout) == _summary(stdout)


@pytest.mark.slow
def test_a_grid_against_the_band_of_its_own_runs_is_within(grid, tmp_path):
  # The seeds' table of the grid's own runs: every number of a rerun lies
  # in its band (a band of one seed is that seed's numbers).
  output_dir, _ = grid
  table = str(tmp_path / 'seeds.csv')
  made = programs.run([sys.executable, '-m', 'experiments.seed_band',
                       f'--seed_dirs={output_dir}', f'--output={table}'],
                      cwd=_REPO, timeout=300)
  assert made.returncode == 0, made.stderr[-3000:]
  with open(table, encoding='utf-8') as stream:
    rows = list(csv.DictReader(stream))
  assert len(rows) == len(_NOISES) * len(_REPETITIONS)
  completed = _reproduce(*_TINY, f'--output_dir={output_dir}',
                         f'--band={table}')
  assert completed.returncode == 0, completed.stderr[-3000:]
  verdicts = re.findall(r'\| (within|outside) \|$', completed.stdout,
                        flags=re.MULTILINE)
  assert verdicts and set(verdicts) == {'within'}
  assert 'band of 1 seed**' in completed.stdout


@pytest.mark.slow
def test_a_band_that_is_not_a_seeds_table_exits_2(grid, tmp_path):
  output_dir, _ = grid
  table = tmp_path / 'other.csv'
  table.write_text('a,b\n1,2\n', encoding='utf-8')
  completed = _reproduce(*_TINY, f'--output_dir={output_dir}',
                         f'--band={table}')
  assert completed.returncode == 2
  assert '--band' in completed.stderr
  assert 'Running ' not in completed.stdout


def _files(run_dir: str) -> dict[str, object]:
  """A run's result files (metrics.csv without its wall-clock times)."""
  files = {}
  for name in (run_directory.FINAL_COSINES_FILE,
               run_directory.MAX_COSINES_FILE, run_directory.REPORT_JSON_FILE,
               run_directory.CANARY_COSINES_FILE):
    with open(os.path.join(run_dir, name), 'rb') as stream:
      files[name] = stream.read()
  with open(os.path.join(run_dir, run_directory.METRICS_FILE),
            newline='') as stream:
    files[run_directory.METRICS_FILE] = [
        {key: value for key, value in row.items() if 'time' not in key}
        for row in csv.DictReader(stream)]
  return files


@pytest.mark.slow
def test_a_grid_stopped_mid_run_resumes_to_the_same_files(grid, tmp_path):
  output_dir = str(tmp_path)
  # Two of the module grid's runs; stopped inside the second, at round 2 or
  # 3 of 4 (between its checkpoints 0 and 4).
  args = (*_TINY, '--noise_multipliers=0.2', f'--output_dir={output_dir}')
  second = os.path.join(output_dir, grid_lib.RUNS_DIR, 'noise0.2_rep2')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  with subprocess.Popen(
      [sys.executable, '-m', 'experiments.reproduce', *args], cwd=_REPO,
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True) as process:
    try:
      deadline = time.monotonic() + 900
      while (run_directory.read_progress(second) or 0) < 2:
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, 'round 2 never came'
        time.sleep(0.01)
      os.killpg(process.pid, signal.SIGTERM)
      _, stderr = process.communicate(timeout=300)
    finally:
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
  assert process.returncode == 130, stderr[-3000:]
  assert 'Traceback' not in stderr, stderr[-3000:]
  line = re.fullmatch(
      r'interrupted after round (\d) of 4 \((.*)\); rerun the same command '
      r'to resume from round \1', stderr.strip().splitlines()[-1])
  assert line and line.group(2) == second, stderr[-3000:]
  saved = int(line.group(1))
  completed = _reproduce(*args)
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert completed.stdout.count('Running ') == 1
  assert (f'{second}: Rounds: 4 (resumed from round {saved}, trained '
          f'{4 - saved} now)') in completed.stdout, completed.stdout
  for repeats in _REPETITIONS:
    name = f'noise0.2_rep{repeats}'
    assert _files(os.path.join(output_dir, grid_lib.RUNS_DIR, name)) == (
        _files(os.path.join(grid[0], grid_lib.RUNS_DIR, name))), name


@pytest.mark.parametrize('scale', ['1.5'])
def test_bad_scale_exits_2_and_writes_nothing(tmp_path, scale):
  output_dir = tmp_path / 'out'
  completed = _reproduce(*_TINY, f'--scale={scale}',
                         f'--output_dir={output_dir}')
  assert completed.returncode == 2
  assert '--scale' in completed.stderr
  assert not output_dir.exists()


@pytest.mark.parametrize('inside', [False, True])
def test_an_output_dir_that_cannot_be_a_directory_exits_2(tmp_path, inside):
  a_file = tmp_path / 'results.txt'
  a_file.write_text('mine\n')
  output_dir = a_file / 'grid' if inside else a_file
  completed = _reproduce(*_TINY, f'--output_dir={output_dir}')
  assert completed.returncode == 2
  assert completed.stderr.startswith('error: --output_dir: ')
  assert 'is not a directory' in completed.stderr
  assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
  assert 'rerun' not in completed.stderr
  assert 'Running' not in completed.stdout
  assert a_file.read_text() == 'mine\n'


def test_parse_grid_reads_the_paper_grids(tmp_path):
  assert grid_lib.parse_grid(os.path.join(_REPO, 'configs', 'emnist.cfg')) == {
      'noise_multiplier': ['0', '0.0487', '0.0958', '0.2207'],
      'canary_repeats': ['1', '2', '4', '8']}
  assert grid_lib.parse_grid(
      os.path.join(_REPO, 'configs', 'stackoverflow.cfg')) == {
          'noise_multiplier': ['0', '0.0496', '0.0986', '0.2317'],
          'canary_repeats': ['1', '2', '4', '8']}
  bad = tmp_path / 'bad.cfg'
  bad.write_text('# grid: --noise_multiplier\n')
  with pytest.raises(ValueError, match='grid line'):
    grid_lib.parse_grid(str(bad))


def test_scale_shrinks_rounds_clients_and_canaries():
  demo = train_config.TrainConfig(use_synthetic_data=True,
                                  synthetic_num_clients=100,
                                  clients_per_round=10, total_rounds=20,
                                  num_canaries=100, num_unseen_canaries=100)
  half = grid_lib.scale_config(demo, 0.5)
  assert (half.total_rounds, half.clients_per_round,
          half.synthetic_num_clients, half.num_canaries,
          half.num_unseen_canaries) == (10, 5, 50, 50, 50)
  tiny = grid_lib.scale_config(demo, 0.001)
  assert (tiny.total_rounds, tiny.clients_per_round,
          tiny.synthetic_num_clients, tiny.num_canaries,
          tiny.num_unseen_canaries) == (1, 1, 1, 2, 2)
  real = train_config.TrainConfig(data_dir='/data', clients_per_round=101,
                                  train_epochs=15, num_canaries=1000,
                                  num_unseen_canaries=0)
  fifth = grid_lib.scale_config(real, 0.2)
  # Real data in epochs: the clients per round stay (the population is fixed).
  assert (fifth.train_epochs, fifth.clients_per_round,
          fifth.synthetic_num_clients, fifth.num_canaries,
          fifth.num_unseen_canaries) == (3, 101, 100, 200, 0)
  assert grid_lib.scale_config(real, 1.0) == real
  for scale in (0.0, -0.5, 1.01, float('nan')):
    with pytest.raises(ValueError, match='--scale'):
      grid_lib.scale_config(real, scale)


@pytest.mark.parametrize('config_name, clients', [
    ('emnist.cfg', 3383), ('stackoverflow.cfg', 342_477),
    ('demo_fashion_mnist.cfg', 1200)])
@pytest.mark.parametrize('scale', [0.05, 0.1, 0.5])
def test_a_scaled_paper_run_is_never_longer_than_the_full_one(config_name,
                                                              clients, scale):
  # The rounds as the launcher counts them (run_planning) for the
  # real data's number of clients, full and scaled.
  flag_values = flags.FlagValues()
  train_flags.define_flags(flag_values)
  flag_values(['x', f'--flagfile={os.path.join(_REPO, "configs", config_name)}'])
  full = train_flags.config_from_flags(flag_values)
  ids = [str(i) for i in range(clients)]
  _, full_rounds = run_planning.participation_plan(full, ids)
  _, rounds = run_planning.participation_plan(
      grid_lib.scale_config(full, scale), ids)
  assert rounds <= full_rounds
  if full.train_epochs is None:  # Rounds shrink as given.
    assert rounds == max(1, round(scale * full_rounds))
  else:  # Whole epochs of the full run's length shrink.
    rounds_per_epoch = full_rounds // full.train_epochs
    assert rounds == max(1, round(scale * full.train_epochs)) * rounds_per_epoch


@pytest.mark.parametrize('flag, message', [
    ('--noise_multipliers=abc', '--noise_multipliers must list float'),
    ('--bogus=1', "flag 'bogus'"),
])
def test_bad_flag_is_answered_before_tensorflow_is_imported(tmp_path, flag,
                                                            message):
  done = programs.run_without_frameworks(
      'experiments.reproduce',
      ['--config=configs/demo.cfg', f'--output_dir={tmp_path / "out"}', flag],
      cwd=_REPO, timeout=120)
  assert done.returncode == 2, done.stderr
  assert message in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr
  assert not (tmp_path / 'out').exists()
