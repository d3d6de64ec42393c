"""Tests for one_shot_epe.tff_engine.canary_aggregator (TFF aggregation with canaries).

Every TFF computation runs inside `runtime.local_cpp_context()`. Processes are
built and run once per module (tracing is slow) and the tests check the
recorded rounds against independent numpy computations: canaries regenerated
straight from `tf.random.stateless_normal`, clipping, averaging, the geometric
clip update and cosines in float64.

The DP noise is drawn inside TFF by tensorflow_privacy's GaussianSumQuery from
an unseeded generator (as DP noise must be), so tests with noise are
statistical; each states its false-failure probability. Everything else
(canaries, client updates, schedules) is fixed by seeds.
"""

import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_privacy as tfp
from scipy import stats

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import canary_aggregator as ca
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.stats import estimation
from one_shot_epe.tff_engine import final_model
from one_shot_epe.tff_engine import runtime

import linear_model

tff = pytest.importorskip('tensorflow_federated')

_SEED = 77


def _canary(canary_id: int, dim: int, seed: int = _SEED) -> np.ndarray:
  """Unit canary from the documented definition, float64."""
  u = tf.random.stateless_normal([dim], seed=[seed, canary_id],
                                 dtype=tf.float32, alg='philox').numpy()
  return u.astype(np.float64) / np.linalg.norm(u.astype(np.float64))


def _clip(x: np.ndarray, clip: float) -> np.ndarray:
  return x * min(1.0, clip / np.linalg.norm(x))


def _run(process, clients_per_round, num_rounds):
  """Runs `num_rounds` rounds; returns (states after each round, outputs)."""
  state = process.initialize()
  states, outputs = [], []
  for t in range(num_rounds):
    output = process.next(state, clients_per_round(t))
    state = output.state
    states.append(state)
    outputs.append(output)
  return states, outputs


def _flat(value) -> np.ndarray:
  return np.concatenate(
      [np.asarray(v, np.float64).reshape(-1) for v in tf.nest.flatten(value)])


# ----------------------------------------------------------------------------
# Fixed clip, no noise: exact insertion and the exposed aggregate.

_FIXED_SHAPES = ([30, 20], [57])  # d = 657, two tensors.
_FIXED_DIM = 657
_FIXED_CLIP = 0.7
_FIXED_DENOMINATOR = 4.0
_FIXED_SCHEDULE = [[0, 1, 2], [3], [], [4, 0], [5], [1, 2, 3, 4, 5], [0]]
_FIXED_ROUNDS = 8  # One round past the schedule: no canary.
_FIXED_BUFFER = 3


def _fixed_clients():
  rng = np.random.default_rng(5)
  small = rng.normal(size=_FIXED_DIM)
  small *= 0.3 / np.linalg.norm(small)  # Below the clip: unchanged.
  large = rng.normal(size=_FIXED_DIM)
  large *= 5.0 / np.linalg.norm(large)  # Above the clip: clipped.
  return [small, large]


def _as_structure(flat):
  first = np.prod(_FIXED_SHAPES[0])
  return [np.asarray(flat[:first], np.float32).reshape(_FIXED_SHAPES[0]),
          np.asarray(flat[first:], np.float32)]


@pytest.fixture(scope='module')
def fixed_factory():
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=6, num_unseen=5,
                                schedule=_FIXED_SCHEDULE,
                                buffer_rounds=_FIXED_BUFFER, chunk_size=4)
  return ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.0, clients_per_round=_FIXED_DENOMINATOR,
      clip=_FIXED_CLIP, spec=spec)


@pytest.fixture(scope='module')
def fixed_run(fixed_factory):
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in _FIXED_SHAPES], list)
  process = fixed_factory.create(value_type)
  clients = [_as_structure(x) for x in _fixed_clients()]
  with runtime.local_cpp_context():
    return _run(process, lambda t: clients, _FIXED_ROUNDS)


def test_fixed_clip_aggregate_is_clipped_clients_plus_projected_canaries(
    fixed_run):
  states, outputs = fixed_run
  clipped_clients = sum(_clip(x, _FIXED_CLIP) for x in _fixed_clients())
  for t, output in enumerate(outputs):
    ids = _FIXED_SCHEDULE[t] if t < len(_FIXED_SCHEDULE) else []
    want = clipped_clients + sum(
        (_FIXED_CLIP * _canary(j, _FIXED_DIM) for j in ids),
        np.zeros(_FIXED_DIM))
    want /= _FIXED_DENOMINATOR
    np.testing.assert_allclose(_flat(output.result), want, rtol=0, atol=2e-6)
    assert output.measurements['canaries_inserted'] == len(ids)
    assert output.measurements['clip'] == pytest.approx(_FIXED_CLIP)
    assert output.measurements['aggregate_norm'] == pytest.approx(
        np.linalg.norm(want), rel=1e-5)
    assert states[t].round_num == t + 1


