"""The Flower engine's checkpoints: one .npz file of named arrays per round.

`NpzCheckpoints` is a `runtime.checkpoint_store.CheckpointStore`. Checkpoint
t (`round_0000000t.npz`) holds what `audit.CanaryAudit` needs to resume after
training round t: the global model's arrays, theta_0 (Algorithm 2's
reference), the canaries' running maxima (Algorithm 3) and the DP wrapper's
clip (adaptive clipping moves it). Each file is written atomically
(`runtime.atomic_io`); every checkpoint is kept.
"""

import io
import os
import re
from collections.abc import Mapping

import numpy as np

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import checkpoint_store

__all__ = ['NpzCheckpoints']

_FILE = re.compile(r'^round_(\d{8})\.npz$')


class NpzCheckpoints:
  """The .npz checkpoints of a run in `directory`; all are kept.

  Attributes:
    directory: The checkpoint directory.
    kept: None (every checkpoint is kept).
  """

  kept = None

  def __init__(self, directory: str):
    """Reads nothing yet.

    Args:
      directory: The run directory's checkpoints/ folder.
    """
    self.directory = directory

  def _path(self, round_num: int) -> str:
    return os.path.join(self.directory, f'round_{round_num:08d}.npz')

  def rounds(self) -> list[int]:
    """The rounds of the complete checkpoints, ascending.

    Returns:
      The rounds ([] if none).
    """
    if not os.path.isdir(self.directory):
      return []
    return sorted(int(match.group(1)) for match in map(
        _FILE.match, os.listdir(self.directory)) if match)

  def latest(self) -> int | None:
    """The newest checkpoint's round.

    Returns:
      The round, None if there is none.
    """
    found = self.rounds()
    return found[-1] if found else None

  def verify(self) -> None:
    """Reads every array of the newest checkpoint back.

    Raises:
      checkpoint_store.CheckpointError: if it does not read back.
    """
    latest = self.latest()
    if latest is not None:
      self.load(latest, None)

  def remove_partial(self) -> None:
    """Deletes the temporary files of unfinished atomic writes."""
    atomic_io.remove_temporaries(self.directory)

  def save(self, state: Mapping[str, np.ndarray], round_num: int) -> None:
    """Writes checkpoint `round_num`, atomically.

    Args:
      state: Named arrays.
      round_num: The training round it follows (0: the initial state).
    """
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value)
                        for name, value in state.items()})
    os.makedirs(self.directory, exist_ok=True)
    atomic_io.write_bytes(self._path(round_num), buffer.getvalue())

  def load(self, round_num: int, template: object) -> dict[str, np.ndarray]:
    """Checkpoint `round_num`.

    Args:
      round_num: A round of `rounds()`.
      template: Unused (the arrays carry their names).

    Returns:
      Its named arrays.

    Raises:
      checkpoint_store.CheckpointError: if it does not read back.
    """
    del template
    path = self._path(round_num)
    try:
      with np.load(path) as saved:
        return {name: saved[name] for name in saved.files}
    except (OSError, ValueError, EOFError) as error:
      raise checkpoint_store.CheckpointError(
          f'the checkpoint {path!r} does not read back ({error}); delete it '
          'to resume from the one before.') from None
