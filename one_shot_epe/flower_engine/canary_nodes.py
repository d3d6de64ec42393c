"""Data canaries in a Flower federation: canary clients as ordinary nodes.

A data canary (`data.canary_examples`) is a client holding examples nobody
else holds: here it is a node of the federation like any other, so the
audit needs no strategy wrapper and works where the server's aggregation
cannot be touched. With N real nodes (partitions 0..N-1), seen canary j is
the node of partition N + j (a federation of N + k nodes), its examples
pinned by (canary seed, j) (`canary_node_examples`, the same arrays in any
process: a Ray actor, a SuperNode's ClientApp); unseen canaries (ids from
`canary_spec.UNSEEN_ID_OFFSET`) are never nodes. A canary node trains
through the ClientApp's own path (local training, `fixedclipping_mod` under
client-side clipping) and tags its reply (`tag_reply`: an extra
ConfigRecord, which flwr 1.42's FedAvg, its DP wrappers and
fixedclipping_mod leave alone: they read one ArrayRecord and one
MetricRecord); Flower samples it as it samples any client, so the canaries'
presentations vary.

`DataCanaryAudit.observe(grid)` is the grid to start the strategy on: it
records, for each training round, the replies and which seen canaries
replied, and, given the user's loss (`observe(grid, losses_fn)`), scores
every canary on the model each round sends (for the all-iterates threat
model: each canary's largest excess one-round loss drop, `runtime.loss_drops`);
`DataCanaryAudit.finish` scores every canary with the user's loss on the
final model (black-box threat models: the final model, and every round's
model when observed), and writes the run directory and the privacy report
of `canary_kind='data'`
(`reporting.run_report.build_run_report`). Which rounds released a model
follows Flower's DP wrappers' rule (`validate_replies`: no error reply and,
with an accountant, `num_sampled_clients` replies); a canary's
presentations are its replies in released rounds. The references (the
canary's analytical ε at the most presentations any seen canary had, a
real client's accounted ε) are those of the fixed-clipping wrapper's
Gaussian noise. No checkpoints: the run's checkpointing is the user's
strategy's, and a run is audited whole.

Example (examples/flower_fashion_mnist.py --canary_kind=data runs it):

  auditor = DataCanaryAudit(run_dir='out/run', num_canaries=100, rounds=T,
                            delta=1e-5, num_real_nodes=N, kind='emnist',
                            num_labels=10)
  result = strategy.start(auditor.observe(grid), initial_arrays,
                          num_rounds=T)
  report = auditor.finish(result.arrays, losses_fn, dp=strategy)
"""

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping, Strategy)

from one_shot_epe import validation
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import flower_accountant
from one_shot_epe.flower_engine import releases as releases_lib
from one_shot_epe.flower_engine import strategies
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import loss_drops
from one_shot_epe.runtime import npz_checkpoints
from one_shot_epe.runtime import run_directory

__all__ = ['CANARY_RECORD', 'DataCanaryAudit', 'LossesFn', 'ObservedGrid',
           'canary_id', 'canary_node_examples', 'tag_reply']

# The ConfigRecord a canary node's reply carries: {'canary-id': j}.
CANARY_RECORD = 'one-shot-epe.data-canary'
_CANARY_KEY = 'canary-id'
# The training messages' round, as FedAvg's configure_train sets it.
_ROUND_KEY = 'server-round'
# config.json's entries known only once the DP wrapper is (`finish`).
_DP_KEYS = frozenset({'dp_wrapper', 'noise_multiplier', 'clipping_norm',
                      'num_sampled_clients', 'dim'})
_EXAMPLES = validation.Int(1, 4096)

# losses_fn(arrays, inputs, labels): per-example losses or their mean.
LossesFn = Callable[[ArrayRecord, np.ndarray, np.ndarray], Any]


