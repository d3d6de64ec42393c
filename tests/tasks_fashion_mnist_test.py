"""Tests of one_shot_epe.tff_engine.tasks.fashion_mnist: partition, client data, task, demo.

Truths: brute-force checks of the label-shard partition (McMahan et al. 2017)
on labels whose class sizes are known; the IDX files of Debian's
dataset-fashion-mnist read here byte by byte, independently of the package's
loader (tests needing them skip when the package is not installed); the CNN's
parameter count from its layer shapes; one real launcher round whose example
counts follow from the partition sizes.
"""

import csv
import gzip
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from experiments import grid
from experiments import train
from experiments import train_config
from experiments import train_flags
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import tasks
from one_shot_epe.data import fashion_mnist as fashion_mnist_files
from one_shot_epe.tff_engine.tasks import fashion_mnist
import tiny_run

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DEMO_CONFIG = os.path.join(_REPO, 'configs', 'demo_fashion_mnist.cfg')
_DATA_DIR = fashion_mnist.DEFAULT_DATA_DIR
_needs_data = pytest.mark.skipif(
    not fashion_mnist_files.available(_DATA_DIR),
    reason=f'Fashion-MNIST is not installed in {_DATA_DIR} (apt-get install '
    'dataset-fashion-mnist)')


def _read_idx_gz(name: str) -> np.ndarray:
  """An IDX file of the installed data set: header 4 + 4 * ndim bytes."""
  with gzip.open(os.path.join(_DATA_DIR, name + '.gz'), 'rb') as stream:
    data = stream.read()
  ndim = data[3]
  shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim)]
  return np.frombuffer(data[4 + 4 * ndim:], np.uint8).reshape(shape)


