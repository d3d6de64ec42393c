"""Tests of one_shot_epe.jax_engine.fedavg and client_training (one round).

Independent truths: a float64 numpy re-implementation of the round on a
softmax-regression model with a hand-derived gradient (local SGD over masked
batches, clipping, canaries, cohort division, server optimizers); the closed
form of the adaptive clip's geometric update; dp_accounting for the noise
split of adaptive clipping; KS tests for the noise; a per-client loop for the
vmapped path; and one device for the sharded path (4 forced CPU devices in a
subprocess).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.stats
import jax
import jax.numpy as jnp

from one_shot_epe.design import canary_spec
from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import client_training
from one_shot_epe.jax_engine import compat
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import round_engine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEATURES, CLASSES = 3, 4


def linear_loss(params, x, y, mask, key=None):
  """Masked mean softmax cross entropy of a linear model (params = (W, b))."""
  del key
  w, b = params
  logp = jax.nn.log_softmax(x @ w + b)
  ce = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
  return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def _np_grad(params, x, y, mask):
  w, b = params
  z = x @ w + b
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  g = (p - np.eye(CLASSES)[y]) * mask[:, None] / max(mask.sum(), 1.0)
  return [x.T @ g, g.sum(0)]


class _NpOptimizer:
  """TFF's update rules, written out from their documentation."""

  def __init__(self, name, lr, momentum=0.0):
    self.name, self.lr, self.momentum = name, lr, momentum

  def init(self, params):
    zeros = [np.zeros_like(p) for p in params]
    return {'t': 0, 'a': zeros, 'p': [z.copy() for z in zeros]}

  def step(self, state, params, grads):
    if self.name == 'sgd':
      return state, [w - self.lr * g for w, g in zip(params, grads)]
    if self.name == 'sgdm':
      state['a'] = [self.momentum * a + g for a, g in zip(state['a'], grads)]
      return state, [w - self.lr * a for w, a in zip(params, state['a'])]
    state['t'] += 1
    t = state['t']
    state['a'] = [0.9 * a + 0.1 * g for a, g in zip(state['a'], grads)]
    state['p'] = [0.999 * p + 0.001 * g * g for p, g in zip(state['p'], grads)]
    lr = self.lr * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    return state, [w - lr * a / (np.sqrt(p) + 1e-7)
                   for w, a, p in zip(params, state['a'], state['p'])]


def _np_round(params, server_opt, server_state, client_opt, batches, clip,
              directions, canary_mask, cohort):
  """Noise-free round; returns (params, aggregate, norms)."""
  total = np.zeros(sum(p.size for p in params))
  norms = []
  for slot in range(batches.client_mask.size):
    if not batches.client_mask[slot]:
      continue
    weights = [p.copy() for p in params]
    state = client_opt.init(weights)
    for m in range(batches.example_mask.shape[1]):
      mask = batches.example_mask[slot, m].astype(np.float64)
      if not mask.any():
        continue
      grads = _np_grad(weights, batches.inputs[slot, m], batches.labels[slot,
                                                                        m],
                       mask)
      state, weights = client_opt.step(state, weights, grads)
    delta = np.concatenate([(p - w).ravel() for p, w in zip(params, weights)])
    norm = np.linalg.norm(delta)
    norms.append(norm)
    total += delta * min(1.0, clip / norm)
  for direction, inserted in zip(directions, canary_mask):
    if inserted:
      total += direction * clip / np.linalg.norm(direction)
  aggregate = total / cohort
  split = np.cumsum([p.size for p in params])[:-1]
  grads = [g.reshape(p.shape) for g, p in zip(np.split(aggregate, split),
                                              params)]
  server_state, params = server_opt.step(server_state, params, grads)
  return params, aggregate, np.asarray(norms)


def _linear_batches(seed, slots=4, batches=3, batch_size=2):
  """Random batches with a partial batch, an empty batch and an empty slot."""
  rng = np.random.default_rng(seed)
  mask = np.ones((slots, batches, batch_size), np.float32)
  mask[0, 2, 1] = 0.0  # Partial last batch.
  mask[1, 1:] = 0.0  # Client 1 has one batch only.
  mask[3] = 0.0  # Slot 3 is padding.
  client_mask = np.asarray([1, 1, 1, 0], np.float32)[:slots]
  return data.RoundBatches(
      inputs=rng.normal(size=(slots, batches, batch_size, FEATURES)).astype(
          np.float32),
      labels=rng.integers(0, CLASSES, (slots, batches, batch_size)),
      example_mask=mask, client_mask=client_mask)


def _linear_params(seed):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(FEATURES, CLASSES)).astype(np.float32),
          rng.normal(size=CLASSES).astype(np.float32))


@pytest.mark.parametrize('client_name,server_name,clip', [
    ('sgd', 'sgd', 0.4), ('sgdm', 'adam', 1.5), ('adam', 'sgdm', 1.5)])