def test_only_canaries_aggregate_is_sum_of_projected_canaries(fixed_factory):
  process = fixed_factory.create(tff.TensorType(np.float32, [_FIXED_DIM]))
  with runtime.local_cpp_context():
    _, outputs = _run(process, lambda t: [], 2)
  for t, output in enumerate(outputs):
    want = sum(_FIXED_CLIP * _canary(j, _FIXED_DIM)
               for j in _FIXED_SCHEDULE[t]) / _FIXED_DENOMINATOR
    np.testing.assert_allclose(output.result, want, rtol=0, atol=1e-6)


def _brute_force_cosines(outputs, ids):
  """[rounds, canaries] float64 cosines of each round's aggregate."""
  rows = np.stack([_canary(int(j), _FIXED_DIM) for j in ids])
  aggregates = np.stack([_flat(o.result) for o in outputs])
  return (aggregates @ rows.T) / np.linalg.norm(aggregates, axis=1)[:, None]


def _tracked_maxima(spec, dim, aggregator_states):
  """The tracker's maxima after observing every state."""
  tracker = cosine_tracking.CosineTracker(spec, dim)
  for state in aggregator_states:
    tracker.observe(state)
  return tracker.maxima()


def test_state_exposes_the_aggregate_the_tracker_scores(fixed_factory,
                                                         fixed_run):
  # The state holds the flattened result (two tensors, in canaries.flatten
  # order), and the tracker fed the states gets every round's exact cosines
  # and lagged summaries (blocks of 3, the rest at flush).
  states, outputs = fixed_run
  ids = fixed_factory.spec.tracked_ids()
  cosines = _brute_force_cosines(outputs, ids)
  tracker = cosine_tracking.CosineTracker(fixed_factory.spec, _FIXED_DIM)
  summaries = []
  for t, (state, output) in enumerate(zip(states, outputs)):
    np.testing.assert_array_equal(
        state.aggregate, _flat(output.result).astype(np.float32))
    summaries += tracker.observe(state)
    assert len(summaries) == (t + 1) // _FIXED_BUFFER * _FIXED_BUFFER
    maxima = tracker.maxima()
    want = cosines[:t + 1].max(axis=0)
    np.testing.assert_allclose(maxima.seen, want[:6], rtol=0, atol=1e-6)
    np.testing.assert_allclose(maxima.unseen, want[6:], rtol=0, atol=1e-6)
  summaries += tracker.flush()
  # Summaries number the training rounds from 1 (round_record.CanaryCosines).
  assert [s.round_num for s in summaries] == list(range(1, _FIXED_ROUNDS + 1))
  for summary in summaries:
    seen = cosines[summary.round_num - 1, :6]
    unseen = cosines[summary.round_num - 1, 6:]
    np.testing.assert_allclose(
        summary[1:], [seen.mean(), seen.max(), unseen.mean(), unseen.max()],
        rtol=0, atol=1e-6)


def test_state_has_no_model_sized_measurements(fixed_run):
  _, outputs = fixed_run
  measurements = outputs[-1].measurements
  assert list(measurements)[:2] == ['dp_query_metrics', 'dp']  # TFF's names.
  for value in tf.nest.flatten(measurements):
    assert np.ndim(value) == 0


# ----------------------------------------------------------------------------
# Adaptive clipping.

_ADAPTIVE_DIM = 400
_ADAPTIVE_NORMS = (0.05, 0.2, 0.45, 0.9, 2.0, 6.0)
_ADAPTIVE_DENOMINATOR = 7.0
_ADAPTIVE_LR = 2.0
_ADAPTIVE_QUANTILE = 0.5
_ADAPTIVE_INITIAL = 0.1
_ADAPTIVE_ROUNDS = 16


def _adaptive_clients():
  rng = np.random.default_rng(11)
  clients = []
  for norm in _ADAPTIVE_NORMS:
    x = rng.normal(size=_ADAPTIVE_DIM)
    clients.append(x * norm / np.linalg.norm(x))
  return clients


