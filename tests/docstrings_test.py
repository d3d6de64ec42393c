"""Every module and public API of the project says what it does.

The code style (module and function docstrings that say what and why, citing
the paper where the math comes from) is checked here on the source itself,
read with `ast`: no project module is imported, so the test needs neither
TensorFlow nor TFF and sees modules that would fail to import.

Checked, in every .py file under one_shot_epe/ (recursively), experiments/,
benchmarks/ and examples/:
  * the module has a docstring;
  * every public (name not starting with '_') function and class defined at
    module level has one (including definitions inside module-level `if` or
    `try` blocks);
  * every public method of a public class has one; properties count as
    methods. Dunder methods (`__init__`, `__post_init__`, ...) start with '_'
    and are not checked: the class docstring documents construction.
A docstring is a string literal as the first statement with some non-blank
text.

Also checked:
  * the public API of every module read above (ARGUMENT_ROOTS: the core, the
    engines, the programs and the baselines of experiments/, the benchmarks
    and the examples; no module is exempt) documents its arguments, Google
    style: every public function, and every public method of a public class
    (properties apart), has an `Args:` section naming exactly its parameters
    (less self/cls), a `Returns:` (or `Yields:`) section when its body
    returns a value, and a `Raises:` section when its body raises;
  * every public module of one_shot_epe/ and experiments/ (package __init__
    files apart) has an `__all__` of string literals, each a name the module
    defines or imports.
The checkers themselves are tested on hand-written sources whose gaps are
known, so a checker that finds nothing cannot pass.
"""

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
ROOTS = ('one_shot_epe', 'experiments', 'benchmarks', 'examples')
# Folders whose modules' public API must document its arguments, returns
# and raises (Google style: Args:, Returns:/Yields:, Raises:): every folder
# the test reads, with no module exempt.
ARGUMENT_ROOTS = ROOTS
# Folders whose public modules must have an `__all__`.
ALL_ROOTS = ('one_shot_epe', 'experiments')

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _has_docstring(node: ast.AST) -> bool:
  docstring = ast.get_docstring(node, clean=True)
  return bool(docstring and docstring.strip())


def _module_level_definitions(body: list[ast.stmt]) -> list[ast.stmt]:
  """Functions and classes of a module body, also inside `if`/`try` blocks."""
  found = []
  for statement in body:
    if isinstance(statement, _DEFINITIONS):
      found.append(statement)
    elif isinstance(statement, ast.If):
      found += _module_level_definitions(statement.body + statement.orelse)
    elif isinstance(statement, ast.Try):
      blocks = statement.body + statement.orelse + statement.finalbody
      for handler in statement.handlers:
        blocks += handler.body
      found += _module_level_definitions(blocks)
  return found


def missing_docstrings(source: str) -> list[str]:
  """Names in `source` that lack a docstring: '<module>', 'f', 'C', 'C.m'."""
  tree = ast.parse(source)
  missing = [] if _has_docstring(tree) else ['<module>']
  for node in _module_level_definitions(tree.body):
    if node.name.startswith('_'):
      continue
    if not _has_docstring(node):
      missing.append(node.name)
    if isinstance(node, ast.ClassDef):
      for member in node.body:
        if (isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and
            not member.name.startswith('_') and not _has_docstring(member)):
          missing.append(f'{node.name}.{member.name}')
  return missing


def _own_nodes(function: ast.AST) -> list[ast.AST]:
  """The nodes of `function`'s body, less those of nested scopes."""
  found, stack = [], list(ast.iter_child_nodes(function))
  while stack:
    node = stack.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                         ast.ClassDef)):
      continue
    found.append(node)
    stack.extend(ast.iter_child_nodes(node))
  return found


def _section(docstring: str, title: str) -> list[str] | None:
  """The lines of a Google-style section ('Args:'), or None if absent."""
  lines = docstring.split('\n')
  for i, line in enumerate(lines):
    if line.strip() == title:
      indent = len(line) - len(line.lstrip())
      body = []
      for inner in lines[i + 1:]:
        if inner.strip() and len(inner) - len(inner.lstrip()) <= indent:
          break
        body.append(inner)
      return body
  return None


