"""Tests of the pip packaging (pyproject.toml): the wheel and its metadata.

Builds the wheel offline (`pip wheel --no-deps --no-build-isolation --no-index`,
with the setuptools and wheel of this interpreter) from a copy of the source
tree, so the build's build/ and *.egg-info stay out of the checkout. Truths: the
source tree (every module of the packaged directories), the version in
one_shot_epe/__init__.py, the functions the console scripts name (read from the
wheel's files), and the installed distributions of this environment (which
provide each third-party import, and the tested versions the declared ranges
must admit).
"""

import ast
import configparser
import email.parser
import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile

from packaging.requirements import Requirement
import pytest

# The source tree, also under `bazel test`, whose runfiles hold only the deps.
REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PACKAGED_DIRS = ('one_shot_epe', 'experiments')
UNPACKAGED_DIRS = ('tests', 'benchmarks', 'tools', 'third_party', 'configs')
CONSOLE_SCRIPTS = ('one-shot-epe-train', 'one-shot-epe-reproduce',
                   'one-shot-epe-estimate')
# Checkout entries that are not sources: environments, outputs, caches.
_NOT_COPIED = shutil.ignore_patterns(
    '.venv*', '.git', 'bazel-*', 'output', 'build', 'dist', '*.egg-info',
    '.hypothesis', '.pytest_cache', '__pycache__')


def _version() -> str:
  path = os.path.join(REPO, 'one_shot_epe', '__init__.py')
  with open(path) as stream:
    tree = ast.parse(stream.read())
  return next(node.value.value for node in tree.body
              if isinstance(node, ast.Assign) and
              isinstance(node.targets[0], ast.Name) and
              node.targets[0].id == '__version__')


def _packaged_modules() -> set[str]:
  """Wheel paths of the .py files under the packaged directories."""
  found = set()
  for root in PACKAGED_DIRS:
    for directory, subdirectories, files in os.walk(os.path.join(REPO, root)):
      subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
      found |= {os.path.relpath(os.path.join(directory, name), REPO)
                for name in files if name.endswith('.py')}
  return found


@pytest.fixture(name='wheel', scope='module')
def fixture_wheel(tmp_path_factory):
  """The built wheel, opened."""
  source = tmp_path_factory.mktemp('source') / 'one_shot_epe'
  shutil.copytree(REPO, source, ignore=_NOT_COPIED, symlinks=True)
  out = tmp_path_factory.mktemp('wheel')
  done = subprocess.run(
      [sys.executable, '-m', 'pip', 'wheel', '--no-deps',
       '--no-build-isolation', '--no-index', '--disable-pip-version-check',
       '--no-cache-dir', '--quiet', '--wheel-dir', str(out), str(source)],
      capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stdout + done.stderr
  (path,) = out.iterdir()
  with zipfile.ZipFile(path) as archive:
    yield path.name, archive


def _dist_info(archive: zipfile.ZipFile, name: str) -> str:
  (member,) = [member for member in archive.namelist()
               if member.endswith(f'.dist-info/{name}')]
  return archive.read(member).decode()


def test_wheel_is_pure_python_with_the_package_version(wheel):
  name, _ = wheel
  assert name == f'one_shot_epe-{_version()}-py3-none-any.whl'


def test_wheel_holds_every_module_and_nothing_else(wheel):
  _, archive = wheel
  files = {member for member in archive.namelist()
           if '.dist-info/' not in member}
  missing = _packaged_modules() - files
  assert not missing, f'modules missing from the wheel: {sorted(missing)}'
  assert files == _packaged_modules(), sorted(files - _packaged_modules())
  assert not any(member.split('/')[0] in UNPACKAGED_DIRS for member in files)


def test_console_scripts_name_functions_in_the_wheel(wheel):
  _, archive = wheel
  entry_points = configparser.ConfigParser()
  entry_points.read_string(_dist_info(archive, 'entry_points.txt'))
  scripts = dict(entry_points['console_scripts'])
  assert sorted(scripts) == sorted(CONSOLE_SCRIPTS)
  for script, target in scripts.items():
    module, function = target.split(':')
    tree = ast.parse(archive.read(module.replace('.', '/') + '.py'))
    functions = {node.name for node in tree.body
                 if isinstance(node, ast.FunctionDef)}
    assert function in functions, f'{script} -> {target}: no such function'


def test_metadata_requires_python_admits_this_interpreter(wheel):
  _, archive = wheel
  metadata = email.parser.Parser().parsestr(_dist_info(archive, 'METADATA'))
  requires_python = Requirement(f'python{metadata["Requires-Python"]}')
  assert requires_python.specifier.contains(
      f'{sys.version_info.major}.{sys.version_info.minor}.'
      f'{sys.version_info.micro}')
  assert not requires_python.specifier.contains('3.12.0')


def test_metadata_covers_every_third_party_import_at_tested_versions(wheel):
  _, archive = wheel
  metadata = email.parser.Parser().parsestr(_dist_info(archive, 'METADATA'))
  required = {}
  for line in metadata.get_all('Requires-Dist'):
    requirement = Requirement(line)
    if requirement.marker is None:  # Not an extra such as [test].
      required[requirement.name.lower().replace('_', '-')] = requirement
  # Each required range admits the version installed (and tested) here.
  for name, requirement in required.items():
    installed = importlib.metadata.version(name)
    assert requirement.specifier.contains(installed), (name, installed)
  # Each third-party top-level import of the packaged code comes from a
  # required distribution (per this environment's installed files).
  providers = importlib.metadata.packages_distributions()
  own = set(PACKAGED_DIRS)
  for module in _packaged_modules():
    with open(os.path.join(REPO, module)) as stream:
      tree = ast.parse(stream.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        tops = {alias.name.split('.')[0] for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and not node.level:
        tops = {node.module.split('.')[0]}
      else:
        continue
      for top in tops - own - set(sys.stdlib_module_names):
        candidates = {dist.lower().replace('_', '-')
                      for dist in providers.get(top, [])}
        assert candidates & set(required), (
            f'{module} imports {top}, provided by {sorted(candidates)}; '
            'none is in pyproject.toml dependencies.')


def test_the_environment_imports_the_project_from_any_directory(tmp_path):
  # `make setup` installs the project editable into the environment, so a
  # user's script run from elsewhere imports it (no PYTHONPATH).
  env = {key: value for key, value in os.environ.items()
         if key != 'PYTHONPATH'}
  done = subprocess.run(
      [sys.executable, '-c',
       'import one_shot_epe, experiments; print(one_shot_epe.__file__)'],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
      check=False)
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip().endswith(
      os.path.join('one_shot_epe', '__init__.py'))