@pytest.fixture(scope='module')
def adaptive_run():
  # One canary per round (ids 0..15), zero noise on both the sum and the
  # unclipped count, so the clip follows the closed-form geometric update.
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=_ADAPTIVE_ROUNDS, num_unseen=0,
                           schedule=[[t] for t in range(_ADAPTIVE_ROUNDS)],
                                buffer_rounds=4)
  factory = ca.CanaryDPFactory.gaussian_adaptive(
      noise_multiplier=0.0, clients_per_round=_ADAPTIVE_DENOMINATOR,
      spec=spec, initial_l2_norm_clip=_ADAPTIVE_INITIAL,
      target_unclipped_quantile=_ADAPTIVE_QUANTILE,
      learning_rate=_ADAPTIVE_LR, clipped_count_stddev=0.0)
  process = factory.create(tff.TensorType(np.float32, [_ADAPTIVE_DIM]))
  clients = [np.asarray(x, np.float32) for x in _adaptive_clients()]
  with runtime.local_cpp_context():
    return _run(process, lambda t: clients, _ADAPTIVE_ROUNDS)


def _closed_form_clips():
  """S_{t+1} = S_t exp(-lr (clamp(b_t) - q)), b_t = fraction of records <= S_t.

  b_t = sum over records of (1[norm <= S_t] - 1/2) / E + 1/2 (Andrew et al.
  2021 with tensorflow_privacy's centring); the round's canary has norm S_t
  and counts as unclipped.
  """
  clips = [_ADAPTIVE_INITIAL]
  for _ in range(_ADAPTIVE_ROUNDS - 1):
    clip = clips[-1]
    indicators = [float(n <= clip) for n in _ADAPTIVE_NORMS] + [1.0]
    below = sum(i - 0.5 for i in indicators) / _ADAPTIVE_DENOMINATOR + 0.5
    below = min(1.0, max(0.0, below))
    clips.append(clip * math.exp(-_ADAPTIVE_LR * (below - _ADAPTIVE_QUANTILE)))
  return np.array(clips)


def test_adaptive_clip_follows_geometric_update(adaptive_run):
  _, outputs = adaptive_run
  want = _closed_form_clips()
  # No client norm is within 1e-3 of a clip, so float rounding cannot flip
  # an indicator.
  gaps = np.abs(np.subtract.outer(want, np.array(_ADAPTIVE_NORMS)))
  assert gaps.min() > 1e-3
  got = np.array([o.measurements['clip'] for o in outputs])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # The clip rises from 0.1 to the median of the round's 7 records (6 clients
  # and the canary, whose norm is the clip): the client norm 0.45, around
  # which it then oscillates.
  assert np.all(np.diff(got[:8]) > 0)
  assert min(got[-4:]) < 0.45 < max(got[-4:])


def test_adaptive_canary_record_has_norm_of_the_clip(adaptive_run):
  _, outputs = adaptive_run
  for t, output in enumerate(outputs):
    clip = output.measurements['clip']
    clients = sum(_clip(x, clip) for x in _adaptive_clients())
    canary_record = np.asarray(output.result, np.float64)
    canary_record = canary_record * _ADAPTIVE_DENOMINATOR - clients
    assert np.linalg.norm(canary_record) == pytest.approx(clip, rel=2e-5)
    direction = canary_record / np.linalg.norm(canary_record)
    assert direction @ _canary(t, _ADAPTIVE_DIM) == pytest.approx(1, abs=1e-5)


# ----------------------------------------------------------------------------
# canary_clip: 'project' (the paper's text) vs 'clip' (the published code).

_CLIP_MODE_CANARIES = 3


@pytest.fixture(scope='module')
def clip_mode_runs():
  """Two noiseless adaptive rounds per canary_clip mode, 3 canaries in round 0.

  Same clients, clip and schedule; only how the canaries meet the clip
  differs.
  """
  runs = {}
  for mode in canary_spec.CANARY_CLIPS:
    spec = canary_spec.CanarySpec(
        seed=_SEED, num_seen=_CLIP_MODE_CANARIES, num_unseen=0,
        schedule=[list(range(_CLIP_MODE_CANARIES)), []], buffer_rounds=1,
        canary_clip=mode)
    factory = ca.CanaryDPFactory.gaussian_adaptive(
        noise_multiplier=0.0, clients_per_round=_ADAPTIVE_DENOMINATOR,
        spec=spec, initial_l2_norm_clip=_ADAPTIVE_INITIAL,
        target_unclipped_quantile=_ADAPTIVE_QUANTILE,
        learning_rate=_ADAPTIVE_LR, clipped_count_stddev=0.0)
    process = factory.create(tff.TensorType(np.float32, [_ADAPTIVE_DIM]))
    clients = [np.asarray(x, np.float32) for x in _adaptive_clients()]
    with runtime.local_cpp_context():
      runs[mode] = _run(process, lambda t: clients, 2)[1]
  return runs


