"""The managers a launcher's run hands TFF's training loop (`training`).

`tff.simulation.run_training_process` releases each round's metrics to
release managers and offers each round's state to a program state manager;
here are the launcher's: `RoundReleases` turns a round's metrics into a
`round_record.RoundRecord` for the run's observer, reported when the loop
offers the round's state (`ReportedRounds`), so that the record, the
audit's observation and a checkpoint of one round are one
`interrupts.deferred` block; `CosineReleases` hands the audit's per-round
cosines to the observer; `ScheduledSaves` keeps the checkpoint rhythm of a
run without canaries (the audit's manager keeps it otherwise, and both keep
the last state offered for `save_last_observed`); `AnnouncedSaves` tells the
observer of each checkpoint before it is saved.
"""

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow_federated as tff

from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import audit_state_manager

__all__ = ['AnnouncedSaves', 'CosineReleases', 'ReportedRounds',
           'RoundReleases', 'ScheduledSaves', 'compact_metrics']

# Where the clip norm is among the compact metrics: the canary aggregator's
# measurement, or that of TFF's DP factory (runs without canaries).
_CLIP_METRICS = ('aggregator/clip', 'aggregator/dp_query_metrics/clip')


def compact_metrics(metrics: Any) -> collections.OrderedDict[str, Any]:
  """Flattens nested round metrics to '/'-joined names of scalars only.

  Non-scalar values (none are expected; the aggregator reports summaries) are
  dropped so that no d-sized vector reaches the CSV or TensorBoard.

  Args:
    metrics: A round's metrics, nested mappings (or structures) of values.

  Returns:
    Name -> scalar, in traversal order.
  """
  flat = collections.OrderedDict()

  def visit(prefix: str, value: Any) -> None:
    if isinstance(value, Mapping):
      items = value.items()
    elif hasattr(value, '_asdict'):
      items = value._asdict().items()
    elif isinstance(value, (list, tuple)):
      items = ((str(i), v) for i, v in enumerate(value))
    else:
      array = np.asarray(value)
      if array.ndim == 0 and array.dtype.kind in 'biuf':
        flat[prefix] = array.item()
      return
    for key, item in items:
      visit(f'{prefix}/{key}' if prefix else str(key), item)

  visit('', metrics)
  return flat


class RoundReleases(tff.program.ReleaseManager):
  """Hands each round's released metrics to an observer; counts the rounds.

  A round's record waits for the loop to offer the round's state (`report`,
  called by `ReportedRounds`), so that the round is reported together with
  its observation and checkpoint: an interrupt that lands between the
  release and the offer reports neither.

  Attributes:
    rounds_trained: The training rounds reported so far.
  """

  def __init__(self, observer: round_record.RoundObserver):
    """Reports to `observer`.

    Args:
      observer: Told of each round's record.
    """
    self._observer = observer
    self._held: round_record.RoundRecord | None = None
    self.rounds_trained = 0

  async def release(self, value: Any, key: int) -> None:
    """Keeps round `key`'s record for `report`.

    Args:
      value: The round's metrics, nested (`compact_metrics` flattens them).
      key: The round (0: the initial evaluation).
    """
    metrics = compact_metrics(value)
    clip = next((metrics[name] for name in _CLIP_METRICS if name in metrics),
                None)
    self._held = round_record.RoundRecord(
        round_num=key, metrics=metrics,
        seconds=metrics.get('training_time_in_seconds'), clip=clip,
        loss=metrics.get('client_work/train/loss'))

  def report(self, round_num: int) -> None:
    """Reports round `round_num`'s record to the observer, if it is held.

    Args:
      round_num: The round whose state the loop offers.
    """
    record, self._held = self._held, None
    if record is None or record.round_num != round_num:
      return
    if round_num >= 1:
      self.rounds_trained += 1
    self._observer.on_round(record)


class CosineReleases(tff.program.ReleaseManager):
  """Hands the audit's released canary cosines of a round to an observer."""

  def __init__(self, observer: round_record.RoundObserver):
    """Reports to `observer`.

    Args:
      observer: Told of each round's cosines.
    """
    self._observer = observer

  async def release(self, value: Any, key: int) -> None:
    """Reports training round `key`'s `CanaryCosines`.

    Args:
      value: The audit's summary of the round (seen and unseen canaries'
        mean and max cosine).
      key: The training round.
    """
    self._observer.on_cosines([round_record.CanaryCosines(
        key, value['seen_cosine_mean'], value['seen_cosine_max'],
        value['unseen_cosine_mean'], value['unseen_cosine_max'])])


