"""Keeps the Bazel BUILD files honest: a target per module, deps = imports.

The BUILD files are Starlark, whose syntax is a subset of Python's, so they are
read with `ast` (no Bazel needed). The independent truth is the source tree
itself: the .py files under one_shot_epe/, experiments/, benchmarks/,
examples/ and tests/, and the import statements in them, also read with `ast`.

What a target's `deps` must be, exactly (nothing missing, nothing extra):
  * the target of every project module its sources import (`import a.b`,
    `from a import b` where a.b is a module, else `from a import name` imports
    a), and of every project module named by a string such as
    `'one_shot_epe.reporting.epsilon_cli'` (the `python -m` subprocesses of the tests);
  * package __init__ files: Python runs a package's __init__.py before any of
    its modules. A target of a module in a package whose __init__.py imports
    nothing from the package (a "marker" package) depends on that package's
    target. A package whose __init__.py imports its own modules (one_shot_epe.
    tasks) cannot be a dep of those modules (a cycle), so a target that imports
    anything in it from outside depends on the package target instead;
  * a `pytest_test` (tests/pytest_test.bzl) adds //tests:conftest and
    tests/pytest_runner.py itself; tests/ is not a package (pytest puts it on
    sys.path), so `import cluster_data` means //tests:cluster_data.
Tests that import TensorFlow Federated at module level (directly or through
project modules) must be tagged "tff", which `bazel test //...` skips
(.bazelrc); other tests importing TensorFlow must be tagged "tf" (or "tff"), so
the //tests:fast suite (the untagged tests) stays numpy/scipy-only. Every
program in experiments/, benchmarks/ and examples/ needs a py_binary.
"""

import ast
import dataclasses
import functools
import os

import pytest

# The source tree, also under `bazel test`, whose runfiles hold only the deps.
REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
PACKAGE_ROOTS = ('one_shot_epe', 'experiments', 'benchmarks', 'examples')
TESTS_DIR = 'tests'
BINARY_DIRS = ('experiments', 'benchmarks', 'examples')
RULES = ('py_library', 'py_binary', 'py_test', 'pytest_test')
PYTEST_TEST_SRCS = ('tests/pytest_runner.py',)
PYTEST_TEST_DEPS = frozenset({'//tests:conftest'})
# Test tag -> the module whose (module-level, transitive) import requires it.
TAGGED_IMPORTS = {'tff': 'tensorflow_federated', 'tf': 'tensorflow'}


@dataclasses.dataclass(frozen=True)
class Target:
  """A Python rule of a BUILD file, with repository-relative paths."""
  label: str
  rule: str
  srcs: tuple[str, ...]
  deps: frozenset[str]
  tags: tuple[str, ...]


def _absolute_label(label: str, package: str) -> str:
  """'//a/b', '//a/b:c' or ':c' (in `package`) as '//pkg:name'."""
  if label.startswith(':'):
    return f'//{package}{label}'
  if not label.startswith('//'):
    raise ValueError(f'label must start with "//" or ":"; got {label!r}.')
  if ':' in label:
    return label
  return f'{label}:{label.rsplit("/", 1)[-1]}'


def _parse_build_file(package: str) -> list[Target]:
  """The Python targets of `package`/BUILD; attributes must be literals."""
  path = os.path.join(REPO, package, 'BUILD')
  with open(path) as stream:
    tree = ast.parse(stream.read(), filename=path)
  targets = []
  for statement in tree.body:
    if not (isinstance(statement, ast.Expr) and
            isinstance(statement.value, ast.Call) and
            isinstance(statement.value.func, ast.Name) and
            statement.value.func.id in RULES):
      continue
    rule = statement.value.func.id
    kwargs = {keyword.arg: keyword.value for keyword in statement.value.keywords}
    attr = lambda name, default: (ast.literal_eval(kwargs[name])
                                  if name in kwargs else default)
    srcs = attr('srcs', [])
    deps = {_absolute_label(dep, package) for dep in attr('deps', [])}
    if rule == 'pytest_test':
      srcs = [attr('src', None)]
      deps |= PYTEST_TEST_DEPS
    targets.append(Target(
        label=f'//{package}:{attr("name", None)}',
        rule=rule,
        srcs=tuple(os.path.join(package, src) for src in srcs),
        deps=frozenset(deps),
        tags=tuple(attr('tags', []))))
  return targets