def test_canary_clip_modes_contribute_the_same_vector(clip_mode_runs):
  # Round 0, clip S_0 = 0.1: the aggregate is (sum of clipped clients +
  # S_0 sum_j c_j) / E in both modes, computed here in float64. The modes
  # differ only in float32 rounding (one scaling vs the query's clipping of a
  # 1e4 x S_0 record), far below the tolerance; a canary missing or of
  # another norm would move the aggregate by >= S_0 / E = 0.014 in norm.
  clip = _ADAPTIVE_INITIAL
  want = (sum(_clip(x, clip) for x in _adaptive_clients()) +
          clip * sum(_canary(j, _ADAPTIVE_DIM)
                     for j in range(_CLIP_MODE_CANARIES)))
  want /= _ADAPTIVE_DENOMINATOR
  results = {}
  for mode, outputs in clip_mode_runs.items():
    assert outputs[0].measurements['clip'] == pytest.approx(clip, rel=1e-6)
    assert outputs[0].measurements['canaries_inserted'] == 3
    results[mode] = np.asarray(outputs[0].result, np.float64)
    np.testing.assert_allclose(results[mode], want, rtol=0, atol=1e-7)
  assert np.linalg.norm(results['clip'] - results['project']) < 1e-7


def test_clipped_canaries_count_as_clipped_in_the_adaptive_clip(
    clip_mode_runs):
  # S_1 = S_0 exp(-lr (b - q)) with b = sum over records of (1[unclipped] -
  # 1/2) / E + 1/2 (as in _closed_form_clips). The 6 clients' indicators at
  # S_0 = 0.1 are (1, 0, 0, 0, 0, 0); each projected canary adds 1, a clipped
  # one 0, so the unclipped counts differ by the 3 canaries: b = 1/2 + (1 - 6
  # / 2 + 3 (1 - 1/2)) / 7 = 9/14 with 'project' and b = 1/2 + (1 - 6 / 2 - 3
  # / 2) / 7 = 0 with 'clip' (both in [0, 1]: the clamp changes neither).
  clip = _ADAPTIVE_INITIAL
  indicators = [float(n <= clip) for n in _ADAPTIVE_NORMS]
  assert indicators == [1.0] + [0.0] * 5
  for mode, counted in (('project', 1.0), ('clip', 0.0)):
    records = indicators + [counted] * _CLIP_MODE_CANARIES
    below = sum(i - 0.5 for i in records) / _ADAPTIVE_DENOMINATOR + 0.5
    assert 0.0 <= below <= 1.0
    want = clip * math.exp(-_ADAPTIVE_LR * (below - _ADAPTIVE_QUANTILE))
    got = clip_mode_runs[mode][1].measurements['clip']
    assert got == pytest.approx(want, rel=1e-5), mode
  # The log-ratio of the two next clips is lr x (3 canaries) / E.
  ratio = (clip_mode_runs['clip'][1].measurements['clip'] /
           clip_mode_runs['project'][1].measurements['clip'])
  assert math.log(ratio) == pytest.approx(
      _ADAPTIVE_LR * _CLIP_MODE_CANARIES / _ADAPTIVE_DENOMINATOR, rel=1e-4)


# ----------------------------------------------------------------------------
# The Gaussian mechanism inside TFF (Algorithm 1 via Algorithm 2).

_GM_DIM = 100_000
_GM_CANARIES = 1000
_GM_SIGMA = 1.0
_GM_DELTA = 1e-5


def test_gaussian_mechanism_epsilon_matches_analytical():
  # One round, k = 1000 canaries, no real clients, clip 1, denominator 1: the
  # result is sum_j c_j + N(0, sigma^2 I_d), the Gaussian mechanism of
  # Algorithm 1. The final-model estimate (variance fixed to the null's 1/d,
  # the right model for a Gaussian mechanism) must match the analytical eps.
  # Its sampling sd over the noise is 0.15 (300 numpy simulations of the same
  # statistic at k = 1000, d = 1e5, sigma = 1 with
  # gaussian_mechanism.simulate_cosines: mean 4.34, sd 0.15, range
  # 3.99..4.78); the tolerance 0.75 is 5 sd, a false-failure rate < 1e-6.
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=_GM_CANARIES, num_unseen=0,
                                schedule=[list(range(_GM_CANARIES))],
                                buffer_rounds=8)
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=_GM_SIGMA, clients_per_round=1.0, clip=1.0,
      spec=spec)
  process = factory.create(tff.TensorType(np.float32, [_GM_DIM]))
  with runtime.local_cpp_context():
    output = process.next(process.initialize(), [])
  assert output.measurements['canaries_inserted'] == _GM_CANARIES
  cosines = final_model.final_model_cosines(
      [output.result], canary_seed=_SEED,
      canary_ids=canary_spec.seen_ids(_GM_CANARIES), statistic='final',
      model_moves_along=final_model.PAPER_DIRECTION)
  estimate = estimation.epsilon_from_final_cosines(
      cosines, _GM_DIM, _GM_DELTA, variance='null')
  analytical = estimation.gaussian_epsilon(_GM_SIGMA, _GM_DELTA)
  assert abs(estimate - analytical) < 0.75, (estimate, analytical)


