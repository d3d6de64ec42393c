"""Tests of one_shot_epe.tff_engine.tasks.stackoverflow on a tiny SQLite file in TFF's format.

The file is written here with raw sqlite3 and hand-built tf.train.Example protos
(TFF's schema and StackOverflow feature layout), independently of the package's
writer, then read through the real path: get_task -> checks -> TFF's
stackoverflow.load_data, with the vocabulary from stackoverflow.word_count.
"""

import sqlite3

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import stackoverflow
from one_shot_epe.tff_engine.tasks import synthetic

_SCHEMA = (
    'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
    'serialized_example_proto BLOB NOT NULL);',
    'CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
    'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL);',
)
_VOCAB_SIZE = 10_000
# The vocabulary: the, to, a, then filler words; 'cat' and 'zebra' are not in it.
_WORDS = ['the', 'to', 'a'] + [f'v{i}' for i in range(_VOCAB_SIZE - 3)] + ['cat']
_LONG = ' '.join(['the'] * 25)
_SENTENCES = {
    'train': {'00001': ['the cat a', 'a to the', _LONG, 'to'],
              '00002': ['zebra to', 'the the']},
    'heldout': {'00010': ['a a']},
    'test': {'00001': ['to the cat'], '00002': ['the']},
}


def _serialize(tokens: str, score: int) -> bytes:
  def text(value: str) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))

  return tf.train.Example(features=tf.train.Features(feature={
      'creation_date': text('2012-03-04 05:06:07.8 UTC'),
      'score': tf.train.Feature(int64_list=tf.train.Int64List(value=[score])),
      'tags': text('python|sqlite'),
      'title': text('a title'),
      'tokens': text(tokens),
      'type': text('answer'),
  })).SerializeToString()


@pytest.fixture(name='so_dir')
def fixture_so_dir(tmp_path):
  """Writes stackoverflow.sqlite and stackoverflow.word_count; returns the dir."""
  with sqlite3.connect(str(tmp_path / 'stackoverflow.sqlite')) as connection:
    for statement in _SCHEMA:
      connection.execute(statement)
    for split, clients in _SENTENCES.items():
      for client_id, sentences in clients.items():
        for score, sentence in enumerate(sentences):
          connection.execute('INSERT INTO examples VALUES (?, ?, ?)',
                             (split, client_id, _serialize(sentence, score)))
        connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)',
                           (client_id, split, len(sentences)))
  counts = range(len(_WORDS) + 100, 100, -1)
  (tmp_path / 'stackoverflow.word_count').write_text(
      ''.join(f'{w} {c}\n' for w, c in zip(_WORDS, counts)))
  return str(tmp_path)


def test_parameter_count_is_the_reddi_lstm_closed_form():
  v = _VOCAB_SIZE + 4  # + padding, one out-of-vocab bucket, bos, eos
  embedding, lstm_units, in_size = 96, 670, 96
  lstm = 4 * lstm_units * (in_size + lstm_units + 1)
  projection = lstm_units * embedding + embedding
  output = embedding * v + v
  expected = v * embedding + lstm + projection + output
  assert expected == 4_050_748
  task = tasks.get_task('stackoverflow_word', client_batch_size=4,
                        use_synthetic_data=True, synthetic_num_clients=2,
                        synthetic_examples_per_client=2)
  assert task.num_parameters == expected


def test_sqlite_round_trip_returns_exactly_the_written_examples(so_dir,
                                                               network_calls):
  train, heldout, test, vocab = stackoverflow.load_client_data(so_dir)
  assert vocab == _WORDS[:_VOCAB_SIZE]
  for split, client_data in (('train', train), ('heldout', heldout),
                             ('test', test)):
    assert client_data.client_ids == sorted(_SENTENCES[split])
    for client_id, sentences in _SENTENCES[split].items():
      got = list(client_data.create_tf_dataset_for_client(client_id))
      assert [e['tokens'].numpy().decode() for e in got] == sentences
      assert [int(e['score']) for e in got] == list(range(len(sentences)))
      assert {e['tags'].numpy() for e in got} == {b'python|sqlite'}
  assert not network_calls


