"""The documentation names only things that exist, with the defaults they have.

README.md, every page under docs/ and the docstrings of every module of one_shot_epe/,
experiments/, benchmarks/ and examples/ name modules, programs, flags, make
targets, functions, classes and methods. Each such name is checked against
the source tree itself, read statically (`ast` over the .py files, the
Makefile's rules, the absl flag definitions), so no project module is
imported and the test needs neither TensorFlow nor JAX. What is checked:

  * paths: a path under a top-level folder of the repository (`configs/...`,
    `one_shot_epe/stats/lower_bound.py`, `experiments/*.py`) must exist (globs must
    match something); a shorter path ending in `.py` (`tasks/determinism.py`,
    `canary_spec.py`) must be the end of some project file's path;
  * `python -m X` with X in a project package: X must be a module;
  * `--flag`: a flag defined with `flags.DEFINE_*` by the launchers
    (experiments/, benchmarks/, one_shot_epe/reporting/epsilon_cli.py; a dataclass whose
    fields become flags counts), absl's own flags, `--noX` for a boolean X,
    or a flag of another program listed in OTHER_PROGRAMS_FLAGS; on a
    `python -m program` line of a code block, a flag of that program (its
    module's or a project module's it imports);
  * `--flag=value` (also `--flag=a|b`) for an enum flag whose values can be
    read statically: each value one of them;
  * a default the text states for a flag ("`--num_canaries` (default
    1000)", "`--f` defaults to x", "`--f=x`, the default", "(default
    `--f=x`)", "by default (`--f=x`)"): the default of the flag's
    `flags.DEFINE_*` (or of its dataclass field), read statically; a
    default of None is computed at run time and any description passes;
  * `make T`: T must be a rule of the Makefile;
  * a dotted name in backticks or in a code block whose first part is a
    project package (`one_shot_epe.tff_engine.audit.CanaryAudit`), the end of
    a project module's dotted name (`lower_bound.epsilon_lower_bound`,
    `tff_engine.runtime.local_cpp_context`) or a project class
    (`CanaryAudit.from_spec`) must resolve: each further part an attribute
    defined there (a definition, assignment or import; for a class, also its
    methods, fields, `self.x` assignments and project base classes). In a
    Python code block, `from pkg import module as alias` is followed, and so
    is a variable assigned a project class's instance (`x = m.C(...)`) or
    the result of a function annotated to return one; a subpackage's name
    (`design.x`, `stats.x`) is never taken for a variable's;
  * a dotted name whose first part is no project name but whose second part
    names a project module (`plan.participation`, where the module is
    `one_shot_epe.design.participation`): a package that moved or never
    existed, reported unless the first part is another library's
    (OTHER_LIBRARIES: `tff.learning.models`);
  * a call of a project function, method or class so named (in backticks or
    a Python code block) passes only keywords it has and no more positional
    arguments than it takes;
  * a `Modules:` list in a package's docstring names exactly the package's
    modules.
Names of other libraries (`tff.learning...`, `jax.devices()`) and of local
variables (`state.aggregator`, `plan.seed` for a RunPlan `plan`) are not
checked. The checker is itself
tested on small texts with planted wrong names. tests/docs_code_test.py
runs the documents' Python code blocks. Relative links between the
documents must reach an existing file and heading.
"""

import ast
import copy
import functools
import glob
import math
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# The folders holding the project's Python sources.
SOURCE_ROOTS = ('one_shot_epe', 'experiments', 'benchmarks', 'examples',
                'scripts', 'tests', 'tools')
# Packages whose dotted names must be spelled in full.
PACKAGES = ('one_shot_epe', 'experiments', 'benchmarks', 'examples', 'scripts')
# Names of other libraries (and `self`) a dotted name may start with although
# its next part is also the name of a project module (`tf.data`,
# `tff.learning.models`, `tff.simulation.datasets.emnist`).
OTHER_LIBRARIES = frozenset({
    'tf', 'tff', 'tensorflow', 'tensorflow_federated', 'jax', 'jnp', 'np',
    'numpy', 'scipy', 'flwr', 'keras', 'optax', 'jax_privacy', 'ray', 'os',
    'sys', 'absl', 'dp_accounting', 'self'})
# Folders whose modules' docstrings are checked like the documents.
DOCSTRING_ROOTS = ('one_shot_epe', 'experiments', 'benchmarks', 'examples')
# The programs whose absl flags the documentation may name.
FLAG_SOURCES = ('experiments/*.py', 'benchmarks/*.py', 'examples/*.py',
                'one_shot_epe/reporting/epsilon_cli.py')
# Flags absl defines for every program.
ABSL_FLAGS = frozenset({
    'flagfile', 'undefok', 'help', 'helpshort', 'helpfull', 'helpxml',
    'only_check_args', 'verbosity', 'v', 'logtostderr', 'alsologtostderr',
    'log_dir', 'stderrthreshold', 'showprefixforinfo', 'run_with_pdb',
    'pdb_post_mortem', 'pdb', 'run_with_profiling', 'profile_file',
    'use_cprofile_for_profiling'})
# Flags of other programs the documentation shows, by program.
OTHER_PROGRAMS_FLAGS = {
    'pip': ('no-deps', 'no-build-isolation', 'quiet',
            'disable-pip-version-check'),
    'bazel': ('config',),
    "TFF's worker_binary": ('port', 'max_concurrent_computation_calls',
                            'grpc_max_message_length_megabytes'),
    'pytest': ('durations',),
    'ray start': ('head', 'address'),
    # Flower 1.42's (docs/flower.md; tests/flower_engine_deployment_test.py
    # checks each against the program's --help).
    'flower-superlink': ('insecure', 'host', 'port', 'simulation',
                         'disable-runtime-dependency-installation',
                         'ssl-certfile', 'ssl-keyfile', 'ssl-ca-certfile',
                         'database'),
    'flower-supernode': ('insecure', 'superlink', 'host', 'port',
                         'node-config', 'root-certificates'),
    'flwr run': ('stream', 'run-config', 'federation-config'),
}
# File name endings that make a dotted word a file, not a Python name.
FILE_SUFFIXES = ('md', 'json', 'csv', 'png', 'py', 'cfg', 'txt', 'npz', 'npy',
                 'sqlite', 'lzma', 'lock', 'toml', 'bzl', 'gz', 'word_count',
                 'sh', 'ini', 'yaml', 'pdf', 'svg', 'whl', 'tar', 'bz2', 'xz',
                 'zip')
# Class bases that add no attributes a document would name.
_CLOSED_BASES = frozenset({'object', 'ABC', 'Protocol', 'Generic',
                           'NamedTuple', 'Enum'})
# A class decorated so gains a field per report field entry: the first
# argument of each `ReportField(...)` of the file below.
_REPORT_FIELDS_DECORATOR = '_with_report_fields'
_REPORT_FIELDS_FILE = os.path.join('one_shot_epe', 'reporting',
                                   'report_fields.py')

_BACKTICKS = re.compile(r'`([^`\n]+)`')
_FENCE = re.compile(r'^ *```(\w*)\n(.*?)^ *```', re.S | re.M)
_FLAG = re.compile(r'(?<![\w-])--([A-Za-z][\w-]*)')
_FLAG_VALUE = re.compile(
    r'(?<![\w-])--([a-z]\w*)=([A-Za-z_][\w|]*)(?![\w./-])')
