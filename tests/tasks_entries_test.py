"""Tests of one_shot_epe.design.tasks: one entry per task, and nothing else.

Each entry is held against both engines: its d against the parameters of
the TFF task's model (in .venv) and of the JAX model (in .venv-jax too), its
accuracy metrics against what each engine reports (TFF's evaluation metric
names; the JAX model's `correct` against a brute-force count of the metric
the entry names). A static check reads every module of the package and the
programs with `ast`: outside `design/tasks.py` and the modules the entries
name (the tasks' own), no list, tuple, set, dict, comparison, subscript or
`match` holds a task's name.
"""

import ast
import importlib.util
import os

import numpy as np
import pytest

from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.design import run_options
from one_shot_epe.design import tasks

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# The package and the programs: every module a task name could be listed in.
SCANNED = ('one_shot_epe', 'experiments')
_HAS_TFF = importlib.util.find_spec('tensorflow_federated') is not None
_HAS_JAX = importlib.util.find_spec('jax') is not None
# A vocabulary small enough for quick models, large enough for the plays.
VOCAB_SIZE = 30
# The TFF engine's word LSTM widths (embedding, LSTM units); the JAX engine's
# models are also checked at narrower ones.
TFF_WIDTHS = (96, 670)
NARROW_WIDTHS = (5, 7)
ENTRIES = list(tasks.TASKS.values())
NAMES = [entry.name for entry in ENTRIES]


def _request(entry: tasks.TaskEntry) -> task_data.DataRequest:
  """A small stand-in of the task, or its default data (data_dir unset)."""
  if not (entry.synthetic or entry.data_dir_optional):
    pytest.skip(f'{entry.name} has neither a stand-in nor default data')
  return task_data.DataRequest(
      task=entry.name, data_dir=None, synthetic=entry.synthetic,
      num_clients=3, examples_per_client=6, client_sizes='equal', seed=0,
      vocab_size=VOCAB_SIZE)


def _jax_model(entry: tasks.TaskEntry, widths: tuple[int, int]):
  args = dict(entry.jax.model_args)
  if entry.vocabulary:
    args.update(vocab_size=VOCAB_SIZE, embedding_size=widths[0],
                lstm_size=widths[1])
  return tasks.entry_point(entry.jax.model,
                           'one_shot_epe.jax_engine')(**args)


def test_the_names_are_the_entries_and_the_launchers_choices():
  from experiments import train_config  # pylint: disable=g-import-not-at-top
  assert run_options.TASK_NAMES == tuple(tasks.TASKS) == tasks.task_names()
  assert train_config.ENUMS['task'] == run_options.TASK_NAMES
  assert all(tasks.task_entry(name).name == name for name in NAMES)
  with pytest.raises(ValueError, match='task must be one of'):
    tasks.task_entry('cifar')


def test_entry_point_resolves_a_path_and_refuses_a_malformed_one():
  assert tasks.entry_point('os.path:join') is os.path.join
  assert tasks.entry_point('path:join', 'os') is os.path.join
  for bad in ('os.path', ':join', 'os.path:', 'os.path:join.x'):
    with pytest.raises(ValueError, match="'module:name'"):
      tasks.entry_point(bad)


@pytest.mark.skipif(not _HAS_TFF, reason='TensorFlow Federated is absent')
@pytest.mark.parametrize('name', NAMES)
def test_d_and_accuracy_metric_are_the_tff_models(name):
  from one_shot_epe.tff_engine import tasks as tff_tasks  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  entry = tasks.task_entry(name)
  request = _request(entry)
  task = tff_tasks.get_task(
      name, client_batch_size=2, use_synthetic_data=request.synthetic,
      synthetic_num_clients=request.num_clients,
      synthetic_examples_per_client=request.examples_per_client,
      vocab_size=VOCAB_SIZE)
  assert task.name == name
  assert task.num_parameters == entry.dim(VOCAB_SIZE, *TFF_WIDTHS)
  # What TFF's evaluation reports: the model's metric names.
  with tf.Graph().as_default():
    reported = set(task.model_fn().metric_finalizers())
  assert entry.tff.accuracy_metric in reported


