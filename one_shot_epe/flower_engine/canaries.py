"""Canary directions and their cosines with released vectors, in numpy.

Andrew et al. (ICLR 2024), Section 4: canary j is a direction c_j uniform on
the unit sphere S^{d-1}, a pure function of (seed, j). Here c_j = g / ||g||
with g ~ N(0, I_d) drawn by numpy's generator seeded with
`SeedSequence(seed, spawn_key=(j,))`: the law of the other engines' canaries
(`tff_engine.canaries`, `jax_engine.canaries`), not their vectors, so a run is
audited with the canaries of the engine that trained it.

`CanaryBank` holds the tracked canaries (seen, then unseen) and scores them
against a [B, d] block of vectors (Algorithm 3 buffers B rounds): from a
cached [k + m, d] float32 matrix when it fits `cache_bytes`, else by
regenerating `chunk` canaries at a time, once per block.
"""

from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.design import canary_spec

__all__ = ['CanaryBank', 'DEFAULT_CACHE_BYTES', 'DEFAULT_CHUNK', 'directions']

# The tracked canaries are kept in memory up to this many bytes.
DEFAULT_CACHE_BYTES = 512 * 2**20
# Canaries regenerated at once when they are not cached.
DEFAULT_CHUNK = 256


def _direction(seed: int, canary_id: int, dim: int) -> np.ndarray:
  """c_j as float32 [dim] (checked arguments)."""
  rng = np.random.default_rng(np.random.SeedSequence(seed,
                                                     spawn_key=(canary_id,)))
  g = rng.standard_normal(dim, dtype=np.float32)
  return g / np.float32(np.linalg.norm(g.astype(np.float64)))


def directions(seed: int, ids: Sequence[int] | np.ndarray,
               dim: int) -> np.ndarray:
  """The unit canaries c_j for j in `ids`.

  Args:
    seed: The canary seed, in [0, canary_spec.MAX_SEED].
    ids: Canary ids (seen 0..k-1, unseen from canary_spec.UNSEEN_ID_OFFSET).
    dim: d >= 1.

  Returns:
    float32 [len(ids), dim], each row of unit norm.

  Raises:
    ValueError: if an argument is out of range.
  """
  seed = canary_spec.check_seed(seed, 'seed')
  ids = validation.check_ids('ids', ids, canary_spec.MAX_SEED + 1)
  dim = validation.check_int('dim', dim, 1)
  return _directions(seed, ids, dim)


def _directions(seed: int, ids: np.ndarray, dim: int) -> np.ndarray:
  out = np.empty((ids.size, dim), np.float32)
  for row, canary_id in enumerate(ids):
    out[row] = _direction(seed, int(canary_id), dim)
  return out


class CanaryBank:
  """The tracked canaries of a `CanarySpec` in d dimensions.

  Attributes:
    spec: The canary plan.
    dim: d.
    ids: The tracked ids, seen first (`CanarySpec.tracked_ids`).
  """

  def __init__(self, spec: canary_spec.CanarySpec, dim: int, *,
               cache_bytes: int = DEFAULT_CACHE_BYTES,
               chunk: int = DEFAULT_CHUNK):
    """Generates the canaries now if they fit `cache_bytes`.

    Args:
      spec: The canary plan.
      dim: d >= 1, the model's parameters.
      cache_bytes: The most memory the cached canaries may take (0: never
        cache).
      chunk: Canaries regenerated at once when not cached, >= 1.

    Raises:
      ValueError: if `dim`, `cache_bytes` or `chunk` is out of range.
    """
    self.spec = spec
    self.dim = validation.check_int('dim', dim, 1)
    self.ids = spec.tracked_ids()
    self._chunk = validation.check_int('chunk', chunk, 1)
    cache_bytes = validation.check_int('cache_bytes', cache_bytes, 0)
    self._cache = (_directions(spec.seed, self.ids, self.dim)
                   if 4 * self.ids.size * self.dim <= cache_bytes else None)

  def seen(self, ids: Sequence[int]) -> np.ndarray:
    """The seen canaries `ids`, from the cache or regenerated.

    Args:
      ids: seen canary ids, each in [0, k); not checked (the cached path
        indexes the cache rows by id, which are the seen ids 0..k-1 first).

    Returns:
      float32 [len(ids), d]: row i is the unit canary c_{ids[i]}.
    """
    ids = np.asarray(ids, np.int64)
    if self._cache is not None:
      return self._cache[ids]
    return _directions(self.spec.seed, ids, self.dim)

  def cosines(self, block: np.ndarray) -> np.ndarray:
    """cos(c_j, v_b) for every tracked canary j and row v_b of `block`.

    Args:
      block: [B, d] vectors (a zero row gives cosines 0,
        `canary_spec.unit_rows`).

    Returns:
      float64 [k + m, B].
    """
    block = np.asarray(block, np.float32).reshape(-1, self.dim)
    unit = canary_spec.unit_rows(block).astype(np.float32).T
    if self._cache is not None:
      return (self._cache @ unit).astype(np.float64)
    parts = [_directions(self.spec.seed, self.ids[i:i + self._chunk],
                         self.dim) @ unit
             for i in range(0, self.ids.size, self._chunk)]
    return np.concatenate(parts).astype(np.float64)
