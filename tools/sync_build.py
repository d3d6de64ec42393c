"""Rewrites the Bazel BUILD files' Python targets to match the source tree.

    .venv/bin/python tools/sync_build.py

Adds a target for every module, program and test file that lacks one, drops
targets whose sources are gone and sets every target's `deps` to what its
imports require, by the rules that `tests/build_files_test.py` checks (that
test is the rules' one statement; this program applies them). Tests that
import TensorFlow (Federated) get the "tf" ("tff") tag, tests that skip
themselves without Flower (a module-level importorskip) the "flower" tag. A package's header
comment and the attributes of existing targets other than `deps` are kept.
"""

import ast
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_ORDER = ('name', 'src', 'srcs', 'deps', 'data', 'args', 'size', 'tags',
          'main', 'visibility')


def _skips_without(path: str, module: str) -> bool:
  """Whether the test module skips itself where `module` is absent.

  A module-level `pytest.importorskip('<module>')` (as the Flower tests
  start): such a test runs only in that module's environment.
  """
  with open(path, encoding='utf-8') as source:
    tree = ast.parse(source.read())
  for node in tree.body:
    value = getattr(node, 'value', None)
    if (isinstance(value, ast.Call) and
        isinstance(value.func, ast.Attribute) and
        value.func.attr == 'importorskip' and value.args and
        isinstance(value.args[0], ast.Constant) and
        value.args[0].value == module):
      return True
  return False


def _rules_module():
  path = os.path.join(REPO, 'tests', 'build_files_test.py')
  spec = importlib.util.spec_from_file_location('build_rules', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _read(package: str) -> tuple[str, list[tuple[str, dict]]]:
  """The header text and the (rule, literal attributes) of a BUILD file."""
  path = os.path.join(REPO, package, 'BUILD')
  if not os.path.exists(path):
    return 'package(default_visibility = ["//visibility:public"])\n', []
  with open(path) as stream:
    text = stream.read()
  tree = ast.parse(text)
  rules, first = [], None
  for statement in tree.body:
    call = statement.value if isinstance(statement, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and
        call.func.id in ('py_library', 'py_binary', 'pytest_test')):
      first = statement.lineno if first is None else first
      rules.append((call.func.id, {k.arg: ast.literal_eval(k.value)
                                   for k in call.keywords}))
  lines = text.splitlines(keepends=True)
  header = ''.join(lines[:first - 1]) if first else text
  return header, rules


def _format(rule: str, attrs: dict) -> str:
  out = [f'{rule}(']
  for key in sorted(attrs, key=lambda k: (_ORDER.index(k) if k in _ORDER
                                          else len(_ORDER), k)):
    value = attrs[key]
    if isinstance(value, list) and len(value) > 1:
      out.append(f'    {key} = [')
      out += [f'        "{item}",' for item in value]
      out.append('    ],')
    elif isinstance(value, list):
      out.append(f'    {key} = [{", ".join(f"{chr(34)}{v}{chr(34)}" for v in value)}],')
    else:
      out.append(f'    {key} = {value!r},'.replace("'", '"'))
  out.append(')')
  return '\n'.join(out) + '\n'


def _sort_key(package, rule, attrs):
  init = attrs.get('srcs') == ['__init__.py']
  return (not init, attrs['name'])


def _write(package, header, rules):
  rules = sorted(rules, key=lambda r: _sort_key(package, *r))
  body = '\n'.join(_format(rule, attrs) for rule, attrs in rules)
  with open(os.path.join(REPO, package, 'BUILD'), 'w') as stream:
    stream.write(header.rstrip('\n') + '\n\n' + body)


def _local(label: str, package: str) -> str:
  prefix = f'//{package}:'
  if label.startswith(prefix):
    return ':' + label[len(prefix):]
  if label == f'//{package}:{package.rsplit("/", 1)[-1]}':
    return ':' + package.rsplit('/', 1)[-1]
  pkg, name = label[2:].split(':')
  return f'//{pkg}' if pkg.rsplit('/', 1)[-1] == name else label


def main() -> int:
  rules_module = _rules_module()
  sources = rules_module._source_files()
  packages = sorted({os.path.dirname(path) for path in sources})
  # Pass 1: one target per file, none for missing files.
  for package in packages:
    header, rules = _read(package)
    owned = set()
    kept = []
    for rule, attrs in rules:
      srcs = [attrs['src']] if rule == 'pytest_test' else attrs.get('srcs', [])
      if all(os.path.exists(os.path.join(REPO, package, s)) for s in srcs):
        kept.append((rule, attrs))
        owned |= {os.path.join(package, s) for s in srcs}
    for path in sources:
      if os.path.dirname(path) != package or path in owned:
        continue
      base = os.path.basename(path)
      if package == 'tests' and base == 'pytest_runner.py':
        continue
      if package == 'tests' and base.endswith('_test.py'):
        kept.append(('pytest_test', {'name': base[:-3], 'src': base}))
      elif base == '__init__.py':
        kept.append(('py_library', {'name': package.rsplit('/', 1)[-1],
                                    'srcs': [base]}))
      elif (package.split('/')[0] in rules_module.BINARY_DIRS and
            rules_module._is_program(path)):
        kept.append(('py_binary', {'name': base[:-3], 'srcs': [base]}))
      else:
        kept.append(('py_library', {'name': base[:-3], 'srcs': [base]}))
    _write(package, header, kept)
  # Pass 2: deps and tags from the imports.
  for function in (rules_module._targets, rules_module._owners,
                   rules_module._modules, rules_module._tree):
    function.cache_clear()
  targets = {t.label: t for t in rules_module._targets()}
  for package in packages:
    header, rules = _read(package)
    for rule, attrs in rules:
      target = targets[f'//{package}:{attrs["name"]}']
      deps = rules_module._required_deps(target)
      if rule == 'pytest_test':
        deps -= rules_module.PYTEST_TEST_DEPS
        src = os.path.join(package, attrs['src'])
        tags = set(attrs.get('tags', []))
        if rules_module._imports_at_module_level(src, 'tensorflow_federated', set()):
          tags = (tags - {'tf'}) | {'tff'}
          attrs.setdefault('size', 'large')
        elif rules_module._imports_at_module_level(src, 'tensorflow', set()):
          tags |= {'tf'} if 'tff' not in tags else set()
        if _skips_without(src, 'flwr'):
          tags |= {'flower'}
        if tags:
          attrs['tags'] = sorted(tags)
      local = sorted(_local(dep, package) for dep in deps)
      local = sorted(local, key=lambda d: (not d.startswith(':'), d))
      if local:
        attrs['deps'] = local
      else:
        attrs.pop('deps', None)
    _write(package, header, rules)
  return 0


if __name__ == '__main__':
  sys.exit(main())
