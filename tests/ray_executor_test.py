"""`experiments.reproduce --executor=ray`: the grid as Ray tasks.

Independent truth: the sequential executor's outputs. A tiny JAX grid of two
runs is run sequentially in this process, its tables, results and figures
kept, its directory emptied; then the same grid runs as Ray tasks on a local
Ray cluster of 2 CPUs, where the first attempt of each task kills its own
worker process (SIGKILL) right after the run's first checkpoint past round 0
is written. Ray retries the tasks; the retries must resume from that
checkpoint (the file is never rewritten) and the outputs must be the same
bytes, with no temporary file left behind. A bad --ray_address exits with
status 2 naming it, writing nothing.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

from absl import flags
import pytest

from experiments import grid
from experiments import reproduce
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import run_directory

ray = pytest.importorskip('ray')

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_TINY = (f'--config={os.path.join(_REPO, "configs", "demo.cfg")}',
         '--backend=jax', '--synthetic_num_clients=4',
         '--synthetic_examples_per_client=16', '--clients_per_round=2',
         '--total_rounds=4', '--client_epochs_per_round=1',
         '--num_canaries=6', '--num_unseen_canaries=6',
         '--rounds_per_checkpoint=2', '--noprogress_bar',
         '--noise_multipliers=0,0.3', '--repetitions=1')
_OUTPUTS = (reproduce.TABLE_FILE, reproduce.ANDERSON_FILE,
            reproduce.RESULTS_FILE, reproduce.DENSITY_FILE,
            reproduce.EPSILON_FINAL_FILE)


def _killed_once(marker_dir: str, task, program):
  """`task(program)`, but the first attempt dies after its round-2 checkpoint.

  Runs in a Ray worker. The marker file (one per program of one run)
  records the killed attempt and the inode of the checkpoint it left.
  """
  marker = os.path.join(marker_dir, os.path.basename(program[0].run_dir))
  if not os.path.exists(marker):
    write_bytes = atomic_io.write_bytes

    def write_then_die(path: str, data: bytes, *args, **kwargs) -> None:
      write_bytes(path, data, *args, **kwargs)
      if (os.path.basename(os.path.dirname(path)) ==
          run_directory.CHECKPOINT_DIR and
          not path.endswith('round_00000000.npz')):
        with open(marker, 'w', encoding='utf-8') as stream:
          stream.write(f'{path}\n{os.stat(path).st_ino}\n')
        os.kill(os.getpid(), signal.SIGKILL)

    atomic_io.write_bytes = write_then_die
  return task(program)


def _grid(output_dir: str, executor: grid.Executor) -> dict[str, bytes]:
  """Runs the tiny grid into `output_dir`; its outputs' bytes by name."""
  flag_values = flags.FlagValues()
  reproduce.define_flags(flag_values)
  flag_values(['reproduce', *_TINY, f'--output_dir={output_dir}'])
  base, noises, repetitions = reproduce.config_and_grid(flag_values)
  configs = grid.grid_configs(base, noises, repetitions, output_dir)
  runs, _ = grid.run_grid(configs, executor=executor)
  reproduce.write_outputs(runs, noises, repetitions, output_dir, 'demo')
  outputs = {}
  for name in _OUTPUTS:
    with open(os.path.join(output_dir, name), 'rb') as stream:
      outputs[name] = stream.read()
  return outputs


@pytest.mark.slow
def test_ray_grid_with_killed_workers_equals_sequential(tmp_path):
  output_dir = str(tmp_path / 'grid')
  sequential = _grid(output_dir, grid.sequential)
  shutil.rmtree(output_dir)
  markers = tmp_path / 'killed'
  markers.mkdir()
  # The test module travels to the workers by value (tests/ is no package).
  ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
  from experiments import ray_executor  # pylint: disable=g-import-not-at-top
  # The local cluster's session files (logs, sockets), which Ray keeps: in
  # a short directory of their own (a socket's path has at most 107 bytes,
  # and the test session's temporary directory is deep).
  ray_dir = tempfile.mkdtemp(prefix='ray_', dir='/tmp')
  try:
    executor = ray_executor.connect(None, num_cpus=2, max_retries=1,
                                    temp_dir=ray_dir)
    try:
      on_ray = _grid(output_dir, lambda task, programs: executor(
          lambda program: _killed_once(str(markers), task, program),
          programs))
    finally:
      ray.shutdown()
  finally:
    shutil.rmtree(ray_dir)
  killed = sorted(os.listdir(markers))
  assert killed == ['noise0.3_rep1', 'noise0_rep1']
  for name in killed:
    path, inode = (markers / name).read_text(encoding='utf-8').split()
    assert os.stat(path).st_ino == int(inode), f'{path} was rewritten'
  assert on_ray == sequential
  assert not [name for _, _, names in os.walk(output_dir) for name in names
              if name.startswith(atomic_io.TEMPORARY_PREFIX)]


def test_unreachable_ray_address_exits_2_and_writes_nothing(tmp_path):
  output_dir = tmp_path / 'out'
  completed = subprocess.run(
      [sys.executable, '-m', 'experiments.reproduce', *_TINY,
       f'--output_dir={output_dir}', '--executor=ray',
       '--ray_address=127.0.0.1:9'],
      cwd=_REPO, capture_output=True, text=True, timeout=300, check=False)
  assert completed.returncode == 2, completed.stderr[-2000:]
  last = completed.stderr.strip().splitlines()[-1]
  assert last.startswith('error: --ray_address') and 'unreachable' in last
  assert not output_dir.exists()
