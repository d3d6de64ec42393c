"""Tests for one_shot_epe.tff_engine.seeded_queries (DP queries with seeded noise).

The seeded queries must be tensorflow_privacy's mechanisms with the noise made
reproducible: the same seed gives bit-identical noise, another round or seed
gives fresh noise, the noise has the stated N(0, stddev^2) law (KS tests at a
fixed seed, significance 1e-4), the two noised quantities of the adaptive
clip are uncorrelated, and without noise everything equals tensorflow_privacy's
own queries. The TFF part runs the canary aggregator twice in separate
execution contexts and checks the runs agree bit for bit.
"""

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_privacy as tfp
from scipy import stats

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canary_aggregator as ca
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import seeded_queries as sq

tff = pytest.importorskip('tensorflow_federated')

_DIM = 20_000


def _noised_sum(query, seed, sample_state, global_state=None):
  if global_state is None:
    global_state = query.initial_global_state()
  with sq.noise_seed_scope(seed):
    result, new_state, event = query.get_noised_result(sample_state,
                                                       global_state)
  return result, new_state, event


def _gaussian_noise(seed, stddev=0.7, stream=sq.UPDATE_STREAM):
  query = sq.SeededGaussianSumQuery(l2_norm_clip=1.0, stddev=stddev,
                                    stream=stream)
  zeros = [tf.zeros([_DIM // 2]), tf.zeros([_DIM // 2])]
  result, _, _ = _noised_sum(query, seed, zeros)
  return np.concatenate([r.numpy() for r in result])


def test_same_seed_same_noise_other_round_fresh_noise():
  first = _gaussian_noise(sq.round_seed(5, 3))
  again = _gaussian_noise(sq.round_seed(5, 3))
  np.testing.assert_array_equal(first, again)
  for other in (sq.round_seed(5, 4), sq.round_seed(6, 3)):
    # Independent N(0, 0.49) draws: correlation ~ N(0, 1/_DIM), |r| < 0.03 is
    # a 4-sigma bound.
    r = np.corrcoef(first, _gaussian_noise(other))[0, 1]
    assert abs(r) < 0.03


def test_noise_has_the_stated_gaussian_law():
  noise = _gaussian_noise(sq.round_seed(11, 0), stddev=0.7)
  assert stats.kstest(noise / 0.7, 'norm').pvalue > 1e-4
  # The two leaves draw from different substreams, not the same numbers.
  assert abs(np.corrcoef(noise[:_DIM // 2], noise[_DIM // 2:])[0, 1]) < 0.03


def test_streams_are_independent():
  seed = sq.round_seed(2, 9)
  update = _gaussian_noise(seed, stream=sq.UPDATE_STREAM)
  count = _gaussian_noise(seed, stream=sq.COUNT_STREAM)
  assert abs(np.corrcoef(update, count)[0, 1]) < 0.03


def test_fixed_query_matches_tensorflow_privacy_without_noise():
  records = [tf.constant([3.0, 4.0]), tf.constant([0.3, -0.1])]
  ours = sq.SeededGaussianSumQuery(l2_norm_clip=2.0, stddev=0.0,
                                   stream=sq.UPDATE_STREAM)
  theirs = tfp.GaussianSumQuery(l2_norm_clip=2.0, stddev=0.0)
  for query in (ours, theirs):
    params = query.derive_sample_params(query.initial_global_state())
    state = query.initial_sample_state(records[0])
    for record in records:
      state = query.accumulate_record(params, state, record)
    if query is ours:
      ours_result, _, ours_event = _noised_sum(query, sq.round_seed(0, 0),
                                               state)
    else:
      theirs_result, _, theirs_event = query.get_noised_result(
          state, query.initial_global_state())
  # Clipped [3, 4] to norm 2 is [1.2, 1.6]; plus the unclipped record.
  np.testing.assert_allclose(ours_result.numpy(), [1.5, 1.5], rtol=1e-6)
  np.testing.assert_array_equal(ours_result.numpy(), theirs_result.numpy())
  assert ours_event == theirs_event


def _adaptive(query_class, clipped_count_stddev):
  return query_class(initial_l2_norm_clip=1.0, noise_multiplier=0.0,
                     target_unclipped_quantile=0.5, learning_rate=0.2,
                     clipped_count_stddev=clipped_count_stddev,
                     expected_num_records=4.0, geometric_update=True)


def _adaptive_round(query, seed):
  records = [tf.constant([0.5, 0.0]), tf.constant([0.0, 3.0]),
             tf.constant([0.1, 0.1]), tf.constant([2.0, 2.0])]
  global_state = query.initial_global_state()
  params = query.derive_sample_params(global_state)
  state = query.initial_sample_state(records[0])
  for record in records:
    state = query.accumulate_record(params, state, record)
  if isinstance(query, sq.SeededQuantileAdaptiveClipSumQuery):
    return _noised_sum(query, seed, state, global_state)
  return query.get_noised_result(state, global_state)


def test_adaptive_query_matches_tensorflow_privacy_without_noise():
  ours = _adaptive_round(_adaptive(sq.SeededQuantileAdaptiveClipSumQuery, 0.0),
                         sq.round_seed(1, 0))
  theirs = _adaptive_round(_adaptive(tfp.QuantileAdaptiveClipSumQuery, 0.0),
                           None)
  tf.nest.assert_same_structure(ours[1], theirs[1])
  for a, b in zip(tf.nest.flatten(ours[:2]), tf.nest.flatten(theirs[:2])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # Two of four records have norm <= 1: b = 0.5 = target, so the clip stays.
  np.testing.assert_allclose(ours[1].sum_state.l2_norm_clip, 1.0)


@pytest.mark.slow
def test_adaptive_count_noise_is_seeded_with_the_stated_law():
  query = _adaptive(sq.SeededQuantileAdaptiveClipSumQuery, 0.8)
  clips = np.array([
      _adaptive_round(query, sq.round_seed(4, t))[1].sum_state.l2_norm_clip
      for t in range(400)
  ])
  again = _adaptive_round(query, sq.round_seed(4, 7))[1].sum_state.l2_norm_clip
  assert clips[7] == again
  # New clip = exp(-0.2 (clamp(0.5 + N(0, 0.8^2) / 4, 0, 1) - 0.5)), so the
  # unclamped values give back the noise: N(0, 0.2^2) in fraction units.
  fraction = 0.5 - np.log(clips) / 0.2
  inside = (fraction > 1e-6) & (fraction < 1 - 1e-6)
  noise = (fraction[inside] - 0.5) / 0.2
  # Truncation to [0, 1] is at 2.5 sd: compare with the truncated normal.
  law = stats.truncnorm(-2.5, 2.5)
  assert stats.kstest(noise, law.cdf).pvalue > 1e-4


def test_noise_outside_a_scope_is_an_error():
  query = sq.SeededGaussianSumQuery(l2_norm_clip=1.0, stddev=1.0,
                                    stream=sq.UPDATE_STREAM)
  with pytest.raises(RuntimeError, match='noise_seed_scope'):
    query.get_noised_result(tf.zeros([3]), query.initial_global_state())


def test_bad_seed_shape_is_an_error():
  with pytest.raises(ValueError, match='shape'):
    with sq.noise_seed_scope(tf.constant([1, 2, 3], tf.int64)):
      pass


def test_seeded_queries_report_tensorflow_privacys_dp_events():
  # Seeding changes where the noise comes from, not the mechanism: the
  # DpEvents (what accountants compose) equal tensorflow_privacy's.
  args = dict(initial_l2_norm_clip=0.3, noise_multiplier=0.9,
              target_unclipped_quantile=0.5, learning_rate=0.2,
              clipped_count_stddev=2.0, expected_num_records=8.0)
  pairs = [
      (sq.SeededGaussianSumQuery(l2_norm_clip=0.3, stddev=0.6,
                                 stream=sq.UPDATE_STREAM),
       tfp.GaussianSumQuery(l2_norm_clip=0.3, stddev=0.6)),
      (sq.SeededQuantileAdaptiveClipSumQuery(**args),
       tfp.QuantileAdaptiveClipSumQuery(**args)),
  ]
  zeros = [tf.zeros([4])]
  for seeded, reference in pairs:
    _, _, event = _noised_sum(seeded, sq.round_seed(1, 0),
                              seeded.initial_sample_state(zeros))
    _, _, want = reference.get_noised_result(
        reference.initial_sample_state(zeros),
        reference.initial_global_state())
    assert event == want, (event, want)
  assert want == dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(np.float32(0.9)),
      dp_accounting.GaussianDpEvent(np.float32(2.0 / 0.5))])


# ----------------------------------------------------------------------------
# Inside TFF: the canary aggregator with a noise seed.

_TFF_DIM = 3000


def _aggregator_results(noise_seed, adaptive):
  spec = canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=0,
                                schedule=[[0, 1], [2], [3]])
  if adaptive:
    factory = ca.CanaryDPFactory.gaussian_adaptive(
        noise_multiplier=0.5, clients_per_round=4.0, spec=spec,
        clipped_count_stddev=1.0,
        noise_seed=noise_seed)
  else:
    factory = ca.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=0.5, clients_per_round=4.0, clip=1.0,
        spec=spec, noise_seed=noise_seed)
  process = factory.create(tff.TensorType(np.float32, [_TFF_DIM]))
  rng = np.random.default_rng(0)
  clients = [rng.normal(size=_TFF_DIM).astype(np.float32) for _ in range(2)]
  results = []
  with runtime.local_cpp_context():
    state = process.initialize()
    for _ in range(3):
      output = process.next(state, clients)
      state = output.state
      results.append(np.asarray(output.result))
  return np.stack(results)


@pytest.mark.parametrize('adaptive', [False, True])
def test_seeded_aggregator_runs_are_bit_identical(adaptive):
  first = _aggregator_results(123, adaptive)
  np.testing.assert_array_equal(first, _aggregator_results(123, adaptive))
  assert not np.array_equal(first, _aggregator_results(124, adaptive))


def test_unseeded_aggregator_runs_differ():
  # The control: tensorflow_privacy's own noise is not reproducible, which is
  # why the launcher passes a noise seed.
  assert not np.array_equal(_aggregator_results(None, False),
                            _aggregator_results(None, False))


def test_bad_noise_seed_raises():
  spec = canary_spec.CanarySpec(seed=3, num_seen=1, num_unseen=0, schedule=[[0]])
  with pytest.raises(ValueError, match='noise_seed'):
    ca.CanaryDPFactory.gaussian_fixed(noise_multiplier=1.0,
                                      clients_per_round=1.0, clip=1.0,
                                      spec=spec, noise_seed=-1)
