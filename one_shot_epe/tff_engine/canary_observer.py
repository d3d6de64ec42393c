"""Observing a `tff.learning` run's states: the canaries' cosines (Sec. 4).

`CanaryObserver` is the observing third of `audit.CanaryAudit`: fed the
learning state of round 0 and then of every round, it tracks each canary's
max-over-rounds cosine with the round's statistic (Algorithm 3,
`cosine_tracking`), keeps the initial and latest model for the final-model
cosines (Algorithm 2, `final_model`) and the aggregator's latest DpEvent, and
saves and restores all of it as numpy for checkpoints.
"""

from typing import Any

import dp_accounting
import numpy as np
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import round_record
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import final_model

__all__ = ['CanaryObserver', 'flat_trainable']


def flat_trainable(learning_state: Any) -> np.ndarray:
  """The global model's trainable weights as float32 [d] (tf.nest order).

  Args:
    learning_state: A `tff.learning` process's state.

  Returns:
    The weights, flattened and concatenated.
  """
  return np.concatenate([
      np.asarray(w, np.float32).reshape(-1)
      for w in tf.nest.flatten(learning_state.global_model_weights.trainable)
  ])


class CanaryObserver:
  """The canaries' view of a run's learning states, round by round.

  Attributes:
    round_event: The DpEvent the aggregator recorded in the latest round
      observed; None before the first.
  """

  def __init__(self, spec: canary_spec.CanarySpec, device: str = '/CPU:0'):
    """Observes nothing yet.

    Args:
      spec: The canary plan (seed, counts, statistics, buffer).
      device: TF device of the cosine tracking (`accelerators`).
    """
    self._spec = spec
    self._device = device
    self._tracker: cosine_tracking.CosineTracker | None = None
    self._initial: np.ndarray | None = None
    self._latest: np.ndarray | None = None
    self.round_event: dp_accounting.DpEvent | None = None

  def observe(self,
              learning_state: Any) -> list[round_record.CanaryCosines]:
    """Records a learning state: the initial one first, then every round's.

    Each round's cosines are taken with the spec's all-iterates statistic:
    the noised aggregate rho_bar_t the aggregator exported ('aggregate', the
    paper's Algorithm 3), or the model step theta_{t-1} - theta_t
    ('model_delta', its published code; the two differ under server
    momentum and, by float32 rounding, even without).

    Args:
      learning_state: The state of a `tff.learning` process built with a
        canary aggregator: `process.initialize()`, then each
        `next(...).state`.

    Returns:
      Per-round cosine summaries of the rounds computed by this call (the
      tracker works in blocks of rounds; see `cosine_tracking`).

    Raises:
      ValueError: if a round is skipped or repeated, or the initial state was
        not observed first.
    """
    round_num = int(np.asarray(learning_state.aggregator.round_num))
    weights = flat_trainable(learning_state)
    if round_num == 0:
      self._initial = self._latest = weights
      self._tracker = cosine_tracking.CosineTracker(
          self._spec, weights.size, device=self._device)
      return []
    if self._tracker is None:
      raise ValueError('observe the initial learning state (round 0) before '
                       f'round {round_num}.')
    aggregator = learning_state.aggregator
    if self._spec.all_iterates_statistic == 'model_delta':
      aggregator = aggregator._replace(aggregate=self._latest - weights)
    summaries = self._tracker.observe(aggregator)
    self._latest = weights
    self.round_event = aggregator_state.extract_dp_event_from_state(
        learning_state.aggregator)
    return summaries

  def flush(self) -> list[round_record.CanaryCosines]:
    """Processes the buffered rounds now (before a checkpoint, say).

    Returns:
      The summaries of the rounds processed (none before the first round).
    """
    return [] if self._tracker is None else self._tracker.flush()

  @property
  def rounds_observed(self) -> int:
    """Training rounds observed so far (0 before the first)."""
    return 0 if self._tracker is None else self._tracker.rounds_observed

  @property
  def dim(self) -> int:
    """d, the model's trainable parameters (once round 0 is observed).

    Raises:
      ValueError: if no learning state was observed yet.
    """
    if self._initial is None:
      raise ValueError('the audit has observed no learning state yet.')
    return int(self._initial.size)

  def state(self) -> dict[str, np.ndarray]:
    """Everything needed to resume (numpy; joins a checkpoint).

    Returns:
      The initial weights, the rounds observed, the cosine maxima and the
      pending (unprocessed) rounds' vectors.

    Raises:
      ValueError: if no learning state was observed yet.
    """
    if self._tracker is None:
      raise ValueError('the audit has observed no learning state yet.')
    tracker = self._tracker.state()
    return {'initial_weights': self._initial,
            'rounds_observed': np.int64(tracker.rounds_observed),
            'cosine_maxima': tracker.cosine_maxima,
            'pending': tracker.pending}

  def empty_state(self, learning_state: Any) -> dict[str, np.ndarray]:
    """A `state()` of the right structure for `learning_state` (to load).

    Args:
      learning_state: A state of the process (its model gives d).

    Returns:
      Zeros shaped as `state()` of a run of this model.
    """
    dim = flat_trainable(learning_state).size
    tracked = self._spec.num_seen + self._spec.num_unseen
    return {'initial_weights': np.zeros([dim], np.float32),
            'rounds_observed': np.int64(0),
            'cosine_maxima': np.zeros([tracked], np.float32),
            'pending': np.zeros([0, dim], np.float32)}

  def restore(self, state: dict[str, Any], learning_state: Any) -> None:
    """Resumes from `state()` saved together with `learning_state`.

    Args:
      state: What `state()` returned (as loaded from a checkpoint).
      learning_state: The learning state saved with it.
    """
    initial = np.asarray(state['initial_weights'], np.float32)
    tracker_state = cosine_tracking.TrackerState(
        rounds_observed=int(state['rounds_observed']),
        cosine_maxima=np.asarray(state['cosine_maxima'], np.float32),
        pending=np.asarray(state['pending'], np.float32).reshape(
            -1, initial.size))
    self._initial = initial
    self._latest = flat_trainable(learning_state)
    if tracker_state.rounds_observed > 0:
      self.round_event = aggregator_state.extract_dp_event_from_state(
          learning_state.aggregator)
    self._tracker = cosine_tracking.CosineTracker(
        self._spec, initial.size, state=tracker_state, device=self._device)

  def _check_observed(self) -> cosine_tracking.CosineTracker:
    if self._tracker is None or self._tracker.rounds_observed == 0:
      raise ValueError('the audit has observed no training round yet.')
    return self._tracker

  def cosine_maxima(self) -> cosine_tracking.CosineMaxima:
    """Each canary's max-over-rounds cosine so far (Algorithm 3, l. 15-16).

    Returns:
      The seen and unseen canaries' maxima.

    Raises:
      ValueError: if no training round was observed yet.
    """
    return self._check_observed().maxima()

  def final_cosines(self, unseen: bool = False) -> np.ndarray:
    """Seen (or unseen) canaries' cosines with the model of the latest round.

    Algorithm 2, line 11, with the spec's final-model statistic
    (`final_model`): theta_0 - theta_t ('delta', the default, in
    tff.learning's sign convention) or theta_t ('final').

    Args:
      unseen: Score the unseen canaries instead, whose cosines follow the
        null and serve the one-run certificates.

    Returns:
      float64 cosines, one per canary, in id order.

    Raises:
      ValueError: if no training round was observed yet.
    """
    self._check_observed()
    spec = self._spec
    ids = (canary_spec.unseen_ids(spec.num_unseen) if unseen else
           canary_spec.seen_ids(spec.num_seen))
    with tf.device(self._device):
      return final_model.final_model_cosines(
          self._latest, canary_seed=spec.seed, canary_ids=ids,
          initial_weights=self._initial,
          statistic=spec.final_model_statistic)
