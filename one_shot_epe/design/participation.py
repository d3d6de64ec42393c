"""Who participates in each round of DP-FedAvg: real clients and canary clients.

This module is the single place that decides participation. The one-shot
estimator (Andrew et al., ICLR 2024, Sec. 4 and Algorithms 2-3) only asks that
canaries "participate exactly as real users do"; Sec. 5 trains StackOverflow
for one epoch (every real client exactly once) and EMNIST for shuffled epochs,
and Sec. 5.2 presents each canary a fixed number of times (1, 2, 4, 8), once
in every period. The schedules here produce exactly those patterns, plus the
sampled patterns (Bernoulli, Poisson) assumed by amplification analyses and a
worst-case pattern that presents every canary as late as possible.

Conventions (shared by every schedule in this module):

* Rounds are 0-based: round `t` in `[0, T)` is the `(t + 1)`-th call of the
  training process's `next` and the `t`-th entry of a canary schedule.
  `tff.simulation.run_training_process` numbers training rounds from 1 (its
  round 0 is the initial state and evaluation, and a resumed run restarts at
  `saved_version + 1`), so its `round_num` is our `t + 1`;
  `make_training_selection_fn` does that mapping.
* Every random choice is a pure function of `(seed, kind of draw, round or
  period or epoch)` through `numpy.random.SeedSequence(seed, spawn_key=...)`,
  so round `t` is computed directly, without replaying rounds before it (a run
  resumed after a crash selects the same clients as an uninterrupted one).
  Distinct kinds of draw (shuffling, Bernoulli, Poisson, canary placement) use
  distinct spawn keys, so reusing one seed for real clients and canaries does
  not correlate them. Streams are reproducible for a fixed numpy version.
* Selected clients and canaries are returned as sorted int64 index arrays.
* Splitting `total` items into `parts` near-equal parts always gives the first
  `total % parts` parts one item more than the others (`_even_split`).

Real clients (all subclasses of `ClientSampler`):

* `ShuffledEpochs`: epoch `e` is a fresh permutation of the `m` clients (a pure
  function of `(seed, e)`) cut into `R = ceil(m / n)` consecutive rounds, so
  each client participates exactly once per epoch. When `n` does not divide
  `m`, `remainder='spread'` (default) spreads the clients evenly: the first
  `m % R` rounds of each epoch take `ceil(m / R)` clients, the rest
  `floor(m / R)`, all at most `n` (e.g. m = 3383 EMNIST users, n = 101: 34
  rounds of 100 or 99 clients). This keeps the cohort size, and hence each
  client's weight in the DP average, nearly constant. `remainder='partial'`
  instead fills rounds with exactly `n` clients and leaves the last round of
  each epoch with the `m - (R - 1) n` left over.
* `BernoulliSampling`: every client joins round `t` independently with
  probability `q = expected_clients_per_round / m`; the cohort size is
  Binomial(m, q). This is what the DP literature calls "Poisson subsampling"
  (Abadi et al., 2016); here it is named for what it does.
* `PoissonSampling`: the cohort size is `min(N, m)` with
  `N ~ Poisson(expected_clients_per_round)`, and that many distinct clients are
  drawn uniformly without replacement. Inclusions of different clients are
  then not independent. The clip at `m` only matters when the expected size is
  within a few standard deviations of `m`.

Canary clients are scheduled by `canary_schedules`; `ClientSampler.
canary_schedule` draws them by the real clients' own rule, with the same
expected participation per client: once per epoch of `R` rounds for
`ShuffledEpochs`, inclusion probability `q` for `BernoulliSampling`, a
Poisson(`k * expected / m`) count for `PoissonSampling`. `canary_plan` gives
a run its canary schedule and expected cohort.
"""

import abc
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from one_shot_epe import validation
from one_shot_epe.design import canary_schedules

_rng = canary_schedules.seeded_rng
_even_split = canary_schedules.even_split

__all__ = ['BernoulliSampling', 'ClientSampler', 'PoissonSampling',
           'ShuffledEpochs', 'canary_plan', 'make_training_selection_fn']

