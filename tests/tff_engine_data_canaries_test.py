"""Data canaries on the TFF engine, through `experiments.train`.

Independent truths: the canary schedule (each seen data canary joins its
rounds as one more client of `tff.learning`'s round, its examples counted
by TFF's own client metrics; the server inserts nothing); the truth eps = 0
at overwhelming noise; memorization without noise; the canaries' bytes in
TFF's preprocessed structure, pinned by the digests the JAX engine's test
pins (`pinned_canaries.py`): both engines train and score the
same examples.
"""

import csv
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from experiments import train
from one_shot_epe.data import canary_examples
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import canary_clients
from one_shot_epe.tff_engine import tasks
import pinned_canaries
import tiny_run


def _task(name: str, vocab_size: int = 100) -> tasks.Task:
  return tasks.get_task(
      name, client_batch_size=4, client_epochs_per_round=1,
      max_examples_per_client=-1, data_dir=None, use_synthetic_data=True,
      synthetic_num_clients=2, synthetic_examples_per_client=2,
      synthetic_client_sizes='equal', seed=0, vocab_size=vocab_size)


def test_the_engine_feeds_the_pinned_canary_examples():
  images = canary_examples.canary_arrays(0, [0, 10**9], 'emnist', 4,
                                         num_labels=62)
  x, y = canary_clients.canary_batch(images, 0,
                                    _task('emnist_character').element_spec)
  assert x.shape == (4, 28, 28, 1)
  assert pinned_canaries.digest(x, y) == pinned_canaries.EMNIST_DIGEST
  text = canary_examples.canary_arrays(0, [0], 'stackoverflow', 3,
                                       vocab_size=100)
  x, y = canary_clients.canary_batch(text, 0,
                                    _task('stackoverflow_word').element_spec)
  assert pinned_canaries.digest(x, y) == pinned_canaries.TEXT_DIGEST
  # A client's dataset: the examples, repeated for the epochs, batched.
  dataset, = canary_clients.client_datasets(
      canary_examples.select_clients(images, 1),
      _task('emnist_character').element_spec, batch_size=3, epochs=2,
      max_examples=None)
  batches = [tuple(np.asarray(part) for part in batch) for batch in dataset]
  assert [len(b[1]) for b in batches] == [3, 3, 2]
  np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]),
                                np.tile(images.features['label'][:4], 2))


def _data_config(root, **overrides):
  settings = dict(canary_kind='data', data_canary_examples=4,
                  clipping_norm=1.0, noise_multiplier=1000.0)
  return tiny_run.config(str(root), **{**settings, **overrides})


def test_data_canaries_under_overwhelming_noise_claim_nothing(tmp_path):
  config = _data_config(tmp_path)
  result = train.run_training(config)
  with open(os.path.join(result.run_dir,
                         run_directory.REPORT_JSON_FILE)) as f:
    report = json.load(f)
  assert report['canary_kind'] == 'data'
  assert report['final']['canary_kind'] == 'data'
  assert report['epsilon_lo_final'] == 0.0
  assert report['epsilon_lo_tight_any_final'] == 0.0
  assert report['all_iterates']['canary_kind'] == 'data'
  assert report['epsilon_lo_all'] == 0.0
  assert report['epsilon_one_run_fdp_final'] is None
  assert result.outcome.data_seen_losses.shape == (tiny_run.NUM_CANARIES,)
  assert result.outcome.data_unseen_losses.shape == (
      tiny_run.NUM_UNSEEN_CANARIES,)
  plan = train.prepare(config).plan
  with open(os.path.join(result.run_dir, run_directory.METRICS_FILE)) as f:
    metrics = [row for row in csv.DictReader(f) if row['round'] != '0']
  for t, row in enumerate(metrics):
    assert float(row['aggregator/canaries_inserted']) == 0
    # TFF's own count of the round's training examples: the real clients'
    # 8 each, and 4 for each data canary that joined.
    assert int(row['client_work/train/num_examples']) == (
        8 * len(plan.sampler.indices(t)) +
        4 * len(plan.data_canaries.schedule[t]))


