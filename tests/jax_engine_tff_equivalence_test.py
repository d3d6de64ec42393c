"""The JAX engine against the TFF path, the oracle (softmax regression, CPU).

Same initial weights, same clients' batches, same canaries and schedule:
`tff.learning.algorithms.build_unweighted_fed_avg` with this project's canary
DP factory (built by `audit.CanaryAudit`, cohort arithmetic included) versus
`jax_engine.round_engine.RoundEngine` with the same
`canary_spec.DPAggregation`. Without noise both must give the same model, clip and noised aggregate (hence the same canary
cosines) after several rounds, with fixed and with adaptive clipping. With
noise, the per-coordinate noise of both has the same law (KS tests).
"""

import jax
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
import tensorflow_federated as tff

import linear_model
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import audit
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import runtime
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import round_engine

FEATURES, CLASSES, CLIENTS, EXAMPLES, BATCH, ROUNDS = 5, 3, 4, 8, 4, 4
DIM = FEATURES * CLASSES + CLASSES
CLIENT_LR, SERVER_LR, SERVER_MOMENTUM = 0.5, 1.0, 0.9


def linear_loss(params, x, y, mask, key=None):
  """Masked mean cross entropy of softmax regression, params = [W, b]."""
  del key
  kernel, bias = params
  logp = jax.nn.log_softmax(x @ kernel + bias)
  ce = -jax.numpy.take_along_axis(logp, y[:, None], axis=1)[:, 0]
  return jax.numpy.sum(ce * mask) / jax.numpy.maximum(jax.numpy.sum(mask), 1.)


def _round_arrays(round_num: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(100 + round_num)
  x = rng.normal(size=(CLIENTS, EXAMPLES, FEATURES)).astype(np.float32)
  y = rng.integers(0, CLASSES, size=(CLIENTS, EXAMPLES)).astype(np.int32)
  return x, y


def _tff_data(round_num: int) -> list[tf.data.Dataset]:
  x, y = _round_arrays(round_num)
  return [tf.data.Dataset.from_tensor_slices((x[i], y[i])).batch(BATCH)
          for i in range(CLIENTS)]


def _jax_batches(round_num: int) -> data.RoundBatches:
  x, y = _round_arrays(round_num)
  shape = (CLIENTS, EXAMPLES // BATCH, BATCH)
  return data.RoundBatches(
      inputs=x.reshape(shape + (FEATURES,)), labels=y.reshape(shape),
      example_mask=np.ones(shape, np.float32),
      client_mask=np.ones(CLIENTS, np.float32))


def _audit() -> audit.CanaryAudit:
  return audit.CanaryAudit(num_canaries=6, num_unseen_canaries=0,
                           rounds=ROUNDS, repetitions=2,
                           clients_per_round=CLIENTS, delta=1e-3,
                           canary_seed=11, noise_seed=3)


def _flat(weights) -> np.ndarray:
  return np.concatenate([np.asarray(w).ravel() for w in weights])


@pytest.fixture(scope='module', autouse=True)
def _context():
  with runtime.local_cpp_context():
    yield


def _tff_rounds(factory, rounds: int):
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      linear_model.model_fn_for(FEATURES, CLASSES),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(CLIENT_LR),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          SERVER_LR, momentum=SERVER_MOMENTUM),
      model_aggregator=factory)
  state = process.initialize()
  initial = [np.asarray(w) for w in state.global_model_weights.trainable]
  aggregates = []
  for t in range(rounds):
    state = process.next(state, _tff_data(t)).state
    aggregates.append(np.asarray(state.aggregator.aggregate))
  return initial, _flat(state.global_model_weights.trainable), aggregates


def _jax_rounds(dp: canary_spec.DPAggregation, initial, canary_audit,
                rounds: int):
  engine = round_engine.RoundEngine(
      linear_loss, optimizers.Optimizer('sgd', CLIENT_LR),
      optimizers.Optimizer('sgdm', SERVER_LR, momentum=SERVER_MOMENTUM),
      dp, client_dropout=False)
  seen = canary_spec.seen_ids(canary_audit.spec.num_seen)
  directions = np.stack([canaries.canary(11, int(j), DIM).numpy()
                         for j in seen])
  state = engine.init_state([np.asarray(w) for w in initial])
  aggregates, clips = [], []
  for t in range(rounds):
    inserted = set(canary_audit.spec.schedule[t])
    mask = np.asarray([j in inserted for j in seen], np.float32)
    state, output = engine(state, _jax_batches(t), directions, mask,
                           jax.random.PRNGKey(t))
    aggregates.append(np.asarray(output.aggregate))
    clips.append(float(output.clip))
  return _flat(state.params), aggregates, directions


@pytest.mark.parametrize('adaptive', [False, True])
def test_noise_free_rounds_equal_the_tff_path(adaptive):
  canary_audit = _audit()
  cohort = canary_audit.expected_cohort
  if adaptive:
    factory = canary_audit.gaussian_adaptive(
        noise_multiplier=0.0, initial_l2_norm_clip=0.05,
        target_unclipped_quantile=0.5, learning_rate=0.2)
    dp = canary_spec.DPAggregation(noise_multiplier=0.0,
                                   clients_per_round=cohort, initial_clip=0.05,
                                   target_unclipped_quantile=0.5,
                                   clip_learning_rate=0.2)
  else:
    factory = canary_audit.gaussian_fixed(noise_multiplier=0.0, clip=0.05)
    dp = canary_spec.DPAggregation(noise_multiplier=0.0,
                                   clients_per_round=cohort, clip=0.05)
  initial, tff_final, tff_aggregates = _tff_rounds(factory, ROUNDS)
  jax_final, jax_aggregates, directions = _jax_rounds(dp, initial,
                                                      canary_audit, ROUNDS)
  assert np.linalg.norm(tff_final - _flat(initial)) > 0.01  # It trained.
  np.testing.assert_allclose(jax_final, tff_final, rtol=1e-4, atol=1e-6)
  for tff_aggregate, jax_aggregate in zip(tff_aggregates, jax_aggregates):
    np.testing.assert_allclose(jax_aggregate, tff_aggregate, rtol=1e-4,
                               atol=1e-7)
    cosines = [directions @ a / np.linalg.norm(a)
               for a in (tff_aggregate, jax_aggregate)]
    np.testing.assert_allclose(cosines[1], cosines[0], atol=1e-5)


def test_noise_has_the_tff_paths_law():
  # At z = 1000 the clipped updates and canaries (total norm <= 10 S) are
  # below 1% of the noise's per-coordinate std z S: the aggregate times
  # cohort / (z S) is N(0, 1) per coordinate on both paths, up to that.
  canary_audit, z, clip = _audit(), 1000.0, 1.0
  cohort = canary_audit.expected_cohort
  samples = []
  initial, _, tff_aggregates = _tff_rounds(
      canary_audit.gaussian_fixed(noise_multiplier=z, clip=clip), 3)
  samples.append(np.concatenate(tff_aggregates) * cohort / (z * clip))
  _, jax_aggregates, _ = _jax_rounds(
      canary_spec.DPAggregation(noise_multiplier=z, clients_per_round=cohort, clip=clip),
      initial, canary_audit, 3)
  samples.append(np.concatenate(jax_aggregates) * cohort / (z * clip))
  for sample in samples:
    assert scipy.stats.kstest(sample, 'norm').pvalue > 1e-3
  assert scipy.stats.ks_2samp(*samples).pvalue > 1e-3
