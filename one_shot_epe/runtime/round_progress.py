"""A progress bar over a run's training rounds, for either engine.

A `round_record.RoundObserver`: a tqdm bar on stderr advanced by each
training round an engine reports (round 0, the initial evaluation, is not
one), showing the clip norm S_t and, where the engine measures it, the
clients' training loss. It starts at the round the run resumed from.
"""

import sys
from collections.abc import Sequence

import tqdm

from one_shot_epe.runtime import round_record

__all__ = ['ProgressBar']


class ProgressBar:
  """The bar of a run of `total_rounds` rounds; `enabled=False` shows none."""

  def __init__(self, total_rounds: int, enabled: bool):
    """Makes the bar; it opens at the first training round reported.

    Args:
      total_rounds: the run's number of training rounds (the bar's total).
      enabled: whether to draw the bar (False: a disabled tqdm bar).
    """
    self._total_rounds = total_rounds
    self._enabled = enabled
    self._bar = None
    self._last_round: int | None = None

  @property
  def last_round(self) -> int | None:
    """The last training round reported; None before the first."""
    return self._last_round

  def on_round(self, record: round_record.RoundRecord) -> None:
    """Advances the bar by training round `record.round_num`.

    Args:
      record: the round just finished; round 0 (the initial evaluation) is
        ignored, and the first training round seen sets the bar's start.
    """
    if record.round_num < 1:
      return
    self._last_round = record.round_num
    if self._bar is None:
      self._bar = tqdm.tqdm(total=self._total_rounds,
                            initial=record.round_num - 1, unit='round',
                            disable=not self._enabled, dynamic_ncols=True,
                            file=sys.stderr)
    postfix = {}
    if record.clip is not None:
      postfix['clip'] = f'{record.clip:.4g}'
    if record.loss is not None:
      postfix['loss'] = f'{record.loss:.4g}'
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(1)

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Nothing: the bar counts rounds, not their scoring.

    Args:
      cosines: the canary cosines of a scored block (ignored).
    """

  def close(self) -> None:
    """Closes the bar, if a round opened it."""
    if self._bar is not None:
      self._bar.close()
