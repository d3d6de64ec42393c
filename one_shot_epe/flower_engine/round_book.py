"""The rounds of an audited Flower run as recorded: rows, cosines, checkpoints.

`RoundBook` keeps what `audit.CanaryAudit` records of each round: its row of
metrics.csv, the released vector waiting to be scored (Algorithm 3 scores B
rounds at a time against every tracked canary, `canaries.CanaryBank`), the
canaries' running maxima (`runtime.cosine_buffer`), and the checkpoints
(`runtime.npz_checkpoints`: the model's arrays, theta_0, the maxima, the DP
wrapper's clip, and the rounds still waiting for their cosines), written
every `rounds_per_checkpoint` rounds and after the last, with the per-round
CSVs.

A round's bookkeeping is whole or absent: it runs under a lock, with SIGINT
and SIGTERM deferred to its end (`runtime.interrupts.deferred`);
`stop`, from an interrupt's handler in any thread, waits for it, saves the
state after the last completed round (its rounds still unscored kept
unscored, so that the resumed run scores the same blocks of rounds as an
uninterrupted one, bit for bit) and stops the book: a round recorded later
raises `interrupts.Interrupted`.
"""

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import canaries
from one_shot_epe.runtime import cosine_buffer
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import npz_checkpoints
from one_shot_epe.runtime import run_directory

__all__ = ['CSV_FORMAT', 'RoundBook']

# The run directory's per-round CSVs: columns as reported, LF (as JAX's).
CSV_FORMAT = run_directory.CsvFormat(sort_new_columns=False,
                                     line_terminator='\n')
_CSV = {'metrics': run_directory.METRICS_FILE,
        'cosines': run_directory.CANARY_COSINES_FILE}


