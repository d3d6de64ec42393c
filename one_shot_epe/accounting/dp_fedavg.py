"""Analytical and accounted epsilons of a DP-FedAvg run (no TensorFlow).

Two upper bounds sit beside the one-shot estimates, each with the mechanism it
assumes spelled out, because they answer different questions:

* `canary_epsilon`: a canary presented r times with the adversary knowing the
  rounds (Andrew et al., ICLR 2024, footnote 5 for r = 1): the r-fold
  composition of the Gaussian mechanism at noise multiplier z, which is exactly
  one Gaussian mechanism at noise z / sqrt(r) (the sum of r independent
  Gaussian releases of the same shift is a sufficient statistic). Its exact eps
  is Balle and Wang's (`estimation.gaussian_epsilon`).
* `client_epsilon`: a real client under the run's own participation rule.
  Bernoulli ("Poisson subsampling" in the DP literature) and Poisson-sized
  cohorts: a Poisson-subsampled Gaussian at q = clients_per_round /
  num_clients composed over T rounds, accounted with dp_accounting's
  privacy-loss-distribution (PLD) accountant, pessimistic discretisation (a
  valid upper bound; tighter than RDP, which at the paper's noise levels is
  looser by orders of magnitude). Shuffled epochs: at most one participation
  per epoch, composed over the epochs without amplification (tight bounds
  for shuffling are not known; the paper's footnote 5).
  `client_epsilon_of_event` does the same from the DpEvent that the DP
  aggregation reports for one round (TFF's `extract_dp_event_from_state`), so
  an adaptive clip's count query is accounted as well;
  `client_epsilon_of_rounds` from each round's own event, where rounds differ
  (a round noised at a lower effective noise multiplier, one that released
  nothing).

A third number is a heuristic, not a bound: `last_iterate_epsilon`, the
reference for the final-model estimate (Steinke et al., 2025, "The last
iterate advantage"). For linear losses and server SGD the final model is
the initial one plus the sum of every round's noised update, so a canary
presented K times in T rounds (K drawn by the run's schedule) is seen as
N(K, T z^2) against N(0, T z^2) when absent: a mixture of Gaussians against
one Gaussian (`last_iterate.mixture_epsilon` has its exact eps). Server
momentum beta weighs round t by w_t = (1 - beta^(T-t+1)) / (1 - beta): a
canary in rounds R is seen as N(sum_(t in R) w_t, z^2 ||w||^2)
(`last_iterate`). Real training is not linear and nothing proves the
heuristic an upper bound, which is why it is labelled a heuristic.
"""

import collections
import dataclasses
import math
from collections.abc import Sequence

import dp_accounting
import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.accounting import last_iterate
from one_shot_epe.stats import estimation
from one_shot_epe import validation

__all__ = ['CorrelatedNoise', 'MechanismEpsilon', 'Participation', 'SAMPLINGS', 'canary_epsilon',
           'client_epsilon', 'client_epsilon_of_event',
           'client_epsilon_of_rounds',
           'composed_gaussian_epsilon', 'last_iterate_epsilon',
           'matrix_factorization_canary_epsilon']

SAMPLINGS = ('shuffle', 'bernoulli', 'poisson')

# PLD discretisation: coarse first, then refined to about 1e-4 relative to the
# coarse eps (pessimistic either way). A fixed fine grid takes a minute at the
# paper's smallest noise multipliers; this takes well under a second.
_COARSE_INTERVAL = 1e-2
_FINE_RELATIVE_INTERVAL = 1e-4
_FINEST_INTERVAL = 1e-4


@dataclasses.dataclass(frozen=True)
class MechanismEpsilon:
  """An eps with the one-line description of the mechanism it is exact for."""
  epsilon: float  # math.inf without noise.
  mechanism: str


