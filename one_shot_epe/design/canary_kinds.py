"""The kinds of canaries a run can audit with, one entry each (framework-free).

A run's `--canary_kind` is 'gradient' (the default, the paper's), 'data' or
'both' (the two kinds in one run, `kinds_of`). Each kind is one
`CanaryKind`, which says once how its canaries are made, inserted and
scored, and which threat models it measures; the launcher, both engines and
the report read it:

* 'gradient': a random unit direction per canary, scaled to the round's
  clip and added to the aggregate by the server (Algorithms 2 and 3; each
  engine's aggregation, `tff_engine.canary_aggregator`,
  `jax_engine.fedavg`); scored by its cosine with the final model (against
  the exact null of Theorem 3.1) and its max cosine over the rounds
  (against the unseen canaries);
* 'data': a canary *client* holding examples nobody else holds
  (`data.canary_examples`), scheduled as the gradient canaries are and
  trained through the real client path (local training, the clip, the
  noise: no server change); scored by the final model's loss on its
  examples and by the largest drop of that loss from one round's model to
  the next, seen against unseen canaries (black-box threat models).

`DataCanaryPlan` is a run's data canaries: their seed, counts, examples
and schedule, and the clients each round adds. numpy only.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.design import canary_spec

__all__ = ['CANARY_KINDS', 'CANARY_KIND_OPTIONS', 'CanaryKind',
           'DATA_CANARY_EXAMPLES', 'DATA_CANARY_IMAGES', 'DATA_CANARY_TEXTS',
           'DataCanaryPlan', 'canary_kind',
           'kinds_of']

# --canary_kind's values: one kind, or both in one run.
CANARY_KIND_OPTIONS = ('gradient', 'data', 'both')
# A data canary's examples: the default and the rule (--data_canary_examples).
DATA_CANARY_EXAMPLES = 8
# Where image tasks' data canaries take their images (--data_canary_images):
# the task's test split, or random pixels.
DATA_CANARY_IMAGES = ('test', 'random')
# Where text tasks' data canaries take their sentences (--data_canary_text):
# sampled from a bigram model of the task's training sentences, or words
# drawn uniformly from the vocabulary.
DATA_CANARY_TEXTS = ('model', 'uniform')
_EXAMPLES = validation.Int(1, 4096)


@dataclasses.dataclass(frozen=True)
class CanaryKind:
  """One kind of canary: how it is made, inserted and scored.

  Attributes:
    name: The kind's name (--canary_kind).
    made: How its canaries are made, a clause for the report.
    inserted: Where they enter a round, a clause.
    scored: What scores them, a clause.
    server_inserts: Whether the server adds them to the aggregate (an
      engine's aggregation inserts them).
    joins_cohort: Whether they join a round's clients (an engine trains
      them as clients).
    maker: 'module:name' of what makes its canaries where the core makes
      them (`data.canary_examples.canary_arrays`); '' where each engine
      draws them itself (gradient directions, bit-exact per engine).
    threat_models: The threat models its scores can measure ('final',
      'all'); a run measures 'all' where its engine scored every round's
      model (and the run has unseen canaries).
  """
  name: str
  made: str
  inserted: str
  scored: str
  server_inserts: bool
  joins_cohort: bool
  maker: str
  threat_models: tuple[str, ...]


CANARY_KINDS: dict[str, CanaryKind] = {kind.name: kind for kind in (
    CanaryKind(
        'gradient', made='random unit directions (canary seed, id)',
        inserted="added by the server to the aggregate at the round's clip",
        scored='cosine with the final model delta; max cosine over the '
        'rounds', server_inserts=True, joins_cohort=False, maker='',
        threat_models=('final', 'all')),
    CanaryKind(
        'data', made='clients holding examples with nothing to learn '
        "but themselves (images: the task's test images or random pixels, "
        'with random labels; text: sentences sampled from a bigram model of '
        'the training text, or uniform vocabulary words)',
        inserted="trained as clients through the real client path (clip "
        "and noise as any client's)",
        scored="the final model's loss on the canary's examples and the "
        'largest excess one-round drop of that loss, seen against unseen canaries '
        '(black box)',
        server_inserts=False, joins_cohort=True,
        maker='one_shot_epe.data.canary_examples:canary_arrays',
        threat_models=('final', 'all')),
)}


def canary_kind(name: str) -> CanaryKind:
  """The entry of the canary kind `name`.

  Args:
    name: 'gradient' or 'data'.

  Returns:
    Its entry.

  Raises:
    ValueError: no such kind.
  """
  return CANARY_KINDS[validation.check_choice('canary_kind', name,
                                              tuple(CANARY_KINDS))]


def kinds_of(option: str) -> tuple[CanaryKind, ...]:
  """The kinds a --canary_kind value runs: one, or both ('both').

  Args:
    option: One of `CANARY_KIND_OPTIONS`.

  Returns:
    The kinds' entries, gradient first.

  Raises:
    ValueError: an unknown option.
  """
  option = validation.check_choice('canary_kind', option, CANARY_KIND_OPTIONS)
  names = tuple(CANARY_KINDS) if option == 'both' else (option,)
  return tuple(CANARY_KINDS[name] for name in names)


@dataclasses.dataclass(frozen=True)
class DataCanaryPlan:
  """A run's data canaries: who they are and the rounds they join.

  Seen data canary j (ids 0..k-1) joins the rounds of the schedule that
  list j, as client `num_real_clients + j` of the training data (the
  canaries appended after the real clients,
  `data.canary_examples.append_clients`); unseen ones (ids
  `canary_spec.UNSEEN_ID_OFFSET` + 0..m-1) are only scored.

  Attributes:
    seed: The canary seed (their examples: (seed, id)).
    num_seen: k >= 2.
    num_unseen: m >= 2 (the loss scores' null is empirical).
    examples_per_canary: Examples each canary holds.
    schedule: Entry t lists the seen ids joining 0-based round t.
    num_real_clients: The real training clients before the canaries.
  """
  seed: int
  num_seen: int
  num_unseen: int
  examples_per_canary: int
  schedule: Sequence[Sequence[int]]
  num_real_clients: int

  def __post_init__(self):
    canary_spec.check_seed(self.seed)
    for name in ('num_seen', 'num_unseen'):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(
          value, (int, np.integer)) or value < 2:
        raise ValueError(f'{name} must be an integer >= 2 (data canaries '
                         f'are scored against unseen ones); got {value!r}.')
    _EXAMPLES('examples_per_canary', self.examples_per_canary)
    schedule = tuple(tuple(int(i) for i in ids) for ids in self.schedule)
    if any(i < 0 or i >= self.num_seen for ids in schedule for i in ids):
      raise ValueError(f'schedule ids must be in [0, {self.num_seen}).')
    object.__setattr__(self, 'schedule', schedule)

  def seen_ids(self) -> np.ndarray:
    """The seen canaries' ids.

    Returns:
      0..k-1, int64.
    """
    return canary_spec.seen_ids.unchecked(self.num_seen)

  def tracked_ids(self) -> np.ndarray:
    """The scored canaries' ids: seen, then unseen.

    Returns:
      int64 [k + m] (`canary_spec.tracked_ids`).
    """
    return canary_spec.tracked_ids.unchecked(self.num_seen, self.num_unseen)

  def clients(self, round_index: int) -> np.ndarray:
    """The canary clients that join 0-based round `round_index`.

    Args:
      round_index: The round, in [0, T).

    Returns:
      int64 client indices, `num_real_clients` + the scheduled ids, sorted.
    """
    return self.num_real_clients + np.asarray(
        sorted(self.schedule[round_index]), np.int64)