_PYTHON_M = re.compile(r'(?<![\w.-])-m\s+([A-Za-z_][\w.]*)')
_MAKE = re.compile(r'(?<![\w$(-])make((?:[ \t]+[a-z][\w-]*)+)')
_DOTTED = re.compile(r'(?<![\w./$-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)')
_SHORT_PY_PATH = re.compile(r'(?<![\w/.<>*-])((?:[\w.-]+/)*[\w-]+\.py)\b')


class Module:
  """What one source file defines at module level, read with `ast`."""

  def __init__(self, name: str, path: str, tree: ast.Module):
    self.name = name
    self.path = path
    self.tree = tree
    self.names: set[str] = set()
    self.classes: dict[str, ast.ClassDef] = {}
    self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    self.assignments: dict[str, ast.expr] = {}  # name -> value assigned
    self.imports: dict[str, str] = {}  # alias -> dotted name imported
    self.open = False  # A module-level __getattr__ or `import *`.
    self._collect(tree.body)

  def _collect(self, body: list[ast.stmt]) -> None:
    """Records the definitions of `body`, also inside `if`/`try`/`with`."""
    for node in body:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        self.names.add(node.name)
        self.functions[node.name] = node
        self.open |= node.name == '__getattr__'
      elif isinstance(node, ast.ClassDef):
        self.names.add(node.name)
        self.classes[node.name] = node
      elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [
            node.target]
        for target in targets:
          self.names |= _assigned_names(target)
          if isinstance(target, ast.Name) and node.value is not None:
            self.assignments[target.id] = node.value
      elif isinstance(node, ast.Import):
        for alias in node.names:
          self.names.add(alias.asname or alias.name.split('.')[0])
          self.imports[alias.asname or alias.name] = alias.name
      elif isinstance(node, ast.ImportFrom):
        base = _absolute_module(self.name, node)
        for alias in node.names:
          if alias.name == '*':
            self.open = True
            continue
          self.names.add(alias.asname or alias.name)
          self.imports[alias.asname or alias.name] = f'{base}.{alias.name}'
      elif isinstance(node, (ast.If, ast.Try, ast.With)):
        blocks = node.body + getattr(node, 'orelse', []) + getattr(
            node, 'finalbody', [])
        for handler in getattr(node, 'handlers', []):
          blocks += handler.body
        self._collect(blocks)


def _assigned_names(target: ast.expr) -> set[str]:
  """The names a (possibly tuple) assignment target binds."""
  if isinstance(target, ast.Name):
    return {target.id}
  if isinstance(target, (ast.Tuple, ast.List)):
    return set().union(*(_assigned_names(item) for item in target.elts))
  return set()


def _absolute_module(module: str, node: ast.ImportFrom) -> str:
  """The module a `from ... import` statement of `module` reads from."""
  if not node.level:
    return node.module or ''
  parts = module.split('.')[:-node.level]
  return '.'.join(parts + ([node.module] if node.module else []))


def _class_attributes(node: ast.ClassDef) -> set[str]:
  """Methods, class-level assignments, nested classes and `self.x = ...`."""
  names = set()
  for member in node.body:
    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef)):
      names.add(member.name)
    elif isinstance(member, (ast.Assign, ast.AnnAssign)):
      targets = member.targets if isinstance(member, ast.Assign) else [
          member.target]
      for target in targets:
        names |= _assigned_names(target)
  for inner in ast.walk(node):
    if (isinstance(inner, (ast.Attribute)) and
        isinstance(inner.ctx, ast.Store) and
        isinstance(inner.value, ast.Name) and inner.value.id == 'self'):
      names.add(inner.attr)
  return names


def _report_field_keys(repo: str, node: ast.ClassDef) -> set[str]:
  """The fields `node` gains from `report_fields.FIELDS` (none undecorated)."""
  if not any(isinstance(d, ast.Name) and d.id == _REPORT_FIELDS_DECORATOR
             for d in node.decorator_list):
    return set()
  with open(os.path.join(repo, _REPORT_FIELDS_FILE), encoding='utf-8') as f:
    tree = ast.parse(f.read())
  return {call.args[0].value for call in ast.walk(tree)
          if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
          and call.func.id == 'ReportField' and call.args
          and isinstance(call.args[0], ast.Constant)}


def _base_name(base: ast.expr) -> str:
  """'C' for a base class written `C`, `m.C` or `C[T]`."""
  if isinstance(base, ast.Subscript):
    base = base.value
  if isinstance(base, ast.Attribute):
    return base.attr
  return base.id if isinstance(base, ast.Name) else ''