def _elements(dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
  elements = list(dataset.as_numpy_iterator())
  return (np.array([e['label'] for e in elements]),
          np.stack([e['pixels'] for e in elements]))


# Label-shard partition.


def test_partition_uses_every_example_once_with_equal_sizes():
  labels = np.repeat(np.arange(10), 12)  # 120 examples, 12 per class
  clients = fashion_mnist.partition_by_label_shards(labels, 10, 2, seed=3)
  assert len(clients) == 10
  assert [len(c) for c in clients] == [12] * 10
  np.testing.assert_array_equal(np.sort(np.concatenate(clients)),
                                np.arange(120))


def test_partition_shards_are_single_classes_when_they_divide_the_classes():
  # 6 classes of 10, 6 clients x 2 shards of 5: every shard holds one class,
  # so a client's label counts are multiples of 5 over at most 2 classes, and
  # each class is spread over exactly 2 shards.
  labels = np.random.default_rng(0).permutation(np.repeat(np.arange(6), 10))
  clients = fashion_mnist.partition_by_label_shards(labels, 6, 2, seed=1)
  shards_per_class = np.zeros(6, int)
  for indices in clients:
    counts = np.bincount(labels[indices], minlength=6)
    assert np.all(counts % 5 == 0) and np.count_nonzero(counts) <= 2
    shards_per_class += counts // 5
  np.testing.assert_array_equal(shards_per_class, [2] * 6)


def test_partition_is_a_pure_function_of_its_seed():
  labels = np.random.default_rng(1).integers(0, 10, 500)
  first = fashion_mnist.partition_by_label_shards(labels, 20, 3, seed=5)
  again = fashion_mnist.partition_by_label_shards(labels, 20, 3, seed=5)
  other = fashion_mnist.partition_by_label_shards(labels, 20, 3, seed=6)
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_partition_of_uneven_sizes_keeps_every_example():
  labels = np.random.default_rng(2).integers(0, 10, 101)
  clients = fashion_mnist.partition_by_label_shards(labels, 7, 2, seed=0)
  sizes = [len(c) for c in clients]
  # 14 shards of 7 or 8 examples: clients hold 14 to 16.
  assert sum(sizes) == 101 and min(sizes) >= 14 and max(sizes) <= 16
  np.testing.assert_array_equal(np.sort(np.concatenate(clients)),
                                np.arange(101))


@pytest.mark.parametrize('labels, num_clients, shards, error, match', [
    (np.zeros(10, np.float32), 2, 2, TypeError, 'labels must be integers'),
    (np.zeros((5, 2), int), 2, 2, ValueError, 'labels must be 1-D'),
    (np.zeros(3, int), 2, 2, ValueError, 'at least num_clients'),
    (np.zeros(10, int), 0, 2, ValueError, 'num_clients'),
    (np.zeros(10, int), 2, 0, ValueError, 'shards_per_client'),
])
def test_partition_rejects_bad_arguments(labels, num_clients, shards, error,
                                         match):
  with pytest.raises(error, match=match):
    fashion_mnist.partition_by_label_shards(labels, num_clients, shards, 0)


# Client data on synthetic images (no files needed).


def test_client_datasets_hold_their_partition_as_emnist_elements():
  data = fashion_mnist.synthetic_data(num_clients=6, examples_per_client=9,
                                      seed=4)
  train_data, test_data = fashion_mnist.client_data(data, 6)
  assert train_data.client_ids == [str(i) for i in range(6)]
  assert test_data.client_ids == ['0']
  partition = fashion_mnist.partition_by_label_shards(
      data.train_labels, 6, fashion_mnist.SHARDS_PER_CLIENT,
      fashion_mnist.PARTITION_SEED)
  for client_id, indices in zip(train_data.client_ids, partition):
    labels, pixels = _elements(
        train_data.create_tf_dataset_for_client(client_id))
    np.testing.assert_array_equal(labels, data.train_labels[indices])
    np.testing.assert_allclose(pixels, data.train_images[indices] / 255.0,
                               rtol=1e-6)
    # The traceable function (whole-split iteration) yields the same.
    traced_labels, traced_pixels = _elements(
        train_data.serializable_dataset_fn(tf.constant(client_id)))
    np.testing.assert_array_equal(traced_labels, labels)
    np.testing.assert_array_equal(traced_pixels, pixels)
  assert train_data.element_type_structure == {
      'label': tf.TensorSpec([], tf.int32),
      'pixels': tf.TensorSpec([28, 28], tf.float32)}
  test_labels, _ = _elements(test_data.create_tf_dataset_from_all_clients())
  np.testing.assert_array_equal(test_labels, data.test_labels)


def test_jax_engine_clients_are_the_tff_tasks_clients():
  # The JAX engine's split (TF-free) against this task's ClientData, client
  # by client: same ids, images, labels and order; the test split whole.
  images = fashion_mnist.synthetic_data(num_clients=7, examples_per_client=10,
                                        seed=2)
  train_data, test_data = fashion_mnist.client_data(images, 7)
  train_arrays, test_arrays = fashion_mnist_files.client_arrays_of(images, 7)
  assert list(train_arrays.client_ids) == train_data.client_ids
  for i, client_id in enumerate(train_data.client_ids):
    start, end = train_arrays.offsets[i], train_arrays.offsets[i + 1]
    labels, pixels = _elements(
        train_data.create_tf_dataset_for_client(client_id))
    np.testing.assert_array_equal(train_arrays.features['label'][start:end],
                                  labels)
    np.testing.assert_allclose(train_arrays.features['pixels'][start:end],
                               pixels, rtol=1e-6)
  test_labels, _ = _elements(test_data.create_tf_dataset_from_all_clients())
  np.testing.assert_array_equal(test_arrays.features['label'], test_labels)
  assert test_arrays.num_clients == 1


def test_client_data_rejects_unknown_ids_and_empty_clients():
  data = fashion_mnist.synthetic_data(2, 8, seed=0)
  train_data, _ = fashion_mnist.client_data(data, 2)
  with pytest.raises(ValueError, match='client_id must be one of the 2'):
    train_data.client_arrays('7')
  with pytest.raises(ValueError, match='non-empty'):
    fashion_mnist.ArrayClientData(data.train_images, data.train_labels,
                                  [np.arange(2), np.arange(0)])
  shards = fashion_mnist.SHARDS_PER_CLIENT
  with pytest.raises(ValueError,
                     match=f'examples_per_client must be >= {shards}'):
    fashion_mnist.synthetic_data(2, shards - 1, seed=0)


def test_task_element_spec_and_parameter_count():
  task = tasks.get_task('fashion_mnist', client_batch_size=4,
                        use_synthetic_data=True, synthetic_num_clients=3,
                        synthetic_examples_per_client=8)
  conv1 = (3 * 3 * 1 + 1) * 32
  conv2 = (3 * 3 * 32 + 1) * 64
  dense1 = (12 * 12 * 64 + 1) * 128
  dense2 = (128 + 1) * 10
  assert task.num_parameters == conv1 + conv2 + dense1 + dense2 == 1_199_882
  assert task.element_spec == (tf.TensorSpec([None, 28, 28, 1], tf.float32),
                               tf.TensorSpec([None], tf.int32))
  assert (task.name, task.data_source, task.num_train_clients) == (
      'fashion_mnist', 'synthetic', 3)


def test_missing_directory_says_how_to_install(tmp_path):
  with pytest.raises(FileNotFoundError, match='apt-get install '
                     'dataset-fashion-mnist'):
    tasks.get_task('fashion_mnist', client_batch_size=4,
                   data_dir=str(tmp_path / 'absent'))


# The installed data set.


@_needs_data
def test_real_clients_partition_the_installed_files():
  file_images = _read_idx_gz('train-images-idx3-ubyte')
  file_labels = _read_idx_gz('train-labels-idx1-ubyte')
  assert file_images.shape == (60_000, 28, 28)
  task = tasks.get_task('fashion_mnist', client_batch_size=16,
                        data_dir=_DATA_DIR)
  assert task.num_train_clients == fashion_mnist.NUM_CLIENTS
  assert task.data_source == _DATA_DIR
  partition = fashion_mnist.partition_by_label_shards(
      file_labels, fashion_mnist.NUM_CLIENTS, fashion_mnist.SHARDS_PER_CLIENT,
      fashion_mnist.PARTITION_SEED)
  np.testing.assert_array_equal(np.sort(np.concatenate(partition)),
                                np.arange(60_000))
  label_counts = np.zeros(10, int)
  for client_id, indices in zip(task.train_data.client_ids, partition):
    images, labels = task.train_data.client_arrays(client_id)
    assert len(labels) == 60_000 // fashion_mnist.NUM_CLIENTS
    np.testing.assert_array_equal(labels, file_labels[indices])
    np.testing.assert_array_equal(images, file_images[indices])
    # 6,000 images per class, a multiple of the shard size: every shard holds
    # one class, so a client has at most SHARDS_PER_CLIENT classes, each a
    # whole number of shards.
    shard = 60_000 // (fashion_mnist.NUM_CLIENTS *
                       fashion_mnist.SHARDS_PER_CLIENT)
    assert 6_000 % shard == 0
    counts = np.bincount(labels, minlength=10)
    assert np.all(counts % shard == 0)
    assert np.count_nonzero(counts) <= fashion_mnist.SHARDS_PER_CLIENT
    label_counts += np.bincount(labels, minlength=10)
  np.testing.assert_array_equal(label_counts, [6_000] * 10)