# ----------------------------------------------------------------------------
# Algorithm 3: seen vs unseen max-over-rounds cosines.

_A3_DIM = 5000
_A3_CANARIES = 200
_A3_ROUNDS = 5


def _algorithm3_maxima(noise_multiplier):
  per_round = _A3_CANARIES // _A3_ROUNDS
  schedule = [list(range(t * per_round, (t + 1) * per_round))
              for t in range(_A3_ROUNDS)]
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=_A3_CANARIES,
                                num_unseen=_A3_CANARIES, schedule=schedule,
                                buffer_rounds=2)
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=noise_multiplier, clients_per_round=float(per_round),
      clip=1.0, spec=spec)
  process = factory.create(tff.TensorType(np.float32, [_A3_DIM]))
  rng = np.random.default_rng(3)
  clients = [rng.normal(size=_A3_DIM).astype(np.float32) for _ in range(3)]
  with runtime.local_cpp_context():
    states, _ = _run(process, lambda t: clients, _A3_ROUNDS)
  return _tracked_maxima(spec, _A3_DIM, states)


def test_without_noise_seen_maxima_separate_from_unseen():
  maxima = _algorithm3_maxima(0.0)
  # A seen canary's cosine in its round is about 1/sqrt(40 + 3) ~ 0.15; an
  # unseen one's is N(0, 1/d) ~ 0.014 per round.
  assert maxima.seen.min() > 2 * maxima.unseen.max()
  assert maxima.seen.min() > 0.1
  assert estimation.epsilon_from_seen_unseen(maxima.seen, maxima.unseen,
                                             1e-5) > 20


def test_with_large_noise_seen_and_unseen_maxima_coincide():
  # Noise std 1e3 * clip per coordinate drowns the canaries (signal cosine
  # ~1e-5 against a null spread of 0.014). Two-sample KS at level 1e-4: under
  # equal distributions the p-value is uniform, so this fails with
  # probability 1e-4; the noiseless run above gives p < 1e-50.
  maxima = _algorithm3_maxima(1000.0)
  assert stats.ks_2samp(maxima.seen, maxima.unseen).pvalue > 1e-4


# ----------------------------------------------------------------------------
# Plug-in: tff.learning FedAvg with the factory as model_aggregator.

_LEARNING_FEATURES = 8
_LEARNING_CLASSES = 5
_LEARNING_DIM = _LEARNING_FEATURES * _LEARNING_CLASSES + _LEARNING_CLASSES


_model_fn = linear_model.model_fn_for(_LEARNING_FEATURES, _LEARNING_CLASSES)


def _client_datasets(num_clients):
  return linear_model.client_datasets(
      num_clients, _LEARNING_FEATURES, _LEARNING_CLASSES, examples=12,
      batch_size=4, seed=2)


def _learning_process(factory, client_learning_rate):
  return tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=client_learning_rate),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      model_aggregator=factory)


def test_trains_inside_build_unweighted_fed_avg():
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=4, num_unseen=4,
                                schedule=[[0, 1], [2], [3]], buffer_rounds=2)
  factory = ca.CanaryDPFactory.gaussian_adaptive(
      noise_multiplier=0.1, clients_per_round=3.0, spec=spec,
      initial_l2_norm_clip=0.5, clipped_count_stddev=1.0)
  process = _learning_process(factory, client_learning_rate=0.5)
  data = _client_datasets(3)
  aggregator_states = []
  with runtime.local_cpp_context():
    state = process.initialize()
    initial = _flat(state.global_model_weights.trainable)
    for t in range(3):
      output = process.next(state, data)
      state = output.state
      aggregator_states.append(state.aggregator)
      aggregator = output.metrics['aggregator']
      assert aggregator['canaries_inserted'] == len(spec.schedule[t])
      assert aggregator['clip'] > 0
      assert np.isfinite(output.metrics['client_work']['train']['loss'])
  assert not np.allclose(_flat(state.global_model_weights.trainable), initial)
  maxima = _tracked_maxima(spec, _LEARNING_DIM, aggregator_states)
  assert maxima.seen.shape == (4,) and maxima.unseen.shape == (4,)
  assert np.all(np.isfinite(maxima.seen))