# Spawn-key tags that keep the random streams of different draws independent.
_SHUFFLE_TAG = 0
_BERNOULLI_TAG = 1
_POISSON_TAG = 2
_CANARY_BERNOULLI_TAG = 4
_CANARY_POISSON_TAG = 5

_REMAINDER_MODES = ('spread', 'partial')


def _check_expected(value: Any, num_clients: int) -> float:
  """Checks an expected cohort size: in (0, m], i.e. a probability in (0, 1]."""
  message = (f'expected_clients_per_round must be a number in (0, '
             f'num_clients={num_clients}] (inclusion probability in (0, 1])')
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f'{message}; got {value!r}')
  value = float(value)
  if not 0.0 < value <= num_clients:  # Also rejects NaN.
    raise ValueError(f'{message}; got {value}')
  return value


def _check_client_ids(clients: Any) -> tuple[int, tuple[str, ...] | None]:
  """Returns `(m, ids)` from a client count or a sequence of string ids."""
  if isinstance(clients, numbers.Integral) and not isinstance(clients, bool):
    return validation.check_int('clients', clients, 1), None
  if isinstance(clients, (str, bytes)) or not isinstance(
      clients, (Sequence, np.ndarray)):
    raise ValueError('clients must be a positive client count or a sequence '
                     f'of string client ids; got {clients!r}')
  ids = tuple(clients)
  if not ids:
    raise ValueError('clients must contain at least one client id; got none')
  for client_id in ids:
    if not isinstance(client_id, str):
      raise ValueError('clients must be string client ids (as '
                       f'ClientData.client_ids); got {client_id!r}')
  seen = set()
  for client_id in ids:
    if client_id in seen:
      raise ValueError(f'clients must be distinct; {client_id!r} repeats')
    seen.add(client_id)
  return len(ids), tuple(str(client_id) for client_id in ids)


def _bernoulli_draw(rng: np.random.Generator, population: int,
                    probability: float) -> np.ndarray:
  """Sorted indices of `population` members each kept with `probability`."""
  return np.flatnonzero(rng.random(population) < probability).astype(np.int64)


def _poisson_draw(rng: np.random.Generator, population: int,
                  expected: float) -> np.ndarray:
  """Sorted `min(Poisson(expected), population)` distinct members, uniformly."""
  size = min(int(rng.poisson(expected)), population)
  return np.sort(rng.choice(population, size=size, replace=False)).astype(
      np.int64)