@_needs_data
def test_real_test_set_is_all_10000_file_images_in_order():
  file_labels = _read_idx_gz('t10k-labels-idx1-ubyte')
  file_images = _read_idx_gz('t10k-images-idx3-ubyte')
  task = tasks.get_task('fashion_mnist', client_batch_size=16,
                        data_dir=_DATA_DIR)
  batches = list(task.test_dataset().as_numpy_iterator())
  pixels = np.concatenate([x for x, _ in batches])
  labels = np.concatenate([y for _, y in batches])
  assert pixels.shape == (10_000, 28, 28, 1)
  np.testing.assert_array_equal(labels, file_labels)
  np.testing.assert_allclose(pixels[..., 0], file_images / 255.0, rtol=1e-6)


@_needs_data
def test_demo_config_is_valid_real_and_light_on_canaries():
  flag_values = train_flags.flags.FlagValues()
  train_flags.define_flags(flag_values)
  flag_values(['train', f'--flagfile={_DEMO_CONFIG}'])
  config = train_flags.config_from_flags(flag_values).validate()
  assert (config.task, config.data_dir, config.use_synthetic_data) == (
      'fashion_mnist', _DATA_DIR, False)
  assert config.num_unseen_canaries == config.num_canaries >= 50
  assert grid.parse_grid(_DEMO_CONFIG) == {
      'noise_multiplier': ['0', '0.0487', '0.2207']}
  # Canaries are under 6% of a round's expected participants, so that they
  # cost little accuracy.
  per_round = config.num_canaries * config.canary_repeats / config.total_rounds
  assert per_round / (config.clients_per_round + per_round) < 0.06


