"""Tests of experiments.baselines.dpsgd (DP-SGD with one-shot canaries).

Truths: one round, and two with server momentum, recomputed by hand
(per-example gradients by a plain GradientTape loop, canaries from
`one_shot_epe.tff_engine.canaries`, cosines in numpy); the steps between the models the
hook sees, for the model-delta statistic;
the separation of inserted and never-inserted canaries without noise;
brute-force counts of each canary's insertions under 'once'; the
independence of training from the audit hook.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import cluster_data
from experiments.baselines import dpsgd
from experiments.baselines import feedforward
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries


def _cosine(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


def test_one_round_matches_a_hand_computation():
  model = feedforward.FeedForward((6, 6), hidden_units=4, num_classes=3)
  inputs, labels = cluster_data.clusters(0, 16)
  config = dpsgd.TrainingConfig(clip=0.5, noise_multiplier=0.0, batch_size=16,
                                learning_rate=1.0, sampling='shuffle',
                                num_seen=3, num_unseen=2, buffer_rounds=4,
                                seed=1)
  result = dpsgd.train(model, inputs, labels, config)
  assert result.num_rounds == 1
  theta0 = result.initial_params
  total = np.zeros(model.dim)
  for x, y in zip(inputs, labels):
    params = tf.constant(theta0)
    with tf.GradientTape() as tape:
      tape.watch(params)
      loss = tf.nn.softmax_cross_entropy_with_logits(
          y[np.newaxis], model.logits(params, x[np.newaxis]))[0]
    gradient = tape.gradient(loss, params).numpy().astype(np.float64)
    total += gradient * min(1.0, 0.5 / np.linalg.norm(gradient))
  seen = [canaries.canary(result.canary_seed, j, model.dim).numpy()
          for j in range(3)]
  unseen = [canaries.canary(result.canary_seed, canary_spec.UNSEEN_ID_OFFSET + i,
                            model.dim).numpy() for i in range(2)]
  aggregate = (total + 0.5 * np.sum(seen, axis=0)) / 16  # Every canary once.
  np.testing.assert_allclose(result.final_params, theta0 - aggregate,
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal(result.appearances, [1, 1, 1])
  np.testing.assert_allclose(result.seen_maxima,
                             [_cosine(c, aggregate) for c in seen], atol=1e-5)
  np.testing.assert_allclose(result.unseen_maxima,
                             [_cosine(c, aggregate) for c in unseen], atol=1e-5)
  # Final model delta is -aggregate, oriented back by the tff.learning sign.
  np.testing.assert_allclose(result.final_cosines, result.seen_maxima,
                             atol=1e-5)


def _clipped_mean_gradient(model, params, inputs, labels, clip):
  total = np.zeros(model.dim)
  for x, y in zip(inputs, labels):
    theta = tf.constant(np.asarray(params, np.float32))
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss = tf.nn.softmax_cross_entropy_with_logits(
          y[np.newaxis], model.logits(theta, x[np.newaxis]))[0]
    gradient = tape.gradient(loss, theta).numpy().astype(np.float64)
    total += gradient * min(1.0, clip / np.linalg.norm(gradient))
  return total / len(inputs)


def test_server_momentum_two_rounds_by_hand():
  # Every client in both rounds (batch = N, shuffled epochs), no noise, no
  # canaries: theta_1 = theta_0 - eta g(theta_0), theta_2 = theta_1 -
  # eta (beta g(theta_0) + g(theta_1)).
  model = feedforward.FeedForward((6, 6), hidden_units=4, num_classes=3)
  inputs, labels = cluster_data.clusters(0, 16)
  config = dpsgd.TrainingConfig(clip=0.5, noise_multiplier=0.0, batch_size=16,
                                epochs=2, learning_rate=0.7, sampling='shuffle',
                                num_seen=0, num_unseen=0, seed=1,
                                server_momentum=0.9)
  result = dpsgd.train(model, inputs, labels, config)
  theta0 = result.initial_params.astype(np.float64)
  first = _clipped_mean_gradient(model, theta0, inputs, labels, 0.5)
  theta1 = theta0 - 0.7 * first
  second = _clipped_mean_gradient(model, theta1, inputs, labels, 0.5)
  theta2 = theta1 - 0.7 * (0.9 * first + second)
  np.testing.assert_allclose(result.final_params, theta2, rtol=1e-4, atol=1e-5)
  plain = dpsgd.train(model, inputs, labels,
                      dataclasses.replace(config, server_momentum=0.0))
  np.testing.assert_allclose(plain.final_params,
                             theta1 - 0.7 * second, rtol=1e-4, atol=1e-5)


def test_model_delta_statistic_is_the_cosine_with_each_step():
  # The hook sees theta_t before every update: the steps theta_t -
  # theta_{t+1} are the vectors of statistic='model_delta'; with momentum
  # the noised update is recovered as (s_t - beta s_{t-1}) / eta.
  model = feedforward.FeedForward((6, 6), hidden_units=4, num_classes=3)
  inputs, labels = cluster_data.clusters(3, 40)
  base = dict(clip=0.5, noise_multiplier=0.5, batch_size=8, learning_rate=0.3,
              sampling='poisson', num_seen=6, num_unseen=4, buffer_rounds=2,
              seed=4, server_momentum=0.8)
  for statistic in dpsgd.STATISTICS:
    config = dpsgd.TrainingConfig(statistic=statistic, **base)
    thetas = []
    result = dpsgd.train(model, inputs, labels, config,
                         hook=lambda t, params: thetas.append(params),
                         hook_rounds=range(config.num_rounds(40)))
    thetas.append(result.final_params)
    steps = -np.diff(np.asarray(thetas, np.float64), axis=0)
    if statistic == 'update':
      steps = (steps - 0.8 * np.vstack([np.zeros(model.dim), steps[:-1]])) / 0.3
    ids = list(range(6)) + [canary_spec.UNSEEN_ID_OFFSET + i for i in range(4)]
    units = np.stack([canaries.canary(result.canary_seed, i, model.dim).numpy()
                      for i in ids]).astype(np.float64)
    cosines = units @ steps.T / np.linalg.norm(steps, axis=1)
    np.testing.assert_allclose(
        np.concatenate([result.seen_maxima, result.unseen_maxima]),
        cosines.max(axis=1), atol=1e-4)


def test_without_noise_inserted_canaries_stand_out():
  model = feedforward.FeedForward((6, 6), hidden_units=32, num_classes=3)
  inputs, labels = cluster_data.clusters(1, 200)
  config = dpsgd.TrainingConfig(noise_multiplier=0.0, batch_size=4,
                                learning_rate=0.1, sampling='poisson',
                                canary_insertion='poisson', num_seen=100, num_unseen=100,
                                buffer_rounds=16, seed=2)
  result = dpsgd.train(model, inputs, labels, config)
  appeared = result.appearances > 0
  assert 0 < appeared.sum() < 100
  # Inserted: cosine about C / ||rho_t|| >= 0.3; never inserted: max of 50
  # N(0, 1/d) cosines, d = 1283, about 0.07.
  assert result.seen_maxima[appeared].min() > result.unseen_maxima.max()
  # Final-model cosines of inserted canaries: the null is N(0, 1/d) per
  # canary, so their mean is N(0, 1/(d n)) without signal; z > 4 (one-sided
  # level 3e-5).
  final = result.final_cosines[appeared]
  assert final.mean() * np.sqrt(model.dim * final.size) > 4.0


def test_poisson_canaries_join_at_rate_q():
  model = feedforward.FeedForward((6, 6), hidden_units=2, num_classes=3)
  inputs, labels = cluster_data.clusters(2, 64)
  config = dpsgd.TrainingConfig(batch_size=16, canary_insertion='poisson',
                                num_seen=400, num_unseen=2, seed=3)
  result = dpsgd.train(model, inputs, labels, config)
  # 4 rounds at q = 1/4: Binomial(1600, 1/4), mean 400, std 17.3; 5 std.
  assert abs(result.appearances.sum() - 400) < 5 * 17.4


@pytest.mark.parametrize('epochs', [1, 3])
def test_once_inserts_every_seen_canary_exactly_once(epochs):
  # Brute force: count each canary's insertions over every round of the run,
  # for both client samplings (the canaries' rule does not follow them).
  config = dpsgd.TrainingConfig(batch_size=7, epochs=epochs, num_seen=50,
                                canary_insertion='once')
  num_rounds = config.num_rounds(60)  # 9 rounds per epoch.
  schedule = dpsgd.canary_schedule(config, 60, seed=5)
  assert schedule.num_rounds == num_rounds
  counts = np.zeros(50, np.int64)
  for t in range(num_rounds):
    ids = schedule.canaries(t)
    assert ids.size in (50 // num_rounds, 50 // num_rounds + 1)
    assert np.all((ids >= 0) & (ids < 50))  # Never an unseen canary.
    np.add.at(counts, ids, 1)
  np.testing.assert_array_equal(counts, np.ones(50, np.int64))


def test_once_rounds_are_uniform_and_seeded():
  config = dpsgd.TrainingConfig(batch_size=10, num_seen=400,
                                canary_insertion='once')
  rounds = np.zeros(400, np.int64)
  schedule = dpsgd.canary_schedule(config, 40, seed=6)  # 4 rounds.
  for t in range(4):
    rounds[schedule.canaries(t)] = t
  # Balanced counts put exactly 100 canaries in each round; which ones is a
  # uniform draw: canary j's round is uniform, so canaries 0..199 land in
  # rounds 0-1 Hypergeometric(400, 200, 200) times: mean 100, std 5.0; 5 std.
  assert abs(np.sum(rounds[:200] < 2) - 100) < 5 * 5.0
  again = dpsgd.canary_schedule(config, 40, seed=6)
  other = dpsgd.canary_schedule(config, 40, seed=7)
  assert again.as_round_lists() == schedule.as_round_lists()
  assert other.as_round_lists() != schedule.as_round_lists()


def test_training_inserts_the_once_schedule():
  # Without noise, an inserted canary's max cosine is large and a
  # never-inserted one's about N(0, 1/d): with 'once', every seen canary
  # stands out, and training with sampling='poisson' leaves that unchanged.
  model = feedforward.FeedForward((6, 6), hidden_units=32, num_classes=3)
  inputs, labels = cluster_data.clusters(1, 200)
  config = dpsgd.TrainingConfig(noise_multiplier=0.0, batch_size=4,
                                learning_rate=0.1, sampling='poisson',
                                canary_insertion='once', num_seen=100,
                                num_unseen=100, buffer_rounds=16, seed=2)
  result = dpsgd.train(model, inputs, labels, config)
  np.testing.assert_array_equal(result.appearances, np.ones(100, np.int64))
  assert result.seen_maxima.min() > result.unseen_maxima.max()


def test_hook_sees_frozen_models_and_does_not_change_training():
  model = feedforward.FeedForward((6, 6), hidden_units=4, num_classes=3)
  inputs, labels = cluster_data.clusters(3, 64)
  config = dpsgd.TrainingConfig(batch_size=16, num_seen=10, num_unseen=10,
                                seed=4)
  seen = {}

  def hook(round_index, params):
    seen[round_index] = params.copy()
    params += 1.0  # A copy: must not leak into training.
    np.random.default_rng(0).random(10)

  hooked = dpsgd.train(model, inputs, labels, config, hook=hook,
                       hook_rounds=[0, 2])
  plain = dpsgd.train(model, inputs, labels, config)
  np.testing.assert_array_equal(hooked.final_params, plain.final_params)
  np.testing.assert_array_equal(hooked.seen_maxima, plain.seen_maxima)
  assert sorted(seen) == [0, 2]
  np.testing.assert_array_equal(seen[0], plain.initial_params)
  with pytest.raises(ValueError, match='hook_rounds'):
    dpsgd.train(model, inputs, labels, config, hook=hook, hook_rounds=[4])


def test_config_validation():
  with pytest.raises(ValueError, match='sampling'):
    dpsgd.TrainingConfig(sampling='uniform')
  with pytest.raises(ValueError, match='clip'):
    dpsgd.TrainingConfig(clip=0.0)
  with pytest.raises(ValueError, match='noise_multiplier'):
    dpsgd.TrainingConfig(noise_multiplier=-0.1)
  with pytest.raises(ValueError, match='canary_insertion'):
    dpsgd.TrainingConfig(canary_insertion='twice')
  with pytest.raises(ValueError, match='server_momentum'):
    dpsgd.TrainingConfig(server_momentum=1.0)
  with pytest.raises(ValueError, match='statistic'):
    dpsgd.TrainingConfig(statistic='final')
  with pytest.raises(TypeError, match='config'):
    dpsgd.canary_schedule({'num_seen': 3}, 10, seed=0)
  with pytest.raises(ValueError, match='num_clients'):
    dpsgd.canary_schedule(dpsgd.TrainingConfig(batch_size=9), 8, seed=0)
  with pytest.raises(TypeError, match='num_clients'):
    dpsgd.canary_schedule(dpsgd.TrainingConfig(batch_size=9), 80.0, seed=0)
  with pytest.raises(ValueError, match='num_seen'):
    dpsgd.canary_schedule(dpsgd.TrainingConfig(num_seen=0, num_unseen=0), 200,
                          seed=0)
  with pytest.raises(ValueError, match='num_unseen'):
    dpsgd.TrainingConfig(num_seen=0, num_unseen=5)
  assert dpsgd.TrainingConfig().num_rounds(60000) == 469
  model = feedforward.FeedForward((6, 6), hidden_units=2, num_classes=3)
  inputs, labels = cluster_data.clusters(0, 8)
  with pytest.raises(ValueError, match='batch_size'):
    dpsgd.train(model, inputs, labels, dpsgd.TrainingConfig(batch_size=9))
