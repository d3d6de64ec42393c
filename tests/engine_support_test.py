"""One place decides engine x mechanism: the mechanisms' entries.

Each mechanism of `accounting.mechanisms` says which engines run it and why
the others cannot (`engines`); each engine's `supports(plan)` answers from
it (and its own rules: canaries, its environment), and the launcher, the
TFF `CanaryAudit` and docs/mechanisms.md's table keep no list of their own.
Each engine that chooses a noise (TFF, JAX; the Flower engine audits
Flower's own DP wrappers) finds a mechanism's noise in its one registry,
`mechanism_noise.NOISES`, keyed by the mechanism's class.
Checked here: every engine's answer against the entries, each registry's
mechanisms against the entries, the table in the docs against the entries,
and the source of experiments/ and the engines for a list of mechanism
types of their own or a type check of a mechanism.
"""

import ast
import dataclasses
import os

import pytest

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import support as flower_support
from one_shot_epe.jax_engine import mechanism_noise as jax_noise
from one_shot_epe.jax_engine import support as jax_support
from one_shot_epe.tff_engine import mechanism_noise as tff_noise
from one_shot_epe.tff_engine import support as tff_support

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_SUPPORTS = {'tff': tff_support.supports, 'jax': jax_support.supports,
             'flower': flower_support.supports}
_TITLES = {'tff': 'TFF engine', 'jax': 'JAX engine', 'flower': 'Flower engine'}
_SPEC = canary_spec.CanarySpec(seed=0, num_seen=2, num_unseen=2)


@dataclasses.dataclass(frozen=True)
class _Plan:
  mechanism: mechanisms.Mechanism
  spec: canary_spec.CanarySpec | None


def _every_mechanism() -> list[mechanisms.Mechanism]:
  return [mechanisms.from_name(name, **({'num_bands': 2} if name == 'banded'
                                        else {}))
          for name in mechanisms.MECHANISM_NAMES]


def test_the_entries_name_every_engine():
  for kind in mechanisms.MECHANISMS:
    assert set(kind.engines) == set(mechanisms.ENGINES), kind
    assert any(reason is None for reason in kind.engines.values()), kind
    for reason in kind.engines.values():
      assert reason is None or (reason and '\n' not in reason)


@pytest.mark.parametrize('mechanism', _every_mechanism(),
                         ids=mechanisms.MECHANISM_NAMES)
@pytest.mark.parametrize('engine', mechanisms.ENGINES)
def test_each_engine_answers_from_the_entries(engine, mechanism):
  answer = _SUPPORTS[engine](_Plan(mechanism, _SPEC))
  reason = mechanisms.engine_reason(mechanism, engine)
  if reason is not None:
    assert not answer and answer.reason == reason
  elif engine != 'jax' or not isinstance(mechanism,
                                          mechanisms.MatrixFactorization):
    assert answer, answer.reason  # (JAX's MF also needs jax-privacy here.)


@pytest.mark.parametrize('engine, registry',
                         [('tff', tff_noise), ('jax', jax_noise)])
def test_each_engines_noise_registry_holds_exactly_the_mechanisms_it_runs(
    engine, registry):
  runs = {kind for kind in mechanisms.MECHANISMS
          if kind.engines[engine] is None}
  assert set(registry.NOISES) == runs
  for mechanism in _every_mechanism():
    if type(mechanism) in runs:
      assert registry.noise_of(mechanism) is registry.NOISES[type(mechanism)]
    else:
      with pytest.raises(ValueError, match='has no entry for'):
        registry.noise_of(mechanism)


def test_the_registries_name_their_builders_by_import_path():
  # Resolved in the engine's package when a run uses them (the frameworks
  # are not imported here): each path names a function its module defines.
  paths = [(tff_noise, noise.factory) for noise in tff_noise.NOISES.values()]
  paths += [(jax_noise, path) for noise in jax_noise.NOISES.values()
            for path in (noise.rows, noise.strategy) if path is not None]
  assert len(paths) == 6
  for registry, path in paths:
    module, _, name = path.partition(':')
    file = os.path.join(os.path.dirname(registry.__file__), f'{module}.py')
    with open(file, encoding='utf-8') as stream:
      defined = {node.name for node in ast.parse(stream.read()).body
                 if isinstance(node, ast.FunctionDef)}
    assert name in defined, path


def test_runs_without_canaries_are_the_tff_engines_with_gaussian_noise():
  for mechanism in _every_mechanism():
    answers = {engine: bool(supports(_Plan(mechanism, None)))
               for engine, supports in _SUPPORTS.items()}
    assert answers == {'tff': isinstance(mechanism, mechanisms.Gaussian),
                       'jax': False, 'flower': False}


