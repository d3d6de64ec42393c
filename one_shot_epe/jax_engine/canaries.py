"""Canary directions and exact max-over-rounds cosines, on the accelerator.

Andrew et al. (ICLR 2024), Section 4: canary j is a direction c_j uniform on
the unit sphere S^{d-1}, a pure function of (seed, j) so that it can be
regenerated instead of stored (k + m canaries of d = 4M parameters would be
32 GB). Here c_j = g / ||g|| with g = N(0, I_d) drawn from the threefry key
`fold_in(PRNGKey(seed), j)` as jax 0.4.14's `jax.random.normal` draws it
(counter bits, not `jax_threefry_partitionable`'s, which newer jax uses by
default): the generator is spelled out here on `threefry_2x32` itself, so
the canaries stay the same whatever jax's version, defaults or PRNG
implementation (`fingerprint` names them; a checkpoint keeps it and a run
is resumed only with the same canaries, `jax_engine.checkpoints`). The same
law as the TFF path's canaries (`one_shot_epe.tff_engine.canaries`,
TensorFlow's Philox), not the same vectors, so a run is audited with the
canaries of the engine that trained it.

Algorithm 3 (lines 10-16) needs every canary's maximum cosine with the noised
aggregates of all rounds. `cosines` takes every canary's cosine with one
vector or with a [B, d] block of buffered rounds' vectors, regenerating each
canary once per block, in chunks that bound the memory to chunk x d floats
(`jax_engine.run_loop` buffers B rounds, as the TFF engine does);
`update_maxima` folds one round into the running maxima. The maxima are exact.
A zero vector's cosine with every canary is 0 (`canary_spec.unit_rows`, the
rule of every engine), not NaN.
"""

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from one_shot_epe.design import canary_spec
from one_shot_epe import validation
from one_shot_epe.jax_engine import compat

__all__ = ['DEFAULT_CHUNK', 'GENERATOR', 'cosines', 'directions',
           'fingerprint', 'update_maxima']

# Canaries regenerated at once: chunk x d float32 must fit beside the model.
DEFAULT_CHUNK = 128
# The canaries' generator, by name (a checkpoint keeps it, `fingerprint`).
GENERATOR = 'threefry2x32 counter bits, jax 0.4.14 normal'
# jax.random.normal's open interval of uniforms: (nextafter(-1, 0), 1).
_LOW = np.nextafter(np.float32(-1.0), np.float32(0.0))
# The bits of float32 1.0: 23 random mantissa bits or-ed in give [1, 2).
_ONE_BITS = np.float32(1.0).view(np.uint32)


def _checked(seed: int, ids: Sequence[int] | np.ndarray
             ) -> tuple[jax.Array, np.ndarray]:
  """The seed as a uint32 scalar and the ids as uint32 (jax.random's key)."""
  seed = canary_spec.check_seed(seed, 'seed')
  ids = validation.check_ids('ids', ids, canary_spec.MAX_SEED + 1)
  return jnp.uint32(seed), ids.astype(np.uint32)


def _gaussian(seed: jax.Array, canary_id: jax.Array, dim: int) -> jax.Array:
  """g = N(0, I_d) of canary `canary_id`, by threefry_2x32 alone.

  jax 0.4.14's `normal(fold_in(PRNGKey(seed), id), (dim,))` step by step:
  the key [0, seed] folded with [0, id]; the bits of counters 0..d-1;
  uniforms on (nextafter(-1, 0), 1) from their 23 high bits; sqrt(2)
  erfinv(u).
  """
  zero = jnp.zeros((), jnp.uint32)
  key = compat.threefry_2x32(jnp.stack([zero, seed]),
                             jnp.stack([zero, canary_id]))
  bits = compat.threefry_2x32(key, jnp.arange(dim, dtype=jnp.uint32))
  floats = jax.lax.bitcast_convert_type(
      jnp.right_shift(bits, jnp.uint32(9)) | _ONE_BITS,
      jnp.float32) - np.float32(1.0)
  uniform = jnp.maximum(_LOW, floats * (np.float32(1.0) - _LOW) + _LOW)
  return np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(uniform)


@functools.partial(jax.jit, static_argnames=('dim',))
def _directions(seed: jax.Array, ids: jax.Array, dim: int) -> jax.Array:

  def one(canary_id):
    g = _gaussian(seed, canary_id, dim)
    return g / jnp.linalg.norm(g)

  return jax.vmap(one)(ids)


