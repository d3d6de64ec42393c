"""CANIFE's cumulative epsilon: per-round noise estimates composed under RDP.

Maddock et al. (2022), Sec. 3.4, Appendix C.1-C.2 and Algorithm 2:

* The theoretical per-round epsilon eps_r of noise multiplier sigma is the RDP
  accountant's epsilon for one Gaussian mechanism, i.e. sampling rate q = 1
  and one step (Appendix C.1); `per_round_epsilon`.
* GetNoise (Algorithm 2, line 6) inverts it: the noise multiplier sigma_hat_r
  whose per-round epsilon equals the measured eps_hat_r at the training delta;
  `noise_from_epsilon`. eps_hat_r is "directly comparable to eps_r", so the
  same map is inverted.
* Each audit's sigma_hat_r stands for the rounds until the next audit
  (line 7), and GetPrivacy (line 10) composes the rounds' Poisson-subsampled
  Gaussian mechanisms with sampling rate q under the RDP accountant (Mironov
  et al. 2019), here `dp_accounting.rdp.RdpAccountant`, giving the cumulative
  eps_hat at the training delta; `cumulative_epsilon`, `canife_epsilon`.

Rounds are 0-based and audits happen before the updates of rounds
0, s, 2s, ... (`audit_rounds`): Algorithm 2 audits when r mod s = 0 and
assigns sigma_hat_r to rounds [r, r + s), which covers every round only when
the count starts at 0.

Edge cases: eps_hat_r = 0 means the attack learnt nothing; sigma_hat_r = inf
and its rounds add no privacy loss. eps_hat_r = inf (perfect separation)
gives sigma_hat_r = 0 and a cumulative eps_hat of inf. GetNoise returns the
least sigma whose eps_r is at most eps_hat_r; below about 3e-3 (at delta =
1/60000, default orders) the accountant's RDP-to-DP conversion jumps from
that floor to 0, and a smaller positive eps_hat_r maps to the sigma of the
jump (about 4.4e4), whose rounds add a negligible privacy loss.
"""

import dataclasses
import math
from collections.abc import Sequence

import dp_accounting
from scipy import optimize

from one_shot_epe import validation

__all__ = ['CanifeEstimate', 'audit_rounds', 'canife_epsilon',
           'cumulative_epsilon', 'noise_from_epsilon', 'per_round_epsilon',
           'rounds_covered']

# Noise multipliers searched by `noise_from_epsilon`: exp(-12) .. exp(30).
_LOG_SIGMA_MIN = -12.0
_LOG_SIGMA_MAX = 30.0


def _accountant(
    orders: Sequence[float] | None) -> dp_accounting.rdp.RdpAccountant:
  return dp_accounting.rdp.RdpAccountant(
      None if orders is None else list(orders))


# A noise multiplier or epsilon that may be infinite (no noise, no privacy).
_UNBOUNDED = validation.Real(0.0, allow_infinite=True)


@validation.arguments('delta', noise_multiplier=_UNBOUNDED)
def per_round_epsilon(noise_multiplier: float, delta: float,
                      orders: Sequence[float] | None = None) -> float:
  """eps_r: RDP epsilon of one unsampled Gaussian mechanism (Appendix C.1).

  Args:
    noise_multiplier: sigma in [0, inf]; 0 gives inf, inf gives 0.
    delta: Target delta in (0, 1).
    orders: RDP orders (default: dp_accounting's).

  Returns:
    eps_r at `delta`.
  """
  return _per_round_epsilon(noise_multiplier, delta, orders)


def _per_round_epsilon(sigma: float, delta: float,
                       orders: Sequence[float] | None) -> float:
  """`per_round_epsilon` of checked arguments."""
  if sigma == 0.0:
    return math.inf
  if math.isinf(sigma):
    return 0.0
  accountant = _accountant(orders)
  accountant.compose(dp_accounting.GaussianDpEvent(sigma))
  return float(accountant.get_epsilon(delta))


