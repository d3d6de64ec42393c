"""The package's layers are its folders, and no module crosses a layer.

`one_shot_epe/` holds four layers (docs/architecture.md):
  * the core: `validation.py` and the wings by job (`stats/`, `accounting/`,
    `design/`, `runtime/`, `reporting/`, `data/`); no TensorFlow, no JAX. Inside
    it each wing imports only the wings below it (`WINGS_BELOW`): the
    statistics nothing but themselves and `validation`;
  * `tff_engine/`: everything that imports TensorFlow or TFF;
  * `jax_engine/`: everything that imports JAX;
  * `flower_engine/`: everything that imports Flower (`flwr`); neither
    TensorFlow nor JAX nor another engine, and no other layer imports flwr.
No layer imports the programs of `experiments/`, which stand above them all
(the baselines CANIFE and DP-SGD among them: `experiments/baselines/` uses the
TFF engine's canaries).

Two independent checks. Statically, every import statement of every module
(also those inside functions) is read with `ast` and held against its folder's
rule. Dynamically, a fresh interpreter in which the other layers' frameworks
and folders cannot be imported (`import` raises ImportError) imports every
module of a layer. TFF imports JAX itself, so the TFF engine's interpreter
blocks only the JAX engine's folder and the programs.
"""

import ast
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PACKAGE = 'one_shot_epe'
TF = ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy')
JAX = ('jax', 'jaxlib', 'flax', 'optax')
FLOWER = ('flwr',)
TFF_ENGINE = f'{PACKAGE}.tff_engine'
JAX_ENGINE = f'{PACKAGE}.jax_engine'
FLOWER_ENGINE = f'{PACKAGE}.flower_engine'
# The programs (and the baselines) above every layer of the package.
PROGRAMS = 'experiments'
# Layer -> the top-level packages and project folders its modules may not
# import.
FORBIDDEN = {
    'core': TF + JAX + FLOWER + (TFF_ENGINE, JAX_ENGINE, FLOWER_ENGINE,
                                 PROGRAMS),
    'tff_engine': JAX + FLOWER + (JAX_ENGINE, FLOWER_ENGINE, PROGRAMS),
    'jax_engine': TF + FLOWER + (TFF_ENGINE, FLOWER_ENGINE, PROGRAMS),
    'flower_engine': TF + JAX + (TFF_ENGINE, JAX_ENGINE, PROGRAMS),
}
# What the dynamic check blocks for each layer's interpreter.
BLOCKED = {
    'core': FORBIDDEN['core'],
    'tff_engine': (JAX_ENGINE, PROGRAMS),
    'jax_engine': FORBIDDEN['jax_engine'],
    'flower_engine': FORBIDDEN['flower_engine'],
}

# The core's wings -> the wings each may import (besides itself and the
# top-level `validation`): a wing stands on the ones listed.
WINGS_BELOW = {
    'stats': (),
    'accounting': ('stats',),
    'design': ('accounting', 'stats'),
    'data': ('runtime',),
    'runtime': ('design',),
    'reporting': ('accounting', 'design', 'runtime', 'stats'),
}

_IMPORT_BLOCKED = '''
import importlib, sys
blocked, modules = sys.argv[2].split(','), sys.argv[3:]
for name in blocked:
  sys.modules[name] = None  # `import name` now raises ImportError.
sys.path.insert(0, sys.argv[1])
for module in modules:
  importlib.import_module(module)
print('imported', len(modules))
'''


def layer_of(module: str) -> str:
  """The layer of a module of the package, from its folder."""
  for layer, folder in (('tff_engine', TFF_ENGINE), ('jax_engine', JAX_ENGINE),
                        ('flower_engine', FLOWER_ENGINE)):
    if module == folder or module.startswith(folder + '.'):
      return layer
  if (module == PACKAGE or module.count('.') == 1 or
      module.split('.')[1] in WINGS_BELOW):
    return 'core'
  raise ValueError(f'{module} lies in no layer: a new folder needs a rule.')


def imported_names(source: str) -> set[str]:
  """Every module named by an import statement of `source`, at any depth."""
  names = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      names |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.add(node.module)
      names |= {f'{node.module}.{alias.name}' for alias in node.names}
  return names


def violations(module: str, source: str) -> list[str]:
  """The imports of `module` (with text `source`) that cross its layer."""
  forbidden = FORBIDDEN[layer_of(module)]
  return sorted(name for name in imported_names(source)
                if any(name == f or name.startswith(f + '.')
                       for f in forbidden))


def _modules_on_disk() -> dict[str, str]:
  """Module name -> source path, for every module of the package."""
  modules = {}
  root = os.path.join(REPO, PACKAGE)
  for directory, subdirectories, files in os.walk(root):
    subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
    package = os.path.relpath(directory, REPO).replace(os.sep, '.')
    for name in files:
      if name.endswith('.py'):
        module = package if name == '__init__.py' else f'{package}.{name[:-3]}'
        modules[module] = os.path.join(directory, name)
  return modules


def _layer_modules(layer: str) -> list[str]:
  return sorted(m for m in _modules_on_disk() if layer_of(m) == layer)


