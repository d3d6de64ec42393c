"""Flower's strategies with canaries: where the canaries enter the round.

`CanaryAudit.wrap` (`audit`) nests a Flower strategy as:
`audited_strategy.AuditedStrategy` (seeds each round, observes the released
aggregate, checkpoints) around the user's DP wrapper (server-side clipping,
or client-side fixed clipping with Flower's fixedclipping_mod on the
clients), around `CanaryStrategy` (FedAvg with the round's canary replies
added, inside the noise), around the user's FedAvg. `check_strategy`
refuses, by name, what cannot be audited soundly; `Audit` is what both
strategies ask of the audit.
"""

import contextlib
import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np
from flwr.app import (Array, ArrayRecord, ConfigRecord, Message, MessageType,
                      MetricRecord, RecordDict)
from flwr.common.logger import FLOWER_LOGGER
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy)

__all__ = ['Audit', 'AuditRefused', 'CanaryStrategy', 'check_strategy',
           'flatten']


class Audit(Protocol):
  """What the strategies ask of `audit.CanaryAudit` (which imports them)."""
  spec: Any
  bank: Any
  rounds: int
  resumed_from: int

  def seed_round(self, round_num: int, stage: int) -> None:
    """Seeds the round's random draws.

    Args:
      round_num: the training round, 1-based, counted from the run's start.
      stage: 0 before the round's client sampling, 1 before its noise.
    """

  @property
  def opening(self) -> str:
    """The run's opening line: where it runs, new or resumed."""

  def on_skipped_round(self, round_num: int, seconds: float, clip: float,
                       replies: int, failures: int, arrays: Any,
                       dp: Any) -> None:
    """Records a round the DP wrapper released nothing for.

    Args:
      round_num: the training round, 1-based, counted from the run's start.
      seconds: the round's wall time in seconds.
      clip: the clip the round's replies were to be clipped to.
      replies: the replies free of errors.
      failures: the error replies.
      arrays: theta_{t-1}, still the model, as Flower's ArrayRecord.
      dp: the DP wrapper (its clip).
    """

  def stop(self) -> str:
    """Saves the state after the last completed round; the interrupt's line.

    Returns:
      The line, naming the round the rerun resumes from.
    """

  def on_round(self, round_num: int, vector: Any, seconds: float,
               inner: Any, arrays: Any, dp: Any) -> None:
    """Records a trained round.

    Args:
      round_num: the training round, 1-based, counted from the run's start.
      vector: theta_t - theta_{t-1}, the released aggregate, flat float64.
      seconds: the round's wall time in seconds, clients' training included.
      inner: the `CanaryStrategy` (its clip and the round's counts).
      arrays: theta_t, as Flower's ArrayRecord.
      dp: the DP wrapper (its clip after the round).
    """

  def open_run(self, initial_arrays: Any, dp: Any) -> Any:
    """Checks or resumes the run directory; the arrays to start from.

    Args:
      initial_arrays: theta_0, as Flower's ArrayRecord (also the layout of a
        resumed model).
      dp: the DP wrapper (its clip is restored on resume).

    Returns:
      theta_0, or the newest checkpoint's model.
    """

  def owned(self) -> Any:
    """The run directory, held for the run."""

  def finish(self, final_arrays: Any, dp: Any, accuracy: Any) -> Any:
    """Writes the run's results.

    Args:
      final_arrays: theta_T, as Flower's ArrayRecord.
      dp: the DP wrapper (its noise multiplier and clip).
      accuracy: the final model's accuracy in [0, 1], or None when unknown.

    Returns:
      The run's report.
    """

_SERVER_SIDE = (DifferentialPrivacyServerSideFixedClipping,
                DifferentialPrivacyServerSideAdaptiveClipping)
# The DP wrappers audited: the server clips, or (at a fixed clip) the
# clients do, with Flower's fixedclipping_mod.
_AUDITED = _SERVER_SIDE + (DifferentialPrivacyClientSideFixedClipping,)


class AuditRefused(ValueError):
  """A strategy the audit cannot audit soundly; the message names it."""


def flatten(arrays: ArrayRecord) -> np.ndarray:
  """The arrays of `arrays`, in order, as one float64 vector.

  Args:
    arrays: a model's parameters, as Flower's ArrayRecord.

  Returns:
    float64 [d]: each array raveled (C order), concatenated in the record's
    key order; d is the total number of parameters.
  """
  return np.concatenate([np.asarray(a, np.float64).ravel()
                         for a in arrays.to_numpy_ndarrays()])


