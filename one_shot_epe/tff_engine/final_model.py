"""Canary cosines with the final model (Andrew et al., ICLR 2024, Algorithm 2).

Algorithm 2 releases only the final model theta_T and scores each seen canary
by g_j = <c_j, theta_T> / (||c_j|| ||theta_T||) (line 11); the estimate then
compares the Gaussian fit of {g_j} with the null N(0, 1/d) of a canary that was
never inserted (`one_shot_epe.stats.estimation.epsilon_from_final_cosines`).

Two statistics are offered:

* `'delta'` (default): the cosine with the model delta theta_T - theta_0. The
  canaries' contributions live in the delta; theta_0 is independent of the
  canaries (a seeded initialisation the analyst knows), so subtracting it
  removes canary-independent mass from the denominator and strengthens the
  attack, while the null law is unchanged (a unit vector uniform on the sphere
  has cosine law ~N(0, 1/d) with *any* vector independent of it). A stronger
  attack gives the more conservative (larger) epsilon estimate.
* `'final'`: the paper's literal statistic, the cosine with theta_T itself. In
  the paper theta_0 = 0 in the Gaussian-mechanism analysis, where both agree.

Sign. Algorithm 2 adds the noised sum to the model (theta_t = theta_{t-1} +
eta rho_bar), so an inserted canary moves the model along +c. In
`tff.learning`, a client update is initial - trained weights and the server
optimizer *subtracts* the aggregate, so an inserted canary moves the model
along -c. `model_moves_along` states which (-1 for `tff.learning`, the
default; +1 for the paper's convention): cosines are taken with
`model_moves_along * vector`, so inserted canaries have positive cosines
either way. The null is symmetric, so the sign only matters for the signal.

Weights are any `tf.nest` structure of arrays whose flattening matches the
aggregated updates, e.g. `state.global_model_weights.trainable` of a
`tff.learning` process (the canary aggregator sees the trainable weights).
"""

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries

__all__ = ['PAPER_DIRECTION', 'Statistic', 'TFF_LEARNING_DIRECTION',
           'final_model_cosines']

Statistic = Literal['delta', 'final']
TFF_LEARNING_DIRECTION = -1.0
PAPER_DIRECTION = 1.0


def _flat(weights: Any, name: str) -> np.ndarray:
  leaves = tf.nest.flatten(weights)
  if not leaves:
    raise ValueError(f'{name} must hold at least one array; got {weights!r}.')
  flat = np.concatenate(
      [np.asarray(leaf, np.float32).reshape(-1) for leaf in leaves])
  if not np.all(np.isfinite(flat)):
    raise ValueError(f'{name} must be finite.')
  return flat


def final_model_cosines(final_weights: Any,
                        *,
                        canary_seed: int,
                        canary_ids: Sequence[int] | np.ndarray,
                        initial_weights: Any = None,
                        statistic: Statistic = 'delta',
                        model_moves_along: float = TFF_LEARNING_DIRECTION,
                        chunk_size: int | None = None) -> np.ndarray:
  """Cosine of each canary with the final model (or its delta), Algorithm 2.

  Args:
    final_weights: theta_T, a structure of float arrays.
    canary_seed: The canary seed used by the aggregator.
    canary_ids: Ids of the canaries to score, e.g. `canary_spec.seen_ids(k)`.
    initial_weights: theta_0 (same structure); required for 'delta'.
    statistic: 'delta' (cosine with theta_T - theta_0, default) or 'final'
      (cosine with theta_T, the paper's literal line 11).
    model_moves_along: -1.0 if an inserted canary c moves the model along -c
      (tff.learning, default), +1.0 if along +c (the paper's pseudocode).
    chunk_size: Canaries regenerated at once; None picks a <= 256 MiB chunk.

  Returns:
    float64 array of cosines, one per canary id, in the order given.

  Raises:
    ValueError: `canary_seed` out of range, `canary_ids` not 1-D
      non-negative integers, `model_moves_along` not -1.0 or 1.0, a weight
      structure empty or not finite, 'delta' without `initial_weights` or with
      another parameter count, an unknown `statistic`, or `chunk_size` not a
      positive int.

  Example:
    A model that moved along -c_3 from theta_0 (as tff.learning moves along
    an inserted canary) scores 1 for canary 3:

    >>> import numpy as np
    >>> from one_shot_epe.tff_engine import canaries, final_model
    >>> theta_0 = [np.zeros(1000, np.float32)]
    >>> theta_t = [-canaries.canary(7, 3, 1000).numpy()]
    >>> final_model.final_model_cosines(
    ...     theta_t, canary_seed=7, canary_ids=[3],
    ...     initial_weights=theta_0).round(3)
    array([1.])
  """
  canary_seed = canary_spec.check_seed(canary_seed)
  ids = np.asarray(canary_ids)
  if ids.ndim != 1 or (ids.size and (ids.dtype.kind not in 'iu' or
                                     ids.min() < 0)):
    raise ValueError('canary_ids must be a 1-D sequence of non-negative '
                     f'integers; got {canary_ids!r}.')
  if model_moves_along not in (TFF_LEARNING_DIRECTION, PAPER_DIRECTION):
    raise ValueError(
        f'model_moves_along must be -1.0 or 1.0; got {model_moves_along!r}.')
  vector = _flat(final_weights, 'final_weights')
  if statistic == 'delta':
    if initial_weights is None:
      raise ValueError("statistic='delta' needs initial_weights.")
    initial = _flat(initial_weights, 'initial_weights')
    if initial.shape != vector.shape:
      raise ValueError(
          f'initial_weights have {initial.size} parameters but final_weights '
          f'have {vector.size}.')
    vector = vector - initial
  elif statistic != 'final':
    raise ValueError(
        f"statistic must be 'delta' or 'final'; got {statistic!r}.")
  if chunk_size is None:
    chunk_size = canaries.default_chunk_size(vector.size)
  elif not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(
        f'chunk_size must be a positive integer; got {chunk_size!r}.')
  ids = ids.astype(np.int64)

  @tf.function
  def compute(oriented):
    return canaries.cosines(canary_seed, ids, oriented, chunk_size)

  oriented = tf.constant((model_moves_along * vector)[np.newaxis, :])
  return compute(oriented).numpy()[:, 0].astype(np.float64)
