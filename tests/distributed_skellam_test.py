"""Distributed Skellam noise for distributed DP (`DistributedDP(noise='skellam')`).

Independent truths: TFF's own `DistributedDpSumFactory(mechanism=
'distributed_skellam')` (its calibration, read from its measurements),
tensorflow_privacy's Skellam query (which reports no epsilon), the Skellam
RDP bound of Agarwal, Kairouz and Liu (2021, Theorem 3.5) written in the
unscaled units of its authors' accounting code and converted to (eps, delta)
here, the Skellam variance (the noise shares, and the decoded aggregate of
the same encoding that carries the canaries: Andrew et al., ICLR 2024,
Sec. 4), and the launcher's flag checks.
"""

import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
# TFF 0.87 does not export the factory at tff.aggregators.
from tensorflow_federated.python.aggregators import distributed_dp as tff_ddp

import tiny_run
from experiments import train_config
from one_shot_epe.design import canary_spec
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.tff_engine import distributed_dp_aggregator
from one_shot_epe.tff_engine import runtime

DIM = 20
VALUE_TYPE = tff.TensorType(np.float32, [DIM])


def _authors_epsilon(scale: float, l2: float, l1: float, central_var: float,
                     rounds: int, delta: float) -> float:
  """The Skellam RDP in unscaled units (the authors' parametrisation).

  rdp(a) = a l2^2 / (2 mu) + min(((2a - 1) s l2^2 + 6 l1) / (4 s^3 mu^2),
  3 l1 / (2 s mu)), with l2, l1 the rounded bounds over s and mu the central
  variance over s^2; converted with the refined RDP conversion
  eps = min_a rdp_T(a) + log(1 - 1/a) - log(delta a) / (a - 1).
  """
  best = math.inf
  for order in tuple(range(2, 129)) + (256,):
    rdp = order / (2 * central_var) * l2**2 + min(
        ((2 * order - 1) * scale * l2**2 + 6 * l1) /
        (4 * scale**3 * central_var**2),
        3 * l1 / (2 * scale * central_var))
    rdp *= rounds
    best = min(best, rdp + math.log1p(-1 / order) -
               math.log(delta * order) / (order - 1))
  return best


@pytest.mark.slow
def test_calibration_and_epsilon_match_tffs_skellam_factory():
  z, clip, n, bits = 0.7, 0.5, 4, 16
  tff_process = tff_ddp.DistributedDpSumFactory(
      noise_multiplier=z, expected_clients_per_round=n, bits=bits,
      l2_clip=clip, mechanism='distributed_skellam',
      rotation_type='hd').create(VALUE_TYPE)
  with tff.framework.get_context_stack().install(
      tff.backends.test.create_sync_test_cpp_execution_context()):
    metrics = tff_process.next(tff_process.initialize(),
                               [np.zeros(DIM, np.float32)] * n).measurements
  cal = distributed_dp.calibrate(
      z, clip, n, DIM, distributed_dp.DistributedDP(bits=bits,
                                                    noise='skellam'))
  assert cal.noise == 'skellam'
  assert cal.padded_dim == metrics['padded_dim'] == 32
  np.testing.assert_allclose(cal.scale, metrics['scale_factor'], rtol=1e-6)
  np.testing.assert_allclose(cal.scaled_l2_bound,
                             metrics['scaled_inflated_l2'], rtol=1e-5)
  # Skellam's local stddev is not rounded (float32 in TFF's state).
  np.testing.assert_allclose(cal.local_stddev,
                             metrics['scaled_local_stddev'], rtol=1e-6)
  # TFF's L1 bound of the query, from its own measurements.
  tff_l2 = float(metrics['scaled_inflated_l2'])
  tff_l1 = math.ceil(tff_l2 * min(math.sqrt(32), tff_l2))
  np.testing.assert_allclose(cal.scaled_l1_bound, tff_l1, rtol=1e-6)
  # TFF and tensorflow_privacy compute no epsilon for Skellam.
  query = tfp.DistributedSkellamSumQuery(
      l1_norm_bound=tff_l1, l2_norm_bound=tff_l2,
      local_stddev=float(metrics['scaled_local_stddev']))
  global_state = query.initial_global_state()
  sample_state = query.initial_sample_state(tf.zeros([4], tf.int32))
  _, _, event = query.get_noised_result(sample_state, global_state)
  assert isinstance(event, dp_accounting.UnsupportedDpEvent)
  rounds, delta = 5, 1e-5
  scale = float(metrics['scale_factor'])
  central_var = n * (float(metrics['scaled_local_stddev']) / scale) ** 2
  expected = _authors_epsilon(scale, tff_l2 / scale, tff_l1 / scale,
                              central_var, rounds, delta)
  ours = distributed_dp.skellam_epsilon(cal, delta, rounds)
  assert ours == pytest.approx(expected, rel=1e-5)
  # Its leading term is the Gaussian RDP of z_eff; the correction is small.
  gaussian = dp_accounting.rdp.RdpAccountant(
      distributed_dp.SKELLAM_RDP_ORDERS)
  gaussian.compose(dp_accounting.GaussianDpEvent(cal.noise_multiplier),
                   rounds)
  assert gaussian.get_epsilon(delta) <= ours <= 1.01 * gaussian.get_epsilon(
      delta)
  setting = cal.setting()
  assert setting['ddp_noise'] == 'skellam'
  assert 'Thm 3.5' in setting['ddp_accounting']


