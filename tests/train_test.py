"""End-to-end tests of experiments/train.py on tiny synthetic EMNIST data.

One short run with canaries (module fixture) is checked against independent
truths: its report against the estimation library applied to the CSVs it wrote,
its final cosines against canaries regenerated here and the model weights of
its checkpoints, its final accuracy against the last evaluation row of its
metrics. Reruns resume from checkpoints. Bad flags exit with status 2 through
the real command line and leave the output directory untouched. A run reads a
tiny SQLite data directory through TFF's loading path. (The flag checks of a
config are tested in train_config_test.py, the round selection and metrics
plumbing in tff_engine_training_test.py.)
"""

import asyncio
import csv
import dataclasses
import glob
import json
import math
import os
import shutil
import sys

import numpy as np
import pytest
from tensorflow_federated.python.program import file_utils

from experiments import train
from experiments import train_config
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.reporting import epsilon_cli
from one_shot_epe.stats import estimation
from one_shot_epe.reporting import privacy_report
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine.tasks import synthetic
import programs
import tiny_run

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _snapshot(directory: str) -> dict[str, bytes]:
  """Every file under `directory` (relative path -> bytes)."""
  files = {}
  for path in glob.glob(os.path.join(directory, '**'), recursive=True):
    if os.path.isfile(path):
      with open(path, 'rb') as stream:
        files[os.path.relpath(path, directory)] = stream.read()
  return files


def _read_metrics(run_dir: str) -> list[dict[str, str]]:
  with open(os.path.join(run_dir, run_directory.METRICS_FILE), newline='') as stream:
    return list(csv.DictReader(stream))


@pytest.fixture(scope='module', name='run')
def fixture_run(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('runs'))
  return train.run_training(tiny_run.config(root))


def test_outputs_exist_and_are_well_formed(run):
  run_dir = run.run_dir
  for name in (run_directory.CONFIG_FILE, run_directory.METRICS_FILE,
               run_directory.CANARY_COSINES_FILE, run_directory.FINAL_COSINES_FILE,
               run_directory.MAX_COSINES_FILE, run_directory.REPORT_JSON_FILE,
               run_directory.REPORT_MARKDOWN_FILE, run_directory.DENSITY_PLOT_FILE):
    assert os.path.getsize(os.path.join(run_dir, name)) > 0, name
  with open(os.path.join(run_dir, run_directory.DENSITY_PLOT_FILE), 'rb') as stream:
    assert stream.read(8) == b'\x89PNG\r\n\x1a\n'
  assert glob.glob(os.path.join(run_dir, run_directory.TENSORBOARD_DIR,
                                'events.out.tfevents.*'))
  # Checkpoints at round 0, every 3 rounds and after the last round.
  checkpoints = sorted(os.listdir(os.path.join(run_dir, run_directory.CHECKPOINT_DIR)))
  assert checkpoints == ['program_state_0', 'program_state_3',
                         'program_state_4']
  rows = _read_metrics(run_dir)
  assert [int(row['round']) for row in rows] == list(
      range(tiny_run.TOTAL_ROUNDS + 1))
  for row in rows:  # Compact: every cell is one number (or empty).
    for name, cell in row.items():
      if cell:
        float(cell)
  for row in rows[1:]:
    assert float(row['aggregator/clip']) > 0
    assert math.isfinite(float(row['client_work/train/loss']))
  # Canaries 4 x 2 repetitions over 4 rounds: 8 insertions in all.
  assert sum(int(row['aggregator/canaries_inserted']) for row in rows[1:]) == (
      tiny_run.NUM_CANARIES * tiny_run.CANARY_REPEATS) == 8
  evaluated = [int(row['round']) for row in rows
               if row['evaluation/sparse_categorical_accuracy']]
  assert evaluated == [0, 2, 4]
  with open(os.path.join(run_dir, run_directory.REPORT_MARKDOWN_FILE)) as stream:
    markdown = stream.read()
  assert markdown.startswith('**Canaries:** gradient canaries')
  assert markdown.split('\n\n')[1].startswith('Final model (k = ')
  assert '\nAll iterates (k = ' in markdown
  with open(os.path.join(run_dir, run_directory.CANARY_COSINES_FILE)) as stream:
    per_round = list(csv.DictReader(stream))
  assert [int(row['round']) for row in per_round] == [1, 2, 3, 4]
  # The maximum over canaries and rounds, two ways: per-round maxima and
  # per-canary maxima (Algorithm 3's statistics).
  for group, maxima in (('seen', run.seen_maxima),
                        ('unseen', run.unseen_maxima)):
    assert max(float(row[f'{group}_cosine_max']) for row in per_round) == (
        pytest.approx(maxima.max(), rel=1e-6))
  assert run.total_rounds == tiny_run.TOTAL_ROUNDS
  assert (run.resumed_from_round, run.rounds_trained) == (
      0, tiny_run.TOTAL_ROUNDS)