def directions(seed: int, ids: Sequence[int] | np.ndarray,
               dim: int) -> jax.Array:
  """The unit canaries c_j for j in `ids`, float32 [len(ids), dim].

  Args:
    seed: The canary seed, in [0, canary_spec.MAX_SEED].
    ids: Non-empty 1-D canary ids, each in [0, canary_spec.MAX_SEED].
    dim: The dimensionality d, >= 1.

  Returns:
    float32 [len(ids), dim] array of unit rows.

  Raises:
    ValueError: `seed` or an id is out of range, or `ids` is empty or not
      1-D integers, or `dim` < 1.
  """
  dim = validation.check_int('dim', dim, 1)
  seed, ids = _checked(seed, ids)
  return _directions(seed, jnp.asarray(ids), dim)


@functools.cache
def fingerprint() -> np.ndarray:
  """The generator's fingerprint: canaries 0 and 1 of seed 0, d = 4.

  Two jax installations draw the same canaries if and only if (up to float
  rounding) they give the same fingerprint; a checkpoint keeps it.

  Returns:
    float32 [8], read-only: the two unit canaries' coordinates.
  """
  values = np.asarray(directions(0, [0, 1], 4), np.float32).reshape(-1)
  values.flags.writeable = False
  return values


@functools.partial(jax.jit, static_argnames=('dim',))
def _chunk_cosines(seed: jax.Array, ids: jax.Array, block: jax.Array,
                   dim: int) -> jax.Array:
  # canary_spec.unit_rows: a zero row stays zero, its cosines 0.
  norms = jnp.linalg.norm(block, axis=1, keepdims=True)
  unit = block / jnp.where(norms > 0, norms, 1.0)
  return _directions(seed, ids, dim) @ unit.T


def cosines(seed: int, ids: Sequence[int] | np.ndarray,
            aggregate: jax.Array, chunk: int = DEFAULT_CHUNK) -> jax.Array:
  """cos(c_j, aggregate) for j in `ids`, regenerating `chunk` at a time.

  `aggregate` is one vector [d] (result [len(ids)]) or a block of B vectors
  [B, d] (result [len(ids), B]): each canary is regenerated once for the
  whole block, as Algorithm 3's tracking does every B rounds.

  Args:
    seed: The canary seed, in [0, canary_spec.MAX_SEED].
    ids: Non-empty 1-D canary ids, each in [0, canary_spec.MAX_SEED].
    aggregate: [d] vector or [B, d] block (cast to float32); a zero vector
      gives cosines 0 (`canary_spec.unit_rows`).
    chunk: Canaries regenerated at once, >= 1.

  Returns:
    float32 [len(ids)] or [len(ids), B] cosines.

  Raises:
    ValueError: `seed` or an id is out of range, or `ids` is empty or not
      1-D integers, `chunk` < 1, or `aggregate` is not 1-D or 2-D.

  Example:
    A canary's cosine with itself is 1; with another canary it is near 0
    (std 1/sqrt(d)).

    >>> from one_shot_epe.jax_engine import canaries
    >>> c = canaries.directions(7, [0, 1], 1000)
    >>> cos = canaries.cosines(7, [0, 1], c[0])
    >>> round(float(cos[0]), 3), abs(float(cos[1])) < 0.2
    (1.0, True)
  """
  seed, ids = _checked(seed, ids)
  chunk = validation.check_int('chunk', chunk, 1)
  aggregate = jnp.asarray(aggregate, jnp.float32)
  if aggregate.ndim not in (1, 2):
    raise ValueError('aggregate must be a vector or a block of vectors; got '
                     f'shape {aggregate.shape}.')
  block = aggregate.reshape(-1, aggregate.shape[-1])
  count = ids.size
  chunk = min(chunk, count)
  padded = -(-count // chunk) * chunk
  # Pad with the last id so every chunk has one compiled shape.
  ids = np.concatenate([ids, np.full(padded - count, ids[-1], np.uint32)])
  parts = [_chunk_cosines(seed, jnp.asarray(ids[i:i + chunk]), block,
                          int(block.shape[1]))
           for i in range(0, padded, chunk)]
  result = jnp.concatenate(parts)[:count]
  return result[:, 0] if aggregate.ndim == 1 else result


def update_maxima(maxima: jax.Array, seed: int,
                  ids: Sequence[int] | np.ndarray, aggregate: jax.Array,
                  chunk: int = DEFAULT_CHUNK) -> jax.Array:
  """max(maxima, cos(c_j, aggregate)): one round of Algorithm 3, lines 10-16.

  Start from `jnp.full(len(ids), -jnp.inf)`.

  Args:
    maxima: float [len(ids)] running maxima.
    seed: The canary seed, in [0, canary_spec.MAX_SEED].
    ids: Non-empty 1-D canary ids, each in [0, canary_spec.MAX_SEED].
    aggregate: The round's noised aggregate, [d].
    chunk: Canaries regenerated at once, >= 1.

  Returns:
    float32 [len(ids)] updated maxima.

  Raises:
    ValueError: as `cosines`.
  """
  return jnp.maximum(jnp.asarray(maxima, jnp.float32),
                     cosines(seed, ids, aggregate, chunk))
