"""Every module and public API of the project says what it does.

The code style (module and function docstrings that say what and why, citing
the paper where the math comes from) is checked here on the source itself,
read with `ast`: no project module is imported, so the test needs neither
TensorFlow nor TFF and sees modules that would fail to import.

Checked, in every .py file under one_shot_epe/ (recursively), experiments/ and
benchmarks/:
  * the module has a docstring;
  * every public (name not starting with '_') function and class defined at
    module level has one (including definitions inside module-level `if` or
    `try` blocks);
  * every public method of a public class has one; properties count as
    methods. Dunder methods (`__init__`, `__post_init__`, ...) start with '_'
    and are not checked: the class docstring documents construction.
A docstring is a string literal as the first statement with some non-blank
text. The checker itself is tested on hand-written sources whose missing
docstrings are known, so a checker that finds nothing cannot pass.
"""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
ROOTS = ('one_shot_epe', 'experiments', 'benchmarks')

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
  for expected in ('one_shot_epe/__init__.py', 'one_shot_epe/estimation.py',
                   'one_shot_epe/tff_engine/tasks/base.py',
                   'one_shot_epe/baselines/canife.py', 'experiments/train.py',
                   'benchmarks/table2.py'):
    assert expected in files
  assert not any('__pycache__' in path for path in files)


@pytest.mark.parametrize('path', _source_files())
def test_module_and_public_api_have_docstrings(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    missing = missing_docstrings(stream.read())
  assert not missing, f'{path}: no docstring for {", ".join(missing)}'