class _Forwarding(tff.program.ProgramStateManager):
  """A manager over `self._inner`, whose saved rounds and states it reads."""

  _inner: Any

  async def get_versions(self) -> Sequence[int] | None:
    """The saved rounds.

    Returns:
      The inner manager's versions (None: no checkpoint directory yet).
    """
    return await self._inner.get_versions()

  async def load(self, version: int, structure: Any) -> Any:
    """The state saved at round `version`.

    Args:
      version: A saved round.
      structure: The program state's structure.

    Returns:
      The inner manager's state of that round.
    """
    return await self._inner.load(version, structure)


class ReportedRounds(_Forwarding):
  """Reports a round's record when the loop offers its state, then passes it.

  The record (`RoundReleases.report`), the audit's observation and a
  checkpoint of one round run in one `interrupts.deferred` block.
  """

  def __init__(self, inner: Any, releases: RoundReleases):
    """Reports `releases`' records before `inner` is offered each state.

    Args:
      inner: The run's manager (the audit's, or `ScheduledSaves`), with
        `save_last_observed`.
      releases: The loop's release manager of the rounds' metrics.
    """
    self._inner = inner
    self._releases = releases

  async def save(self, program_state: Any, version: int) -> None:
    """Reports round `version`, then offers its state to the inner manager.

    Args:
      program_state: The state after round `version`.
      version: The round.
    """
    with interrupts.deferred():
      self._releases.report(version)
      await self._inner.save(program_state, version)

  def save_last_observed(self) -> int | None:
    """Saves the last state the inner manager was offered, unless saved.

    Returns:
      Its round, or None when there is none.
    """
    return self._inner.save_last_observed()


class ScheduledSaves(_Forwarding):
  """Saves round 0, every `every`-th round and the final round only.

  `run_training_process` offers every round (rounds_per_saving_program_state
  = 1); a multiple-of-k rule alone would miss the final round, which a
  finished run resumes from without training. For runs without an audit,
  whose own manager applies the same rule; like it, it keeps the last state
  offered for `save_last_observed`.
  """

  def __init__(self, inner: tff.program.ProgramStateManager, every: int,
               final_round: int):
    """Saves to `inner` on the rounds of the rhythm.

    Args:
      inner: The checkpoints' manager.
      every: The checkpoint period in rounds (>= 1).
      final_round: The run's last round, always saved.
    """
    self._inner = inner
    self._every = every
    self._final_round = final_round
    self._last: tuple[Any, int] | None = None
    self._saved: int | None = None

  async def load(self, version: int, structure: Any) -> Any:
    """The state saved at round `version`.

    Args:
      version: A saved round.
      structure: The program state's structure.

    Returns:
      The inner manager's state of that round.
    """
    loaded = await self._inner.load(version, structure)
    self._saved = version
    return loaded

  async def save(self, program_state: Any, version: int) -> None:
    """Keeps round `version`'s state; saves it if it is a round to save.

    Args:
      program_state: The state after round `version`.
      version: The round.
    """
    with interrupts.deferred():
      self._last = (program_state, version)
      if run_directory.is_checkpoint_round(version, self._every,
                                           self._final_round):
        await self._inner.save(program_state, version)
        self._saved = version

  def save_last_observed(self) -> int | None:
    """Saves the last state offered, unless it is saved (an interrupt).

    Outside any running event loop (as the audit's manager's).

    Returns:
      Its round, or None when no state was offered since the manager was
      made or loaded.
    """
    if self._last is None:
      return None
    program_state, version = self._last
    if version != self._saved:
      with interrupts.deferred():
        audit_state_manager.run_alone(self._inner.save(program_state,
                                                       version))
        self._saved = version
    return version


class AnnouncedSaves(_Forwarding):
  """The run's checkpoints, each announced to the observer before it is saved.

  `round_record.RoundObserver.on_checkpoint`: the launcher writes the
  rounds' CSVs through the checkpoint's round before the checkpoint exists.
  """

  def __init__(self, inner: tff.program.ProgramStateManager,
               observer: round_record.RoundObserver):
    """Saves to `inner`, announcing each save to `observer`.

    Args:
      inner: The checkpoints' manager.
      observer: Told of each checkpoint before it is saved.
    """
    self._inner = inner
    self._observer = observer

  async def save(self, program_state: Any, version: int) -> None:
    """Announces checkpoint `version`, then saves it.

    Args:
      program_state: What to save.
      version: Its round.
    """
    self._observer.on_checkpoint(version)
    await self._inner.save(program_state, version)
