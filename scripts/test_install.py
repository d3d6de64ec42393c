"""Installs the package by resolution into fresh environments and runs it.

`make test-install` (CI runs it last) and `make test-install-all`. Each
environment is a new virtual environment under one temporary directory (removed at the end)
into which pip installs a copy of the source tree (one per environment: pip
builds in the tree, and the installs run at once) with its dependencies
resolved from the package index (pip's download cache keeps this quick):

* --jax=PYTHON[,CONSTRAINTS]: `pip install '.[jax]'` (with `-c CONSTRAINTS`
  when given), a clean `pip check`, jax-privacy's matrix-factorization noise
  importable (Python 3.12+), no TensorFlow, then the installed console
  scripts: `one-shot-epe-estimate` on a CSV of cosines whose estimate has a
  closed form, and a 2-round `one-shot-epe-train --backend=jax` run;
* --flower=PYTHON[,CONSTRAINTS]: `pip install '.[flower]'` (with `-c
  CONSTRAINTS` when given), a clean `pip check`, neither TensorFlow nor JAX,
  and a 2-round audited Flower run (`one_shot_epe.flower_engine`, in
  process) whose report has an accounted eps;
* --core=PYTHON: `pip install .` (the core alone), a clean `pip check`,
  every top-level module of one_shot_epe imports with neither TensorFlow nor
  JAX installed, the same estimate, and `one-shot-epe-train` asked for
  either engine exits with status 2 and one line naming the extra to install.

Everything runs from the temporary directory, so the checkout is not on
sys.path and the installed package is what runs. Prints one line per check and
a final 'N passed, M failed'; exits 1 if any check failed.

  python scripts/test_install.py --jax=python3.12,requirements-jax.txt \
      --jax=python3.13 --core=python3.11 \
      --flower=python3.12,requirements-flower.txt --flower=python3.13 \
      --flower=python3.11
"""

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# The CSV's cosines: canaries at mean GDP_MU / sqrt(DIM) with a spread whose
# mean is exactly zero, so that the estimate with the variance fixed at the
# null's 1/d (`epsilon_est`) is the eps of mu-GDP at DELTA (Dong, Roth and Su).
DIM = 10_000
GDP_MU = 2.0
DELTA = 1e-5
_SPREAD = (-1.5, -0.5, 0.5, 1.5)
# TFF's EMNIST `cnn_dropout`, the model of --task=emnist_character (README).
EMNIST_CNN_PARAMETERS = 1_206_590
# The JAX engine's smallest run (as tests/backend_jax_test.py): 2 rounds.
_TRAIN_FLAGS = ('--task=emnist_character', '--use_synthetic_data',
                '--synthetic_num_clients=4', '--synthetic_examples_per_client=16',
                '--clients_per_round=2', '--total_rounds=2', '--num_canaries=4',
                '--num_unseen_canaries=4', '--noise_multiplier=0.1',
                '--rounds_per_checkpoint=2', '--noprogress_bar')
_EXTRA_LINES = {'jax': "pip install 'one-shot-epe[jax]'",
                'tff': 'the [tff] extra, on Python 3.11: pip install --no-deps'}
_PIP = ('-m', 'pip', 'install', '--disable-pip-version-check', '--quiet')
_TIMEOUT_S = 900


# What the copy of the source tree leaves out: environments, VCS and build
# outputs.
_NOT_SOURCE = ('.venv*', '.git', 'build', 'output', 'bazel-*', '*.egg-info',
               '__pycache__', '.pytest_cache')


def _normal_cdf(x: float) -> float:
  return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gdp_epsilon(mu: float, delta: float) -> float:
  """The eps of mu-GDP at `delta`, by bisection on its closed-form delta(eps).

  delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), decreasing in
  eps (Dong, Roth and Su 2019, Corollary 2.13).

  Args:
    mu: The GDP parameter, > 0.
    delta: The target delta, in (0, 1).

  Returns:
    The eps >= 0 with delta(eps) = `delta`, to 1e-12.
  """
  def excess(eps: float) -> float:
    return (_normal_cdf(-eps / mu + mu / 2) -
            math.exp(eps) * _normal_cdf(-eps / mu - mu / 2) - delta)

  lo, hi = 0.0, 1.0
  while excess(hi) > 0:
    hi *= 2
  while hi - lo > 1e-12:
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
  return (lo + hi) / 2