class ClientSampler(abc.ABC):
  """Selects the real clients of each round; see the module docstring.

  Attributes:
    sampling: The rule's name, as the launcher's --sampling and
      `dp_fedavg.Participation.sampling` spell it.
    num_clients: The population size m.
    client_ids: The client ids given at construction, or None when the
      sampler was built from a count (then only indices are available).
    seed: The non-negative integer seed.
  """
  sampling: str

  @validation.arguments('seed')
  def __init__(self, clients: int | Sequence[str], seed: int):
    """Checks and stores the population and the seed.

    Args:
      clients: the population size m (>= 1), or the distinct string client
        ids (e.g. ClientData.client_ids), which `ids` then returns.
      seed: the non-negative seed of every draw.

    Raises:
      ValueError: `clients` is neither a positive count nor a non-empty
        sequence of distinct strings, or `seed` is not an int >= 0.
    """
    self.num_clients, self.client_ids = _check_client_ids(clients)
    self.seed = seed

  @property
  @abc.abstractmethod
  def expected_clients_per_round(self) -> float:
    """The mean cohort size over rounds."""

  @abc.abstractmethod
  def _select(self, round_index: int) -> np.ndarray:
    """Sorted indices of round `round_index` (already validated)."""

  @abc.abstractmethod
  def _canary_rounds(self, num_canaries: int, num_rounds: int,
                     seed: int) -> Sequence[np.ndarray]:
    """The canary ids of each round (arguments already validated)."""

  @validation.arguments('num_canaries', 'num_rounds', 'seed')
  def canary_schedule(self, num_canaries: int, num_rounds: int,
                      seed: int) -> canary_schedules.CanarySchedule:
    """Canaries selected by this sampler's rule at its per-client rate.

    Args:
      num_canaries: the number k of canary clients (>= 1).
      num_rounds: the number of training rounds T (>= 1).
      seed: the non-negative canary seed (independent of the sampler's).

    Returns:
      The canaries of each of the T rounds.

    Raises:
      ValueError: an argument is not an int in its range.
    """
    return canary_schedules.CanarySchedule(
        num_canaries, tuple(self._canary_rounds(num_canaries, num_rounds,
                                                seed)))

  @validation.arguments('round_index')
  def indices(self, round_index: int) -> np.ndarray:
    """Sorted int64 population indices of round `round_index`'s cohort.

    Args:
      round_index: the 0-based round (>= 0); the draw is a pure function of
        the seed and the round.

    Returns:
      The cohort's indices in [0, m), sorted.

    Raises:
      ValueError: `round_index` is not an int >= 0.
    """
    return self._select(round_index)

  def ids(self, round_index: int) -> list[str]:
    """Client ids of round `round_index`'s cohort, in index order.

    Args:
      round_index: the 0-based round (>= 0).

    Returns:
      The ids of the clients `indices` selects.

    Raises:
      ValueError: the sampler was built from a count, not ids, or
        `round_index` is not an int >= 0.
    """
    if self.client_ids is None:
      raise ValueError('clients was given as a count; build the sampler from '
                       'client ids (e.g. ClientData.client_ids) to get ids')
    return [self.client_ids[i] for i in self.indices(round_index)]


class ShuffledEpochs(ClientSampler):
  """Each epoch a fresh permutation of all clients, cut into rounds.

  Attributes:
    clients_per_round: The maximum cohort size n.
    rounds_per_epoch: R = ceil(m / n).
    cohort_sizes: Cohort size of each round within an epoch (length R).
  """
  sampling = 'shuffle'

  @validation.arguments(remainder=validation.Choice(_REMAINDER_MODES))
  def __init__(self, clients: int | Sequence[str], clients_per_round: int,
               seed: int, remainder: str = 'spread'):
    """Checks the arguments and fixes the epoch's cohort sizes.

    Args:
      clients: the population size m (>= 1), or the distinct string client
        ids.
      clients_per_round: the maximum cohort size n, in [1, m].
      seed: the non-negative seed of the epoch permutations.
      remainder: how the m clients of an epoch are cut into R rounds:
        'spread' (sizes differ by at most one) or 'partial' (R - 1 full
        cohorts of n, the rest in the last round).

    Raises:
      ValueError: an argument is outside its range or `remainder` is not
        one of the modes.
    """
    super().__init__(clients, seed)
    self.clients_per_round = validation.check_int(
        'clients_per_round', clients_per_round, 1, self.num_clients)
    self.rounds_per_epoch = math.ceil(self.num_clients /
                                      self.clients_per_round)
    if remainder == 'spread':
      sizes = _even_split(self.num_clients, self.rounds_per_epoch)
    else:
      sizes = np.full(self.rounds_per_epoch, self.clients_per_round, np.int64)
      sizes[-1] = self.num_clients - (self.rounds_per_epoch -
                                      1) * self.clients_per_round
    self.cohort_sizes = tuple(int(s) for s in sizes)
    self._offsets = np.concatenate([[0], np.cumsum(sizes)])
    self._epoch_cache = (-1, np.zeros(0, np.int64))

  @property
  def expected_clients_per_round(self) -> float:
    """m / R: the mean cohort size over the R rounds of an epoch."""
    return self.num_clients / self.rounds_per_epoch

  @validation.arguments(epoch=validation.Int(0))
  def epoch_permutation(self, epoch: int) -> np.ndarray:
    """All clients in their order in `epoch`: pure in (seed, epoch).

    Args:
      epoch: the 0-based epoch (>= 0).

    Returns:
      A permutation of [0, m) as int64 (cached: do not modify it).

    Raises:
      ValueError: `epoch` is not an int >= 0.
    """
    if self._epoch_cache[0] != epoch:
      permutation = _rng(self.seed, _SHUFFLE_TAG, epoch).permutation(
          self.num_clients).astype(np.int64)
      self._epoch_cache = (epoch, permutation)
    return self._epoch_cache[1]

  def _select(self, round_index: int) -> np.ndarray:
    epoch, position = divmod(round_index, self.rounds_per_epoch)
    permutation = self.epoch_permutation(epoch)
    return np.sort(
        permutation[self._offsets[position]:self._offsets[position + 1]])

  def _canary_rounds(self, num_canaries: int, num_rounds: int,
                     seed: int) -> Sequence[np.ndarray]:
    """Each canary once per epoch of `rounds_per_epoch` rounds, to `num_rounds`.

    A final partial epoch is placed in full and then truncated, so, like a
    real client, a canary may or may not appear in it.
    """
    epochs = math.ceil(num_rounds / self.rounds_per_epoch)
    rounds = canary_schedules.place_once_per_period(num_canaries,
                                    [self.rounds_per_epoch] * epochs, seed)
    return rounds[:num_rounds]


