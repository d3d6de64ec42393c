"""Tests of distributed DP with canaries (one_shot_epe.accounting.distributed_dp, TFF engine).

Independent truths: TFF's own `DistributedDpSumFactory` (its calibration,
read from its measurements, and its argument checks), dp_accounting's RDP
accountant (the accounted epsilon), the discrete Gaussian's and Skellam's
variances (the simulated noise, short rounds' included), and exact
arithmetic with no noise (a canary decoded through rotation, discretization
and the modulus), and the launcher's report against the calibration
recomputed here.
"""

import dataclasses
import json
import math
import os
import re
import sys

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
# TFF 0.87 does not export the factory at tff.aggregators.
from tensorflow_federated.python.aggregators import distributed_dp as tff_ddp

import linear_model
import programs
import tiny_run
from experiments import train
from experiments import train_config
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.design import canary_spec
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import audit
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import distributed_dp_aggregator
from one_shot_epe.tff_engine import runtime

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM = 20
VALUE_TYPE = tff.TensorType(np.float32, [DIM])


@pytest.fixture(autouse=True)
def _context():
  with runtime.local_cpp_context():
    yield


def _spec(schedule, num_seen=2) -> canary_spec.CanarySpec:
  return canary_spec.CanarySpec(seed=3, num_seen=num_seen, num_unseen=2,
                                schedule=schedule, canary_clip='project',
                                repetitions=1)


@pytest.mark.slow
def test_calibration_and_accounted_epsilon_match_tffs_factory():
  z, clip, n, bits = 0.7, 0.5, 4, 16
  tff_process = tff_ddp.DistributedDpSumFactory(
      noise_multiplier=z, expected_clients_per_round=n, bits=bits,
      l2_clip=clip, mechanism='distributed_dgauss',
      rotation_type='hd').create(VALUE_TYPE)
  # Its secure sums need TFF's test context (secure intrinsics simulated).
  with tff.framework.get_context_stack().install(
      tff.backends.test.create_sync_test_cpp_execution_context()):
    metrics = tff_process.next(tff_process.initialize(),
                               [np.zeros(DIM, np.float32)] * n).measurements
  cal = distributed_dp.calibrate(z, clip, n, DIM,
                                 distributed_dp.DistributedDP(bits=bits))
  assert cal.padded_dim == metrics['padded_dim'] == 32
  np.testing.assert_allclose(cal.scale, metrics['scale_factor'], rtol=1e-6)
  np.testing.assert_allclose(cal.scaled_l2_bound,
                             metrics['scaled_inflated_l2'], rtol=1e-5)
  # tensorflow_privacy's sampler rounds the local stddev up.
  assert cal.local_stddev == math.ceil(metrics['scaled_local_stddev'])
  tff_z = (math.sqrt(n) * math.ceil(metrics['scaled_local_stddev']) /
           metrics['scaled_inflated_l2'])
  np.testing.assert_allclose(cal.noise_multiplier, tff_z, rtol=1e-5)
  rounds, delta = 5, 1e-5
  accountant = dp_accounting.rdp.RdpAccountant()
  accountant.compose(dp_accounting.GaussianDpEvent(tff_z), rounds)
  ours = dp_fedavg.composed_gaussian_epsilon(cal.noise_multiplier, delta,
                                              rounds)
  # The RDP bound is looser than the exact Gaussian epsilon, not by much.
  assert ours <= accountant.get_epsilon(delta) <= 1.3 * ours


@pytest.mark.parametrize('bits, n', [(3, 16), (4, 40)])
def test_modulus_too_small_is_refused_as_tff_refuses_it(bits, n):
  with pytest.raises(ValueError, match='^bits='):
    distributed_dp.calibrate(1.0, 1.0, n, DIM,
                             distributed_dp.DistributedDP(bits=bits))
  with pytest.raises(ValueError):
    tff_ddp.DistributedDpSumFactory(
        noise_multiplier=1.0, expected_clients_per_round=n, bits=bits,
        l2_clip=1.0, mechanism='distributed_dgauss')


def test_overflowing_scale_is_refused():
  with pytest.raises(ValueError, match='^bits=22: the discretization scale'):
    # A large model: TFF's scale is capped at 1e6, times a clip of 100.
    distributed_dp.calibrate(0.0, 100.0, 1, 2 ** 20,
                             distributed_dp.DistributedDP(bits=22))


def test_decoded_noise_has_the_summed_discrete_gaussian_variance():
  dp = canary_spec.DPAggregation(noise_multiplier=2.0, clients_per_round=3.0,
                                 clip=1.0)
  factory = distributed_dp_aggregator.CanaryDistributedDPFactory(
      dp, distributed_dp.DistributedDP(bits=16), _spec([[]] * 8),
      rotation_seed=1)
  process = factory.create(VALUE_TYPE)
  cal = factory.calibration(DIM)
  state, samples = process.initialize(), []
  for _ in range(8):
    state = process.next(state, [np.zeros(DIM, np.float32)] * 3).state
    samples.append(np.asarray(state.aggregate))
  samples = np.concatenate(samples)
  # Rotated back, iid local shares keep their variance per coordinate.
  expected = (3 * distributed_dp.discrete_gaussian_variance(cal.local_stddev)
              / (cal.scale * dp.clients_per_round) ** 2)
  standard_error = expected * math.sqrt(2.0 / samples.size)
  assert abs(np.mean(samples ** 2) - expected) < 5 * standard_error
  # And z_eff is the central std over the clip, as intended.
  np.testing.assert_allclose(cal.noise_multiplier, 2.0, rtol=0.02)