def _run(command: Sequence[str], cwd: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=_TIMEOUT_S, check=False)


def _tail(done: subprocess.CompletedProcess) -> str:
  return (done.stdout + done.stderr)[-3000:]


class Checks:
  """Named checks of one run: prints each, counts passes and failures."""

  def __init__(self) -> None:
    self.passed = 0
    self.failed = 0

  def record(self, name: str, problem: str | None) -> bool:
    """Prints `name` with PASS, or FAIL and `problem`; returns whether it passed."""
    if problem is None:
      self.passed += 1
      print(f'PASS {name}', flush=True)
    else:
      self.failed += 1
      print(f'FAIL {name}\n  ' + problem.replace('\n', '\n  '), flush=True)
    return problem is None


class Environment:
  """A fresh virtual environment with the package installed by resolution."""

  def __init__(self, label: str, python: str, spec: str,
               constraints: str | None, root: str) -> None:
    self.label = label
    self.python = python
    self.spec = spec
    self.constraints = constraints
    self.dir = os.path.join(root, label)
    self.work = os.path.join(root, f'{label}-work')
    self.bin = os.path.join(self.dir, 'bin')
    self.seconds = 0.0

  def install(self) -> str | None:
    """Creates the venv and installs; None on success, else what failed."""
    start = time.monotonic()
    os.makedirs(self.work)
    # Each install builds from a copy of its own: pip builds in the source
    # tree (its build/ directory), and the installs run at once.
    source = os.path.join(self.work, 'source')
    shutil.copytree(REPO, source, symlinks=True,
                    ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    spec = source + self.spec[len(REPO):]
    done = _run([self.python, '-m', 'venv', self.dir], self.work)
    if done.returncode != 0:
      return f'{self.python} -m venv failed:\n{_tail(done)}'
    command = [os.path.join(self.bin, 'python'), *_PIP, spec]
    if self.constraints:
      command += ['-c', self.constraints]
    done = _run(command, self.work)
    self.seconds = time.monotonic() - start
    if done.returncode != 0:
      return f'{" ".join(command)} failed:\n{_tail(done)}'
    return None

  def python_code(self, code: str) -> subprocess.CompletedProcess:
    """Runs `code` with the environment's interpreter, in its work directory."""
    return _run([os.path.join(self.bin, 'python'), '-c', code], self.work)

  def script(self, name: str, *args: str) -> subprocess.CompletedProcess:
    """Runs the installed console script `name` with `args`."""
    return _run([os.path.join(self.bin, name), *args], self.work)


def _versions(env: Environment) -> str:
  done = env.python_code(
      'import importlib.metadata as m, platform\n'
      'names = ("numpy", "scipy", "dp-accounting", "jax", "jaxlib")\n'
      'found = []\n'
      'for name in names:\n'
      '  try:\n'
      '    found.append(f"{name} {m.version(name)}")\n'
      '  except m.PackageNotFoundError:\n'
      '    pass\n'
      'print(f"Python {platform.python_version()}: " + ", ".join(found))')
  return done.stdout.strip() or _tail(done)


def _check_pip(env: Environment) -> str | None:
  done = env.python_code('import runpy, sys; sys.argv = ["pip", "check"]; '
                         'runpy.run_module("pip", run_name="__main__")')
  return None if done.returncode == 0 else _tail(done)


def _check_absent(env: Environment, modules: Sequence[str]) -> str | None:
  done = env.python_code(
      'import importlib.util\n'
      f'print([m for m in {list(modules)!r} if importlib.util.find_spec(m)])')
  if done.returncode != 0:
    return _tail(done)
  return None if done.stdout.strip() == '[]' else f'installed: {done.stdout}'


def _check_core_imports(env: Environment) -> str | None:
  names = sorted(name[:-3] for name in os.listdir(
      os.path.join(REPO, 'one_shot_epe'))
                 if name.endswith('.py') and name != '__init__.py')
  done = env.python_code(
      'import importlib, sys\n'
      f'for name in {names!r}:\n'
      '  importlib.import_module("one_shot_epe." + name)\n'
      'bad = [m for m in ("tensorflow", "jax") if m in sys.modules]\n'
      'assert not bad, bad\n'
      f'print(len({names!r}))')
  if done.returncode != 0:
    return _tail(done)
  return None if done.stdout.strip() == str(len(names)) else done.stdout


def _check_estimate(env: Environment) -> str | None:
  path = os.path.join(env.work, 'cosines.csv')
  mean = GDP_MU / math.sqrt(DIM)
  with open(path, 'w', encoding='utf-8') as stream:
    stream.write('cosine\n')
    for _ in range(25):
      for z in _SPREAD:
        stream.write(f'{mean + z / math.sqrt(DIM)!r}\n')
  done = env.script('one-shot-epe-estimate', f'--cosines={path}',
                    f'--dim={DIM}', f'--delta={DELTA}', '--format=json')
  if done.returncode != 0:
    return _tail(done)
  report = json.loads(done.stdout)
  expected = gdp_epsilon(GDP_MU, DELTA)
  if not math.isclose(report['epsilon_est'], expected, rel_tol=1e-6):
    return f'epsilon_est {report["epsilon_est"]}, closed form {expected}'
  return None


def _check_train_jax(env: Environment) -> str | None:
  done = env.script('one-shot-epe-train', '--backend=jax', *_TRAIN_FLAGS,
                    f'--root_output_dir={env.work}', '--run_name=run')
  if done.returncode != 0:
    return _tail(done)
  path = os.path.join(env.work, 'run', 'report.json')
  if not os.path.exists(path):
    return f'no {path}:\n{_tail(done)}'
  with open(path, encoding='utf-8') as stream:
    report = json.load(stream)
  found = (report['setting']['total_rounds'], report['setting'].get('backend'),
           report['final']['num_seen'], report['dim'])
  expected = (2, 'jax', 4, EMNIST_CNN_PARAMETERS)
  if found != expected:
    return (f'report.json: (rounds, backend, seen canaries, d) = {found}, '
            f'expected {expected}')
  return None


def _check_missing_engine(env: Environment, backend: str) -> str | None:
  output = os.path.join(env.work, f'missing-{backend}')
  done = env.script('one-shot-epe-train', f'--backend={backend}',
                    *_TRAIN_FLAGS, f'--root_output_dir={output}',
                    '--run_name=run')
  lines = done.stderr.strip().splitlines()
  if done.returncode != 2 or len(lines) != 1:
    return f'exit {done.returncode}, expected 2 and one line:\n{_tail(done)}'
  if _EXTRA_LINES[backend] not in lines[0]:
    return f'the line does not name the [{backend}] extra: {lines[0]}'
  if os.path.exists(output):
    return f'{output} was written'
  return None


def _check_matrix_factorization(env: Environment) -> str | None:
  """[jax] brings jax-privacy (Python 3.12+): --mechanism=blt|banded."""
  done = env.python_code(
      'from one_shot_epe.jax_engine import correlated_noise\n'
      'print(correlated_noise.available())')
  if done.returncode != 0:
    return _tail(done)
  return None if done.stdout.strip() == 'True' else done.stdout


def _jax_checks(env: Environment) -> list[tuple[str, Callable[[], str | None]]]:
  return [('pip check', lambda: _check_pip(env)),
          ('jax-privacy: the matrix-factorization noise imports',
           lambda: _check_matrix_factorization(env)),
          ('no TensorFlow', lambda: _check_absent(
              env, ('tensorflow', 'tensorflow_federated'))),
          ('one-shot-epe-estimate: the closed-form eps',
           lambda: _check_estimate(env)),
          ('one-shot-epe-train --backend=jax: 2 rounds',
           lambda: _check_train_jax(env))]


# A 2-round audited DP-FedAvg run in Flower, clients that send the model
# back moved by 0.01; prints the report's accounted eps.
_FLOWER_RUN = """
import tempfile
import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideFixedClipping, FedAvg)
from one_shot_epe.flower_engine import audit, local_grid
def client(node, message):
  arrays = ArrayRecord({'w': Array(message.content['arrays']['w'].numpy()
                                   + np.float32(0.01))})
  return RecordDict({'arrays': arrays,
                     'metrics': MetricRecord({'num-examples': 1})})
run = audit.CanaryAudit(run_dir=tempfile.mkdtemp() + '/run', num_canaries=4,
                        rounds=2, delta=1e-5, seed=0)
strategy = run.wrap(DifferentialPrivacyServerSideFixedClipping(
    FedAvg(fraction_train=0.5, fraction_evaluate=0.0), 1.0, 1.0, 2))
strategy.start(local_grid.LocalGrid(4, client),
               ArrayRecord({'w': Array(np.zeros(100, np.float32))}),
               num_rounds=2)
print(run.report.accounted_epsilon)
"""


def _check_flower_run(env: Environment) -> str | None:
  done = env.python_code(_FLOWER_RUN)
  if done.returncode != 0:
    return _tail(done)
  epsilon = float(done.stdout.strip().splitlines()[-1])
  return None if 0 < epsilon < math.inf else done.stdout


def _flower_checks(env: Environment
                   ) -> list[tuple[str, Callable[[], str | None]]]:
  return [('pip check', lambda: _check_pip(env)),
          ('neither TensorFlow nor JAX', lambda: _check_absent(
              env, ('tensorflow', 'tensorflow_federated', 'jax', 'jaxlib'))),
          ('a 2-round audited Flower run', lambda: _check_flower_run(env))]


def _core_checks(env: Environment) -> list[tuple[str, Callable[[], str | None]]]:
  return [('pip check', lambda: _check_pip(env)),
          ('neither TensorFlow nor JAX', lambda: _check_absent(
              env, ('tensorflow', 'tensorflow_federated', 'jax', 'jaxlib'))),
          ('every core module imports', lambda: _check_core_imports(env)),
          ('one-shot-epe-estimate: the closed-form eps',
           lambda: _check_estimate(env)),
          ('--backend=jax: exit 2 naming [jax]',
           lambda: _check_missing_engine(env, 'jax')),
          ('--backend=tff: exit 2 naming [tff]',
           lambda: _check_missing_engine(env, 'tff'))]


def _parse(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--jax', action='append', default=[],
                      metavar='PYTHON[,CONSTRAINTS]',
                      help="an interpreter to install '.[jax]' with")
  parser.add_argument('--core', action='append', default=[], metavar='PYTHON',
                      help="an interpreter to install '.' (the core) with")
  parser.add_argument('--flower', action='append', default=[],
                      metavar='PYTHON[,CONSTRAINTS]',
                      help="an interpreter to install '.[flower]' with")
  args = parser.parse_args(argv)
  if not args.jax and not args.core and not args.flower:
    parser.error('give at least one --jax, --core or --flower interpreter')
  for value in args.jax + args.core + args.flower:
    python = value.split(',')[0]
    if not python or not shutil.which(python):
      parser.error(f'{value!r}: no executable interpreter {python!r}')
  return args


def main(argv: Sequence[str]) -> int:
  """Runs every check; returns 0 if all passed, else 1."""
  args = _parse(argv)
  start = time.monotonic()
  checks = Checks()
  with tempfile.TemporaryDirectory(prefix='one_shot_epe_install_') as root:
    plans = []
    for index, value in enumerate(args.jax):
      python, _, constraints = value.partition(',')
      plans.append((Environment(
          f'jax{index}', python, f'{REPO}[jax]',
          os.path.abspath(constraints) if constraints else None, root),
                    _jax_checks))
    for index, value in enumerate(args.flower):
      python, _, constraints = value.partition(',')
      plans.append((Environment(
          f'flower{index}', python, f'{REPO}[flower]',
          os.path.abspath(constraints) if constraints else None, root),
                    _flower_checks))
    for index, python in enumerate(args.core):
      plans.append((Environment(f'core{index}', python, REPO, None, root),
                    _core_checks))
    # The installs wait mostly on the index and the disk: all at once.
    with concurrent.futures.ThreadPoolExecutor(len(plans)) as pool:
      installed = list(pool.map(lambda plan: plan[0].install(), plans))
    for (env, make_checks), problem in zip(plans, installed):
      extra = env.spec[len(REPO):]
      what = 'pip install ' + (f"'.{extra}'" if extra else '.') + (
          f' -c {os.path.relpath(env.constraints, REPO)}'
          if env.constraints else '')
      if not checks.record(f'{env.python}: {what} ({env.seconds:.0f} s)',
                           problem):
        continue
      print(f'  {_versions(env)}', flush=True)
      for name, check in make_checks(env):
        checks.record(f'{env.python}: {name}', check())
  print(f'{checks.passed} passed, {checks.failed} failed '
        f'in {time.monotonic() - start:.0f} s')
  return 1 if checks.failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