@dataclasses.dataclass(frozen=True)
class CorrelatedNoise:
  """A run's matrix-factorization noise, as numbers (the engine computes them).

  mechanism: the strategy's name ('blt', 'banded'); sensitivity: sens(C)
  under the run's participation (the noise std is z S sens);
  canary_column_norm: the largest ||sum of the columns of C at a seen
  canary's rounds|| over the seen canaries (so the analytical eps bounds
  every seen canary's); coefs: C's first column (C[i, j] = coefs[i - j],
  lower triangular Toeplitz), from which the final model's noise std
  z S sens ||w^T C^-1|| follows (`correlated_final_model.final_noise_norm`).
  """
  mechanism: str
  sensitivity: float
  canary_column_norm: float
  coefs: tuple[float, ...]

  def __post_init__(self):
    object.__setattr__(self, 'coefs', tuple(
        float(c) for c in np.asarray(self.coefs, np.float64).reshape(-1)))


@validation.fields('clients_per_round', 'num_clients', 'rounds',
                   sampling=validation.Choice(SAMPLINGS))
@dataclasses.dataclass(frozen=True)
class Participation:
  """How real clients take part in the run (`participation` samplers).

  sampling: 'shuffle' (each client once per epoch of ceil(m / n) rounds),
  'bernoulli' (each client independently with q = n / m per round) or
  'poisson' (a Poisson(n)-sized uniform cohort per round).

  Attributes:
    sampling: One of SAMPLINGS, as above.
    clients_per_round: n, the (expected) cohort size, in (0, m].
    num_clients: m >= 1, the real clients.
    rounds: T >= 1, the training rounds.

  Raises:
    ValueError: at construction, if a field is outside its range.
  """
  sampling: str
  clients_per_round: float
  num_clients: int
  rounds: int

  def __post_init__(self):
    if self.clients_per_round > self.num_clients:
      raise ValueError('clients_per_round must be <= num_clients = '
                       f'{self.num_clients}; got {self.clients_per_round}.')

  @property
  def sampling_probability(self) -> float:
    """q = clients_per_round / num_clients."""
    return self.clients_per_round / self.num_clients

  @property
  def epochs(self) -> int:
    """Shuffled epochs the rounds touch: ceil(T / ceil(m / n)).

    A client takes part at most once in each, a final partial epoch included.
    """
    rounds_per_epoch = math.ceil(self.num_clients / self.clients_per_round)
    return math.ceil(self.rounds / rounds_per_epoch)


@validation.arguments('noise_multiplier', 'delta', count=validation.Int(1))
def composed_gaussian_epsilon(noise_multiplier: float, delta: float,
                              count: int) -> float:
  """Exact eps of `count` compositions of the Gaussian mechanism (sensitivity 1).

  Equal to one Gaussian at noise_multiplier / sqrt(count).

  Args:
    noise_multiplier: z >= 0, the noise std in units of the sensitivity.
    delta: The delta, in (0, 1).
    count: The number of compositions, >= 1.

  Returns:
    eps; math.inf at z = 0.

  Raises:
    ValueError: if an argument is out of range.
  """
  if noise_multiplier == 0:
    return math.inf
  return estimation.gaussian_epsilon.unchecked(
      noise_multiplier / math.sqrt(count), delta)


@validation.arguments('noise_multiplier', 'delta',
                      presentations=validation.Int(1))
def canary_epsilon(noise_multiplier: float, delta: float,
                   presentations: int) -> MechanismEpsilon:
  """Analytical eps of one canary presented `presentations` = r times.

  The adversary knows the rounds (footnote 5), so no amplification: an
  r-fold composition of the Gaussian mechanism at noise multiplier z.

  Example:

    >>> round(canary_epsilon(1.0, 1e-5, 1).epsilon, 2)
    4.38

  Args:
    noise_multiplier: z >= 0.
    delta: The delta, in (0, 1).
    presentations: r >= 1.

  Returns:
    The eps (math.inf at z = 0) and a description of the mechanism.

  Raises:
    ValueError: if an argument is out of range.
  """
  z = noise_multiplier
  return MechanismEpsilon(
      composed_gaussian_epsilon.unchecked(z, delta, presentations),
      f'a canary presented r = {presentations} time(s) in known rounds: '
      f'{presentations}-fold Gaussian mechanism at noise multiplier {z:g} '
      f'(= one Gaussian at {z / math.sqrt(presentations):.4g}), no '
      'amplification')


@validation.arguments('noise_multiplier', 'delta', 'sensitivity',
                      column_norm=validation.Real(0.0, low_open=True))