class Index:
  """The repository's modules, flags and make targets, read statically."""

  def __init__(self, repo: str):
    self.repo = repo
    self.modules: dict[str, Module] = {}
    for root in SOURCE_ROOTS:
      for directory, subdirectories, files in os.walk(os.path.join(repo, root)):
        subdirectories[:] = sorted(
            d for d in subdirectories if d != '__pycache__')
        for file in sorted(files):
          if file.endswith('.py'):
            self._add(os.path.relpath(os.path.join(directory, file), repo))
    self.files = sorted(module.path for module in self.modules.values())
    self.classes: dict[str, list[ast.ClassDef]] = {}
    for module in self.modules.values():
      for name, node in module.classes.items():
        self.classes.setdefault(name, []).append(node)
    self.flag_values: dict[str, frozenset[str] | None] = {}
    # Flag -> the default of each of its definitions (_UNREADABLE if that
    # default cannot be read statically).
    self.flag_defaults: dict[str, list[object]] = {}
    self.flags, self.bool_flags = self._flags()
    self._program_flags: dict[str, tuple[set[str], set[str]]] = {}
    self.make_targets = self._make_targets()

  def _add(self, path: str) -> None:
    with open(os.path.join(self.repo, path), encoding='utf-8') as stream:
      source = stream.read()
    try:
      tree, broken = ast.parse(source, filename=path), False
    except SyntaxError:  # A file mid-edit: its names are unknown.
      tree, broken = ast.Module(body=[], type_ignores=[]), True
    name = path[:-len('.py')].replace(os.sep, '.')
    if name.endswith('.__init__'):
      name = name[:-len('.__init__')]
    if name.startswith('tests.'):  # tests/ is on sys.path, not a package.
      name = name[len('tests.'):]
    self.modules[name] = Module(name, path, tree)
    self.modules[name].open |= broken

  def _flags(self) -> tuple[set[str], set[str]]:
    """Every absl flag the launchers define, and which of them are bools."""
    names, bools = set(), set()
    for pattern in FLAG_SOURCES:
      for path in sorted(glob.glob(os.path.join(self.repo, pattern))):
        relative = os.path.relpath(path, self.repo)
        module = self._with_imported_tables(next(
            m for m in self.modules.values() if m.path == relative))
        enums = self._enum_values(module)
        for found, default in _flag_defaults(module).items():
          self.flag_defaults.setdefault(found, []).append(default)
        for found, is_bool in _defined_flags(module.tree):
          names.add(found)
          if is_bool:
            bools.add(found)
          known = self.flag_values.get(found, frozenset())
          values = enums.get(found)
          self.flag_values[found] = (
              None if known is None or values is None else known | values)
    return names, bools

  def _with_imported_tables(self, module: Module) -> Module:
    """`module`, with `m.X` of an imported project module `m` read as `X`.

    A launcher may define its flags from another module's dataclass and
    tables (`dataclasses.fields(train_config.TrainConfig)`,
    `train_config.ENUMS[field.name]`): the copy's tree has each such
    attribute replaced by a name, and that module's class or assignment
    added, so the flags read as if defined in one module.
    """
    tree = copy.deepcopy(module.tree)
    added = []
    owners = []

    def resolved(value: ast.AST) -> ast.AST:
      """A Name for `m.X` of another project module, recording X's node."""
      if not (isinstance(value, ast.Attribute) and
              isinstance(value.value, ast.Name)):
        return value
      owner = self.modules.get(module.imports.get(value.value.id, ''))
      if owner is None or owner is module:
        return value
      owners.append(owner)
      if value.attr in owner.classes:
        added.append(owner.classes[value.attr])
      elif value.attr in owner.assignments:
        added.append(ast.Assign(targets=[ast.Name(value.attr)],
                                value=owner.assignments[value.attr]))
      else:
        return value
      return ast.Name(value.attr, ast.Load())

    for node in ast.walk(tree):
      for field, value in ast.iter_fields(node):
        if isinstance(value, list):
          setattr(node, field, [resolved(item) for item in value])
        else:
          setattr(node, field, resolved(value))
    if not added:
      return module
    tree.body = list(tree.body) + added
    merged = Module(module.name, module.path, tree)
    for owner in owners:  # The added definitions name what their module imports.
      merged.imports.update(owner.imports)
    merged.imports.update(module.imports)
    return merged

  def _enum_values(self, module: Module) -> dict[str, frozenset[str] | None]:
    """Flag -> the values its `DEFINE_enum` allows.

    None for a flag that is not an enum or whose values cannot be read
    statically. Flags defined per dataclass field take their values from a
    module-level dict indexed by the field's name (`_ENUMS[field.name]`).
    """
    found = {}
    fields = {}  # A dict of enum values per dataclass field: _ENUMS[name].
    for node in ast.walk(module.tree):
      if not (isinstance(node, ast.Call) and isinstance(
          node.func, ast.Attribute) and node.func.attr.startswith('DEFINE_')):
        continue
      name = node.args[0] if node.args else next(
          (k.value for k in node.keywords if k.arg == 'name'), None)
      values = node.args[2] if len(node.args) > 2 else next(
          (k.value for k in node.keywords if k.arg == 'enum_values'), None)
      if node.func.attr != 'DEFINE_enum' or values is None:
        values = None
      if isinstance(name, ast.Constant) and isinstance(name.value, str):
        found[name.value] = (self._strings(values, module)
                             if values is not None else None)
        continue
      while isinstance(values, ast.Call) and len(values.args) == 1:
        values = values.args[0]
      if (isinstance(values, ast.Subscript) and
          isinstance(values.value, ast.Name) and
          isinstance(module.assignments.get(values.value.id), ast.Dict)):
        table = module.assignments[values.value.id]
        for key, value in zip(table.keys, table.values):
          if isinstance(key, ast.Constant):
            fields[key.value] = self._strings(value, module)
    for field, values in fields.items():
      found.setdefault(field, values)
    return found

  def _strings(self, node: ast.expr, module: Module,
               depth: int = 0) -> frozenset[str] | None:
    """The string constants `node` evaluates to, if that is static."""
    if depth > 10:
      return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      return frozenset({node.value})
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
      parts = [self._strings(e, module, depth + 1) for e in node.elts]
      return None if None in parts else frozenset().union(*parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
      parts = [self._strings(node.left, module, depth + 1),
               self._strings(node.right, module, depth + 1)]
      return None if None in parts else parts[0] | parts[1]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id in ('list', 'tuple', 'sorted', 'frozenset', 'set') and
        len(node.args) == 1):
      return self._strings(node.args[0], module, depth + 1)
    if isinstance(node, ast.Name):
      if node.id in module.assignments:
        return self._strings(module.assignments[node.id], module, depth + 1)
      owner, _, name = module.imports.get(node.id, '').rpartition('.')
      if owner in self.modules:
        return self._strings(ast.Name(name), self.modules[owner], depth + 1)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
      target = self.modules.get(module.imports.get(node.value.id, ''))
      if target is not None:
        return self._strings(ast.Name(node.attr), target, depth + 1)
    return None

  def _make_targets(self) -> set[str]:
    with open(os.path.join(self.repo, 'Makefile'), encoding='utf-8') as stream:
      text = stream.read()
    targets = set()
    for match in re.finditer(r'^([\w.$() -]+?)\s*:(?!=)', text, re.M):
      targets |= {t for t in match.group(1).split() if re.fullmatch(
          r'[a-z][\w-]*', t)}
    return targets

  def program_flags(self, name: str) -> tuple[set[str], set[str]]:
    """(flags, bool flags) a program can take: its own and its imports'.

    A program `python -m name` defines its flags in its module and in the
    project modules it imports (at any depth, also inside functions).
    """
    if name in self._program_flags:
      return self._program_flags[name]
    seen, stack = set(), [name]
    while stack:
      module = self.modules.get(stack.pop())
      if module is None or module.name in seen:
        continue
      seen.add(module.name)
      for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
          stack += [self._module_of(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
          base = _absolute_module(module.name, node)
          stack += [self._module_of(f'{base}.{a.name}') for a in node.names]
    names, bools = set(), set()
    for module in sorted(seen):
      tree = self._with_imported_tables(self.modules[module]).tree
      for found, is_bool in _defined_flags(tree):
        names.add(found)
        if is_bool:
          bools.add(found)
    self._program_flags[name] = names, bools
    return names, bools

  def _module_of(self, dotted: str) -> str:
    """The longest prefix of `dotted` that is a project module ('' if none)."""
    parts = dotted.split('.')
    for end in range(len(parts), 0, -1):
      if '.'.join(parts[:end]) in self.modules:
        return '.'.join(parts[:end])
    return ''

  def modules_ending(self, parts: list[str]) -> list[Module]:
    """Modules whose dotted name is `parts` or ends with '.' + `parts`."""
    dotted = '.'.join(parts)
    if parts[0] in PACKAGES:
      return [self.modules[dotted]] if dotted in self.modules else []
    return [module for name, module in self.modules.items()
            if name == dotted or name.endswith('.' + dotted)]

  def resolves_in_module(self, module: Module, rest: list[str],
                         seen: frozenset[str] = frozenset()) -> bool:
    """Whether `module.rest[0].rest[1]...` is defined."""
    if not rest or module.open:
      return True
    head = rest[0]
    submodule = f'{module.name}.{head}'
    if submodule in self.modules:
      return self.resolves_in_module(self.modules[submodule], rest[1:])
    if head not in module.names:
      return False
    if head in module.classes:
      return self.resolves_in_class(module.classes[head], rest[1:])
    target = module.imports.get(head)
    if target and target not in seen:
      if target in self.modules:
        return self.resolves_in_module(self.modules[target], rest[1:],
                                       seen | {target})
      owner, _, attribute = target.rpartition('.')
      if owner in self.modules:
        return self.resolves_in_module(self.modules[owner],
                                       [attribute] + rest[1:], seen | {target})
    return True  # A function, a value or another library's name.

  def resolves_in_class(self, node: ast.ClassDef, rest: list[str],
                        depth: int = 0) -> bool:
    """Whether `rest[0]` is an attribute of the class (or of its bases)."""
    if not rest or depth > 10:
      return True
    if rest[0] in _report_field_keys(self.repo, node):
      return True
    if rest[0] in _class_attributes(node):
      inner = [m for m in node.body
               if isinstance(m, ast.ClassDef) and m.name == rest[0]]
      return self.resolves_in_class(inner[0], rest[1:],
                                    depth + 1) if inner else True
    for base in node.bases:
      name = _base_name(base)
      if name in _CLOSED_BASES:
        continue
      if name not in self.classes:
        return True  # Another library's class: its attributes are unknown.
      if any(self.resolves_in_class(other, rest, depth + 1)
             for other in self.classes[name]):
        return True
    return False


# A flag default that cannot be read statically (not checked).
_UNREADABLE = object()


def _literal(node: ast.expr | None, module: Module) -> object:
  """The value of `node` if it is a literal or a module-level literal name."""
  if node is None:
    return _UNREADABLE
  if isinstance(node, ast.Name) and node.id in module.assignments:
    node = module.assignments[node.id]
  try:
    return ast.literal_eval(node)
  except (ValueError, TypeError, SyntaxError, RecursionError):
    return _UNREADABLE


def _call_name(node: ast.Call) -> str:
  """The called function's name: `f` of `m.f(...)` or `f(...)`."""
  function = node.func
  return function.attr if isinstance(function, ast.Attribute) else getattr(
      function, 'id', '')


def _literal_flag_name(node: ast.Call) -> str | None:
  """The literal flag name of a `DEFINE_*(name, ...)` call, else None."""
  literal = node.args[0] if node.args else next(
      (k.value for k in node.keywords if k.arg == 'name'), None)
  if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
    return literal.value
  return None


def _flag_defaults(module: Module) -> dict[str, object]:
  """Flag -> its default, for each flag `module` defines (as _defined_flags).

  `flags.DEFINE_*(name, default, ...)` (or `default=`), and for flags
  defined per dataclass field, the field's default (`x: int = 3` or
  `dataclasses.field(default=3)`).
  """
  found = {}
  classes = {node.name: node for node in module.tree.body
             if isinstance(node, ast.ClassDef)}
  for node in ast.walk(module.tree):
    if not isinstance(node, ast.Call):
      continue
    name = _call_name(node)
    if name.startswith('DEFINE_'):
      flag = _literal_flag_name(node)
      if flag is not None:
        default = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == 'default'), None)
        found[flag] = _literal(default, module)
    elif (name == 'fields' and node.args and
          isinstance(node.args[0], ast.Name) and
          node.args[0].id in classes):
      for field in classes[node.args[0].id].body:
        if not (isinstance(field, ast.AnnAssign) and
                isinstance(field.target, ast.Name)):
          continue
        value = field.value
        if (isinstance(value, ast.Call) and
            ast.unparse(value.func).endswith('field')):
          value = next((k.value for k in value.keywords
                        if k.arg == 'default'), None)
        found[field.target.id] = _literal(value, module)
  return found