def _documented_arguments(args_section: list[str]) -> list[str]:
  """Names of the entries of an `Args:` section ('x:', 'x (int):', '*a:')."""
  entries = [line for line in args_section if line.strip()]
  if not entries:
    return []
  indent = len(entries[0]) - len(entries[0].lstrip())
  names = []
  for line in entries:
    if len(line) - len(line.lstrip()) != indent:
      continue
    match = re.match(r'\s*\*{0,2}(\w+)(?: \([^)]*\))?:', line)
    if match:
      names.append(match.group(1))
  return names


def _argument_gaps(node: ast.FunctionDef | ast.AsyncFunctionDef,
                   name: str, is_method: bool) -> list[str]:
  """What `node`'s docstring fails to document, as 'name: what' strings."""
  arguments = node.args
  parameters = [a.arg for a in arguments.posonlyargs + arguments.args +
                arguments.kwonlyargs]
  if is_method and parameters and parameters[0] in ('self', 'cls'):
    parameters = parameters[1:]
  parameters += [a.arg for a in (arguments.vararg, arguments.kwarg) if a]
  docstring = ast.get_docstring(node, clean=True) or ''
  gaps = []
  args_section = _section(docstring, 'Args:')
  if parameters and args_section is None:
    gaps.append(f'{name}: no Args: section')
  elif args_section is not None:
    documented = _documented_arguments(args_section)
    missing = [p for p in parameters if p not in documented]
    extra = [d for d in documented if d not in parameters]
    if missing:
      gaps.append(f'{name}: Args: does not name {", ".join(missing)}')
    if extra:
      gaps.append(f'{name}: Args: names {", ".join(extra)}, not a parameter')
  own = _own_nodes(node)
  returns = any(isinstance(n, ast.Return) and n.value is not None and
                not (isinstance(n.value, ast.Constant) and
                     n.value.value is None) for n in own)
  yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own)
  if returns and not yields and _section(docstring, 'Returns:') is None:
    gaps.append(f'{name}: no Returns: section')
  if yields and _section(docstring, 'Yields:') is None:
    gaps.append(f'{name}: no Yields: section')
  if (any(isinstance(n, ast.Raise) for n in own) and
      _section(docstring, 'Raises:') is None):
    gaps.append(f'{name}: no Raises: section')
  return gaps


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
  return any(
      (isinstance(d, ast.Name) and d.id in ('property', 'cached_property')) or
      (isinstance(d, ast.Attribute) and d.attr in ('cached_property',
                                                   'setter'))
      for d in node.decorator_list)


def missing_argument_docs(source: str) -> list[str]:
  """The public functions and methods of `source` whose Args: etc. lack."""
  tree = ast.parse(source)
  gaps = []
  functions = (ast.FunctionDef, ast.AsyncFunctionDef)
  for node in _module_level_definitions(tree.body):
    if node.name.startswith('_'):
      continue
    if isinstance(node, functions):
      gaps += _argument_gaps(node, node.name, is_method=False)
    elif isinstance(node, ast.ClassDef):
      for member in node.body:
        if (isinstance(member, functions) and
            not member.name.startswith('_') and not _is_property(member)):
          gaps += _argument_gaps(member, f'{node.name}.{member.name}',
                                 is_method=True)
  return gaps


def _defined_names(body: list[ast.stmt]) -> set[str]:
  """Names a module body binds: definitions, assignments, imports."""
  names = set()
  for node in body:
    if isinstance(node, _DEFINITIONS):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [
          node.target]
      for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names |= {(a.asname or a.name).split('.')[0] for a in node.names}
    elif isinstance(node, (ast.If, ast.Try, ast.With)):
      blocks = node.body + getattr(node, 'orelse', []) + getattr(
          node, 'finalbody', [])
      for handler in getattr(node, 'handlers', []):
        blocks += handler.body
      names |= _defined_names(blocks)
  return names