@_needs_data
def test_one_round_through_the_launcher(tmp_path):
  config = tiny_run.config(
      str(tmp_path), task='fashion_mnist', use_synthetic_data=False,
      data_dir=_DATA_DIR, clients_per_round=2, total_rounds=1,
      canary_repeats=1, num_canaries=2, num_unseen_canaries=2,
      rounds_per_evaluation=1, rounds_per_checkpoint=1, max_eval_examples=32)
  result = train.run_training(config)
  run_dir = result.run_dir
  with open(os.path.join(run_dir, run_directory.METRICS_FILE)) as stream:
    rows = list(csv.DictReader(stream))
  trained = [row for row in rows if row['round'] == '1'][0]
  # Two real clients of 60000 / NUM_CLIENTS images, one local epoch.
  assert float(trained['client_work/train/num_examples']) == (
      2 * 60_000 // fashion_mnist.NUM_CLIENTS)
  assert float(trained['evaluation/num_examples']) == 32
  assert 0.0 <= result.accuracy <= 1.0
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as stream:
    report = json.load(stream)
  assert report['dim'] == result.dim == 1_199_882
  # The default delta is m^-1.1 for m real clients (Section 5.1).
  assert report['delta'] == pytest.approx(fashion_mnist.NUM_CLIENTS**-1.1)


@pytest.mark.slow
@_needs_data
def test_demo_pipeline_prints_the_same_digits_twice_on_one_machine(tmp_path):
  # The demo's flags (its config, noise 0.2207), shortened to 2 rounds of 3
  # clients: two runs into two directories give the same report to the last
  # digit (seeded data split, canaries, noise and TF ops). Across CPU types
  # the digits differ (README, "What make demo printed").
  reports = []
  for name in ('first', 'second'):
    flag_values = train_flags.flags.FlagValues()
    train_flags.define_flags(flag_values)
    flag_values(['train', f'--flagfile={_DEMO_CONFIG}',
                 '--noise_multiplier=0.2207', '--total_rounds=2',
                 '--clients_per_round=3', '--num_canaries=4',
                 '--num_unseen_canaries=4', '--rounds_per_evaluation=2',
                 '--rounds_per_checkpoint=2', '--max_eval_examples=64',
                 f'--root_output_dir={tmp_path / name}'])
    result = train.run_training(
        train_flags.config_from_flags(flag_values).validate())
    with open(os.path.join(result.run_dir,
                           run_directory.REPORT_JSON_FILE)) as stream:
      reports.append((json.load(stream), result.accuracy))
  (first, first_accuracy), (second, second_accuracy) = reports
  assert first == second
  assert first_accuracy == second_accuracy
  assert first['final']['epsilon_est'] > 0  # Not vacuous.