def expected_table() -> str:
  """docs/mechanisms.md's engine x mechanism table, from the entries."""
  lines = ['| mechanism | ' + ' | '.join(
      _TITLES[engine] for engine in mechanisms.ENGINES) + ' |',
           '|---|' + '---|' * len(mechanisms.ENGINES)]
  for kind in mechanisms.MECHANISMS:
    cells = ['runs it' if kind.engines[engine] is None else
             f'no: {kind.engines[engine]}' for engine in mechanisms.ENGINES]
    names = ', '.join(f'`{name}`' for name in kind.names)
    lines.append(f'| {names} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'


def test_the_docs_table_is_the_entries():
  with open(os.path.join(_REPO, 'docs', 'mechanisms.md'),
            encoding='utf-8') as stream:
    text = stream.read()
  assert expected_table() in text, (
      'docs/mechanisms.md must hold the engine x mechanism table exactly as '
      'the entries give it:\n' + expected_table())


def _python_files(*roots: str) -> list[str]:
  paths = []
  for root in roots:
    for directory, _, names in os.walk(os.path.join(_REPO, root)):
      paths += [os.path.join(directory, name) for name in names
                if name.endswith('.py')]
  return paths


def test_no_program_or_engine_keeps_a_list_of_mechanism_types():
  # A tuple or list of two or more `mechanisms.<Type>` outside the entries
  # is a second engine x mechanism table.
  types = {kind.__name__ for kind in mechanisms.MECHANISMS}
  found = []
  for path in _python_files('experiments', 'one_shot_epe'):
    if path.endswith(os.path.join('accounting', 'mechanisms.py')):
      continue
    with open(path, encoding='utf-8') as stream:
      tree = ast.parse(stream.read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.Tuple, ast.List)):
        named = [element.attr for element in node.elts
                 if isinstance(element, ast.Attribute) and
                 element.attr in types]
        if len(named) >= 2:
          found.append(f'{os.path.relpath(path, _REPO)}:{node.lineno}')
  assert not found, found


def _names_a_mechanism(node: ast.AST, types: set[str]) -> bool:
  """Whether `node` names `mechanisms.<anything>` or a mechanism class."""
  return any(
      (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
       and part.value.id == 'mechanisms') or
      (isinstance(part, ast.Name) and part.id in types)
      for part in ast.walk(node))


def type_checks_of_mechanisms(source: str) -> list[int]:
  """Lines of `source` that test a value's type against the mechanisms.

  `isinstance(x, mechanisms.T)` or `issubclass` (T any name of the module,
  its tuple `MECHANISMS` too, or a mechanism class imported by name), and
  `type(x)` compared with one (`is`, `==`, `in`).
  """
  types = {kind.__name__ for kind in mechanisms.MECHANISMS} | {'Mechanism'}
  lines = []
  for node in ast.walk(ast.parse(source)):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id in ('isinstance', 'issubclass') and len(node.args) == 2
        and _names_a_mechanism(node.args[1], types)):
      lines.append(node.lineno)
    elif isinstance(node, ast.Compare):
      sides = [node.left, *node.comparators]
      if any(isinstance(side, ast.Call) and isinstance(side.func, ast.Name)
             and side.func.id == 'type' for side in sides) and any(
                 _names_a_mechanism(side, types) for side in sides):
        lines.append(node.lineno)
  return sorted(lines)


def test_the_type_check_finder_finds_them():
  source = (
      'from one_shot_epe.accounting.mechanisms import TreeAggregation\n'
      'if isinstance(m, mechanisms.DistributedDP): pass\n'
      'if not isinstance(m, (mechanisms.Gaussian, int)): pass\n'
      'if issubclass(kind, mechanisms.MECHANISMS): pass\n'
      'if isinstance(m, TreeAggregation): pass\n'
      'if type(m) is mechanisms.MatrixFactorization: pass\n'
      'if type(m) in (mechanisms.Gaussian,): pass\n'
      'if isinstance(m, int) or type(m) is float: pass\n'
      'noise = NOISES[type(m)]\n')
  assert type_checks_of_mechanisms(source) == [2, 3, 4, 5, 6, 7]


def test_no_program_or_engine_checks_a_mechanisms_type():
  # Each engine finds a mechanism's noise in its registry and asks the
  # mechanism's entry or its registry entry for every other fact.
  found = []
  for path in _python_files('experiments', 'one_shot_epe/tff_engine',
                            'one_shot_epe/jax_engine',
                            'one_shot_epe/flower_engine'):
    with open(path, encoding='utf-8') as stream:
      found += [f'{os.path.relpath(path, _REPO)}:{line}'
                for line in type_checks_of_mechanisms(stream.read())]
  assert not found, found
