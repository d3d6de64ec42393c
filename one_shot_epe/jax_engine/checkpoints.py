"""The JAX engine's checkpoints: one .npz file per checkpointed round.

`TrainingStateCheckpoints` is the JAX engine's
`checkpoint_store.CheckpointStore`.
Checkpoint t (`round_00000t.npz`, t zero-padded to 8 digits) holds the state
after training round t: the server state's leaves (model and server
optimizer), the canaries' running maxima (Andrew et al., ICLR 2024,
Algorithm 3, lines 10-16) and theta_0, the initial model the final-model
statistic is taken against (Algorithm 2), and under matrix-factorization
noise the canaries' projections on every round so far (the decorrelated
all-iterates statistic, `one_shot_epe.stats.decorrelation`). The files are
the runtime's (`runtime.npz_checkpoints`: written atomically, all kept).
"""

from typing import Any, NamedTuple

import jax
import numpy as np

from one_shot_epe.runtime import npz_checkpoints

__all__ = ['TrainingState', 'TrainingStateCheckpoints']


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


class TrainingStateCheckpoints(npz_checkpoints.NpzCheckpoints):
  """The .npz checkpoints of a run in `directory`, of `TrainingState`s.

  Files, listing, verification and atomic writes are the runtime's
  (`runtime.npz_checkpoints`); this class names a state's arrays and
  rebuilds the state from them.
  """

  def save(self, state: TrainingState, round_num: int) -> None:
    """Writes checkpoint `round_num`, atomically.

    Args:
      state: The state after round `round_num`.
      round_num: The round just trained, >= 0.
    """
    leaves = jax.tree_util.tree_leaves(state.server)
    extra = ({} if state.projections is None else
             {'projections': state.projections})
    super().save({'maxima': state.maxima, 'initial': state.initial, **extra,
                  **{f'leaf_{i}': leaf for i, leaf in enumerate(leaves)}},
                 round_num)

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
