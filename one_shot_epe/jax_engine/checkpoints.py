"""The JAX engine's checkpoints: one .npz file per checkpointed round.

`TrainingStateCheckpoints` is the JAX engine's
`checkpoint_store.CheckpointStore`.
Checkpoint t (`round_00000t.npz`, t zero-padded to 8 digits) holds the state
after training round t: the server state's leaves (model and server
optimizer), the canaries' running maxima (Andrew et al., ICLR 2024,
Algorithm 3, lines 10-16) and theta_0, the initial model the final-model
statistic is taken against (Algorithm 2), and under matrix-factorization
noise the canaries' projections on every round so far (the decorrelated
all-iterates statistic, `one_shot_epe.stats.decorrelation`). A checkpoint
saved on an interrupt between two regular ones also holds the vectors of
the rounds its cosine block had buffered, unscored (a regular checkpoint
scores its block first and holds none). The files are the runtime's
(`runtime.npz_checkpoints`: written atomically, all kept).

Each checkpoint also keeps the canaries' generator (`canaries.fingerprint`):
a checkpoint whose canaries this jax would not draw again is refused, in one
line, by `verify` (the launcher's check before anything is written) and
`load`, rather than resumed with other canaries. Checkpoints written before
the fingerprint was kept are resumed as they are.
"""

import os
from typing import Any, NamedTuple

import jax
import numpy as np

from one_shot_epe.jax_engine import canaries
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import loss_drops
from one_shot_epe.runtime import npz_checkpoints

__all__ = ['FINGERPRINT', 'TrainingState', 'TrainingStateCheckpoints']

# The array of a checkpoint that holds `canaries.fingerprint()`.
FINGERPRINT = 'canary_fingerprint'
# Float rounding between jax versions stays far below this; other canaries
# differ by O(1).
_FINGERPRINT_TOLERANCE = 1e-5


class TrainingState(NamedTuple):
  """What a checkpoint holds.

  Attributes:
    server: The server state (`fedavg.ServerState`: model, optimizer).
    maxima: float32 [k + m] running max cosines, seen canaries first.
    initial: float32 [d] theta_0, flattened.
    projections: float32 [k + m, T], the canaries' projections on the
      rounds' released vectors (0 after the checkpoint's round), or None.
    pending: float32 [p, d], the vectors of the checkpoint's last p rounds,
      buffered and not yet scored against the canaries (p < B); None (as in
      a checkpoint written before they were kept) for none.
    drops: With data canaries, their last losses and largest excess one-round
      loss drops (`loss_drops.LossDrops`); None without.
  """
  server: Any
  maxima: np.ndarray
  initial: np.ndarray
  projections: np.ndarray | None = None
  pending: np.ndarray | None = None
  drops: loss_drops.LossDrops | None = None


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
    if state.pending is not None and len(state.pending):
      extra['pending'] = state.pending
    if state.drops is not None:
      extra.update(state.drops.state())
    super().save({'maxima': state.maxima, 'initial': state.initial, **extra,
                  FINGERPRINT: canaries.fingerprint(),
                  **{f'leaf_{i}': leaf for i, leaf in enumerate(leaves)}},
                 round_num)

  def _check_canaries(self, round_num: int, saved: Any) -> None:
    """Raises unless checkpoint `round_num`'s canaries are this jax's."""
    if FINGERPRINT not in saved.files:
      return
    kept = np.asarray(saved[FINGERPRINT], np.float32)
    now = canaries.fingerprint()
    if kept.shape != now.shape or not np.allclose(
        kept, now, rtol=0.0, atol=_FINGERPRINT_TOLERANCE):
      raise checkpoint_store.CheckpointError(
          f'checkpoint {os.path.basename(self._path(round_num))!r} was '
          'written with other canaries than this jax '
          f'{jax.__version__} draws (fingerprint {kept[:2].tolist()} vs '
          f'{now[:2].tolist()}, generator {canaries.GENERATOR!r}): resume '
          'it with the jax that started it, or start a new run.')

  def verify(self, limit: bounded_reads.Limit | None = None) -> None:
    """The newest checkpoint reads back and holds this jax's canaries.

    Args:
      limit: The most the file may hold (`bounded_reads.checkpoint`).

    Raises:
      checkpoint_store.CheckpointError: the newest file is not a regular
        file within `limit` or cannot be read, or its canaries' fingerprint
        is not this jax's (`canaries.fingerprint`).
    """
    super().verify(limit)
    latest = self.latest()
    if latest is not None:
      with np.load(self._path(latest)) as saved:
        self._check_canaries(latest, saved)

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
      checkpoint_store.CheckpointError: its canaries are not this jax's
        (`verify`).
    """
    self._check_file(self._path(round_num))
    with np.load(self._path(round_num)) as saved:
      self._check_canaries(round_num, saved)
      treedef = jax.tree_util.tree_structure(template.server)
      leaves = [saved[f'leaf_{i}'] for i in range(treedef.num_leaves)]
      return TrainingState(
          jax.tree_util.tree_unflatten(treedef, leaves), saved['maxima'],
          saved['initial'], saved['projections']
          if 'projections' in saved.files else None,
          saved['pending'] if 'pending' in saved.files else None,
          loss_drops.LossDrops.from_state(saved)
          if loss_drops.LossDrops.names()[0] in saved.files else None)
