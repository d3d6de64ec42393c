"""Tests of packed client lanes (jax_engine.packing,
packed_batches.pack_batches and fedavg.packed_round).

Independent truths: the padded work counted directly from the lanes; the
'loop' strategy of RoundEngine (each client's real batches, one jitted step
each) for the packed round; the host-gathered batches for the rows of a
split resident on the device (packed_batches.pack_rows, RoundEngine.upload).
"""

import numpy as np
import pytest
import jax

from one_shot_epe.design import canary_spec
from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import compat
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.jax_engine import packing
from one_shot_epe.jax_engine import round_engine

# Mean examples per client of the federated EMNIST-62 and StackOverflow
# training splits (671,585 / 3,400 and 135.8M / 342,477), batches of 16.
_MEAN_EXAMPLES = {'emnist': 198, 'stackoverflow': 397}
_BATCH_SIZE = 16


@pytest.mark.parametrize('kind', sorted(_MEAN_EXAMPLES))
@pytest.mark.parametrize('cohort', [10, 40, 101, 167])
def test_packed_lanes_stay_within_the_padding_bound(kind, cohort):
  for seed in range(5):
    sizes = client_arrays.client_sizes(kind, cohort, _MEAN_EXAMPLES[kind],
                                       'realistic', seed)
    counts = np.maximum(-(-sizes // _BATCH_SIZE), 1)
    lanes, length = packing.lane_layout(counts)
    # Every client in exactly one lane, no lane over its length.
    assert sorted(c for lane in lanes for c in lane) == list(range(cohort))
    assert max(counts[lane].sum() for lane in lanes) <= length
    assert len(lanes) * length / counts.sum() <= 1.15
    # The per-slot padding this replaces is well above the bound.
    if cohort >= 40:
      assert cohort * counts.max() / counts.sum() > 1.5


@pytest.mark.parametrize('kind', sorted(_MEAN_EXAMPLES))
def test_one_layout_for_a_whole_run_stays_within_the_padding_bound(kind):
  # 40 Poisson-sampled rounds of about 101 clients of realistic sizes.
  cohorts = np.random.default_rng(0).poisson(101, 40)
  rounds = [np.maximum(-(-client_arrays.client_sizes(
      kind, int(n), _MEAN_EXAMPLES[kind], 'realistic', t) // _BATCH_SIZE), 1)
            for t, n in enumerate(cohorts)]
  assert packing.run_lanes(rounds, lane_multiple=4)[0] % 4 == 0
  lanes, length = packing.run_lanes(rounds)
  real = sum(int(c.sum()) for c in rounds)

  def work(num_lanes):
    return sum(num_lanes * packing.lane_capacity(c, num_lanes) for c in rounds)

  # The most lanes within the bound.
  assert work(lanes) / real <= 1.15 < work(lanes + 1) / real
  for counts in rounds:
    capacity = packing.lane_capacity(counts, lanes)
    # The shortest lanes that hold the round's clients in `lanes` lanes.
    assert len(packing.first_fit_decreasing(counts, capacity)) <= lanes
    assert (capacity == max(counts.max(), -(-counts.sum() // lanes)) or
            len(packing.first_fit_decreasing(counts, capacity - 1)) > lanes)
  assert length == max(packing.lane_capacity(c, lanes) for c in rounds)
  # At least half as parallel as a fresh layout per round (which may use
  # fewer lanes in a round with a giant client, more in the others).
  assert lanes >= 0.5 * np.median([len(packing.lane_layout(c)[0])
                                   for c in rounds])


@pytest.mark.parametrize('kind', sorted(_MEAN_EXAMPLES))
def test_a_runs_layout_bounds_its_processed_over_real_examples(kind):
  # Bounded on batches alone, EMNIST's run processed 1.19x its examples:
  # the clients' partial last batches (3.8% of its batches) came on top.
  # Given the examples, the brute-forced work of every lane count says the
  # chosen one is the most within 1.15x the examples.
  cohorts = np.random.default_rng(1).poisson(101, 20)
  sizes = [client_arrays.client_sizes(kind, int(n), _MEAN_EXAMPLES[kind],
                                      'realistic', t)
           for t, n in enumerate(cohorts)]
  rounds = [np.maximum(-(-s // _BATCH_SIZE), 1) for s in sizes]
  examples = sum(int(s.sum()) for s in sizes)
  lanes, _ = packing.run_lanes(
      rounds, real_batches=[s.sum() / _BATCH_SIZE for s in sizes])

  def ratio(num_lanes):
    return sum(num_lanes * packing.lane_capacity(c, num_lanes) * _BATCH_SIZE
               for c in rounds) / examples

  assert ratio(lanes) <= 1.15 < ratio(lanes + 1)
  assert ratio(packing.run_lanes(rounds)[0]) >= ratio(lanes)
  with pytest.raises(ValueError, match='real_batches'):
    packing.run_lanes(rounds, real_batches=[1.0])


def test_lane_multiple_and_errors():
  lanes, length = packing.lane_layout([3, 3, 3], lane_multiple=4)
  assert len(lanes) == 4 and length == 3 and lanes[3] == []
  with pytest.raises(ValueError, match='lane_batches must be >= 5'):
    packing.first_fit_decreasing([5, 1], 4)
  with pytest.raises(ValueError, match='batch_counts must be >= 1'):
    packing.lane_layout([0, 2])


def _cnn_arrays():
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                         num_classes=5, image_size=8)
  arrays = client_arrays.synthetic_emnist(7, 5, seed=3)
  # Clients of 1, 3, 5, 2, 0 (no examples), 14 and 5 examples.
  offsets = np.asarray([0, 1, 4, 9, 11, 11, 25, 30])
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=arrays.client_ids, offsets=offsets,
      features={'pixels': arrays.features['pixels'][:30, :8, :8],
                'label': arrays.features['label'][:30] % 5})
  return cnn, arrays


@pytest.mark.slow
@pytest.mark.parametrize('adaptive', [True, False])
def test_packed_round_equals_the_loop_round(adaptive):
  cnn, arrays = _cnn_arrays()
  if adaptive:
    config = canary_spec.DPAggregation(noise_multiplier=0.5,
                                       clients_per_round=6.0,
                                       initial_clip=0.05)
  else:
    config = canary_spec.DPAggregation(noise_multiplier=0.5,
                                       clients_per_round=6.0, clip=0.05)
  client_optimizer = optimizers.Optimizer('sgdm', 0.1, momentum=0.5)
  server_optimizer = optimizers.Optimizer('adam', 0.01)
  engine = round_engine.RoundEngine(cnn.loss, client_optimizer,
                                    server_optimizer, config,
                                    canary_clip='project',
                                    local_training='loop',
                                    devices=jax.devices()[:1])
  state = engine.init_state(cnn.init(compat.prng_key(1)))
  directions = np.random.default_rng(4).normal(size=(2, cnn.num_parameters()))
  canary_mask = np.asarray([1.0, 0.0])
  key = compat.prng_key(2)
  batches = data.client_batches(
      arrays, [0, 1, 2, 3, 4, 5, 6], batch_size=2, epochs=1,
      max_examples=None, rng=np.random.default_rng(5), num_slots=8)
  # Batches per slot: 1, 2, 3, 1, 1 (empty), 7, 3. Lanes of several clients,
  # one client, and none; one lane ends on an empty batch.
  lanes = [[2, 0, 1, 4], [5], [6, 3], []]
  packed = packed_batches.pack_batches(batches, lanes, 8)
  np.testing.assert_array_equal(packed.start.sum(axis=1), [4, 1, 2, 0])
  np.testing.assert_array_equal(packed.end.sum(axis=1), [4, 1, 2, 0])
  np.testing.assert_array_equal(packed.example_mask.sum(axis=(1, 2)),
                                [9, 14, 7, 0])
  want_state, want = engine(state, batches, directions, canary_mask, key)

  @jax.jit
  def run(state, packed_arrays, slot_keys):
    return fedavg.packed_round(
        cnn.loss, client_optimizer, server_optimizer, config, 'project',
        True, state, packed_batches.PackedBatches(*packed_arrays), slot_keys,
        directions.astype(np.float32), canary_mask.astype(np.float32), key)

  got_state, got = run(
      state, (packed.inputs, packed.labels, packed.example_mask, packed.slot,
              packed.batch_index, packed.start, packed.end),
      fedavg.client_keys(key, 8))
  np.testing.assert_allclose(got.aggregate, want.aggregate, rtol=2e-4,
                             atol=1e-7)
  np.testing.assert_allclose(got.unclipped_fraction, want.unclipped_fraction,
                             rtol=1e-6)
  np.testing.assert_allclose(got_state.clip, want_state.clip, rtol=1e-6)
  assert float(got.num_clients) == float(want.num_clients) == 7
  assert np.abs(np.asarray(want.aggregate)).max() > 0


def test_vmap_engine_compiles_once_for_cohorts_that_fit_and_counts_padding():
  cnn, arrays = _cnn_arrays()
  config = canary_spec.DPAggregation(noise_multiplier=0.0,
                                     clients_per_round=4.0, clip=1.0)
  engines = {
      strategy: round_engine.RoundEngine(
          cnn.loss, optimizers.Optimizer('sgd', 0.1),
          optimizers.Optimizer('sgd', 1.0), config, canary_clip='project',
          local_training=strategy, devices=jax.devices()[:1])
      for strategy in round_engine.LOCAL_TRAINING}
  states = {s: e.init_state(cnn.init(compat.prng_key(1)))
            for s, e in engines.items()}
  # The largest round first; smaller cohorts reuse its layout.
  for t, clients in enumerate([[5, 2, 6, 1, 0], [2, 6], [5, 3, 4]]):
    batches = data.client_batches(
        arrays, clients, batch_size=2, epochs=1, max_examples=None,
        rng=np.random.default_rng([6, t]), num_slots=6, max_batches=7)
    if t == 0:
      # 7 + 3 + 3 + 2 + 1 batches in lanes of 8: two lanes, 16 batches.
      assert engines['vmap'].padded_examples(batches) == 16 * 2
      assert engines['loop'].padded_examples(batches) == 16 * 2
    for strategy, engine in engines.items():
      states[strategy], _ = engine(states[strategy], batches,
                                   np.zeros((0, cnn.num_parameters())),
                                   np.zeros(0), compat.prng_key(t))
  assert engines['vmap'].compiles == 1
  for got, want in zip(jax.tree_util.tree_leaves(states['vmap']),
                       jax.tree_util.tree_leaves(states['loop'])):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)


def test_packed_rows_gather_the_packed_batches():
  # Rows gathered from the split give pack_batches' arrays wherever there is
  # an example (padding positions differ only in the masked values).
  _, arrays = _cnn_arrays()
  make = dict(batch_size=2, epochs=2, max_examples=9, num_slots=8)
  rows = data.client_rows(arrays, [0, 1, 2, 3, 4, 5, 6],
                          rng=np.random.default_rng(5), **make)
  batches = data.client_batches(arrays, [0, 1, 2, 3, 4, 5, 6],
                                rng=np.random.default_rng(5), **make)
  np.testing.assert_array_equal(data.gather_rows(arrays, rows).inputs,
                                batches.inputs)
  lanes = [[2, 0, 1, 4], [5], [6, 3], []]
  packed_rows = packed_batches.pack_rows(rows, lanes, 10)
  packed = packed_batches.pack_batches(batches, lanes, 10)
  present = packed_rows.rows >= 0
  np.testing.assert_array_equal(present, packed.example_mask > 0)
  pixels = arrays.features['pixels'][np.maximum(packed_rows.rows, 0)]
  np.testing.assert_array_equal(pixels[present], packed.inputs[present])
  for name in ('slot', 'batch_index', 'start', 'end'):
    np.testing.assert_array_equal(getattr(packed_rows, name),
                                  getattr(packed, name))
  assert packed_rows.rows.dtype == np.int32


@pytest.mark.slow
def test_resident_rounds_equal_host_fed_rounds():
  cnn, arrays = _cnn_arrays()
  config = canary_spec.DPAggregation(noise_multiplier=0.5,
                                     clients_per_round=6.0, initial_clip=0.05)
  engines = {
      resident: round_engine.RoundEngine(
          cnn.loss, optimizers.Optimizer('sgdm', 0.1, momentum=0.5),
          optimizers.Optimizer('adam', 0.01), config,
          local_training='vmap', devices=jax.devices()[:1])
      for resident in (True, False)}
  engines[True].upload(arrays)
  assert engines[True].resident_bytes == (arrays.features['pixels'].nbytes +
                                          arrays.features['label'].nbytes)
  states = {r: e.init_state(cnn.init(compat.prng_key(1)))
            for r, e in engines.items()}
  directions = np.random.default_rng(4).normal(size=(1, cnn.num_parameters()))
  for t, clients in enumerate([[5, 2, 6, 1, 0], [2, 6], [5, 3, 4]]):
    for resident, engine in engines.items():
      make = data.client_rows if resident else data.client_batches
      batches = make(arrays, clients, batch_size=2, epochs=1,
                     max_examples=None, rng=np.random.default_rng([6, t]),
                     num_slots=6, max_batches=7)
      states[resident], _ = engine(states[resident], batches, directions,
                                   np.ones(1), compat.prng_key(t))
    # Rows: an int32 per processed example; batches: the examples and mask.
    examples = engines[True].padded_examples(batches)
    assert engines[False].upload_bytes - engines[True].upload_bytes == (
        examples * (8 * 8 * 4 + 4))
  for got, want in zip(jax.tree_util.tree_leaves(states[True]),
                       jax.tree_util.tree_leaves(states[False])):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match='upload'):
    engines[False](states[False], data.client_rows(
        arrays, [0], batch_size=2, epochs=1, max_examples=None,
        rng=np.random.default_rng(0), num_slots=1), directions, np.ones(1),
                   compat.prng_key(0))
  with pytest.raises(ValueError, match="local_training='vmap'"):
    round_engine.RoundEngine(cnn.loss, optimizers.Optimizer('sgd', 0.1),
                       optimizers.Optimizer('sgd', 1.0), config,
                       local_training='loop').upload(arrays)
