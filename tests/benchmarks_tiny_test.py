"""Every benchmark's tiny mode runs: a moved or renamed name breaks this test.

Each program of benchmarks/ (a module with a `__main__` block) takes --tiny
(benchmarks/tiny.py): its imports, flags and one measurement at toy size.
Its tiny mode runs as `python -m benchmarks.<name> --tiny`, in a process of
its own (a benchmark installs TFF execution contexts and starts workers that
must not outlive it in the test process), in exactly one environment's suite
(`ENVIRONMENTS`: .venv's `make test`, .venv-jax's `make test-jax` or
.venv-flower's `make test-flower`). A new program that no environment lists
fails here until it has a tiny mode and a row.
"""

import importlib.util
import pathlib
import subprocess
import sys
import types

import pytest
from absl import flags

from benchmarks import tiny

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / 'benchmarks'
# A tiny mode takes seconds (the slowest, with its JAX child, about 40 s).
_TIMEOUT_S = 600

# Where each program's tiny mode runs: 'tf' (.venv: TensorFlow and TFF, the
# JAX children of the engine comparisons in .venv-jax), 'jax' (.venv-jax:
# jax and jax-privacy, no TensorFlow) or 'flower' (.venv-flower).
ENVIRONMENTS = {
    'accelerator_round': 'tf',
    'bound_limits': 'tf',
    'canary_tracking': 'tf',
    'correlated_noise': 'jax',
    'coverage': 'tf',
    'distributed_dp_round': 'tf',
    'distributed_runtime': 'tf',
    'dp_round_cost': 'tf',
    'final_model_dim': 'tf',
    'flower_round': 'flower',
    'micro_batch_round': 'jax',
    'packing': 'jax',
    'paper_scale': 'jax',
    'program_speed': 'jax',
    'table2': 'tf',
    'tight_audit_speed': 'tf',
    'worker_bridge': 'tf',
}


def _modules(programs: bool) -> list[str]:
  """benchmarks/'s modules with (or without) a `__main__` block, sorted."""
  return sorted(
      path.stem for path in BENCHMARKS.glob('*.py')
      if path.stem != '__init__' and programs == (
          "if __name__ == '__main__':" in path.read_text(encoding='utf-8')))


def _environment() -> str:
  if importlib.util.find_spec('tensorflow') is not None:
    return 'tf'
  if importlib.util.find_spec('flwr') is not None:
    return 'flower'
  return 'jax'


@pytest.mark.slow
@pytest.mark.parametrize('name', _modules(programs=True))
def test_tiny_mode_runs(name):
  assert name in ENVIRONMENTS, (
      f'benchmarks/{name}.py: give it a --tiny mode (benchmarks/tiny.py) and '
      'its environment in ENVIRONMENTS.')
  if ENVIRONMENTS[name] != _environment():
    pytest.skip(f'its tiny mode runs in the {ENVIRONMENTS[name]!r} suite.')
  run = subprocess.run([sys.executable, '-m', f'benchmarks.{name}', '--tiny'],
                       cwd=ROOT, capture_output=True, text=True,
                       timeout=_TIMEOUT_S, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.strip(), 'the tiny run printed nothing'


def test_every_listed_program_exists():
  assert sorted(ENVIRONMENTS) == _modules(programs=True)


@pytest.mark.parametrize('name', _modules(programs=False))
def test_every_library_is_imported_by_a_program(name):
  importers = [program for program in _modules(programs=True)
               if f'from benchmarks import {name}\n' in
               (BENCHMARKS / f'{program}.py').read_text(encoding='utf-8')]
  libraries = _modules(programs=False)
  for library in libraries:  # Imported through another library.
    if f'from benchmarks import {name}\n' in (
        BENCHMARKS / f'{library}.py').read_text(encoding='utf-8'):
      importers.append(library)
  assert importers, f'benchmarks/{name}.py is run by no tiny mode.'


def test_shrink_keeps_the_flags_given():
  values = flags.FlagValues()
  holders = types.SimpleNamespace(
      tiny=tiny.define_flag(values),
      rounds=flags.DEFINE_integer('rounds', 100, 'r', flag_values=values),
      clients=flags.DEFINE_integer('clients', 50, 'c', flag_values=values))
  values(['program', '--tiny', '--clients=7'])
  assert tiny.shrink(holders, {'rounds': 2, 'clients': 3})
  assert (holders.rounds.value, holders.clients.value) == (2, 7)
  values(['program', '--notiny'])
  plain = types.SimpleNamespace(tiny=holders.tiny)
  assert not tiny.shrink(plain, {'rounds': 2})