def all_problems(source: str) -> list[str]:
  """What is wrong with the `__all__` of `source` (none, or a missing name)."""
  tree = ast.parse(source)
  declared = None
  for node in tree.body:
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, ast.AnnAssign) else [])
    if any(isinstance(t, ast.Name) and t.id == '__all__' for t in targets):
      declared = node.value
  if declared is None:
    return ['no __all__']
  if not (isinstance(declared, (ast.List, ast.Tuple)) and all(
      isinstance(e, ast.Constant) and isinstance(e.value, str)
      for e in declared.elts)):
    return ['__all__ is not a list of string literals']
  defined = _defined_names(tree.body)
  return [f'__all__ names {e.value}, which the module does not define'
          for e in declared.elts if e.value not in defined]


def _public_modules() -> list[str]:
  """Modules that must have an `__all__`: public, not package __init__s."""
  return [path for path in _source_files()
          if path.split('/')[0] in ALL_ROOTS and
          not os.path.basename(path).startswith('_')]


def _source_files() -> list[str]:
  """Repository-relative paths of every .py file under ROOTS, sorted."""
  paths = []
  for root in ROOTS:
    for directory, subdirectories, names in os.walk(os.path.join(REPO, root)):
      subdirectories[:] = sorted(d for d in subdirectories
                                 if d != '__pycache__')
      paths += [
          os.path.relpath(os.path.join(directory, name), REPO)
          for name in names
          if name.endswith('.py')
      ]
  return sorted(paths)


_CHECKER_CASES = [
    ('x = 1\n', ['<module>']),
    ('"""Doc."""\n', []),
    ('"""  """\n', ['<module>']),
    ('"""Doc."""\ndef f():\n  pass\ndef _g():\n  pass\n', ['f']),
    ('"""Doc."""\ndef f():\n  """F."""\n', []),
    ('"""Doc."""\nasync def f():\n  return 1\n', ['f']),
    ('"""Doc."""\nclass C:\n  def m(self):\n    pass\n'
     '  def _p(self):\n    pass\n  def __init__(self):\n    pass\n',
     ['C', 'C.m']),
    ('"""Doc."""\nclass C:\n  """C."""\n  @property\n  def p(self):\n'
     '    return 1\n', ['C.p']),
    ('"""Doc."""\nclass _C:\n  def m(self):\n    pass\n', []),
    ('"""Doc."""\nclass C:\n  """C."""\n  class D:\n    pass\n', []),
    ('"""Doc."""\nif True:\n  def f():\n    pass\nelse:\n  class C:\n'
     '    """C."""\n', ['f']),
    ('"""Doc."""\ntry:\n  def f():\n    pass\nexcept ImportError:\n'
     '  def g():\n    pass\n', ['f', 'g']),
    ('"""Doc."""\ndef f():\n  def inner():\n    pass\n  """Not first."""\n',
     ['f']),
    ('"""Doc."""\ndef f():\n  x = """Not a docstring."""\n', ['f']),
]


@pytest.mark.parametrize('source, expected', _CHECKER_CASES)
def test_checker_finds_exactly_the_missing_docstrings(source, expected):
  assert missing_docstrings(source) == expected


def test_the_tree_has_the_modules_it_is_expected_to_have():
  files = _source_files()
  for expected in ('one_shot_epe/__init__.py', 'one_shot_epe/stats/estimation.py',
                   'experiments/baselines/canife.py', 'experiments/train.py',
                   'benchmarks/table2.py'):
    assert expected in files
  assert not any('__pycache__' in path for path in files)