def check_strategy(strategy: object) -> Strategy:
  """A DP wrapper around FedAvg the audit can audit, or AuditRefused naming why.

  Accepted: Flower's server-side wrappers (fixed or adaptive clip) and its
  client-side fixed-clipping wrapper, with or without Flower's privacy
  accountant (`accountant=`, which the wrapper keeps composing).

  Args:
    strategy: the strategy the user asks to audit.

  Returns:
    `strategy` itself, once checked.

  Raises:
    AuditRefused: `strategy` is the client-side adaptive wrapper, or no DP
      wrapper; it already holds an audit's canaries; or it wraps a strategy
      whose aggregate_train is not FedAvg's weighted mean.
  """
  name = type(strategy).__name__
  if isinstance(strategy, DifferentialPrivacyClientSideAdaptiveClipping):
    raise AuditRefused(
        f'{name}: client-side adaptive clipping noises a round at the clip '
        'Flower sets from the clients\' norm bits after averaging the '
        'replies, not at the clip the clients (and canaries) were clipped to; '
        'use DifferentialPrivacyServerSideAdaptiveClipping, or '
        'DifferentialPrivacyClientSideFixedClipping with fixedclipping_mod.')
  if not isinstance(strategy, _AUDITED):
    raise AuditRefused(
        f'{name}: the audit needs one of Flower\'s DP wrappers '
        '(DifferentialPrivacyServerSideFixedClipping, '
        'DifferentialPrivacyServerSideAdaptiveClipping or '
        'DifferentialPrivacyClientSideFixedClipping) around FedAvg; a '
        'strategy without DP noise has nothing to audit.')
  inner = strategy.strategy
  if isinstance(inner, CanaryStrategy):
    raise AuditRefused(f'{name} already holds the canaries of an audit.')
  if not isinstance(inner, FedAvg) or (
      type(inner).aggregate_train is not FedAvg.aggregate_train):
    raise AuditRefused(
        f'{name} wraps {type(inner).__name__}, whose aggregate_train is not '
        'FedAvg\'s mean: the wrapper\'s noise is scaled to the mean of the '
        'clipped updates, which a server optimizer (FedAvgM, FedAdam, ...) '
        'or a robust aggregate (FedMedian, Krum, ...) moves; wrap FedAvg '
        '(FedProx too: its aggregation is FedAvg\'s) and apply a server '
        'optimizer to the noised model instead.')
  return strategy


def _check_clipped(replies: list[Message], theta: np.ndarray, clip: float,
                   wrapper: str) -> None:
  """AuditRefused unless every reply's update is within the clip.

  Up to float32 rounding: fixedclipping_mod takes the update's norm in
  float32 (a sum of d squares, off by about sqrt(d) epsilons; allowed 16
  sqrt(d)) and replies theta + the clipped update in the model's dtype
  (off by a few epsilons of ||theta||; allowed 4).
  """
  eps = float(np.finfo(np.float32).eps)
  slack = eps * (16 * math.sqrt(theta.size) * clip +
                 4 * float(np.linalg.norm(theta)))
  for reply in replies:
    arrays = next(record for record in reply.content.values()
                  if isinstance(record, ArrayRecord))
    norm = float(np.linalg.norm(flatten(arrays) - theta))
    if norm > clip + slack:
      raise AuditRefused(
          f'a reply\'s update has norm {norm:.6g} > the clip {clip:g}: with '
          f'{wrapper} the clients clip, and a client without Flower\'s '
          'fixedclipping_mod in its ClientApp\'s mods voids the noise\'s '
          'guarantee; add the mod.')


def _metric_record(reply: Message) -> tuple[str, MetricRecord | None]:
  """A reply's first MetricRecord and its name (None if it has none).

  Read from the record dict's items: its `metric_records` view rebuilds a
  synchronised dict on every access, which costs more than the round's
  canaries.
  """
  for name, record in reply.content.items():
    if isinstance(record, MetricRecord):
      return name, record
  return '', None


def _equal_weight(records: list[MetricRecord | None], key: str) -> float:
  """The replies' common FedAvg weight, or AuditRefused naming the weights."""
  weights = []
  for record in records:
    weight = None if record is None else record.get(key)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
      raise AuditRefused(f'a reply has no number under FedAvg\'s '
                         f'weighted_by_key {key!r}; got {weight!r}.')
    weights.append(weight)
  if any(w != weights[0] for w in weights):
    raise AuditRefused(
        f'FedAvg\'s weighted_by_key {key!r} gives the replies unequal weights '
        f'{sorted(set(weights))}: a weighted mean changes a client\'s '
        'sensitivity, so the DP wrapper\'s noise is no longer z S / N; '
        f'report equal {key!r} (e.g. 1) from every client.')
  return weights[0]