def test_report_equals_estimation_of_the_written_csvs(run):
  run_dir = run.run_dir
  final_columns = epsilon_cli.read_cosine_columns(
      os.path.join(run_dir, run_directory.FINAL_COSINES_FILE))
  final = final_columns['cosine']
  maxima = epsilon_cli.read_cosine_columns(
      os.path.join(run_dir, run_directory.MAX_COSINES_FILE))
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as stream:
    report = json.load(stream)
  delta = tiny_run.NUM_CLIENTS**-1.1  # The default delta = m^-1.1.
  dim = 1_206_590  # The EMNIST CNN.
  assert report['delta'] == delta and report['dim'] == dim
  expected_final = privacy_report.final_model_report(
      final, dim, delta, 0.05, unseen=final_columns['unseen'])
  expected_all = privacy_report.all_iterates_report(maxima['seen'],
                                                    maxima['unseen'], delta,
                                                    0.05, dim=dim)
  assert report['final'] == json.loads(json.dumps(expected_final.to_dict()))
  assert report['all_iterates'] == json.loads(
      json.dumps(expected_all.to_dict()))
  # A canary presented r = 2 times is the 2-fold composition of the Gaussian
  # mechanism: exactly one Gaussian at noise z / sqrt(2).
  assert report['analytical_epsilon'] == pytest.approx(
      estimation.gaussian_epsilon(tiny_run.NOISE / math.sqrt(2), delta),
      rel=1e-3)
  # 4 rounds of 3 of 12 shuffled clients: one epoch, each client at most once,
  # so a real client's accounted eps is one Gaussian at z (no amplification).
  assert report['accounted_epsilon'] == pytest.approx(
      estimation.gaussian_epsilon(tiny_run.NOISE, delta), rel=1e-3)
  assert len(final) == len(maxima['seen']) == tiny_run.NUM_CANARIES
  assert len(maxima['unseen']) == tiny_run.NUM_UNSEEN_CANARIES
  # The final evaluation is of the same model as the round-4 evaluation.
  last = _read_metrics(run_dir)[-1]
  assert report['accuracy'] == pytest.approx(
      float(last['evaluation/sparse_categorical_accuracy']), abs=1e-7)


def _saved_trainable_weights(run_dir: str, round_num: int) -> np.ndarray:
  """The flattened trainable weights of a saved program state, read directly."""
  path = os.path.join(run_dir, run_directory.CHECKPOINT_DIR,
                      f'program_state_{round_num}')
  loop = asyncio.new_event_loop()
  try:
    state = loop.run_until_complete(file_utils.read_saved_model(path))
  finally:
    loop.close()
  return np.concatenate([
      np.asarray(leaf, np.float64).reshape(-1)
      for leaf in state['program'].global_model_weights.trainable
  ])


