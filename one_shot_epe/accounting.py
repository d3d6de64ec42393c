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
"""

import dataclasses
import math

import dp_accounting

from one_shot_epe import estimation
from one_shot_epe import validation

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
class Participation:
  """How real clients take part in the run (`participation` samplers).

  sampling: 'shuffle' (each client once per epoch of ceil(m / n) rounds),
  'bernoulli' (each client independently with q = n / m per round) or
  'poisson' (a Poisson(n)-sized uniform cohort per round).
  """
  sampling: str
  clients_per_round: float
  num_clients: int
  rounds: int

  def __post_init__(self):
    if self.sampling not in SAMPLINGS:
      raise ValueError(f'sampling must be one of {SAMPLINGS}; got '
                       f'{self.sampling!r}.')
    validation.check_int('num_clients', self.num_clients, 1)
    validation.check_int('rounds', self.rounds, 1)
    validation.check_real('clients_per_round', self.clients_per_round, 0.0,
                          self.num_clients, low_open=True)

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


def composed_gaussian_epsilon(noise_multiplier: float, delta: float,
                              count: int) -> float:
  """Exact eps of `count` compositions of the Gaussian mechanism (sensitivity 1).

  Equal to one Gaussian at noise_multiplier / sqrt(count); infinite at 0 noise.
  """
  noise_multiplier = validation.check_real('noise_multiplier', noise_multiplier,
                                           0.0)
  count = validation.check_int('count', count, 1)
  if noise_multiplier == 0:
    return math.inf
  return estimation.gaussian_epsilon(noise_multiplier / math.sqrt(count), delta)


def canary_epsilon(noise_multiplier: float, delta: float,
                   presentations: int) -> MechanismEpsilon:
  """Analytical eps of one canary presented `presentations` = r times.

  The adversary knows the rounds (footnote 5), so no amplification: an
  r-fold composition of the Gaussian mechanism at noise multiplier z.
  """
  z = validation.check_real('noise_multiplier', noise_multiplier, 0.0)
  presentations = validation.check_int('presentations', presentations, 1)
  return MechanismEpsilon(
      composed_gaussian_epsilon(z, delta, presentations),
      f'a canary presented r = {presentations} time(s) in known rounds: '
      f'{presentations}-fold Gaussian mechanism at noise multiplier {z:g} '
      f'(= one Gaussian at {z / math.sqrt(presentations):.4g}), no '
      'amplification')


def _poisson_sampled_pld_epsilon(noise_multiplier: float, delta: float,
                                 probability: float, rounds: int) -> float:
  """dp_accounting PLD eps of T Poisson-subsampled Gaussian rounds."""
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(
          probability, dp_accounting.GaussianDpEvent(noise_multiplier)),
      rounds)

  def pld_epsilon(interval: float) -> float:
    accountant = dp_accounting.pld.PLDAccountant(
        value_discretization_interval=interval)
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))

  coarse = pld_epsilon(_COARSE_INTERVAL)
  interval = min(_COARSE_INTERVAL,
                 max(_FINEST_INTERVAL, _FINE_RELATIVE_INTERVAL * coarse))
  return coarse if interval == _COARSE_INTERVAL else pld_epsilon(interval)


def client_epsilon(noise_multiplier: float, delta: float,
                   participation: Participation) -> MechanismEpsilon:
  """Accounted eps of one real client over the whole run (see module doc)."""
  z = validation.check_real('noise_multiplier', noise_multiplier, 0.0)
  delta = validation.check_probability('delta', delta)
  if not isinstance(participation, Participation):
    raise TypeError('participation must be an accounting.Participation; got '
                    f'{type(participation).__name__}.')
  if participation.sampling == 'shuffle':
    epochs = participation.epochs
    return MechanismEpsilon(
        composed_gaussian_epsilon(z, delta, epochs),
        f'a real client at most once in each of {epochs} shuffled epoch(s): '
        f'{epochs}-fold Gaussian mechanism at noise multiplier {z:g}, no '
        'amplification by shuffling claimed')
  q, rounds = participation.sampling_probability, participation.rounds
  cohort = ('independent inclusion' if participation.sampling == 'bernoulli'
            else 'Poisson-sized uniform cohort, accounted as independent '
            'inclusion')
  epsilon = (math.inf if z == 0 else
             _poisson_sampled_pld_epsilon(z, delta, q, rounds))
  return MechanismEpsilon(
      epsilon,
      f'a real client, {cohort} at q = {q:.4g} per round: Poisson-subsampled '
      f'Gaussian at noise multiplier {z:g} composed over {rounds} rounds '
      '(dp_accounting PLD)')