def _metric_means(records: list[MetricRecord], key: str) -> dict[str, Any]:
  """The first record's keys with the records' mean values (lists: its own)."""
  means = {}
  for name, value in records[0].items():
    values = [r[name] for r in records]
    if name != key and all(isinstance(v, (int, float)) for v in values):
      means[name] = float(np.mean(values))
    else:
      means[name] = value
  return means


# FedAvg's line counting a round's replies (`FedAvg._check_and_log_replies`).
_RECEIVED = '%s: Received %s results and %s failures'


class _RealReplies(logging.Filter):
  """FedAvg's count of a round's replies without the canaries' one reply."""

  def __init__(self, canaries: int):
    super().__init__()
    self._canaries = canaries

  def filter(self, record: logging.LogRecord) -> bool:
    """Rewrites FedAvg's 'Received N results' line; passes every record.

    Args:
      record: A record of Flower's logger.

    Returns:
      True.
    """
    if record.msg == _RECEIVED and isinstance(record.args, tuple) and len(
        record.args) == 3 and record.args[0] == 'aggregate_train':
      kind, results, failures = record.args
      record.msg = _RECEIVED + ', and the round\'s %s canaries as one reply'
      record.args = (kind, results - 1, failures, self._canaries)
    return True


@contextlib.contextmanager
def _counting_real_replies(canaries: int) -> Iterator[None]:
  """The block in which FedAvg's reply count leaves the canaries' reply out."""
  if not canaries:
    yield
    return
  real = _RealReplies(canaries)
  FLOWER_LOGGER.addFilter(real)
  try:
    yield
  finally:
    FLOWER_LOGGER.removeFilter(real)


