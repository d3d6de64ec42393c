"""The Flower doors refuse a bad plan whole, before any work, in one line.

`examples.flower_fashion_mnist`, the Flower App's ServerApp and the Flower
engine's `CanaryAudit` are given the bad inputs a new user tries: a data
directory without Fashion-MNIST (never silently replaced by synthetic
data, and found before Flower's strategies are built), no rounds, a
negative noise multiplier or clip, one canary, a billion rounds, a hundred
million canaries (refused before their schedule is drawn), more canaries
than clients, an output directory that cannot be written, a model of one
parameter, an unknown --canary_kind, more data canary nodes than clients.
Each exits 2 (or raises) with one line naming the flag, key or
argument, before any round and before anything is written. Ctrl-C saves the
run after its last completed round and stops with one line naming it and
status 130; the rerun resumes from that round and writes the report and
cosines an uninterrupted run writes, byte for byte. The example runs as a
script from anywhere, and audits with data canary nodes
(--canary_kind=data). Runs in the Flower environment (`make test-flower`);
skipped where flwr is absent.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,wrong-import-position
from one_shot_epe.flower_engine import audit as audit_lib

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_EXAMPLE = 'examples.flower_fashion_mnist'


def _example(*flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-m', _EXAMPLE, '--runtime=local',
                         *flags], cwd=_REPO, capture_output=True, text=True,
                        timeout=timeout, check=False)


@pytest.mark.parametrize('flags, expected', [
    (['--data_dir=/nonexistent'], '--data_dir: '),
    (['--rounds=0'], '--rounds must be >= 1; got 0.'),
    (['--noise_multipliers=-1'], '--noise_multipliers must be a finite '
     'number >= 0.0; got -1.0.'),
    (['--noise_multipliers=half'], '--noise_multipliers must be numbers'),
    (['--num_canaries=1'], '--num_canaries must be in [2, 1000000000]'),
    (['--rounds=1000000000'], '--rounds=1000000000: the run needs about'),
    (['--num_canaries=100000'], '--num_canaries=100000: 2,000 of the 2,020 '
     'expected participants'),
    (['--output_dir=/proc/sys/kernel/flower_runs'], '--output_dir: '),
    # Checked before a schedule of 1e8 canaries is drawn.
    (['--rounds=3', '--num_canaries=100000000'],
     '--num_canaries=100000000: '),
    (['--canary_kind=both'], "--canary_kind must be one of ['gradient', "
     "'data']; got 'both'."),
    (['--canary_kind=data', '--num_canaries=201'], '--num_canaries=201: 201 '
     'of the 401 nodes would be canaries'),
])
def test_the_example_refuses_a_bad_plan_in_one_line(tmp_path, flags,
                                                    expected):
  output_dir = tmp_path / 'runs'
  synthetic = [] if flags[0].startswith('--data_dir') else [
      '--use_synthetic_data']
  done = _example(f'--output_dir={output_dir}', *synthetic, *flags)
  assert done.returncode == 2, done.stderr
  lines = done.stderr.strip().splitlines()
  assert 'Traceback' not in done.stderr
  assert lines[-1].startswith(f'error: {expected}'), done.stderr
  assert not output_dir.exists()


def test_the_example_audits_with_data_canary_nodes(tmp_path):
  done = _example(f'--output_dir={tmp_path}', '--use_synthetic_data',
                  '--canary_kind=data', '--rounds=2', '--num_canaries=20',
                  '--noise_multipliers=1')
  assert done.returncode == 0, done.stderr
  (name,) = os.listdir(tmp_path)
  with open(os.path.join(tmp_path, name, 'report.json'),
            encoding='utf-8') as stream:
    report = json.load(stream)
  assert report['canary_kind'] == 'data'
  setting = report['setting']
  assert setting['num_real_nodes'] == 200 and setting['num_canaries'] == 20
  # 20 of 220 nodes per round, over 2 rounds: some canaries replied.
  assert 0 < sum(setting['canary_presentations_observed']) <= 40
  assert report['epsilon_est_final'] is not None
  assert 'final_cosines.csv' not in os.listdir(os.path.join(tmp_path, name))


def test_missing_data_is_an_error_not_synthetic_data(tmp_path):
  done = _example(f'--output_dir={tmp_path / "runs"}', '--data_dir=/none')
  assert done.returncode == 2
  assert '--use_synthetic_data' in done.stderr  # It says how to choose it.
  assert 'Data: synthetic' not in done.stdout
  # The data is checked before Flower's strategies are built (they warn).
  assert done.stderr.strip().splitlines() == [done.stderr.strip()], (
      done.stderr)


def test_the_example_runs_as_a_script_from_anywhere(tmp_path):
  done = subprocess.run(
      [sys.executable, os.path.join(_REPO, 'examples',
                                    'flower_fashion_mnist.py'), '--rounds=0'],
      cwd=tmp_path, capture_output=True, text=True, timeout=120,
      check=False)
  assert done.returncode == 2, done.stderr
  assert done.stderr.strip() == 'error: --rounds must be >= 1; got 0.'


@pytest.mark.parametrize('changes, expected', [
    (dict(run_dir='/proc/sys/kernel/flower_runs/run'), 'run_dir: '),
    (dict(num_canaries=1), 'num_canaries must be in [2, 1000000000]'),
    (dict(num_unseen_canaries=1), 'num_unseen_canaries must be in [2, '),
    (dict(rounds=0), 'rounds must be >= 1'),
    (dict(rounds=10**9), 'rounds=1000000000: the run needs about'),
])
def test_the_audit_refuses_its_plan_at_construction(tmp_path, changes,
                                                    expected):
  plan = dict(run_dir=str(tmp_path / 'run'), num_canaries=20, rounds=10,
              delta=1e-5)
  with pytest.raises(ValueError) as refused:
    audit_lib.CanaryAudit(**{**plan, **changes})
  assert str(refused.value).startswith(expected), refused.value
  assert not os.listdir(tmp_path)


def _run_dir(output_dir) -> str:
  """The example's one run directory under `output_dir`."""
  names = [name for name in os.listdir(output_dir)
           if name.startswith('noise_1-')]
  assert len(names) == 1, os.listdir(output_dir)
  return os.path.join(output_dir, names[0])