def matrix_factorization_canary_epsilon(
    noise_multiplier: float, delta: float, column_norm: float,
    sensitivity: float, mechanism: str) -> MechanismEpsilon:
  """Analytical eps of a canary under DP-FTRL's correlated noise (MF).

  The matrix-factorization mechanism releases C x + Z, Z with i.i.d.
  N(0, (z S sens)^2) entries, where C is the strategy (encoder) and sens its
  sensitivity under the run's participation (so the run as a whole is one
  Gaussian mechanism at noise multiplier z). A canary of norm S inserted in
  rounds t_1..t_r shifts the release by S times the sum of C's columns
  t_1..t_r, whose norm `column_norm` is computed by the engine from the
  strategy; knowing the rounds, the adversary faces one Gaussian mechanism
  with mu = column_norm / (z sens). With C = I (sens = 1, column norm
  sqrt(r)) this is `canary_epsilon`.

  Args:
    noise_multiplier: z >= 0.
    delta: The delta, in (0, 1).
    column_norm: ||sum_j C[:, t_j]|| > 0, the canary's rounds' columns.
    sensitivity: sens > 0, C's sensitivity under the run's participation.
    mechanism: The strategy's name for the description (e.g. 'blt').

  Returns:
    The eps (math.inf at z = 0) and a description of the mechanism.

  Raises:
    ValueError: if an argument is out of range.
  """
  z = noise_multiplier
  mu = math.inf if z == 0 else column_norm / (z * sensitivity)
  epsilon = (math.inf if z == 0 else
             estimation.gaussian_epsilon.unchecked(1.0 / mu, delta))
  return MechanismEpsilon(
      epsilon,
      f'a canary in known rounds under {mechanism} correlated noise: one '
      f'Gaussian mechanism at mu = ||sum of its columns of C|| / (z sens) = '
      f'{column_norm:.4g} / ({z:g} x {sensitivity:.4g}) = {mu:.4g}')


def _pld_epsilon(event: dp_accounting.DpEvent, delta: float) -> float:
  """dp_accounting PLD eps of `event` at delta (pessimistic discretisation).

  Raises:
    ValueError: if the PLD accountant cannot account `event` (e.g. tree
      aggregation), naming the event.
  """

  def pld_epsilon(interval: float) -> float:
    accountant = dp_accounting.pld.PLDAccountant(
        value_discretization_interval=interval)
    if not accountant.supports(event):
      raise ValueError(f'the PLD accountant cannot account {event!r}.')
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))

  coarse = pld_epsilon(_COARSE_INTERVAL)
  interval = min(_COARSE_INTERVAL,
                 max(_FINEST_INTERVAL, _FINE_RELATIVE_INTERVAL * coarse))
  return coarse if interval == _COARSE_INTERVAL else pld_epsilon(interval)


def _has_noise(event: dp_accounting.DpEvent) -> bool:
  """False for an event holding a Gaussian of noise multiplier 0 (no DP)."""
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return event.noise_multiplier > 0
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return False
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return all(_has_noise(inner) for inner in event.events)
  inner = getattr(event, 'event', None)
  return True if inner is None else _has_noise(inner)


