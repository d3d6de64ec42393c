"""Tests for one_shot_epe.tff_engine.accelerators (device of the launcher's canary work).

The GPU tests run only where TensorFlow sees a GPU and skip cleanly
elsewhere; there the canary cosine maxima computed on the GPU must match the
CPU's (float32 matmuls may round differently: rtol 1e-5).
"""

import numpy as np
import pytest
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import accelerators
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import cosine_tracking

_HAS_GPU = bool(tf.config.list_logical_devices('GPU'))


def test_cpu_is_the_default_device():
  assert accelerators.launcher_device('cpu') == '/CPU:0'


@pytest.mark.parametrize('bad', ['tpu', 'GPU', '', None])
def test_unknown_accelerator_is_named(bad):
  with pytest.raises(ValueError, match='--accelerator must be one of'):
    accelerators.launcher_device(bad)


@pytest.mark.skipif(_HAS_GPU, reason='a GPU is visible')
def test_gpu_request_without_gpu_is_a_clear_error():
  with pytest.raises(ValueError, match='--accelerator=gpu.*no GPU'):
    accelerators.launcher_device('gpu')


def _maxima(device):
  dim, rounds = 5000, 6
  spec = canary_spec.CanarySpec(seed=4, num_seen=30, num_unseen=30,
                                schedule=[[0]] * rounds, buffer_rounds=4)
  tracker = cosine_tracking.CosineTracker(spec, dim, device=device)
  rng = np.random.default_rng(0)
  for round_num in range(rounds):
    aggregate = rng.normal(size=dim).astype(np.float32)
    tracker.observe(aggregator_state.CanaryAggregatorState(
        query_state=(), agg_state=(), dp_event=(), is_init_state=False,
        round_num=round_num + 1, aggregate=aggregate))
  maxima = tracker.maxima()
  return np.concatenate([maxima.seen, maxima.unseen])


@pytest.mark.skipif(not _HAS_GPU, reason='no GPU visible')
def test_gpu_tracking_matches_cpu():
  device = accelerators.launcher_device('gpu')
  np.testing.assert_allclose(_maxima(device), _maxima('/CPU:0'), rtol=1e-5)