def _defines_flags_per_field(tree: ast.Module) -> bool:
  """Whether `tree` calls a `DEFINE_*` whose flag name is not a literal.

  Only such a module defines one flag per dataclass field; another that
  merely lists a dataclass's fields (`dataclasses.fields(C)`) defines none.
  """
  for node in ast.walk(tree):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith('DEFINE_')):
      continue
    if _literal_flag_name(node) is None:
      return True
  return False


def _defined_flags(tree: ast.Module) -> list[tuple[str, bool]]:
  """(name, is_bool) of each `flags.DEFINE_*` in `tree` with a literal name.

  A flag whose name is a variable is found when the module defines one flag
  per field of a dataclass (`for field in dataclasses.fields(C)`): each
  annotated field of C is then a flag, a bool if annotated `bool`.
  """
  found = []
  classes = {node.name: node for node in tree.body
             if isinstance(node, ast.ClassDef)}
  if not _defines_flags_per_field(tree):
    classes = {}
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    name = _call_name(node)
    if name.startswith('DEFINE_'):
      flag = _literal_flag_name(node)
      if flag is not None:
        found.append((flag, name in ('DEFINE_bool', 'DEFINE_boolean')))
    elif (name == 'fields' and node.args and
          isinstance(node.args[0], ast.Name) and
          node.args[0].id in classes):
      for field in classes[node.args[0].id].body:
        if (isinstance(field, ast.AnnAssign) and
            isinstance(field.target, ast.Name)):
          is_bool = isinstance(field.annotation, ast.Name) and (
              field.annotation.id == 'bool')
          found.append((field.target.id, is_bool))
  return found


@functools.lru_cache(maxsize=None)
def repo_index() -> Index:
  """The repository's index, built once per test session."""
  return Index(REPO)


def _code_spans(text: str) -> list[tuple[str, str]]:
  """(language, text) of every fenced block and every backticked span."""
  spans = [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]
  outside = _FENCE.sub('', text)
  return spans + [('', m.group(1)) for m in _BACKTICKS.finditer(outside)]


def _python_aliases(code: str, index: Index) -> dict[str, str]:
  """Names of a Python code block that stand for project names.

  alias -> module for its `import` statements, and a variable assigned the
  result of a project call -> the class of that result: `x = module.C(...)`
  (an instance of C) or `x = module.f(...)` where f is annotated to return
  a project class.
  """
  aliases = {}
  for match in re.finditer(
      r'^\s*from\s+([\w.]+)\s+import\s+(\w+)(?:\s+as\s+(\w+))?', code, re.M):
    aliases[match.group(3) or match.group(2)] = (
        f'{match.group(1)}.{match.group(2)}')
  for match in re.finditer(r'^\s*import\s+([\w.]+)\s+as\s+(\w+)', code, re.M):
    aliases[match.group(2)] = match.group(1)
  try:
    tree = ast.parse(code)
  except SyntaxError:
    return aliases
  for node in ast.walk(tree):
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and
            isinstance(node.targets[0], ast.Name) and
            isinstance(node.value, ast.Call)):
      continue
    dotted = ast.unparse(node.value.func)
    head, _, tail = dotted.partition('.')
    if head in aliases and tail:
      dotted = f'{aliases[head]}.{tail}'
    definition, _ = _definition(index, dotted)
    if isinstance(definition, ast.ClassDef):
      aliases[node.targets[0].id] = dotted
    elif (definition is not None and definition.returns is not None and
          _base_name(definition.returns) in index.classes):
      aliases[node.targets[0].id] = _base_name(definition.returns)
  return aliases