def _merged_gaussians(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
  """A composition of Gaussian events as the one Gaussian it equals.

  k Gaussian mechanisms of noise multipliers z_i on the same records are
  exactly one Gaussian at (sum_i z_i^-2)^-1/2 (their noised outputs, scaled by
  1/z_i^2, are a sufficient statistic). An adaptive clip's round (the sum's
  and the unclipped count's noise) is such a composition; dp_accounting's
  PLD accountant can subsample the merged event but not the composition.
  Any other event is returned unchanged.
  """
  if (isinstance(event, dp_accounting.ComposedDpEvent) and event.events and
      all(isinstance(inner, dp_accounting.GaussianDpEvent) and
          inner.noise_multiplier > 0 for inner in event.events)):
    precision = sum(inner.noise_multiplier**-2 for inner in event.events)
    return dp_accounting.GaussianDpEvent(precision**-0.5)
  return event


@validation.arguments('delta', 'rounds')
def client_epsilon_of_event(round_event: dp_accounting.DpEvent, delta: float,
                            participation: Participation | None,
                            rounds: int) -> MechanismEpsilon:
  """Accounted eps of a real client whose every round is `round_event`.

  participation None: the client takes part in every one of the `rounds`
  rounds, the worst case of any sampling. Otherwise as `client_epsilon`: for
  Bernoulli/Poisson cohorts each round is the event Poisson-subsampled at q
  and composed over the participation's rounds; for shuffled epochs it is
  composed once per epoch.

  Args:
    round_event: One round's `dp_accounting.DpEvent` (e.g. the aggregator's).
    delta: The delta, in (0, 1).
    participation: How real clients take part; None for every round.
    rounds: T >= 1, the rounds when `participation` is None.

  Returns:
    The eps (math.inf when the event adds no noise) and a description of the
    mechanism accounted.

  Raises:
    TypeError: if `round_event` is not a DpEvent or `participation` not a
      `Participation`.
    ValueError: if `delta` or `rounds` is out of range, or the PLD
      accountant cannot account the event (e.g. tree aggregation).
  """
  if not isinstance(round_event, dp_accounting.DpEvent):
    raise TypeError('round_event must be a dp_accounting.DpEvent; got '
                    f'{type(round_event).__name__}.')
  if participation is None:
    event = dp_accounting.SelfComposedDpEvent(round_event, rounds)
    description = (f'a real client in every one of {rounds} rounds (no '
                   'sampling given): the round\'s DP event composed '
                   f'{rounds} times (dp_accounting PLD)')
  elif not isinstance(participation, Participation):
    raise TypeError('participation must be an accounting.Participation; got '
                    f'{type(participation).__name__}.')
  elif participation.sampling == 'shuffle':
    epochs = participation.epochs
    event = dp_accounting.SelfComposedDpEvent(round_event, epochs)
    description = (f'a real client at most once in each of {epochs} shuffled '
                   f'epoch(s): the round\'s DP event composed {epochs} times, '
                   'no amplification by shuffling claimed (dp_accounting PLD)')
  else:
    q = participation.sampling_probability
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, _merged_gaussians(round_event)),
        participation.rounds)
    description = (f'a real client, independent inclusion at q = {q:.4g} per '
                   'round: the round\'s DP event Poisson-subsampled and '
                   f'composed over {participation.rounds} rounds '
                   '(dp_accounting PLD)')
  epsilon = _pld_epsilon(event, delta) if _has_noise(round_event) else math.inf
  return MechanismEpsilon(epsilon, description)


def _least_noised(events: list[dp_accounting.DpEvent]) -> dp_accounting.DpEvent:
  """The event of `events` with the least noise, all of them Gaussian."""
  merged = [_merged_gaussians(event) for event in events]
  if not all(isinstance(event, dp_accounting.GaussianDpEvent)
             for event in merged):
    raise ValueError('rounds of different events within a shuffled epoch '
                     'are accounted only for Gaussian events; got '
                     f'{events!r}.')
  return min(merged, key=lambda event: event.noise_multiplier)


