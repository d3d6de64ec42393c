"""Re-checked arguments and private names of other modules, found with `ast`.

The sources are read, not imported (`validation_rules_test` holds the
package to what this finds).

A re-check: a function of `one_shot_epe/` decorated with
`validation.arguments` (or a method of a `validation.fields` dataclass, for
its fields) passes one of its checked parameters, by name, to a check (a
`validation.check_*` function, a rule such as `validation.Int(1)(name, value)`
or a module's rule constant such as `lower_bound.ALPHA`) or to a function of
the package that checks the parameter it lands in: by its decorator, or in
its body, directly or through the functions it calls (a helper that hands
the value to a decorated function checks it too). `f.unchecked(...)` runs
only the body of `f`, so it checks what that body checks. Calls are resolved
through each module's imports (`module.function`, `from module import
function`, re-exports) and `self.method`; a call whose target cannot be
resolved (a method of another object) counts as checking nothing.

A private name of another module: `module._name` or `from module import
_name` for a module of `one_shot_epe/` or `experiments/` other than the one
that says it. A module's own private functions are its business; another
module calls its public names (for values it already checked, their
`.unchecked`).
"""

import ast
import dataclasses
import pathlib
from collections.abc import Iterator, Mapping

ROOT = pathlib.Path(__file__).resolve().parent.parent
VALIDATION = 'one_shot_epe.validation'
_RULES = frozenset(f'{VALIDATION}.{name}' for name in (
    'Int', 'Real', 'Probability', 'Choice', 'Sample', 'Cosines', 'Optional'))
_DECORATORS = {f'{VALIDATION}.arguments': 'arguments',
               f'{VALIDATION}.fields': 'fields'}


def read_sources(*folders: str) -> dict[str, str]:
  """Module name -> source of every module under `folders`.

  Args:
    folders: Folders of the repository, e.g. 'one_shot_epe'.

  Returns:
    Each module's dotted name (a package's for its __init__.py) -> its text.
  """
  sources = {}
  for folder in folders:
    for path in sorted((ROOT / folder).rglob('*.py')):
      parts = path.relative_to(ROOT).with_suffix('').parts
      sources['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = (
          path.read_text())
  return sources


@dataclasses.dataclass(frozen=True)
class Finding:
  """`caller` passes its checked `value` to `callee`, landing in `parameter`."""
  caller: str
  value: str
  callee: str
  parameter: str
  path: str = dataclasses.field(default='', compare=False)

  def __str__(self) -> str:
    return f'{self.caller}: {self.value} -> {self.callee}({self.parameter})'


def _name(node: ast.AST) -> str | None:
  return node.id if isinstance(node, ast.Name) else None