def test_inserted_canary_has_positive_final_model_cosine():
  # Clients do not train (learning rate 0), there is no noise, and one canary
  # is inserted: the model delta is -S c_0 / E, so with the tff.learning sign
  # convention its cosine is +1 and the literal sign would give -1.
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=3, num_unseen=0,
                                schedule=[[], [0], []], buffer_rounds=1)
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.0, clients_per_round=2.0, clip=0.3,
      spec=spec)
  process = _learning_process(factory, client_learning_rate=0.0)
  data = _client_datasets(2)
  aggregator_states = []
  with runtime.local_cpp_context():
    state = process.initialize()
    initial = state.global_model_weights.trainable
    for _ in range(3):
      state = process.next(state, data).state
      aggregator_states.append(state.aggregator)
  final = state.global_model_weights.trainable
  cosines = final_model.final_model_cosines(
      final, canary_seed=_SEED, canary_ids=[0, 1, 2], initial_weights=initial)
  assert cosines[0] == pytest.approx(1.0, abs=1e-5)
  assert np.all(np.abs(cosines[1:]) < 0.9)
  flipped = final_model.final_model_cosines(
      final, canary_seed=_SEED, canary_ids=[0], initial_weights=initial,
      model_moves_along=final_model.PAPER_DIRECTION)
  assert flipped[0] == pytest.approx(-1.0, abs=1e-5)
  assert _LEARNING_DIM == np.concatenate([np.ravel(w) for w in final]).size
  maxima = _tracked_maxima(spec, _LEARNING_DIM, aggregator_states)
  assert maxima.seen[0] == pytest.approx(1.0, abs=1e-5)


# ----------------------------------------------------------------------------
# The DpEvent in the state, as TFF's DifferentiallyPrivateFactory keeps it.

_EVENT_ROUNDS = 4
_EVENT_DELTA = 1e-5


def _events(factory, num_rounds=_EVENT_ROUNDS):
  """The initial state and the DpEvents extracted after each round."""
  process = factory.create(tff.TensorType(np.float32, [3]))
  clients = [np.array([3.0, 0.0, 0.0], np.float32),
             np.array([0.0, 0.1, 0.0], np.float32)]
  with runtime.local_cpp_context():
    states, _ = _run(process, lambda t: clients, num_rounds)
    initial = process.initialize()
  return initial, [aggregator_state.extract_dp_event_from_state(s)
                   for s in states]


def _rdp_epsilon(events):
  accountant = dp_accounting.rdp.RdpAccountant()
  for event in events:
    accountant.compose(event)
  return accountant.get_epsilon(_EVENT_DELTA)


def test_fixed_clip_dp_event_composes_to_the_gaussian_mechanism():
  z = 0.8
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=2, num_unseen=0,
                                schedule=[[0], [1], [0, 1]])
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=z, clients_per_round=3.0, clip=0.5,
      spec=spec, noise_seed=9)
  initial, events = _events(factory)
  for event in events:
    assert isinstance(event, dp_accounting.GaussianDpEvent)
    assert event.noise_multiplier == pytest.approx(z, rel=1e-6)
  by_hand = _rdp_epsilon(
      [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z),
                                         _EVENT_ROUNDS)])
  assert _rdp_epsilon(events) == pytest.approx(by_hand, rel=1e-5)
  with pytest.raises(ValueError, match='initialize'):
    aggregator_state.extract_dp_event_from_state(initial)


@pytest.mark.parametrize('noise_seed', [None, 4])
def test_adaptive_dp_event_is_tffs_and_composes_to_overall_z(noise_seed):
  # The event is the one TFF's own gaussian_adaptive factory reports (the
  # update sum's and the unclipped count's Gaussian mechanisms), and since
  # 1/z^2 = 1/z_v^2 + 1/(2 s)^2 its RDP, hence epsilon, is that of one
  # Gaussian mechanism at the overall z per round.
  z, clients, count_stddev = 0.7, 4.0, 1.5
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=1, num_unseen=0,
                                schedule=[[0]])
  factory = ca.CanaryDPFactory.gaussian_adaptive(
      noise_multiplier=z, clients_per_round=clients, spec=spec,
      clipped_count_stddev=count_stddev, noise_seed=noise_seed)
  _, events = _events(factory)
  tff_process = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=z, clients_per_round=clients,
      clipped_count_stddev=count_stddev).create(
          tff.TensorType(np.float32, [3]))
  with runtime.local_cpp_context():
    tff_state = tff_process.next(tff_process.initialize(),
                                 [np.ones(3, np.float32)]).state
  tff_event = dp_accounting.DpEvent.from_named_tuple(tff_state.dp_event)
  assert isinstance(tff_event, dp_accounting.ComposedDpEvent)
  tff_multipliers = [e.noise_multiplier for e in tff_event.events]
  for event in events:
    # The same event up to float32 rounding of stddev / clip (the clips of
    # the two runs differ).
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    assert [type(e) for e in event.events] == [type(e)
                                               for e in tff_event.events]
    np.testing.assert_allclose([e.noise_multiplier for e in event.events],
                               tff_multipliers, rtol=1e-6)
  by_hand = _rdp_epsilon(
      [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z),
                                         _EVENT_ROUNDS)])
  assert _rdp_epsilon(events) == pytest.approx(by_hand, rel=1e-5)


