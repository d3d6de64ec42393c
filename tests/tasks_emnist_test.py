"""Tests of one_shot_epe.tff_engine.tasks.emnist on a tiny SQLite file in TFF's format.

The file is written here with raw sqlite3 and hand-built tf.train.Example protos
(TFF's schema and EMNIST feature layout), independently of the package's writer,
then read through the real path: get_task -> checks -> TFF's emnist.load_data.
"""

import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import emnist
from one_shot_epe.tff_engine.tasks import synthetic

# The two tables of TFF's SQLite datasets (as created by TFF's
# save_to_sql_client_data, and read by SqlClientData).
_SCHEMA = (
    'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
    'serialized_example_proto BLOB NOT NULL);',
    'CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
    'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL);',
)
# client -> number of examples in each split; a client is in train and test, as
# in TFF's EMNIST. The digits-only split must not be read.
_SIZES = {
    'all_train': {'f0001_07': 5, 'f0002_31': 3},
    'all_test': {'f0001_07': 2, 'f0002_31': 1},
    'digits_only_train': {'f0003_00': 4},
}


def _serialize(pixels: np.ndarray, label: int) -> bytes:
  return tf.train.Example(features=tf.train.Features(feature={
      'pixels': tf.train.Feature(
          float_list=tf.train.FloatList(value=pixels.reshape(-1))),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
  })).SerializeToString()


@pytest.fixture(name='emnist_dir')
def fixture_emnist_dir(tmp_path):
  """Writes emnist_all.sqlite; returns (dir, split -> client -> [(label, px)])."""
  rng = np.random.default_rng(7)
  written = {}
  with sqlite3.connect(str(tmp_path / 'emnist_all.sqlite')) as connection:
    for statement in _SCHEMA:
      connection.execute(statement)
    for split, clients in _SIZES.items():
      written[split] = {}
      for client_id, size in clients.items():
        examples = [(int(rng.integers(62)), rng.random((28, 28), np.float32))
                    for _ in range(size)]
        written[split][client_id] = examples
        for label, pixels in examples:
          connection.execute('INSERT INTO examples VALUES (?, ?, ?)',
                             (split, client_id, _serialize(pixels, label)))
        connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                           (client_id, split, size))
  return str(tmp_path), written


def test_parameter_count_is_the_papers_1206590():
  conv1 = (3 * 3 * 1 + 1) * 32
  conv2 = (3 * 3 * 32 + 1) * 64
  dense1 = (12 * 12 * 64 + 1) * 128
  dense2 = (128 + 1) * 62
  assert conv1 + conv2 + dense1 + dense2 == 1_206_590
  task = tasks.get_task('emnist_character', client_batch_size=4,
                        use_synthetic_data=True, synthetic_num_clients=2,
                        synthetic_examples_per_client=2)
  assert task.num_parameters == conv1 + conv2 + dense1 + dense2


def test_sqlite_round_trip_returns_exactly_the_written_examples(emnist_dir,
                                                               network_calls):
  data_dir, written = emnist_dir
  train, test = emnist.load_client_data(data_dir)
  for split, client_data in (('all_train', train), ('all_test', test)):
    assert client_data.client_ids == sorted(written[split])
    for client_id, examples in written[split].items():
      got = list(client_data.create_tf_dataset_for_client(client_id))
      assert [int(e['label']) for e in got] == [label for label, _ in examples]
      for element, (_, pixels) in zip(got, examples):
        np.testing.assert_array_equal(element['pixels'].numpy(), pixels)
  assert not network_calls


def test_synthetic_element_spec_equals_real_loaders(emnist_dir):
  train, test = emnist.load_client_data(emnist_dir[0])
  synthetic_train, synthetic_test = synthetic.emnist(3, 4)
  assert synthetic_train.element_type_structure == train.element_type_structure
  assert synthetic_test.element_type_structure == test.element_type_structure


def test_preprocessing_respects_epochs_batch_size_and_cap(emnist_dir):
  data_dir, written = emnist_dir
  task = tasks.get_task('emnist_character', client_batch_size=2,
                        client_epochs_per_round=2, max_examples_per_client=7,
                        data_dir=data_dir)
  assert task.num_train_clients == 2
  assert task.data_source == data_dir
  # 5 examples x 2 epochs capped at 7 -> batches 2,2,2,1; 3 x 2 = 6 -> 2,2,2.
  for client_id, batch_sizes in (('f0001_07', [2, 2, 2, 1]),
                                 ('f0002_31', [2, 2, 2])):
    batches = list(task.preprocessed_train_data.create_tf_dataset_for_client(
        client_id))
    assert [int(y.shape[0]) for _, y in batches] == batch_sizes
    assert all(x.shape[1:] == (28, 28, 1) for x, _ in batches)
    labels = np.concatenate([y.numpy() for _, y in batches])
    written_labels = [label for label, _ in written['all_train'][client_id]]
    assert set(labels) <= set(written_labels)
  test_labels = np.concatenate([y.numpy() for _, y in task.test_dataset()])
  assert sorted(test_labels) == sorted(
      label for examples in written['all_test'].values() for label, _ in examples)
  assert sum(int(y.shape[0]) for _, y in task.test_dataset(max_examples=2)) == 2


def test_one_fedavg_round_on_the_sqlite_data(emnist_dir, network_calls):
  task = tasks.get_task('emnist_character', client_batch_size=2,
                        max_examples_per_client=4, data_dir=emnist_dir[0])
  client_datasets = [task.preprocessed_train_data.create_tf_dataset_for_client(c)
                     for c in task.train_data.client_ids]
  with runtime.local_cpp_context():
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
    state = process.initialize()
    before = process.get_model_weights(state).trainable
    output = process.next(state, client_datasets)
    after = process.get_model_weights(output.state).trainable
  train_metrics = output.metrics['client_work']['train']
  assert train_metrics['num_examples'] == 4 + 3  # min(5, 4) + min(3, 4)
  assert train_metrics['num_batches'] == 2 + 2
  assert sum(np.size(w) for w in before) == 1_206_590
  assert all(np.all(np.isfinite(w)) for w in after)
  assert any(not np.array_equal(b, a) for b, a in zip(before, after))
  assert not network_calls


def test_missing_or_malformed_data_dir_is_a_clear_error(tmp_path, network_calls):
  with pytest.raises(FileNotFoundError, match='--data_dir.*emnist_all.sqlite'):
    tasks.get_task('emnist_character', client_batch_size=2,
                   data_dir=str(tmp_path))
  (tmp_path / 'emnist_all.sqlite').write_text('not a database')
  with pytest.raises(ValueError, match='--data_dir.*emnist_all.sqlite'):
    tasks.get_task('emnist_character', client_batch_size=2,
                   data_dir=str(tmp_path))
  assert not network_calls
