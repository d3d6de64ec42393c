"""`experiments.reproduce --backend=jax` where TensorFlow cannot be imported.

The accelerator machines have JAX and no TensorFlow: the grid program must
run there end to end. Independent truths: an interpreter in which
`import tensorflow` (and TFF, TF Privacy) raises ImportError; the runs' own
report.json files, which the grid's results.json must repeat.
"""

import json
import os
import subprocess
import sys

import pytest

from experiments import grid
from experiments import reproduce
from one_shot_epe.runtime import run_directory
from one_shot_epe.reporting import run_report

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_WITHOUT_TF = '''
import runpy, sys
for name in ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy'):
  sys.modules[name] = None
sys.argv = ['reproduce'] + sys.argv[1:]
runpy.run_module('experiments.reproduce', run_name='__main__')
'''
_NOISES = ('0', '0.3')
_TINY = (f'--config={os.path.join(REPO, "configs", "demo.cfg")}',
         '--backend=jax', '--synthetic_num_clients=4',
         '--synthetic_examples_per_client=16', '--clients_per_round=2',
         '--total_rounds=2', '--client_epochs_per_round=1',
         '--num_canaries=4', '--num_unseen_canaries=6',
         '--rounds_per_checkpoint=2', '--noprogress_bar',
         f'--noise_multipliers={",".join(_NOISES)}', '--repetitions=1')


def _reproduce(output_dir: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, '-c', _WITHOUT_TF, *_TINY, f'--output_dir={output_dir}'],
      cwd=REPO, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.slow
def test_jax_grid_runs_without_tensorflow_and_reruns_nothing(tmp_path):
  completed = _reproduce(str(tmp_path))
  assert completed.returncode == 0, completed.stderr[-3000:]
  for name in (reproduce.TABLE_FILE, reproduce.RESULTS_FILE,
               reproduce.DENSITY_FILE):
    assert os.path.getsize(tmp_path / name) > 0, name
  with open(tmp_path / reproduce.RESULTS_FILE, encoding='utf-8') as f:
    results = json.load(f)
  assert len(results) == len(_NOISES)
  for noise in _NOISES:
    run_dir = tmp_path / grid.RUNS_DIR / f'noise{noise}_rep1'
    with open(run_dir / run_directory.REPORT_JSON_FILE, encoding='utf-8') as f:
      report = json.load(f)
    assert report['setting']['backend'] == 'jax'
    assert report['noise_multiplier'] == float(noise)
    assert report in [entry['report'] for entry in results], noise
    # The JAX engine's report reads back as the same typed report.
    typed = run_report.RunReport.read(
        str(run_dir / run_directory.REPORT_JSON_FILE))
    assert typed.to_dict() == report
    assert run_report.RunReport.from_dict(typed.to_dict()) == typed
  # The rerun finds every report written and trains nothing.
  mtimes = {path: os.path.getmtime(path) for path in
            tmp_path.glob(f'{grid.RUNS_DIR}/*/checkpoints/*')}
  rerun = _reproduce(str(tmp_path))
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert mtimes and mtimes == {path: os.path.getmtime(path) for path in mtimes}
