"""Training health: an adaptive clip that runs away, a loss that is lost.

A `round_record.RoundObserver` for every engine (the launcher's TFF and JAX
engines, Flower's audit) that watches each training round's clip S_t and
losses: the training loss (`RoundRecord.loss`) and every reported metric
named '.../loss' (the evaluation's: the JAX engine reports no training
loss). When the clip has grown or shrunk by more than `CLIP_FACTOR` since
the first round it saw, or becomes non-finite, or a loss becomes
non-finite, it logs a warning once
per kind, and `notes()` gives the report's notes (`run_report.RunReport`'s
'notes', shown in report.md). Framework-free.

It watches the rounds reported to it: a resumed run's watcher starts from
the round it resumed from.
"""

import logging
import math
from collections.abc import Sequence

from one_shot_epe.runtime import round_record

__all__ = ['CLIP_FACTOR', 'TrainingHealth']

# How far the adaptive clip may move over a run before the report says so.
# Adaptive clipping (Andrew et al., 2021) follows a quantile of the update
# norms; 100x leaves room for the norms' own drift as training converges,
# and catches a clip that follows the noise of its clipped count instead of
# the updates (Shakespeare's noisy runs: to 5e7), under which the canaries
# enter at clips that differ by orders of magnitude.
CLIP_FACTOR = 100.0

_LOG = logging.getLogger(__name__)


def _number(value: float) -> str:
  return f'{value:.4g}'


def _capitalized(text: str) -> str:
  return text[:1].upper() + text[1:]


def _losses(record: round_record.RoundRecord) -> list[tuple[str, float]]:
  """The round's losses by name: training loss, then metrics '.../loss'."""
  losses = [] if record.loss is None else [('training loss', record.loss)]
  losses += [(f'{name.replace("/", " ")}', float(value))
             for name, value in record.metrics.items()
             if name.rsplit('/', 1)[-1] == 'loss']
  return losses


class TrainingHealth:
  """Watches a run's clip and loss; logs once per problem; the report's notes.

  Attributes:
    clip_factor: The clip's allowed factor over the run, > 1.
  """

  def __init__(self, clip_factor: float = CLIP_FACTOR, *, name: str = ''):
    """A watcher that has seen no round.

    Args:
      clip_factor: Note a clip more than this many times the first one, or
        less than its 1 / clip_factor; > 1.
      name: Prefixed to the log's lines (e.g. the run directory; '' for
        none), not to the notes.

    Raises:
      ValueError: if `clip_factor` is not a finite number above 1.
    """
    if not (math.isfinite(clip_factor) and clip_factor > 1):
      raise ValueError('clip_factor must be a finite number above 1; got '
                       f'{clip_factor!r}.')
    self.clip_factor = float(clip_factor)
    self._prefix = f'{name}: ' if name else ''
    self._first: tuple[int, float] | None = None
    # The clip's extremes: (round, clip) of the largest and smallest.
    self._high: tuple[int, float] | None = None
    self._low: tuple[int, float] | None = None
    self._broken_clip: tuple[int, float] | None = None
    # (round, which loss, value) of the first non-finite loss.
    self._non_finite_loss: tuple[int, str, float] | None = None
    self._logged: set[str] = set()

  def on_round(self, record: round_record.RoundRecord) -> None:
    """Checks the round's clip and loss; logs a problem the first time.

    Args:
      record: The round just trained (round 0, the initial evaluation, has
        no clip; its loss is checked too).
    """
    for name, loss in _losses(record):
      if not math.isfinite(loss):
        if self._non_finite_loss is None:
          self._non_finite_loss = (record.round_num, name, loss)
        self._log('loss')
    if record.clip is None:
      return
    clip, now = float(record.clip), (record.round_num, float(record.clip))
    if not math.isfinite(clip) or clip <= 0:  # Not a clip: diverged.
      if self._broken_clip is None:
        self._broken_clip = now
      self._log('clip')
      return
    if self._first is None:
      self._first = self._high = self._low = now
    if clip > self._high[1]:
      self._high = now
    if clip < self._low[1]:
      self._low = now
    if self._grew() or self._shrank():
      self._log('clip')

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Nothing: health is read from the rounds' records.

    Args:
      cosines: the canary cosines of a scored block (ignored).
    """

  def on_checkpoint(self, round_num: int) -> None:
    """Nothing: health is read from the rounds' records.

    Args:
      round_num: the checkpoint's round (ignored).
    """

  def _grew(self) -> bool:
    return (self._first is not None and
            self._high[1] > self.clip_factor * self._first[1])

  def _shrank(self) -> bool:
    return (self._first is not None and
            self._low[1] * self.clip_factor < self._first[1])

  def _log(self, kind: str) -> None:
    """Logs the problem `kind` ('clip', 'loss') unless it was logged."""
    if kind in self._logged:
      return
    self._logged.add(kind)
    note = self._loss_note() if kind == 'loss' else self._clip_note()
    _LOG.warning('%s%s', self._prefix, note)

  def _clip_note(self) -> str:
    if self._broken_clip is not None:
      round_num, clip = self._broken_clip
      return (f'the clip became {clip} in round {round_num}: adaptive '
              'clipping diverged, and the canaries after it were not clipped '
              'like the clients.')
    first_round, first = self._first
    moved, way = (self._high, 'grew') if self._grew() else (self._low,
                                                            'shrank')
    round_num, clip = moved
    factor = max(clip / first, first / clip)
    return (f'the adaptive clip {way} from {_number(first)} (round '
            f'{first_round}) to {_number(clip)} (round {round_num}), '
            f'{_number(factor)}x, more than {self.clip_factor:g}x: it likely '
            'follows the noise of its clipped count rather than the updates, '
            'and the canaries enter at clips that differ by as much.')

  def _loss_note(self) -> str:
    round_num, name, loss = self._non_finite_loss
    return (f'the {name} became {loss} in round {round_num}: the model '
            'diverged, and its accuracy and cosines after that round say '
            'little.')

  def notes(self) -> list[str]:
    """The report's notes: one per problem seen, the clip's extreme reached.

    Returns:
      Sentences for `run_report.build_run_report`'s `notes`; empty for a
      healthy run.
    """
    notes = []
    if self._broken_clip is not None or self._grew() or self._shrank():
      notes.append(_capitalized(self._clip_note()))
    if self._non_finite_loss is not None:
      notes.append(_capitalized(self._loss_note()))
    return notes
