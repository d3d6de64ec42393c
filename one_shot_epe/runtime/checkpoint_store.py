"""The one checkpoint protocol of both engines (framework-free).

A run's checkpoints live in its run directory's checkpoints/ folder
(`run_directory.CHECKPOINT_DIR`); checkpoint t holds the state after
training round t (0: the initial state; `round_record` numbers rounds), the
canaries' state with the learning state. Each engine keeps them in its own
format: TensorFlow Federated's program state (SavedModels,
`tff_engine.checkpoints.ProgramStateCheckpoints`, which also hands TFF's
training loops the coroutines they await) or .npz files
(`runtime.npz_checkpoints.NpzCheckpoints`, the Flower engine's, and
`jax_engine.checkpoints.TrainingStateCheckpoints` on it). All implement this
protocol with the same signatures, rounds named `round_num`: the launcher sees
what exists, whether the newest reads back (and is no larger than the state
it should hold: `bounded_reads.checkpoint`), the leftovers of a killed write
and how many are kept; an engine saves and loads.
"""

from typing import Any, Protocol

from one_shot_epe.runtime import bounded_reads

__all__ = ['CheckpointError', 'CheckpointStore']


class CheckpointError(ValueError):
  """A checkpoint cannot be resumed from; the message says which and why."""


class CheckpointStore(Protocol):
  """One engine's checkpoints in one directory.

  Attributes:
    directory: The checkpoint directory.
    kept: How many checkpoints the engine keeps (None: all).
  """
  directory: str
  kept: int | None

  def rounds(self) -> list[int]:
    """The rounds of the complete checkpoints, ascending ([] if none)."""

  def latest(self) -> int | None:
    """The newest complete checkpoint's round, None if there is none.

    The one definition, from `rounds()`, for the stores that subclass this
    protocol.

    Returns:
      The largest of `rounds()`, or None.
    """
    found = self.rounds()
    return found[-1] if found else None

  def verify(self, limit: bounded_reads.Limit | None = None) -> None:
    """Raises `CheckpointError` unless the newest checkpoint can be resumed.

    Its files are checked first: regular files, together no larger than
    `limit` (`bounded_reads.checkpoint` of the state it should hold); then
    it is read back completely. Nothing to check if there is none.

    Args:
      limit: The most the checkpoint may hold; None: no size limit.
    """

  def remove_partial(self) -> None:
    """Deletes what unfinished (killed) checkpoint writes left."""

  def save(self, state: Any, round_num: int) -> None:
    """Saves `state` as checkpoint `round_num` (atomically: whole or absent).

    Args:
      state: The engine's state after round `round_num`.
      round_num: Its round (0: the initial state).
    """

  def load(self, round_num: int, template: Any) -> Any:
    """Checkpoint `round_num`, in the structure of `template`.

    Args:
      round_num: A round of `rounds()`.
      template: A state of the structure to read.

    Returns:
      The saved state.
    """
