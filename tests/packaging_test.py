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


def _metadata(archive: zipfile.ZipFile):
  return email.parser.Parser().parsestr(_dist_info(archive, 'METADATA'))


def _requirements(metadata, extra: str | None,
                  python_version: str | None = None) -> dict[str, Requirement]:
  """The requirements of `extra` (None: the core's) on a Python version.

  Args:
    metadata: The wheel's metadata.
    extra: The extra's name, or None for the core.
    python_version: 'X.Y' to evaluate the markers for; None: this
      interpreter's.

  Returns:
    The requirements by normalised distribution name.
  """
  found = {}
  environment = {} if python_version is None else {
      'python_version': python_version}
  for line in metadata.get_all('Requires-Dist'):
    requirement = Requirement(line)
    marker = requirement.marker
    in_extra = marker is not None and marker.evaluate(
        {**environment, 'extra': '\0'}) != marker.evaluate(
            {**environment, 'extra': extra or '\0'})
    if (extra is None and marker is None) or (extra is not None and in_extra):
      found[requirement.name.lower().replace('_', '-')] = requirement
  return found


def _extra_of(module: str) -> str | None:
  """The extra whose framework `module` (a wheel path) may import, if any."""
  for prefix, extra in _MODULE_EXTRAS:
    if module.startswith(prefix):
      return extra
  return None


# The modules beyond the core, by the extra that installs their framework.
_MODULE_EXTRAS = (
    ('one_shot_epe/tff_engine/', 'tff'), ('experiments/baselines/', 'tff'),
    ('one_shot_epe/flower_engine/', 'flower'),
    ('experiments/backend_tff.py', 'tff'),
    ('experiments/compare_canife.py', 'tff'),
    ('experiments/export_arrays.py', 'tff'),
    ('one_shot_epe/jax_engine/', 'jax'), ('experiments/backend_jax.py', 'jax'),
    ('experiments/ray_executor.py', 'ray'))


def test_metadata_requires_python_admits_3_11_to_3_13(wheel):
  _, archive = wheel
  metadata = _metadata(archive)
  requires_python = Requirement(f'python{metadata["Requires-Python"]}')
  for version in ('3.11.0', '3.12.0', '3.13.0',
                  f'{sys.version_info.major}.{sys.version_info.minor}.'
                  f'{sys.version_info.micro}'):
    assert requires_python.specifier.contains(version), version
  assert not requires_python.specifier.contains('3.10.12')
  assert set(metadata.get_all('Provides-Extra')) == {
      'flower', 'jax', 'ray', 'shakespeare', 'test', 'tff'}
  # [tff] is TFF 0.87's, on Python 3.11 only: on 3.12 it adds nothing.
  tff = [Requirement(line) for line in metadata.get_all('Requires-Dist')
         if 'extra == "tff"' in line]
  assert {requirement.name for requirement in tff} >= {
      'tensorflow', 'tensorflow-federated', 'tensorflow-privacy'}
  for requirement in tff:
    assert requirement.marker.evaluate(
        {'extra': 'tff', 'python_version': '3.11'}), requirement
    assert not requirement.marker.evaluate(
        {'extra': 'tff', 'python_version': '3.12'}), requirement


def test_the_core_requires_neither_tensorflow_nor_jax(wheel):
  _, archive = wheel
  core = _requirements(_metadata(archive), None)
  assert set(core) == {'absl-py', 'dp-accounting', 'matplotlib', 'numpy',
                       'scipy', 'tqdm'}
  # numpy 1.x (TFF 0.87's) and 2.x (current jax's) alike.
  assert core['numpy'].specifier.contains('1.25.2')
  assert core['numpy'].specifier.contains('2.5.5')


def test_metadata_covers_every_third_party_import_at_tested_versions(wheel):
  _, archive = wheel
  metadata = _metadata(archive)
  core = _requirements(metadata, None)
  extras = {extra: _requirements(metadata, extra)
            for extra in ('tff', 'jax', 'ray', 'test', 'flower', 'shakespeare')}
  # Each range of the core and of every extra installed here admits the
  # version installed (and tested) here.
  for name, requirement in [*core.items(),
                            *(item for extra in extras.values()
                              for item in extra.items())]:
    try:
      installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue  # An extra not installed in this environment.
    assert requirement.specifier.contains(installed), (name, installed)
  # Each third-party top-level import of the packaged code comes from a
  # required distribution (per this environment's installed files): the
  # core's, or those of the extra of the module's engine.
  providers = importlib.metadata.packages_distributions()
  own = set(PACKAGED_DIRS)
  # An extra's modules may import what it requires on any supported Python
  # ([jax] requires jax-privacy on 3.12+ only).
  anywhere = {extra: {name for version in ('3.11', '3.12', '3.13')
                      for name in _requirements(metadata, extra, version)}
              for extra in extras}
  for module in _packaged_modules():
    extra = _extra_of(module)
    allowed = set(core) | (anywhere[extra] if extra else set())
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
        # A module not installed here (jax-privacy's outside .venv-jax) is
        # taken to come from the distribution of its own name.
        candidates = {dist.lower().replace('_', '-')
                      for dist in providers.get(top, [top])}
        assert candidates & allowed, (
            f'{module} imports {top}, provided by {sorted(candidates)}; '
            f'none is in pyproject.toml dependencies'
            + (f' or its [{extra}] extra.' if extra else ' (the core).'))


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