def test_noise_free_rounds_equal_numpy_reference(client_name, server_name,
                                                 clip):
  client = optimizers.Optimizer(client_name, 0.3, momentum=0.9)
  server = optimizers.Optimizer(server_name, 0.5, momentum=0.8)
  cohort = 2.5
  config = canary_spec.DPAggregation(noise_multiplier=0.0, clients_per_round=cohort,
                                     clip=clip)
  engine = round_engine.RoundEngine(linear_loss, client, server, config)
  params = _linear_params(0)
  state = engine.init_state(params)
  ref_params = [p.astype(np.float64) for p in params]
  np_client = _NpOptimizer(client_name, 0.3, 0.9)
  np_server = _NpOptimizer(server_name, 0.5, 0.8)
  ref_state = np_server.init(ref_params)
  d = FEATURES * CLASSES + CLASSES
  directions = np.random.default_rng(1).normal(size=(2, d)).astype(np.float32)
  all_norms = []
  for t, canary_mask in enumerate([np.asarray([1., 0.]), np.asarray([1., 1.])]):
    batches = _linear_batches(10 + t)
    state, out = engine(state, batches, directions, canary_mask,
                        compat.prng_key(t))
    ref_params, aggregate, norms = _np_round(ref_params, np_server, ref_state,
                                             np_client, batches, clip,
                                             directions, canary_mask, cohort)
    all_norms.extend(norms)
    np.testing.assert_allclose(out.aggregate, aggregate, rtol=1e-4, atol=1e-6)
    assert float(out.num_clients) == 3 and float(out.canaries_inserted) == (
        canary_mask.sum())
  for got, want in zip(state.params, ref_params):
    # Adam's a / sqrt(p) magnifies float32 rounding of tiny updates.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=3e-5)
  # Clipped and unclipped clients both occurred.
  assert max(all_norms) > clip > min(all_norms)
  assert int(state.round_num) == 2 and float(state.clip) == pytest.approx(clip)


@pytest.mark.parametrize('canary_clip,canary_sign', [('project', 0.5),
                                                     ('clip', -0.5)])
def test_adaptive_clip_follows_the_geometric_update(canary_clip, canary_sign):
  cohort, gamma, eta, s0 = 4.0, 0.7, 0.3, 0.5
  config = canary_spec.DPAggregation(
      noise_multiplier=0.0, clients_per_round=cohort, initial_clip=s0,
      target_unclipped_quantile=gamma, clip_learning_rate=eta)
  engine = round_engine.RoundEngine(
      linear_loss, optimizers.Optimizer('sgd', 0.3),
      optimizers.Optimizer('sgd', 1.0), config, canary_clip=canary_clip)
  params = _linear_params(2)
  state = engine.init_state(params)
  batches = _linear_batches(3)
  _, _, norms = _np_round([p.astype(np.float64) for p in params],
                          _NpOptimizer('sgd', 1.0), {},
                          _NpOptimizer('sgd', 0.3), batches, s0,
                          np.zeros((0, 1)), [], cohort)
  directions = np.ones((1, FEATURES * CLASSES + CLASSES), np.float32)
  new_state, out = engine(state, batches, directions, np.ones(1),
                          compat.prng_key(0))
  unclipped = np.sum(norms <= s0) - 0.5 * norms.size + canary_sign
  b = min(max(unclipped / cohort + 0.5, 0.0), 1.0)
  assert float(out.unclipped_fraction) == pytest.approx(b, rel=1e-6)
  assert float(new_state.clip) == pytest.approx(
      s0 * np.exp(-eta * (b - gamma)), rel=1e-6)
  assert float(out.clip) == pytest.approx(s0)
  # The canary enters the sum with norm S_0 in both modes.
  no_canary_state, no_canary = engine(state, batches, directions, np.zeros(1),
                                      compat.prng_key(0))
  del no_canary_state
  canary_part = (np.asarray(out.aggregate) - np.asarray(no_canary.aggregate))
  assert np.linalg.norm(canary_part) * cohort == pytest.approx(s0, rel=1e-5)