def test_skellam_sampler_has_its_variance():
  samples = distributed_dp_aggregator._skellam(
      7.3, tf.constant([200_000])).numpy()
  assert samples.dtype == np.int64
  expected = 7.3**2
  assert abs(np.var(samples) - expected) < 5 * expected * math.sqrt(
      2.0 / 200_000)
  assert abs(np.mean(samples)) < 5 * 7.3 / math.sqrt(200_000)


def test_decoded_skellam_noise_has_the_summed_variance():
  dp = canary_spec.DPAggregation(noise_multiplier=2.0, clients_per_round=3.0,
                                 clip=1.0)
  spec = canary_spec.CanarySpec(seed=3, num_seen=2, num_unseen=2,
                                schedule=[[]] * 6, canary_clip='project',
                                repetitions=1)
  factory = distributed_dp_aggregator.CanaryDistributedDPFactory(
      dp, distributed_dp.DistributedDP(bits=16, noise='skellam'), spec,
      rotation_seed=1)
  with runtime.local_cpp_context():
    process = factory.create(VALUE_TYPE)
    state, samples = process.initialize(), []
    for _ in range(6):
      state = process.next(state, [np.zeros(DIM, np.float32)] * 3).state
      samples.append(np.asarray(state.aggregate))
  cal = factory.calibration(DIM)
  samples = np.concatenate(samples)
  # Three Skellam shares of variance sigma_l^2, rotated back, unscaled.
  expected = 3 * cal.local_stddev**2 / (cal.scale * dp.clients_per_round)**2
  standard_error = expected * math.sqrt(2.0 / samples.size)
  assert abs(np.mean(samples**2) - expected) < 5 * standard_error
  np.testing.assert_allclose(cal.noise_multiplier, 2.0, rtol=0.02)


def test_bad_noise_is_refused_naming_it(tmp_path):
  with pytest.raises(ValueError,
                     match=r"noise must be one of \['dgauss', 'skellam'\]"):
    distributed_dp.DistributedDP(noise='laplace')
  with pytest.raises(train_config.ConfigError, match='--ddp_noise=skellam'):
    tiny_run.config(str(tmp_path), ddp_noise='skellam').validate()
  with pytest.raises(train_config.ConfigError, match='ddp_noise'):
    tiny_run.config(str(tmp_path), ddp_noise='laplace').validate()
  with pytest.raises(ValueError, match='skellam_rdp accounts'):
    distributed_dp.skellam_rdp(distributed_dp.calibrate(
        1.0, 1.0, 4, DIM, distributed_dp.DistributedDP()))
