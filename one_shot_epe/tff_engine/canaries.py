"""Random canary updates (Andrew et al., ICLR 2024, Sec. 4, Algorithms 2 and 3).

A canary client returns, whenever it participates, a fixed random direction of
the model's full dimensionality d, scaled to the round's clip norm (`Proj` of
Algorithm 2). The directions are uniform on the unit sphere S^{d-1}: canary j is

  c_j = u_j / ||u_j||,   u_j = tf.random.stateless_normal([d], seed=(s, j),
                                                          alg='philox'),

a pure function of the canary seed s and the canary id j. TF's stateless
generator with an explicit algorithm yields the same bits in every process,
machine and TFF executor and ignores TF's global seed, so the aggregator (which
inserts canaries and tracks their cosines inside TFF computations) and the
final-model analysis (plain TF, after training) see identical canaries. The
uniform law on the sphere follows from the rotation invariance of N(0, I_d).

Canary ids: the k *seen* canaries (those a schedule may insert) have ids
0..k-1; the m *unseen* canaries of Algorithm 3 (never inserted, tracked only to
estimate the null distribution of max-over-rounds cosines) have ids
`canary_spec.UNSEEN_ID_OFFSET + i`, i = 0..m-1, a range disjoint from any
seen id (`canary_spec.seen_ids`, `canary_spec.unseen_ids`).

Canaries live in the flattened parameter space. A model update is a structure
of float32 tensors (a `tf.nest` structure, e.g. the list of trainable weights);
`flatten` concatenates its leaves in `tf.nest.flatten` order and `unflatten`
packs a length-d vector back into that structure, so "canary j of a model" is
`unflatten(canary(s, j, d), specs)`.

Regenerating canaries is the expensive part of tracking them (about 10 ns per
coordinate on a 2-core CPU), so `cosines` generates them in chunks and takes all
their inner products with a block of vectors in one matrix product.
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from one_shot_epe.design import audit_checks
from one_shot_epe.design import canary_spec

__all__ = ['RNG_ALGORITHM', 'canary', 'canary_structure', 'check_model',
           'cosines', 'default_chunk_size', 'flat_size', 'flatten',
           'gaussian', 'gaussians', 'unflatten']

# The bit generator behind every canary; fixing it (rather than TF's
# 'auto_select') keeps canaries identical across devices and TF versions.
RNG_ALGORITHM = 'philox'

# Default budget for one chunk of regenerated canaries in `cosines`.
_DEFAULT_CHUNK_BYTES = 256 * 2**20
_MAX_DEFAULT_CHUNK = 64


def default_chunk_size(dim: int) -> int:
  """Canaries regenerated at once by `cosines`: <= 256 MiB, <= 64 canaries.

  Args:
    dim: The dimensionality d of a canary (float32 values), >= 1.

  Returns:
    max(1, min(64, 2^26 // d)) canaries.
  """
  return max(1, min(_MAX_DEFAULT_CHUNK, _DEFAULT_CHUNK_BYTES // (4 * dim)))


def gaussian(canary_seed: int, canary_id: Any, dim: int) -> tf.Tensor:
  """u_j ~ N(0, I_d): canary `canary_id` before normalisation, float32 [dim].

  Args:
    canary_seed: The canary seed s, in [0, canary_spec.MAX_SEED].
    canary_id: A scalar int64 tensor or int, the canary id j.
    dim: The dimensionality d.

  Returns:
    float32 [dim] tensor.

  Raises:
    ValueError: if `canary_seed` is out of range (`canary_spec.check_seed`).
  """
  return _gaussian(canary_spec.check_seed(canary_seed), canary_id, dim)


def _gaussian(canary_seed: int, canary_id: Any, dim: int) -> tf.Tensor:
  """`gaussian` of a checked seed."""
  seed = tf.stack([
      tf.constant(canary_seed, tf.int64),
      tf.cast(canary_id, tf.int64)
  ])
  return tf.random.stateless_normal([dim], seed=seed, dtype=tf.float32,
                                    alg=RNG_ALGORITHM)


def canary(canary_seed: int, canary_id: Any, dim: int) -> tf.Tensor:
  """c_j = u_j / ||u_j||: canary `canary_id`, unit norm, float32 [dim].

  Args:
    canary_seed: The canary seed s, in [0, canary_spec.MAX_SEED].
    canary_id: A scalar int64 tensor or int, the canary id j.
    dim: The dimensionality d.

  Returns:
    float32 [dim] tensor of norm 1.

  Raises:
    ValueError: if `canary_seed` is out of range (`canary_spec.check_seed`).
  """
  direction = gaussian(canary_seed, canary_id, dim)
  return direction / tf.norm(direction)


def gaussians(canary_seed: int, canary_ids: Any,
              dim: int) -> tuple[tf.Tensor, tf.Tensor]:
  """Rows u_j for the int64 vector `canary_ids`, and their norms ||u_j||.

  Each row is generated exactly as `gaussian` does, one canary at a time, so a
  canary's values do not depend on which other canaries share its chunk.

  Args:
    canary_seed: The canary seed s, in [0, canary_spec.MAX_SEED].
    canary_ids: int64 vector (or list of ints) of canary ids.
    dim: The dimensionality d.

  Returns:
    float32 [len(canary_ids), dim] rows and float32 [len(canary_ids)] norms.

  Raises:
    ValueError: if `canary_seed` is out of range (`canary_spec.check_seed`).
  """
  return _gaussians(canary_spec.check_seed(canary_seed), canary_ids, dim)


def _gaussians(canary_seed: int, canary_ids: Any,
               dim: int) -> tuple[tf.Tensor, tf.Tensor]:
  """`gaussians` of a checked seed."""

  def row_and_norm(canary_id):
    row = _gaussian(canary_seed, canary_id, dim)
    return row, tf.norm(row)

  return tf.map_fn(
      row_and_norm,
      tf.cast(canary_ids, tf.int64),
      fn_output_signature=(tf.TensorSpec([dim], tf.float32),
                           tf.TensorSpec([], tf.float32)),
      parallel_iterations=1)


def _row_norms(matrix: tf.Tensor) -> tf.Tensor:
  """Euclidean norm of each row, one row at a time (no [B, d] temporary)."""
  num_rows = tf.shape(matrix)[0]
  _, norms = tf.while_loop(
      lambda i, _: i < num_rows,
      lambda i, norms: (i + 1, norms.write(i, tf.norm(matrix[i]))),
      (tf.constant(0), tf.TensorArray(tf.float32, size=num_rows)))
  return norms.stack()


def cosines(canary_seed: int, canary_ids: Sequence[int] | np.ndarray,
            vectors: tf.Tensor, chunk_size: int) -> tf.Tensor:
  """cos(c_j, v_b) for every canary id j and every row v_b of `vectors`.

  Canaries are regenerated `chunk_size` at a time; each chunk's inner products
  with all rows come from one matrix product, so every canary is generated
  once however many vectors there are. Rows of norm zero give cosine 0.
  Besides `vectors`, memory peaks at about two chunks of canaries.

  Args:
    canary_seed: The canary seed.
    canary_ids: The n canary ids (a fixed list of ints).
    vectors: float32 [B, d] block of vectors.
    chunk_size: Canaries generated at once (memory is chunk_size * d floats).

  Returns:
    float32 [n, B] cosines.

  Raises:
    ValueError: if `canary_seed` is out of range (`canary_spec.check_seed`).
  """
  canary_seed = canary_spec.check_seed(canary_seed)
  canary_ids = np.asarray(canary_ids, np.int64).reshape(-1)
  vectors = tf.convert_to_tensor(vectors, tf.float32)
  dim = vectors.shape[1]
  vector_norms = _row_norms(vectors)
  safe_norms = tf.where(vector_norms > 0, vector_norms,
                        tf.ones_like(vector_norms))
  num_vectors = vectors.shape[0]
  if num_vectors is None:
    num_vectors = tf.shape(vectors)[0]
  if canary_ids.size == 0:
    return tf.zeros([0, num_vectors], tf.float32)
  num_chunks = -(-canary_ids.size // chunk_size)
  ids_table = tf.constant(canary_ids)

  def chunk_cosines(i, results):
    rows, row_norms = _gaussians(
        canary_seed, ids_table[i * chunk_size:(i + 1) * chunk_size], dim)
    dots = tf.matmul(rows, vectors, transpose_b=True)
    scale = row_norms[:, tf.newaxis] * safe_norms[tf.newaxis, :]
    return i + 1, results.write(i, dots / scale)

  _, results = tf.while_loop(
      lambda i, _: i < num_chunks, chunk_cosines,
      (tf.constant(0),
       tf.TensorArray(tf.float32, size=num_chunks, infer_shape=False,
                      element_shape=tf.TensorShape([None, None]))))
  return tf.reshape(results.concat(), [canary_ids.size, num_vectors])


def flat_size(specs: Any) -> int:
  """Total number of elements d of a structure of fully defined TensorSpecs.

  Args:
    specs: A tf.nest structure of `tf.TensorSpec`s with fully defined shapes.

  Returns:
    The sum of their element counts.
  """
  return sum(math.prod(spec.shape.as_list()) for spec in tf.nest.flatten(specs))


def check_model(dim: int, spec: canary_spec.CanarySpec) -> None:
  """Refuses a model of d = `dim` parameters that `spec`'s audit cannot audit.

  Where an aggregation factory first sees the user's model (its `create`),
  before any round: `audit_checks.check_model` with the spec's rounds (the
  schedule's length, at least 1) and canaries.

  Args:
    dim: d, the aggregated value's elements (the model's trainable
      parameters).
    spec: The audit's canaries.

  Raises:
    ValueError: naming the model's parameter count: d < 3 or a run too
      large for this machine's memory.
  """
  audit_checks.check_model(dim, max(1, len(spec.schedule)), spec.num_seen,
                           spec.num_unseen)


def flatten(structure: Any) -> tf.Tensor:
  """Concatenates a structure's leaves (tf.nest order) into a float32 [d].

  Args:
    structure: A tf.nest structure of tensors (e.g. model weights).

  Returns:
    float32 [d] tensor, d the total element count.
  """
  return tf.concat([
      tf.reshape(tf.cast(leaf, tf.float32), [-1])
      for leaf in tf.nest.flatten(structure)
  ], axis=0)


def unflatten(flat: tf.Tensor, specs: Any) -> Any:
  """Inverse of `flatten`: packs a [d] vector into the structure of `specs`.

  Args:
    flat: [d] tensor with d = `flat_size(specs)`.
    specs: A tf.nest structure of `tf.TensorSpec`s with fully defined shapes.

  Returns:
    A structure like `specs`, each leaf reshaped and cast to its spec's dtype.
  """
  leaves = tf.nest.flatten(specs)
  sizes = [math.prod(spec.shape.as_list()) for spec in leaves]
  parts = tf.split(flat, sizes) if len(sizes) > 1 else [flat]
  return tf.nest.pack_sequence_as(specs, [
      tf.cast(tf.reshape(part, spec.shape), spec.dtype)
      for part, spec in zip(parts, leaves)
  ])


def canary_structure(canary_seed: int, canary_id: Any,
                     specs: Sequence[tf.TensorSpec] | Any) -> Any:
  """Canary `canary_id` packed into the structure of `specs` (unit norm).

  Args:
    canary_seed: The canary seed s, in [0, canary_spec.MAX_SEED].
    canary_id: A scalar int64 tensor or int, the canary id j.
    specs: A tf.nest structure of `tf.TensorSpec`s (e.g. the model weights'),
      fully defined shapes.

  Returns:
    The structure of `specs` holding c_j, norm 1 over all leaves together.

  Raises:
    ValueError: if `canary_seed` is out of range (`canary_spec.check_seed`).
  """
  return unflatten(canary(canary_seed, canary_id, flat_size(specs)), specs)
