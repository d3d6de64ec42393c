"""The Flower doors refuse a bad plan whole, before any work, in one line.

`examples.flower_fashion_mnist` and the Flower engine's `CanaryAudit` are
given the bad inputs a new user tries: a data directory without
Fashion-MNIST (never silently replaced by synthetic data), no rounds, a
negative noise multiplier, one canary, a billion rounds, more canaries than
clients, an output directory that cannot be written. Each exits 2 (or
raises) with one line naming the flag or argument, before any round and
before anything is written; Ctrl-C stops a run with one line and status
130, and the rerun resumes. Runs in the Flower environment (`make
test-flower`); skipped where flwr is absent.
"""

import os
import signal
import subprocess
import sys
import time

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


def test_missing_data_is_an_error_not_synthetic_data(tmp_path):
  done = _example(f'--output_dir={tmp_path / "runs"}', '--data_dir=/none')
  assert done.returncode == 2
  assert '--use_synthetic_data' in done.stderr  # It says how to choose it.
  assert 'Data: synthetic' not in done.stdout


@pytest.mark.parametrize('changes, expected', [
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


def test_ctrl_c_stops_the_example_in_one_line_and_it_resumes(tmp_path):
  flags = ['--use_synthetic_data', '--rounds=400', '--num_canaries=20',
           '--noise_multipliers=1', f'--output_dir={tmp_path}']
  checkpoints = tmp_path / 'noise_1' / 'checkpoints'
  log = tmp_path / 'stderr.txt'  # A file: Flower's log would fill a pipe.
  with open(log, 'w', encoding='utf-8') as stream:
    process = subprocess.Popen(
        [sys.executable, '-m', _EXAMPLE, '--runtime=local', *flags],
        cwd=_REPO, stdout=subprocess.DEVNULL, stderr=stream,
        start_new_session=True)
  try:
    deadline = time.monotonic() + 180
    while not (checkpoints.exists() and any(  # A complete one, not a temp.
        name.endswith('.npz') for name in os.listdir(checkpoints))):
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    process.wait(timeout=60)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()
  stderr = log.read_text(encoding='utf-8')
  assert process.returncode == 130, stderr
  assert 'Traceback' not in stderr
  last = stderr.strip().splitlines()[-1]
  assert last.startswith('interrupted after round '), stderr
  assert last.endswith(f' of 400 ({tmp_path / "noise_1"}); rerun the same '
                       'command to resume')
  done = _example(*flags, timeout=600)
  assert done.returncode == 0, done.stderr
  assert (tmp_path / 'noise_1' / 'report.json').exists()


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
