"""TFF's EMNIST and StackOverflow SQLite files as the JAX engine's arrays.

Run where TensorFlow Federated is installed; the JAX engine
(`experiments.train --backend=jax --data_dir=OUT`) then reads the result
without TensorFlow (`one_shot_epe.data.client_arrays.ClientArrays.load`, memory-mapped):

  python -m experiments.export_arrays --task=emnist_character \
      --data_dir=$HOME/tff_data --output_dir=OUT

writes OUT/<task>/train and OUT/<task>/test, each client's examples in the
order TFF's `ClientData` yields them, clients in `client_ids` order. The
tasks whose module (their entry's, `design.tasks`) has `exported_arrays`
can be exported (`exportable_tasks`):

* EMNIST-62 (`all_train`, `all_test` of emnist_all.sqlite; Sec. 5.2.1):
  `pixels` float32 [n, 28, 28], `label` int32 [n] (`emnist.client_arrays_of`);
* StackOverflow (`train`, `test` of stackoverflow.sqlite; Sec. 5.1): `tokens`
  int32 [n, 21], each sentence mapped by TFF's own
  `word_prediction_preprocessing.build_to_ids_fn` ([bos] + ids of the first
  20 words, + [eos] if shorter; out-of-vocabulary words in one bucket) over
  the `--vocab_size` most frequent words, padded with 0 as TFF's padded batch
  does (`stackoverflow.client_arrays_of`).
"""

import importlib
import os
from types import ModuleType

from one_shot_epe.design import tasks

__all__ = ['exportable_tasks', 'export']


def _task_module(name: str) -> ModuleType:
  """The TFF task module of the task `name` (its entry's `build_task`'s)."""
  return importlib.import_module(
      f'.{tasks.task_entry(name).tff.model_module}', __package__)


def exportable_tasks() -> tuple[str, ...]:
  """The tasks whose TFF files can be exported (`exported_arrays`).

  A task can be exported when its TFF module has `exported_arrays`.

  Returns:
    Their names, in the entries' order.
  """
  return tuple(name for name in tasks.task_names()
               if hasattr(_task_module(name), 'exported_arrays'))


def export(task: str, data_dir: str, output_dir: str,
           vocab_size: int = 10_000) -> list[str]:
  """Converts `task`'s train and test splits; returns the directories written.

  Args:
    task: One of `exportable_tasks`.
    data_dir: Holds TFF's SQLite files (and StackOverflow's word counts).
    output_dir: Where the splits' directories go.
    vocab_size: The vocabulary's size (the tasks with a vocabulary).

  Returns:
    The directories written, one per split.

  Raises:
    ValueError: `task` is not one of `exportable_tasks`.
    FileNotFoundError / ValueError: `data_dir` lacks the SQLite files (see
      `tff_cache.verify_sqlite`).
  """
  allowed = exportable_tasks()
  if task not in allowed:
    raise ValueError(f'task must be one of {list(allowed)}; got {task!r}.')
  written = []
  for split, arrays in _task_module(task).exported_arrays(
      data_dir, vocab_size).items():
    directory = os.path.join(output_dir, task, split)
    arrays.save(directory)
    written.append(directory)
  return written
