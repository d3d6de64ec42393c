"""One prepared command for a lent accelerator: the JAX engine checked there.

`make device-check OUT=<dir>` runs this with the accelerator machine's own
python3 (jax with CUDA, no TensorFlow, no network), in the repository root:

1. installs the wheels `make device-wheels` carried (`--wheels`) with
   `pip --no-index --no-deps --target` into a temporary site directory,
   only those whose distribution the interpreter lacks (the image's own
   packages are never touched or shadowed), and puts it and the working
   tree on PYTHONPATH;
2. runs four steps, each a subprocess with its own time cap (killed with its
   process group when the cap or the overall --budget_s runs out); a failing
   step does not stop the others:

   tests:       the JAX engine's test subset (`--tests`) on the device;
   cosines:     a 3-round `experiments.train --backend=jax` run on the
                device and the same run with JAX_PLATFORMS=cpu; their canary
                cosines (per round, final, maxima) must agree to
                --cosine_atol + --cosine_rtol x |cpu| (the device computes
                the 'vmap' strategy and TF32 matmuls, the CPU 'loop' in full
                float32: the same noise, from the same `jax.random` keys);
   paper_scale: `benchmarks.paper_scale --accelerator=gpu` on --paper_tasks
                (EMNIST at its 101 clients, StackOverflow at
                --stackoverflow_clients): measured round seconds beside the
                prediction made in the same run;
   program:     `benchmarks.program_speed --runs=4`: a program of 4 runs
                (`--runs_per_program=4`) against the same runs in sequence;

3. writes OUT/device_check.json (every figure and each step's status),
   OUT/device_check.md (the table: measured round seconds beside the
   predicted ones, compile seconds, peak device memory, padding, bytes to
   the device), OUT/paper_scale.json and OUT/device_check.log (each step's
   command and output tail).

--tiny runs the same steps at toy sizes (`make device-check-cpu` does, on a
CPU, in a virtual environment of exactly the accelerator image's packages:
`scripts/device_env.py`), so a missing wheel or a TensorFlow import on the
JAX path shows before a machine is lent.

Only the standard library is imported here: the project's dependencies may
be among the wheels. Exit status: 0 if every step passed, 1 otherwise.

  python3 scripts/device_check.py --out=DIR [--wheels=device_wheels]
      [--tiny] [--paper_tasks=emnist,stackoverflow,shakespeare] [--budget_s=480]
"""

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# The JAX engine's tests run on the device: the round, packing, programs,
# whole runs, data, canaries, optimizers and the correlated noise.
DEVICE_TESTS = ('tests/jax_engine_fedavg_test.py',
                'tests/jax_engine_packing_test.py',
                'tests/jax_engine_program_test.py',
                'tests/jax_engine_training_test.py',
                'tests/jax_engine_data_test.py',
                'tests/jax_engine_canaries_test.py',
                'tests/jax_engine_optimizers_test.py',
                'tests/correlated_noise_test.py')
# --tiny: the quick ones (they import what the others import).
TINY_TESTS = ('tests/jax_engine_optimizers_test.py',
              'tests/jax_engine_canaries_test.py')
# Seconds each step may take (the whole check: --budget_s).
CAPS = {'tests': 200, 'cosines': 90, 'paper_scale': 150, 'program': 100}
# The 3-round launcher run of the cosine step: synthetic EMNIST-shaped
# clients, the real CNN.
COSINE_RUN = ('--task=emnist_character', '--use_synthetic_data',
              '--synthetic_num_clients=24',
              '--synthetic_examples_per_client=16',
              '--synthetic_client_sizes=realistic', '--clients_per_round=6',
              '--total_rounds=3', '--num_canaries=6',
              '--num_unseen_canaries=6', '--noise_multiplier=0.5',
              '--client_batch_size=8', '--rounds_per_checkpoint=3',
              '--rounds_per_evaluation=3', '--noprogress_bar')