class CanaryStrategy(Strategy):
  """FedAvg with the round's canary replies added (inside the DP wrapper)."""

  def __init__(self, audit: Audit, fedavg: FedAvg, dp: Strategy):
    super().__init__()
    self._audit = audit
    self.fedavg = fedavg
    self._dp = dp
    self._divisor = dp.num_sampled_clients
    self._clients_clip = isinstance(dp,
                                    DifferentialPrivacyClientSideFixedClipping)
    self.clip = float(dp.clipping_norm)
    self._current: ArrayRecord | None = None
    # theta_{t-1} as one float64 vector, when the caller has it flat
    # (`AuditedStrategy`); else flattened from `_current` when needed.
    self.theta: np.ndarray | None = None
    # The last aggregated round's real replies, canaries and noise std.
    self.round_stats: dict[str, float] = {}

  @property
  def num_sampled_clients(self) -> int:
    """The DP wrapper's own `num_sampled_clients`, as the user built it."""
    return self._divisor

  @property
  def weighted_by_key(self) -> str:
    """FedAvg's `weighted_by_key` (read by a wrapper with an accountant)."""
    return self.fedavg.weighted_by_key

  def summary(self) -> None:
    """Logs FedAvg's summary."""
    self.fedavg.summary()

  def configure_train(self, server_round: int, arrays: ArrayRecord,
                      config: ConfigRecord, grid: Grid) -> Iterable[Message]:
    """FedAvg's messages; notes the clip the replies will be clipped to.

    Also resets the DP wrapper's divisor to the sampled clients, which
    `aggregate_train` changed for the previous round's noise.

    Args:
      server_round: the round, as the DP wrapper numbers it (from the run's
        start).
      arrays: theta_{t-1}, the model the clients train from.
      config: the training config sent to the clients.
      grid: Flower's Grid, to sample the clients from.

    Returns:
      FedAvg's training messages, one per sampled client.
    """
    self._dp.num_sampled_clients = self._divisor
    self.clip = float(self._dp.clipping_norm)
    if self._current is not arrays:
      self.theta = None
    self._current = arrays
    return self.fedavg.configure_train(server_round, arrays, config, grid)

  def _canary_reply(self, ids: np.ndarray, template: Message,
                    metrics_name: str, metrics: dict[str, Any],
                    weight: float) -> Message:
    """The round's canaries as one reply of weight k_t w.

    FedAvg's mean is linear: a reply theta + (S_t / k_t) sum_j c_j weighing
    k_t w adds to the weighted sum exactly what k_t replies theta + S_t c_j
    of weight w would, at the cost of one message.
    """
    record_name = next(name for name, record in template.content.items()
                       if isinstance(record, ArrayRecord))
    update = self._audit.bank.seen(ids).sum(axis=0, dtype=np.float64)
    reply = self.theta + (self.clip / ids.size) * update
    arrays, start = {}, 0
    for key, array in self._current.items():
      size = math.prod(array.shape)
      arrays[key] = Array(reply[start:start + size].reshape(
          array.shape).astype(np.dtype(array.dtype)))
      start += size
    metrics = MetricRecord({**metrics, self.fedavg.weighted_by_key:
                            weight * ids.size})
    return Message(content=RecordDict({record_name: ArrayRecord(arrays),
                                       metrics_name: metrics}),
                   dst_node_id=0, message_type=MessageType.TRAIN)

  def aggregate_train(self, server_round: int, replies: Iterable[Message]
                      ) -> tuple[ArrayRecord | None, MetricRecord | None]:
    """FedAvg over the clipped replies and the round's canaries.

    Adds the round's scheduled canaries as one reply (`_canary_reply`), sets
    the DP wrapper's divisor so that its noise std is z S_t / (n + k_t) for
    its n sampled clients and the k_t canaries (Flower's calibration to the
    sample, the canaries counted: z S_t / N_t when every sampled reply
    came), and notes the round's counts, noise std and effective noise
    multiplier z N_t / (n + k_t) in `round_stats`. FedAvg's log line
    counting the replies counts the real ones and names the canaries.

    Args:
      server_round: the round, as the DP wrapper numbers it (from the run's
        start); round t inserts the schedule's row t - 1, none past it.
      replies: the clients' replies, already clipped (by the server-side DP
        wrapper, or by the clients' fixedclipping_mod).

    Returns:
      FedAvg's (arrays, metrics) of the mean; FedAvg's own answer when no
      reply is valid (no canary is added then).

    Raises:
      AuditRefused: a valid reply has no number under FedAvg's
        weighted_by_key, or the replies' weights differ; or, the clients
        clipping (client-side wrapper), a reply's update exceeds the clip.
    """
    replies = list(replies)
    valid = [reply for reply in replies if not reply.has_error()]
    if not valid:
      return self.fedavg.aggregate_train(server_round, replies)
    if self.theta is None:
      self.theta = flatten(self._current)
    if self._clients_clip:
      _check_clipped(valid, self.theta, self.clip, type(self._dp).__name__)
    key = self.fedavg.weighted_by_key
    named = [_metric_record(reply) for reply in valid]
    records = [record for _, record in named]
    weight = _equal_weight(records, key)
    schedule = self._audit.spec.schedule
    ids = (np.asarray(schedule[server_round - 1], np.int64)
           if server_round <= len(schedule) else np.zeros(0, np.int64))
    added = []
    if ids.size:
      added.append(self._canary_reply(ids, valid[0], named[0][0],
                                      _metric_means(records, key), weight))
    count = len(valid) + ids.size
    # Flower calibrates the noise to the sample: std z S / num_sampled_clients
    # (at the clip after its update, S_{t+1}, under adaptive clipping). With
    # the round's canaries counted in the sample, the std becomes
    # z S_t / (n + k_t), whatever the number of replies aggregated: all n
    # sampled replies came, and it is z S_t / N_t; fewer came, and the
    # mean of N_t records got the noise of a multiplier z N_t / (n + k_t).
    planned = self._divisor + ids.size
    self._dp.num_sampled_clients = (planned * float(self._dp.clipping_norm) /
                                    self.clip)
    z = float(self._dp.noise_multiplier)
    self.round_stats = {
        'num_clients': len(valid), 'failures': len(replies) - len(valid),
        'canaries_inserted': int(ids.size),
        'noise_std': z * self.clip / planned,
        'effective_noise_multiplier': z * count / planned}
    with _counting_real_replies(int(ids.size)):
      return self.fedavg.aggregate_train(server_round, replies + added)

  def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                         config: ConfigRecord,
                         grid: Grid) -> Iterable[Message]:
    """FedAvg's evaluation messages.

    Args:
      server_round: the round, as the DP wrapper numbers it.
      arrays: the model to evaluate.
      config: the evaluation config sent to the clients.
      grid: Flower's Grid, to sample the clients from.

    Returns:
      FedAvg's evaluation messages.
    """
    return self.fedavg.configure_evaluate(server_round, arrays, config, grid)

  def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                         ) -> MetricRecord | None:
    """FedAvg's evaluation metrics.

    Args:
      server_round: the round, as the DP wrapper numbers it.
      replies: the clients' evaluation replies.

    Returns:
      FedAvg's aggregated metrics, or None when it has none.
    """
    return self.fedavg.aggregate_evaluate(server_round, replies)
