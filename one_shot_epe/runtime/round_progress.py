"""A progress bar over a run's training rounds, for either engine.

A `round_record.RoundObserver`: a tqdm bar on stderr advanced by each
training round an engine reports (round 0, the initial evaluation, is not
one), showing the clip norm S_t, where the engine measures it the clients'
training loss, and the last test-set evaluation's loss and accuracy (the
metrics 'evaluation/loss' and 'evaluation/<accuracy metric>' both engines
report). It starts at the round the run resumed from.
"""

import sys
from collections.abc import Mapping, Sequence

import tqdm

from one_shot_epe.runtime import round_record

__all__ = ['ProgressBar']


class ProgressBar:
  """The bar of a run of `total_rounds` rounds; `enabled=False` shows none."""

  def __init__(self, total_rounds: int, enabled: bool,
               accuracy_metric: str | None = None):
    """Makes the bar; it opens at the first training round reported.

    Args:
      total_rounds: the run's number of training rounds (the bar's total).
      enabled: whether to draw the bar (False: a disabled tqdm bar).
      accuracy_metric: the evaluation's accuracy to show, by name without
        'evaluation/' (the task entry's); None: the one evaluation metric
        whose name holds 'accuracy', if there is exactly one.
    """
    self._total_rounds = total_rounds
    self._enabled = enabled
    self._accuracy_metric = accuracy_metric
    self._bar = None
    self._evaluation: dict[str, str] = {}

  def _note_evaluation(self, metrics: Mapping[str, float | int]) -> None:
    """Keeps the test loss and accuracy of an evaluated round."""
    if self._accuracy_metric is not None:
      names = [f'evaluation/{self._accuracy_metric}']
    else:
      names = [name for name in metrics
               if name.startswith('evaluation/') and 'accuracy' in name]
    if len(names) == 1 and names[0] in metrics:
      self._evaluation['test_acc'] = f'{metrics[names[0]]:.4g}'
    if 'evaluation/loss' in metrics:
      self._evaluation['test_loss'] = f'{metrics["evaluation/loss"]:.4g}'

  def on_round(self, record: round_record.RoundRecord) -> None:
    """Advances the bar by training round `record.round_num`.

    Args:
      record: the round just finished; round 0 (the initial evaluation)
        only gives its test metrics, and the first training round seen sets
        the bar's start.
    """
    self._note_evaluation(record.metrics)
    if record.round_num < 1:
      return
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
    postfix.update(self._evaluation)
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(1)

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Nothing: the bar counts rounds, not their scoring.

    Args:
      cosines: the canary cosines of a scored block (ignored).
    """

  def on_checkpoint(self, round_num: int) -> None:
    """Nothing: the bar counts rounds, not checkpoints.

    Args:
      round_num: the checkpoint's round (ignored).
    """

  def close(self) -> None:
    """Closes the bar, if a round opened it."""
    if self._bar is not None:
      self._bar.close()
