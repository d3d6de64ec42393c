"""Canaries that every engine and every jax version score alike.

Independent truths: coordinates of the JAX canaries stored here (drawn by
jax 0.4.14's `jax.random.normal`, the generator the engine pins; the test
runs in .venv's jax 0.4.14 and in .venv-jax's newest jax, whose own default
PRNG bits differ); a checkpoint's fingerprint edited by hand (as another
jax would have written it); and, for an all-zero aggregate, cosine 0 on the
JAX, TFF and Flower engines and in the core's statement of the rule
(`canary_spec.unit_rows`).
"""

import importlib.util
import io

import jax.numpy as jnp
import numpy as np
import pytest

from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import canaries as flower_canaries
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.runtime import checkpoint_store

# canaries.directions(3, [0, 5, 2**31 + 7], 1001)[:, :3] under jax 0.4.14.
STORED = [[0.03838301, 0.02326563, -0.00543099],
          [-0.00260272, 0.00159905, 0.01558992],
          [0.00597225, 0.0422064, 0.04337534]]


def test_canaries_are_the_stored_ones_whatever_the_jax():
  got = np.asarray(canaries.directions(3, [0, 5, 2**31 + 7], 1001))
  np.testing.assert_allclose(got[:, :3], STORED, rtol=0, atol=2e-8)
  np.testing.assert_allclose(canaries.fingerprint(), np.asarray(
      canaries.directions(0, [0, 1], 4)).reshape(-1), rtol=0, atol=1e-7)


def _store(tmp_path):
  store = checkpoints.TrainingStateCheckpoints(str(tmp_path))
  state = checkpoints.TrainingState(
      server=(np.ones(3, np.float32), np.zeros(2, np.float32)),
      maxima=np.zeros(4, np.float32), initial=np.ones(5, np.float32))
  store.save(state, 0)
  store.save(state, 2)
  return store, state


def _rewrite(path, **changes):
  """Rewrites the .npz at `path` with `changes` (None: the array removed)."""
  with np.load(path) as saved:
    arrays = {name: saved[name] for name in saved.files}
  for name, value in changes.items():
    if value is None:
      del arrays[name]
    else:
      arrays[name] = value
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  with open(path, 'wb') as stream:
    stream.write(buffer.getvalue())


def test_a_checkpoint_of_other_canaries_is_refused_in_one_line(tmp_path):
  store, state = _store(tmp_path)
  path = tmp_path / 'round_00000002.npz'
  with np.load(path) as saved:
    np.testing.assert_array_equal(saved[checkpoints.FINGERPRINT],
                                  canaries.fingerprint())
  store.verify()
  np.testing.assert_array_equal(store.load(2, state).initial, state.initial)
  # As another jax (or generator) would have written it.
  _rewrite(path, **{checkpoints.FINGERPRINT: -canaries.fingerprint()})
  for check in (store.verify, lambda: store.load(2, state)):
    with pytest.raises(checkpoint_store.CheckpointError,
                       match="'round_00000002.npz' was written with other "
                       'canaries') as error:
      check()
    assert '\n' not in str(error.value)
  # Rounding between jax versions is no other canaries.
  _rewrite(path, **{checkpoints.FINGERPRINT: canaries.fingerprint() + 1e-7})
  store.verify()
  # A checkpoint from before the fingerprint was kept resumes as it is.
  _rewrite(path, **{checkpoints.FINGERPRINT: None})
  store.verify()


def _block(dim):
  rng = np.random.default_rng(5)
  block = rng.normal(size=(3, dim)).astype(np.float32)
  block[1] = 0.0
  return block


def test_the_core_rule_zero_row_stays_zero():
  unit = canary_spec.unit_rows(_block(7))
  np.testing.assert_array_equal(unit[1], 0.0)
  np.testing.assert_allclose(np.linalg.norm(unit[[0, 2]], axis=1), 1.0)


def _expected(directions, block):
  return np.asarray(directions, np.float64) @ canary_spec.unit_rows(block).T


def test_zero_aggregate_has_cosine_zero_on_the_jax_engine():
  dim, ids = 50, [0, 1, 2**31]
  block = _block(dim)
  got = np.asarray(canaries.cosines(4, ids, block, chunk=2))
  np.testing.assert_allclose(
      got, _expected(canaries.directions(4, ids, dim), block), atol=1e-6)
  np.testing.assert_array_equal(got[:, 1], 0.0)
  np.testing.assert_array_equal(
      np.asarray(canaries.cosines(4, ids, jnp.zeros(dim))), 0.0)
  maxima = canaries.update_maxima(jnp.full(3, -jnp.inf), 4, ids,
                                  jnp.zeros(dim))
  np.testing.assert_array_equal(np.asarray(maxima), 0.0)


def test_zero_aggregate_has_cosine_zero_on_the_flower_engine():
  dim = 50
  spec = canary_spec.CanarySpec(seed=4, num_seen=2, num_unseen=2,
                                schedule=[[0, 1]])
  block = _block(dim)
  for cache_bytes in (0, 2**20):  # Regenerated and cached.
    bank = flower_canaries.CanaryBank(spec, dim, cache_bytes=cache_bytes)
    got = bank.cosines(block)
    np.testing.assert_allclose(got, _expected(
        flower_canaries.directions(4, bank.ids, dim), block), atol=1e-6)
    np.testing.assert_array_equal(got[:, 1], 0.0)


@pytest.mark.skipif(importlib.util.find_spec('tensorflow') is None,
                    reason='TensorFlow is absent')
def test_zero_aggregate_has_cosine_zero_on_the_tff_engine():
  from one_shot_epe.tff_engine import canaries as tff_canaries  # pylint: disable=g-import-not-at-top
  dim, ids = 50, [0, 1, 2]
  block = _block(dim)
  got = tff_canaries.cosines(4, ids, block, chunk_size=2).numpy()
  directions = tff_canaries.cosines(4, ids, np.eye(dim, dtype=np.float32),
                                    chunk_size=2).numpy()
  np.testing.assert_allclose(got, _expected(directions, block), atol=1e-5)
  np.testing.assert_array_equal(got[:, 1], 0.0)
