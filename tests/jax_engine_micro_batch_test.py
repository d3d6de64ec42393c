"""Tests of micro-batched local steps (data.micro_batches,
client_training.accumulated_step, RoundEngine.set_micro_batch,
packing.run_layout).

Independent truths: the whole-batch 'loop' round (one `local_step` per batch,
the engine's reference strategy) for rounds and a whole run whose batches
are cut into micro-batches; the padded examples counted by hand from the clients' sizes;
first-fit-decreasing lanes counted directly for the run layouts on real
Shakespeare role sizes and realistic EMNIST/StackOverflow client sizes.
"""

import numpy as np
import pytest
import jax

from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import compat
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.jax_engine import packing
from one_shot_epe.jax_engine import round_engine
from one_shot_epe.jax_engine import run_stats
from one_shot_epe.jax_engine import training

import tiny_jax

# Clients of 1, 3, 5, 2, 0 (no examples), 14 and 5 examples.
_OFFSETS = [0, 1, 4, 9, 11, 11, 25, 30]
_BATCH_SIZE = 4


def _cnn_arrays():
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                         num_classes=5, image_size=8)
  arrays = client_arrays.synthetic_emnist(7, 5, seed=3)
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=arrays.client_ids,
      offsets=np.asarray(_OFFSETS),
      features={'pixels': arrays.features['pixels'][:30, :8, :8],
                'label': arrays.features['label'][:30] % 5})
  return cnn, arrays


def _rounds(strategy, micro_batch, dropout, rounds=2):
  """Final state and last output of `rounds` rounds of all 7 clients."""
  cnn, arrays = _cnn_arrays()
  config = canary_spec.DPAggregation(noise_multiplier=0.3,
                                     clients_per_round=7.0,
                                     initial_clip=0.05)
  engine = round_engine.RoundEngine(
      cnn.loss, optimizers.Optimizer('sgdm', 0.1, momentum=0.5),
      optimizers.Optimizer('adam', 0.01), config, canary_clip='project',
      client_dropout=dropout, local_training=strategy,
      devices=jax.devices()[:1])
  engine.set_micro_batch(micro_batch)
  state = engine.init_state(cnn.init(compat.prng_key(1)))
  directions = np.random.default_rng(4).normal(size=(2, cnn.num_parameters()))
  padded = 0
  for t in range(rounds):
    batches = data.client_batches(
        arrays, range(7), batch_size=_BATCH_SIZE, epochs=1, max_examples=None,
        rng=np.random.default_rng([5, t]), num_slots=8)
    padded += engine.padded_examples(batches)
    state, output = engine(state, batches, directions, np.asarray([1.0, 0.0]),
                           compat.prng_key(t))
  return state, output, padded, engine


