"""Data canaries' all-iterates score: each one's largest excess one-round drop.

An adversary who sees every round's model can ask, for a canary's
examples, how much more some round's model fits them than the model
before it did, beyond what that round did for every canary: canary j's
round-t drop is d_jt = L_j(theta_{t-1}) - L_j(theta_t), L_j its mean loss
on its examples, and its score max over rounds t of d_jt - median_i d_it,
the median over every tracked canary (seen and unseen alike). Early
rounds lower every canary's loss (the model learns the task); the median
takes that shared drop out, so a seen data canary's own round, in which it
trained, stands out. The median is a symmetric function of all tracked
canaries, computed from the released models only: a canary's score is a
post-processing of the models, and seen and unseen canaries are scored
alike, so the report's threshold tests hold as for any score.
`LossDrops` keeps, per tracked canary (seen first, then unseen), the last
round's loss and the running maximum, both checkpointed with the run
(`state`, `from_state`), so that a resumed run ends with the maxima of an
uninterrupted one. The report is
`reporting.privacy_report.data_canary_all_iterates_report`. numpy only.
"""

from collections.abc import Mapping

import numpy as np

__all__ = ['LossDrops']

# The arrays a checkpoint holds, by name.
_LAST, _MAXIMA = 'data_canary_last_losses', 'data_canary_max_drops'


class LossDrops:
  """The tracked data canaries' last losses and largest excess drops.

  Attributes:
    last: float64 [n], each canary's loss under the last model observed.
    maxima: float64 [n], each one's largest drop beyond its round's median
      drop so far (-inf before the first round).
  """

  def __init__(self, initial_losses: np.ndarray):
    """Starts from the losses under theta_0.

    Args:
      initial_losses: float [n], each canary's loss under theta_0, finite.

    Raises:
      ValueError: a loss is not finite.
    """
    self.last = _finite('initial_losses', initial_losses)
    self.maxima = np.full(self.last.shape, -np.inf)

  def update(self, losses: np.ndarray) -> None:
    """Records the losses under the next round's model (its drops, centred).

    Args:
      losses: float [n], each canary's loss under theta_t, finite.

    Raises:
      ValueError: a loss is not finite, or their number is not n.
    """
    losses = _finite('losses', losses)
    if losses.shape != self.last.shape:
      raise ValueError(f'losses: {losses.size} canaries; expected '
                       f'{self.last.size}.')
    drops = self.last - losses
    np.maximum(self.maxima, drops - np.median(drops), out=self.maxima)
    self.last = losses

  def split(self, num_seen: int) -> tuple[np.ndarray, np.ndarray]:
    """The seen and the unseen canaries' largest excess drops.

    Args:
      num_seen: k, the seen canaries (the first k).

    Returns:
      (seen [k], unseen [n - k]), float64 copies.

    Raises:
      ValueError: no round was observed (every maximum is -inf).
    """
    if not np.all(np.isfinite(self.maxima)):
      raise ValueError('no round was observed: the data canaries have no '
                       'loss drop yet.')
    return self.maxima[:num_seen].copy(), self.maxima[num_seen:].copy()

  def state(self) -> dict[str, np.ndarray]:
    """The arrays a checkpoint keeps, by name.

    Returns:
      {'data_canary_last_losses', 'data_canary_max_drops'}: float64 [n].
    """
    return {_LAST: self.last.copy(), _MAXIMA: self.maxima.copy()}

  @classmethod
  def from_state(cls, saved: Mapping[str, np.ndarray]) -> 'LossDrops':
    """The tracker a checkpoint's `state()` describes.

    Args:
      saved: `state()`'s arrays (e.g. from an .npz checkpoint).

    Returns:
      The tracker, as it was when saved.

    Raises:
      ValueError: an array is missing or the two differ in length.
    """
    missing = [name for name in (_LAST, _MAXIMA) if name not in saved]
    if missing:
      raise ValueError(f'the checkpoint lacks {missing}.')
    drops = cls(np.asarray(saved[_LAST], np.float64))
    maxima = np.asarray(saved[_MAXIMA], np.float64).reshape(-1)
    if maxima.shape != drops.last.shape:
      raise ValueError(f'{_MAXIMA} holds {maxima.size} canaries; '
                       f'{_LAST} {drops.last.size}.')
    drops.maxima = maxima.copy()
    return drops

  @staticmethod
  def names() -> tuple[str, str]:
    """The names of `state()`'s arrays.

    Returns:
      ('data_canary_last_losses', 'data_canary_max_drops').
    """
    return _LAST, _MAXIMA


def _finite(name: str, values: np.ndarray) -> np.ndarray:
  """`values` as float64 [n], or ValueError naming `name`."""
  values = np.array(values, np.float64).reshape(-1)
  if not np.all(np.isfinite(values)):
    raise ValueError(f'{name} must be finite; got '
                     f'{values[~np.isfinite(values)][:3].tolist()}.')
  return values