class _Module:
  """One module's tree, imports (local name -> dotted name) and top names."""

  def __init__(self, name: str, source: str, package: str):
    self.name = name
    self.tree = ast.parse(source)
    self.imports: dict[str, str] = {}
    for node in ast.walk(self.tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          top = alias.name.split('.')[0]
          self.imports[alias.asname or top] = (
              alias.name if alias.asname else top)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ''
        if node.level:
          parts = package.split('.')[:len(package.split('.')) - node.level + 1]
          base = '.'.join(parts + ([base] if base else []))
        for alias in node.names:
          self.imports[alias.asname or alias.name] = f'{base}.{alias.name}'
    self.defined = set()
    for node in self.tree.body:
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        self.defined.add(node.name)
      elif isinstance(node, ast.Assign):
        self.defined.update(_name(t) for t in node.targets if _name(t))

  def dotted(self, node: ast.AST) -> str | None:
    """The dotted name an expression such as `module.function` stands for."""
    if isinstance(node, ast.Name):
      if node.id in self.imports:
        return self.imports[node.id]
      return f'{self.name}.{node.id}' if node.id in self.defined else None
    if isinstance(node, ast.Attribute):
      base = self.dotted(node.value)
      return base and f'{base}.{node.attr}'
    return None


@dataclasses.dataclass(frozen=True)
class _Function:
  module: _Module
  qualname: str
  node: ast.FunctionDef
  cls: str | None  # The class of a method.

  @property
  def dotted(self) -> str:
    return f'{self.module.name}.{self.qualname}'

  @property
  def parameters(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(positional, keyword-only) parameter names; a method's first dropped."""
    args = self.node.args
    positional = [arg.arg for arg in args.posonlyargs + args.args]
    if self.cls is not None and not any(
        _name(d) == 'staticmethod' for d in self.node.decorator_list):
      positional = positional[1:]
    return tuple(positional), tuple(arg.arg for arg in args.kwonlyargs)


def _functions(module: _Module, body: list[ast.stmt], prefix: str = '',
               cls: str | None = None) -> Iterator[_Function]:
  for node in body:
    if isinstance(node, ast.FunctionDef):
      yield _Function(module, prefix + node.name, node, cls)
      yield from _functions(module, node.body,
                            f'{prefix}{node.name}.<locals>.')
    elif isinstance(node, ast.ClassDef):
      yield from _functions(module, node.body, f'{prefix}{node.name}.',
                            prefix + node.name)


class Checker:
  """The call graph of a set of modules, and what each function checks.

  Built from module name -> source (`read_sources`).
  """

  def __init__(self, sources: Mapping[str, str]):
    packages = {name.rpartition('.')[0] for name in sources}
    self.modules = {
        name: _Module(name, source,
                      name if name in packages else name.rpartition('.')[0])
        for name, source in sources.items()}
    self.functions = {function.dotted: function
                      for module in self.modules.values()
                      for function in _functions(module, module.tree.body)}
    self.rules = set()  # Module constants that are rules, and rule functions.
    self.fields = {}  # Dotted class -> the fields its decorator checks.
    for module in self.modules.values():
      for node in module.tree.body:
        if isinstance(node, ast.Assign) and self._is_rule(module, node.value):
          self.rules.update(f'{module.name}.{target.id}'
                            for target in node.targets if _name(target))
      for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef):
          for decorator in node.decorator_list:
            checked = self._decorator(module, decorator, 'fields')
            if checked is not None:
              self.fields[f'{module.name}.{node.name}'] = checked
    # Dotted function -> the parameters its decorator checks.
    self.decorated = {}
    for name, function in self.functions.items():
      for decorator in function.node.decorator_list:
        checked = self._decorator(function.module, decorator, 'arguments')
        if checked is not None:
          self.decorated[name] = checked
    self.body = self._body_checks()

  def canonical(self, dotted: str | None, depth: int = 0) -> str | None:
    """`dotted` with re-exports followed to the module that defines it.

    Args:
      dotted: A dotted name such as 'one_shot_epe.stats.estimation.f', or
        None.
      depth: The re-exports followed so far.

    Returns:
      The name where it is defined (unchanged outside the modules).
    """
    if dotted is None or depth > 8:
      return dotted
    parts = dotted.split('.')
    for cut in range(len(parts) - 1, 0, -1):
      module = self.modules.get('.'.join(parts[:cut]))
      if module is not None:
        head = parts[cut]
        if head in module.imports and head not in module.defined:
          return self.canonical(
              '.'.join([module.imports[head]] + parts[cut + 1:]), depth + 1)
        return dotted
    return dotted

  def _decorator(self, module: _Module, node: ast.AST,
                 kind: str) -> frozenset[str] | None:
    """The names a `validation.<kind>(...)` decorator checks, else None."""
    if not isinstance(node, ast.Call) or _DECORATORS.get(
        self.canonical(module.dotted(node.func))) != kind:
      return None
    for keyword in node.keywords:
      if isinstance(keyword.value, (ast.Name, ast.Attribute)):
        self.rules.add(self.canonical(module.dotted(keyword.value)))
    return frozenset(
        [arg.value for arg in node.args if isinstance(arg, ast.Constant)] +
        [keyword.arg for keyword in node.keywords])

  def _is_rule(self, module: _Module, node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
      return self.canonical(module.dotted(node.func)) in _RULES
    if isinstance(node, ast.Subscript):
      return self.canonical(
          module.dotted(node.value)) == f'{VALIDATION}.PARAMETERS'
    return False

  def _landings(self, function: _Function
                ) -> Iterator[tuple[ast.AST, str | None, str, bool]]:
    """(argument, callee or None for a check, its parameter, via unchecked)."""
    module = function.module
    for call in ast.walk(function.node):
      if not isinstance(call, ast.Call):
        continue
      func, unchecked = call.func, False
      if isinstance(func, ast.Attribute) and func.attr == 'unchecked':
        func, unchecked = func.value, True
      if self._is_rule(module, func):
        yield from _checked_value(call, 1, ('value',))
        continue
      target = self.canonical(module.dotted(func))
      bound = (function.cls is not None and isinstance(func, ast.Attribute)
               and _name(func.value) == 'self')
      if bound:
        target = f'{module.name}.{function.cls}.{func.attr}'
      if target is None:
        continue
      if target.startswith(f'{VALIDATION}.check_') or target in self.rules:
        yield from _checked_value(call, 1, ('value', 'values'))
      elif target in self.functions:
        positional, _ = self.functions[target].parameters
        if self.functions[target].cls is not None and not bound:
          positional = ('self',) + positional  # Class.method(instance, ...)
        for index, arg in enumerate(call.args):
          if isinstance(arg, ast.Starred) or index >= len(positional):
            break
          yield arg, target, positional[index], unchecked
        for keyword in call.keywords:
          if keyword.arg:
            yield keyword.value, target, keyword.arg, unchecked

  def _checks(self, callee: str | None, parameter: str, unchecked: bool,
              body: Mapping[str, Mapping[str, str]]) -> str | None:
    """Why a value landing in `parameter` of `callee` is checked, or None."""
    if callee is None:
      return ''
    if not unchecked and parameter in self.decorated.get(callee, ()):
      return f' -> {callee}({parameter})'
    if parameter in body.get(callee, {}):
      return f' -> {callee}({parameter})' + body[callee][parameter]
    return None

  def _body_checks(self) -> dict[str, dict[str, str]]:
    """Function -> {parameter its body checks (directly or below): path}."""
    body: dict[str, dict[str, str]] = {name: {} for name in self.functions}
    changed = True
    while changed:
      changed = False
      for name, function in self.functions.items():
        parameters = set(sum(function.parameters, ())) - _assigned(function)
        for value, callee, parameter, unchecked in self._landings(function):
          key = _name(value)
          if key in parameters and key not in body[name]:
            path = self._checks(callee, parameter, unchecked, body)
            if path is not None:
              body[name][key] = path
              changed = True
    return body

  def findings(self) -> list[Finding]:
    """Every re-check (module docstring) of the modules.

    Returns:
      The findings, sorted by their text.
    """
    found = set()
    for name, function in self.functions.items():
      checked = {*self.decorated.get(name, ())}
      if function.cls is not None:
        checked.update(f'self.{field}' for field in self.fields.get(
            f'{function.module.name}.{function.cls}', ()))
      checked -= _assigned(function)
      for value, callee, parameter, unchecked in self._landings(function):
        key = _value(value)
        if key in checked:
          path = self._checks(callee, parameter, unchecked, self.body)
          if path is not None:
            found.add(Finding(name, key, callee or 'a check', parameter,
                              path))
    return sorted(found, key=str)

  def private_uses(self) -> list[str]:
    """Each private name of another module that a module uses.

    Returns:
      'module: other_module._name' lines, sorted.
    """
    found = set()
    for module in self.modules.values():
      for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
          owner = self.canonical(module.dotted(node.value))
          if owner in self.modules and owner != module.name:
            found.add(f'{module.name}: {owner}.{node.attr}')
        elif isinstance(node, ast.ImportFrom) and node.module in self.modules:
          found.update(f'{module.name}: {node.module}.{alias.name}'
                       for alias in node.names if _private(alias.name))
    return sorted(found)


def _private(name: str) -> bool:
  return name.startswith('_') and not name.startswith('__')


def _assigned(function: _Function) -> set[str]:
  """Names the function binds itself: they no longer hold the argument."""
  return {node.id for node in ast.walk(function.node)
          if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _checked_value(call: ast.Call, index: int, keywords: tuple[str, ...]
                   ) -> Iterator[tuple[ast.AST, None, str, bool]]:
  """The value a check call checks: argument `index` or a keyword."""
  if len(call.args) > index and not any(
      isinstance(arg, ast.Starred) for arg in call.args[:index + 1]):
    yield call.args[index], None, 'value', False
  for keyword in call.keywords:
    if keyword.arg in keywords:
      yield keyword.value, None, 'value', False


def _value(node: ast.AST) -> str | None:
  if isinstance(node, ast.Attribute) and _name(node.value) == 'self':
    return f'self.{node.attr}'
  return _name(node)