def _source_files() -> list[str]:
  """Repository-relative paths of the project's Python files."""
  paths = []
  for root in PACKAGE_ROOTS:
    for directory, subdirectories, files in os.walk(os.path.join(REPO, root)):
      subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
      paths += [os.path.relpath(os.path.join(directory, name), REPO)
                for name in files if name.endswith('.py')]
  paths += [os.path.join(TESTS_DIR, name)
            for name in os.listdir(os.path.join(REPO, TESTS_DIR))
            if name.endswith('.py')]
  return sorted(paths)


def _module_name(path: str) -> str:
  """'a/b/c.py' -> 'a.b.c'; 'a/b/__init__.py' -> 'a.b'; tests/x.py -> 'x'."""
  if os.path.dirname(path) == TESTS_DIR:
    return os.path.basename(path)[:-len('.py')]
  name = path[:-len('.py')].replace(os.sep, '.')
  return name.removesuffix('.__init__')


def _is_package(module: str) -> bool:
  return os.path.isfile(
      os.path.join(REPO, *module.split('.'), '__init__.py'))


@functools.cache
def _tree(path: str) -> ast.Module:
  with open(os.path.join(REPO, path)) as stream:
    return ast.parse(stream.read(), filename=path)


@functools.cache
def _modules() -> dict[str, str]:
  """Project module name -> its file."""
  return {_module_name(path): path for path in _source_files()}


def _imports(path: str, *, top_level_only: bool = False) -> set[str]:
  """Modules (project and third-party) imported by the file at `path`."""
  modules = _modules()
  tree = _tree(path)
  nodes = tree.body if top_level_only else ast.walk(tree)
  imported = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      imported |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        raise ValueError(f'{path}: relative imports are not used here.')
      for alias in node.names:
        submodule = f'{node.module}.{alias.name}'
        imported.add(submodule if submodule in modules else node.module)
    elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and
          '.' in node.value and node.value in modules):
      imported.add(node.value)
  return imported


def _project_imports(path: str) -> set[str]:
  """Project modules imported by `path`: the longest known prefix of each."""
  modules = _modules()
  found = set()
  for name in _imports(path):
    parts = name.split('.')
    prefixes = ['.'.join(parts[:n]) for n in range(len(parts), 0, -1)]
    known = [prefix for prefix in prefixes if prefix in modules]
    if known and (parts[0] in PACKAGE_ROOTS or
                  os.path.dirname(path) == TESTS_DIR):
      found.add(known[0])
  return found


def _is_marker_package(package: str) -> bool:
  """Whether the package's __init__.py imports none of its own modules."""
  init = os.path.join(*package.split('.'), '__init__.py')
  return not any(module.startswith(package + '.')
                 for module in _project_imports(init))


def _enclosing_package(path: str) -> str | None:
  """The package whose __init__ runs before `path` (the parent for inits)."""
  module = _module_name(path)
  if os.path.dirname(path) == TESTS_DIR or '.' not in module:
    return None
  return module.rsplit('.', 1)[0]


@functools.cache
def _targets() -> tuple[Target, ...]:
  packages = sorted({os.path.dirname(path) for path in _source_files()})
  return tuple(target for package in packages
               for target in _parse_build_file(package))


@functools.cache
def _owners() -> dict[str, str]:
  """Repository-relative file -> label of the one target listing it."""
  owners = {}
  for target in _targets():
    for src in target.srcs:
      assert src not in owners, (
          f'{src} is in the srcs of both {owners[src]} and {target.label}.')
      owners[src] = target.label
  return owners


def _required_deps(target: Target) -> set[str]:
  """The deps `target` must have, from its sources' imports (see top)."""
  modules, owners = _modules(), _owners()
  required = set()
  for src in target.srcs:
    own = _enclosing_package(src)
    if own is not None and _is_marker_package(own):
      required.add(owners[modules[own]])
    for module in _project_imports(src):
      required.add(owners[modules[module]])
      parts = module.split('.')
      for n in range(1, len(parts)):
        package = '.'.join(parts[:n])
        if (_is_package(package) and not _is_marker_package(package) and
            not src.startswith(package.replace('.', os.sep) + os.sep)):
          required.add(owners[modules[package]])
  if target.rule == 'pytest_test':
    required |= PYTEST_TEST_DEPS
  required.discard(target.label)
  return required