@pytest.mark.slow
def test_a_run_with_data_canaries_resumed_halfway_ends_the_same(tmp_path):
  # Checkpoints at rounds 0, 2 and 4; the run stopped after round 2 (its
  # later checkpoint and results removed, as an interrupt leaves them)
  # resumes to the same losses and drops, byte for byte.
  config = _data_config(tmp_path, noise_multiplier=0.5,
                        rounds_per_checkpoint=2, run_name='whole')
  whole = train.run_training(config).run_dir
  halfway = os.path.join(tmp_path, 'halfway')
  shutil.copytree(whole, halfway)
  shutil.rmtree(os.path.join(halfway, run_directory.CHECKPOINT_DIR,
                             'program_state_4'))
  for name in (run_directory.REPORT_JSON_FILE,
               run_directory.DATA_CANARY_LOSSES_FILE,
               run_directory.DATA_CANARY_DROPS_FILE):
    os.remove(os.path.join(halfway, name))
  resumed = train.run_training(dataclasses.replace(config, run_name='halfway'))
  assert resumed.outcome.resumed_from_round == 2
  for name in (run_directory.DATA_CANARY_LOSSES_FILE,
               run_directory.DATA_CANARY_DROPS_FILE):
    with open(os.path.join(whole, name), 'rb') as one, open(
        os.path.join(halfway, name), 'rb') as other:
      assert one.read() == other.read(), name


@pytest.mark.slow
def test_data_canaries_are_memorized_without_noise(tmp_path):
  result = train.run_training(_data_config(
      tmp_path, noise_multiplier=0.0, clipping_norm=100.0,
      client_epochs_per_round=20, client_learning_rate=0.1))
  seen = result.outcome.data_seen_losses
  unseen = result.outcome.data_unseen_losses
  assert seen.max() < np.median(unseen), (seen, unseen)


def test_canary_audit_runs_data_canaries_as_clients_of_a_plain_pipeline():
  # A pipeline whose aggregation is untouched: the audit inserts nothing
  # and its data canaries join the caller's rounds as clients.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from one_shot_epe.design import canary_spec  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import audit  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import runtime  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import training  # pylint: disable=g-import-not-at-top

  spec = (tf.TensorSpec([None, 784], tf.float32), tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(784,)),
        tf.keras.layers.Dense(10, kernel_initializer='zeros')])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  canary_audit = audit.CanaryAudit(
      num_canaries=4, num_unseen_canaries=12, rounds=4, clients_per_round=4,
      delta=1e-3, noise_seed=0, canary_kind='data')
  canaries = canary_examples.canary_arrays(
      canary_audit.spec.seed, canary_spec.tracked_ids(4, 12), 'emnist', 4,
      num_labels=10)
  joined = []

  def select(round_num):
    rng = np.random.default_rng(round_num)
    real = [tf.data.Dataset.from_tensor_slices((
        rng.random((8, 784), dtype=np.float32),
        rng.integers(0, 10, 8).astype(np.int32))).batch(8) for _ in range(4)]
    extra = canary_audit.canary_datasets(round_num, canaries, spec,
                                         batch_size=4, epochs=60)
    joined.append(len(extra))
    return real + extra

  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.02),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=canary_audit.gaussian_fixed(noise_multiplier=0.0,
                                                   clip=100.0))
  with runtime.local_cpp_context(), training.event_loop():
    state = tff.simulation.run_training_process(
        process, select, 4,
        program_state_manager=canary_audit.program_state_manager())
    weights = process.get_model_weights(state)
  assert joined == [len(ids) for ids in canary_audit.schedule_spec.schedule]
  assert sum(joined) == 4
  assert all(not ids for ids in canary_audit.spec.schedule)
  with pytest.raises(ValueError, match='score_data_canaries'):
    canary_audit.report()
  losses = canary_audit.score_data_canaries(
      canaries, model_fn, weights, spec)
  # Memorized: every seen canary's loss below every unseen one's.
  assert losses[:4].max() < losses[4:].min(), losses
  report = canary_audit.report()
  assert report.canary_kind == 'data' and report.final.canary_kind == 'data'
  assert report.final.auroc == 1.0
  assert report.all_iterates is None
  with pytest.raises(ValueError, match='canary_kind'):
    audit.CanaryAudit(num_canaries=4, rounds=4, clients_per_round=4,
                      delta=1e-3, canary_kind='pixels')


