"""Tests of one_shot_epe.jax_engine.training: a whole run's shapes and costs.

Independent truths: the two local-training strategies against each other on
the same run, a resumed run against an uninterrupted one, the order of the
reports from the buffer and checkpoint rhythm, the examples counted from the
clients' sizes and from the packed arrays the rounds built, the run with
host-fed batches for the run with the split resident on the device (and the
bytes each sends, counted from the arrays' shapes), and the bound on
compilations whatever the cohort sizes (Poisson sampling draws a new one
every round).
"""

import os

import jax
import numpy as np
import pytest

from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.design import canary_spec
from one_shot_epe.data import client_arrays
from one_shot_epe.design import participation
from one_shot_epe.runtime import round_record
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import memory
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.jax_engine import packing
from one_shot_epe.jax_engine import run_stats
from one_shot_epe.jax_engine import training

import tiny_jax

def _plan(**overrides) -> run_plan.RunPlan:
  settings = dict(
      sampler=participation.PoissonSampling(12, 4.0, seed=1),
      spec=canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                  schedule=[[0], [1, 2], [], [3], []],
                                  buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                   clients_per_round=4.8),
      delta=1e-3,
      client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', 1.0),
      batch_size=2, epochs=1, max_examples=None, total_rounds=5, seed=4,
      noise_seed=None, rounds_per_checkpoint=3, rounds_per_evaluation=2)
  settings.update(overrides)
  return run_plan.RunPlan(**settings)


def _train(directory: str, **kwargs):
  stats = run_stats.RunStats()
  recorder = tiny_jax.Recorder()
  store = checkpoints.TrainingStateCheckpoints(directory)
  outcome = training.train(_plan(), tiny_jax.MODEL, tiny_jax.arrays(),
                           tiny_jax.arrays(), store,
                           recorder, stats=stats, **kwargs)
  return outcome, stats, recorder.events


@pytest.fixture(scope='module', name='runs')
def fixture_runs(tmp_path_factory):
  runs = {}
  for name, kwargs in (('loop', dict(local_training='loop')),
                       ('vmap', dict(local_training='vmap')),
                       ('host_fed', dict(local_training='vmap',
                                         resident_data=False))):
    # The packed arrays' examples, and those of their lanes' filled part
    # (up to the last client's last batch of any lane): what the rounds'
    # computations hold, and at least what their loops process.
    processed, filled = [], []
    with pytest.MonkeyPatch.context() as patch:
      for function in ('pack_batches', 'pack_rows'):
        def recorded(*args, _function=getattr(packed_batches, function)):
          packed = _function(*args)
          examples = getattr(packed, 'rows', None)
          if examples is None:
            examples = packed.example_mask
          processed.append(np.shape(examples))
          ends = np.flatnonzero(packed.end.any(axis=0))
          filled.append(int(np.prod(np.shape(examples))) //
                        packed.end.shape[1] * (int(ends.max(initial=-1)) + 1))
          return packed
        patch.setattr(packed_batches, function, recorded)
      runs[name] = _train(str(tmp_path_factory.mktemp(name)), **kwargs) + (
          (sum(int(np.prod(shape)) for shape in processed), sum(filled)),)
  return runs


def _cosines(events):
  return [e for e in events if isinstance(e, round_record.CanaryCosines)]


def test_both_strategies_give_the_same_run(runs):
  (loop, _, loop_events, _), (vmap, _, vmap_events, _) = (runs['loop'],
                                                         runs['vmap'])
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima'):
    np.testing.assert_allclose(getattr(loop, field), getattr(vmap, field),
                               rtol=1e-4, atol=1e-6)
  loop_rows, vmap_rows = _cosines(loop_events), _cosines(vmap_events)
  assert [row.round_num for row in loop_rows] == [1, 2, 3, 4, 5]
  np.testing.assert_allclose([row.seen_max for row in loop_rows],
                             [row.seen_max for row in vmap_rows], atol=1e-6)


