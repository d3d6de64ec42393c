"""What each round of a run reports, on either engine (framework-free).

Round numbering, for the whole project: round 0 is the initial state (the
model before training; checkpoint 0, and the TFF engine's initial
evaluation); training rounds are 1..T, as TFF's metrics number them.
Training round t releases rho_bar_t (Andrew et al., ICLR 2024, Algorithm 3)
and leaves the state that checkpoint t holds; it inserts the seen canaries
of `CanarySpec.schedule[t - 1]`.

Both engines report through the same three callbacks of a `RoundObserver`:
`on_round` once a round is trained (its `RoundRecord`: metrics, time, clip),
`on_cosines` once the canaries have been scored against a block of rounds'
vectors (`CanaryCosines`, one per round; the cosines are taken B rounds at a
time, so they lag the rounds), and `on_checkpoint` just before a checkpoint
is saved. By then every round through the checkpoint's has been reported,
and so have their cosines, except for the rounds whose vectors the
checkpoint holds unscored: a regular checkpoint scores its block first, but
one saved on an interrupt keeps the block's rounds buffered (so that blocks
start at the same rounds in every invocation); their cosines are reported
when the block is scored, by a later invocation resumed from that
checkpoint. `experiments.run_outputs.RoundWriter` writes them into the run
directory.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

__all__ = ['CanaryCosines', 'Observers', 'RoundObserver', 'RoundRecord']


class CanaryCosines(NamedTuple):
  """A training round's canary statistics; NaN for an empty set.

  Attributes:
    round_num: The training round (1-based).
    seen_mean, seen_max: Mean and max cosine of the seen canaries with the
      round's released vector.
    unseen_mean, unseen_max: The same over the unseen canaries.
  """
  round_num: int
  seen_mean: float
  seen_max: float
  unseen_mean: float
  unseen_max: float


@dataclasses.dataclass(frozen=True)
class RoundRecord:
  """What one round reports (round 0: the initial evaluation only).

  Attributes:
    round_num: The round (0 for the initial state, else 1..T).
    metrics: The engine's scalar metrics by '/'-joined name, in the order
      the engine lists them (metrics.csv's columns).
    seconds: The round's training time; None for round 0.
    clip: The clip norm S_t applied in the round; None if unknown.
    loss: The clients' mean training loss; None if not measured.
    cosines: The round's canary statistics once scored, else None.
  """
  round_num: int
  metrics: Mapping[str, float | int]
  seconds: float | None = None
  clip: float | None = None
  loss: float | None = None
  cosines: CanaryCosines | None = None


class RoundObserver(Protocol):
  """The callbacks through which an engine reports its rounds."""

  def on_round(self, record: RoundRecord) -> None:
    """A round was trained (or, round 0, evaluated); no cosines yet.

    Args:
      record: the round's number, metrics, time, clip norm and loss.
    """

  def on_cosines(self, cosines: Sequence[CanaryCosines]) -> None:
    """The canaries were scored against these rounds' vectors, in order.

    Args:
      cosines: one entry per scored round, in round order; a round may be
        one that an earlier invocation reported (see the module docstring).
    """

  def on_checkpoint(self, round_num: int) -> None:
    """Checkpoint `round_num` is saved next; a rerun would resume from it.

    Args:
      round_num: the checkpoint's round; rounds reported after it (a round
        trained but not yet in the saved state) are not part of it.
    """


class Observers:
  """Several observers as one, called in order."""

  def __init__(self, observers: Sequence[RoundObserver]):
    """Combines `observers`.

    Args:
      observers: the observers to call, in this order.
    """
    self._observers = list(observers)

  def on_round(self, record: RoundRecord) -> None:
    """Passes `record` to every observer.

    Args:
      record: the round just trained or evaluated.
    """
    for observer in self._observers:
      observer.on_round(record)

  def on_cosines(self, cosines: Sequence[CanaryCosines]) -> None:
    """Passes `cosines` to every observer (nothing for an empty block).

    Args:
      cosines: one entry per scored round, in round order.
    """
    if not cosines:
      return
    for observer in self._observers:
      observer.on_cosines(cosines)

  def on_checkpoint(self, round_num: int) -> None:
    """Tells every observer that checkpoint `round_num` is saved next.

    Args:
      round_num: the checkpoint's round.
    """
    for observer in self._observers:
      observer.on_checkpoint(round_num)