def _excess(drops):
  """Each round's drops less that round's median over every canary."""
  return drops - np.median(drops, axis=1, keepdims=True)


def test_tracked_data_canaries_drops_are_every_rounds_loss_drops():
  # The plug-in audit scores every observed state's model; against the
  # softmax regression's cross entropy in numpy on each round's weights,
  # and a tracker restored from the audit's state() mid-run.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from one_shot_epe.design import canary_spec  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import audit  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import runtime  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import training  # pylint: disable=g-import-not-at-top

  spec = (tf.TensorSpec([None, 784], tf.float32),
          tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(784,)),
        tf.keras.layers.Dense(10)])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  def make_audit():
    return audit.CanaryAudit(
        num_canaries=4, num_unseen_canaries=6, rounds=4, clients_per_round=4,
        delta=1e-3, noise_seed=0, canary_kind='data')

  canary_audit = make_audit()
  canaries = canary_examples.canary_arrays(
      canary_audit.spec.seed, canary_spec.tracked_ids(4, 6), 'emnist', 4,
      num_labels=10)
  inputs = canaries.features['pixels'].reshape(10, 4, 784).astype(np.float64)
  labels = canaries.features['label'].reshape(10, 4)

  def numpy_losses(weights):
    kernel, bias = (np.asarray(w, np.float64) for w in weights.trainable)
    logits = inputs @ kernel + bias
    logits -= logits.max(axis=-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_p, labels[..., None], -1)[..., 0].mean(1)

  def select(round_num):
    rng = np.random.default_rng(round_num)
    return [tf.data.Dataset.from_tensor_slices((
        rng.random((8, 784), dtype=np.float32),
        rng.integers(0, 10, 8).astype(np.int32))).batch(8) for _ in range(4)
           ] + canary_audit.canary_datasets(round_num, canaries, spec,
                                            batch_size=4, epochs=5)

  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=canary_audit.gaussian_fixed(noise_multiplier=0.1,
                                                   clip=10.0))
  canary_audit.track_data_canaries(canaries, model_fn, spec,
                                   process.get_model_weights)
  expected = []
  with runtime.local_cpp_context(), training.event_loop():
    state = process.initialize()
    canary_audit.observe(state)
    expected.append(numpy_losses(process.get_model_weights(state)))
    for round_num in range(1, 5):
      state = process.next(state, select(round_num)).state
      canary_audit.observe(state)
      expected.append(numpy_losses(process.get_model_weights(state)))
      if round_num == 2:
        saved = {name: np.array(value)
                 for name, value in canary_audit.state().items()}
        kept_state = state
    resumed = make_audit()
    resumed.track_data_canaries(canaries, model_fn, spec,
                                process.get_model_weights)
    resumed.restore(saved, kept_state)
    state = kept_state
    for round_num in range(3, 5):
      state = process.next(state, select(round_num)).state
      resumed.observe(state)
  expected = np.asarray(expected)
  drops = canary_audit.data_canary_drops()
  np.testing.assert_allclose(drops.last, expected[-1], rtol=1e-5)
  np.testing.assert_allclose(
      drops.maxima, _excess(expected[:-1] - expected[1:]).max(axis=0),
      atol=1e-5)
  # Resumed from round 2's state: the same maxima (the noise is seeded by
  # round, so rounds 3 and 4 are those of the run never stopped).
  np.testing.assert_allclose(resumed.data_canary_drops().maxima,
                             drops.maxima, atol=1e-6)
  report = canary_audit.report()
  assert report.all_iterates.canary_kind == 'data'
  assert report.all_iterates.threat_model == 'all'
  assert report.final.num_seen == 4 and report.final.num_unseen == 6