class _ExpectedSizeSampler(ClientSampler):
  """A sampler whose cohort size is random, of a given mean (q m or Poisson)."""

  def __init__(self, clients: int | Sequence[str],
               expected_clients_per_round: float, seed: int):
    super().__init__(clients, seed)
    self._expected = _check_expected(expected_clients_per_round,
                                     self.num_clients)

  @property
  def expected_clients_per_round(self) -> float:
    """The mean cohort size the sampler was built with."""
    return self._expected

  @property
  def clients_per_round(self) -> float:
    """The clients per round the sampler was asked for: its mean cohort."""
    return self._expected


class BernoulliSampling(_ExpectedSizeSampler):
  """Every client independently with probability q = expected / m each round.

  Attributes:
    probability: The inclusion probability q.
  """
  sampling = 'bernoulli'

  def __init__(self, clients: int | Sequence[str],
               expected_clients_per_round: float, seed: int):
    """Checks the arguments; q = expected_clients_per_round / m.

    Args:
      clients: the population size m (>= 1), or the distinct string client
        ids.
      expected_clients_per_round: the mean cohort size q m, in (0, m].
      seed: the non-negative seed of the draws.

    Raises:
      ValueError: an argument is outside its range.
    """
    super().__init__(clients, expected_clients_per_round, seed)
    self.probability = self._expected / self.num_clients

  def _select(self, round_index: int) -> np.ndarray:
    return _bernoulli_draw(_rng(self.seed, _BERNOULLI_TAG, round_index),
                           self.num_clients, self.probability)

  def _canary_rounds(self, num_canaries: int, num_rounds: int,
                     seed: int) -> Sequence[np.ndarray]:
    """Each canary independently with probability q in every round."""
    return [_bernoulli_draw(_rng(seed, _CANARY_BERNOULLI_TAG, t), num_canaries,
                            self.probability) for t in range(num_rounds)]


class PoissonSampling(_ExpectedSizeSampler):
  """A Poisson(expected)-sized cohort, capped at m, of distinct clients.

  The cap at m makes the true mean cohort at most `expected_clients_per_round`.
  """
  sampling = 'poisson'

  def _select(self, round_index: int) -> np.ndarray:
    return _poisson_draw(_rng(self.seed, _POISSON_TAG, round_index),
                         self.num_clients, self._expected)

  def _canary_rounds(self, num_canaries: int, num_rounds: int,
                     seed: int) -> Sequence[np.ndarray]:
    """A Poisson(k * expected / m)-sized set of canaries in every round."""
    expected = num_canaries * self._expected / self.num_clients
    return [_poisson_draw(_rng(seed, _CANARY_POISSON_TAG, t), num_canaries,
                          expected) for t in range(num_rounds)]