def test_final_cosines_match_regenerated_canaries_and_checkpoints(run):
  # Independent of the launcher's code path: model weights read back from the
  # saved program states of rounds 0 and 4, canaries regenerated one by one,
  # cosines in float64 numpy. Inserted canaries move the model along -c.
  moved = (_saved_trainable_weights(run.run_dir, 0) -
           _saved_trainable_weights(run.run_dir, tiny_run.TOTAL_ROUNDS))
  assert moved.size == run.dim
  written = epsilon_cli.read_cosine_columns(
      os.path.join(run.run_dir, run_directory.FINAL_COSINES_FILE))['cosine']
  expected = []
  for canary_id in range(tiny_run.NUM_CANARIES):
    canary = canaries.canary(0, canary_id, run.dim).numpy().astype(np.float64)
    expected.append(moved @ canary /
                    (np.linalg.norm(moved) * np.linalg.norm(canary)))
  np.testing.assert_allclose(written, expected, rtol=1e-4, atol=1e-6)


def test_canaries_are_detectable_at_low_noise(run):
  # Noise 0.05 with 5 expected participants per round: a round's noise has
  # norm ~0.05 * S * sqrt(d) / 5, about 55x a canary's S / 5, so an inserted
  # canary's cosine with its round's aggregate is ~1/55 = 0.018, while an
  # unseen canary's max over 4 rounds is a few times 1/sqrt(d) = 0.0009.
  null_std = 1 / math.sqrt(run.dim)
  assert run.seen_maxima.min() > 5 * null_std > run.unseen_maxima.max()
  assert run.final_cosines.mean() > 5 * null_std


@pytest.mark.slow
def test_rerun_of_a_finished_run_trains_nothing_and_rewrites_the_same(run):
  before = _snapshot(run.run_dir)
  again = train.run_training(run.config)
  assert (again.resumed_from_round, again.rounds_trained) == (
      tiny_run.TOTAL_ROUNDS, 0)
  after = _snapshot(run.run_dir)
  for name in (run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
               run_directory.REPORT_JSON_FILE, run_directory.REPORT_MARKDOWN_FILE,
               run_directory.METRICS_FILE, run_directory.CONFIG_FILE):
    assert after[name] == before[name], name


def test_rerun_resumes_from_the_latest_checkpoint(run, tmp_path):
  copy = str(tmp_path / 'tiny')
  shutil.copytree(run.run_dir, copy)
  shutil.rmtree(os.path.join(copy, run_directory.CHECKPOINT_DIR, 'program_state_4'))
  resumed = train.run_training(
      dataclasses.replace(run.config, root_output_dir=str(tmp_path)))
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (3, 1)
  # The canary tracker resumed from the checkpoint too: all maxima are set.
  assert np.all(np.isfinite(resumed.seen_maxima))
  assert np.all(np.isfinite(resumed.unseen_maxima))
  rows = _read_metrics(copy)  # Round 4 replaced, not appended.
  assert [int(row['round']) for row in rows] == list(
      range(tiny_run.TOTAL_ROUNDS + 1))
  assert os.path.isdir(os.path.join(copy, run_directory.CHECKPOINT_DIR,
                                    'program_state_4'))


def _result_files(run_dir):
  return {name: open(os.path.join(run_dir, name), 'rb').read()
          for name in (run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
                       run_directory.REPORT_JSON_FILE, run_directory.CANARY_COSINES_FILE)}


@pytest.mark.slow
def test_same_flags_give_identical_results(run, tmp_path):
  again = train.run_training(
      dataclasses.replace(run.config, root_output_dir=str(tmp_path)))
  assert _result_files(again.run_dir) == _result_files(run.run_dir)


@pytest.mark.slow
def test_two_tff_workers_give_identical_results(run, tmp_path):
  # Clients spread over two worker processes (distributed_runtime), the
  # aggregate folded in client order: the same bits as one worker.
  spread = train.run_training(
      dataclasses.replace(run.config, root_output_dir=str(tmp_path),
                          tff_workers=2))
  assert _result_files(spread.run_dir) == _result_files(run.run_dir)
  assert not runtime.worker_processes()


@pytest.mark.slow
def test_other_canary_seed_gives_other_canaries(run, tmp_path):
  other = train.run_training(
      dataclasses.replace(run.config, root_output_dir=str(tmp_path),
                          canary_seed=run.config.canary_seed + 1))
  assert not np.any(other.final_cosines == run.final_cosines)
  assert not np.any(other.unseen_maxima == run.unseen_maxima)


