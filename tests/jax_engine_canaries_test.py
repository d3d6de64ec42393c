"""Tests of one_shot_epe.jax_engine.canaries (canaries on the accelerator).

Independent truths: the uniform law on the sphere (a coordinate of a uniform
unit vector times sqrt(d) is nearly N(0, 1); distinct canaries are nearly
orthogonal), numpy cosines of the same directions, and a running maximum
over rounds in numpy.
"""

import numpy as np
import pytest
import scipy.stats
import jax.numpy as jnp

from one_shot_epe.jax_engine import canaries

DIM = 2000


def test_directions_are_unit_pure_in_seed_and_id_and_uniform():
  first = np.asarray(canaries.directions(7, [0, 1, 2, 10**9], DIM))
  np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
  again = np.asarray(canaries.directions(7, [10**9, 1], DIM))
  np.testing.assert_array_equal(again, first[[3, 1]])
  other_seed = np.asarray(canaries.directions(8, [0], DIM))
  assert abs(float(other_seed[0] @ first[0])) < 5 / np.sqrt(DIM)
  many = np.asarray(canaries.directions(3, np.arange(200), DIM))
  assert scipy.stats.kstest(many[:, 0] * np.sqrt(DIM), 'norm').pvalue > 1e-3
  gram = many @ many.T - np.eye(200)
  assert np.abs(gram).max() < 6 / np.sqrt(DIM)


@pytest.mark.parametrize('chunk', [1, 3, 64])
def test_cosines_and_maxima_equal_numpy(chunk):
  rng = np.random.default_rng(0)
  ids = np.arange(10)
  units = np.asarray(canaries.directions(5, ids, DIM), np.float64)
  maxima = jnp.full(10, -jnp.inf)
  want = np.full(10, -np.inf)
  for _ in range(3):
    aggregate = rng.normal(size=DIM).astype(np.float32)
    got = np.asarray(canaries.cosines(5, ids, aggregate, chunk))
    expected = units @ aggregate / np.linalg.norm(aggregate)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    maxima = canaries.update_maxima(maxima, 5, ids, aggregate, chunk)
    want = np.maximum(want, expected)
  np.testing.assert_allclose(np.asarray(maxima), want, atol=1e-5)


@pytest.mark.parametrize('chunk', [1, 3, 128])
def test_block_cosines_are_each_rounds_cosines(chunk):
  # One regeneration per block of rounds gives what one per round gives.
  rng = np.random.default_rng(7)
  block = rng.normal(size=(4, DIM)).astype(np.float32)
  ids = [0, 5, 1_000_000_000, 1_000_000_003, 2]
  got = np.asarray(canaries.cosines(9, ids, block, chunk=chunk))
  assert got.shape == (5, 4)
  for row in range(4):
    np.testing.assert_allclose(
        got[:, row], canaries.cosines(9, ids, block[row], chunk=chunk),
        rtol=1e-5, atol=1e-7)


def test_arguments_are_checked():
  with pytest.raises(ValueError, match='ids'):
    canaries.directions(0, [], DIM)
  with pytest.raises(ValueError, match='ids'):
    canaries.directions(0, [-1], DIM)
  with pytest.raises(TypeError, match='seed'):
    canaries.directions(1.5, [0], DIM)
  with pytest.raises(ValueError, match='dim'):
    canaries.directions(0, [0], 0)
  with pytest.raises(ValueError, match='chunk'):
    canaries.cosines(0, [0], np.ones(DIM), chunk=0)
  with pytest.raises(ValueError, match='aggregate'):
    canaries.cosines(0, [0], np.ones((2, 2, DIM)))
