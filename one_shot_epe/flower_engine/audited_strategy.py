"""The outer strategy of an audited Flower run: every round seen, the run kept.

`AuditedStrategy` is what `audit.CanaryAudit.wrap` returns, around the
user's DP wrapper (itself around `strategies.CanaryStrategy`):
it numbers the rounds from the run's start (a resumed run goes on from its
newest checkpoint), seeds each round's random draws before its client
sampling and before its noise, times the round, hands the released aggregate
theta_t - theta_{t-1} to the audit (`strategies.Audit.on_round`) and the
round's clip and training loss (a 'train_loss' or 'loss' train metric) to a
health watcher (`runtime.training_health`), and holds the run directory
while Flower's loop runs, writing the results at its end. A round the DP
wrapper releases nothing for (an error reply: a lost node) is recorded as
such and the run goes on, as Flower's own loop does. It opens with one of
Flower's log lines, 'new run in <dir>' or 'resumed from round N in <dir>',
and an interrupt (KeyboardInterrupt, SIGTERM made one) saves the state
after the last completed round (`audit.CanaryAudit.stop`) and becomes
`runtime.interrupts.Interrupted`, whose line names the round the rerun
resumes from.
"""

import logging
import time
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from one_shot_epe.flower_engine import strategies
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import round_record

__all__ = ['AuditedStrategy']

# The aggregated train metrics read as the round's training loss, in order.
_LOSS_METRICS = ('train_loss', 'loss')


