"""Tests of experiments/train_program.py: round selection and metrics.

Each round's client datasets depend on (seed, round) only, so a resumed run
trains on the data an uninterrupted one does; the compact metrics keep the
named scalars only, so no model-sized vector reaches the CSV or TensorBoard.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from experiments import train
from experiments import train_program
from one_shot_epe import canaries
from one_shot_epe import canary_aggregator
from one_shot_epe import participation
from one_shot_epe import runtime
import linear_model
import tiny_run


def test_round_datasets_depend_only_on_seed_and_round(tmp_path):
  # A resumed run must select round t's clients, and the examples each uses,
  # as an uninterrupted run does, whatever ran before it in the process. With
  # 3 of 8 examples per client, the examples used depend on the shuffle. (The
  # order of a client's batches is not compared: TFF's EMNIST preprocessing
  # maps batches in parallel, non-deterministically.)
  setup = train.prepare(tiny_run.config(str(tmp_path), client_batch_size=1,
                                        max_examples_per_client=3))

  def examples_used(select, round_num):
    return [sorted(int(batch[1][0]) for batch in dataset)
            for dataset in select(round_num)]

  def new_selection_fn():
    return train_program.selection_fn(
        setup.sampler,
        setup.task.preprocessed_train_data.create_tf_dataset_for_client,
        setup.config.seed)

  seeded = new_selection_fn()
  first = examples_used(seeded, 2)
  for round_num in (1, 3, 1):
    seeded(round_num)
  assert examples_used(seeded, 2) == first
  assert examples_used(new_selection_fn(), 2) == first
  # Without the per-round seed, the shuffles (so the examples used) differ
  # between calls; all three clients agreeing by chance has probability about
  # (1 / C(8, 3))^3 = 6e-6.
  unseeded = participation.make_training_selection_fn(
      setup.sampler,
      setup.task.preprocessed_train_data.create_tf_dataset_for_client)
  assert examples_used(unseeded, 2) != examples_used(unseeded, 2)


def test_compact_metrics_keeps_named_scalars_only():
  metrics = {'aggregator': {'clip': np.float32(0.5), 'update': np.zeros(7),
                            'inserted': np.int32(3)},
             'pair': (1.0, np.ones(2)), 'empty': ()}
  assert train_program.compact_metrics(metrics) == {
      'aggregator/clip': 0.5, 'aggregator/inserted': 3, 'pair/0': 1.0}


# ----------------------------------------------------------------------------
# --all_iterates_statistic: the noised aggregate vs the model step.

_FEATURES = 8
_CLASSES = 5
_DIM = _FEATURES * _CLASSES + _CLASSES
_CANARY_SEED = 5
_SCHEDULE = [[0, 1], [2], [3]]
_ROUNDS = 4  # Round 3 inserts no canary.
_MOMENTUM = 0.9
_ROUNDING = 2.0**-24  # float32 unit roundoff.


def _tracked_run(server_momentum):
  """`_ROUNDS` rounds of DP-FedAvg on a linear model, tracking model steps.

  Server SGD at learning rate 1 (with `server_momentum`, or none); the noise
  is seeded. Returns (learning states 0.._ROUNDS, the tracker's maxima).
  """
  config = canary_aggregator.CanaryConfig(
      seed=_CANARY_SEED, num_seen=4, num_unseen=6, schedule=_SCHEDULE,
      buffer_rounds=3)
  factory = canary_aggregator.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.2, clients_per_round=3.0, clip=0.5,
      canary_config=config, noise_seed=11)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      linear_model.model_fn_for(_FEATURES, _CLASSES),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0, momentum=server_momentum),
      model_aggregator=factory)
  data = linear_model.client_datasets(3, _FEATURES, _CLASSES, examples=12,
                                      batch_size=4, seed=2)
  with runtime.local_cpp_context(), train_program.event_loop() as loop:
    tracking = train_program.CanaryTracking(config, _DIM, [], loop, '/CPU:0')
    observed = train_program.ObservedProcess(process, tracking, 'model_delta')
    states = [observed.initialize()]
    for _ in range(_ROUNDS):
      states.append(observed.next(states[-1], data).state)
    return states, tracking.tracker.maxima()


@pytest.fixture(scope='module', name='sgd_run')
def fixture_sgd_run():
  return _tracked_run(server_momentum=None)


@pytest.fixture(scope='module', name='momentum_run')
def fixture_momentum_run():
  return _tracked_run(server_momentum=_MOMENTUM)


def _vectors(states, statistic):
  """The tracked vector of each round, float64 [_ROUNDS, d]."""
  return np.stack([
      np.asarray(train_program.all_iterates_state(
          statistic, previous, state).aggregate, np.float64)
      for previous, state in zip(states[:-1], states[1:])])


def _weights(state):
  return np.concatenate([np.asarray(w, np.float64).reshape(-1) for w in
                         state.global_model_weights.trainable])


def _max_cosines(vectors):
  """Max over rounds of each tracked canary's cosine, float64 brute force."""
  ids = np.concatenate([canaries.seen_ids(4), canaries.unseen_ids(6)])
  units = []
  for canary_id in ids:
    u = tf.random.stateless_normal([_DIM], seed=[_CANARY_SEED, canary_id],
                                   dtype=tf.float32, alg='philox').numpy()
    units.append(u.astype(np.float64) / np.linalg.norm(u.astype(np.float64)))
  norms = np.linalg.norm(vectors, axis=1, keepdims=True)
  return (np.stack(units) @ (vectors / norms).T).max(axis=1)


def test_model_step_is_the_aggregate_under_sgd_at_learning_rate_1(sgd_run):
  # theta_t = fl32(theta_{t-1} - rho_t), so the recovered step
  # fl32(theta_{t-1} - theta_t) differs from rho_t by at most
  # u (|theta_t| + |step|) per coordinate (u = 2^-24): equality up to float32
  # rounding of the stored model, not bit equality. The model starts at zero,
  # so round 0's step is exact.
  states, _ = sgd_run
  aggregates = _vectors(states, 'aggregate')
  steps = _vectors(states, 'model_delta')
  np.testing.assert_array_equal(steps[0], aggregates[0])
  for t in range(_ROUNDS):
    bound = 1.01 * _ROUNDING * (np.abs(_weights(states[t + 1])) +
                                np.abs(steps[t]))
    assert np.all(np.abs(steps[t] - aggregates[t]) <= bound), t
    assert np.linalg.norm(aggregates[t]) > 0.01
  # Hence the cosines, and their maxima over rounds, agree to float32
  # rounding: |cos(c, a) - cos(c, b)| <= 2 ||a - b|| / ||a|| (a ~ 1e-7 here).
  cosine_bound = max(
      2 * np.linalg.norm(steps[t] - aggregates[t]) /
      np.linalg.norm(aggregates[t]) for t in range(_ROUNDS))
  assert np.all(np.abs(_max_cosines(steps) - _max_cosines(aggregates)) <=
                cosine_bound + 1e-12)


def test_model_step_under_momentum_carries_earlier_aggregates(momentum_run):
  # TFF's SGD with momentum: m_t = mu m_{t-1} + rho_t, theta_t = theta_{t-1} -
  # m_t, so the step is sum_{s <= t} mu^(t-s) rho_s: the aggregate in round 0
  # only.
  states, _ = momentum_run
  aggregates = _vectors(states, 'aggregate')
  steps = _vectors(states, 'model_delta')
  for t in range(_ROUNDS):
    want = sum(_MOMENTUM**(t - s) * aggregates[s] for s in range(t + 1))
    np.testing.assert_allclose(steps[t], want, rtol=0, atol=1e-6)
  assert np.linalg.norm(steps[1] - aggregates[1]) > 0.5 * np.linalg.norm(
      aggregates[0])
  assert np.abs(_max_cosines(steps) - _max_cosines(aggregates)).max() > 0.05


@pytest.mark.parametrize('run_name', ['sgd_run', 'momentum_run'])
def test_tracker_is_fed_the_model_step(run_name, request):
  states, maxima = request.getfixturevalue(run_name)
  want = _max_cosines(_vectors(states, 'model_delta'))
  np.testing.assert_allclose(np.concatenate([maxima.seen, maxima.unseen]),
                             want, rtol=0, atol=1e-6)


def test_unknown_statistic_is_rejected():
  with pytest.raises(ValueError, match="statistic must be one of.*'median'"):
    train_program.ObservedProcess(None, None, 'median')
  with pytest.raises(ValueError, match='statistic must be one of'):
    train_program.all_iterates_state('median', None, None)
