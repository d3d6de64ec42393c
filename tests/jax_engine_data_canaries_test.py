"""Data canaries on the JAX engine, through `experiments.train`.

Independent truths: the canary schedule (each seen data canary joins its
rounds as one more client, the server inserts nothing); the truth eps = 0
at overwhelming noise (no bound may claim anything); memorization without
noise (seen canaries' losses below the unseen ones'); the canaries' bytes,
pinned by the digests the TFF engine's test pins too
(`pinned_canaries.py`), so both engines train and score the
same examples.
"""

import csv
import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

from experiments import run_planning
from experiments import train
from experiments import train_config
from one_shot_epe.data import canary_examples
from one_shot_epe.design import tasks
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import models
from one_shot_epe.runtime import run_directory
import pinned_canaries



def _config(root, **overrides) -> train_config.TrainConfig:
  settings = dict(backend='jax', task='emnist_character',
                  use_synthetic_data=True, synthetic_num_clients=12,
                  synthetic_examples_per_client=8, clients_per_round=3,
                  total_rounds=4, client_batch_size=4, num_canaries=4,
                  num_unseen_canaries=16, canary_repeats=2,
                  canary_kind='data', data_canary_examples=4,
                  clipping_norm=1.0, noise_multiplier=1000.0,
                  rounds_per_checkpoint=2, rounds_per_evaluation=2,
                  max_eval_examples=16, progress_bar=False,
                  root_output_dir=str(root), run_name='run')
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


def test_the_engine_feeds_the_pinned_canary_examples():
  images = canary_examples.canary_arrays(0, [0, 10**9], 'emnist', 4,
                                         num_labels=62)
  first = canary_examples.select_clients(images, 1)
  assert pinned_canaries.digest(*client_arrays.model_inputs(
      'emnist', first.features)) == pinned_canaries.EMNIST_DIGEST
  text = canary_examples.canary_arrays(0, [0], 'stackoverflow', 3,
                                       vocab_size=100)
  assert pinned_canaries.digest(*client_arrays.model_inputs(
      'stackoverflow', text.features)) == pinned_canaries.TEXT_DIGEST


@pytest.fixture(scope='module', name='noised')
def fixture_noised(tmp_path_factory):
  """One run at z = 1000, checkpointed every round: (config, result, dir)."""
  root = tmp_path_factory.mktemp('noised')
  config = _config(root, rounds_per_checkpoint=1)
  return config, train.run_training(config), os.path.join(root, 'run')


def test_data_canaries_under_overwhelming_noise_claim_nothing(noised):
  config, result, run_dir = noised
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as f:
    report = json.load(f)
  assert report['canary_kind'] == 'data'
  assert report['final']['canary_kind'] == 'data'
  assert report['epsilon_lo_final'] == 0.0
  assert report['epsilon_one_run_final'] == 0.0
  assert report['epsilon_lo_tight_any_final'] == 0.0
  # All iterates: each canary's largest excess one-round loss drop, seen against
  # unseen; at this noise it claims nothing either.
  assert report['all_iterates']['canary_kind'] == 'data'
  assert report['epsilon_lo_all'] == 0.0
  assert report['epsilon_lo_tight_any_all'] == 0.0
  assert report['epsilon_lo_gauss_pair_final'] is None
  assert report['setting']['data_canary_examples'] == 4
  assert report['setting']['data_canary_images'] == 'test'
  # The gradient canaries were not inserted: no cosine files, no plot.
  for name in (run_directory.FINAL_COSINES_FILE,
               run_directory.MAX_COSINES_FILE,
               run_directory.DENSITY_PLOT_FILE):
    assert not os.path.exists(os.path.join(run_dir, name)), name
  with open(os.path.join(run_dir,
                         run_directory.DATA_CANARY_LOSSES_FILE)) as f:
    rows = list(csv.DictReader(f))
  assert len([r for r in rows if r['seen']]) == 4 and len(rows) == 16
  np.testing.assert_array_equal(
      [float(r['seen']) for r in rows if r['seen']],
      result.outcome.data_seen_losses)
  np.testing.assert_array_equal([float(r['unseen']) for r in rows],
                                result.outcome.data_unseen_losses)
  # Each seen data canary joined its rounds as a client; the server
  # inserted no gradient canary.
  prepared = train.prepare(config)
  plan = prepared.plan
  with open(os.path.join(run_dir, run_directory.METRICS_FILE)) as f:
    metrics = [row for row in csv.DictReader(f) if row['round'] != '0']
  for t, row in enumerate(metrics):
    assert int(row['canaries_inserted']) == 0
    assert int(row['num_clients']) == (len(plan.sampler.indices(t)) +
                                       len(plan.data_canaries.schedule[t]))
  assert sum(len(ids) for ids in plan.data_canaries.schedule) == 4 * 2
  arrays = run_planning.data_canary_arrays(config, plan)
  assert arrays.num_clients == 20


@pytest.mark.slow
def test_data_canaries_are_memorized_without_noise(tmp_path):
  result = train.run_training(_config(
      tmp_path, noise_multiplier=0.0, clipping_norm=100.0,
      client_epochs_per_round=20, client_learning_rate=0.1))
  seen = result.outcome.data_seen_losses
  unseen = result.outcome.data_unseen_losses
  assert seen.max() < np.median(unseen), (seen, unseen)