@validation.arguments('delta', epsilon=_UNBOUNDED)
def noise_from_epsilon(epsilon: float, delta: float,
                       orders: Sequence[float] | None = None) -> float:
  """GetNoise: the least sigma_hat with per_round_epsilon(sigma_hat) <= epsilon.

  per_round_epsilon decreases in sigma (the RDP of each order does, and so
  does its conversion), continuously except for the jump to 0 at the
  accountant's floor (module docstring), so bisection and then Brent's method
  on log sigma find the crossing: where the map is continuous,
  per_round_epsilon(sigma_hat) = epsilon.

  Args:
    epsilon: A per-round epsilon in [0, inf].
    delta: Its delta, in (0, 1).
    orders: RDP orders (default: dp_accounting's).

  Returns:
    sigma_hat: 0 for epsilon = inf, inf for epsilon = 0.

  Raises:
    ValueError: `epsilon` exceeds the per-round epsilon of the smallest
      noise multiplier searched.
  """
  if math.isinf(epsilon):
    return 0.0
  if epsilon == 0.0:
    return math.inf

  def excess(log_sigma: float) -> float:
    return _per_round_epsilon(math.exp(log_sigma), delta, orders) - epsilon

  if excess(_LOG_SIGMA_MAX) >= 0.0:
    return math.inf
  if excess(_LOG_SIGMA_MIN) <= 0.0:
    raise ValueError(f'epsilon={epsilon!r} exceeds the per-round epsilon of '
                     f'noise multiplier exp({_LOG_SIGMA_MIN}).')
  lo, hi = _LOG_SIGMA_MIN, _LOG_SIGMA_MAX
  # Narrow the bracket geometrically first: Brent then converges in few steps.
  while hi - lo > 1.0:
    mid = 0.5 * (lo + hi)
    if excess(mid) > 0.0:
      lo = mid
    else:
      hi = mid
  return math.exp(optimize.brentq(excess, lo, hi, xtol=1e-13, rtol=1e-13,
                                  maxiter=200))


@validation.arguments('num_rounds', interval=validation.Int(1))
def audit_rounds(num_rounds: int, interval: int) -> list[int]:
  """Rounds audited by Algorithm 2 (0-based): 0, s, 2s, ... below num_rounds.

  Args:
    num_rounds: Training rounds T.
    interval: s, rounds between audits.

  Returns:
    The audited rounds.
  """
  return list(range(0, num_rounds, interval))


@validation.arguments('num_rounds')
def rounds_covered(rounds: Sequence[int], num_rounds: int) -> list[int]:
  """How many training rounds each audit's estimate stands for.

  Audit i at round t_i covers [t_i, t_{i+1}); the last covers [t_last, T).

  Args:
    rounds: The audited rounds.
    num_rounds: Training rounds T.

  Returns:
    The number of rounds each audit covers; they sum to T.

  Raises:
    ValueError: unless the rounds start at 0, increase strictly and lie in
      [0, num_rounds).
  """
  rounds = [validation.check_int('audit round', r, 0) for r in rounds]
  if not rounds or rounds[0] != 0:
    raise ValueError('audit rounds must start at round 0 so that every round '
                     f'has an estimate; got {rounds}.')
  if (any(b <= a for a, b in zip(rounds, rounds[1:])) or
      rounds[-1] >= num_rounds):
    raise ValueError('audit rounds must increase strictly and lie below '
                     f'num_rounds={num_rounds}; got {rounds}.')
  return [b - a for a, b in zip(rounds, rounds[1:] + [num_rounds])]


@validation.arguments('delta', sampling_rate=validation.Real(0.0, 1.0,
                                                            low_open=True))