def _imports_at_module_level(path: str, top_module: str,
                             seen: set[str]) -> bool:
  """Whether importing `path` imports `top_module` (transitively)."""
  if path in seen:
    return False
  seen.add(path)
  modules = _modules()
  for name in _imports(path, top_level_only=True):
    parts = name.split('.')
    if parts[0] == top_module:
      return True
    for n in range(1, len(parts) + 1):
      module = '.'.join(parts[:n])
      if module in modules and _imports_at_module_level(
          modules[module], top_module, seen):
        return True
  return False


def test_build_file_parser_reads_labels_srcs_and_macro_defaults():
  # Independent truth: a hand-written BUILD snippet with known contents.
  assert _absolute_label(':x', 'a/b') == '//a/b:x'
  assert _absolute_label('//a/b', 'c') == '//a/b:b'
  assert _absolute_label('//a:y', 'c') == '//a:y'
  with pytest.raises(ValueError, match='label'):
    _absolute_label('a:y', 'c')
  estimation_test = next(t for t in _targets()
                         if t.label == '//tests:estimation_test')
  assert estimation_test.srcs == ('tests/estimation_test.py',)
  assert '//tests:conftest' in estimation_test.deps


def test_every_python_file_has_a_target():
  owned = set(_owners()) | set(PYTEST_TEST_SRCS)
  missing = [path for path in _source_files() if path not in owned]
  assert not missing, f'Python files without a Bazel target: {missing}'


def test_every_target_source_exists():
  absent = [(target.label, src) for target in _targets()
            for src in target.srcs
            if not os.path.isfile(os.path.join(REPO, src))]
  assert not absent, f'BUILD srcs that do not exist: {absent}'


def test_every_test_file_has_a_pytest_test_named_after_it():
  tests = {target.srcs[0]: target.label for target in _targets()
           if target.rule == 'pytest_test'}
  for path in _source_files():
    if os.path.dirname(path) == TESTS_DIR and path.endswith('_test.py'):
      name = os.path.basename(path)[:-len('.py')]
      assert tests.get(path) == f'//tests:{name}', path


def _is_program(path: str) -> bool:
  """Whether the module has a top-level `if __name__ == '__main__':`."""
  return any(
      isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and
      isinstance(node.test.left, ast.Name) and node.test.left.id == '__name__'
      and isinstance(node.test.comparators[0], ast.Constant) and
      node.test.comparators[0].value == '__main__'
      for node in _tree(path).body)


def test_every_program_has_a_py_binary():
  binaries = {target.srcs[0] for target in _targets()
              if target.rule == 'py_binary'}
  programs = [path for path in _source_files()
              if path.split(os.sep)[0] in BINARY_DIRS and _is_program(path)]
  assert 'experiments/train.py' in programs  # The detector works.
  missing = [path for path in programs if path not in binaries]
  assert not missing, f'programs without a py_binary: {missing}'


@pytest.mark.parametrize('label', [target.label for target in _targets()])
def test_deps_mirror_imports(label):
  target = next(t for t in _targets() if t.label == label)
  required = _required_deps(target)
  assert not required - target.deps, (
      f'{label}: deps missing for its imports: {sorted(required - target.deps)}')
  assert not target.deps - required, (
      f'{label}: deps it does not import: {sorted(target.deps - required)}')


@pytest.mark.parametrize('tag', sorted(TAGGED_IMPORTS))
def test_tests_importing_tensorflow_are_tagged(tag):
  # A "tff" tag also covers TensorFlow: TFF imports it.
  allowed = {tag, 'tff'}
  untagged = [
      target.label for target in _targets()
      if target.rule == 'pytest_test' and not allowed & set(target.tags) and
      _imports_at_module_level(target.srcs[0], TAGGED_IMPORTS[tag], set())]
  assert not untagged, (
      f'tests importing {TAGGED_IMPORTS[tag]} without the "{tag}" tag: '
      f'{untagged}')
