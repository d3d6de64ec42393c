"""Verifies the TensorFlow-free JAX environment after `pip install --no-deps`.

`make test-jax` installs requirements-jax.txt without pip's resolver, so this
script is the check that the closure is complete and consistent (`pip check`
reports nothing), that its packages import, and that the environment really
lacks TensorFlow, as the accelerator machines do: the engine's tests
run there to show that `one_shot_epe.jax_engine` needs nothing else.
"""

import importlib
import importlib.util
import subprocess
import sys

MODULES = ('jax', 'jaxlib', 'numpy', 'scipy', 'absl', 'pytest', 'psutil',
           'dp_accounting', 'matplotlib', 'jax_privacy', 'tqdm')
ABSENT = ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy')


def main() -> int:
  """Returns 0 when the environment is as required, else 1 with the reason."""
  result = subprocess.run(
      [sys.executable, '-m', 'pip', 'check'], capture_output=True, text=True,
      check=False)
  if result.returncode != 0:
    print('pip check found problems:', *result.stdout.splitlines(), sep='\n  ')
    return 1
  present = [name for name in ABSENT if importlib.util.find_spec(name)]
  if present:
    print(f'the JAX environment must not have {", ".join(present)}')
    return 1
  for name in MODULES:
    importlib.import_module(name)
  jax = sys.modules['jax']
  print(f'JAX environment OK: jax {jax.__version__} ({jax.default_backend()}), '
        f'Python {sys.version.split()[0]}, {len(MODULES)} packages import, '
        'pip check clean, no TensorFlow')
  return 0


if __name__ == '__main__':
  sys.exit(main())
