"""Tests for one_shot_epe.tff_engine.canaries: definition, reproducibility, null law."""

import hashlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries
from one_shot_epe.stats import null_distribution

_SEED = 20240917


def _reference(seed: int, canary_id: int, dim: int) -> np.ndarray:
  """The documented definition, straight from TF's stateless generator."""
  u = tf.random.stateless_normal([dim], seed=[seed, canary_id],
                                 dtype=tf.float32, alg='philox').numpy()
  return u.astype(np.float64) / np.linalg.norm(u.astype(np.float64))


def _digest(seed: int, ids, dim: int) -> str:
  return hashlib.sha256(b''.join(
      canaries.canary(seed, j, dim).numpy().tobytes() for j in ids)).hexdigest()


def test_canary_is_normalised_stateless_normal():
  for canary_id in (0, 5, canary_spec.UNSEEN_ID_OFFSET + 2):
    got = canaries.canary(_SEED, canary_id, 1000).numpy()
    np.testing.assert_allclose(got, _reference(_SEED, canary_id, 1000),
                               rtol=0, atol=1e-7)
    assert np.linalg.norm(got.astype(np.float64)) == pytest.approx(1, abs=1e-6)


def test_canary_ignores_global_seed():
  tf.random.set_seed(1)
  first = canaries.canary(_SEED, 3, 500).numpy()
  tf.random.set_seed(2)
  np.testing.assert_array_equal(first, canaries.canary(_SEED, 3, 500).numpy())


def test_canaries_bit_identical_across_processes_and_depend_on_seed():
  ids = [0, 1, 17, canary_spec.UNSEEN_ID_OFFSET]
  script = textwrap.dedent(f"""
      import tensorflow as tf
      tf.random.set_seed(987)  # Must not matter.
      from tests.canaries_test import _digest
      print('DIGEST', _digest({_SEED}, {ids}, 4097))
  """)
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=True)
  other = done.stdout.split('DIGEST ')[1].strip()
  assert other == _digest(_SEED, ids, 4097)
  assert _digest(_SEED + 1, ids, 4097) != other
  # Distinct ids are distinct canaries.
  assert (canaries.canary(_SEED, 0, 64).numpy() !=
          canaries.canary(_SEED, 1, 64).numpy()).all()


def test_distinct_canaries_have_null_cosines():
  # Theorem 3.1: the cosine of two independent uniform unit vectors follows the
  # exact null law (mean 0, variance 1/d). Disjoint pairs give 400 i.i.d.
  # cosines; KS against the exact null CDF at level 0.01, and d * mean(cos^2)
  # within 5 standard errors (sqrt(2/n)) of 1.
  dim, pairs = 4096, 400
  rows, norms = canaries.gaussians(_SEED, np.arange(2 * pairs), dim)
  rows = rows.numpy()
  np.testing.assert_allclose(norms.numpy(), np.linalg.norm(rows, axis=1),
                             rtol=1e-5)
  rows = rows.astype(np.float64)
  rows /= np.linalg.norm(rows, axis=1, keepdims=True)
  cos = np.sum(rows[0::2] * rows[1::2], axis=1)
  assert stats.kstest(
      cos, lambda x: null_distribution.null_cdf(x, dim)).pvalue > 0.01
  assert abs(dim * np.mean(cos**2) - 1) < 5 * np.sqrt(2 / pairs)


def test_id_ranges_are_disjoint():
  np.testing.assert_array_equal(canary_spec.seen_ids(3), [0, 1, 2])
  np.testing.assert_array_equal(
      canary_spec.unseen_ids(2),
      [canary_spec.UNSEEN_ID_OFFSET, canary_spec.UNSEEN_ID_OFFSET + 1])
  assert canary_spec.seen_ids(0).size == 0
  with pytest.raises(ValueError, match='num_seen'):
    canary_spec.seen_ids(canary_spec.UNSEEN_ID_OFFSET + 1)
  with pytest.raises(ValueError, match='num_unseen'):
    canary_spec.unseen_ids(-1)


@pytest.mark.parametrize('bad', [-1, 2**63, 1.5, True, '3'])
def test_bad_seed_raises(bad):
  with pytest.raises(ValueError, match='canary_seed'):
    canary_spec.check_seed(bad)


def test_flatten_unflatten_roundtrip_and_structure():
  specs = [tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([4], tf.float32)]
  assert canaries.flat_size(specs) == 10
  values = [np.arange(6, dtype=np.float32).reshape(2, 3),
            np.arange(6, 10, dtype=np.float32)]
  flat = canaries.flatten(values).numpy()
  np.testing.assert_array_equal(flat, np.arange(10))
  packed = canaries.unflatten(tf.constant(flat), specs)
  for got, want in zip(packed, values):
    np.testing.assert_array_equal(got.numpy(), want)
  structure = canaries.canary_structure(_SEED, 4, specs)
  assert [tuple(t.shape) for t in structure] == [(2, 3), (4,)]
  np.testing.assert_array_equal(
      canaries.flatten(structure).numpy(),
      canaries.canary(_SEED, 4, 10).numpy())


@pytest.mark.parametrize('chunk_size', [1, 3, 64])
def test_cosines_match_brute_force(chunk_size):
  dim = 300
  ids = np.array([0, 2, 5, 7, canary_spec.UNSEEN_ID_OFFSET + 1])
  rng = np.random.default_rng(0)
  vectors = rng.normal(size=(4, dim)).astype(np.float32)
  vectors[2] = 0.0  # A zero vector has cosine 0 by convention.
  got = tf.function(lambda v: canaries.cosines(_SEED, ids, v, chunk_size))(
      tf.constant(vectors)).numpy()
  want = np.zeros((ids.size, 4))
  for i, j in enumerate(ids):
    c = _reference(_SEED, int(j), dim)
    for b in (0, 1, 3):
      v = vectors[b].astype(np.float64)
      want[i, b] = c @ v / np.linalg.norm(v)
  np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
