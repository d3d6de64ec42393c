"""Tests of one_shot_epe.tff_engine.tasks.get_task: names, argument checks, client flags."""

import pytest

from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import emnist
from one_shot_epe.tff_engine.tasks import fashion_mnist
from one_shot_epe.tff_engine.tasks import shakespeare
from one_shot_epe.tff_engine.tasks import stackoverflow


def _synthetic(name='emnist_character', **kwargs):
  args = dict(client_batch_size=4, use_synthetic_data=True,
              synthetic_num_clients=3, synthetic_examples_per_client=6)
  args.update(kwargs)
  return tasks.get_task(name, **args)


def test_task_names_are_the_task_modules_own():
  # run_options names the tasks without importing them (for the flags of
  # both engines); each task module holds its own name.
  assert tasks.TASK_NAMES == (emnist.TASK_NAME, stackoverflow.TASK_NAME,
                              fashion_mnist.TASK_NAME, shakespeare.TASK_NAME)
  assert tasks.TASK_NAMES == ('emnist_character', 'stackoverflow_word',
                              'fashion_mnist', 'shakespeare')


def test_unknown_task_name_lists_the_allowed_names():
  with pytest.raises(ValueError, match=r"one of \['emnist_character', "
                     r"'stackoverflow_word', 'fashion_mnist', 'shakespeare'\]; "
                     r"got 'emnist'"):
    _synthetic('emnist')


@pytest.mark.parametrize('argument', ['client_batch_size',
                                      'client_epochs_per_round'])
@pytest.mark.parametrize('bad', [0, -1, 1.5, True, None])
def test_non_positive_client_flags_are_rejected(argument, bad):
  with pytest.raises(ValueError, match=argument):
    _synthetic(**{argument: bad})


@pytest.mark.parametrize('bad', [0, -2, 2.5, False])
def test_bad_max_examples_per_client_is_rejected(bad):
  with pytest.raises(ValueError, match='max_examples_per_client .* -1/None'):
    _synthetic(max_examples_per_client=bad)


@pytest.mark.parametrize('no_cap', [None, -1])
def test_max_examples_none_or_minus_one_means_all_examples(no_cap):
  # 6 examples x 2 epochs, no cap: all 12 examples in batches of 4.
  task = _synthetic(client_epochs_per_round=2, max_examples_per_client=no_cap)
  batches = list(task.preprocessed_train_data.create_tf_dataset_for_client('1'))
  assert [int(y.shape[0]) for _, y in batches] == [4, 4, 4]


def test_cap_applies_after_repeating_for_epochs():
  task = _synthetic(client_epochs_per_round=2, max_examples_per_client=9)
  batches = list(task.preprocessed_train_data.create_tf_dataset_for_client('1'))
  assert [int(y.shape[0]) for _, y in batches] == [4, 4, 1]
  assert task.num_train_clients == 3
  assert task.data_source == 'synthetic'


def test_data_source_must_be_exactly_one(tmp_path):
  with pytest.raises(ValueError, match='either --data_dir .* or --use_synthetic_data'):
    _synthetic(data_dir=str(tmp_path))
  with pytest.raises(ValueError, match='--data_dir must name a directory'):
    tasks.get_task('emnist_character', client_batch_size=4)


def test_bad_vocab_size_is_rejected():
  with pytest.raises(ValueError, match='vocab_size'):
    _synthetic('stackoverflow_word', vocab_size=0)