def _assert_same(got, want):
  for name in ('aggregate', 'clip', 'unclipped_fraction', 'num_clients'):
    np.testing.assert_allclose(getattr(got[1], name), getattr(want[1], name),
                               rtol=2e-4, atol=1e-7, err_msg=name)
  for a, b in zip(jax.tree_util.tree_leaves(got[0].params),
                  jax.tree_util.tree_leaves(want[0].params)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('strategy', round_engine.LOCAL_TRAINING)
@pytest.mark.parametrize('micro_batch', [1, 2])
def test_micro_batches_give_the_whole_batch_rounds(strategy, micro_batch):
  want = _rounds('loop', None, dropout=False)
  got = _rounds(strategy, micro_batch, dropout=False)
  _assert_same(got, want)
  assert np.abs(np.asarray(want[1].aggregate)).max() > 0


@pytest.mark.slow
def test_both_strategies_give_micro_batches_the_same_dropout():
  loop = _rounds('loop', 2, dropout=True)
  _assert_same(_rounds('vmap', 2, dropout=True), loop)
  # Dropout is drawn per micro-batch: not the whole batches' masks.
  whole = _rounds('loop', None, dropout=True)
  assert not np.allclose(whole[1].aggregate, loop[1].aggregate, atol=1e-6)


@pytest.mark.slow
def test_padding_is_counted_in_micro_batches():
  sizes = np.diff(_OFFSETS)
  # 'loop' runs each client's non-empty micro-batches, two rounds.
  for micro in (1, 2, 4):
    want = 2 * int(np.sum(-(-sizes // micro) * micro))
    assert _rounds('loop', micro, dropout=False, rounds=2)[2] == want
  # Whole batches of 4: 4 + 4 + 8 + 4 + 0 + 16 + 8.
  assert _rounds('loop', None, dropout=False, rounds=1)[2] == 44
  engine = _rounds('loop', 2, dropout=False, rounds=1)[3]
  # One micro-step computation per micro-batch count a batch has (1 and 2).
  assert sum(name == 'micro_step' for name, _ in engine._shapes) == 2  # pylint: disable=protected-access


def test_micro_batches_is_a_reshape_and_checks_its_divisor():
  _, arrays = _cnn_arrays()
  batches = data.client_batches(
      arrays, range(7), batch_size=_BATCH_SIZE, epochs=1, max_examples=None,
      rng=np.random.default_rng(0), num_slots=7)
  micro = data.micro_batches(batches, 2)
  assert micro.example_mask.shape == (7, 8, 2)
  np.testing.assert_array_equal(micro.inputs.reshape(batches.inputs.shape),
                                batches.inputs)
  # A client's examples stay a prefix: 14 examples fill 7 micro-batches.
  np.testing.assert_array_equal(packed_batches.slot_batch_counts(micro),
                                [1, 2, 3, 1, 1, 7, 3])
  with pytest.raises(ValueError, match='micro_batch must divide the batch '
                     'size 4; got 3'):
    data.micro_batches(batches, 3)
  with pytest.raises(ValueError, match='micro_batch'):
    round_engine.RoundEngine(
        models.EmnistCnn().loss, optimizers.Optimizer('sgd', 0.1),
        optimizers.Optimizer('sgd', 1.0),
        canary_spec.DPAggregation(noise_multiplier=0.0, clients_per_round=1.0,
                                  clip=1.0)).set_micro_batch(0)


def _processed_over_real(rounds, layout):
  """lanes x lane capacity x micro-batch over examples, counted directly."""
  processed = 0
  for examples in rounds:
    counts = np.maximum(-(-examples // layout.micro_batch), 1)
    lanes = packing.first_fit_decreasing(counts, layout.lane_length)
    assert len(lanes) <= layout.lanes
    length = max(sum(int(counts[i]) for i in lane) for lane in lanes)
    assert length <= layout.lane_length
    processed += layout.lanes * packing.lane_capacity(counts, layout.lanes)
  return processed * layout.micro_batch / sum(e.sum() for e in rounds)


def test_run_layout_cuts_batches_only_where_partial_batches_dominate():
  shakespeare = pytest.importorskip('one_shot_epe.data.shakespeare')
  roles = np.array([len(e) for e in shakespeare.load().train])
  rounds = [np.minimum(roles[np.random.default_rng(seed).choice(
      roles.size, 20, replace=False)], 64) for seed in range(40)]
  layout = packing.run_layout(rounds, 16)
  whole = packing.run_lanes([np.maximum(-(-e // 16), 1) for e in rounds],
                            real_batches=[e.sum() / 16 for e in rounds])
  whole_ratio = _processed_over_real(rounds, packing.RunLayout(16, *whole))
  assert whole_ratio > 1.3  # Partial batches of 16: no lane count helps.
  assert layout.micro_batch < 16
  assert _processed_over_real(rounds, layout) <= packing.MAX_PADDING_RATIO
  # Fewer sequential steps than whole batches, not only less padding.
  steps = sum(packing.lane_capacity(np.maximum(-(-e // layout.micro_batch),
                                               1), layout.lanes)
              for e in rounds)
  assert steps < sum(packing.lane_capacity(np.maximum(-(-e // 16), 1),
                                           whole[0]) for e in rounds)
  for kind, mean in (('emnist', 198), ('stackoverflow', 397)):
    rounds = [client_arrays.client_sizes(kind, 101, mean, 'realistic', seed)
              for seed in range(10)]
    layout = packing.run_layout(rounds, 16, lane_multiple=4)
    assert layout.micro_batch == 16 and layout.lanes % 4 == 0, kind
    assert _processed_over_real(rounds, layout) <= packing.MAX_PADDING_RATIO


class _CnnWithoutDropout(models.EmnistCnn):
  dropout_rates = (0.0, 0.0)


@pytest.mark.slow
def test_a_vmap_run_of_small_clients_takes_micro_batches(tmp_path):
  # Clients of mean 9 examples in batches of 8: partial batches dominate.
  # Without dropout the micro-batched 'vmap' run is the whole-batch 'loop'
  # run up to float rounding.
  model = _CnnWithoutDropout(conv1_filters=2, conv2_filters=2, dense_units=4,
                             num_classes=5, image_size=8)
  arrays = tiny_jax.arrays()
  plan = run_plan.RunPlan(
      sampler=participation.PoissonSampling(12, 4.0, seed=1),
      spec=canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                  schedule=[[0], [1, 2], [], [3]],
                                  buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                   clients_per_round=4.8),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', 1.0), batch_size=8,
      epochs=1, max_examples=None, total_rounds=4, seed=4, noise_seed=None,
      rounds_per_checkpoint=4)
  chosen = []
  outcomes, stats = {}, {}
  with pytest.MonkeyPatch.context() as patch:
    original = round_engine.RoundEngine.set_micro_batch

    def recorded(engine, micro_batch):
      chosen.append(micro_batch)
      original(engine, micro_batch)

    patch.setattr(round_engine.RoundEngine, 'set_micro_batch', recorded)
    for strategy in round_engine.LOCAL_TRAINING:
      stats[strategy] = run_stats.RunStats()
      outcomes[strategy] = training.train(
          plan, model, arrays, arrays,
          checkpoints.TrainingStateCheckpoints(str(tmp_path / strategy)),
          local_training=strategy, stats=stats[strategy])
  assert len(chosen) == 1 and chosen[0] < 8  # Only 'vmap' cuts batches.
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima'):
    np.testing.assert_allclose(getattr(outcomes['vmap'], field),
                               getattr(outcomes['loop'], field), rtol=1e-4,
                               atol=1e-6)
  assert stats['vmap'].compiles == 1
  sizes = arrays.client_sizes()
  micro = chosen[0]
  # Each client padded to a multiple of the micro-batch, at least.
  least = sum(int((-(-sizes[plan.sampler.indices(t)] // micro) * micro).sum())
              for t in range(4))
  assert least <= stats['vmap'].padded_examples < stats['loop'].padded_examples