def _check_path(index: Index, path: str) -> str | None:
  """Why `path` (repository-relative, maybe a glob) is wrong, or None."""
  path = path.rstrip('/.,;:')
  if any(c in path for c in '<>$'):
    return None
  top = path.split('/')[0]
  if top == 'output':  # What the programs write; absent until they run.
    return None
  if os.path.exists(os.path.join(index.repo, top)) and '/' in path:
    if glob.glob(os.path.join(index.repo, path)):
      return None
    return f'path {path} does not exist'
  if path.endswith('.py') and '*' not in path:
    if any(f == path or f.endswith('/' + path) for f in index.files):
      return None
    return f'no project file ends with {path}'
  return None


def _check_dotted(index: Index, dotted: str) -> str | None:
  """Why the project name `dotted` does not resolve, or None."""
  parts = dotted.split('.')
  if parts[-1] in FILE_SUFFIXES or parts[0] in FILE_SUFFIXES:
    return None
  for end in range(len(parts), 0, -1):
    candidates = index.modules_ending(parts[:end])
    if candidates:
      if any(index.resolves_in_module(m, parts[end:]) for m in candidates):
        return None
      where = ', '.join(sorted(m.path for m in candidates))
      return f'{dotted}: {".".join(parts[end:])} is not defined in {where}'
  if parts[0] in PACKAGES:
    return f'{dotted}: no such module'
  if parts[0] in index.classes:
    if any(index.resolves_in_class(node, parts[1:])
           for node in index.classes[parts[0]]):
      return None
    return f'{dotted}: class {parts[0]} has no attribute {parts[1]}'
  return _misplaced_module(index, parts)


def _misplaced_module(index: Index, parts: list[str]) -> str | None:
  """Why `a.m...`, `a` no project name and `m` a project module's, is wrong.

  `plan.participation` names the module `participation` in a package `plan`
  that does not exist (the module is `one_shot_epe.design.participation`).
  A first part that is another library's name (OTHER_LIBRARIES) or a
  class's (capitalized) is not checked, nor is a module of tests/ or tools/.
  """
  if (len(parts) < 2 or parts[0] in OTHER_LIBRARIES or
      not parts[0].islower()):
    return None
  homes = sorted(name for name, module in index.modules.items()
                 if name.split('.')[-1] == parts[1] and
                 not module.path.startswith(('tests', 'tools')))
  if not homes:
    return None
  return (f'{".".join(parts)}: no project package {parts[0]}; '
          f'{parts[1]} is {", ".join(homes)}')


def check_text(text: str, index: Index | None = None) -> list[str]:
  """Every wrong name in the Markdown (or docstring) `text`, as messages."""
  index = index or repo_index()
  problems = []
  for match in re.finditer(r'(?<![\w.-])((?:\.?[\w*-]+/)+[\w.*-]*)', text):
    problem = _check_path(index, match.group(1))
    if problem:
      problems.append(problem)
  for match in _SHORT_PY_PATH.finditer(text):
    if '/' not in match.group(1):
      problem = _check_path(index, match.group(1))
      if problem:
        problems.append(problem)
  for match in _PYTHON_M.finditer(text):
    target = match.group(1).rstrip('.')
    if target.split('.')[-1].isupper():  # A placeholder: examples.NAME.
      continue
    if target.split('.')[0] in SOURCE_ROOTS and target not in index.modules:
      problems.append(f'python -m {target}: no such module')
  other_flags = {f for flags in OTHER_PROGRAMS_FLAGS.values() for f in flags}
  problems += _command_line_flag_problems(text, index, other_flags)
  problems += default_problems(text, index)
  for match in _FLAG.finditer(text):
    flag = match.group(1)
    known = (flag.isupper() or  # A placeholder: --FLAG=V1,V2.
             flag in index.flags or flag in ABSL_FLAGS or
             flag in other_flags or
             (flag.startswith('no') and flag[2:] in index.bool_flags))
    if not known:
      problems.append(f'--{flag}: no program defines this flag')
  for match in _FLAG_VALUE.finditer(text):
    flag, values = match.group(1), match.group(2)
    allowed = index.flag_values.get(flag)
    if allowed is None or values.isupper():
      continue
    for value in values.split('|'):
      if value not in allowed:
        problems.append(f'--{flag}={value}: not one of --{flag}\'s values '
                        f'({", ".join(sorted(allowed))})')
  for language, code in _code_spans(text):
    if language not in ('', 'sh', 'python', 'text'):
      continue
    code_lines = [line.split(' #')[0] for line in code.split('\n')]
    for match in _MAKE.finditer('\n'.join(code_lines)):
      for target in match.group(1).split():
        if target not in index.make_targets:
          problems.append(f'make {target}: no such Makefile rule')
    aliases = _python_aliases(code, index) if language == 'python' else {}
    for match in _DOTTED.finditer(code):
      dotted = match.group(1)
      head, _, tail = dotted.partition('.')
      if head in aliases:
        dotted = f'{aliases[head]}.{tail}'
      problem = _check_dotted(index, dotted)
      if problem:
        problems.append(problem)
    problems += _call_problems(code, aliases, index)
  return sorted(set(problems))


def _definition(index: Index, dotted: str) -> tuple[ast.AST | None, bool]:
  """The project function or class `dotted` names, and whether a method.

  (None, False) when it is not a project function or class (or cannot be
  told statically).
  """
  parts = dotted.split('.')
  for end in range(len(parts), 0, -1):
    for module in index.modules_ending(parts[:end]):
      rest = parts[end:]
      while rest and f'{module.name}.{rest[0]}' in index.modules:
        module, rest = index.modules[f'{module.name}.{rest[0]}'], rest[1:]
      if len(rest) == 1 and rest[0] in module.functions:
        return module.functions[rest[0]], False
      if rest and rest[0] in module.classes:
        return _class_member(module.classes[rest[0]], rest[1:])
    if index.modules_ending(parts[:end]):
      return None, False
  if parts[0] in index.classes and len(index.classes[parts[0]]) == 1:
    return _class_member(index.classes[parts[0]][0], parts[1:])
  return None, False


def _class_member(node: ast.ClassDef,
                  rest: list[str]) -> tuple[ast.AST | None, bool]:
  """The class itself (rest empty) or its method `rest[0]`."""
  if not rest:
    return node, False
  if len(rest) == 1:
    for member in node.body:
      if (isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and
          member.name == rest[0]):
        static = any(isinstance(d, ast.Name) and d.id == 'staticmethod'
                     for d in member.decorator_list)
        return member, not static
  return None, False


def _parameters(node: ast.AST, is_method: bool) -> tuple[
    list[str], list[str], bool, bool] | None:
  """(positional names, keyword names, takes *args, takes **kwargs).

  None when the signature cannot be read statically (a class without its own
  `__init__` that is not a dataclass).
  """
  if isinstance(node, ast.ClassDef):
    init, _ = _class_member(node, ['__init__'])
    if init is not None:
      return _parameters(init, True)
    decorators = [ast.unparse(d) for d in node.decorator_list]
    if not any('dataclass' in d for d in decorators) or node.bases:
      return None
    fields = [f.target.id for f in node.body if isinstance(f, ast.AnnAssign)
              and isinstance(f.target, ast.Name) and
              'ClassVar' not in ast.unparse(f.annotation)]
    return fields, fields, False, False
  arguments = node.args
  positional = [a.arg for a in arguments.posonlyargs + arguments.args]
  if is_method and positional:
    positional = positional[1:]
  keywords = [a.arg for a in arguments.args + arguments.kwonlyargs]
  return (positional, keywords, arguments.vararg is not None,
          arguments.kwarg is not None)


