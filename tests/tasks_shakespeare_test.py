"""Tests of the TFF engine's Shakespeare task (tff_engine/tasks/shakespeare.py).

TFF's own word preprocessing is the oracle of the framework-free encoding:
the task's batches of a client must be the JAX engine's client arrays of that
client (`data.shakespeare.client_arrays_of`). d follows the StackOverflow
LSTM's closed form for the corpus's vocabulary. A launcher run trains on tiny
plays with canaries and reports the in-vocabulary accuracy.
"""

import numpy as np
import pytest
import tensorflow_federated as tff

from experiments import train
from experiments import train_config
from one_shot_epe.data import shakespeare as shakespeare_data
from one_shot_epe.design import tasks as task_entries
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import shakespeare
import tiny_shakespeare


@pytest.fixture(name='plays')
def fixture_plays(tmp_path):
  return tiny_shakespeare.write_plays(str(tmp_path))


def _task(plays, **spec) -> tasks.Task:
  settings = dict(client_batch_size=3, client_epochs_per_round=1)
  settings.update(spec)
  return tasks.get_task('shakespeare', data_dir=plays,
                        vocab_size=tiny_shakespeare.VOCAB_SIZE, **settings)


def test_tff_preprocessing_of_a_client_equals_the_client_arrays(plays):
  task = _task(plays)
  corpus = shakespeare_data.load(plays, vocab_size=tiny_shakespeare.VOCAB_SIZE)
  arrays, test = shakespeare_data.client_arrays_of(corpus)
  assert task.client_ids == list(corpus.client_ids)
  assert task.num_train_clients == tiny_shakespeare.NUM_CLIENTS
  # In stored order (no shuffle), TFF's batches are the arrays' rows split
  # into inputs and targets.
  data = task.train_data.preprocess(_ordered_preprocess(corpus))
  for index in (0, 5):
    client = corpus.client_ids[index]
    rows = arrays.features['tokens'][arrays.offsets[index]:
                                     arrays.offsets[index + 1]]
    inputs, targets = zip(*data.create_tf_dataset_for_client(client))
    np.testing.assert_array_equal(np.concatenate(inputs), rows[:, :-1])
    np.testing.assert_array_equal(np.concatenate(targets), rows[:, 1:])
  pooled = np.concatenate([x for x, _ in task.test_dataset()])
  np.testing.assert_array_equal(pooled, test.features['tokens'][:, :-1])


def _ordered_preprocess(corpus):
  from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing  # pylint: disable=g-import-not-at-top
  return word_prediction_preprocessing.create_preprocess_fn(
      tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=3,
                                          shuffle_buffer_size=1),
      list(corpus.vocab), num_parallel_calls=1)


def test_the_model_is_the_stackoverflow_lstm_of_the_vocabulary(plays):
  task = _task(plays)
  tokens = tiny_shakespeare.VOCAB_SIZE + 4  # pad, one OOV bucket, bos, eos.
  expected = (96 * tokens + 4 * 670 * (96 + 670 + 1) + 670 * 96 + 96 +
              96 * tokens + tokens)
  assert task.name == shakespeare.TASK_NAME
  assert task.num_parameters == expected
  assert task_entries.task_entry(task.name).tff.accuracy_metric == (
      'accuracy_without_out_of_vocab_or_end_of_sentence')


def test_synthetic_data_is_refused(plays):
  with pytest.raises(ValueError, match='--use_synthetic_data'):
    tasks.get_task('shakespeare', client_batch_size=2,
                   use_synthetic_data=True)
  del plays


@pytest.mark.slow
def test_a_launcher_run_with_canaries_reports_its_accuracy(plays, tmp_path):
  result = train.run_training(train_config.TrainConfig(
      task='shakespeare', data_dir=plays,
      vocab_size=tiny_shakespeare.VOCAB_SIZE, clients_per_round=4,
      total_rounds=2, client_batch_size=4, num_canaries=4,
      num_unseen_canaries=4, noise_multiplier=0.1, clipping_norm=0.5,
      client_learning_rate=0.5, max_eval_examples=-1,
      root_output_dir=str(tmp_path / 'runs'), run_name='tiny',
      progress_bar=False))
  assert result.rounds_trained == 2
  assert result.delta == tiny_shakespeare.NUM_CLIENTS**-1.1
  assert 0.0 <= result.accuracy <= 1.0
  assert result.report is not None
  assert result.report.dim == _task(plays).num_parameters