def test_run_dir_holding_other_flags_is_refused(run):
  before = _snapshot(run.run_dir)
  changed = dataclasses.replace(run.config, noise_multiplier=0.1)
  with pytest.raises(train_config.ConfigError,
                     match=r"--run_name.*--noise_multiplier=0\.05"):
    train.run_training(changed)
  assert _snapshot(run.run_dir) == before


# --all_iterates_statistic=model_delta and --canary_clip=clip (the paper's
# published code).


@pytest.fixture(scope='module', name='model_delta_run')
def fixture_model_delta_run(run, tmp_path_factory):
  root = str(tmp_path_factory.mktemp('model_delta'))
  return train.run_training(dataclasses.replace(
      run.config, root_output_dir=root, all_iterates_statistic='model_delta'))


@pytest.mark.slow
def test_model_delta_statistic_equals_aggregate_under_sgd_at_rate_1(
    run, model_delta_run):
  # The tiny run's server optimizer is SGD at learning rate 1, so the model
  # step theta_{t-1} - theta_t is the noised aggregate rho_t up to float32
  # rounding of the stored model: per coordinate at most u (|theta_t| +
  # |step_t|), u = 2^-24 (CanaryAudit.observe). A cosine then
  # moves by at most 2 ||error|| / ||rho_t||, with ||theta_t|| <= ||theta_0||
  # + sum_{s <= t} ||rho_s|| and ||step_t|| <= 2 ||rho_t||.
  run_dir = model_delta_run.run_dir
  with open(os.path.join(run_dir, run_directory.CONFIG_FILE)) as stream:
    assert json.load(stream)['all_iterates_statistic'] == 'model_delta'
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as stream:
    setting = json.load(stream)['setting']
  assert (setting['all_iterates_statistic'], setting['canary_clip']) == (
      'model_delta', 'project')
  # Training does not depend on what is tracked.
  np.testing.assert_array_equal(model_delta_run.final_cosines,
                                run.final_cosines)
  norms = [float(row['aggregator/aggregate_norm'])
           for row in _read_metrics(run_dir)[1:]]
  weight_bound = (np.linalg.norm(_saved_trainable_weights(run_dir, 0)) +
                  np.cumsum(norms))
  cosine_bound = max(2 * 1.01 * 2.0**-24 * (w + 2 * n) / n
                     for w, n in zip(weight_bound, norms))
  assert cosine_bound < 1e-4
  for got, want in ((model_delta_run.seen_maxima, run.seen_maxima),
                    (model_delta_run.unseen_maxima, run.unseen_maxima)):
    assert np.all(np.abs(got - want) <= cosine_bound)


@pytest.mark.slow
def test_model_delta_run_resumes_to_the_same_bytes(model_delta_run, tmp_path):
  # The previous model of the resumed round is the checkpointed one.
  copy = str(tmp_path / 'tiny')
  shutil.copytree(model_delta_run.run_dir, copy)
  shutil.rmtree(os.path.join(copy, run_directory.CHECKPOINT_DIR, 'program_state_4'))
  resumed = train.run_training(dataclasses.replace(
      model_delta_run.config, root_output_dir=str(tmp_path)))
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (3, 1)
  assert _result_files(copy) == _result_files(model_delta_run.run_dir)