def _call_problems(code: str, aliases: dict[str, str],
                   index: Index) -> list[str]:
  """Calls of project functions in `code` with arguments they do not take.

  `code` is a Python code block or a backticked expression; text that does
  not parse as Python is skipped.
  """
  try:
    tree = ast.parse(code.strip())
  except SyntaxError:
    return []
  problems = []
  for call in ast.walk(tree):
    if not isinstance(call, ast.Call):
      continue
    try:
      dotted = ast.unparse(call.func)
    except ValueError:
      continue
    if not re.fullmatch(r'[A-Za-z_]\w*(\.[A-Za-z_]\w*)+', dotted):
      continue
    head, _, tail = dotted.partition('.')
    if head in aliases:
      dotted = f'{aliases[head]}.{tail}'
    node, is_method = _definition(index, dotted)
    signature = _parameters(node, is_method) if node is not None else None
    if signature is None:
      continue
    positional, keywords, varargs, kwargs = signature
    if (not varargs and len(call.args) > len(positional) and
        not any(isinstance(a, ast.Starred) for a in call.args)):
      problems.append(f'{dotted}(): takes {len(positional)} positional '
                      f'arguments, given {len(call.args)}')
    for keyword in call.keywords:
      if keyword.arg and keyword.arg not in keywords and not kwargs:
        problems.append(f'{dotted}(): no parameter {keyword.arg}')
  return problems


# Ways a text states a flag's default: "`--f` (default 3)", "`--f` defaults to
# 3", "`--f=x`, the default", "(default `--f=x`)", "by default (`--f=x`)".
_STATED_DEFAULTS = tuple(re.compile(pattern, re.I) for pattern in (
    r'`--(?P<flag>[a-z]\w*)`\s*\((?:the\s+|by\s+)?default:?\s+'
    r'`?(?P<value>\d[\d,_]*\d|[^`),;\s]+)',
    r'`--(?P<flag>[a-z]\w*)`\s+defaults\s+to\s+'
    r'`?(?P<value>\d[\d,_]*\d|[^`),;\s]+)',
    r'`--(?P<flag>[a-z]\w*)=(?P<value>[^`\s]+)`\s*[,(]\s*(?:the\s+)?'
    r'default\b(?!:?\s*`)',
    r'\(default:?\s+`--(?P<flag>[a-z]\w*)=(?P<value>[^`\s]+)`',
    r'by\s+default\s*\(`--(?P<flag>[a-z]\w*)=(?P<value>[^`\s]+)`\)',
))


def _states(stated: str, default: object) -> bool:
  """Whether the text `stated` is the flag default `default`.

  A default of None is computed at run time (`--delta`: m^-1.1), so any
  description of it is accepted; numbers compare as numbers ("1,000" is
  1000), booleans by name, strings and lists as written.
  """
  if default is None:
    return True
  if isinstance(default, bool):
    return stated.lower() == str(default).lower()
  if isinstance(default, (int, float)):
    try:
      number = float(stated.replace(',', '').replace('_', ''))
    except ValueError:
      return False
    return math.isclose(number, default, rel_tol=1e-9, abs_tol=1e-12)
  if isinstance(default, (list, tuple)):
    return stated.strip('\'"') == ','.join(str(item) for item in default)
  return stated.strip('\'"') == str(default)


def default_problems(text: str, index: Index) -> list[str]:
  """Flags whose default the text states wrongly (against every definition).

  A flag several programs define may have several defaults: the text must
  state one of them. Defaults that cannot be read statically are left out.

  Args:
    text: Markdown or a docstring.
    index: The repository.

  Returns:
    One message per wrongly stated default.
  """
  problems = []
  for pattern in _STATED_DEFAULTS:
    for match in pattern.finditer(text):
      flag, stated = match.group('flag'), match.group('value').rstrip('.')
      defaults = [d for d in index.flag_defaults.get(flag, [])
                  if d is not _UNREADABLE]
      if not defaults or stated.isupper():
        continue
      if not any(_states(stated, default) for default in defaults):
        shown = ', '.join(sorted({repr(d) for d in defaults}))
        problems.append(f'--{flag}: the text says its default is {stated}; '
                        f'it is {shown}')
  return problems


def _command_line_flag_problems(text: str, index: Index,
                                other_flags: set[str]) -> list[str]:
  """Flags of a `python -m program` command line that the program lacks."""
  problems = []
  for _, code in _code_spans(text):
    for line in code.replace('\\\n', ' ').split('\n'):
      match = _PYTHON_M.search(line.split(' #')[0])
      if not match or match.group(1) not in index.modules:
        continue
      program = match.group(1)
      names, bools = index.program_flags(program)
      for flag in _FLAG.findall(line.split(' #')[0][match.end():]):
        if not (flag in names or flag in ABSL_FLAGS or flag in other_flags or
                flag.isupper() or
                (flag.startswith('no') and flag[2:] in bools)):
          problems.append(f'python -m {program} --{flag}: the program does '
                          'not define this flag')
  return problems


def check_modules_lists(text: str, index: Index,
                        package_dir: str = '') -> list[str]:
  """A package docstring's `Modules:` list against the package's modules.

  Args:
    text: The package's docstring.
    index: The repository.
    package_dir: The package's folder, e.g. 'one_shot_epe/jax_engine'; '' for
      a text that is not a package's docstring (nothing to check).

  Returns:
    A message per module listed but absent, and per module not listed.
  """
  if not package_dir:
    return []
  package = package_dir.replace('/', '.')
  match = re.search(r'^Modules:\n((?:  .*\n?|\n)+)', text, re.M)
  if not match:
    return []
  listed = set(re.findall(r'^  (\w+):', match.group(1), re.M))
  actual = {name[len(package) + 1:] for name in index.modules
            if name.startswith(package + '.') and
            '.' not in name[len(package) + 1:]}
  problems = [f'{package}: Modules: lists {name}, which does not exist'
              for name in sorted(listed - actual)]
  problems += [f'{package}: Modules: does not list {name}'
               for name in sorted(actual - listed)]
  return problems


# -- The documents. --------------------------------------------------------


def _documents() -> list[str]:
  """README.md and every Markdown page under docs/ (at any depth)."""
  return ['README.md'] + sorted(
      os.path.relpath(p, REPO)
      for p in glob.glob(os.path.join(REPO, 'docs', '**', '*.md'),
                         recursive=True))


def _docstring_sources() -> list[str]:
  """Files whose docstrings are checked: every module of DOCSTRING_ROOTS."""
  paths = []
  for root in DOCSTRING_ROOTS:
    paths += glob.glob(os.path.join(REPO, root, '**', '*.py'), recursive=True)
  return sorted(os.path.relpath(p, REPO) for p in paths)


