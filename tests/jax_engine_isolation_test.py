"""The JAX engine imports without TensorFlow (the accelerator machines lack it).

Independent truth: a fresh interpreter in which `import tensorflow` (and TFF)
raises ImportError imports every engine module; the modules found are those
on disk, so a new module is covered without editing this test.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
ENGINE = os.path.join(REPO, 'one_shot_epe', 'jax_engine')

_IMPORT_WITHOUT_TF = '''
import importlib, sys
for name in ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy'):
  sys.modules[name] = None  # `import name` now raises ImportError.
sys.path.insert(0, sys.argv[1])
for module in sys.argv[2:]:
  importlib.import_module(module)
print(sorted(m for m in sys.modules if m.split('.')[0].startswith('tensorflow')
             and sys.modules[m] is not None))
'''


def _engine_modules() -> list[str]:
  return sorted(
      'one_shot_epe.jax_engine.' + name[:-3] for name in os.listdir(ENGINE)
      if name.endswith('.py') and name != '__init__.py')


def test_engine_modules_import_without_tensorflow():
  modules = _engine_modules()
  assert 'one_shot_epe.jax_engine.fedavg' in modules
  completed = subprocess.run(
      [sys.executable, '-c', _IMPORT_WITHOUT_TF, REPO, *modules],
      capture_output=True, text=True, timeout=300, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert completed.stdout.strip().splitlines()[-1] == '[]'
