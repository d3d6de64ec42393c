"""Exact max-over-rounds canary cosines, computed in blocks (Algorithm 3).

Algorithm 3 of Andrew et al. (ICLR 2024, Sec. 4.1) scores every seen and
unseen canary by the maximum over rounds t of cos(c_j, rho_bar_t), the cosine
with the round's noised aggregate (lines 10-16). Regenerating the 2 000
canaries of the paper costs ~10-25 ns per canary coordinate on a 2-core CPU
(25-55 s per round at d = 1.2M), so cosines are computed for blocks of B
buffered aggregates at a time: each block regenerates the canaries once, in
chunks, and takes all their inner products with the B aggregates in one matrix
product (`canaries.cosines`). The maxima are exact; only their update lags.

`CosineTracker` is the TFF engine's tracker: it owns the buffer of vectors
(in this process's memory, not in the TFF state, which TFF's runtime would
move between Python and its worker every round at ~25-40 ns per byte) and
the block cosines (`canaries.cosines` of every tracked canary with the
buffered rows), and folds each scored block into the framework-free
`runtime.cosine_buffer.CosineBuffer`, which keeps the maxima and makes the
per-round summaries for every engine. The canary aggregator only exposes
each round's aggregate (`CanaryAggregatorState.aggregate`, fed with
`observe`); other trainers feed their aggregates directly
(`observe_aggregate`, e.g. `baselines.dpsgd`). `canaries.cosines` is the TF
routine it runs per block (see benchmarks/canary_tracking.py for its cost).

Per-round summaries: for each processed round, the mean and max cosine over
the seen and over the unseen canaries (`round_record.CanaryCosines`, rounds
numbered from 1 as TFF's training rounds are).
"""

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import cosine_buffer
from one_shot_epe.runtime import round_record
from one_shot_epe.tff_engine import canaries

__all__ = ['CosineMaxima', 'CosineTracker', 'TrackerState']



CosineMaxima = cosine_buffer.CosineMaxima


class TrackerState(NamedTuple):
  """All a `CosineTracker` needs to resume exactly; save it with checkpoints.

  Attributes:
    rounds_observed: Number of rounds observed so far.
    cosine_maxima: float32 [k + m] maxima over the processed rounds.
    pending: float32 [p, d] aggregates of the p < B rounds not yet processed.
  """
  rounds_observed: int
  cosine_maxima: np.ndarray
  pending: np.ndarray