def test_canary_clip_reaches_the_aggregator(run, tmp_path):
  for canary_clip in ('project', 'clip'):
    setup = train.prepare(dataclasses.replace(
        run.config, root_output_dir=str(tmp_path), canary_clip=canary_clip))
    assert setup.plan.spec.canary_clip == canary_clip
    factory = canary_aggregator.CanaryDPFactory.from_spec(setup.plan.dp,
                                                          setup.plan.spec)
    assert factory.spec.canary_clip == canary_clip
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('bad_flag, named', [
    ('--noise_multiplier=-1', '--noise_multiplier'),
    ('--sampling=uniform', 'sampling'),
    ('--canary_repeats=5', '--canary_repeats'),
    ('--canary_clip=scale', '--canary_clip=scale: value should be one of '
     '<project|clip>'),
    ('--all_iterates_statistic=final', '--all_iterates_statistic=final: '
     'value should be one of <aggregate|model_delta>'),
])
def test_command_line_bad_flag_exits_2_untouched(tmp_path, bad_flag, named):
  root = tmp_path / 'root'
  (root / 'tiny').mkdir(parents=True)
  (root / 'tiny' / 'keep.txt').write_text('user file')
  before = _snapshot(str(root))
  done = programs.run(
      [sys.executable, '-m', 'experiments.train', '--use_synthetic_data',
       f'--synthetic_num_clients={tiny_run.NUM_CLIENTS}',
       '--clients_per_round=3', f'--total_rounds={tiny_run.TOTAL_ROUNDS}',
       f'--root_output_dir={root}',
       '--run_name=tiny', bad_flag],
      cwd=_REPO, timeout=300)
  assert done.returncode == 2, done.stderr
  assert named in done.stderr
  assert 'Traceback' not in done.stderr
  assert _snapshot(str(root)) == before


@pytest.mark.slow
def test_sqlite_data_dir_trains_through_tff_loading(tmp_path):
  data_dir = tmp_path / 'data'
  data_dir.mkdir()
  synthetic.write_data_dir('emnist_character', str(data_dir), num_clients=6,
                           examples_per_client=8)
  # Without canaries (the accuracy baseline) the aggregator is TFF's own DP
  # factory, and no privacy report is written.
  result = train.run_training(train_config.TrainConfig(
      task='emnist_character', data_dir=str(data_dir), clients_per_round=3,
      total_rounds=2, client_batch_size=4, num_canaries=0,
      num_unseen_canaries=0, noise_multiplier=0.1, clipping_norm=0.5,
      max_eval_examples=8, root_output_dir=str(tmp_path / 'runs'),
      run_name='sqlite', progress_bar=False))
  assert result.report is None and result.rounds_trained == 2
  assert result.delta == 6**-1.1
  assert 0.0 <= result.accuracy <= 1.0
  rows = _read_metrics(result.run_dir)
  assert [int(row['round']) for row in rows] == [0, 1, 2]
  assert float(rows[1]['client_work/train/num_examples']) == 3 * 8
  assert not os.path.exists(os.path.join(result.run_dir,
                                         run_directory.REPORT_JSON_FILE))
  with open(os.path.join(result.run_dir, run_directory.CONFIG_FILE)) as stream:
    assert json.load(stream)['data_dir'] == str(data_dir)


@pytest.mark.parametrize('backend, framework', [('tff', 'tensorflow'),
                                                ('jax', 'jax')])
def test_an_engine_without_its_framework_names_the_extra(
    tmp_path, backend, framework):
  # Valid flags, the engine's framework unimportable: one line naming the
  # extra to install, exit 2, nothing written.
  done = programs.run_without_frameworks(
      'experiments.train',
      ['--flagfile=configs/demo.cfg', f'--backend={backend}',
       '--total_rounds=2', f'--root_output_dir={tmp_path}'],
      cwd=_REPO, timeout=120)
  assert done.returncode == 2, done.stderr
  install = {
      'tff': ('the [tff] extra, on Python 3.11: pip install --no-deps -r '
              'requirements.txt (its closure; TFF 0.87 pins a jaxlib the '
              'package index lacks)'),
      'jax': "pip install 'one-shot-epe[jax]'"}[backend]
  assert done.stderr.splitlines() == [
      f'error: --backend={backend} needs {framework}, which is not '
      f'installed: {install}']
  assert not os.listdir(tmp_path)


def test_engines_are_registered_by_plain_import_functions():
  assert sorted(train.BACKENDS) == ['jax', 'tff']
  backend = train.BACKENDS['tff']()
  assert backend.__name__ == 'experiments.backend_tff'
  assert backend.CSV_FORMAT.line_terminator == '\r\n'