def test_noise_has_the_configured_std_and_count_noise():
  cohort, z, sigma_b, clip = 5.0, 0.8, 1.0, 0.5
  config = canary_spec.DPAggregation(noise_multiplier=z, clients_per_round=cohort,
                                     initial_clip=clip, clip_learning_rate=0.0,
                                     clipped_count_stddev=sigma_b)
  engine = round_engine.RoundEngine(
      linear_loss, optimizers.Optimizer('sgd', 0.1),
      optimizers.Optimizer('sgd', 1.0), config)
  state = engine.init_state(_linear_params(0))
  batches = _linear_batches(0)
  batches = data.RoundBatches(batches.inputs, batches.labels,
                              batches.example_mask,
                              np.zeros_like(batches.client_mask))
  aggregates, fractions = [], []
  for t in range(150):
    _, out = engine(state, batches, np.zeros((0, 16), np.float32),
                    np.zeros(0), jax.random.fold_in(compat.prng_key(7), t))
    aggregates.append(np.asarray(out.aggregate))
    fractions.append(float(out.unclipped_fraction))
  z_v = (z**-2 - (2 * sigma_b)**-2)**-0.5
  std = z_v * clip / cohort
  assert scipy.stats.kstest(np.ravel(aggregates) / std, 'norm').pvalue > 1e-3
  # No record: b = N(0, sigma_b^2) / cohort + 1/2 (never clamped here).
  assert scipy.stats.kstest((np.asarray(fractions) - 0.5) * cohort / sigma_b,
                            'norm').pvalue > 1e-3
  # Fixed clip: std z S / cohort, and no unclipped fraction.
  fixed = round_engine.RoundEngine(
      linear_loss, optimizers.Optimizer('sgd', 0.1),
      optimizers.Optimizer('sgd', 1.0),
      canary_spec.DPAggregation(noise_multiplier=z, clients_per_round=cohort, clip=clip))
  fixed_state = fixed.init_state(_linear_params(0))
  outputs = [fixed(fixed_state, batches, np.zeros((0, 16), np.float32),
                   np.zeros(0), compat.prng_key(100 + t))[1] for t in range(60)]
  assert np.isnan(float(outputs[0].unclipped_fraction))
  samples = np.concatenate([np.asarray(out.aggregate) for out in outputs])
  assert scipy.stats.kstest(samples / (z * clip / cohort), 'norm'
                            ).pvalue > 1e-3


def test_vmapped_round_equals_a_per_client_loop():
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                         num_classes=5, image_size=8)
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=np.asarray(['a', 'b', 'c']),
      offsets=np.asarray([0, 3, 4, 9]),
      features={'pixels': np.random.default_rng(0).random((9, 8, 8),
                                                          np.float32),
                'label': np.arange(9, dtype=np.int32) % 5})
  batches = data.client_batches(arrays, [0, 1, 2], batch_size=2, epochs=1,
                                max_examples=None,
                                rng=np.random.default_rng(1), num_slots=4)
  client = optimizers.Optimizer('sgdm', 0.5, momentum=0.5)
  config = canary_spec.DPAggregation(noise_multiplier=0.0, clients_per_round=3.0,
                                     clip=0.05)
  engine = round_engine.RoundEngine(cnn.loss, client,
                              optimizers.Optimizer('sgd', 1.0), config,
                              client_dropout=False)
  params = cnn.init(compat.prng_key(4))
  _, out = engine(engine.init_state(params), batches,
                  np.zeros((0, cnn.num_parameters())), np.zeros(0),
                  compat.prng_key(0))
  total = 0.0
  for slot in range(3):
    delta = client_training.client_update(cnn.loss, client, params,
                                          batches.inputs[slot],
                                          batches.labels[slot],
                                          batches.example_mask[slot])
    flat = np.concatenate([np.ravel(x) for x in delta])
    total = total + flat * min(1.0, 0.05 / np.linalg.norm(flat))
  np.testing.assert_allclose(out.aggregate, total / 3.0, rtol=1e-4,
                             atol=1e-7)


def test_non_finite_updates_are_zeroed():
  params = (np.full((FEATURES, CLASSES), np.inf, np.float32),
            np.zeros(CLASSES, np.float32))
  batches = _linear_batches(0)
  delta = client_training.client_update(
      linear_loss, optimizers.Optimizer('sgd', 1.0), params,
      batches.inputs[0], batches.labels[0], batches.example_mask[0])
  assert all(not np.asarray(x).any() for x in delta)


_MULTI_DEVICE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import jax
    sys.path.insert(0, sys.argv[1])
    from one_shot_epe.design import canary_spec
    from one_shot_epe.data import client_arrays
    from one_shot_epe.jax_engine import compat, data, fedavg, models
    from one_shot_epe.jax_engine import optimizers
    from one_shot_epe.jax_engine import round_engine
    assert len(jax.devices()) == 4, jax.devices()
    cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                           num_classes=5, image_size=8)
    arrays = client_arrays.synthetic_emnist(6, 3, seed=2)
    arrays = client_arrays.ClientArrays(
        kind='emnist', client_ids=arrays.client_ids, offsets=arrays.offsets,
        features={'pixels': arrays.features['pixels'][:, :8, :8],
                  'label': arrays.features['label'] % 5})
    config = canary_spec.DPAggregation(noise_multiplier=0.3,
                                       clients_per_round=5.0)
    results = {}
    for devices in (jax.devices(), jax.devices()[:1]):
      engine = round_engine.RoundEngine(
          cnn.loss, optimizers.Optimizer('sgd', 0.1),
          optimizers.Optimizer('adam', 0.01), config, devices=devices,
          local_training='vmap')
      # 8 slots on both: the slots' dropout keys depend on their number.
      batches = data.client_batches(arrays, [0, 1, 2, 3, 5], batch_size=2,
                                    epochs=1, max_examples=None,
                                    rng=np.random.default_rng(0), num_slots=8)
      state = engine.init_state(cnn.init(compat.prng_key(1)))
      for t in range(2):
        state, out = engine(state, batches,
                            np.ones((1, cnn.num_parameters())), np.ones(1),
                            jax.random.fold_in(compat.prng_key(2), t))
      results[len(devices)] = dict(
          slots=engine.num_slots(5),
          params=np.concatenate([np.ravel(p) for p in state.params]).tolist(),
          clip=float(state.clip), clients=float(out.num_clients))
    print(json.dumps(results))