_IN_VOCAB = 'accuracy_without_out_of_vocab_or_end_of_sentence'
# Brute-force accuracies, by TFF's metric names: (predictions, targets, the
# vocabulary size) -> (correct, counted). Ids: 0 pads, 1..V words, V + 1 the
# out-of-vocabulary bucket, then beginning and end of sentence.
REFERENCES = {
    'sparse_categorical_accuracy': lambda p, t, v: (
        np.sum(p == t), t.size),
    'accuracy': lambda p, t, v: (np.sum((p == t) & (t != 0)),
                                 np.sum(t != 0)),
    # TFF's masked tokens: padding, the bucket, end of sentence.
    _IN_VOCAB: lambda p, t, v: (
        np.sum((p == t) & ~np.isin(t, [0, v + 1, v + 3])),
        np.sum(~np.isin(t, [0, v + 1, v + 3]))),
}


@pytest.mark.skipif(not _HAS_JAX, reason='JAX is absent')
@pytest.mark.parametrize('name', NAMES)
def test_d_and_accuracy_metric_are_the_jax_models(name):
  import jax  # pylint: disable=g-import-not-at-top
  entry = tasks.task_entry(name)
  for widths in (TFF_WIDTHS, NARROW_WIDTHS):
    assert _jax_model(entry, widths).num_parameters() == entry.dim(
        VOCAB_SIZE, *widths), widths
  model = _jax_model(entry, NARROW_WIDTHS)
  arrays = tasks.entry_point(entry.jax.data)(_request(entry))
  assert arrays.train.kind == arrays.test.kind == entry.kind
  inputs, labels = client_arrays.model_inputs(entry.kind, {
      feature: np.asarray(values[:8])
      for feature, values in arrays.train.features.items()})
  params = model.init(jax.random.PRNGKey(7))
  predictions = np.asarray(model.logits(params, inputs)).argmax(-1)
  # Targets half predicted, half the data's; with tokens, also padding, the
  # out-of-vocabulary bucket, beginning and end of sentence, which the
  # metrics count differently.
  targets = np.where(np.arange(labels.size).reshape(labels.shape) % 2,
                     predictions, labels).astype(labels.dtype)
  if entry.vocabulary:
    specials = [0, VOCAB_SIZE + 1, VOCAB_SIZE + 2, VOCAB_SIZE + 3]
    targets.reshape(-1)[1:2 * len(specials):2] = specials
    counts = [REFERENCES[metric](predictions, targets, VOCAB_SIZE)
              for metric in ('accuracy', _IN_VOCAB)]
    assert counts[0] != counts[1]  # The check tells the word metrics apart.
  correct, counted = model.correct(params, inputs, targets,
                                   np.ones(len(inputs), np.float32))
  expected = REFERENCES[entry.jax.accuracy_metric](predictions, targets,
                                                   VOCAB_SIZE)
  assert (float(correct), float(counted)) == tuple(map(float, expected))


def _own_modules() -> set[str]:
  """design/tasks.py and the modules the entries name, as paths."""
  modules = {'one_shot_epe.design.tasks'}
  for entry in ENTRIES:
    for engine in (entry.tff, entry.jax):
      if engine is not None:
        modules |= {path.partition(':')[0] for path in (engine.model,
                                                        engine.data) if path}
  return {os.path.join(REPO, *module.split('.')) + '.py'
          for module in modules}