def make_training_selection_fn(
    sampler: ClientSampler,
    create_tf_dataset_for_client: Callable[[str], Any]
) -> Callable[[int], list[Any]]:
  """A `training_selection_fn` for `tff.simulation.run_training_process`.

  TFF calls it with `round_num = 1, 2, ...` (also after a resume from saved
  version `v`, starting at `v + 1`); it returns the datasets of the clients
  `sampler` selects for our 0-based round `round_num - 1`.

  Args:
    sampler: A sampler built from client ids.
    create_tf_dataset_for_client: Maps a client id to its dataset, e.g.
      `ClientData.create_tf_dataset_for_client` or a preprocessed variant.

  Returns:
    A function of TFF's 1-based round number returning the round's client
    datasets; it raises ValueError for a round number below 1.

  Raises:
    ValueError: `sampler` was built from a count, or
      `create_tf_dataset_for_client` is not callable.
  """
  if sampler.client_ids is None:
    raise ValueError('sampler must be built from client ids (not a count) to '
                     'look up client datasets')
  if not callable(create_tf_dataset_for_client):
    raise ValueError('create_tf_dataset_for_client must be callable; got '
                     f'{create_tf_dataset_for_client!r}')

  @validation.arguments(round_num=validation.Int(1))
  def training_selection_fn(round_num: int) -> list[Any]:
    return [
        create_tf_dataset_for_client(client_id)
        for client_id in sampler.ids(round_num - 1)
    ]

  return training_selection_fn


@validation.arguments('num_rounds', 'seed', num_canaries=validation.Int(0))
def canary_plan(sampler: ClientSampler, num_canaries: int, num_rounds: int,
                repetitions: int, seed: int
                ) -> tuple[canary_schedules.CanarySchedule | None, float]:
  """A run's canary schedule and the expected cohort of its DP average.

  Canaries participate as the real clients do (Sec. 4): with shuffled epochs,
  every canary once in each of `repetitions` equal periods (Sec. 5.2), adding
  k r / T per round (`expected_cohort`); with Bernoulli or Poisson sampling,
  at the clients' own rate q = E[cohort] / m, adding k q per round. The
  cohort is the DP average's denominator and the adaptive clip's expected
  record count. Without canaries (k = 0) the schedule is None.

  Example (10 clients, 5 a round: 2 rounds an epoch; 4 canaries, each twice
  in 4 rounds, add 2 to each round's 5 clients):

    >>> sampler = ShuffledEpochs(10, clients_per_round=5, seed=0)
    >>> schedule, cohort = canary_plan(sampler, num_canaries=4, num_rounds=4,
    ...                                repetitions=2, seed=0)
    >>> schedule.appearance_counts().tolist(), cohort
    ([2, 2, 2, 2], 7.0)

  Args:
    sampler: the real clients' sampler, whose rule the canaries follow.
    num_canaries: the number k of seen canaries (>= 0).
    num_rounds: the number of training rounds T (>= 1).
    repetitions: the presentations r of each canary, in [1, T]; used only
      with shuffled epochs (Bernoulli and Poisson canaries appear at rate q).
    seed: the non-negative canary placement seed.

  Returns:
    (schedule, expected cohort): the canary schedule (None when k = 0) and
    the expected number of participants per round, canaries included.

  Raises:
    ValueError: an argument is not an int in its range.
    run_size.PlanRefused: naming 'num_canaries', before any schedule is
      drawn, if canaries would be over `canary_schedules.MAX_CANARY_SHARE`
      of the cohort.
  """
  clients = sampler.expected_clients_per_round
  shuffled = isinstance(sampler, ShuffledEpochs)
  cohort = (canary_schedules.expected_cohort.unchecked(
                clients, num_canaries, repetitions, num_rounds)
            if shuffled else
            clients + num_canaries * clients / sampler.num_clients)
  canary_schedules.check_canary_share(clients, cohort)
  if not num_canaries:
    return None, cohort
  if shuffled:
    return canary_schedules.periodic_canary_schedule.unchecked(
        num_canaries, num_rounds, repetitions, seed), cohort
  return ClientSampler.canary_schedule.unchecked(
      sampler, num_canaries, num_rounds, seed), cohort