def test_rounds_are_reported_before_their_cosines_and_checkpoints(runs):
  # Buffer of 2, checkpoints at 0, 3, 5: blocks {1, 2}, {3} (flushed at the
  # checkpoint), {4, 5}; each round's record precedes its cosines.
  _, _, events, _ = runs['loop']
  order = [(type(e).__name__, e.round_num) for e in events]
  assert order == [('RoundRecord', 0), ('RoundRecord', 1), ('RoundRecord', 2),
                   ('CanaryCosines', 1), ('CanaryCosines', 2),
                   ('RoundRecord', 3), ('CanaryCosines', 3),
                   ('RoundRecord', 4), ('RoundRecord', 5),
                   ('CanaryCosines', 4), ('CanaryCosines', 5)]
  record = events[1]
  assert list(record.metrics) == ['clip', 'aggregate_norm',
                                  'canaries_inserted', 'num_clients',
                                  'training_time_in_seconds']
  assert record.clip == record.metrics['clip'] and record.seconds > 0
  assert record.metrics['canaries_inserted'] == 1  # schedule[0] == [0].
  # Round 0 (a new run) and every 2nd round carry the test set's metrics.
  evaluated = {e.round_num: e.metrics for e in events
               if isinstance(e, round_record.RoundRecord) and
               'evaluation/loss' in e.metrics}
  assert sorted(evaluated) == [0, 2, 4]
  assert list(evaluated[0]) == ['evaluation/accuracy', 'evaluation/loss',
                                'evaluation/num_examples']
  assert evaluated[2]['evaluation/num_examples'] == (
      tiny_jax.arrays().offsets[-1])  # Every test example.


def test_round_0_evaluation_is_the_initial_models_test_metrics(runs):
  # numpy over every test example, from the initial parameters.
  _, _, events, _ = runs['loop']
  arrays = tiny_jax.arrays()
  pixels, labels = arrays.features['pixels'], arrays.features['label']
  params = tiny_jax.MODEL.init(jax.random.PRNGKey(4))  # The plan's seed.
  logits = np.asarray(tiny_jax.MODEL.logits(params, pixels), np.float64)
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  metrics = events[0].metrics
  assert events[0].round_num == 0
  assert metrics['evaluation/accuracy'] == pytest.approx(
      np.mean(logits.argmax(-1) == labels), abs=1e-9)
  assert metrics['evaluation/loss'] == pytest.approx(
      -log_probs[np.arange(labels.size), labels].mean(), rel=1e-5)


def test_a_resumed_run_equals_an_uninterrupted_one(runs, tmp_path):
  directory = str(tmp_path / 'checkpoints')
  _train(directory, local_training='loop')
  store = checkpoints.TrainingStateCheckpoints(directory)
  assert store.rounds() == [0, 3, 5] and store.latest() == 5
  os.remove(os.path.join(directory, 'round_00000005.npz'))
  resumed, _, events = _train(directory, local_training='loop')
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (3, 2)
  assert [e.round_num for e in events
          if isinstance(e, round_record.RoundRecord)] == [4, 5]
  uninterrupted = runs['loop'][0]
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima'):
    np.testing.assert_array_equal(getattr(resumed, field),
                                  getattr(uninterrupted, field))


def test_compilations_are_bounded_whatever_the_cohorts(runs):
  sampler = _plan().sampler
  cohorts = {len(sampler.indices(t)) for t in range(5)}
  assert len(cohorts) > 1  # Poisson: several cohort sizes.
  assert runs['loop'][1].compiles == 3
  # One layout for the run: one compiled round.
  assert runs['vmap'][1].compiles == runs['host_fed'][1].compiles == 1


def test_padding_is_counted_from_the_clients_sizes(runs):
  plan = _plan()
  sizes = tiny_jax.arrays().client_sizes()
  cohorts = [sizes[plan.sampler.indices(t)] for t in range(5)]
  real = sum(int(cohort.sum()) for cohort in cohorts)
  steps = sum(int(np.ceil(cohort / 2).sum()) for cohort in cohorts)
  loop_stats, vmap_stats = runs['loop'][1], runs['vmap'][1]
  assert loop_stats.real_examples == vmap_stats.real_examples == real
  assert loop_stats.padded_examples == 2 * steps  # Only partial batches pad.
  assert loop_stats.padding_ratio <= 1.2
  # 'vmap': its loops process at least the lanes' filled part and at most
  # the packed arrays its rounds built.
  for name in ('vmap', 'host_fed'):
    arrays, filled = runs[name][3]
    assert filled <= runs[name][1].padded_examples <= arrays, name
  assert runs['host_fed'][1].padded_examples == vmap_stats.padded_examples
  assert vmap_stats.vmap_padded_examples == vmap_stats.padded_examples
  assert 2 * steps <= vmap_stats.padded_examples <= 2 * 1.5 * steps
  # 'loop' counts what a fresh packing of each round's clients processes.
  fresh = 0
  for cohort in cohorts:
    lanes, length = packing.lane_layout(np.maximum(np.ceil(cohort / 2), 1))
    fresh += 2 * len(lanes) * length
  assert loop_stats.vmap_padded_examples == fresh
  assert loop_stats.rounds == 5 and loop_stats.host_to_device_bytes > 0