def task_name_tables(source: str, names: set[str]) -> list[int]:
  """Lines of `source` where a task name sits in a table or a comparison.

  Args:
    source: A module's text.
    names: The task names.

  Returns:
    The line of every task name (a string constant, or a task module's
    `TASK_NAME`) that is an element of a list, tuple or set, a key or value
    of a dict, an operand of a comparison, a subscript's index or a `match`
    case's value.
  """
  lines = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
      operands = node.elts
    elif isinstance(node, ast.Dict):
      operands = [key for key in node.keys if key is not None] + node.values
    elif isinstance(node, ast.Compare):
      operands = [node.left, *node.comparators]
    elif isinstance(node, ast.Subscript):
      operands = [node.slice]
    elif isinstance(node, ast.MatchValue):
      operands = [node.value]
    else:
      continue
    lines += [operand.lineno for operand in operands if _names_a_task(
        operand, names)]
  return sorted(lines)


def _names_a_task(node: ast.AST, names: set[str]) -> bool:
  """A task's name, or a task module's `TASK_NAME`."""
  if isinstance(node, ast.Constant):
    return node.value in names
  return (isinstance(node, ast.Attribute) and node.attr == 'TASK_NAME' or
          isinstance(node, ast.Name) and node.id == 'TASK_NAME')


def _scanned_files(root: str) -> list[str]:
  paths = []
  for folder in SCANNED:
    for directory, subdirectories, files in os.walk(os.path.join(root,
                                                                 folder)):
      subdirectories[:] = [d for d in subdirectories if d != '__pycache__']
      paths += [os.path.join(directory, f) for f in files if f.endswith('.py')]
  return sorted(paths)


def test_no_module_but_the_tasks_own_lists_the_tasks():
  own = _own_modules()
  found = {}
  for path in _scanned_files(REPO):
    if path in own:
      continue
    with open(path, encoding='utf-8') as stream:
      lines = task_name_tables(stream.read(), set(NAMES))
    if lines:
      found[os.path.relpath(path, REPO)] = lines
  assert not found, f'task names listed outside their entries: {found}'


@pytest.mark.parametrize('source, lines', [
    ("if config.task == 'shakespeare':\n  pass\n", [1]),
    ("KINDS = {'fashion_mnist': 'emnist'}\n", [1]),
    ("NAMES = ('emnist_character',\n         'stackoverflow_word')\n", [1, 2]),
    ("x = TABLE['fashion_mnist']\n", [1]),
    ("match task:\n  case 'shakespeare':\n    pass\n", [2]),
    ("if task in ['fashion_mnist']:\n  pass\n", [1]),
    ("if name == emnist.TASK_NAME:\n  pass\n", [1]),
    ("allowed = [TASK_NAME]\n", [1]),
    ("TASK_NAME = 'shakespeare'\nf(task='shakespeare')\n", []),
    ("KINDS = ('emnist', 'stackoverflow')\n", []),
])
def test_the_static_check_finds_a_table_and_only_a_table(source, lines):
  assert task_name_tables(source, set(NAMES)) == lines


def test_every_entry_is_complete_and_consistent():
  for entry in ENTRIES:
    assert entry.kind in client_arrays.KINDS, entry.name
    assert entry.tff.data is None and entry.tff.model.endswith(':build_task')
    assert entry.synthetic == bool(entry.synthetic_sizes)
    assert set(entry.synthetic_sizes) <= {'equal', 'realistic'}
    assert entry.dim(VOCAB_SIZE, *TFF_WIDTHS) > 0 and entry.flops_per_example(
        VOCAB_SIZE, *TFF_WIDTHS) > 0
    for other in ((2 * VOCAB_SIZE, *TFF_WIDTHS), (VOCAB_SIZE, 2 * TFF_WIDTHS[0],
                                                  TFF_WIDTHS[1]),
                  (VOCAB_SIZE, TFF_WIDTHS[0], 2 * TFF_WIDTHS[1])):
      assert entry.vocabulary == (entry.dim(VOCAB_SIZE, *TFF_WIDTHS) !=
                                  entry.dim(*other)), (entry.name, other)
      assert entry.vocabulary == (
          entry.flops_per_example(VOCAB_SIZE, *TFF_WIDTHS) !=
          entry.flops_per_example(*other)), (entry.name, other)