class AuditedStrategy(Strategy):
  """The DP wrapper, observed: seeds, cosines, checkpoints, run directory."""

  def __init__(self, audit: strategies.Audit, dp: Strategy,
               inner: strategies.CanaryStrategy,
               health: round_record.RoundObserver | None = None):
    """Observes `dp`, whose inner strategy is `inner`, for `audit`.

    Args:
      audit: The run's audit (`audit.CanaryAudit`).
      dp: The user's DP wrapper.
      inner: The canary strategy inside it.
      health: Told of each round's clip and training loss; None: nobody.
    """
    super().__init__()
    self._audit = audit
    self._health = health
    self.dp = dp
    self._inner = inner
    self._offset = 0
    self._current = np.zeros(0)
    # The last round's release and its flat copy (the next round's theta).
    self._released: tuple[ArrayRecord | None, np.ndarray] = (None,
                                                              np.zeros(0))
    self._started = 0.0
    # theta_{t-1} as Flower passed it (a skipped round keeps it).
    self._arrays = ArrayRecord()

  def summary(self) -> None:
    """Logs the DP wrapper's summary."""
    self.dp.summary()

  def configure_train(self, server_round: int, arrays: ArrayRecord,
                      config: ConfigRecord, grid: Grid) -> Iterable[Message]:
    """The DP wrapper's messages for training round `server_round` + offset.

    Seeds the round (stage 0), notes theta_{t-1} flat (reusing the last
    release's copy) and starts the round's clock.

    Args:
      server_round: Flower's round, 1-based from this start; the run's round
        is it plus the rounds a resumed run had already trained.
      arrays: theta_{t-1}, the model the clients train from.
      config: the training config sent to the clients.
      grid: Flower's Grid, to sample the clients from.

    Returns:
      The DP wrapper's training messages.
    """
    t = server_round + self._offset
    self._audit.seed_round(t, 0)
    released, flat = self._released
    self._current = flat if arrays is released else strategies.flatten(arrays)
    self._arrays = arrays
    self._started = time.perf_counter()
    messages = self.dp.configure_train(t, arrays, config, grid)
    self._inner.theta = self._current
    return messages

  def aggregate_train(self, server_round: int, replies: Iterable[Message]
                      ) -> tuple[ArrayRecord | None, MetricRecord | None]:
    """The noised aggregate; scores, records and checkpoints the round.

    Args:
      server_round: Flower's round, 1-based from this start (offset as in
        `configure_train`).
      replies: the clients' training replies.

    Returns:
      The DP wrapper's (arrays, metrics): theta_t and its metrics; (None,
      None) when it skipped the round (an error reply, no reply), which is
      recorded as a round without a release.
    """
    t = server_round + self._offset
    self._audit.seed_round(t, 1)
    replies = list(replies)
    arrays, metrics = self.dp.aggregate_train(t, replies)
    if arrays is None:
      failures = sum(reply.has_error() for reply in replies)
      self._audit.on_skipped_round(
          t, time.perf_counter() - self._started, self._inner.clip,
          len(replies) - failures, failures, self._arrays, self.dp)
      return arrays, metrics
    self._released = (arrays, strategies.flatten(arrays))
    self._audit.on_round(t, self._released[1] - self._current,
                         time.perf_counter() - self._started,
                         self._inner, arrays, self.dp)
    if self._health is not None:
      loss = next((metrics[name] for name in _LOSS_METRICS
                   if metrics is not None and name in metrics), None)
      self._health.on_round(round_record.RoundRecord(
          round_num=t, metrics={}, clip=self._inner.clip,
          loss=float(loss) if isinstance(loss, (int, float)) else None))
    return arrays, metrics

  def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                         config: ConfigRecord,
                         grid: Grid) -> Iterable[Message]:
    """The DP wrapper's evaluation messages.

    Args:
      server_round: Flower's round, 1-based from this start (offset as in
        `configure_train`).
      arrays: the model to evaluate.
      config: the evaluation config sent to the clients.
      grid: Flower's Grid, to sample the clients from.

    Returns:
      The DP wrapper's evaluation messages.
    """
    return self.dp.configure_evaluate(server_round + self._offset, arrays,
                                      config, grid)

  def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                         ) -> MetricRecord | None:
    """The DP wrapper's evaluation metrics.

    Args:
      server_round: Flower's round, 1-based from this start (offset as in
        `configure_train`).
      replies: the clients' evaluation replies.

    Returns:
      The DP wrapper's aggregated metrics, or None when it has none.
    """
    return self.dp.aggregate_evaluate(server_round + self._offset, replies)

  def start(self, grid: Grid, initial_arrays: ArrayRecord,
            num_rounds: int = 3, timeout: float = 3600,
            train_config: ConfigRecord | None = None,
            evaluate_config: ConfigRecord | None = None,
            evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None]
            | None = None) -> Result:
    """Flower's start of a strategy, resumed from the run's newest checkpoint.

    Trains the rounds after the checkpoint (none if the run is complete),
    then writes the run's results (`CanaryAudit.report` holds the report).

    Args:
      grid: Flower's Grid.
      initial_arrays: theta_0 (ignored when resuming but for its layout).
      num_rounds: T; must be the audit's `rounds`.
      timeout: seconds to wait for the clients' replies, as Flower's.
      train_config: the training config sent to the clients, as Flower's
        (None: empty).
      evaluate_config: the evaluation config sent to the clients, as
        Flower's (None: empty).
      evaluate_fn: As Flower's (rounds numbered from the run's start); a
        'accuracy' in its last MetricRecord is the report's accuracy.

    Returns:
      Flower's `Result`, its `arrays` theta_T.

    Raises:
      ValueError: `num_rounds` is not the audit's rounds, or the model has
        fewer than 3 parameters (naming initial_arrays), before any work.
      run_directory.RunDirectoryError: the run directory holds another run.
      interrupts.Interrupted: an interrupt (KeyboardInterrupt) stopped the
        run, its state saved after the last completed round; its message
        names that round.
    """
    audit = self._audit
    if num_rounds != audit.rounds:
      raise ValueError(f'num_rounds must be the audit\'s rounds '
                       f'({audit.rounds}); got {num_rounds!r}.')
    arrays = audit.open_run(initial_arrays, self.dp)
    self._offset = audit.resumed_from
    log(logging.INFO, '%s', audit.opening)
    last = {}

    def offset_evaluate(server_round: int, model: ArrayRecord
                        ) -> MetricRecord | None:
      metrics = evaluate_fn(server_round + self._offset, model)
      if metrics is not None:
        last['metrics'] = metrics
      return metrics

    with audit.owned():
      try:
        result = super().start(
            grid, arrays, num_rounds - self._offset, timeout, train_config,
            evaluate_config, offset_evaluate if evaluate_fn else None)
      except KeyboardInterrupt:
        raise interrupts.Interrupted(audit.stop()) from None
      # theta_T: the last release (none at all: theta as started from).
      if self._released[0] is not None:
        result.arrays = self._released[0]
      else:
        result.arrays = arrays
      accuracy = last.get('metrics', {}).get('accuracy')
      audit.finish(result.arrays, self.dp,
                   None if accuracy is None else float(accuracy))
    return result