# run_directory's cosine files, compared between the device and the CPU.
COSINE_FILES = ('canary_cosines.csv', 'final_cosines.csv', 'max_cosines.csv')
# Columns that differ between any two runs.
TIME_COLUMNS = ('training_time_in_seconds',)
# Where the device's peak memory of a step is written (`_PEAK_WRAPPER`).
_PEAK_ENV = 'DEVICE_CHECK_PEAK_FILE'
# Runs `python -m MODULE ARGS` and, at exit, writes the first local device's
# peak bytes in use (XLA's memory_stats; null on a CPU) to the file named by
# $DEVICE_CHECK_PEAK_FILE.
_PEAK_WRAPPER = """
import atexit, json, os, runpy, sys
def _peak():
  import jax
  stats = jax.local_devices()[0].memory_stats() or {}
  with open(os.environ['%s'], 'w') as stream:
    json.dump({'peak_bytes': stats.get('peak_bytes_in_use'),
               'device': str(jax.local_devices()[0])}, stream)
atexit.register(_peak)
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name='__main__', alter_sys=True)
""" % _PEAK_ENV


def install_wheels(wheels: str, site: str) -> dict[str, list[str]]:
  """Installs the wheels in `wheels` whose distribution is missing, into site.

  Args:
    wheels: a folder of .whl files (`make device-wheels`); may be absent.
    site: the target directory (created by pip).

  Returns:
    {'installed': [...], 'present': [...]}: wheel files installed, and those
    skipped because the interpreter already has that distribution.

  Raises:
    subprocess.CalledProcessError: pip failed.
  """
  files = sorted(f for f in (os.listdir(wheels) if os.path.isdir(wheels)
                             else []) if f.endswith('.whl'))
  missing, present = [], []
  for name in files:
    distribution = name.split('-')[0]
    try:
      metadata.version(distribution)
      present.append(name)
    except metadata.PackageNotFoundError:
      missing.append(name)
  if missing:
    subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--quiet', '--no-index',
         '--no-deps', '--no-compile', '--no-cache-dir',
         '--disable-pip-version-check', '--target', site,
         *[os.path.join(wheels, name) for name in missing]], check=True)
  return {'installed': missing, 'present': present}


