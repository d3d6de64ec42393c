"""EMNIST-62 character recognition with TFF's 1,206,590-parameter dropout CNN.

The paper's EMNIST experiments (Section 5.2.1, Table 4) train "a CNN with 1.2M
parameters" on the 62-class federated EMNIST data (3,400 writers). That model is
TFF's baseline `cnn_dropout` with 62 outputs
(`emnist_models.create_conv_dropout_model(only_digits=False)`): conv 3x3x32, conv
3x3x64, 2x2 max-pool, dropout 0.25, dense 128, dropout 0.5, dense 62 softmax, with
320 + 18,496 + 1,179,776 + 7,998 = 1,206,590 trainable parameters. Model,
preprocessing (shuffle, repeat, take, batch, add a channel axis), loss and
metric are TFF's (as `create_character_recognition_task_from_datasets`
assembles them, evaluation in batches of 64), with two changes that make training reproducible
(`determinism`): dropout masks keyed by the layer's input instead of an
unseeded op, and the training preprocessing run with its batches in order. The
data loading is ours, to guarantee it never downloads. With `num_classes=10`
(TFF's digits-only head) the same model serves other 28 x 28 grey-level tasks
(`fashion_mnist`). `build_task` is the task's entry point (`design.tasks`):
the real data or `synthetic.emnist`'s stand-in.
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models
from tensorflow_federated.python.simulation.baselines.emnist import emnist_preprocessing

from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import determinism
from one_shot_epe.tff_engine.tasks import synthetic
from one_shot_epe.tff_engine.tasks import tff_cache

__all__ = ['EVAL_CLIENT_SPEC', 'NUM_CLASSES', 'TASK_NAME', 'build_task',
           'client_arrays_of', 'create_task', 'exported_arrays',
           'load_client_data', 'write_synthetic_files']

TASK_NAME = 'emnist_character'
NUM_CLASSES = 62
# TFF's default evaluation preprocessing for its EMNIST baselines.
EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=64, shuffle_buffer_size=1)


def load_client_data(
    data_dir: str | None
) -> tuple[tff.simulation.datasets.ClientData, tff.simulation.datasets.ClientData]:
  """Loads EMNIST-62 (train, test) from `<data_dir>/emnist_all.sqlite`, offline.

  Args:
    data_dir: The directory holding emnist_all.sqlite (never downloads).

  Returns:
    (train, test) federated data, TFF's writers as clients.

  Raises:
    FileNotFoundError / ValueError: see `tff_cache.verify_sqlite`.
  """
  cache_dir = tff_cache.verify_sqlite(data_dir, tff_cache.EMNIST)
  with tff_cache.no_download():
    return tff.simulation.datasets.emnist.load_data(
        only_digits=False, cache_dir=cache_dir)


def create_task(train_client_spec: tff.simulation.baselines.ClientSpec,
                train_data: tff.simulation.datasets.ClientData,
                test_data: tff.simulation.datasets.ClientData,
                data_source: str,
                *,
                task_name: str = TASK_NAME,
                num_classes: int = NUM_CLASSES) -> base.Task:
  """Wraps TFF's EMNIST `cnn_dropout` baseline task around the given data.

  Args:
    train_client_spec: client epochs, batch size and example cap for training.
    train_data: federated data with elements {'label': int32 [], 'pixels':
      float32 [28, 28]} (TFF's EMNIST structure, real or synthetic).
    test_data: the same structure; evaluated centrally in batches of 64.
    data_source: recorded in the returned task ('synthetic' or a directory).
    task_name: the task's registry name (other 28 x 28 grey-level image tasks,
      e.g. `fashion_mnist`, reuse this model and preprocessing).
    num_classes: 62 (EMNIST-62) or 10 (TFF's digits-only head, 1,199,882
      parameters).

  Returns:
    The task: model, preprocessing, data and d.

  Raises:
    ValueError: `num_classes` is neither 10 nor 62.
  """
  if num_classes not in (10, NUM_CLASSES):
    raise ValueError(f'num_classes must be 10 or {NUM_CLASSES}; got '
                     f'{num_classes!r}.')
  datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data,
      test_data=test_data,
      validation_data=None,
      train_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
          train_client_spec, num_parallel_calls=1),
      # A seed makes TFF's parallel batch map keep the batches in order (its
      # default lets them finish out of order); EVAL_CLIENT_SPEC does not
      # shuffle, so the seed changes nothing else.
      eval_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
          EVAL_CLIENT_SPEC, debug_seed=0))

  def model_fn() -> tff.learning.models.VariableModel:
    # TFF's model_fn for `cnn_dropout`, with reproducible dropout masks.
    keras_model = determinism.input_keyed_dropout(
        emnist_models.create_conv_dropout_model(
            only_digits=num_classes == 10))
    return tff.learning.models.from_keras_model(
        keras_model=keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=datasets.element_type_structure,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  baseline = tff.simulation.baselines.BaselineTask(datasets, model_fn)
  return base.Task.from_baseline(task_name, baseline, data_source)


def build_task(train_client_spec: tff.simulation.baselines.ClientSpec,
               request: task_data.DataRequest) -> base.Task:
  """The task on the data `request` asks for (its entry point).

  Args:
    train_client_spec: client epochs, batch size and example cap.
    request: the data flags: `<data_dir>/emnist_all.sqlite`, or the
      synthetic stand-in's sizes and seed (`synthetic.emnist`).

  Returns:
    The task (`create_task`).

  Raises:
    FileNotFoundError / ValueError: see `load_client_data`.
  """
  if request.synthetic:
    train, test = synthetic.emnist(
        request.num_clients, request.examples_per_client, request.seed,
        sizes=request.client_sizes)
    return create_task(train_client_spec, train, test, 'synthetic')
  train, test = load_client_data(request.data_dir)
  return create_task(train_client_spec, train, test,
                     os.path.abspath(request.data_dir))


def write_synthetic_files(data_dir: str, num_clients: int,
                          examples_per_client: int, seed: int,
                          vocab_size: int) -> str:
  """`synthetic.emnist`'s stand-in as `data_dir`/emnist_all.sqlite.

  Args:
    data_dir: An existing directory.
    num_clients: The number of writers.
    examples_per_client: Training images per writer.
    seed: Seed of every draw.
    vocab_size: Ignored (the task has no vocabulary).

  Returns:
    The file's path (splits all_train and all_test, as TFF's).
  """
  del vocab_size  # The images have no vocabulary.
  train, test = synthetic.emnist(num_clients, examples_per_client, seed)
  return synthetic.write_splits(data_dir, tff_cache.EMNIST.file_name,
                                {'all_train': train, 'all_test': test})


def client_arrays_of(client_data: tff.simulation.datasets.ClientData
                     ) -> client_arrays.ClientArrays:
  """Every client's EMNIST examples as one `ClientArrays` split.

  Args:
    client_data: TFF's EMNIST federated data (one split).

  Returns:
    The split: pixels and labels, each client's examples in TFF's order.
  """
  pixels, labels, offsets = [], [], [0]
  for client_id in client_data.client_ids:
    for element in client_data.create_tf_dataset_for_client(client_id):
      pixels.append(np.reshape(
          element['pixels'].numpy(),
          (client_arrays.IMAGE_SIZE, client_arrays.IMAGE_SIZE)))
      labels.append(int(element['label'].numpy()))
    offsets.append(len(labels))
  return client_arrays.ClientArrays(
      kind='emnist', client_ids=np.asarray(client_data.client_ids, str),
      offsets=np.asarray(offsets, np.int64),
      features={
          'pixels': np.asarray(pixels, np.float32).reshape(
              -1, client_arrays.IMAGE_SIZE, client_arrays.IMAGE_SIZE),
          'label': np.asarray(labels, np.int32)})


def exported_arrays(data_dir: str, vocab_size: int
                    ) -> dict[str, client_arrays.ClientArrays]:
  """EMNIST-62's splits as client arrays (`export_arrays.export`).

  Args:
    data_dir: Holds emnist_all.sqlite.
    vocab_size: Ignored (the task has no vocabulary).

  Returns:
    'train' and 'test' (`all_train`, `all_test`): `client_arrays_of` each.

  Raises:
    FileNotFoundError / ValueError: see `load_client_data`.
  """
  del vocab_size  # The images have no vocabulary.
  train, test = load_client_data(data_dir)
  return {'train': client_arrays_of(train), 'test': client_arrays_of(test)}
