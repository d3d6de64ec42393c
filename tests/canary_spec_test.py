"""Tests of one_shot_epe.design.canary_spec: the canary plan and the DP round.

Independent truths: dp_accounting's RDP accountant (the adaptive clip's noise
split composes to the overall multiplier), counting by hand (schedule
tables, presentation counts), TFF's documented default for the
unclipped-count noise.
"""

import numpy as np
import pytest

from one_shot_epe.design import canary_spec


def _spec(**overrides) -> canary_spec.CanarySpec:
  args = dict(seed=3, num_seen=4, num_unseen=2, schedule=[[0, 2], [], [3]])
  args.update(overrides)
  return canary_spec.CanarySpec(**args)


def test_schedule_table_and_counts_are_the_schedule():
  spec = _spec()
  ids, offsets = spec.schedule_table()
  assert ids.tolist() == [0, 2, 3] and offsets.tolist() == [0, 2, 2, 3]
  assert spec.presentation_counts().tolist() == [1, 0, 1, 1]
  assert spec.presentation_counts(rounds=2).tolist() == [1, 0, 1, 0]
  assert spec.tracked_ids().tolist() == [
      0, 1, 2, 3, canary_spec.UNSEEN_ID_OFFSET,
      canary_spec.UNSEEN_ID_OFFSET + 1]
  assert all(isinstance(r, np.ndarray) for r in spec.schedule)


@pytest.mark.parametrize('overrides, name', [
    (dict(seed=-1), 'seed'),
    (dict(seed=2**32), 'seed'),
    (dict(repetitions=0), 'repetitions'),
    (dict(all_iterates_statistic='sum'), 'all_iterates_statistic'),
    (dict(final_model_statistic='mean'), 'final_model_statistic'),
    (dict(num_seen=0), 'num_seen'),
    (dict(num_unseen=-1), 'num_unseen'),
    (dict(buffer_rounds=0), 'buffer_rounds'),
    (dict(chunk_size=0), 'chunk_size'),
    (dict(schedule=[[0], [4]]), r'schedule\[1\]'),
    (dict(schedule=[[1, 1]]), r'schedule\[0\]'),
    (dict(schedule=[[0.5]]), r'schedule\[0\]'),
    (dict(schedule='01'), 'schedule'),
    (dict(canary_clip='scale'), 'canary_clip'),
])
def test_bad_config_raises(overrides, name):
  with pytest.raises(ValueError, match=name):
    _spec(**overrides)


def test_default_buffer_rounds_fit_768_mib():
  assert canary_spec.default_buffer_rounds(1_206_590) == 128
  assert canary_spec.default_buffer_rounds(4_050_000) == 49
  assert 49 * 4 * 4_050_000 <= 768 * 2**20 < 50 * 4 * 4_050_000
  assert canary_spec.default_buffer_rounds(2**30) == 1


def test_buffer_rounds_for_a_model_the_spec_first_then_the_capped_bound():
  # 768 MiB over 4 bytes x 4,050,000: 49 rounds (counted above).
  spec = _spec()
  assert spec.buffer_rounds_for(4_050_000) == 49
  assert spec.buffer_rounds_for(4_050_000, cap=10) == 10
  assert spec.buffer_rounds_for(4_050_000, cap=100) == 49
  assert spec.buffer_rounds_for(1_206_590, cap=1000) == 128
  assert _spec(buffer_rounds=7).buffer_rounds_for(4_050_000, cap=3) == 7
  with pytest.raises(ValueError, match='cap'):
    spec.buffer_rounds_for(4_050_000, cap=0)


def test_dp_aggregation_defaults_and_noise_split():
  fixed = canary_spec.DPAggregation(noise_multiplier=0.7,
                                    clients_per_round=20.0, clip=1.5)
  assert not fixed.adaptive and fixed.update_noise_multiplier == 0.7
  adaptive = canary_spec.DPAggregation(noise_multiplier=0.7,
                                       clients_per_round=20.0)
  # TFF's default: 0.05 x the expected cohort; none without noise.
  assert adaptive.adaptive and adaptive.count_stddev == pytest.approx(1.0)
  assert canary_spec.DPAggregation(
      noise_multiplier=0.0, clients_per_round=20.0).count_stddev == 0.0
  assert adaptive.update_noise_multiplier == pytest.approx(
      canary_spec.value_noise_multiplier(0.7, 1.0))
  assert adaptive.update_noise_multiplier > 0.7


@pytest.mark.parametrize('kwargs, name', [
    (dict(clients_per_round=0.0), 'clients_per_round'),
    (dict(noise_multiplier=-1.0), 'noise_multiplier'),
    (dict(clip=0.0), 'clip'),
    (dict(target_unclipped_quantile=1.0), 'target_unclipped_quantile'),
    (dict(clip_learning_rate=-0.1), 'clip_learning_rate'),
    (dict(noise_multiplier=1.0, clients_per_round=10.0),
     'clipped_count_stddev must exceed'),
])
def test_bad_dp_aggregation_raises(kwargs, name):
  args = dict(noise_multiplier=0.5, clients_per_round=30.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    canary_spec.DPAggregation(**args)
  with pytest.raises(TypeError, match='noise_multiplier must be a real'):
    canary_spec.DPAggregation(noise_multiplier='1', clients_per_round=1.0)


def test_noise_split_gives_the_overall_multiplier():
  dp_accounting = pytest.importorskip('dp_accounting')
  z, sigma_b = 1.1, 3.0
  z_v = canary_spec.value_noise_multiplier(z, sigma_b)

  def epsilon(event):
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(event, 50)
    return accountant.get_epsilon(1e-6)

  both = dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(z_v),
      dp_accounting.GaussianDpEvent(2 * sigma_b)])
  assert epsilon(both) == pytest.approx(
      epsilon(dp_accounting.GaussianDpEvent(z)), rel=1e-6)
  assert canary_spec.value_noise_multiplier(0.0, 0.0) == 0.0
  with pytest.raises(ValueError, match='clipped_count_stddev must exceed'):
    canary_spec.DPAggregation(noise_multiplier=1.0, clients_per_round=10.0)