def test_resident_data_gives_the_host_fed_run_and_sends_only_rows(runs):
  (resident, stats, events, _), (host, host_stats, host_events, _) = (
      runs['vmap'], runs['host_fed'])
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima'):
    np.testing.assert_allclose(getattr(resident, field), getattr(host, field),
                               rtol=1e-6, atol=1e-7)
  assert resident.accuracy == host.accuracy
  assert ([e.clip for e in events if isinstance(e, round_record.RoundRecord)]
          == pytest.approx([e.clip for e in host_events
                            if isinstance(e, round_record.RoundRecord)]))
  arrays = tiny_jax.arrays()
  assert stats.resident_bytes == (arrays.features['pixels'].nbytes +
                                  arrays.features['label'].nbytes)
  assert host_stats.resident_bytes == runs['loop'][1].resident_bytes == 0
  per_example = 8 * 8 * 4 + 4  # float32 pixels and an int32 label.
  assert stats.example_bytes == stats.real_examples * per_example
  # Host-fed: the packed batches (pixels, labels, mask) and their per-batch
  # fields; resident: an int32 row per packed example and those fields.
  per_batch = 4 * 4  # slot, batch_index, start, end.
  packed = runs['host_fed'][3][0]
  assert runs['vmap'][3][0] == packed
  batches = packed // 2
  canary_masks = 5 * 2 * 4  # A float32 canary mask (2 slots) per round.
  assert host_stats.host_to_device_bytes == (
      packed * (per_example + 4) + batches * per_batch + canary_masks)
  assert stats.host_to_device_bytes == (
      packed * 4 + batches * per_batch + canary_masks)


@pytest.mark.slow
def test_a_realistic_round_sends_under_one_percent_of_its_examples(tmp_path):
  # EMNIST-sized examples (28 x 28 float32), realistic client sizes (mean
  # 198), batches of 16, about 10 clients a round: the rows and per-batch
  # fields sent are < 1% of the bytes of the examples trained on.
  arrays = client_arrays.synthetic_emnist(40, 198, seed=2, sizes='realistic')
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=arrays.client_ids, offsets=arrays.offsets,
      features={'pixels': arrays.features['pixels'],
                'label': arrays.features['label'] % 5})
  model = models.EmnistCnn(conv1_filters=1, conv2_filters=1, dense_units=2,
                           num_classes=5, image_size=28)
  plan = _plan(sampler=participation.PoissonSampling(40, 10.0, seed=1),
               spec=canary_spec.CanarySpec(seed=3, num_seen=1, num_unseen=1,
                                           schedule=[[0], []]),
               dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                            clients_per_round=10.0),
               batch_size=16, total_rounds=2, rounds_per_checkpoint=2)
  stats = run_stats.RunStats()
  training.train(plan, model, arrays, None,
                 checkpoints.TrainingStateCheckpoints(str(tmp_path)),
                 local_training='vmap', stats=stats)
  assert stats.real_examples > 1000
  assert stats.resident_bytes >= arrays.features['pixels'].nbytes
  assert stats.host_to_device_bytes <= 0.01 * stats.example_bytes
  # The estimate before the run counts the split it uploaded.
  need = memory.device_memory(plan, model, arrays, local_training='vmap')
  assert need.resident and need.data_bytes == stats.resident_bytes


def test_bad_local_training_is_named():
  with pytest.raises(ValueError, match='local_training'):
    training.make_round_engine(_plan(), tiny_jax.MODEL, local_training='scan')


def test_damaged_newest_checkpoint_is_named(tmp_path):
  store = checkpoints.TrainingStateCheckpoints(str(tmp_path))
  store.verify()  # Nothing to check.
  with open(tmp_path / 'round_00000002.npz', 'wb') as stream:
    stream.write(b'PK not a zip')
  with pytest.raises(checkpoint_store.CheckpointError,
                     match='round_00000002.npz.*is not an .npz archive.*Delete it'):
    store.verify()