def _checkpointed(output_dir) -> bool:
  """Whether the example's run under `output_dir` saved a checkpoint."""
  try:
    checkpoints = os.path.join(_run_dir(output_dir), 'checkpoints')
    return any(name.endswith('.npz') for name in os.listdir(checkpoints))
  except (OSError, AssertionError):
    return False


@pytest.mark.slow
def test_ctrl_c_saves_the_last_round_and_the_rerun_matches_a_whole_run(
    tmp_path):
  flags = ['--use_synthetic_data', '--rounds=120', '--num_canaries=20',
           '--noise_multipliers=1']
  interrupted = tmp_path / 'interrupted'
  log = tmp_path / 'stderr.txt'  # A file: Flower's log would fill a pipe.
  with open(log, 'w', encoding='utf-8') as stream:
    process = subprocess.Popen(
        [sys.executable, '-m', _EXAMPLE, '--runtime=local', *flags,
         f'--output_dir={interrupted}'],
        cwd=_REPO, stdout=subprocess.DEVNULL, stderr=stream,
        start_new_session=True)
  try:
    deadline = time.monotonic() + 180
    # Past the first checkpoint (round 25), so that a later round is saved.
    while not _checkpointed(interrupted):
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=60)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()
  stderr = log.read_text(encoding='utf-8')
  assert process.returncode == 130, stderr
  assert 'Traceback' not in stderr
  run_dir = _run_dir(interrupted)
  last = stderr.strip().splitlines()[-1]
  assert last.startswith('interrupted after round '), stderr
  assert last.endswith(f' of 120 ({run_dir}); rerun the same command to '
                       'resume')
  saved = int(last.split()[3])
  assert saved in range(1, 120)
  done = _example(*flags, f'--output_dir={interrupted}', timeout=600)
  assert done.returncode == 0, done.stderr
  assert f'resumed from round {saved} in {run_dir}' in done.stderr
  whole = _example(*flags, f'--output_dir={tmp_path / "whole"}', timeout=600)
  assert whole.returncode == 0, whole.stderr
  for name in ('report.json', 'final_cosines.csv', 'max_cosines.csv',
               'canary_cosines.csv'):
    with open(os.path.join(run_dir, name), encoding='utf-8') as a, open(
        os.path.join(_run_dir(tmp_path / 'whole'), name),
        encoding='utf-8') as b:
      assert a.read() == b.read(), name