@pytest.mark.parametrize('path', _source_files())
def test_module_and_public_api_have_docstrings(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    missing = missing_docstrings(stream.read())
  assert not missing, f'{path}: no docstring for {", ".join(missing)}'


_ARGUMENT_CASES = [
    ('def f(x, y):\n  """F.\n\n  Args:\n    x: X.\n    y (int): Y.\n  """\n',
     []),
    ('def f(x, y):\n  """F.\n\n  Args:\n    x: X.\n  """\n',
     ['f: Args: does not name y']),
    ('def f(x):\n  """F."""\n', ['f: no Args: section']),
    ('def f():\n  """F."""\n', []),
    ('def f(x):\n  """F.\n\n  Args:\n    x: X, with\n      more: text.\n'
     '    z: Z.\n  """\n', ['f: Args: names z, not a parameter']),
    ('def f(*args, k=1, **kwargs):\n  """F.\n\n  Args:\n    *args: A.\n'
     '    k: K.\n  """\n', ['f: Args: does not name kwargs']),
    ('def f():\n  """F."""\n  return 1\n', ['f: no Returns: section']),
    ('def f():\n  """F.\n\n  Returns:\n    One.\n  """\n  return 1\n', []),
    ('def f():\n  """F."""\n  return\n', []),
    ('def f():\n  """F."""\n  def g():\n    return 1\n', []),
    ('def f():\n  """F."""\n  yield 1\n', ['f: no Yields: section']),
    ('def f():\n  """F."""\n  raise ValueError()\n',
     ['f: no Raises: section']),
    ('def f():\n  """F.\n\n  Raises:\n    ValueError: always.\n  """\n'
     '  raise ValueError()\n', []),
    ('class C:\n  """C."""\n  def m(self, x):\n    """M."""\n'
     '  @classmethod\n  def n(cls):\n    """N."""\n'
     '  @property\n  def p(self):\n    """P."""\n    return 1\n'
     '  def _q(self, y):\n    return y\n',
     ['C.m: no Args: section']),
    ('class _C:\n  def m(self, x):\n    return x\n', []),
    ('def _f(x):\n  return x\n', []),
]


@pytest.mark.parametrize('source, expected', _ARGUMENT_CASES)
def test_argument_checker_finds_exactly_the_gaps(source, expected):
  assert missing_argument_docs(source) == expected


def _argument_documented() -> list[str]:
  """The modules whose public API must document its arguments."""
  return [path for path in _source_files()
          if path.split('/')[0] in ARGUMENT_ROOTS]


def test_argument_documented_modules_are_every_module_read():
  modules = _argument_documented()
  assert modules == _source_files()
  for expected in ('one_shot_epe/stats/lower_bound.py',
                   'one_shot_epe/reporting/privacy_report.py',
                   'one_shot_epe/tff_engine/audit.py',
                   'one_shot_epe/jax_engine/training.py',
                   'experiments/grid.py', 'benchmarks/round_timing.py',
                   'examples/flower_fashion_mnist.py'):
    assert expected in modules


@pytest.mark.parametrize('path', _argument_documented())
def test_public_api_documents_its_arguments(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    gaps = missing_argument_docs(stream.read())
  assert not gaps, f'{path}:\n  ' + '\n  '.join(gaps)


_ALL_CASES = [
    ('"""Doc."""\n', ['no __all__']),
    ('import os\n__all__ = ["f", "C", "X", "os"]\ndef f():\n  pass\n'
     'class C:\n  pass\nX = 1\n', []),
    ('__all__ = ["f", "g"]\ndef f():\n  pass\n',
     ['__all__ names g, which the module does not define']),
    ('__all__ = [name for name in ("f",)]\ndef f():\n  pass\n',
     ['__all__ is not a list of string literals']),
    ('__all__ = ("f",)\ntry:\n  from x import f\nexcept ImportError:\n'
     '  f = None\n', []),
]


@pytest.mark.parametrize('source, expected', _ALL_CASES)
def test_all_checker_finds_exactly_the_problems(source, expected):
  assert all_problems(source) == expected


def test_public_modules_are_the_expected_ones():
  modules = _public_modules()
  for expected in ('one_shot_epe/stats/estimation.py',
                   'one_shot_epe/tff_engine/audit.py',
                                  'one_shot_epe/jax_engine/fedavg.py',
                   'experiments/baselines/canife.py', 'experiments/train.py'):
    assert expected in modules
  assert not any(path.endswith('__init__.py') or path.startswith('benchmarks')
                 for path in modules)


@pytest.mark.parametrize('path', _public_modules())
def test_public_module_has_an_all_of_defined_names(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    problems = all_problems(stream.read())
  assert not problems, f'{path}: ' + '; '.join(problems)
