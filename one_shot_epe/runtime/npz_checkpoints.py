"""Checkpoints as one .npz file of named arrays per round (framework-free).

`NpzCheckpoints` is a `checkpoint_store.CheckpointStore`: checkpoint t is
`round_XXXXXXXX.npz` (t zero-padded to 8 digits) in the run directory's
checkpoints/ folder, written atomically (`atomic_io`: a temporary file, then
a rename); every checkpoint is kept. The Flower engine stores its named
arrays as they are; the JAX engine (`jax_engine.checkpoints`) names its
state's leaves and rebuilds the state on load.
"""

import io
import os
import re
from collections.abc import Mapping

import numpy as np

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import checkpoint_store

__all__ = ['NpzCheckpoints']

_FILE = re.compile(r'^round_(\d{8})\.npz$')


class NpzCheckpoints(checkpoint_store.CheckpointStore):
  """The .npz checkpoints of a run in `directory`; all are kept.

  Attributes:
    directory: The checkpoint directory.
    kept: None (every checkpoint is kept).
  """

  kept = None

  def __init__(self, directory: str):
    """Keeps the directory; nothing is read or created yet.

    Args:
      directory: Where the run's `round_XXXXXXXX.npz` files live (created by
        the first `save`).
    """
    self.directory = directory

  def _path(self, round_num: int) -> str:
    return os.path.join(self.directory, f'round_{round_num:08d}.npz')

  @staticmethod
  def _check_file(path: str, limit: bounded_reads.Limit | None = None) -> None:
    """`bounded_reads.check_npz` of a checkpoint, before any array is read."""
    bounded_reads.check_npz(path, bounded_reads.NO_LIMIT if limit is None
                            else limit, 'checkpoint')

  def rounds(self) -> list[int]:
    """The rounds of the complete checkpoints, ascending.

    Returns:
      The rounds of the `round_XXXXXXXX.npz` files; [] without the directory.
    """
    if not os.path.isdir(self.directory):
      return []
    return sorted(int(match.group(1)) for match in map(
        _FILE.match, os.listdir(self.directory)) if match)

  def verify(self, limit: bounded_reads.Limit | None = None) -> None:
    """Raises CheckpointError unless every array of the newest reads back.

    The file is checked before any array is read (`bounded_reads.check_npz`).

    Args:
      limit: The most the file may hold (`bounded_reads.checkpoint`); None:
        no size limit.

    Raises:
      checkpoint_store.CheckpointError: the newest file is not a regular
        file, is larger than `limit`, or cannot be read.
    """
    latest = self.latest()
    if latest is None:
      return
    path = self._path(latest)
    try:
      self._check_file(path, limit)
      with np.load(path) as saved:
        for name in saved.files:
          saved[name]  # pylint: disable=pointless-statement
    except bounded_reads.InputRefused as refusal:
      raise checkpoint_store.CheckpointError(
          f'{refusal} Delete it to resume from the one before.') from None
    except (OSError, ValueError, EOFError) as error:
      raise checkpoint_store.CheckpointError(
          f'the newest checkpoint {path!r} does not read back ({error}); '
          'delete it to resume from the one before.') from None

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
    """Checkpoint `round_num`'s named arrays.

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
      self._check_file(path)
      with np.load(path) as saved:
        return {name: saved[name] for name in saved.files}
    except bounded_reads.InputRefused as refusal:
      raise checkpoint_store.CheckpointError(
          f'{refusal} Delete it to resume from the one before.') from None
    except (OSError, ValueError, EOFError) as error:
      raise checkpoint_store.CheckpointError(
          f'the checkpoint {path!r} does not read back ({error}); delete it '
          'to resume from the one before.') from None