def canary_id(partition_id: int, num_real_nodes: int,
              num_canaries: int) -> int | None:
  """Which seen canary the node of `partition_id` is, if any.

  Args:
    partition_id: The node's partition (its node config's 'partition-id').
    num_real_nodes: N, the real nodes (partitions 0..N-1).
    num_canaries: k, the seen canaries (partitions N..N+k-1).

  Returns:
    j for partition N + j; None for a real node.

  Raises:
    ValueError: naming partition_id, if it is outside [0, N + k).
  """
  num_real_nodes = validation.check_int('num_real_nodes', num_real_nodes, 1)
  num_canaries = validation.check_int('num_canaries', num_canaries, 0)
  partition_id = validation.check_int('partition_id', partition_id, 0,
                                      num_real_nodes + num_canaries - 1)
  return None if partition_id < num_real_nodes else (
      partition_id - num_real_nodes)


def canary_node_examples(
    partition_id: int, num_real_nodes: int, num_canaries: int,
    canary_seed: int, kind: str,
    examples_per_canary: int = canary_kinds.DATA_CANARY_EXAMPLES, *,
    num_labels: int | None = None, vocab_size: int | None = None,
    images: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
  """The examples a node trains on when it is a canary; None for a real node.

  A pure function of its arguments: every process (a Ray actor, a
  SuperNode's ClientApp) gets the same arrays, those every engine's canary
  (canary_seed, j) holds (`data.canary_examples.canary_arrays`).

  Args:
    partition_id: The node's partition; N + j is seen canary j.
    num_real_nodes: N, the real nodes (partitions 0..N-1).
    num_canaries: k, the seen canaries.
    canary_seed: The audit's canary seed, in [0, 2^32).
    kind: 'emnist' (images) or 'stackoverflow' (text).
    examples_per_canary: Examples each canary holds, in [1, 4096].
    num_labels: Kind 'emnist': the task's classes, >= 2.
    vocab_size: Kind 'stackoverflow': the vocabulary's size, >= 1.
    images: Kind 'emnist': the pool the canaries' images come from (the
      task's test split, [n, 28, 28]); None for random pixels.

  Returns:
    None, or (inputs, labels): float32 images [e, 28, 28] and int32 labels
    [e] (each uniform over the classes), or int32 sentences [e, 20] and
    their next words [e, 20].

  Raises:
    ValueError: naming the argument out of range.
  """
  canary = canary_id(partition_id, num_real_nodes, num_canaries)
  if canary is None:
    return None
  arrays = canary_examples.canary_arrays(
      canary_spec.check_seed(canary_seed), np.asarray([canary]), kind,
      examples_per_canary, num_labels=num_labels, vocab_size=vocab_size,
      images=images)
  return client_arrays.model_inputs(kind, arrays.features)


def tag_reply(content: RecordDict, canary: int) -> RecordDict:
  """Tags a canary node's training reply with its canary id.

  The tag is one ConfigRecord (`CANARY_RECORD`) beside the reply's
  ArrayRecord and MetricRecord: flwr 1.42's FedAvg aggregates only those
  two, its DP wrappers check and clip only those, and fixedclipping_mod
  clips the one ArrayRecord, so the tag changes no aggregate.

  Args:
    content: The reply's content (one ArrayRecord, one MetricRecord with the
      keys every client's has).
    canary: The node's seen canary id (`canary_id`).

  Returns:
    `content`, tagged.
  """
  content[CANARY_RECORD] = ConfigRecord(
      {_CANARY_KEY: validation.check_int('canary', canary, 0)})
  return content


def _tagged_canary(reply: Message) -> int | None:
  """The canary id a reply is tagged with; None for a client's or an error."""
  if reply.has_error():
    return None
  record = reply.content.config_records.get(CANARY_RECORD)
  value = None if record is None else record.get(_CANARY_KEY)
  return value if isinstance(value, int) else None


def _is_training(message: Message) -> bool:
  """Whether `message` asks a node to train ('train' or 'train.<action>')."""
  return message.metadata.message_type.split('.')[0] == MessageType.TRAIN


def _round_of(messages: list[Message]) -> int | None:
  """The 'server-round' of the training messages' config, if they carry it."""
  for message in messages:
    for record in message.content.config_records.values():
      value = record.get(_ROUND_KEY)
      if isinstance(value, int):
        return value
  return None


@dataclasses.dataclass
class _RoundReplies:
  """What the grid saw of one training round.

  Attributes:
    replies: The replies with content.
    failures: The error replies.
    canaries: The seen canaries that replied, once per reply.
  """
  replies: int = 0
  failures: int = 0
  canaries: list[int] = dataclasses.field(default_factory=list)


class ObservedGrid(Grid):
  """A Flower Grid that records each training round's replies for the audit.

  Every method is the wrapped grid's; `send_and_receive` (what Flower's
  strategies call) also records, for a training round, the model it sends
  (`DataCanaryAudit.record_model`: theta_{t-1}, scored on the canaries
  when the audit scores every round) and its replies, error replies and
  tagged canaries (`DataCanaryAudit.record`). Messages sent with
  `push_messages` and `pull_messages` directly are not observed.
  """

  def __init__(self, grid: Grid, audit: 'DataCanaryAudit'):
    """Wraps `grid`.

    Args:
      grid: The grid Flower gave the ServerApp (or a `local_grid.LocalGrid`).
      audit: The audit that records the rounds.
    """
    self._grid = grid
    self._audit = audit

  def set_run(self, run: Any) -> None:
    """The wrapped grid's.

    Args:
      run: Flower's run.
    """
    self._grid.set_run(run)

  @property
  def run(self) -> Any:
    """The wrapped grid's run."""
    return self._grid.run

  def create_message(self, *args: Any, **kwargs: Any) -> Message:
    """The wrapped grid's.

    Args:
      *args: As Flower's `Grid.create_message` takes them.
      **kwargs: As Flower's `Grid.create_message` takes them.

    Returns:
      The message.
    """
    return self._grid.create_message(*args, **kwargs)

  def get_node_ids(self) -> Iterable[int]:
    """The wrapped grid's node ids.

    Returns:
      The node ids.
    """
    return self._grid.get_node_ids()

  def get_nodes(self) -> Iterable[Any]:
    """The wrapped grid's nodes.

    Returns:
      Flower's NodeInfo of each node.
    """
    return self._grid.get_nodes()

  def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
    """The wrapped grid's (not observed).

    Args:
      messages: The messages to send.

    Returns:
      Their ids.
    """
    return self._grid.push_messages(messages)

  def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
    """The wrapped grid's (not observed).

    Args:
      message_ids: The ids of the messages whose replies to pull.

    Returns:
      The replies pulled.
    """
    return self._grid.pull_messages(message_ids)

  def send_and_receive(self, messages: Iterable[Message], *,
                       timeout: float | None = None) -> list[Message]:
    """The wrapped grid's replies; a training round's are recorded.

    Args:
      messages: The messages to send.
      timeout: As for Flower's `Grid.send_and_receive`.

    Returns:
      The replies.
    """
    messages = list(messages)
    training = [message for message in messages if _is_training(message)]
    if training:
      self._audit.record_model(_round_of(training), training[0])
    replies = list(self._grid.send_and_receive(messages, timeout=timeout))
    if training:
      self._audit.record(_round_of(training), replies)
    return replies


class DataCanaryAudit:
  """The data canaries of one Flower run, from the grid's replies to report.

  Attributes:
    run_dir: The run directory.
    rounds: T.
    num_canaries: k seen canaries (nodes N..N+k-1).
    num_unseen_canaries: m unseen canaries (never nodes).
    num_real_nodes: N.
    kind: The canaries' data kind, 'emnist' or 'stackoverflow'.
    examples_per_canary: Examples each canary holds.
    canary_seed: The canaries' seed.
    delta: The delta of every epsilon of the report.
    alpha: 1 - the confidence of the report's lower bounds.
    report: The run's report once `finish` has run.
    outcome: What the run measured (`canary_spec.CanaryOutcome`), then.
  """

  def __init__(self, *, run_dir: str, num_canaries: int, rounds: int,
               delta: float, num_real_nodes: int, kind: str,
               examples_per_canary: int = canary_kinds.DATA_CANARY_EXAMPLES,
               num_labels: int | None = None, vocab_size: int | None = None,
               images: np.ndarray | None = None,
               num_unseen_canaries: int | None = None, canary_seed: int = 0,
               alpha: float = 0.05):
    """Plans the data canaries of a run of `rounds` rounds on N + k nodes.

    Args:
      run_dir: Where the run's files go (its parent is created as needed);
        it, or its nearest existing parent, must be writable, and it must
        not hold another run.
      num_canaries: k >= 2 seen canaries: the nodes of partitions N..N+k-1,
        at most N (Flower samples them as any client: they are then at most
        half of a round's expected participants).
      rounds: T >= 1 training rounds.
      delta: The delta of every epsilon of the report, in (0, 1).
      num_real_nodes: N >= 1, the real clients (partitions 0..N-1).
      kind: 'emnist' (images) or 'stackoverflow' (text), as
        `data.canary_examples`.
      examples_per_canary: Examples each canary holds, in [1, 4096].
      num_labels: Kind 'emnist' (only): the task's classes, >= 2.
      vocab_size: Kind 'stackoverflow' (only): the vocabulary's size, >= 1.
      images: Kind 'emnist' (only): the pool of images [n, 28, 28] (n >=
        examples_per_canary) the canaries draw theirs from, e.g. the task's
        test split; None for random pixels.
      num_unseen_canaries: m >= 2 canaries scored, never nodes (default k).
      canary_seed: Canary j's examples are a pure function of
        (canary_seed, j), in [0, 2^32).
      alpha: 1 - the confidence of the report's lower bounds, in (0, 0.5).

    Raises:
      ValueError: before any work, naming the argument: one out of range or
        missing for `kind`, more canaries than real nodes, or a `run_dir`
        that cannot be written or holds another run.
    """
    self.num_canaries = canary_spec.AUDITED_CANARIES['num_seen'](
        'num_canaries', num_canaries)
    self.rounds = validation.PARAMETERS['rounds']('rounds', rounds)
    self.delta = validation.check_probability('delta', delta)
    self.num_real_nodes = validation.check_int('num_real_nodes',
                                               num_real_nodes, 1)
    self.kind = validation.check_choice('kind', kind, client_arrays.KINDS)
    self.examples_per_canary = _EXAMPLES('examples_per_canary',
                                         examples_per_canary)
    self._num_labels = self._kind_argument('num_labels', num_labels, 'emnist')
    self._vocab_size = self._kind_argument('vocab_size', vocab_size,
                                           'stackoverflow')
    if images is not None and self.kind != 'emnist':
      raise ValueError(f"images are for kind 'emnist'; got kind {kind!r}.")
    self.num_unseen_canaries = canary_spec.AUDITED_CANARIES['num_seen'](
        'num_unseen_canaries',
        num_canaries if num_unseen_canaries is None else num_unseen_canaries)
    self.canary_seed = canary_spec.check_seed(canary_seed)
    self.alpha = validation.PARAMETERS['alpha']('alpha', alpha)
    # The pool's shape, and the kind's count, checked as the maker checks them.
    canary_examples.canary_arrays(
        self.canary_seed, np.zeros(0, np.int64), self.kind,
        self.examples_per_canary, num_labels=self._num_labels,
        vocab_size=self._vocab_size, images=images)
    self._images = images
    nodes = self.num_real_nodes + self.num_canaries
    if self.num_canaries > canary_schedules.MAX_CANARY_SHARE * nodes:
      raise ValueError(
          f'num_canaries={self.num_canaries}: {self.num_canaries} of the '
          f'{nodes} nodes would be canaries, more than the '
          f'{canary_schedules.MAX_CANARY_SHARE:.0%} a run may have (Flower '
          'samples canary nodes as any client, so they would be over half of '
          "a round's expected participants); use at most num_real_nodes = "
          f'{self.num_real_nodes} canaries.')
    self.run_dir = os.path.abspath(run_dir)
    self._store = npz_checkpoints.NpzCheckpoints(
        os.path.join(self.run_dir, run_directory.CHECKPOINT_DIR))
    self._config: dict[str, Any] = {
        'engine': 'flower', 'canary_kind': 'data', 'rounds': self.rounds,
        'num_canaries': self.num_canaries,
        'num_unseen_canaries': self.num_unseen_canaries,
        'num_real_nodes': self.num_real_nodes,
        'data_canary_kind': self.kind,
        'data_canary_examples': self.examples_per_canary,
        'num_labels': self._num_labels, 'vocab_size': self._vocab_size,
        'data_canary_image_pool': None if images is None else len(images),
        'canary_seed': self.canary_seed, 'delta': self.delta,
        'alpha': self.alpha}
    try:
      run_directory.check_writable(self.run_dir)
      self._recheck()
    except run_directory.RunDirectoryError as error:
      raise ValueError(f'run_dir: {error}') from None
    self._rounds: dict[int, _RoundReplies] = {}
    # With `observe`'s losses_fn: the models sent, scored (all iterates).
    self._round_losses_fn: LossesFn | None = None
    self._scored_rounds: set[int] = set()
    self._drops: loss_drops.LossDrops | None = None
    self._tracked: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    self.report: run_report.RunReport | None = None
    self.outcome: canary_spec.CanaryOutcome | None = None

  def _kind_argument(self, name: str, value: int | None,
                     kind: str) -> int | None:
    """`value` if given for its kind, needed there and refused elsewhere."""
    if self.kind != kind:
      if value is not None:
        raise ValueError(f"{name} is for kind {kind!r}; got kind "
                         f'{self.kind!r}.')
      return None
    if value is None:
      raise ValueError(f'{name} is needed for kind {kind!r}.')
    return validation.check_int(name, value, 2 if kind == 'emnist' else 1)

  def _accept(self, saved: Mapping[str, Any]) -> None:
    """Raises RunDirectoryError unless `saved` is this run's config.

    Before `finish` the DP wrapper's entries are not known: a saved config
    may hold any.
    """
    keys = set(self._config) | (set(saved) - _DP_KEYS)
    differ = sorted(key for key in keys
                    if saved.get(key) != self._config.get(key))
    if differ:
      raise run_directory.RunDirectoryError(
          f'{self.run_dir!r} holds another run: its config.json differs in '
          f'{differ}; use another run_dir.', flag='run_dir')

  def _recheck(self) -> None:
    run_directory.check(self.run_dir, accept_config=self._accept,
                        checkpoints=self._store)

  def canary_examples(self, partition_id: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """`canary_node_examples` of this audit's canaries.

    Args:
      partition_id: A node's partition, in [0, N + k).

    Returns:
      The canary's (inputs, labels), or None for a real node.
    """
    return canary_node_examples(
        partition_id, self.num_real_nodes, self.num_canaries,
        self.canary_seed, self.kind, self.examples_per_canary,
        num_labels=self._num_labels, vocab_size=self._vocab_size,
        images=self._images)

  def observe(self, grid: Grid, losses_fn: LossesFn | None = None) -> Grid:
    """The grid to start the strategy on: `grid`, its rounds recorded.

    Args:
      grid: Flower's grid (the ServerApp's), of N + k nodes.
      losses_fn: As for `finish`: scores every canary on the model each
        training round sends (theta_0, ..., theta_{T-1}; `finish` scores
        theta_T), for the all-iterates report (each canary's largest excess
        one-round loss drop, `runtime.loss_drops`); None: the final model
        only.

    Returns:
      An `ObservedGrid` around `grid`.
    """
    self._round_losses_fn = losses_fn
    return ObservedGrid(grid, self)

  def record_model(self, round_num: int | None, message: Message) -> None:
    """Scores the model a training round sends, once per round.

    Called by `ObservedGrid` before the round's messages leave; nothing
    without `observe`'s `losses_fn`.

    Args:
      round_num: The round (its messages' 'server-round'); None: the round
        after the last recorded.
      message: One of the round's training messages (its ArrayRecord the
        model theta_{t-1}).

    Raises:
      ValueError: the message carries no single ArrayRecord, or
        `losses_fn` returned a loss that is not finite.
    """
    if self._round_losses_fn is None:
      return
    if round_num is None:
      round_num = max(self._rounds, default=0) + 1
    if round_num in self._scored_rounds:
      return
    records = list(message.content.array_records.values())
    if len(records) != 1:
      raise ValueError('a training message must carry one ArrayRecord (the '
                       f'model) to score the canaries on; got {len(records)}.')
    losses = self._losses(records[0], self._round_losses_fn)
    if self._drops is None:
      self._drops = loss_drops.LossDrops(losses)
    else:
      self._drops.update(losses)
    self._scored_rounds.add(round_num)

  def record(self, round_num: int | None, replies: list[Message]) -> None:
    """Records a training round's replies (`ObservedGrid` calls it).

    Args:
      round_num: The round (its messages' 'server-round'); None: the round
        after the last recorded.
      replies: The round's replies.
    """
    if round_num is None:
      round_num = max(self._rounds, default=0) + 1
    seen = self._rounds.setdefault(round_num, _RoundReplies())
    for reply in replies:
      if reply.has_error():
        seen.failures += 1
        continue
      seen.replies += 1
      canary = _tagged_canary(reply)
      if canary is not None and canary < self.num_canaries:
        seen.canaries.append(canary)

  @property
  def observed(self) -> dict[int, tuple[int, ...]]:
    """The seen canaries that replied in each training round recorded.

    Returns:
      {round: the canary ids, once per reply, ascending}.
    """
    return {t: tuple(sorted(seen.canaries))
            for t, seen in sorted(self._rounds.items())}

  def _releases(self, dp: Strategy | None) -> releases_lib.Releases:
    """The rounds as released, by Flower's rule (`validate_replies`).

    With a DP wrapper a round releases a model when no reply is an error
    and, with an accountant, `num_sampled_clients` replied; its noise of
    std z S / n on the mean of N_t replies is an effective multiplier
    z N_t / n. Plain FedAvg releases whenever a reply has content.
    """
    z = 0.0 if dp is None else float(dp.noise_multiplier)
    strict = getattr(dp, 'accountant', None) is not None
    rows, schedule = [], []
    for t in range(1, self.rounds + 1):
      seen = self._rounds.get(t, _RoundReplies())
      released = seen.replies > 0 and (dp is None or (
          not seen.failures and
          (not strict or seen.replies == dp.num_sampled_clients)))
      rows.append({
          'round': t, 'released': int(released), 'failures': seen.failures,
          'num_clients': seen.replies, 'canaries_inserted': 0,
          'effective_noise_multiplier': z if dp is None else
          z * seen.replies / dp.num_sampled_clients})
      schedule.append(seen.canaries)
    return releases_lib.Releases.of_rounds(rows, schedule, self.num_canaries,
                                           z, None)

  def _losses(self, final_arrays: ArrayRecord,
              losses_fn: LossesFn) -> np.ndarray:
    """Each tracked canary's mean loss under a model, seen first."""
    ids = canary_spec.tracked_ids(self.num_canaries,
                                  self.num_unseen_canaries)
    if self._tracked is None:  # Made once: every round scores them.
      arrays = canary_examples.canary_arrays(
          self.canary_seed, ids, self.kind, self.examples_per_canary,
          num_labels=self._num_labels, vocab_size=self._vocab_size,
          images=self._images)
      self._tracked = (*client_arrays.model_inputs(self.kind, arrays.features),
                       np.asarray(arrays.offsets))
    inputs, labels, offsets = self._tracked
    losses = np.zeros(ids.size)
    for i, canary in enumerate(ids):
      start, end = offsets[i], offsets[i + 1]
      loss = np.asarray(losses_fn(final_arrays, inputs[start:end],
                                  labels[start:end]), np.float64)
      if not loss.size or not np.all(np.isfinite(loss)):
        raise ValueError(f'losses_fn must return finite losses; got {loss!r} '
                         f'for canary {int(canary)}.')
      losses[i] = loss.mean()
    return losses

  def finish(self, final_arrays: ArrayRecord, losses_fn: LossesFn, *,
             dp: Strategy | None = None,
             accuracy: float | None = None) -> run_report.RunReport:
    """Scores the canaries on the final model; the report and result files.

    Args:
      final_arrays: theta_T (the strategy's `Result.arrays`).
      losses_fn: `losses_fn(arrays, inputs, labels)`: the model's loss on
        each example (or their mean), for a canary's examples as
        `canary_node_examples` returns them.
      dp: The run's DP wrapper: `DifferentialPrivacyServerSideFixedClipping`
        or `DifferentialPrivacyClientSideFixedClipping` around FedAvg (with
        or without `accountant=`). None: no DP wrapper; the references are
        then those of no noise (ε = ∞), and the report says so.
      accuracy: The final model's accuracy, or None.

    Returns:
      The report (also `self.report`).

    Raises:
      strategies.AuditRefused: a `dp` whose references the grid's replies
        cannot give (adaptive clipping: its noise follows a clip the grid
        does not see; a strategy other than those wrappers around FedAvg).
      ValueError: before anything is written: the grid observed no training
        round or another number than T, or `losses_fn` returned a loss that
        is not finite.
      run_directory.RunDirectoryError: the directory now holds another run.
    """
    if dp is not None:
      strategies.check_strategy(dp)
      if isinstance(dp, DifferentialPrivacyServerSideAdaptiveClipping):
        raise strategies.AuditRefused(
            f'{type(dp).__name__}: its noise is scaled to a clip that moves '
            'every round, which the grid does not see; audit data canaries '
            'under fixed clipping (server- or client-side), or gradient '
            'canaries (CanaryAudit.wrap) under adaptive clipping.')
    last = max(self._rounds, default=0)
    if last != self.rounds:
      raise ValueError(
          f'the grid observed {last} training round(s), the audit planned '
          f'rounds = {self.rounds}; start the strategy on observe(grid) for '
          'the rounds planned.')
    dim = int(strategies.flatten(final_arrays).size)
    losses = self._losses(final_arrays, losses_fn)
    k = self.num_canaries
    drops = None
    if self._drops is not None:
      if len(self._scored_rounds) != self.rounds:
        raise ValueError(
            f'the grid scored the models of {len(self._scored_rounds)} '
            f'training round(s), not the {self.rounds} planned.')
      drops = loss_drops.LossDrops.from_state(self._drops.state())
      drops.update(losses)  # theta_T's.
      seen_drops, unseen_drops = drops.split(k)
    released = self._releases(dp)
    z = released.noise_multiplier
    counts = released.presentation_counts
    sampled = None if dp is None else int(dp.num_sampled_clients)
    dp_config = {
        'dp_wrapper': None if dp is None else type(dp).__name__,
        'noise_multiplier': z, 'num_sampled_clients': sampled,
        'clipping_norm': None if dp is None else float(dp.clipping_norm),
        'dim': dim}
    self._config.update(dp_config)
    empty = np.zeros(0)
    self.outcome = canary_spec.CanaryOutcome(
        final_cosines=empty, final_unseen_cosines=empty, seen_maxima=empty,
        unseen_maxima=empty,
        accuracy=float('nan') if accuracy is None else accuracy, dim=dim,
        resumed_from_round=0, rounds_trained=self.rounds,
        data_seen_losses=losses[:k], data_unseen_losses=losses[k:],
        data_seen_drops=None if drops is None else seen_drops,
        data_unseen_drops=None if drops is None else unseen_drops)
    facts = references.RunFacts(
        noise_multiplier=z, delta=self.delta, dim=dim,
        canary_presentations=max(1, int(counts.max())),
        rounds=max(1, released.released), presentation_counts=counts,
        round_event=releases_lib.round_event(z, None),
        round_events=None if released.uniform else released.round_events())
    setting = {
        'engine': 'flower', 'dp_wrapper': dp_config['dp_wrapper'],
        'rounds': self.rounds, 'num_sampled_clients': sampled,
        'clipping': dp_config['clipping_norm'], 'noise_multiplier': z,
        'num_real_nodes': self.num_real_nodes, 'num_canaries': k,
        'num_unseen_canaries': self.num_unseen_canaries,
        'canary_seed': self.canary_seed, 'data_canary_kind': self.kind,
        'data_canary_examples': self.examples_per_canary,
        'canary_presentations_observed': [int(count) for count in counts],
        'canaries_never_presented': released.never_inserted,
        **released.setting()}
    notes = list(released.notes())
    if dp is None:
      notes.append('No DP wrapper was given: the references are those of a '
                   'run without noise (ε = ∞); the data canaries\' bounds '
                   'hold whatever the mechanism.')
    self.report = run_report.build_run_report(
        self.outcome, facts, mechanisms.Gaussian(), alpha=self.alpha,
        setting=setting, notes=notes,
        framework_epsilon=None if dp is None else
        flower_accountant.flower_epsilon(dp, self.delta, sampled),
        canary_kind='data')
    with run_directory.owned(self.run_dir, recheck=self._recheck,
                             checkpoints=self._store):
      run_directory.write_config(self.run_dir, self._config)
      run_files.write_results(
          self.run_dir, self.outcome, self.report,
          title=f'Flower data canaries, noise {z:g}')
    return self.report