def test_extract_dp_event_rejects_other_objects():
  with pytest.raises(ValueError, match='dp_event'):
    aggregator_state.extract_dp_event_from_state(object())


# ----------------------------------------------------------------------------
# record_aggregation_factory: the clients' records go through it.


def test_record_aggregation_factory_aggregates_the_client_records():
  # UnweightedMeanFactory is not a sum, which makes its use visible: the
  # result is (mean of the clipped clients + Proj(c_0; S)) / E, against
  # (sum + Proj) / E with the default SumFactory.
  clip, denominator, dim = 1.0, 2.0, 4
  clients = [np.array([3.0, 0.0, 0.0, 4.0], np.float32),
             np.array([0.0, 0.5, 0.0, 0.0], np.float32)]
  clipped = [_clip(x.astype(np.float64), clip) for x in clients]
  canary = clip * _canary(0, dim)
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=1, num_unseen=0,
                                schedule=[[0]])
  want = {
      None: (sum(clipped) + canary) / denominator,
      'mean': (sum(clipped) / len(clients) + canary) / denominator,
  }
  for name, want_result in want.items():
    inner = tff.aggregators.UnweightedMeanFactory() if name else None
    factory = ca.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=0.0, clients_per_round=denominator, clip=clip,
        spec=spec, record_aggregation_factory=inner)
    process = factory.create(tff.TensorType(np.float32, [dim]))
    with runtime.local_cpp_context():
      output = process.next(process.initialize(), clients)
    np.testing.assert_allclose(output.result, want_result, atol=1e-6)
    if name:
      # TFF's layout: the inner process's measurements under 'dp'.
      assert set(output.measurements['dp']) == {'mean_value', 'mean_count'}


def test_bad_record_aggregation_factory_raises():
  with pytest.raises(TypeError, match='record_aggregation_factory'):
    ca.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=1.0, clients_per_round=2.0, clip=1.0,
        spec=_spec(),
        record_aggregation_factory=tff.aggregators.MeanFactory())


# ----------------------------------------------------------------------------
# DP-FTRL: canaries under tensorflow_privacy's TreeResidualSumQuery.

_TREE_DIM = 6
_TREE_CLIP = 0.8
_TREE_DENOMINATOR = 3.0
_TREE_SCHEDULE = [[0], [1, 2], [], [2]]
_TREE_SEED = 21


def _tree_clients():
  rng = np.random.default_rng(8)
  return [rng.normal(size=_TREE_DIM).astype(np.float32) * scale
          for scale in (0.1, 2.0)]  # Norms about 0.2 (kept) and 4 (clipped).


def _tree_run(noise_multiplier):
  specs = tf.TensorSpec([_TREE_DIM], tf.float32)
  spec = canary_spec.CanarySpec(seed=_SEED, num_seen=3, num_unseen=0,
                                schedule=_TREE_SCHEDULE)
  factory = ca.CanaryDPFactory.tree_aggregation(
      noise_multiplier=noise_multiplier, clients_per_round=_TREE_DENOMINATOR,
      l2_norm_clip=_TREE_CLIP, record_specs=specs, spec=spec,
      noise_seed=_TREE_SEED)
  process = factory.create(tff.TensorType(np.float32, [_TREE_DIM]))
  clients = _tree_clients()
  with runtime.local_cpp_context():
    return _run(process, lambda t: clients, len(_TREE_SCHEDULE))


def _tree_record_sums():
  """Brute force: each round's clipped clients plus Proj(c_j; S), float64."""
  clipped = sum(_clip(x.astype(np.float64), _TREE_CLIP)
                for x in _tree_clients())
  return [clipped + sum((_TREE_CLIP * _canary(j, _TREE_DIM) for j in ids),
                        np.zeros(_TREE_DIM)) for ids in _TREE_SCHEDULE]