def docstring_problems(path: str, index: Index | None = None) -> list[str]:
  """The wrong names in every docstring of the file at `path`."""
  index = index or repo_index()
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    tree = ast.parse(stream.read(), filename=path)
  problems = []
  for node in [tree] + [n for n in ast.walk(tree) if isinstance(
      n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]:
    docstring = ast.get_docstring(node, clean=True) or ''
    problems += check_text(docstring, index)
    if node is tree and path.endswith('__init__.py'):
      problems += check_modules_lists(docstring, index, os.path.dirname(path))
  return sorted(set(problems))


@pytest.mark.parametrize('path', _documents())
def test_document_names_only_what_exists(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    problems = check_text(stream.read())
  assert not problems, f'{path}:\n  ' + '\n  '.join(problems)


_LINK = re.compile(r'\]\((?P<target>[^)\s#]*)(?:#(?P<anchor>[^)\s]+))?\)')


def heading_anchors(text: str) -> set[str]:
  """GitHub's anchors of the Markdown headings of `text`.

  Lowercase, punctuation other than '-' and '_' dropped, spaces to '-'.

  Args:
    text: A Markdown document.

  Returns:
    The anchors its headings get.
  """
  text = _FENCE.sub('', text)
  return {re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')
          for heading in re.findall(r'^#{1,6} (.+)$', text, re.M)}


def link_problems(path: str, text: str) -> list[str]:
  """Relative links of the document at `path` whose file or heading is missing.

  Args:
    path: The document's repository-relative path.
    text: Its Markdown.

  Returns:
    One message per broken link ("http..." links are not checked).
  """
  problems = []
  for match in _LINK.finditer(_FENCE.sub('', text)):
    target, anchor = match.group('target'), match.group('anchor')
    if re.match(r'[a-z]+:', target):
      continue
    if not target:  # A heading of this document.
      if anchor not in heading_anchors(text):
        problems.append(f'link #{anchor}: no such heading')
      continue
    linked = os.path.normpath(os.path.join(os.path.dirname(path), target))
    full = os.path.join(REPO, linked)
    if not os.path.exists(full):
      problems.append(f'link {target}: no such file')
      continue
    if anchor and linked.endswith('.md'):
      with open(full, encoding='utf-8') as stream:
        if anchor not in heading_anchors(stream.read()):
          problems.append(f'link {target}#{anchor}: no such heading')
  return problems


@pytest.mark.parametrize('path', _documents())
def test_document_links_reach_their_files_and_headings(path):
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    problems = link_problems(path, stream.read())
  assert not problems, f'{path}:\n  ' + '\n  '.join(problems)


def test_link_checker_finds_broken_links():
  text = ('[a](docs/api.md) [b](docs/nope.md) [c](docs/reproducing.md#the-demo)'
          ' [d](docs/reproducing.md#the-dem) [e](https://x.org/#y)\n\n'
          '## A heading: with `code`, punctuation\n[f](#a-heading-with-code-'
          'punctuation)')
  assert link_problems('README.md', text) == [
      'link docs/nope.md: no such file',
      'link docs/reproducing.md#the-dem: no such heading']
  assert 'the-jax-engine---backendjax-gpu-tpu-or-cpu' in heading_anchors(
      '## The JAX engine (`--backend=jax`: GPU, TPU, or CPU)\n')


def make_help_entries(makefile: str) -> dict[str, str]:
  """Target -> description, from the Makefile's `## target: ...` lines.

  Args:
    makefile: The Makefile's text.

  Returns:
    The description `make help` prints for each target, in file order.
  """
  return dict(re.findall(r'^## ([a-z][\w-]*): (.+)$', makefile, re.M))


def test_make_help_describes_every_target_and_is_the_default():
  with open(os.path.join(REPO, 'Makefile'), encoding='utf-8') as stream:
    makefile = stream.read()
  described = make_help_entries(makefile)
  phony = set(re.search(r'^\.PHONY:(.*)$', makefile, re.M).group(1).split())
  assert set(described) == repo_index().make_targets == phony
  assert re.search(r'^\.DEFAULT_GOAL := help$', makefile, re.M)
  if shutil.which('make') is None:
    pytest.skip('make is not installed')
  printed = subprocess.run(['make', '--no-print-directory'], cwd=REPO,
                           capture_output=True, text=True, check=True,
                           timeout=60).stdout
  listed = dict(re.findall(r'^  ([a-z][\w-]*) +(.+)$', printed, re.M))
  assert listed == described


@pytest.mark.parametrize('path', _docstring_sources())
def test_docstrings_name_only_what_exists(path):
  problems = docstring_problems(path)
  assert not problems, f'{path}:\n  ' + '\n  '.join(problems)


# -- The checker on texts whose wrong names are known. -----------------------


def test_the_index_sees_the_project():
  index = repo_index()
  by_path = {module.path: module for module in index.modules.values()}
  assert 'epsilon_lower_bound' in by_path['one_shot_epe/stats/lower_bound.py'].names
  assert 'from_spec' in _class_attributes(
      by_path['one_shot_epe/tff_engine/audit.py'].classes['CanaryAudit'])
  # Flags with literal names, from a dataclass's fields, and absl bools.
  assert {'cosines', 'threshold_strategy', 'noise_multiplier',
          'config', 'canary_insertion'} <= index.flags
  assert 'seeded_noise' in index.bool_flags
  assert {'demo', 'test', 'test-jax', 'bazel-build'} <= index.make_targets
  # Defaults: a DEFINE_* call's and a dataclass field's; None when computed.
  assert 1000 in index.flag_defaults['num_canaries']
  assert 'sequential' in index.flag_defaults['executor']
  assert None in index.flag_defaults['delta']
  assert default_problems('`--delta` defaults to m^-1.1 for m clients.',
                          index) == []


_GOOD = '''
See `one_shot_epe/stats/lower_bound.py` and `benchmarks/coverage.py`; the sound
bound is `lower_bound.epsilon_lower_bound`, the report
`one_shot_epe.reporting.privacy_report.PrivacyReport.to_json`, the audit
`CanaryAudit.from_spec` and `tff_engine.runtime.local_cpp_context()`.

```sh
make demo   # the job
.venv/bin/python -m one_shot_epe.reporting.epsilon_cli --cosines=a.csv --dim=10 \\
    --threshold_strategy=split
python -m experiments.train --flagfile=configs/demo.cfg --noseeded_noise
python -m pip install --no-deps -r requirements.txt
```

```python
from one_shot_epe.stats import estimation as est
est.gaussian_sigma(3.0, 1e-6)
tff.learning.algorithms.build_unweighted_fed_avg(x)
```
'''


def test_checker_accepts_correct_names():
  assert check_text(_GOOD) == []


# (text with a planted wrong name, the same text corrected, the message).
_PLANTED = [
    ('Schedules: `plan.participation.periodic_canary_schedule`.',
     'Schedules: `design.canary_schedules.periodic_canary_schedule`, as '
     '`tff.learning.models.from_keras_model` in `tf.data`.',
     'plan.participation.periodic_canary_schedule: no project package plan; '
     'participation is one_shot_epe.design.participation'),
    ('The spec: `design.canary_specc`.', 'The spec: `design.canary_spec`.',
     'design.canary_specc: canary_specc is not defined in '
     'one_shot_epe/design/__init__.py'),
    ('The check: `scripts.check_envv`.', 'The check: `scripts.check_env`.',
     'scripts.check_envv: no such module'),
    ('Read `one_shot_epe/lower_bond.py`.',
     'Read `one_shot_epe/stats/lower_bound.py`.',
     'path one_shot_epe/lower_bond.py does not exist'),
    ('Read tasks/determinizm.py.', 'Read tasks/determinism.py.',
     'no project file ends with tasks/determinizm.py'),
    ('```sh\npython -m experiments.trian --flagfile=x\n```\n',
     '```sh\npython -m experiments.train --flagfile=x\n```\n',
     'python -m experiments.trian: no such module'),
    ('Pass `--noise_multiplyer=0.5`.', 'Pass `--noise_multiplier=0.5`.',
     '--noise_multiplyer: no program defines this flag'),
    ('Pass `--nobackend`.', 'Pass `--noprogress_bar`.',
     '--nobackend: no program defines this flag'),
    ('```sh\npython -m one_shot_epe.reporting.epsilon_cli --cosines=a.csv \\\n'
     '    --noise_multiplier=1\n```\n',
     '```sh\npython -m one_shot_epe.reporting.epsilon_cli --cosines=a.csv \\\n'
     '    --threshold_strategy=split\n```\n',
     'python -m one_shot_epe.reporting.epsilon_cli --noise_multiplier: the program does '
     'not define this flag'),
    ('`tff_engine.audit.CanaryAudit.from_spec(canaries, dp, dleta=1e-6)`',
     '`tff_engine.audit.CanaryAudit.from_spec(canaries, dp, delta=1e-6)`',
     'tff_engine.audit.CanaryAudit.from_spec(): no parameter dleta'),
    ('```python\nfrom one_shot_epe.reporting import privacy_report\n'
     'privacy_report.final_model_report(c, 10, 1e-6, 0.05, u, "split", 20, '
     '0, 1)\n```\n',
     '```python\nfrom one_shot_epe.reporting import privacy_report\n'
     'privacy_report.final_model_report(c, dim=10, delta=1e-6)\n```\n',
     'one_shot_epe.reporting.privacy_report.final_model_report(): takes 8 positional '
     'arguments, given 9'),
    ('```python\nfrom one_shot_epe.reporting import privacy_report\n'
     'report = privacy_report.all_iterates_report(s, u, delta=1e-6)\n'
     'print(report.epsilon_low)\n```\n',
     '```python\nfrom one_shot_epe.reporting import privacy_report\n'
     'report = privacy_report.all_iterates_report(s, u, delta=1e-6)\n'
     'print(report.epsilon_lo)\n```\n',
     'PrivacyReport.epsilon_low: class PrivacyReport has no attribute '
     'epsilon_low'),
    ('Pick `--threshold_strategy=bonferroni|splitt`.',
     'Pick `--threshold_strategy=bonferroni|split`.',
     "--threshold_strategy=splitt: not one of --threshold_strategy's values "
     '(bonferroni, split)'),
    ('Run with `--backend=torch`.', 'Run with `--backend=jax`.',
     "--backend=torch: not one of --backend's values (jax, tff)"),
    ('Run `make demos`.', 'Run `make demo`.',
     'make demos: no such Makefile rule'),
    ('Canaries: `--num_canaries` (default 100).',
     'Canaries: `--num_canaries` (default 1,000).',
     '--num_canaries: the text says its default is 100; it is 10, 1000'),
    ('`--seeded_noise` (default false) draws...',
     '`--seeded_noise` (default true) draws...',
     '--seeded_noise: the text says its default is false; it is True'),
    ('`--clip_learning_rate` defaults to 0.1.',
     '`--clip_learning_rate` defaults to 0.2.',
     '--clip_learning_rate: the text says its default is 0.1; it is 0.2'),
    ('Engines: `--backend=jax`, the default.',
     'Engines: `--backend=tff`, the default.',
     "--backend: the text says its default is jax; it is 'tff'"),
    ('Executors (default `--executor=ray`).',
     'Executors (default `--executor=sequential`).',
     "--executor: the text says its default is ray; it is 'sequential'"),
    ('By default (`--threshold_strategy=split`) half the canaries choose.',
     'By default (`--threshold_strategy=bonferroni`) a family is fixed.',
     "--threshold_strategy: the text says its default is split; it is "
     "'bonferroni'"),
    ('The run: `plan.seeds` of `design.RunPlan`.',
     'The run: `plan.seed` of `run_plan.RunPlan`.',
     'design.RunPlan: RunPlan is not defined in one_shot_epe/design/__init__.py'),
    ('The bound: `lower_bound.epsilon_lower_bond`.',
     'The bound: `lower_bound.epsilon_lower_bound`.',
     'lower_bound.epsilon_lower_bond: epsilon_lower_bond is not defined in '
     'one_shot_epe/stats/lower_bound.py'),
    ('The engine: `engine.backend(--backend)`.',
     'The engine: `engine.Backend` (--backend).',
     'engine.backend: backend is not defined in experiments/engine.py'),
    ('`one_shot_epe.lower_bond.x`', '`one_shot_epe.stats.lower_bound.clopper_pearson_upper`',
     'one_shot_epe.lower_bond.x: lower_bond.x is not defined in '
     'one_shot_epe/__init__.py'),
    ('`CanaryAudit.from_spek(c, d)`', '`CanaryAudit.from_spec(c, d)`',
     'CanaryAudit.from_spek: class CanaryAudit has no attribute from_spek'),
    ('`privacy_report.PrivacyReport.to_jsn`',
     '`privacy_report.PrivacyReport.to_json`',
     'privacy_report.PrivacyReport.to_jsn: PrivacyReport.to_jsn is not '
     'defined in one_shot_epe/reporting/privacy_report.py'),
    ('```python\nfrom one_shot_epe.stats import estimation as est\n'
     'est.gaussian_sigmaa(3.0, 1e-6)\n```\n',
     '```python\nfrom one_shot_epe.stats import estimation as est\n'
     'est.gaussian_sigma(3.0, 1e-6)\n```\n',
     'one_shot_epe.stats.estimation.gaussian_sigmaa: gaussian_sigmaa is not '
     'defined in one_shot_epe/stats/estimation.py'),
]


@pytest.mark.parametrize('wrong, right, expected', _PLANTED)
def test_checker_finds_a_planted_wrong_name(wrong, right, expected):
  assert expected in check_text(wrong)
  assert check_text(right) == []


def test_checker_finds_a_wrong_modules_list():
  text = 'The engine.\n\nModules:\n  models: the models.\n  nonesuch: gone.\n'
  problems = check_modules_lists(text, repo_index(), 'one_shot_epe/jax_engine')
  assert 'one_shot_epe.jax_engine: Modules: lists nonesuch, which does not ' \
      'exist' in problems
  assert 'one_shot_epe.jax_engine: Modules: does not list fedavg' in problems
  assert not any('models' in problem for problem in problems)
