"""Tests for one_shot_epe.tff_engine.cosine_tracking (block updates and CosineTracker).

The truth is brute force in float64: canaries regenerated from the documented
definition (`tf.random.stateless_normal`, philox), one cosine per round and
canary, maximum over rounds.
"""

import numpy as np
import pytest
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import canary_aggregator as ca
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import runtime

tff = pytest.importorskip('tensorflow_federated')

_SEED = 31
_DIM = 500
_NUM_SEEN = 5
_NUM_UNSEEN = 4
_SCHEDULE = [[0, 1], [2], [], [3, 4], [0], [1], [2, 3]]
_ROUNDS = 7


def _canary(canary_id: int) -> np.ndarray:
  u = tf.random.stateless_normal([_DIM], seed=[_SEED, canary_id],
                                 dtype=tf.float32, alg='philox').numpy()
  return u.astype(np.float64) / np.linalg.norm(u.astype(np.float64))


def _cosines(aggregates: np.ndarray) -> np.ndarray:
  """[rounds, k + m] cosines, seen ids first."""
  ids = canary_spec.tracked_ids(_NUM_SEEN, _NUM_UNSEEN)
  rows = np.stack([_canary(int(j)) for j in ids])
  aggregates = np.asarray(aggregates, np.float64)
  return (aggregates @ rows.T) / np.linalg.norm(aggregates, axis=1)[:, None]


def _spec(buffer_rounds=3):
  return canary_spec.CanarySpec(seed=_SEED, num_seen=_NUM_SEEN, num_unseen=_NUM_UNSEEN,
                         schedule=_SCHEDULE, buffer_rounds=buffer_rounds, chunk_size=2)


@pytest.fixture(scope='module')
def export_run():
  """States and results of an external-tracking process (with DP noise)."""
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.05, clients_per_round=3.0, clip=1.0,
      spec=_spec())
  process = factory.create(tff.TensorType(np.float32, [_DIM]))
  rng = np.random.default_rng(8)
  clients = [rng.normal(size=_DIM).astype(np.float32) for _ in range(2)]
  states, results, measurements = [], [], []
  with runtime.local_cpp_context():
    state = process.initialize()
    for _ in range(_ROUNDS):
      output = process.next(state, clients)
      state = output.state
      states.append(state)
      results.append(np.asarray(output.result, np.float64))
      measurements.append(output.measurements)
  return states, np.stack(results), measurements


def test_export_state_holds_the_round_aggregate(export_run):
  states, results, measurements = export_run
  for t, state in enumerate(states):
    assert state.round_num == t + 1
    np.testing.assert_array_equal(state.aggregate,
                                  results[t].astype(np.float32))
    assert set(measurements[t]) == {'dp_query_metrics', 'dp', 'clip',
                                    'canaries_inserted', 'aggregate_norm'}
    assert measurements[t]['canaries_inserted'] == len(_SCHEDULE[t])


def test_tracker_maxima_exact_after_every_round(export_run):
  states, results, _ = export_run
  cosines = _cosines(results)
  tracker = cosine_tracking.CosineTracker(_spec(), _DIM)
  reported = []
  for t, state in enumerate(states):
    reported.extend(tracker.observe(state))
    maxima = tracker.maxima()
    want = cosines[:t + 1].max(axis=0)
    np.testing.assert_allclose(maxima.seen, want[:_NUM_SEEN], atol=1e-6)
    np.testing.assert_allclose(maxima.unseen, want[_NUM_SEEN:], atol=1e-6)
  # Blocks of 3: training rounds 1-6 were reported by observe, 7 by flush.
  assert [s.round_num for s in reported] == list(range(1, 7))
  reported.extend(tracker.flush())
  assert [s.round_num for s in reported] == list(range(1, _ROUNDS + 1))
  for summary in reported:
    seen = cosines[summary.round_num - 1, :_NUM_SEEN]
    unseen = cosines[summary.round_num - 1, _NUM_SEEN:]
    np.testing.assert_allclose(
        summary[1:], [seen.mean(), seen.max(), unseen.mean(), unseen.max()],
        atol=1e-6)


def test_tracker_resumes_exactly_from_its_state(export_run):
  states, _, _ = export_run
  uninterrupted = cosine_tracking.CosineTracker(_spec(), _DIM)
  first = cosine_tracking.CosineTracker(_spec(), _DIM)
  for state in states[:4]:
    uninterrupted.observe(state)
    first.observe(state)
  saved = first.state()
  assert saved.rounds_observed == 4 and saved.pending.shape == (1, _DIM)
  resumed = cosine_tracking.CosineTracker(_spec(), _DIM, state=saved)
  for state in states[4:]:
    uninterrupted.observe(state)
    resumed.observe(state)
  np.testing.assert_array_equal(resumed.maxima().seen,
                                uninterrupted.maxima().seen)
  np.testing.assert_array_equal(resumed.maxima().unseen,
                                uninterrupted.maxima().unseen)