def test_tree_aggregation_without_noise_is_clients_plus_canaries():
  states, outputs = _tree_run(0.0)
  for t, (output, total) in enumerate(zip(outputs, _tree_record_sums())):
    np.testing.assert_allclose(output.result, total / _TREE_DENOMINATOR,
                               rtol=0, atol=1e-6)
    assert output.measurements['canaries_inserted'] == len(_TREE_SCHEDULE[t])
    assert output.measurements['clip'] == pytest.approx(_TREE_CLIP)
    # TFF's dp_query_metrics: the query's derive_metrics.
    assert output.measurements['dp_query_metrics'][
        'tree_agg_dpftrl_clip'] == pytest.approx(_TREE_CLIP)
    np.testing.assert_array_equal(states[t].aggregate, output.result)


def test_tree_aggregation_noise_and_dp_event_are_tensorflow_privacys():
  # Canaries are records of the given query: the process's results equal
  # tensorflow_privacy's own TreeResidualSumQuery (same noise seed, run
  # eagerly here) applied to the brute-force record sums, and its DpEvent is
  # the one that query reports (correlated noise: UnsupportedDpEvent).
  z = 0.5
  states, outputs = _tree_run(z)
  query = tfp.NormalizedQuery(
      tfp.TreeResidualSumQuery.build_l2_gaussian_query(
          _TREE_CLIP, z, tf.TensorSpec([_TREE_DIM], tf.float32),
          noise_seed=_TREE_SEED),
      denominator=_TREE_DENOMINATOR)
  global_state = query.initial_global_state()
  for t, total in enumerate(_tree_record_sums()):
    want, global_state, tfp_event = query.get_noised_result(
        tf.constant(total, tf.float32), global_state)
    np.testing.assert_allclose(outputs[t].result, want.numpy(), rtol=0,
                               atol=1e-5)
    assert aggregator_state.extract_dp_event_from_state(states[t]) == tfp_event
  assert tfp_event == dp_accounting.UnsupportedDpEvent()
  # The noise is there: each round differs from the noiseless sum.
  for output, total in zip(outputs, _tree_record_sums()):
    assert np.linalg.norm(output.result - total / _TREE_DENOMINATOR) > 0.01


@pytest.mark.parametrize('kwargs, error, name', [
    (dict(l2_norm_clip=0.0), ValueError, 'l2_norm_clip'),
    (dict(noise_multiplier=-1.0), ValueError, 'noise_multiplier'),
    (dict(record_specs=[3]), TypeError, 'record_specs'),
    (dict(use_efficient=1), TypeError, 'use_efficient'),
])
def test_bad_tree_arguments_raise(kwargs, error, name):
  args = dict(noise_multiplier=1.0, clients_per_round=2.0, l2_norm_clip=1.0,
              record_specs=tf.TensorSpec([3], tf.float32))
  args.update(kwargs)
  with pytest.raises(error, match=name):
    ca.CanaryDPFactory.tree_aggregation(spec=_spec(), **args)


# ----------------------------------------------------------------------------
# Argument validation.


def _spec(**overrides):
  args = dict(seed=1, num_seen=3, num_unseen=2, schedule=[[0], [1, 2]])
  args.update(overrides)
  return canary_spec.CanarySpec(**args)


@pytest.mark.parametrize('kwargs, name', [
    (dict(noise_multiplier=-0.1), 'noise_multiplier'),
    (dict(clients_per_round=0.0), 'clients_per_round'),
    (dict(clip=0.0), 'clip'),
    (dict(clip=math.inf), 'clip'),
    # Every seed shares canary_spec.MAX_SEED = 2^32 - 1.
    (dict(noise_seed=2**32), 'noise_seed'),
])
def test_bad_fixed_arguments_raise(kwargs, name):
  args = dict(noise_multiplier=1.0, clients_per_round=10.0, clip=1.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    ca.CanaryDPFactory.gaussian_fixed(spec=_spec(), **args)


@pytest.mark.parametrize('kwargs, name', [
    (dict(target_unclipped_quantile=1.5), 'target_unclipped_quantile'),
    (dict(learning_rate=-1.0), 'learning_rate'),
    (dict(initial_l2_norm_clip=0.0), 'initial_l2_norm_clip'),
    (dict(noise_multiplier=1.0, clipped_count_stddev=0.4),
     'clipped_count_stddev'),
])
def test_bad_adaptive_arguments_raise(kwargs, name):
  args = dict(noise_multiplier=0.5, clients_per_round=10.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    ca.CanaryDPFactory.gaussian_adaptive(spec=_spec(), **args)


def test_bad_value_type_raises():
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=1.0, clients_per_round=2.0, clip=1.0,
      spec=_spec())
  with pytest.raises(ValueError, match='value_type'):
    factory.create(tff.TensorType(np.int32, [3]))
  with pytest.raises(ValueError, match='value_type'):
    factory.create(tff.TensorType(np.float32, [None]))