@validation.arguments('delta')
def client_epsilon_of_rounds(
    round_events: Sequence[dp_accounting.DpEvent | None], delta: float,
    participation: Participation | None = None) -> MechanismEpsilon:
  """Accounted eps of a real client over rounds whose DpEvents differ.

  Entry t is round t + 1's event as released (e.g. a Gaussian at the
  round's effective noise multiplier), or None for a round that released
  nothing (no event). participation None: the client takes part in every
  round, the events composed. Bernoulli/Poisson cohorts: each round's event
  Poisson-subsampled at q, composed. Shuffled epochs (ceil(m / n) rounds
  each): once per epoch, in its least-noised round (Gaussian events, merged
  as in `client_epsilon_of_event`), composed over the epochs.

  Args:
    round_events: One entry per round, in order: its DpEvent or None.
    delta: The delta, in (0, 1).
    participation: How real clients take part (its rounds must be the
      entries'); None for every round.

  Returns:
    The eps (0 when no round released anything; math.inf when a released
    round adds no noise) and a description of the mechanism accounted.

  Raises:
    TypeError: if an entry is neither a DpEvent nor None, or
      `participation` is not a `Participation`.
    ValueError: if `delta` is out of range, `participation` has another
      number of rounds, or, under shuffled epochs, an epoch holds events
      other than Gaussian ones.
  """
  events = list(round_events)
  for event in events:
    if event is not None and not isinstance(event, dp_accounting.DpEvent):
      raise TypeError('round_events must hold dp_accounting.DpEvents or None; '
                      f'got {type(event).__name__}.')
  if participation is not None and not isinstance(participation,
                                                  Participation):
    raise TypeError('participation must be an accounting.Participation; got '
                    f'{type(participation).__name__}.')
  if participation is not None and participation.rounds != len(events):
    raise ValueError(f'round_events has {len(events)} rounds, participation '
                     f'{participation.rounds}.')
  released = [event for event in events if event is not None]
  skipped = len(events) - len(released)
  rounds = (f'{len(released)} released round(s) of {len(events)}, each at '
            'its own event' + (f' ({skipped} released nothing)' if skipped
                                else ''))
  if participation is None:
    composed = released
    description = (f'a real client in every one of {rounds}: the events '
                   'composed (dp_accounting PLD)')
  elif participation.sampling == 'shuffle':
    length = math.ceil(participation.num_clients /
                       participation.clients_per_round)
    epochs = [[event for event in events[start:start + length]
               if event is not None]
              for start in range(0, len(events), length)]
    composed = [_least_noised(epoch) for epoch in epochs if epoch]
    description = (f'a real client at most once in each of {len(epochs)} '
                   f'shuffled epoch(s) of {rounds}: each epoch\'s least-noised '
                   'round, composed, no amplification by shuffling claimed '
                   '(dp_accounting PLD)')
  else:
    q = participation.sampling_probability
    composed = [dp_accounting.PoissonSampledDpEvent(q, _merged_gaussians(event))
                for event in released]
    description = (f'a real client, independent inclusion at q = {q:.4g} per '
                   f'round, over {rounds}: each round\'s event '
                   'Poisson-subsampled, composed (dp_accounting PLD)')
  if not composed:
    return MechanismEpsilon(0.0, description)
  if not all(_has_noise(event) for event in released):
    return MechanismEpsilon(math.inf, description)
  return MechanismEpsilon(
      _pld_epsilon(dp_accounting.ComposedDpEvent(composed), delta),
      description)


@validation.arguments('noise_multiplier', 'delta')
def client_epsilon(noise_multiplier: float, delta: float,
                   participation: Participation) -> MechanismEpsilon:
  """Accounted eps of one real client over the whole run (see module doc).

  Args:
    noise_multiplier: z >= 0, each round's Gaussian noise multiplier.
    delta: The delta, in (0, 1).
    participation: How real clients take part in the run.

  Returns:
    The eps (math.inf at z = 0) and a description of the mechanism.

  Raises:
    TypeError: if `participation` is not a `Participation`.
    ValueError: if `noise_multiplier` or `delta` is out of range.
  """
  z = noise_multiplier
  if not isinstance(participation, Participation):
    raise TypeError('participation must be an accounting.Participation; got '
                    f'{type(participation).__name__}.')
  if participation.sampling == 'shuffle':
    epochs = participation.epochs
    return MechanismEpsilon(
        composed_gaussian_epsilon.unchecked(z, delta, epochs),
        f'a real client at most once in each of {epochs} shuffled epoch(s): '
        f'{epochs}-fold Gaussian mechanism at noise multiplier {z:g}, no '
        'amplification by shuffling claimed')
  q, rounds = participation.sampling_probability, participation.rounds
  cohort = ('independent inclusion' if participation.sampling == 'bernoulli'
            else 'Poisson-sized uniform cohort, accounted as independent '
            'inclusion')
  epsilon = (math.inf if z == 0 else _pld_epsilon(
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              q, dp_accounting.GaussianDpEvent(z)), rounds), delta))
  return MechanismEpsilon(
      epsilon,
      f'a real client, {cohort} at q = {q:.4g} per round: Poisson-subsampled '
      f'Gaussian at noise multiplier {z:g} composed over {rounds} rounds '
      '(dp_accounting PLD)')