def cumulative_epsilon(noise_multipliers: Sequence[float],
                       round_counts: Sequence[int], sampling_rate: float,
                       delta: float,
                       orders: Sequence[float] | None = None) -> float:
  """GetPrivacy: RDP composition of Poisson-subsampled Gaussian mechanisms.

  Composes round_counts[i] rounds of PoissonSampledDpEvent(sampling_rate,
  GaussianDpEvent(noise_multipliers[i])) for every i and returns the epsilon
  at `delta`. Infinite noise adds nothing; zero noise gives inf.

  Args:
    noise_multipliers: Each group of rounds' (estimated) noise multiplier.
    round_counts: The rounds of each group.
    sampling_rate: The Poisson sampling rate q.
    delta: Target delta.
    orders: RDP orders (default: dp_accounting's).

  Returns:
    The composed epsilon.

  Raises:
    ValueError: the two sequences differ in length.
  """
  if len(noise_multipliers) != len(round_counts):
    raise ValueError('noise_multipliers and round_counts must have the same '
                     f'length; got {len(noise_multipliers)} and '
                     f'{len(round_counts)}.')
  accountant = _accountant(orders)
  for sigma, count in zip(noise_multipliers, round_counts):
    sigma = _UNBOUNDED('noise multiplier', sigma)
    count = validation.check_int('round count', count, 0)
    if count == 0 or math.isinf(sigma):
      continue
    if sigma == 0.0:
      return math.inf
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(
            sampling_rate, dp_accounting.GaussianDpEvent(sigma)), count)
  return float(accountant.get_epsilon(delta))


@dataclasses.dataclass(frozen=True)
class CanifeEstimate:
  """CANIFE's cumulative estimate and what it is built from.

  Attributes:
    epsilon: eps_hat after all rounds.
    per_round_epsilons: eps_hat_r of each audit.
    noise_multipliers: sigma_hat_r of each audit.
    round_counts: Rounds each audit's estimate stands for.
    cumulative: eps_hat after the rounds covered by audits 0..i, for each i.
  """
  epsilon: float
  per_round_epsilons: tuple[float, ...]
  noise_multipliers: tuple[float, ...]
  round_counts: tuple[int, ...]
  cumulative: tuple[float, ...]


def canife_epsilon(per_round_epsilons: Sequence[float],
                   rounds: Sequence[int], num_rounds: int,
                   sampling_rate: float, delta: float,
                   orders: Sequence[float] | None = None,
                   noise_delta: float | None = None) -> CanifeEstimate:
  """Algorithm 2: eps_hat from the audits' eps_hat_r at the given rounds.

  Args:
    per_round_epsilons: eps_hat_r of each audit, in [0, inf].
    rounds: The (0-based) round of each audit, starting at 0.
    num_rounds: Training rounds T.
    sampling_rate: Client sampling rate q of training.
    delta: The training delta, of GetPrivacy (line 10).
    orders: RDP orders (default: dp_accounting's).
    noise_delta: The delta of GetNoise (line 6). None (default) means
      `delta`, as Algorithm 2 writes GetNoise(eps_hat_r, delta); the other
      reading, the delta = 1/n at which eps_hat_r was measured (Sec. 3.4),
      gives smaller sigma_hat_r and a larger eps_hat.

  Returns:
    eps_hat with the sigma_hat_r it composed.

  Raises:
    ValueError: `per_round_epsilons` and `rounds` differ in length, or the
      rounds are not valid audit rounds (`rounds_covered`).
  """
  if len(per_round_epsilons) != len(rounds):
    raise ValueError('per_round_epsilons and rounds must have the same length; '
                     f'got {len(per_round_epsilons)} and {len(rounds)}.')
  counts = rounds_covered(rounds, num_rounds)
  noise_delta = delta if noise_delta is None else noise_delta
  sigmas = [noise_from_epsilon(eps, noise_delta, orders)
            for eps in per_round_epsilons]
  cumulative = tuple(
      cumulative_epsilon(sigmas[:i + 1], counts[:i + 1], sampling_rate, delta,
                         orders) for i in range(len(sigmas)))
  return CanifeEstimate(
      epsilon=cumulative[-1],
      per_round_epsilons=tuple(float(e) for e in per_round_epsilons),
      noise_multipliers=tuple(sigmas), round_counts=tuple(counts),
      cumulative=cumulative)