def run_step(command: Sequence[str], timeout: float, env: Mapping[str, str],
             log: list[str], name: str) -> dict[str, Any]:
  """Runs `command` in the repository root; kills its group after timeout.

  Args:
    command: the argv.
    timeout: seconds.
    env: the environment.
    log: gets the command and its output's tail.
    name: the step, for the log.

  Returns:
    {'ok', 'returncode', 'seconds', 'timed_out', 'stdout'}.
  """
  start = time.monotonic()
  with subprocess.Popen(list(command), cwd=REPO, env=dict(env),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, start_new_session=True) as process:
    timed_out = False
    try:
      output, _ = process.communicate(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      output, _ = process.communicate()
      timed_out = True
  seconds = time.monotonic() - start
  log.append(f'### {name}: {" ".join(command)}\n'
             f'# exit {process.returncode}, {seconds:.1f} s'
             f'{" (timed out)" if timed_out else ""}\n{output[-6000:]}\n')
  return {'ok': process.returncode == 0 and not timed_out,
          'returncode': process.returncode, 'seconds': seconds,
          'timed_out': timed_out, 'stdout': output}


def _read_rows(path: str) -> list[dict[str, str]]:
  with open(path, newline='', encoding='utf-8') as stream:
    return list(csv.DictReader(stream))


def compare_cosines(device_dir: str, cpu_dir: str, atol: float,
                    rtol: float) -> dict[str, Any]:
  """The largest cosine differences between two run directories' CSVs.

  Args:
    device_dir, cpu_dir: the run directories.
    atol, rtol: a number agrees if |device - cpu| <= atol + rtol |cpu|.

  Returns:
    {'max_abs_diff', 'values', 'disagreeing', 'ok'}.
  """
  largest, values, disagreeing = 0.0, 0, 0
  for name in COSINE_FILES:
    ours, theirs = (_read_rows(os.path.join(device_dir, name)),
                    _read_rows(os.path.join(cpu_dir, name)))
    if len(ours) != len(theirs) or not ours:
      return {'ok': False, 'error': f'{name}: {len(ours)} rows on the device, '
                                    f'{len(theirs)} on the CPU'}
    for row, other in zip(ours, theirs):
      for column, text in row.items():
        if column in TIME_COLUMNS:
          continue
        try:
          a, b = float(text), float(other[column])
        except ValueError:
          continue
        if a != a and b != b:  # Both NaN.
          continue
        values += 1
        difference = abs(a - b)
        largest = max(largest, difference)
        disagreeing += not difference <= atol + rtol * abs(b)
  return {'ok': values > 0 and disagreeing == 0, 'max_abs_diff': largest,
          'values': values, 'disagreeing': disagreeing}


def _peak_command(module: str, args: Sequence[str]) -> list[str]:
  return [sys.executable, '-c', _PEAK_WRAPPER, module, *args]


def _peak(path: str) -> dict[str, Any]:
  try:
    with open(path, encoding='utf-8') as stream:
      return json.load(stream)
  except (OSError, ValueError):
    return {'peak_bytes': None, 'device': None}


def step_tests(args: argparse.Namespace, env: dict[str, str], cap: float,
               log: list[str]) -> dict[str, Any]:
  """The JAX engine's test subset, on the default device."""
  tests = TINY_TESTS if args.tiny else DEVICE_TESTS
  result = run_step([sys.executable, '-m', 'pytest', '-q', '-p',
                     'no:cacheprovider', '--durations=5', *tests], cap, env,
                    log, 'tests')
  summary = [line for line in result.pop('stdout').splitlines()
             if ' passed' in line or ' failed' in line or ' error' in line]
  return {**result, 'tests': list(tests),
          'summary': summary[-1] if summary else None}


def step_cosines(args: argparse.Namespace, env: dict[str, str], cap: float,
                 work: str, log: list[str]) -> dict[str, Any]:
  """The 3-round launcher run on the device and on the CPU, compared."""
  runs = {}
  start = time.monotonic()
  for where, extra in (('device', {}), ('cpu', {'JAX_PLATFORMS': 'cpu'})):
    peak_file = os.path.join(work, f'peak_{where}.json')
    started = time.monotonic()
    result = run_step(_peak_command('experiments.train', [
        '--backend=jax', *COSINE_RUN, f'--root_output_dir={work}',
        f'--run_name=cosines_{where}']), cap / 2,
                      {**env, **extra, _PEAK_ENV: peak_file}, log,
                      f'cosines ({where})')
    result.pop('stdout')
    cap -= time.monotonic() - started
    runs[where] = {**result, **_peak(peak_file)}
  figures: dict[str, Any] = {'runs': runs, 'atol': args.cosine_atol,
                             'rtol': args.cosine_rtol,
                             'seconds': time.monotonic() - start}
  if all(run['ok'] for run in runs.values()):
    figures.update(compare_cosines(
        os.path.join(work, 'cosines_device'), os.path.join(work, 'cosines_cpu'),
        args.cosine_atol, args.cosine_rtol))
  else:
    figures['ok'] = False
  return figures


def step_paper_scale(args: argparse.Namespace, env: dict[str, str],
                     cap: float, log: list[str]) -> dict[str, Any]:
  """`benchmarks.paper_scale` on the device; its JSON into OUT."""
  path = os.path.join(args.out, 'paper_scale.json')
  command = [sys.executable, '-m', 'benchmarks.paper_scale',
             f'--accelerator={args.accelerator}',
             f'--tasks={args.paper_tasks}', f'--json={path}',
             f'--stackoverflow_clients={args.stackoverflow_clients}']
  if args.tiny:
    command += ['--seeds=2', '--max_measured_clients=3', '--notff']
  result = run_step(command, cap, env, log, 'paper_scale')
  result.pop('stdout')
  try:
    with open(path, encoding='utf-8') as stream:
      result['tasks'] = json.load(stream)
  except (OSError, ValueError):
    result['tasks'] = {}
    result['ok'] = False
  return result


def step_program(args: argparse.Namespace, env: dict[str, str], cap: float,
                 work: str, log: list[str]) -> dict[str, Any]:
  """A program of 4 runs against the runs in sequence (program_speed)."""
  path = os.path.join(work, 'program.json')
  peak_file = os.path.join(work, 'peak_program.json')
  scale = '0.05' if args.tiny else '0.25'
  runs = '2' if args.tiny else '4'
  result = run_step(_peak_command('benchmarks.program_speed', [
      f'--runs={runs}', f'--scale={scale}', f'--json={path}']), cap,
                    {**env, _PEAK_ENV: peak_file}, log, 'program')
  result.pop('stdout')
  try:
    with open(path, encoding='utf-8') as stream:
      result.update(json.load(stream))
  except (OSError, ValueError):
    result['ok'] = False
  return {**result, **_peak(peak_file)}


def _number(value: Any, unit: str = '', digits: int = 3) -> str:
  if value is None:
    return '-'
  if unit == 'MiB':
    return f'{value / 2**20:.1f} MiB'
  return f'{value:.{digits}g}{unit}'


def markdown(figures: Mapping[str, Any]) -> str:
  """The check's table: measured beside predicted, per task, and the steps."""
  lines = [f'# Device check ({figures["device"]})', '',
           '| step | status | seconds |', '| --- | --- | --- |']
  for name, step in figures['steps'].items():
    status = 'ok' if step.get('ok') else (
        'timed out' if step.get('timed_out') else 'FAILED')
    lines.append(f'| {name} | {status} | {_number(step.get("seconds"))} |')
  lines += ['', '| task | measured round (s) | predicted round (s) | '
            'measured clients | compile (s) | peak device memory | '
            'padding (vmap) | bytes to device per round |',
            '| --- | --- | --- | --- | --- | --- | --- | --- |']
  for task, task_figures in figures['steps'].get('paper_scale', {}).get(
      'tasks', {}).items():
    measured = task_figures.get('round_s_gpu_jax',
                                task_figures.get('round_s_cpu_jax'))
    lines.append(
        f'| {task} | {_number(measured)} | '
        f'{_number(task_figures.get("predicted_h100_round_s"))} | '
        f'{task_figures.get("round_s_measured_clients")} | '
        f'{_number(task_figures.get("compile_s_jax"))} | '
        f'{_number(task_figures.get("peak_device_bytes"), "MiB")} | '
        f'{_number(task_figures.get("padding_ratio_vmap"), "", 4)} | '
        f'{_number(task_figures.get("h2d_bytes_per_round"), "MiB")} |')
  cosines = figures['steps'].get('cosines', {})
  cosine_peak = cosines.get('runs', {}).get('device', {}).get('peak_bytes')
  program = figures['steps'].get('program', {})
  lines += ['', f'Cosines, device vs CPU: max |difference| '
            f'{_number(cosines.get("max_abs_diff"))} over '
            f'{cosines.get("values")} values (tolerance {cosines.get("atol")}'
            f' + {cosines.get("rtol")} x |cpu|); peak device memory '
            f'{_number(cosine_peak, "MiB")}.',
            f'Program of {program.get("runs")} runs: '
            f'{_number(program.get("program_s"))} s against '
            f'{_number(program.get("sequence_s"))} s in sequence '
            f'(ratio {_number(program.get("program_over_sequence"))}); '
            f'peak device memory {_number(program.get("peak_bytes"), "MiB")}.',
            '', 'Measured rounds are scaled by examples to the full cohort '
            '(benchmarks/paper_scale.py); predictions are its roofline, '
            'made in the same run.']
  return '\n'.join(lines) + '\n'


def _device_name(env: Mapping[str, str]) -> str:
  completed = subprocess.run(
      [sys.executable, '-c', 'import jax; print(jax.devices()[0].device_kind,'
       ' jax.default_backend(), jax.__version__)'], cwd=REPO, env=dict(env),
      capture_output=True, text=True, check=False, timeout=120)
  return (completed.stdout.strip() or completed.stderr.strip()[-200:])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  """The command line (see the module docstring)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', required=True, help='Folder for the results.')
  parser.add_argument('--wheels', default=os.path.join(REPO, 'device_wheels'),
                      help='Folder of carried wheels (make device-wheels).')
  parser.add_argument('--tiny', action='store_true',
                      help='Toy sizes (the CPU rehearsal).')
  parser.add_argument('--accelerator', default='gpu', choices=('cpu', 'gpu'),
                      help="benchmarks.paper_scale's --accelerator.")
  parser.add_argument('--paper_tasks', default='emnist,stackoverflow,shakespeare',
                      help="benchmarks.paper_scale's --tasks.")
  parser.add_argument('--stackoverflow_clients', type=int, default=24,
                      help='Clients of the measured StackOverflow round.')
  parser.add_argument('--steps', default=','.join(CAPS),
                      help=f'Steps to run, among {",".join(CAPS)}.')
  parser.add_argument('--budget_s', type=float, default=480.0,
                      help='Seconds for all steps together.')
  parser.add_argument('--cap_scale', type=float, default=1.0,
                      help='Multiplies every step\'s time cap (a slow CPU).')
  parser.add_argument('--cosine_atol', type=float, default=2e-3)
  parser.add_argument('--cosine_rtol', type=float, default=2e-2)
  args = parser.parse_args(argv)
  unknown = set(args.steps.split(',')) - set(CAPS)
  if unknown:
    parser.error(f'--steps must be among {list(CAPS)}; got {sorted(unknown)}.')
  for name in ('budget_s', 'cap_scale'):
    if getattr(args, name) <= 0:
      parser.error(f'--{name} must be > 0; got {getattr(args, name)}.')
  return args


def main(argv: Sequence[str]) -> int:
  """Installs the wheels, runs the steps, writes OUT; 0 if all passed."""
  args = parse_args(argv)
  deadline = time.monotonic() + args.budget_s
  os.makedirs(args.out, exist_ok=True)
  log: list[str] = []
  with tempfile.TemporaryDirectory(prefix='device_check_') as work:
    site = os.path.join(work, 'site')
    wheels = install_wheels(args.wheels, site)
    env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=os.pathsep.join(
        p for p in (site, REPO, os.environ.get('PYTHONPATH')) if p))
    figures: dict[str, Any] = {'device': _device_name(env),
                               'python': sys.version.split()[0],
                               'tiny': args.tiny, 'wheels': wheels,
                               'steps': {}}
    for name in args.steps.split(','):
      cap = min(CAPS[name] * args.cap_scale, deadline - time.monotonic())
      if cap < 5:
        figures['steps'][name] = {'ok': False, 'skipped': 'no time left'}
        continue
      if name == 'tests':
        step = step_tests(args, env, cap, log)
      elif name == 'cosines':
        step = step_cosines(args, env, cap, work, log)
      elif name == 'paper_scale':
        step = step_paper_scale(args, env, cap, log)
      else:
        step = step_program(args, env, cap, work, log)
      figures['steps'][name] = step
      print(f'{name}: {"ok" if step.get("ok") else "FAILED"}', flush=True)
  with open(os.path.join(args.out, 'device_check.json'), 'w',
            encoding='utf-8') as stream:
    json.dump(figures, stream, indent=2, default=str)
  with open(os.path.join(args.out, 'device_check.md'), 'w',
            encoding='utf-8') as stream:
    stream.write(markdown(figures))
  with open(os.path.join(args.out, 'device_check.log'), 'w',
            encoding='utf-8') as stream:
    stream.write('\n'.join(log))
  print(markdown(figures))
  return 0 if all(step.get('ok') for step in figures['steps'].values()) else 1


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
