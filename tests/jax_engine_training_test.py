"""Tests of one_shot_epe.jax_engine.training: a whole run's shapes and costs.

Independent truths: the two local-training strategies against each other on
the same run, the examples counted from the clients' sizes, and the bound on
compilations whatever the cohort sizes (Poisson sampling draws a new one
every round).
"""

import dataclasses

import numpy as np
import pytest

from one_shot_epe import canary_spec
from one_shot_epe import client_arrays
from one_shot_epe import participation
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import training


def _plan(**overrides) -> training.Plan:
  arrays = client_arrays.synthetic_emnist(12, 9, seed=2, sizes='realistic')
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=arrays.client_ids, offsets=arrays.offsets,
      features={'pixels': arrays.features['pixels'][:, :8, :8],
                'label': arrays.features['label'] % 5})
  settings = dict(
      model=models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                             num_classes=5, image_size=8),
      train=arrays, test=arrays,
      sampler=participation.PoissonSampling(12, 4.0, seed=1),
      canaries=canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                      schedule=[[0], [1, 2], [], [3], []],
                                      buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                   clients_per_round=4.8),
      client_optimizer=optimizers.Optimizer('sgd', 0.1),
      server_optimizer=optimizers.Optimizer('sgd', 1.0),
      batch_size=2, epochs=1, max_examples=None, total_rounds=5, seed=4)
  settings.update(overrides)
  return training.Plan(**settings)


@pytest.fixture(scope='module', name='runs')
def fixture_runs(tmp_path_factory):
  runs = {}
  for strategy in ('loop', 'vmap'):
    stats = training.RunStats()
    cosines = []
    outcome = training.train(
        _plan(local_training=strategy), str(tmp_path_factory.mktemp(strategy)),
        rounds_per_checkpoint=3, on_cosines=cosines.extend, stats=stats)
    runs[strategy] = (outcome, stats, cosines)
  return runs


def test_both_strategies_give_the_same_run(runs):
  (loop, _, loop_rows), (vmap, _, vmap_rows) = runs['loop'], runs['vmap']
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima'):
    np.testing.assert_allclose(getattr(loop, field), getattr(vmap, field),
                               rtol=1e-4, atol=1e-6)
  assert [row.round_num for row in loop_rows] == [1, 2, 3, 4, 5]
  np.testing.assert_allclose([row.seen_max for row in loop_rows],
                             [row.seen_max for row in vmap_rows], atol=1e-6)


def test_compilations_are_bounded_whatever_the_cohorts(runs):
  sampler = _plan().sampler
  cohorts = {len(sampler.indices(t)) for t in range(5)}
  assert len(cohorts) > 1  # Poisson: several cohort sizes.
  assert runs['loop'][1].compiles == 3
  assert runs['vmap'][1].compiles <= 3


def test_padding_is_counted_from_the_clients_sizes(runs):
  plan = _plan()
  sizes = plan.train.client_sizes()
  real = sum(int(sizes[plan.sampler.indices(t)].sum()) for t in range(5))
  steps = sum(int(np.ceil(sizes[plan.sampler.indices(t)] / 2).sum())
              for t in range(5))
  loop_stats, vmap_stats = runs['loop'][1], runs['vmap'][1]
  assert loop_stats.real_examples == vmap_stats.real_examples == real
  assert loop_stats.padded_examples == 2 * steps  # Only partial batches pad.
  assert loop_stats.padding_ratio <= 1.2
  assert vmap_stats.padding_ratio == pytest.approx(
      loop_stats.vmap_padding_ratio)
  assert vmap_stats.padding_ratio > loop_stats.padding_ratio
  assert loop_stats.rounds == 5 and loop_stats.host_to_device_bytes > 0


def test_bad_local_training_is_named():
  with pytest.raises(ValueError, match='local_training'):
    training.round_engine(dataclasses.replace(_plan(),
                                              local_training='scan'))