''')


@pytest.mark.slow
def test_sharded_round_on_four_devices_equals_one_device():
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=4',
             JAX_PLATFORMS='cpu')
  completed = subprocess.run(
      [sys.executable, '-c', _MULTI_DEVICE, REPO], env=env,
      capture_output=True, text=True, timeout=600, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  results = json.loads(completed.stdout.strip().splitlines()[-1])
  four, one = results['4'], results['1']
  assert four['slots'] == 8 and one['slots'] == 5  # num_slots(5).
  assert four['clients'] == one['clients'] == 5.0
  assert four['clip'] == pytest.approx(one['clip'], rel=1e-6)
  np.testing.assert_allclose(four['params'], one['params'], rtol=1e-5,
                             atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('canary_clip', ['project', 'clip'])
def test_loop_and_vmap_local_training_give_the_same_rounds(canary_clip):
  # The two strategies of RoundEngine against each other: a CNN with
  # dropout, clients of 1 to 5 examples in batches of 2 (partial and empty
  # batches), two padding slots, canaries, adaptive clipping and noise.
  cnn = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                         num_classes=5, image_size=8)
  arrays = client_arrays.synthetic_emnist(6, 5, seed=3)
  offsets = np.asarray([0, 1, 4, 9, 11, 16, 30])
  arrays = client_arrays.ClientArrays(
      kind='emnist', client_ids=arrays.client_ids, offsets=offsets,
      features={'pixels': arrays.features['pixels'][:30, :8, :8],
                'label': arrays.features['label'][:30] % 5})
  config = canary_spec.DPAggregation(noise_multiplier=0.5,
                                     clients_per_round=6.0, initial_clip=0.05)
  dim = cnn.num_parameters()
  directions = np.random.default_rng(4).normal(size=(2, dim))
  states, compiles = {}, {}
  for strategy in round_engine.LOCAL_TRAINING:
    engine = round_engine.RoundEngine(
        cnn.loss, optimizers.Optimizer('sgdm', 0.1, momentum=0.5),
        optimizers.Optimizer('adam', 0.01), config, canary_clip=canary_clip,
        local_training=strategy, devices=jax.devices()[:1])
    state = engine.init_state(cnn.init(compat.prng_key(1)))
    for t, clients in enumerate([[0, 1, 2, 3], [2, 4, 5], [1, 3, 4, 5]]):
      batches = data.client_batches(
          arrays, clients, batch_size=2, epochs=1, max_examples=None,
          rng=np.random.default_rng([5, t]), num_slots=6, max_batches=7)
      state, _ = engine(state, batches, directions,
                        np.asarray([1.0, float(t % 2)]),
                        jax.random.fold_in(compat.prng_key(2), t))
    states[strategy] = state
    compiles[strategy] = engine.compiles
  for got, want in zip(jax.tree_util.tree_leaves(states['loop']),
                       jax.tree_util.tree_leaves(states['vmap'])):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-6)
  assert float(states['loop'].clip) != pytest.approx(0.05)  # It adapted.
  # Three functions for loop; two packed layouts (rounds 0 and 1 do not fit
  # one layout; round 2 reuses the second).
  assert compiles == {'loop': 3, 'vmap': 2}


@pytest.mark.parametrize('overrides, error, message', [
    (dict(canary_clip='none'), ValueError, 'canary_clip'),
    (dict(local_training='scan'), ValueError, 'local_training'),
    (dict(config=None), TypeError, 'config must be a DPAggregation'),
])
def test_arguments_are_checked(overrides, error, message):
  arguments = dict(
      config=canary_spec.DPAggregation(noise_multiplier=0.0,
                                       clients_per_round=1.0))
  arguments.update(overrides)
  with pytest.raises(error, match=message):
    round_engine.RoundEngine(linear_loss, optimizers.Optimizer('sgd', 1.0),
                             optimizers.Optimizer('sgd', 1.0), **arguments)