@pytest.mark.parametrize('noise', distributed_dp.DDP_NOISES)
def test_short_rounds_get_the_missing_shares_and_full_rounds_none(noise):
  # n = 6 shares accounted. Short rounds: 2 clients (3 records with a
  # canary); full rounds: 6 clients, and 7 (one more share than n). The
  # decoded noise's variance over 4,096 coordinates a round estimates
  # max(records, n) shares' variance within 2.2% a round (standard error).
  dim, cohort, z = 4096, 6.0, 2.0
  value_type = tff.TensorType(np.float32, [dim])
  dp = canary_spec.DPAggregation(noise_multiplier=z, clients_per_round=cohort,
                                 clip=1.0)
  plan = [(2, []), (2, [0]), (2, []), (2, [1]), (6, []), (6, [0]), (7, [])]
  factory = distributed_dp_aggregator.CanaryDistributedDPFactory(
      dp, distributed_dp.DistributedDP(bits=20, noise=noise),
      _spec([ids for _, ids in plan]), rotation_seed=2)
  process = factory.create(value_type)
  cal = factory.calibration(dim)
  share = (distributed_dp.discrete_gaussian_variance(cal.local_stddev)
           if noise == 'dgauss' else cal.local_stddev**2)
  unit = share / (cal.scale * cohort)**2  # One share's, in the mean.
  # The accounted noise: z_eff over the scaled bound, as 6 shares.
  accounted = (cal.noise_multiplier * cal.scaled_l2_bound /
               (cal.scale * cohort))**2
  assert 6 * unit == pytest.approx(accounted, rel=1e-3)
  state, short = process.initialize(), []
  for t, (clients, ids) in enumerate(plan):
    output = process.next(state, [np.zeros(dim, np.float32)] * clients)
    state = output.state
    # The canary's record Proj(c; S) / cohort, stochastic rounding aside.
    signal = sum(canaries.canary(3, i, dim).numpy() for i in ids) / cohort
    noise_sample = np.asarray(state.aggregate) - signal
    shares = max(clients + len(ids), 6)
    variance = np.mean(noise_sample**2)
    assert abs(variance - shares * unit) < 5 * shares * unit * math.sqrt(
        2.0 / dim), (t, variance / unit)
    if clients == 2:
      short.append(variance)
  # Short rounds hold the accounted noise (2 or 3 shares: 1/3 or 1/2 of
  # it), and the event accounted is z_eff's, as for full rounds.
  assert np.mean(short) > 0.95 * accounted
  event = aggregator_state.extract_dp_event_from_state(state)
  full = distributed_dp.calibrate(
      z, 1.0, cohort, dim, distributed_dp.DistributedDP(bits=20, noise=noise))
  assert event.noise_multiplier == pytest.approx(full.noise_multiplier,
                                                 rel=1e-6)


def test_discrete_gaussian_sampler_has_its_variance():
  samples = distributed_dp_aggregator._discrete_gaussian(
      3, tf.constant([200_000]))
  expected = distributed_dp.discrete_gaussian_variance(3)
  assert abs(np.var(samples.numpy()) - expected) < 5 * expected * math.sqrt(
      2.0 / 200_000)
  assert np.all(np.asarray(samples) == np.round(samples))


def test_canary_survives_rotation_discretization_and_modulus_without_noise():
  dp = canary_spec.DPAggregation(noise_multiplier=0.0, clients_per_round=3.0,
                                 clip=1.0)
  factory = distributed_dp_aggregator.CanaryDistributedDPFactory(
      dp, distributed_dp.DistributedDP(bits=20), _spec([[0], [1]]),
      rotation_seed=5)
  process = factory.create(VALUE_TYPE)
  state = process.initialize()
  for t in range(2):
    output = process.next(state, [np.zeros(DIM, np.float32)] * 2)
    state = output.state
    aggregate = np.asarray(state.aggregate)
    direction = canaries.canary(3, t, DIM).numpy()
    assert output.measurements['canaries_inserted'] == 1
    cosine = aggregate @ direction / np.linalg.norm(aggregate)
    assert cosine == pytest.approx(1.0, abs=1e-5)
    # Proj(c; S) / cohort: norm S / 3.
    assert np.linalg.norm(aggregate) == pytest.approx(1.0 / 3.0, rel=1e-4)


