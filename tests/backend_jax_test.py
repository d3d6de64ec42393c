"""Tests of experiments.backend_jax: `experiments.train --backend=jax`.

Independent truths: an interpreter in which TensorFlow cannot be imported
(the program must run there, as on the accelerator machines); the run
directory layout and report of `experiments.train`; an uninterrupted run
(resumption from a checkpoint gives the same results); numpy regenerating
the canaries' cosines with the final model from the checkpoints.
"""

import csv
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from experiments import backend_jax
from experiments import train_config
from experiments import train
from one_shot_epe.runtime import run_directory
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import checkpoints as checkpoints_lib
from one_shot_epe.jax_engine import memory
from one_shot_epe.jax_engine import round_engine

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
FLAGS = ['--backend=jax', '--task=emnist_character', '--use_synthetic_data',
         '--synthetic_num_clients=4', '--synthetic_examples_per_client=16',
         '--clients_per_round=2', '--total_rounds=3', '--num_canaries=5',
         '--num_unseen_canaries=5', '--noise_multiplier=0.1',
         '--rounds_per_checkpoint=2', '--rounds_per_evaluation=1',
         '--noprogress_bar']
# `python -m experiments.train` with TensorFlow, TFF and TF Privacy made
# unimportable (`import tensorflow` raises ImportError).
_WITHOUT_TF = '''
import runpy, sys
for name in ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy'):
  sys.modules[name] = None
sys.argv = ['train'] + sys.argv[1:]
runpy.run_module('experiments.train', run_name='__main__')
'''
OUTPUTS = (run_directory.CONFIG_FILE, run_directory.METRICS_FILE,
           run_directory.CANARY_COSINES_FILE, run_directory.FINAL_COSINES_FILE,
           run_directory.MAX_COSINES_FILE, run_directory.REPORT_JSON_FILE,
           run_directory.REPORT_MARKDOWN_FILE, run_directory.DENSITY_PLOT_FILE)


def _config(root, **overrides) -> train_config.TrainConfig:
  settings = dict(backend='jax', task='emnist_character',
                  use_synthetic_data=True, synthetic_num_clients=4,
                  synthetic_examples_per_client=16, clients_per_round=2,
                  total_rounds=3, num_canaries=5, num_unseen_canaries=5,
                  noise_multiplier=0.1, rounds_per_checkpoint=2,
                  progress_bar=False, root_output_dir=str(root),
                  run_name='run')
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