def _canary_losses_alone(model, params, arrays):
  """Each canary's mean loss, one model call per canary (not the engine's)."""
  values = []
  for i in range(arrays.num_clients):
    rows = slice(int(arrays.offsets[i]), int(arrays.offsets[i + 1]))
    inputs, labels = client_arrays.model_inputs(arrays.kind, {
        name: np.asarray(array[rows]) for name, array
        in arrays.features.items()})
    values.append(float(model.loss(params, inputs, labels,
                                   np.ones(len(inputs), np.float32))))
  return np.asarray(values)


def _params(store, round_num, model):
  """The model parameters checkpoint `round_num` holds (its first leaves)."""
  structure = jax.tree_util.tree_structure(model.init(jax.random.PRNGKey(0)))
  with np.load(store._path(round_num)) as saved:  # pylint: disable=protected-access
    leaves = [saved[f'leaf_{i}'] for i in range(structure.num_leaves)]
  return jax.tree_util.tree_unflatten(structure, leaves)


def test_every_round_is_scored_and_a_resumed_run_ends_the_same(noised,
                                                                tmp_path):
  """The drops are max_t of L(theta_{t-1}) - L(theta_t) less the round's
  median, each round's model read back from its checkpoint and each canary
  scored alone; a run resumed halfway ends with the same data canary
  files, byte for byte."""
  config, result, run_dir = noised
  store = checkpoints.TrainingStateCheckpoints(
      os.path.join(run_dir, run_directory.CHECKPOINT_DIR))
  arrays = run_planning.data_canary_arrays(config, train.prepare(config).plan)
  model = models.EmnistCnn(num_classes=62)
  losses = np.asarray([
      _canary_losses_alone(model, _params(store, t, model), arrays)
      for t in range(config.total_rounds + 1)])
  drops = losses[:-1] - losses[1:]
  # Beyond each round's median drop over every tracked canary.
  drops = (drops - np.median(drops, axis=1, keepdims=True)).max(axis=0)
  outcome = result.outcome
  np.testing.assert_allclose(
      np.concatenate([outcome.data_seen_drops, outcome.data_unseen_drops]),
      drops, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      np.concatenate([outcome.data_seen_losses, outcome.data_unseen_losses]),
      losses[-1], rtol=1e-5, atol=1e-6)
  # The same run, stopped after round 2 (its later checkpoints and results
  # removed, as an interrupt leaves them) and resumed.
  halfway = os.path.join(tmp_path, 'halfway')
  shutil.copytree(run_dir, halfway)
  for name in os.listdir(os.path.join(halfway, run_directory.CHECKPOINT_DIR)):
    if name > 'round_00000002.npz':
      os.remove(os.path.join(halfway, run_directory.CHECKPOINT_DIR, name))
  for name in (run_directory.REPORT_JSON_FILE,
               run_directory.DATA_CANARY_LOSSES_FILE,
               run_directory.DATA_CANARY_DROPS_FILE):
    os.remove(os.path.join(halfway, name))
  resumed = train.run_training(dataclasses.replace(
      config, root_output_dir=str(tmp_path), run_name='halfway'))
  assert resumed.outcome.resumed_from_round == 2
  for name in (run_directory.DATA_CANARY_LOSSES_FILE,
               run_directory.DATA_CANARY_DROPS_FILE):
    with open(os.path.join(run_dir, name), 'rb') as whole, open(
        os.path.join(halfway, name), 'rb') as part:
      assert whole.read() == part.read(), name


def test_text_canaries_are_sampled_from_the_tasks_training_bigrams(tmp_path):
  # --data_canary_text=model (the default): every word pair of a canary
  # whose first word was followed in training is a training pair;
  # --data_canary_text=uniform: the pinned uniform sentences.
  config = _config(tmp_path, task='stackoverflow_word', vocab_size=100,
                   synthetic_examples_per_client=20)
  prepared = train.prepare(config)
  canaries = prepared.canaries
  entry = tasks.task_entry('stackoverflow_word')
  train_tokens = tasks.entry_point(entry.jax.data)(
      run_planning.data_request(config)).train.features['tokens']
  pairs = {(int(a), int(b)) for row in train_tokens
           for a, b in zip(row[1:-1], row[2:]) if 1 <= b <= 100}
  followed = {a for a, _ in pairs}
  words = canaries.features['tokens'][:, 1:]
  sampled = {(int(a), int(b)) for row in words
             for a, b in zip(row[:-1], row[1:]) if a in followed}
  assert sampled and sampled <= pairs
  uniform = run_planning.data_canary_arrays(
      dataclasses.replace(config, data_canary_text='uniform'), prepared.plan)
  first = canary_examples.select_clients(uniform, 1)
  expected = canary_examples.canary_arrays(0, [0], 'stackoverflow', 4,
                                           vocab_size=100)
  np.testing.assert_array_equal(first.features['tokens'],
                                expected.features['tokens'])
