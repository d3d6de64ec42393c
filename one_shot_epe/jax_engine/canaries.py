"""Canary directions and exact max-over-rounds cosines, on the accelerator.

Andrew et al. (ICLR 2024), Section 4: canary j is a direction c_j uniform on
the unit sphere S^{d-1}, a pure function of (seed, j) so that it can be
regenerated instead of stored (k + m canaries of d = 4M parameters would be
32 GB). Here c_j = g / ||g|| with g = N(0, I_d) drawn by `jax.random` from
the key `fold_in(PRNGKey(seed), j)`: the same law as the TFF path's canaries
(`one_shot_epe.canaries`, TensorFlow's Philox), not the same vectors, so a run
is audited with the canaries of the engine that trained it.

Algorithm 3 (lines 10-16) needs every canary's maximum cosine with the noised
aggregates of all rounds. On an accelerator regenerating all canaries every
round costs milliseconds, so `update_maxima` does exactly that, in chunks that
bound the memory to chunk x d floats; the maxima are exact, not lagged.
"""

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

# Canaries regenerated at once: chunk x d float32 must fit beside the model.
DEFAULT_CHUNK = 128


def _check_ids(ids: Sequence[int] | np.ndarray) -> np.ndarray:
  ids = np.asarray(ids)
  if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype,
                                                          np.integer):
    raise ValueError('ids must be a non-empty 1-D sequence of integers; got '
                     f'{ids!r}.')
  if ids.min() < 0 or ids.max() >= 2**32:
    raise ValueError(f'ids must be in [0, 2**32); got {ids.min()}..'
                     f'{ids.max()}.')
  return ids.astype(np.uint32)


def _check_seed(seed: int) -> int:
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise TypeError(f'seed must be an int; got {type(seed).__name__}.')
  if not 0 <= seed < 2**32:
    raise ValueError(f'seed must be in [0, 2**32); got {seed}.')
  return int(seed)


@functools.partial(jax.jit, static_argnames=('dim',))
def _directions(seed: jax.Array, ids: jax.Array, dim: int) -> jax.Array:
  base = jax.random.PRNGKey(seed)

  def one(canary_id):
    g = jax.random.normal(jax.random.fold_in(base, canary_id), (dim,),
                          jnp.float32)
    return g / jnp.linalg.norm(g)

  return jax.vmap(one)(ids)


def directions(seed: int, ids: Sequence[int] | np.ndarray,
               dim: int) -> jax.Array:
  """The unit canaries c_j for j in `ids`, float32 [len(ids), dim]."""
  if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
    raise ValueError(f'dim must be a positive int; got {dim!r}.')
  return _directions(jnp.uint32(_check_seed(seed)),
                     jnp.asarray(_check_ids(ids)), dim)


@functools.partial(jax.jit, static_argnames=('dim',))
def _chunk_cosines(seed: jax.Array, ids: jax.Array, aggregate: jax.Array,
                   dim: int) -> jax.Array:
  unit = aggregate / jnp.linalg.norm(aggregate)
  return _directions(seed, ids, dim) @ unit


def cosines(seed: int, ids: Sequence[int] | np.ndarray,
            aggregate: jax.Array, chunk: int = DEFAULT_CHUNK) -> jax.Array:
  """cos(c_j, aggregate) for j in `ids`, regenerating `chunk` at a time."""
  ids = _check_ids(ids)
  seed = jnp.uint32(_check_seed(seed))
  if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
    raise ValueError(f'chunk must be a positive int; got {chunk!r}.')
  aggregate = jnp.asarray(aggregate, jnp.float32)
  if aggregate.ndim != 1:
    raise ValueError('aggregate must be a vector; got shape '
                     f'{aggregate.shape}.')
  count = ids.size
  chunk = min(chunk, count)
  padded = -(-count // chunk) * chunk
  # Pad with the last id so every chunk has one compiled shape.
  ids = np.concatenate([ids, np.full(padded - count, ids[-1], np.uint32)])
  parts = [_chunk_cosines(seed, jnp.asarray(ids[i:i + chunk]), aggregate,
                          int(aggregate.shape[0]))
           for i in range(0, padded, chunk)]
  return jnp.concatenate(parts)[:count]


def update_maxima(maxima: jax.Array, seed: int,
                  ids: Sequence[int] | np.ndarray, aggregate: jax.Array,
                  chunk: int = DEFAULT_CHUNK) -> jax.Array:
  """max(maxima, cos(c_j, aggregate)): one round of Algorithm 3, lines 10-16.

  Start from `jnp.full(len(ids), -jnp.inf)`.
  """
  return jnp.maximum(jnp.asarray(maxima, jnp.float32),
                     cosines(seed, ids, aggregate, chunk))