def test_a_model_of_fewer_than_3_parameters_is_refused_before_round_1(
    tmp_path):
  from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict  # pylint: disable=import-outside-toplevel
  from flwr.serverapp.strategy import (  # pylint: disable=import-outside-toplevel
      DifferentialPrivacyServerSideFixedClipping, FedAvg)
  from one_shot_epe.flower_engine import local_grid  # pylint: disable=import-outside-toplevel

  def client(node, message):
    del node
    arrays = message.content['arrays']
    return RecordDict({'arrays': ArrayRecord({
        key: Array(arrays[key].numpy() + 0.01) for key in arrays}),
                       'metrics': MetricRecord({'num-examples': 1})})

  def run(model):
    audit = audit_lib.CanaryAudit(run_dir=str(tmp_path / 'run'),
                                  num_canaries=4, rounds=2, delta=1e-5)
    strategy = audit.wrap(DifferentialPrivacyServerSideFixedClipping(
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0), 1.0, 1.0, 4))
    strategy.start(local_grid.LocalGrid(4, client), model, num_rounds=2)
    return audit

  # Flower's app template's model: np.ones((1, 1)).
  with pytest.raises(ValueError, match=r'^initial_arrays: the model has 1 '
                     r'parameter\(s\); the canaries\' cosines need at least '
                     '3'):
    run(ArrayRecord({'w': Array(np.ones((1, 1), np.float32))}))
  assert not (tmp_path / 'run').exists()
  audit = run(ArrayRecord({'w': Array(np.zeros((8, 4), np.float32))}))
  assert audit.report is not None and audit.resumed_from == 0


def _server_app(monkeypatch):
  """The Flower App's ServerApp module, imported as `flwr run` loads it."""
  monkeypatch.syspath_prepend(os.path.join(_REPO, 'examples', 'flowerapp'))
  import importlib  # pylint: disable=import-outside-toplevel
  return importlib.import_module('fashion_audit.server_app')


def _app_config() -> dict[str, object]:
  """The app's run config as its pyproject.toml declares it."""
  import tomllib  # pylint: disable=import-outside-toplevel
  with open(os.path.join(_REPO, 'examples', 'flowerapp', 'pyproject.toml'),
            'rb') as declared:
    return dict(tomllib.load(declared)['tool']['flwr']['app']['config'])


@pytest.mark.parametrize('changes, expected', [
    ({'noise-multiplier': -1}, "run config 'noise-multiplier' must be a "
     'finite number >= 0.0; got -1.0.'),
    ({'clipping-norm': -0.5}, "run config 'clipping-norm' must be a finite "
     'number >= 0.0; got -0.5.'),
    ({'clients-per-round': 300}, "run config 'clients-per-round' must be <= "
     'num-clients = 200; got 300.'),
    ({'num-canaries': 2.5}, "run config 'num-canaries' must be an int; got "
     'float 2.5.'),
    ({'delta': 2.0}, "run config 'delta' must be -1 (num-clients^-1.1) or a "
     'finite number in (0.0, 1.0); got 2.0.'),
    ({'seed': -2}, "run config 'seed' must be -1 (unpredictable) or in [0, "),
    ({'output-dir': '/proc/sys/kernel/flower_runs'},
     "run config 'output-dir': "),
    ({'num-canaries': 1}, "run config 'num-canaries' must be in [2, "),
    ({'num-server-rounds': 0}, "run config 'num-server-rounds' must be >= 1"),
    ({'num-canaries': 1000}, "run config 'num-canaries'=1000: "),
    ({'num-server-rounds': 10**9}, "run config 'num-server-rounds'="),
    ({'use-synthetic-data': False, 'data-dir': '/none'},
     "run config 'data-dir': '/none' holds neither"),
])
def test_the_app_refuses_a_bad_run_config_naming_its_key(
    tmp_path, monkeypatch, changes, expected):
  server_app = _server_app(monkeypatch)
  config = {**_app_config(), 'use-synthetic-data': True,
            'output-dir': str(tmp_path / 'runs'), **changes}
  with pytest.raises(server_app.RunConfigError) as refused:
    server_app.audited_run(None, config)  # Refused before the grid is used.
  assert str(refused.value).startswith(expected), refused.value
  assert '\n' not in str(refused.value)
  assert not os.listdir(tmp_path)