class CosineTracker:
  """Tracks exact max-over-rounds cosines of seen and unseen canaries.

  Feed it the aggregator state after every round (or the round's aggregate,
  `observe_aggregate`); it buffers the round's noised aggregate in memory and
  every B rounds scores the block (`canaries.cosines`) and folds it into its
  `cosine_buffer.CosineBuffer`. Usage with a
  `tff.learning` process:

    tracker = CosineTracker(spec, dim)
    for t in range(num_rounds):
      output = process.next(state, data[t])
      state = output.state
      summaries = tracker.observe(state.aggregator)   # [] or B CanaryCosines
    maxima = tracker.maxima()                          # exact, all rounds

  Its `state()` (plain numpy) together with the TFF state is a complete
  checkpoint: `CosineTracker(spec, dim, state=saved)` resumes exactly.
  """

  def __init__(self, spec: canary_spec.CanarySpec, dim: int,
               state: TrackerState | None = None, device: str = '/CPU:0'):
    """Creates a tracker.

    Args:
      spec: The canaries (only seed, counts, buffer_rounds and chunk_size
        matter; a trainer without TFF leaves the schedule empty).
      dim: d, the number of parameters of the aggregated updates.
      state: A `TrackerState` to resume from, or None to start at round 0.
      device: TF device holding the buffer and computing the cosines
        (`accelerators.launcher_device`).
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or (
        dim < 1):
      raise ValueError(f'dim must be a positive integer; got {dim!r}.')
    self._dim = int(dim)
    self._seed = spec.seed
    self._num_seen = spec.num_seen
    self._num_unseen = spec.num_unseen
    self._rounds = spec.buffer_rounds_for(self._dim)
    chunk_size = (spec.chunk_size if spec.chunk_size is not None else
                  canaries.default_chunk_size(self._dim))
    self._device = device
    # The [B, d] buffer is a variable written one row at a time in place and
    # read by the block update without a copy (its initial zeros are created
    # inside a tf.function so that no other reference forces copy-on-write).
    with tf.device(device):
      self._buffer = tf.Variable(tf.zeros([0, self._dim], tf.float32),
                                 shape=tf.TensorShape([None, self._dim]),
                                 trainable=False)
      tf.function(lambda: self._buffer.assign(
          tf.zeros([self._rounds, self._dim], tf.float32)))()
    # A row is written with the raw scatter op, which returns nothing: the
    # Variable API's assign reads the whole buffer back, and that reference
    # makes the next write copy all B x d floats (~0.1 s per round at
    # d = 1.2M, B = 128, against ~2 ms in place).
    @tf.function
    def write(i, row):
      tf.raw_ops.ResourceScatterUpdate(
          resource=self._buffer.handle, indices=tf.reshape(i, [1]),
          updates=row[tf.newaxis])

    self._write = write
    # The ids are made here, eagerly: traced code calls only TensorFlow's.
    ids = canary_spec.tracked_ids(self._num_seen, self._num_unseen)
    self._cosines = tf.function(lambda: canaries.cosines(
        self._seed, ids, self._buffer, chunk_size))
    num_tracked = self._num_seen + self._num_unseen
    if state is None:
      self._observed = 0
      self._folded = cosine_buffer.CosineBuffer(self._num_seen,
                                                self._num_unseen)
      self._pending = 0
    else:
      pending = np.asarray(state.pending, np.float32)
      maxima = np.asarray(state.cosine_maxima, np.float32)
      if (maxima.shape != (num_tracked,) or pending.ndim != 2 or
          pending.shape[1] != self._dim or
          not 0 <= pending.shape[0] < self._rounds or
          pending.shape[0] > state.rounds_observed):
        raise ValueError(
            'state does not match this tracker: expected cosine_maxima of '
            f'shape ({num_tracked},) and pending of shape (p, {self._dim}) '
            f'with p < {self._rounds} and p <= rounds_observed; got '
            f'{maxima.shape} and {pending.shape}.')
      self._observed = int(state.rounds_observed)
      self._folded = cosine_buffer.CosineBuffer(self._num_seen,
                                                self._num_unseen, maxima)
      self._pending = pending.shape[0]
      for i, row in enumerate(pending):
        self._write(tf.constant(i), row)

  @property
  def rounds_observed(self) -> int:
    """The number of rounds observed so far."""
    return self._observed

  @property
  def buffer_rounds(self) -> int:
    """B, the number of rounds buffered between two block updates."""
    return self._rounds

  def _pending_cosines(self) -> np.ndarray:
    """The pending rounds' [k + m, p] cosines."""
    with tf.device(self._device):
      return self._cosines().numpy()[:, :self._pending]

  def observe(self,
              aggregator_state: Any) -> list[round_record.CanaryCosines]:
    """Records the round that produced `aggregator_state` (the next round).

    Args:
      aggregator_state: The state returned by the canary aggregator's `next`
        for round `rounds_observed` (e.g. `learning_state.aggregator`).

    Returns:
      Summaries of the rounds whose cosines were computed by this call (all B
      rounds of a block when it fills, else none).

    Raises:
      ValueError: if the state is not that of the next round (a round was
        skipped or repeated), is not a canary aggregator's state, or has the
        wrong dimension.
    """
    if not (hasattr(aggregator_state, 'aggregate') and
            hasattr(aggregator_state, 'round_num')):
      raise ValueError(
          'aggregator_state must be a state of a canary_aggregator process, '
          "with fields 'round_num' and 'aggregate'; got "
          f'{type(aggregator_state).__name__}.')
    round_num = int(np.asarray(aggregator_state.round_num))
    if round_num != self._observed + 1:
      raise ValueError(
          f'aggregator_state is from round {round_num - 1} but the tracker '
          f'expects round {self._observed}.')
    return self.observe_aggregate(aggregator_state.aggregate)

  def observe_aggregate(self,
                        aggregate: Any) -> list[round_record.CanaryCosines]:
    """Records the noised aggregate rho_bar of round `rounds_observed`.

    Args:
      aggregate: float [d], the round's noised aggregate, flattened in the
        order of `canaries.flatten`.

    Returns:
      As `observe`.

    Raises:
      ValueError: if `aggregate` does not have shape (d,).
    """
    aggregate = np.asarray(aggregate, np.float32)
    if aggregate.shape != (self._dim,):
      raise ValueError(f'aggregate has shape {aggregate.shape}; expected '
                       f'({self._dim},).')
    self._write(tf.constant(self._pending), aggregate)
    self._pending += 1
    self._observed += 1
    if self._pending < self._rounds:
      return []
    return self.flush()

  def flush(self) -> list[round_record.CanaryCosines]:
    """Processes the pending rounds now; returns their summaries.

    Returns:
      One summary per pending round, in round order; [] when none is pending.
    """
    if not self._pending:
      return []
    first = self._observed - self._pending + 1
    summaries = self._folded.fold(range(first, self._observed + 1),
                                  self._pending_cosines())
    self._pending = 0
    return summaries

  def maxima(self) -> CosineMaxima:
    """Exact maxima over all observed rounds (pending rounds included).

    Returns:
      The seen and unseen canaries' maxima.
    """
    maxima = self._folded.maxima
    if self._pending:
      maxima = np.maximum(maxima, self._pending_cosines().max(axis=1))
    return self._folded.split(maxima)

  def state(self) -> TrackerState:
    """A copy of everything needed to resume exactly (see `TrackerState`).

    No side effect: the pending rounds are saved as raw aggregates, not
    processed, so a checkpoint does not change when their block is computed.

    Returns:
      The rounds observed, a copy of the folded maxima and the pending rounds'
      buffered aggregates (numpy).
    """
    return TrackerState(rounds_observed=self._observed,
                        cosine_maxima=self._folded.maxima.copy(),
                        pending=self._buffer[:self._pending].numpy())
