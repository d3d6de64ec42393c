"""The package's layers: a framework-free core, the TFF engine, the JAX engine.

Every module of `one_shot_epe` belongs to exactly one layer, listed here, so
a new module must be placed. Independent truth for the core: a fresh
interpreter in which TensorFlow, TFF, tensorflow_privacy, JAX, flax and optax
cannot be imported (`import` raises ImportError) imports every core module.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))

# Canary schedules, estimation, accounting, reports, plots, run files, the
# launchers' shared options; used by both engines.
CORE = (
    'one_shot_epe',
    'one_shot_epe.accounting',
    'one_shot_epe.atomic_io',
    'one_shot_epe.attack_metrics',
    'one_shot_epe.baselines',
    'one_shot_epe.baselines.canife_accounting',
    'one_shot_epe.baselines.canife_attack',
    'one_shot_epe.baselines.fashion_mnist',
    'one_shot_epe.cli',
    'one_shot_epe.estimate',
    'one_shot_epe.estimation',
    'one_shot_epe.gaussian_mechanism',
    'one_shot_epe.lower_bound',
    'one_shot_epe.null_distribution',
    'one_shot_epe.one_run',
    'one_shot_epe.participation',
    'one_shot_epe.plots',
    'one_shot_epe.privacy_report',
    'one_shot_epe.run_lock',
    'one_shot_epe.run_options',
    'one_shot_epe.run_report',
    'one_shot_epe.validation',
    'one_shot_epe.write_failures',
)
# TensorFlow/TFF: aggregator, seeded queries, tracker, runtimes and their
# worker processes, tasks, the CANIFE and DP-SGD baselines. Some import TF
# only when called (runtime, quiet, isolation, tff_workers).
TFF_ENGINE_PREFIXES = ('one_shot_epe.tasks',)
TFF_ENGINE = (
    'one_shot_epe.accelerators',
    'one_shot_epe.audit',
    'one_shot_epe.baselines.canife',
    'one_shot_epe.baselines.canife_design',
    'one_shot_epe.baselines.dpsgd',
    'one_shot_epe.baselines.feedforward',
    'one_shot_epe.baselines.per_example',
    'one_shot_epe.canaries',
    'one_shot_epe.canary_aggregator',
    'one_shot_epe.checkpoints',
    'one_shot_epe.cosine_tracking',
    'one_shot_epe.distributed_runtime',
    'one_shot_epe.final_model',
    'one_shot_epe.isolation',
    'one_shot_epe.quiet',
    'one_shot_epe.runtime',
    'one_shot_epe.seeded_queries',
    'one_shot_epe.tff_workers',
)
# Tested without TensorFlow in jax_engine_isolation_test.py.
JAX_ENGINE_PREFIXES = ('one_shot_epe.jax_engine',)

_IMPORT_BLOCKED = '''
import importlib, sys
for name in ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy',
             'jax', 'jaxlib', 'flax', 'optax'):
  sys.modules[name] = None  # `import name` now raises ImportError.
sys.path.insert(0, sys.argv[1])
for module in sys.argv[2:]:
  importlib.import_module(module)
print('imported', len(sys.argv) - 2)
'''


def _modules_on_disk() -> list[str]:
  names = []
  root = os.path.join(REPO, 'one_shot_epe')
  for directory, subdirectories, files in os.walk(root):
    subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
    package = os.path.relpath(directory, REPO).replace(os.sep, '.')
    names += [package if name == '__init__.py' else f'{package}.{name[:-3]}'
              for name in files if name.endswith('.py')]
  return sorted(names)


def _layer(module: str) -> str | None:
  if module in CORE:
    return 'core'
  if module in TFF_ENGINE or module.startswith(TFF_ENGINE_PREFIXES):
    return 'tff'
  if module.startswith(JAX_ENGINE_PREFIXES):
    return 'jax'
  return None


def test_every_module_belongs_to_one_layer():
  modules = _modules_on_disk()
  assert 'one_shot_epe.estimation' in modules
  assert [m for m in modules if _layer(m) is None] == []
  listed = set(CORE) | set(TFF_ENGINE)
  assert sorted(listed - set(modules)) == []  # No stale entries.
  assert not set(CORE) & set(TFF_ENGINE)


def test_core_imports_without_tensorflow_or_jax():
  completed = subprocess.run(
      [sys.executable, '-c', _IMPORT_BLOCKED, REPO, *CORE],
      capture_output=True, text=True, timeout=300, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert completed.stdout.strip() == f'imported {len(CORE)}'


def test_the_check_fails_for_a_module_that_needs_tensorflow():
  # The blocked import is real: a TF-bound module cannot be imported there.
  completed = subprocess.run(
      [sys.executable, '-c', _IMPORT_BLOCKED, REPO,
       'one_shot_epe.cosine_tracking'],
      capture_output=True, text=True, timeout=300, check=False)
  assert completed.returncode != 0
  assert 'ImportError' in completed.stderr or 'ModuleNotFoundError' in (
      completed.stderr)
