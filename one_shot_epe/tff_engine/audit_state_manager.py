"""TFF's training loops, audited: a program state manager that observes.

`AuditingStateManager` is what `audit.CanaryAudit.program_state_manager`
returns: TFF's loops (`tff.simulation.run_training_process`,
`tff.learning.programs.train_model`) save every round's program state to
it, it hands each to the audit (`CanaryAudit.observe`), releases the
canaries' per-round cosine summaries, and saves the audit's state beside the
program state in an inner manager's checkpoints, so that a rerun resumes
both.

A round's observation and checkpoint run inside `interrupts.deferred`, so
that Ctrl-C leaves the audit at a whole round; the manager keeps the last
state it observed, and `save_last_observed` saves it (with the audit's
state, its buffered rounds unscored) once a loop has been interrupted.
"""

import asyncio
import collections
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

import numpy as np
import tensorflow_federated as tff

from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory

__all__ = ['AuditingStateManager', 'learning_state', 'run_alone']


def run_alone(coroutine: Coroutine[Any, Any, Any]) -> Any:
  """Runs `coroutine` to its end on an event loop of its own; its result.

  For a save after a loop was interrupted (its event loop may have stopped
  mid-await): the thread's current event loop, if any, stays as it was, so
  a later TFF loop in the same thread finds it.

  Args:
    coroutine: What to run.

  Returns:
    What it returns.
  """
  loop = asyncio.new_event_loop()
  try:
    return loop.run_until_complete(coroutine)
  finally:
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def learning_state(program_state: Any) -> Any:
  """The learning state inside what a TFF loop saves.

  `run_training_process` saves the learning state itself; `train_model`
  saves a `ProgramState` whose `state` field holds it.

  Args:
    program_state: What the loop saved.

  Returns:
    The `tff.learning` process's state.
  """
  if hasattr(program_state, 'round_number') and hasattr(program_state,
                                                          'state'):
    return program_state.state
  return program_state


class _Observed(Protocol):
  """What the manager asks of the audit (`audit.CanaryAudit`)."""

  def observe(self, state: Any) -> list[round_record.CanaryCosines]:
    """Records a learning state; returns the rounds scored now."""

  def flush(self) -> list[round_record.CanaryCosines]:
    """Scores the buffered rounds now."""

  def state(self) -> dict[str, np.ndarray]:
    """The audit's state, for a checkpoint."""

  def empty_state(self, state: Any) -> dict[str, np.ndarray]:
    """A template of `state()` for loading."""

  def restore(self, saved: dict[str, Any], state: Any) -> None:
    """Resumes from a saved `state()`."""


class AuditingStateManager(tff.program.ProgramStateManager):
  """Observes each saved program state; saves the audit beside it."""

  def __init__(self, audit: _Observed,
               inner: tff.program.ProgramStateManager | None,
               rounds_per_checkpoint: int, final_round: int | None,
               release_managers: Sequence[tff.program.ReleaseManager]):
    """Wraps `inner` (if any) for `audit`; arguments are already checked.

    Args:
      audit: The audit that observes every state.
      inner: The manager checkpoints go to, or None to save nothing.
      rounds_per_checkpoint: Rounds between two saves to `inner`, >= 1.
      final_round: A round always saved, if given.
      release_managers: Receive each round's cosine summaries.
    """
    self._audit = audit
    self._inner = inner
    self._every = rounds_per_checkpoint
    self._final_round = final_round
    self._release_managers = list(release_managers)
    # The last state observed and its round; the round saved last.
    self._last: tuple[Any, int] | None = None
    self._saved: int | None = None

  async def get_versions(self) -> Sequence[int] | None:
    """The inner manager's versions (None without one: nothing to resume).

    Returns:
      The saved versions, or None.
    """
    if self._inner is None:
      return None
    return await self._inner.get_versions()

  async def load(self, version: int, structure: Any) -> Any:
    """Loads `version` from the inner manager and resumes the audit from it.

    Args:
      version: The round to load.
      structure: The program state's structure.

    Returns:
      The program state of that round.

    Raises:
      ValueError: if there is no inner manager.
    """
    if self._inner is None:
      raise ValueError('nothing to load: the audit has no inner manager.')
    template = self._audit.empty_state(learning_state(structure))
    saved = await self._inner.load(version, {'program': structure,
                                             'audit': template})
    self._audit.restore(saved['audit'], learning_state(saved['program']))
    self._saved = version
    return saved['program']

  async def _release(
      self, summaries: Sequence[round_record.CanaryCosines]) -> None:
    for summary in summaries:
      values = collections.OrderedDict(
          seen_cosine_mean=summary.seen_mean, seen_cosine_max=summary.seen_max,
          unseen_cosine_mean=summary.unseen_mean,
          unseen_cosine_max=summary.unseen_max)
      await asyncio.gather(*(m.release(values, summary.round_num)
                             for m in self._release_managers))

  async def save(self, program_state: Any, version: int) -> None:
    """Observes the state of round `version`; checkpoints it when due.

    Interrupts wait for the observation and the checkpoint
    (`interrupts.deferred`).

    Args:
      program_state: What the loop saves.
      version: Its round.
    """
    with interrupts.deferred():
      await self._release(self._audit.observe(learning_state(program_state)))
      self._last = (program_state, version)
      due = run_directory.is_checkpoint_round(version, self._every,
                                              self._final_round)
      if self._inner is None or not due:
        return
      await self._release(self._audit.flush())
      await self._inner.save({'program': program_state,
                              'audit': self._audit.state()}, version)
      self._saved = version

  def save_last_observed(self) -> int | None:
    """Saves the last state observed to the inner manager, unless it is saved.

    For a loop stopped between checkpoints (Ctrl-C): the rerun resumes from
    the last round observed instead of the last checkpoint. The audit's
    buffered rounds are saved unscored, so that its blocks of rounds, and
    hence its cosines, are those of an uninterrupted run. Call it once the
    loop has stopped, outside any running event loop (it runs the save on
    one of its own, `run_alone`), e.g.:

      try:
        tff.simulation.run_training_process(..., program_state_manager=manager)
      except KeyboardInterrupt:
        manager.save_last_observed()
        raise

    Returns:
      The round of the last state observed, now saved; None when no state
      was observed since the manager was made or loaded, or there is no
      inner manager.
    """
    if self._inner is None or self._last is None:
      return None
    program_state, version = self._last
    if version != self._saved:
      with interrupts.deferred():
        run_alone(self._inner.save({'program': program_state,
                                    'audit': self._audit.state()}, version))
        self._saved = version
    return version