def test_synthetic_element_spec_equals_real_loaders(so_dir):
  real = stackoverflow.load_client_data(so_dir)[:3]
  fake = synthetic.stackoverflow(3, 4, vocab_size=50)[:3]
  for real_split, fake_split in zip(real, fake):
    assert fake_split.element_type_structure == real_split.element_type_structure
    assert (list(fake_split.element_type_structure) ==
            ['creation_date', 'score', 'tags', 'title', 'tokens', 'type'])


def test_preprocessing_maps_sentences_to_tffs_token_ids(so_dir):
  task = tasks.get_task('stackoverflow_word', client_batch_size=8,
                        data_dir=so_dir)
  bos, oov, eos = _VOCAB_SIZE + 2, _VOCAB_SIZE + 1, _VOCAB_SIZE + 3
  the, to, a = 1, 2, 3  # vocabulary index + 1; 0 is padding

  def padded(ids):
    return ids + [0] * (21 - len(ids))

  expected = {
      'the cat a': padded([bos, the, oov, a, eos]),
      'a to the': padded([bos, a, to, the, eos]),
      _LONG: [bos] + [the] * 20,  # truncated to 20 words, so no eos
      'to': padded([bos, to, eos]),
  }
  (inputs, targets), = list(
      task.preprocessed_train_data.create_tf_dataset_for_client('00001'))
  got = {tuple(np.concatenate([x[:1], y])) for x, y in zip(inputs.numpy(),
                                                         targets.numpy())}
  assert got == {tuple(ids) for ids in expected.values()}
  np.testing.assert_array_equal(inputs.numpy()[:, 1:], targets.numpy()[:, :-1])


def test_preprocessing_respects_batch_size_and_cap(so_dir):
  task = tasks.get_task('stackoverflow_word', client_batch_size=3,
                        client_epochs_per_round=3, max_examples_per_client=10,
                        data_dir=so_dir)
  # Client 00001: 4 sentences x 3 epochs capped at 10 -> batches 3,3,3,1.
  batches = list(task.preprocessed_train_data.create_tf_dataset_for_client('00001'))
  assert [int(x.shape[0]) for x, _ in batches] == [3, 3, 3, 1]
  assert all(x.shape[1] == 20 and y.shape[1] == 20 for x, y in batches)
  assert task.num_train_clients == 2


@pytest.mark.slow
def test_one_fedavg_round_and_forward_pass(so_dir, network_calls):
  task = tasks.get_task('stackoverflow_word', client_batch_size=2,
                        data_dir=so_dir)
  client_datasets = [task.preprocessed_train_data.create_tf_dataset_for_client(c)
                     for c in task.train_data.client_ids]
  with runtime.local_cpp_context():
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.5))
    state = process.initialize()
    before = process.get_model_weights(state).trainable
    output = process.next(state, client_datasets)
    trained = process.get_model_weights(output.state)
  after = trained.trainable
  train_metrics = output.metrics['client_work']['train']
  assert train_metrics['num_examples'] == 4 + 2
  # Non-padding target tokens: 'the cat a' 4, 'a to the' 4, long 20, 'to' 2,
  # 'zebra to' 3, 'the the' 3.
  assert train_metrics['num_tokens'] == 4 + 4 + 20 + 2 + 3 + 3
  assert sum(np.size(w) for w in before) == 4_050_748
  assert any(not np.array_equal(b, a) for b, a in zip(before, after))
  # Forward pass of the trained weights: logits over the extended vocabulary.
  model = task.model_fn()
  trained.assign_weights_to(model)
  (inputs, _), = list(task.test_dataset())
  logits = model.predict_on_batch(inputs, training=False).numpy()
  assert logits.shape == (2, 20, _VOCAB_SIZE + 4)
  assert np.all(np.isfinite(logits))
  assert not network_calls


def test_missing_vocabulary_or_database_is_a_clear_error(so_dir, tmp_path,
                                                         network_calls):
  with pytest.raises(FileNotFoundError, match='--data_dir.*not an existing'):
    tasks.get_task('stackoverflow_word', client_batch_size=2,
                   data_dir=str(tmp_path / 'absent'))
  with pytest.raises(ValueError, match='fewer than the vocabulary size 20000'):
    tasks.get_task('stackoverflow_word', client_batch_size=2, data_dir=so_dir,
                   vocab_size=20_000)
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match='does not contain stackoverflow.sqlite'):
    tasks.get_task('stackoverflow_word', client_batch_size=2, data_dir=str(empty))
  assert not network_calls
