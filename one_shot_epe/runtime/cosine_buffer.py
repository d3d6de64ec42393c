"""Algorithm 3's running maxima, fed scored blocks of rounds (framework-free).

Algorithm 3 of Andrew et al. (ICLR 2024, Sec. 4.1) scores every seen and
unseen canary j by max_t cos(c_j, v_t), its largest cosine with a round's
vector v_t (the noised aggregate, or the model's step). Both engines buffer
B rounds' vectors on their device and score a block at once (regenerating
the canaries once per block: `tff_engine.cosine_tracking`,
`jax_engine.canaries.cosines`); the block's [k + m, b] cosines are folded
into one `CosineBuffer`, the project's one home of what the algorithm keeps:
the maxima (lines 15-16), each round's summary (`round_record.
CanaryCosines`) and, for the decorrelated statistic under
matrix-factorization noise, every canary's projection on every round
(`stats.decorrelation`). Its state is plain numpy, saved with a checkpoint.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from one_shot_epe.runtime import round_record

__all__ = ['CosineBuffer', 'CosineMaxima']


class CosineMaxima(NamedTuple):
  """Max-over-rounds cosines of Algorithm 3 (lines 15-16), float32 numpy.

  Attributes:
    seen: The seen canaries' maxima, in id order.
    unseen: The unseen canaries'.
  """
  seen: np.ndarray
  unseen: np.ndarray


class CosineBuffer:
  """Each tracked canary's max cosine over the rounds folded in so far.

  Rows are the tracked canaries, seen first (`canary_spec.tracked_ids`).

  Attributes:
    maxima: float32 [k + m], -inf before any round.
    projections: float [k + m, T], each canary's projection <v_t, c_j> on
      round t's vector (cosine times |v_t|), or None when not kept.
  """

  def __init__(self, num_seen: int, num_unseen: int,
               maxima: np.ndarray | None = None,
               projections: np.ndarray | None = None):
    """Starts from `maxima` (a checkpoint's) or from no round.

    Args:
      num_seen: k, the seen canaries (the first k rows).
      num_unseen: m, the unseen canaries.
      maxima: float32 [k + m] maxima to resume from; None for none yet.
      projections: [k + m, T] projections to keep filling (the
        decorrelated statistic's), or None to keep none.

    Raises:
      ValueError: if `maxima` or `projections` has another number of rows.
    """
    tracked = num_seen + num_unseen
    self._num_seen = num_seen
    self.maxima = (np.full([tracked], -np.inf, np.float32) if maxima is None
                   else np.array(maxima, np.float32))
    if self.maxima.shape != (tracked,) or (
        projections is not None and projections.shape[0] != tracked):
      raise ValueError(f'maxima and projections must have {tracked} rows, one '
                       'per tracked canary.')
    self.projections = projections

  def fold(self, round_nums: Sequence[int], cosines: np.ndarray,
           norms: np.ndarray | None = None
           ) -> list[round_record.CanaryCosines]:
    """Folds a scored block of rounds into the maxima.

    Args:
      round_nums: The block's rounds (1-based, as `round_record` numbers
        them), one per column of `cosines`.
      cosines: float32 [k + m, b], the tracked canaries' cosines with the
        block's vectors.
      norms: [b], the vectors' norms, for the projections (needed when they
        are kept).

    Returns:
      Each round's summary: the mean and max cosine of the seen and of the
      unseen canaries (NaN without unseen canaries).
    """
    cosines = np.asarray(cosines, np.float32)
    if cosines.shape[1]:
      self.maxima = np.maximum(self.maxima, cosines.max(axis=1))
    if self.projections is not None:
      self.projections[:, np.asarray(round_nums, np.int64) - 1] = (
          cosines * np.asarray(norms))
    k = self._num_seen
    nan = float('nan')
    return [round_record.CanaryCosines(
        round_num, float(column[:k].mean()), float(column[:k].max()),
        float(column[k:].mean()) if column.size > k else nan,
        float(column[k:].max()) if column.size > k else nan)
            for round_num, column in zip(round_nums, cosines.T)]

  def split(self, maxima: np.ndarray | None = None) -> CosineMaxima:
    """The maxima (or `maxima` of the same rows) as seen and unseen.

    Args:
      maxima: [k + m] values to split; default this buffer's maxima.

    Returns:
      g^1_j and g^0_j of Algorithm 3, lines 15-16.
    """
    maxima = self.maxima if maxima is None else np.asarray(maxima,
                                                            np.float32)
    return CosineMaxima(seen=maxima[:self._num_seen],
                        unseen=maxima[self._num_seen:])