class RoundBook:
  """The recorded rounds of one run, and its checkpoints.

  Attributes:
    metrics: metrics.csv's rows so far (those a resumed run read back hold
      strings).
    initial: theta_0, flat.
    saved: The newest checkpoint's round (0: none).
  """

  def __init__(self, run_dir: str, store: npz_checkpoints.NpzCheckpoints,
               bank: canaries.CanaryBank, spec: canary_spec.CanarySpec,
               rounds: int, rounds_per_checkpoint: int):
    """An empty book; `start` or `resume` fills it.

    Args:
      run_dir: The run directory.
      store: Its checkpoints.
      bank: The tracked canaries.
      spec: The canary plan.
      rounds: T.
      rounds_per_checkpoint: The checkpoint period.
    """
    self._run_dir = run_dir
    self._store = store
    self._bank = bank
    self._spec = spec
    self._rounds = rounds
    self._every = rounds_per_checkpoint
    self.metrics: list[dict[str, Any]] = []
    self._cosines: list[dict[str, Any]] = []
    self._vectors: list[np.ndarray] = []
    self._round_nums: list[int] = []
    self._folded = cosine_buffer.CosineBuffer(spec.num_seen, spec.num_unseen)
    self.initial = np.zeros(0)
    self.saved = 0
    self._lock = threading.Lock()
    # 'running', 'stopped' (by `stop`) or 'finished'.
    self._state = 'running'
    # The last completed round: (round, theta_t, the clip after it).
    self._last: tuple[int, ArrayRecord, float] | None = None

  def start(self, initial: np.ndarray) -> None:
    """Starts a new run from theta_0.

    Args:
      initial: theta_0, flat.
    """
    self.initial = initial

  def resume(self, latest: int) -> dict[str, np.ndarray]:
    """Reads back the run saved at round `latest`.

    Args:
      latest: The newest checkpoint's round.

    Returns:
      The checkpoint ('array_<i>' the model's arrays, 'clip' the DP
      wrapper's clip).
    """
    saved = self._store.load(latest, None)
    self.initial = saved['initial']
    self._folded = cosine_buffer.CosineBuffer(
        self._spec.num_seen, self._spec.num_unseen, saved['maxima'])
    self.metrics, self._cosines = (
        run_directory.read_rounds(os.path.join(self._run_dir, _CSV[name]),
                                  latest)[1] for name in ('metrics', 'cosines'))
    if 'pending_rounds' in saved:  # Rounds saved before their cosines.
      self._vectors = list(saved['pending_vectors'])
      self._round_nums = [int(t) for t in saved['pending_rounds']]
    self.saved = latest
    return saved

  def _save(self, round_num: int, arrays: ArrayRecord, clip: float, *,
            flush: bool = True) -> None:
    """Writes the CSVs and the checkpoint after `round_num`.

    Scores the buffered rounds first (`flush`), or, when stopping, keeps
    them buffered in the checkpoint.
    """
    if flush:
      self.flush()
    for name, rows in (('metrics', self.metrics),
                       ('cosines', self._cosines)):
      columns = (list(run_directory.COSINE_FIELDS) if name == 'cosines' else
                 list(dict.fromkeys(c for row in rows for c in row)))
      run_directory.write_rounds(os.path.join(self._run_dir, _CSV[name]),
                                 columns or ['round'], rows, CSV_FORMAT)
    state = {f'array_{i}': a
             for i, a in enumerate(arrays.to_numpy_ndarrays())}
    state.update(
        initial=self.initial, maxima=self._folded.maxima,
        clip=np.float64(clip),
        pending_vectors=(np.stack(self._vectors) if self._vectors else
                         np.zeros((0, self.initial.size))),
        pending_rounds=np.asarray(self._round_nums, np.int64))
    self._store.save(state, round_num)
    self.saved = round_num

  def flush(self) -> None:
    """Scores the buffered rounds' vectors against every tracked canary."""
    if not self._vectors:
      return
    block = self._bank.cosines(np.stack(self._vectors))
    for summary in self._folded.fold(self._round_nums, block):
      self._cosines.append(dict(zip(run_directory.COSINE_FIELDS, summary)))
    self._vectors, self._round_nums = [], []

  @property
  def maxima(self) -> np.ndarray:
    """Each tracked canary's max cosine over the rounds scored (float64)."""
    return self._folded.maxima.astype(np.float64)

  @contextlib.contextmanager
  def _bookkeeping(self) -> Iterator[None]:
    """A round's bookkeeping: whole or not at all (`stop` waits for it)."""
    with interrupts.deferred(), self._lock:
      if self._state == 'stopped':
        raise interrupts.Interrupted(self._stop_line())
      yield

  def record(self, row: Mapping[str, Any], vector: np.ndarray | None,
             arrays: ArrayRecord, clip: float) -> None:
    """Records a completed round; checkpoints on its rounds.

    Args:
      row: The round's metrics.csv row ('round' its number).
      vector: The round's released vector to score; None for a round that
        released nothing.
      arrays: theta_t (theta_{t-1} when nothing was released).
      clip: The DP wrapper's clip after the round.

    Raises:
      interrupts.Interrupted: the book was stopped (`stop`) meanwhile.
    """
    with self._bookkeeping():
      round_num = int(row['round'])
      self.metrics.append(dict(row))
      if vector is not None:
        self._vectors.append(vector)
        self._round_nums.append(round_num)
        if len(self._vectors) >= self._spec.buffer_rounds_for(vector.size):
          self.flush()
      self._last = (round_num, arrays, clip)
      if run_directory.is_checkpoint_round(round_num, self._every,
                                           self._rounds):
        self._save(round_num, arrays, clip)

  def _stop_line(self) -> str:
    return interrupts.resume_line(self.saved, self._rounds, self._run_dir)

  def stop(self) -> str:
    """Saves the state after the last completed round; the interrupt's line.

    Returns:
      'interrupted after round N of T (<run_dir>); rerun the same command
      to resume', N the round the rerun resumes from.
    """
    with self._lock:
      if self._state == 'running':
        if self._last is not None and self._last[0] > self.saved:
          self._save(*self._last, flush=False)
        self._state = 'stopped'
      return self._stop_line()

  def finish(self) -> None:
    """Scores the rounds still buffered; the book takes no more rounds."""
    with self._lock:
      self.flush()
      self._state = 'finished'