def test_tracker_resumes_after_an_early_flush(export_run):
  # flush() mid-block (e.g. at a checkpoint) shifts the blocks; the state
  # still resumes to the same maxima.
  states, results, _ = export_run
  tracker = cosine_tracking.CosineTracker(_spec(), _DIM)
  for state in states[:2]:
    tracker.observe(state)
  assert [s.round_num for s in tracker.flush()] == [1, 2]
  tracker.observe(states[2])
  resumed = cosine_tracking.CosineTracker(_spec(), _DIM,
                                          state=tracker.state())
  for state in states[3:]:
    resumed.observe(state)
  want = _cosines(results).max(axis=0)
  np.testing.assert_allclose(resumed.maxima().seen, want[:_NUM_SEEN],
                             atol=1e-6)
  np.testing.assert_allclose(resumed.maxima().unseen, want[_NUM_SEEN:],
                             atol=1e-6)


def test_tracker_rejects_skipped_rounds_and_bad_states(export_run):
  states, _, _ = export_run
  tracker = cosine_tracking.CosineTracker(_spec(), _DIM)
  with pytest.raises(ValueError, match='round 1 but the tracker expects'):
    tracker.observe(states[1])
  with pytest.raises(ValueError, match='dim'):
    cosine_tracking.CosineTracker(_spec(), 0)
  with pytest.raises(ValueError, match='state does not match'):
    cosine_tracking.CosineTracker(
        _spec(), _DIM,
        state=cosine_tracking.TrackerState(
            rounds_observed=2, cosine_maxima=np.zeros(_NUM_SEEN + _NUM_UNSEEN),
            pending=np.zeros((3, _DIM))))
  with pytest.raises(ValueError, match="fields 'round_num' and 'aggregate'"):
    tracker.observe(states[0]._asdict())
  with pytest.raises(ValueError, match=r'shape \(3,\); expected \(500,\)'):
    tracker.observe(states[0]._replace(aggregate=np.zeros(3, np.float32)))
  assert tracker.rounds_observed == 0


def test_tracker_fed_aggregates_directly_equals_fed_states(export_run):
  # A trainer without TFF (baselines.dpsgd) feeds the aggregates themselves,
  # with a CanarySpec without a schedule.
  states, results, _ = export_run
  from_states = cosine_tracking.CosineTracker(_spec(), _DIM)
  direct = cosine_tracking.CosineTracker(
      canary_spec.CanarySpec(_SEED, _NUM_SEEN, _NUM_UNSEEN,
                             buffer_rounds=3, chunk_size=2), _DIM)
  for state, aggregate in zip(states, results):
    assert (from_states.observe(state) ==
            direct.observe_aggregate(aggregate.astype(np.float32)))
  np.testing.assert_array_equal(direct.maxima().seen,
                                from_states.maxima().seen)
  np.testing.assert_array_equal(direct.maxima().unseen,
                                from_states.maxima().unseen)


def test_default_chunk_fits_256_mib():
  assert canaries.default_chunk_size(4_050_000) == 16


def test_tracker_with_tff_learning_matches_model_deltas():
  # With server SGD at learning rate 1 and no momentum, theta_{t-1} - theta_t
  # is the round's aggregate, an independent view of what the tracker saw.
  features, classes = 6, 4
  dim = features * classes + classes

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(features,)),
        tf.keras.layers.Dense(classes),
    ])
    return tff.learning.models.from_keras_model(
        keras_model,
        input_spec=(tf.TensorSpec([None, features], tf.float32),
                    tf.TensorSpec([None], tf.int32)),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=3, num_unseen=3,
                                schedule=[[0], [1, 2], []], buffer_rounds=2)
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.1, clients_per_round=3.0, clip=0.5,
      spec=spec)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.3),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=factory)
  rng = np.random.default_rng(6)
  data = [
      tf.data.Dataset.from_tensor_slices(
          (rng.normal(size=(8, features)).astype(np.float32),
           rng.integers(0, classes, size=8).astype(np.int32))).batch(4)
      for _ in range(2)
  ]
  tracker = cosine_tracking.CosineTracker(spec, dim)
  weights = []
  with runtime.local_cpp_context():
    state = process.initialize()
    weights.append(process.get_model_weights(state).trainable)
    for _ in range(3):
      output = process.next(state, data)
      state = output.state
      tracker.observe(state.aggregator)
      weights.append(process.get_model_weights(state).trainable)
      assert output.metrics['aggregator']['clip'] == pytest.approx(0.5)
  flat = [np.concatenate([np.ravel(w) for w in ws]).astype(np.float64)
          for ws in weights]
  deltas = np.stack([flat[t] - flat[t + 1] for t in range(3)])
  ids = canary_spec.tracked_ids(3, 3)
  rows = np.stack([
      tf.random.stateless_normal([dim], seed=[_SEED, int(j)],
                                 alg='philox').numpy() for j in ids
  ]).astype(np.float64)
  rows /= np.linalg.norm(rows, axis=1, keepdims=True)
  want = ((deltas @ rows.T) /
          np.linalg.norm(deltas, axis=1)[:, None]).max(axis=0)
  maxima = tracker.maxima()
  np.testing.assert_allclose(maxima.seen, want[:3], atol=1e-5)
  np.testing.assert_allclose(maxima.unseen, want[3:], atol=1e-5)
