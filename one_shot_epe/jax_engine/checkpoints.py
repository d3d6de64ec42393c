"""The JAX engine's checkpoints: one .npz file per checkpointed round.

`NpzCheckpoints` is the JAX engine's `checkpoint_store.CheckpointStore`.
Checkpoint t (`round_00000t.npz`, t zero-padded to 8 digits) holds the state
after training round t: the server state's leaves (model and server
optimizer), the canaries' running maxima (Andrew et al., ICLR 2024,
Algorithm 3, lines 10-16) and theta_0, the initial model the final-model
statistic is taken against (Algorithm 2), and under matrix-factorization
noise the canaries' projections on every round so far (the decorrelated
all-iterates statistic, `one_shot_epe.stats.decorrelation`). Each file is written atomically
(`atomic_io`: a temporary file, then a rename) and every checkpoint is kept.
"""

import io
import os
import re
from typing import Any, NamedTuple

import jax
import numpy as np

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import checkpoint_store

__all__ = ['NpzCheckpoints', 'TrainingState']

_FILE = re.compile(r'^round_(\d{8})\.npz$')


class TrainingState(NamedTuple):
  """What a checkpoint holds.

  Attributes:
    server: The server state (`fedavg.ServerState`: model, optimizer).
    maxima: float32 [k + m] running max cosines, seen canaries first.
    initial: float32 [d] theta_0, flattened.
    projections: float32 [k + m, T], the canaries' projections on the
      rounds' released vectors (0 after the checkpoint's round), or None.
  """
  server: Any
  maxima: np.ndarray
  initial: np.ndarray
  projections: np.ndarray | None = None


class NpzCheckpoints:
  """The .npz checkpoints of a run in `directory`; all are kept."""

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

  def rounds(self) -> list[int]:
    """The rounds of the complete checkpoints, ascending.

    Returns:
      The rounds of the `round_XXXXXXXX.npz` files; [] without the directory.
    """
    if not os.path.isdir(self.directory):
      return []
    return sorted(int(match.group(1)) for match in map(
        _FILE.match, os.listdir(self.directory)) if match)

  def latest(self) -> int | None:
    """The newest checkpoint's round, None if there is none.

    Returns:
      The largest of `rounds()`, or None.
    """
    found = self.rounds()
    return found[-1] if found else None

  def verify(self) -> None:
    """Raises CheckpointError unless every array of the newest reads back.

    Raises:
      checkpoint_store.CheckpointError: the newest file cannot be read.
    """
    latest = self.latest()
    if latest is None:
      return
    path = self._path(latest)
    try:
      with np.load(path) as saved:
        for name in saved.files:
          saved[name]  # pylint: disable=pointless-statement
    except (OSError, ValueError, EOFError) as error:
      raise checkpoint_store.CheckpointError(
          f'the newest checkpoint {path!r} does not read back ({error}); '
          'delete it to resume from the one before.') from None

  def remove_partial(self) -> None:
    """Deletes the temporary files of unfinished atomic writes."""
    atomic_io.remove_temporaries(self.directory)

  def save(self, state: TrainingState, round_num: int) -> None:
    """Writes checkpoint `round_num`, atomically.

    Args:
      state: The state after round `round_num`.
      round_num: The round just trained, >= 0.
    """
    leaves = jax.tree_util.tree_leaves(state.server)
    buffer = io.BytesIO()
    extra = ({} if state.projections is None else
             {'projections': np.asarray(state.projections)})
    np.savez(buffer, maxima=np.asarray(state.maxima), initial=state.initial,
             **extra, **{f'leaf_{i}': np.asarray(leaf)
                         for i, leaf in enumerate(leaves)})
    os.makedirs(self.directory, exist_ok=True)
    atomic_io.write_bytes(self._path(round_num), buffer.getvalue())

  def load(self, round_num: int, template: TrainingState) -> TrainingState:
    """Checkpoint `round_num`; `template.server` gives the state's structure.

    Args:
      round_num: A round of `rounds()`.
      template: A state of the run's structure (e.g. the initial one); only
        `template.server`'s tree structure is used.

    Returns:
      The saved state, server leaves as numpy arrays.

    Raises:
      OSError: the file is missing or unreadable (FileNotFoundError if absent).
      KeyError: it lacks a leaf of the template's structure.
    """
    with np.load(self._path(round_num)) as saved:
      treedef = jax.tree_util.tree_structure(template.server)
      leaves = [saved[f'leaf_{i}'] for i in range(treedef.num_leaves)]
      return TrainingState(
          jax.tree_util.tree_unflatten(treedef, leaves), saved['maxima'],
          saved['initial'], saved['projections']
          if 'projections' in saved.files else None)