@pytest.mark.slow
def test_program_runs_without_tensorflow_and_writes_the_run_layout(tmp_path):
  completed = subprocess.run(
      [sys.executable, '-c', _WITHOUT_TF, *FLAGS,
       f'--root_output_dir={tmp_path}', '--run_name=run'],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert '| all iterates |' in completed.stdout
  for name in OUTPUTS:
    assert os.path.getsize(os.path.join(tmp_path, 'run', name)) > 0, name
  with open(os.path.join(tmp_path, 'run', run_directory.REPORT_JSON_FILE)) as f:
    report = json.load(f)
  assert report['setting']['backend'] == 'jax'
  with open(os.path.join(tmp_path, 'run', run_directory.METRICS_FILE)) as f:
    rows = list(csv.DictReader(f))
  # Round 0 and every round (--rounds_per_evaluation=1) evaluated, as TFF's.
  assert [row['round'] for row in rows] == ['0', '1', '2', '3']
  for row in rows:
    assert 0 <= float(row['evaluation/sparse_categorical_accuracy']) <= 1
    assert math.isfinite(float(row['evaluation/loss']))
  assert len({row['evaluation/num_examples'] for row in rows}) == 1
  assert int(rows[0]['evaluation/num_examples']) > 0
  assert report['accuracy'] == pytest.approx(
      float(rows[-1]['evaluation/sparse_categorical_accuracy']), abs=1e-7)


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_and_final_cosines_are_exact(
    tmp_path):
  whole = train.run_training(_config(tmp_path / 'whole'))
  assert whole.rounds_trained == 3 and whole.dim == 1_206_590
  # As if killed after round 2's checkpoint: the round-3 checkpoint and the
  # results are gone; the rerun resumes from round 2.
  shutil.copytree(tmp_path / 'whole', tmp_path / 'cut')
  cut_dir = tmp_path / 'cut' / 'run'
  os.unlink(cut_dir / run_directory.CHECKPOINT_DIR / 'round_00000003.npz')
  for name in (run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE):
    os.unlink(cut_dir / name)
  resumed = train.run_training(_config(tmp_path / 'cut'))
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (2, 1)
  np.testing.assert_array_equal(resumed.final_cosines, whole.final_cosines)
  np.testing.assert_array_equal(resumed.seen_maxima, whole.seen_maxima)
  np.testing.assert_array_equal(resumed.unseen_maxima, whole.unseen_maxima)
  for name in (run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE):
    assert (cut_dir / name).read_bytes() == (
        tmp_path / 'whole' / 'run' / name).read_bytes()
  # Algorithm 2's statistic from the checkpoints, canaries regenerated.
  checkpoints = cut_dir / run_directory.CHECKPOINT_DIR
  with np.load(checkpoints / 'round_00000003.npz') as saved:
    initial = saved['initial']
  final = _final_params(checkpoints / 'round_00000003.npz')
  units = np.asarray(canaries.directions(0, np.arange(5), initial.size),
                     np.float64)
  delta = initial.astype(np.float64) - final
  np.testing.assert_allclose(whole.final_cosines,
                             units @ delta / np.linalg.norm(delta), atol=1e-5)
  # Inserted canaries stand out of the unseen ones at this low noise.
  assert whole.seen_maxima.mean() > whole.unseen_maxima.max()
  # A run whose newest checkpoint holds other canaries (as another jax's
  # generator would draw them) is refused, in one line, before any write.
  newest = checkpoints / 'round_00000003.npz'
  with np.load(newest) as saved:
    arrays = {name: saved[name] for name in saved.files}
  key = checkpoints_lib.FINGERPRINT
  arrays[key] = arrays[key][::-1]
  np.savez(newest, **arrays)
  before = {path.name: path.stat().st_mtime_ns for path in cut_dir.iterdir()}
  with pytest.raises(train_config.ConfigError,
                     match='--run_name: .*written with other canaries'
                     ) as error:
    train.run_training(_config(tmp_path / 'cut'))
  assert '\n' not in str(error.value)
  assert {path.name: path.stat().st_mtime_ns
          for path in cut_dir.iterdir()} == before


def test_a_block_that_fills_at_the_last_round_keeps_every_rounds_rows(
    tmp_path):
  # Two rounds, checkpointed (and scored as one block) at round 2: the CSVs
  # written then hold round 2's metrics too, after round 0's evaluation
  # (metrics.csv only, as on the TFF engine). (4 canaries: at most 2 of a
  # round's 4 expected participants may be canaries.)
  result = train.run_training(_config(tmp_path, total_rounds=2,
                                      num_canaries=4,
                                      canary_buffer_rounds=2))
  for name, rounds in ((run_directory.METRICS_FILE, ['0', '1', '2']),
                       (run_directory.CANARY_COSINES_FILE, ['1', '2'])):
    with open(os.path.join(result.run_dir, name)) as f:
      assert [line.split(',')[0] for line in f][1:] == rounds, name


def _final_params(path) -> np.ndarray:
  """The flat model of a checkpoint (its leaves in `ServerState` order)."""
  with np.load(path) as saved:
    leaves = [saved[f'leaf_{i}'] for i in range(8)]  # params: 8 arrays.
  return np.concatenate([leaf.ravel() for leaf in leaves]).astype(np.float64)


@pytest.mark.parametrize('flag,message', [
    (dict(tff_workers=2), '--tff_workers'),
    (dict(task='fashion_mnist', synthetic_examples_per_client=3),
     '--synthetic_examples_per_client'),
    (dict(num_canaries=0), '--num_canaries=0'),
    (dict(use_synthetic_data=False, data_dir='/nonexistent'), '--data_dir'),
])
def test_flags_the_engine_does_not_take_are_named(tmp_path, flag, message):
  with pytest.raises(train_config.ConfigError, match=message):
    train.prepare(_config(tmp_path, **flag))
  assert not os.path.exists(tmp_path / 'run')


def test_fashion_mnist_directory_without_its_files_is_named(tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(train_config.ConfigError, match='--data_dir'):
    train.prepare(_config(tmp_path, task='fashion_mnist',
                              use_synthetic_data=False, data_dir=str(empty)))
  assert not os.path.exists(tmp_path / 'run')


def test_fashion_mnist_trains_the_ten_class_cnn_on_the_demos_clients(
    tmp_path):
  # The demo's task on the JAX engine: TFF's 10-class head (1,199,882
  # parameters), the label-shard clients (delta = m^-1.1 for m clients).
  # 4 canaries over 2 rounds: 2 of a round's 4 expected participants.
  result = train.run_training(_config(
      tmp_path, task='fashion_mnist', synthetic_num_clients=6,
      synthetic_examples_per_client=10, total_rounds=2, num_canaries=4))
  assert result.dim == 1_199_882
  assert result.delta == pytest.approx(6**-1.1)
  assert result.report is not None and 0.0 <= result.accuracy <= 1.0


@pytest.mark.slow
def test_a_device_out_of_memory_is_one_line_and_the_run_resumes(tmp_path):
  # XLA's allocation failure (its error type differs across jax versions)
  # in round 3, after the checkpoint of round 2: the launcher says so in one
  # line, exit 2, and a rerun resumes from round 2.
  script = r'''
import runpy, sys
from one_shot_epe.jax_engine import round_engine
real = round_engine.RoundEngine.__call__
def fail_in_round_3(self, state, *args):
  if int(state.round_num) == 2:
    raise type('XlaRuntimeError', (RuntimeError,), {})(
        'RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.21GiB.')
  return real(self, state, *args)
round_engine.RoundEngine.__call__ = fail_in_round_3
sys.argv = ['train'] + sys.argv[1:]
runpy.run_module('experiments.train', run_name='__main__')
'''
  command = [*FLAGS, f'--root_output_dir={tmp_path}', '--run_name=run']
  done = subprocess.run([sys.executable, '-c', script, *command], cwd=REPO,
                        capture_output=True, text=True, timeout=600,
                        check=False)
  assert done.returncode == 2, done.stderr[-3000:]
  assert 'Traceback' not in done.stderr
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith('error: the JAX device ran out of memory') and (
      '--clients_per_round' in last), last
  resumed = subprocess.run([sys.executable, '-m', 'experiments.train',
                            *command], cwd=REPO, capture_output=True,
                           text=True, timeout=600, check=False)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert 'resumed from round 2, trained 1 now' in resumed.stdout


@pytest.mark.parametrize('resident_data, flag', [
    (True, '--resident_data: .*use --noresident_data'),
    (False, '--clients_per_round: .*lower --clients_per_round'),
])
def test_a_run_larger_than_the_device_memory_is_refused(
    tmp_path, monkeypatch, resident_data, flag):
  # 'vmap' with the split resident needs the split (4 clients x 16 examples
  # x 3,140 bytes) on the device: a device short of half of it is told to
  # feed batches from the host; host-fed, a byte short: fewer clients. One
  # line naming the estimate and the device's memory; nothing is written.
  monkeypatch.setattr(round_engine, 'default_local_training', lambda: 'vmap')
  monkeypatch.setattr(memory, 'device_memory_limit', lambda: 10**12)
  run = train.prepare(_config(tmp_path, resident_data=resident_data))
  need = memory.device_memory(run.plan, backend_jax.model(run.config),
                              run.data.train, resident_data=resident_data)
  assert need.resident == resident_data
  if resident_data:
    assert need.data_bytes == 4 * 16 * (28 * 28 * 4 + 4)
  limit = need.total_bytes - (need.data_bytes // 2 if resident_data else 1)
  monkeypatch.setattr(memory, 'device_memory_limit', lambda: limit)
  with pytest.raises(train_config.ConfigError, match=flag) as error:
    train.prepare(_config(tmp_path, resident_data=resident_data))
  message = str(error.value)
  assert '\n' not in message and f'{need.lanes} client lanes' in message
  assert f'device has {limit / 1e9:.3g} GB' in message
  assert not os.path.exists(tmp_path / 'run')
