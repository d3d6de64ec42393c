"""Importing any module of the project changes nothing in the process.

Truth: the process itself, read before and after each import in a fresh
interpreter: its network namespace (/proc/self/ns/net), the handler of every
signal, os.environ, the logging configuration (root logger's handlers and
level, absl's verbosity and handler), the absl flags defined and the working
directory (programs define their flags when they run, so that a test or
another program may import them). Every module file under one_shot_epe/,
experiments/, examples/ and benchmarks/ is imported; one interpreter imports a group of modules one after another and
compares after each, so a change is attributed to the first module whose
import made it. The groups run at once: TensorFlow/TFF modules (the audit
first, as a user's script would), JAX modules, and the rest (framework-free
core first). A module whose third-party requirement is not installed here is
skipped (named in the output). What the frameworks themselves change at
their import (TensorFlow and JAX set environment variables, TFF adds a root
logging handler), measured in another interpreter, is not the project's and
is allowed (Flower's too: flwr sets GRPC_VERBOSITY).
"""

import json
import os
import subprocess
import sys
import textwrap

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGES = ('one_shot_epe', 'experiments', 'examples', 'benchmarks')
_PROJECT_ROOTS = ('one_shot_epe', 'experiments', 'benchmarks', 'examples',
                  'tests')

# Runs in a fresh interpreter: argv[1:] are module names; prints one JSON
# object per module: {"module", "changed": [what], "skipped": reason}.
_RECORDER = textwrap.dedent("""
    import importlib, json, logging, os, signal, sys
    from absl import flags
    from absl import logging as absl_logging

    def name(handler):
      if callable(handler):
        return (getattr(handler, '__module__', '') + '.' +
                getattr(handler, '__qualname__', type(handler).__name__))
      return repr(handler)

    def state():
      absl_handler = absl_logging.get_absl_handler()
      facts = {
          'network namespace': os.readlink('/proc/self/ns/net'),
          'working directory': os.getcwd(),
          'root logger level': logging.root.level,
          'root logger disabled': (logging.root.disabled,
                                   logging.root.manager.disable),
          'absl verbosity': absl_logging.get_verbosity(),
          'absl handler': (absl_handler.level,
                           repr(absl_handler.python_handler.stream)),
          'absl flags': sorted(flags.FLAGS),
      }
      for number in signal.valid_signals():
        facts[f'signal {int(number)}'] = name(signal.getsignal(number))
      for key, value in os.environ.items():
        facts[f'environment {key}'] = value
      for i, handler in enumerate(logging.root.handlers):
        facts[f'root handler {i}'] = (type(handler).__name__ + ' ' +
                                      repr(getattr(handler, 'stream', None)))
      return facts

    before = state()
    for module in sys.argv[1:]:
      try:
        importlib.import_module(module)
      except ImportError as error:
        missing = (error.name or '').split('.')[0]
        if missing in %r or not missing:
          raise
        print(json.dumps({'module': module, 'skipped': f'needs {missing}'}),
              flush=True)
        continue
      after = state()
      changed = sorted(f'{k}: {before.get(k)!r} -> {after.get(k)!r}'
                       for k in set(before) | set(after)
                       if before.get(k) != after.get(k))
      print(json.dumps({'module': module, 'changed': changed}), flush=True)
      before = after
""" % (_PROJECT_ROOTS,))
# What the frameworks the project uses change when they are imported (e.g.
# TensorFlow sets TF2_BEHAVIOR, TFF adds a root handler): not the project's.
_FRAMEWORKS = ('tensorflow', 'tensorflow_federated', 'jax', 'jax.numpy',
               'flwr.serverapp', 'flwr.simulation')


def _modules(package: str) -> list[str]:
  """Every module file of `package` (a folder of the repository), walked."""
  found = []
  for folder, dirs, files in os.walk(os.path.join(_REPO, package)):
    dirs[:] = sorted(d for d in dirs if d != '__pycache__')
    parts = os.path.relpath(folder, _REPO).split(os.sep)
    for name in sorted(files):
      if name.endswith('.py'):
        stem = name[:-len('.py')]
        found.append('.'.join(parts if stem == '__init__' else
                              [*parts, stem]))
  return found


def _groups() -> dict[str, list[str]]:
  """The modules in three groups, each imported by one interpreter."""
  every = [m for package in _PACKAGES for m in _modules(package)]
  tff = sorted((m for m in every if m.startswith('one_shot_epe.tff_engine')),
               key=lambda m: m != 'one_shot_epe.tff_engine.audit')
  jax = [m for m in every if m.startswith('one_shot_epe.jax_engine')]
  rest = [m for m in every if m not in tff and m not in jax]
  # The core first (the baselines, which import TensorFlow beside it, with
  # it: their framework's changes are then measured as the frameworks'
  # own), then the programs.
  rest.sort(key=lambda m: (not m.startswith(('one_shot_epe',
                                             'experiments.baselines')), m))
  return {'tff_engine': tff, 'jax_engine': jax, 'rest': rest}


def test_every_module_file_is_in_a_group():
  groups = _groups()
  every = [m for package in _PACKAGES for m in _modules(package)]
  assert sorted(sum(groups.values(), [])) == sorted(every)
  assert 'one_shot_epe.tff_engine.isolation' in groups['tff_engine']
  assert groups['tff_engine'][0] == 'one_shot_epe.tff_engine.audit'
  assert 'experiments.train' in groups['rest']


def test_importing_any_module_changes_nothing():
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONSTARTUP'}
  groups = {'frameworks': list(_FRAMEWORKS), **_groups()}
  running = {
      name: subprocess.Popen([sys.executable, '-c', _RECORDER, *modules],
                             cwd=_REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
      for name, modules in groups.items()
  }
  changes, seen, skipped, allowed = {}, [], [], set()
  for name, process in running.items():
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, f'{name}: {stderr[-3000:]}'
    for line in stdout.splitlines():
      if not line.startswith('{'):
        continue
      record = json.loads(line)
      if name == 'frameworks':
        allowed.update(record.get('changed', ()))
        continue
      seen.append(record['module'])
      if 'skipped' in record:
        skipped.append(f"{record['module']} ({record['skipped']})")
      elif record['changed']:
        changes[record['module']] = record['changed']
  changes = {module: sorted(set(changed) - allowed)
             for module, changed in changes.items()}
  assert {m: c for m, c in changes.items() if c} == {}
  assert sorted(seen) == sorted(sum(_groups().values(), []))
  if skipped:
    print('skipped:', ', '.join(skipped))
  assert len(skipped) < len(seen) // 2  # Not vacuous.