@validation.arguments('noise_multiplier', 'delta', 'rounds', 'momentum')
def last_iterate_epsilon(noise_multiplier: float, delta: float, rounds: int,
                         presentations: ArrayLike,
                         momentum: float = 0.0) -> MechanismEpsilon:
  """The last-iterate heuristic eps of a canary (Steinke et al., 2025).

  Args:
    noise_multiplier: z, the noise std per round in units of the clip norm.
    delta: The delta of the eps, in (0, 1).
    rounds: T, the rounds summed into the final model.
    presentations: Each seen canary's signal in the final model, the
      mixture's draws: at momentum 0 how many times it was presented
      (integers in [0, T]: the run's schedule,
      `canary_spec.CanarySpec.presentation_counts`); under momentum beta
      the sum of w_t over its rounds (`last_iterate.canary_signals`), reals
      in [0, sum_t w_t].
    momentum: beta in [0, 1), the server's heavy-ball momentum (0: SGD),
      which weighs round t by w_t (`last_iterate.momentum_weights`).

  Returns:
    eps between (1/k) sum_i N(s_i, z^2 ||w||^2) and N(0, z^2 ||w||^2)
    (`last_iterate.mixture_epsilon`; ||w||^2 = T at momentum 0), exact for
    a linear loss and a constant clip norm. When every canary is presented
    r times under server SGD it is one Gaussian mechanism at noise
    z sqrt(T) / r (`estimation.gaussian_epsilon`).

  Raises:
    ValueError: if an argument is out of range or `presentations` is not a
      non-empty 1-D array of values in its range (integers at momentum 0).
  """
  z = noise_multiplier
  weights = last_iterate.momentum_weights.unchecked(rounds, momentum)
  signals = np.asarray(presentations)
  top = float(weights.sum())
  if (signals.ndim != 1 or signals.size == 0 or
      not np.issubdtype(signals.dtype, np.number) or
      not np.all(np.isfinite(signals)) or np.any(signals < 0) or
      np.any(signals > top * (1.0 + 1e-12)) or
      (momentum == 0 and np.any(signals != np.round(signals)))):
    kind = 'integers' if momentum == 0 else 'reals'
    raise ValueError(f'presentations must be a non-empty 1-D array of {kind} '
                     f'in [0, {top:.6g}] (the sum of the rounds\' weights).')
  norm = math.sqrt(float(np.dot(weights, weights)))
  summed = 'sum' if momentum == 0 else 'weighted sum'
  description = (f'heuristic, not a bound: the final model as the {summed} of '
                 f'{rounds} noised rounds at noise multiplier {z:g} (a linear '
                 f'loss), {_presented(signals, rounds, momentum, norm)} '
                 '(Steinke et al., 2025)')
  if not np.any(signals):
    return MechanismEpsilon(0.0, description)
  if z == 0:
    return MechanismEpsilon(math.inf, description)
  return MechanismEpsilon(
      last_iterate.mixture_epsilon.unchecked(signals, z * norm, delta),
      description)


def _presented(signals: np.ndarray, rounds: int, momentum: float,
               norm: float) -> str:
  """The canaries' presentations, and the server's weights, in words."""
  if momentum == 0:
    tally = collections.Counter(int(c) for c in signals)
    if len(tally) == 1:
      presented = f'each canary presented {next(iter(tally))} time(s)'
    else:
      presented = 'canaries presented ' + ', '.join(
          f'{k} time(s) ({n / signals.size:.1%})'
          for k, n in sorted(tally.items()))
    return f'server SGD assumed (momentum 0), {presented}'
  return (f'server momentum {momentum:g}: round t of T weighs w_t = '
          f'(1 - {momentum:g}^(T-t+1)) / (1 - {momentum:g}) in the final '
          f'model, noise std z ||w|| = {norm:.4g} z against sqrt(T) = '
          f'{math.sqrt(rounds):.4g} z under SGD; each canary\'s signal the '
          f'sum of w_t over its rounds, {signals.min():.4g} to '
          f'{signals.max():.4g} (mean {signals.mean():.4g})')