@pytest.mark.slow
def test_canary_audit_runs_distributed_dp_end_to_end():
  features, classes, clients, rounds = 4, 2, 3, 3
  dp = canary_spec.DPAggregation(noise_multiplier=0.5, clients_per_round=4.0,
                                 clip=0.5)
  spec = _spec([[0], [1], [0, 1]][:rounds], num_seen=2)
  canary_audit = audit.CanaryAudit.from_spec(
      spec, dp, delta=1e-3, noise_seed=7,
      mechanism=mechanisms.DistributedDP(distributed_dp.DistributedDP(bits=16)))
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      linear_model.model_fn_for(features, classes),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=canary_audit.aggregator())
  state = process.initialize()
  canary_audit.observe(state)
  for t in range(rounds):
    state = process.next(state, linear_model.client_datasets(
        clients, features, classes, 8, 4, seed=t)).state
    canary_audit.observe(state)
  report = canary_audit.report().to_dict()
  dim = features * classes + classes
  cal = distributed_dp.calibrate(0.5, 0.5, 4, dim,
                                 distributed_dp.DistributedDP(bits=16))
  assert report['setting']['mechanism'] == 'distributed_dp'
  assert report['setting']['ddp_noise_multiplier'] == pytest.approx(
      cal.noise_multiplier)
  event = aggregator_state.extract_dp_event_from_state(state.aggregator)
  assert isinstance(event, dp_accounting.GaussianDpEvent)
  assert event.noise_multiplier == pytest.approx(cal.noise_multiplier,
                                                 rel=1e-6)
  expected = dp_fedavg.client_epsilon_of_event(event, 1e-3, None, rounds)
  assert report['accounted_epsilon'] == pytest.approx(expected.epsilon,
                                                      rel=1e-6)
  assert report['noise_multiplier'] == pytest.approx(cal.noise_multiplier)
  assert math.isfinite(report['analytical_epsilon'])


# The launcher (experiments/train.py --backend=tff).


@pytest.fixture(scope='module', name='ddp_run')
def fixture_ddp_run(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('ddp'))
  return train.run_training(tiny_run.config(
      root, mechanism='distributed_dp', compression='rotation_discretization',
      clipping_norm=1.0, noise_multiplier=0.5, total_rounds=2,
      rounds_per_checkpoint=2, canary_repeats=1))


@pytest.mark.slow
def test_launcher_reports_accounted_and_analytical_epsilon_of_ddp(ddp_run):
  with open(os.path.join(ddp_run.run_dir,
                         run_directory.REPORT_JSON_FILE)) as stream:
    report = json.load(stream)
  dim = report['dim']
  # 4 canaries once over 2 rounds: 3 clients + 2 canaries per round.
  cal = distributed_dp.calibrate(0.5, 1.0, 5.0, dim,
                                 distributed_dp.DistributedDP(bits=16))
  assert report['setting']['mechanism'] == 'distributed_dp'
  assert report['noise_multiplier'] == pytest.approx(cal.noise_multiplier)
  assert report['accounted_epsilon'] is not None
  assert report['analytical_epsilon'] is not None
  # The analytical epsilon is that of one Gaussian at z_eff (r = 1).
  expected = dp_fedavg.canary_epsilon(cal.noise_multiplier,
                                       report['delta'], 1).epsilon
  assert report['analytical_epsilon'] == pytest.approx(expected)


@pytest.mark.slow
def test_resume_with_another_mechanism_is_refused(ddp_run):
  changed = dataclasses.replace(ddp_run.config, mechanism='gaussian',
                                compression='none')
  with pytest.raises(train_config.ConfigError, match='--mechanism'):
    train.run_training(changed)


@pytest.mark.parametrize('overrides, named', [
    (dict(ddp_bits=3), '--ddp_bits: bits=3 is too small'),
    (dict(compression='none'), '--compression=none does not apply to '
     '--mechanism=distributed_dp'),
    (dict(mechanism='blt', compression='none'),
     '--backend=tff does not run --mechanism=blt'),
    (dict(clipping_norm=0.0), '--mechanism=distributed_dp needs a fixed clip '
     '(--clipping_norm > 0): each client\'s discretization scale'),
])
def test_bad_distributed_dp_flags_are_refused_untouched(tmp_path, overrides,
                                                        named):
  settings = dict(mechanism='distributed_dp',
                  compression='rotation_discretization', clipping_norm=1.0)
  settings.update(overrides)
  with pytest.raises(train_config.ConfigError, match=re.escape(named)):
    train.run_training(tiny_run.config(str(tmp_path), **settings))
  assert not os.listdir(tmp_path)


def test_command_line_unsupported_pair_exits_2(tmp_path):
  # distributed_dp takes its one compression by default; another is refused.
  done = programs.run(
      [sys.executable, '-m', 'experiments.train', '--use_synthetic_data',
       '--total_rounds=2', f'--root_output_dir={tmp_path}',
       '--mechanism=distributed_dp', '--clipping_norm=1', '--compression=none'],
      cwd=_REPO, timeout=300)
  assert done.returncode == 2, done.stderr
  assert ('--compression=none does not apply to --mechanism=distributed_dp'
          in done.stderr)
  assert 'Traceback' not in done.stderr
  assert not os.listdir(tmp_path)