def _import_blocked(modules: list[str], blocked: tuple[str, ...]
                    ) -> subprocess.CompletedProcess:
  return subprocess.run(
      [sys.executable, '-c', _IMPORT_BLOCKED, REPO, ','.join(blocked),
       *modules], capture_output=True, text=True, timeout=300, check=False)


def test_every_module_lies_in_a_layer_and_each_layer_is_populated():
  layers = {layer_of(module) for module in _modules_on_disk()}
  assert layers == set(FORBIDDEN)
  assert 'one_shot_epe.stats.estimation' in _layer_modules('core')
  assert 'one_shot_epe.tff_engine.canary_aggregator' in _layer_modules(
      'tff_engine')
  assert 'one_shot_epe.jax_engine.fedavg' in _layer_modules('jax_engine')
  assert 'one_shot_epe.flower_engine.audit' in _layer_modules('flower_engine')


def test_no_module_imports_across_its_layer():
  crossing = {}
  for module, path in _modules_on_disk().items():
    with open(path) as stream:
      found = violations(module, stream.read())
    if found:
      crossing[module] = found
  assert crossing == {}


def wing_violations(module: str, source: str) -> list[str]:
  """The imports of a core wing's `module` from a wing not below it."""
  wing = module.split('.')[1]
  allowed = {wing, *WINGS_BELOW[wing]}
  found = set()
  for name in imported_names(source):
    parts = name.split('.')
    if (parts[0] == PACKAGE and len(parts) > 2 and parts[1] in WINGS_BELOW
        and parts[1] not in allowed):
      found.add('.'.join(parts[:2]))
  return sorted(found)


def test_each_wing_imports_only_the_wings_below_it():
  crossing = {}
  for module, path in _modules_on_disk().items():
    if module.count('.') < 2 or module.split('.')[1] not in WINGS_BELOW:
      continue
    with open(path) as stream:
      found = wing_violations(module, stream.read())
    if found:
      crossing[module] = found
  assert crossing == {}
  # The check sees a crossing: the statistics may not use the runtime.
  assert wing_violations(
      'one_shot_epe.stats.estimation',
      'from one_shot_epe.runtime import atomic_io') == [
          'one_shot_epe.runtime']
  assert wing_violations('one_shot_epe.reporting.run_report',
                         'from one_shot_epe.stats import estimation') == []


def test_the_static_check_sees_a_crossing_at_any_depth():
  assert violations('one_shot_epe.stats.estimation', 'import numpy') == []
  assert violations('one_shot_epe.stats.estimation',
                    'def f():\n  import tensorflow as tf\n') == ['tensorflow']
  assert violations('one_shot_epe.jax_engine.fedavg',
                    'from one_shot_epe.tff_engine import canaries') == [
                        'one_shot_epe.tff_engine',
                        'one_shot_epe.tff_engine.canaries']
  assert violations('one_shot_epe.tff_engine.audit',
                    'from jax import numpy') == ['jax', 'jax.numpy']
  assert violations('one_shot_epe.tff_engine.audit',
                    'from one_shot_epe import estimation') == []
  assert violations('one_shot_epe.stats.estimation',
                    'from flwr.app import Message') == ['flwr.app',
                                                        'flwr.app.Message']
  assert violations('one_shot_epe.flower_engine.audit',
                    'import jax.numpy') == ['jax.numpy']
  assert violations('one_shot_epe.tff_engine.audit',
                    'from experiments.baselines import dpsgd') == [
                        'experiments.baselines',
                        'experiments.baselines.dpsgd']
  with pytest.raises(ValueError, match='no layer'):
    layer_of('one_shot_epe.new_folder.module')


# Modules that need an optional extra beyond their layer's framework, by the
# top-level module that extra installs.
_EXTRA_MODULES = {'one_shot_epe.jax_engine.correlated_noise': 'jax_privacy'}


@pytest.mark.parametrize('layer', sorted(FORBIDDEN))
def test_each_layer_imports_with_the_others_blocked(layer):
  if layer == 'tff_engine' and not importlib.util.find_spec('tensorflow'):
    pytest.skip('TensorFlow is not installed here (the JAX environment).')
  if layer == 'flower_engine' and not importlib.util.find_spec('flwr'):
    pytest.skip('Flower is not installed here (make test-flower has it).')
  if layer == 'jax_engine' and not importlib.util.find_spec('jax'):
    pytest.skip('JAX is not installed here (the Flower environment).')
  # A module of an optional extra is imported where that extra is installed
  # (jax-privacy's [mf]: in .venv-jax, `make test-jax`).
  modules = [module for module in _layer_modules(layer)
             if importlib.util.find_spec(_EXTRA_MODULES.get(module, 'os'))]
  completed = _import_blocked(modules, BLOCKED[layer])
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert completed.stdout.strip().splitlines()[-1] == f'imported {len(modules)}'


def test_the_dynamic_check_fails_for_a_module_across_the_layer():
  # The blocked import is real: a TF-bound module cannot be imported there.
  completed = _import_blocked(['one_shot_epe.tff_engine.cosine_tracking'],
                              BLOCKED['core'])
  assert completed.returncode != 0
  assert 'ImportError' in completed.stderr or 'ModuleNotFoundError' in (
      completed.stderr)
