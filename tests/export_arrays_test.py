"""Tests of one_shot_epe.tff_engine.tasks.export_arrays and experiments.export_arrays.

Independent truths: the examples written into TFF-layout SQLite files (read
back through TFF's own `ClientData`), StackOverflow rows worked out by hand
from TFF's documented token ids (pad 0, words rank + 1, one out-of-vocabulary
bucket, then [bos], [eos]), and the JAX engine's launcher reading the result.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from one_shot_epe.data import client_arrays
from one_shot_epe.tff_engine.tasks import export_arrays
from one_shot_epe.tff_engine.tasks import tff_cache

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _emnist_clients(seed: int, sizes: dict[str, int]):
  rng = np.random.default_rng(seed)
  return {client: [{'pixels': rng.uniform(size=784).astype(np.float32),
                    'label': np.int64(rng.integers(62))}
                   for _ in range(size)]
          for client, size in sizes.items()}


def _so_example(tokens: str) -> dict[str, object]:
  return {'creation_date': b'2010', 'score': np.int64(1), 'tags': b't',
          'title': b'q', 'tokens': tokens.encode(), 'type': b'question'}


def test_emnist_arrays_hold_every_example_in_tff_order(tmp_path):
  splits = {'all_train': _emnist_clients(0, {'w1': 3, 'w2': 0, 'w3': 5}),
            'all_test': _emnist_clients(1, {'w1': 2})}
  tff_cache.write_sqlite(str(tmp_path / 'emnist_all.sqlite'), splits)
  written = export_arrays.export('emnist_character', str(tmp_path),
                                 str(tmp_path / 'out'))
  assert written == [str(tmp_path / 'out' / 'emnist_character' / s)
                     for s in ('train', 'test')]
  train = client_arrays.ClientArrays.load(written[0])
  clients = sorted(splits['all_train'])
  assert list(train.client_ids) == clients
  np.testing.assert_array_equal(train.client_sizes(), [3, 0, 5])
  examples = [e for c in clients for e in splits['all_train'][c]]
  np.testing.assert_array_equal(
      train.features['pixels'],
      np.stack([e['pixels'].reshape(28, 28) for e in examples]))
  np.testing.assert_array_equal(train.features['label'],
                                [e['label'] for e in examples])
  assert client_arrays.ClientArrays.load(written[1]).client_sizes().tolist() == [2]


def test_stackoverflow_rows_are_tffs_token_ids(tmp_path):
  long_sentence = ' '.join(['the'] * 25)
  tff_cache.write_sqlite(str(tmp_path / 'stackoverflow.sqlite'), {
      'train': {'u1': [_so_example('the a zebra'), _so_example(long_sentence)],
                'u2': [_so_example('to')]},
      'heldout': {'u3': [_so_example('a')]},
      'test': {'u4': [_so_example('zebra to')]}})
  tff_cache.write_word_counts(str(tmp_path / 'stackoverflow.word_count'),
                              {'the': 9, 'to': 5, 'a': 4, 'of': 1})
  written = export_arrays.export('stackoverflow_word', str(tmp_path),
                                 str(tmp_path / 'out'), vocab_size=3)
  train = client_arrays.ClientArrays.load(written[0])
  # vocab ['the', 'to', 'a']: ids 1..3, oov 4, bos 5, eos 6, pad 0.
  expected = np.zeros((3, 21), np.int32)
  expected[0, :5] = [5, 1, 3, 4, 6]
  expected[1] = [5] + [1] * 20  # Truncated to 20 words: no [eos].
  expected[2, :3] = [5, 2, 6]
  np.testing.assert_array_equal(train.features['tokens'], expected)
  np.testing.assert_array_equal(train.client_sizes(), [2, 1])
  test = client_arrays.ClientArrays.load(written[1])
  np.testing.assert_array_equal(test.features['tokens'][0, :4], [5, 4, 2, 6])


@pytest.mark.slow
def test_exported_emnist_trains_on_the_jax_engine(tmp_path):
  tff_cache.write_sqlite(str(tmp_path / 'emnist_all.sqlite'), {
      'all_train': _emnist_clients(0, {f'w{i}': 8 for i in range(4)}),
      'all_test': _emnist_clients(1, {'w9': 8})})
  export = subprocess.run(
      [sys.executable, '-m', 'experiments.export_arrays',
       '--task=emnist_character', f'--data_dir={tmp_path}',
       f'--output_dir={tmp_path / "arrays"}'],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert export.returncode == 0, export.stderr[-3000:]
  run = subprocess.run(
      [sys.executable, '-m', 'experiments.train', '--backend=jax',
       '--task=emnist_character', f'--data_dir={tmp_path / "arrays"}',
       '--clients_per_round=2', '--total_rounds=2', '--num_canaries=2',
       '--num_unseen_canaries=2', '--noise_multiplier=0.1',
       f'--root_output_dir={tmp_path / "runs"}', '--run_name=r',
       '--noprogress_bar'],
      cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  assert 'Rounds: 2' in run.stdout
  assert (tmp_path / 'runs' / 'r' / 'report.json').exists()


def test_unknown_task_is_named(tmp_path):
  with pytest.raises(ValueError, match='task must be one of'):
    export_arrays.export('fashion_mnist', str(tmp_path), str(tmp_path))
