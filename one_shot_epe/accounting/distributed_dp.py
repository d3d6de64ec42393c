"""Distributed DP with secure aggregation: calibration and accounting.

The paper audits DP-FedAvg whose noise is added at the server (Andrew et al.,
ICLR 2024, Sec. 4); production FL often adds it on the clients instead and
sums the clients' discretized, noised updates with secure aggregation, the
distributed discrete Gaussian (DDG) mechanism of Kairouz et al. (2021,
"The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation"), which TFF implements as
`tff.aggregators.DistributedDpSumFactory(mechanism='distributed_dgauss')`.
Each record (client update, or canary) is, in order: randomly rotated
(Walsh-Hadamard with random signs), clipped to L2 norm S, multiplied by the
scale s, stochastically rounded to integers, noised with a local discrete
Gaussian of parameter sigma_l, and reduced modulo 2^b; the modular sum is
centred, divided by s and rotated back.

This module is the framework-free half: the parameters TFF's factory derives
from (z, S, n, d, b) with the same formulas (`calibrate`), and the privacy
accounting of the mechanism. TFF computes no epsilon for it (its query reports
`UnsupportedDpEvent`); here a round is accounted as a Gaussian mechanism of
the summed variance after scaling: the sum of n local discrete Gaussians of
parameter sigma_l is taken as one Gaussian of std sqrt(n) sigma_l, against the
L2 sensitivity after rounding, s times the inflated bound of Kairouz et al.
(Theorem 1 at beta = 0), so the round's noise multiplier is
z_eff = sqrt(n) sigma_l / (s S_inflated). This drops the tau term of their
Theorem 1 (the sum of discrete Gaussians is not exactly one; tau <=
10 sum_{k<n} exp(-2 pi^2 sigma_l^2 k / (k + 1)) is about 1e-8 at sigma_l = 1
and smaller above). It needs at least n shares in every round: with
Bernoulli or Poisson sampling or dropouts a round may have m < n records,
and the TFF engine's server then adds the n - m missing shares
(`tff_engine.distributed_dp_aggregator`), so the accounting holds in every
round and is unchanged for full ones.
The accounted and analytical epsilons of a distributed-DP run are those of
z_eff; the one-shot estimates are of the decoded aggregates themselves.

`DistributedDP(noise='skellam')` swaps the local discrete Gaussian for the
distributed Skellam mechanism of Agarwal, Kairouz and Liu (2021, "The Skellam
Mechanism for Differentially Private Federated Learning"), TFF's
`mechanism='distributed_skellam'`: each share is the difference of two
Poisson(sigma_l^2 / 2) draws (variance sigma_l^2, unrounded sigma_l), and
records are also checked against TFF's L1 bound ceil(Delta_2 min(sqrt(d_pad),
Delta_2)). The shares of n records sum to exactly one Skellam of variance
n sigma_l^2, so z_eff is unchanged. TFF computes no epsilon for it either
(tensorflow_privacy's `DistributedSkellamSumQuery` reports
`UnsupportedDpEvent`); `skellam_epsilon` is the RDP bound of Agarwal et al.
(Theorem 3.5) with which the mechanism's authors account it
(google-research/federated, distributed_dp/accounting_utils.skellam_epsilon),
at TFF's scaled bounds and composed without amplification.
"""

import dataclasses
import math
from typing import Any

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from one_shot_epe import validation
from one_shot_epe.accounting import references

__all__ = ['ACCOUNTING', 'DDP_MAX_BITS', 'DDP_NOISES', 'DistributedDP',
           'DdpCalibration', 'SKELLAM_ACCOUNTING', 'SKELLAM_RDP_ORDERS',
           'calibrate', 'discrete_gaussian_variance',
           'effective_noise_multiplier', 'inflated_l2_bound', 'run_calibration',
           'run_references', 'skellam_epsilon', 'skellam_rdp']

# How a distributed-DP round is accounted (the module docstring says more).
ACCOUNTING = ('Gaussian approximation: the sum of n local discrete Gaussians '
              'of parameter sigma_l as one Gaussian of std sqrt(n) sigma_l, '
              'against the scaled inflated L2 bound (tau term of Kairouz et '
              'al. 2021, Thm 1, dropped); a round of fewer than n records '
              'gets the missing shares from the server; rotation and '
              'discretization are inside the mechanism, decoding is '
              'post-processing')
# How a distributed Skellam run is accounted (the module docstring says more).
SKELLAM_ACCOUNTING = (
    'accounted and analytical eps: Gaussian approximation z_eff = sqrt(n) '
    'sigma_l / (s S_inflated), the n Skellam shares summed to one Skellam of '
    'variance n sigma_l^2 taken as one Gaussian (the leading term of its RDP); '
    'ddp_skellam_epsilon: the Skellam RDP bound of Agarwal, Kairouz and Liu '
    '2021, Thm 3.5, at the scaled L2 and L1 bounds (TFF reports '
    'UnsupportedDpEvent), composed over the rounds a client may join, no '
    'amplification')
# The local noises TFF's DistributedDpSumFactory offers: 'dgauss'
# (mechanism='distributed_dgauss') and 'skellam' ('distributed_skellam').
DDP_NOISES = ('dgauss', 'skellam')
# The RDP orders of the Skellam accounting (those of its authors' code).
SKELLAM_RDP_ORDERS = tuple(range(2, 129)) + (256,)
# TFF's largest bit width: its arithmetic is float32, exact up to 2^24.
DDP_MAX_BITS = 22
# TFF's largest scale (larger ones gain nothing and overflow int32 bounds).
_MAX_SCALE = 1e6
# Integers float32 holds exactly: a scaled norm bound must stay below.
_FLOAT32_EXACT = 2.0 ** 24
# TFF's leeway on the inflated norm bound, for float32 rounding.
_NORM_LEEWAY = 1e-5


@validation.fields(bits=validation.Int(1, DDP_MAX_BITS),
                   modclip_prob=validation.Probability(),
                   noise=validation.Choice(DDP_NOISES))
@dataclasses.dataclass(frozen=True)
class DistributedDP:
  """The secure-aggregation parameters of distributed DP.

  Attributes:
    bits: b, the modulus 2^b of the secure sum, in [1, DDP_MAX_BITS].
    modclip_prob: The target probability that the noised sum wraps around
      the modulus, in (0, 1) (TFF's default 1e-4, about 3.9 stddevs).
    noise: The local noise, 'dgauss' (discrete Gaussian) or 'skellam'
      (Skellam), one of DDP_NOISES.
  """
  bits: int = 16
  modclip_prob: float = 1e-4
  noise: str = 'dgauss'


@dataclasses.dataclass(frozen=True)
class DdpCalibration:
  """A distributed DDG aggregation's parameters, as TFF derives them.

  Attributes:
    padded_dim: The rotated dimension: d rounded up to a power of two.
    scale: s, the discretization scale.
    scaled_l2_bound: s times the inflated L2 bound of a rounded record.
    local_stddev: sigma_l, the local discrete Gaussian's integer parameter
      (tensorflow_privacy's sampler rounds it up), or the local Skellam's
      standard deviation (not rounded).
    records: n, the records whose noise shares make the central noise.
    bits: b of the modulus 2^b.
    noise: 'dgauss' or 'skellam' (`DistributedDP.noise`).
    scaled_l1_bound: Delta_1, TFF's L1 bound of a rounded record,
      ceil(Delta_2 min(sqrt(d_pad), Delta_2)) (the Skellam query checks it).
  """
  padded_dim: int
  scale: float
  scaled_l2_bound: float
  local_stddev: int | float
  records: int
  bits: int
  noise: str = 'dgauss'
  scaled_l1_bound: float = math.inf

  @property
  def noise_multiplier(self) -> float:
    """z_eff = sqrt(n) sigma_l / (s S_inflated), the accounted multiplier."""
    return effective_noise_multiplier(self.local_stddev, self.records,
                                      self.scaled_l2_bound)

  def setting(self) -> dict[str, Any]:
    """The report's setting entries of the mechanism and its accounting.

    Returns:
      'mechanism', the 'ddp_*' parameters of the calibration and
      'ddp_accounting' (`ACCOUNTING`, or `SKELLAM_ACCOUNTING` with the
      Skellam entries for noise='skellam').
    """
    setting = {'mechanism': 'distributed_dp', 'ddp_bits': self.bits,
               'ddp_scale': self.scale, 'ddp_local_stddev': self.local_stddev,
               'ddp_scaled_l2_bound': self.scaled_l2_bound,
               'ddp_noise_shares': self.records,
               'ddp_noise_multiplier': self.noise_multiplier,
               'ddp_accounting': ACCOUNTING}
    if self.noise == 'skellam':
      setting.update(ddp_noise='skellam',
                     ddp_scaled_l1_bound=self.scaled_l1_bound,
                     ddp_accounting=SKELLAM_ACCOUNTING)
    return setting


def _num_stddevs(modclip_prob: float) -> float:
  """k with P(|N(0, 1)| > k) = modclip_prob (TFF's erfcinv)."""
  return math.sqrt(2.0) * float(special.erfcinv(modclip_prob))


def inflated_l2_bound(clip: float, gamma: float, dim: int) -> float:
  """The L2 bound after stochastic rounding to the grid gamma (beta = 0).

  Kairouz et al. (2021), Theorem 1 at beta = 0: S + gamma sqrt(d). Its
  callers pass checked values (`calibrate`).

  Args:
    clip: S, the L2 clip of a record.
    gamma: The rounding grid's step (1 / scale).
    dim: d, the (padded) dimension.

  Returns:
    S + gamma sqrt(d).
  """
  return clip + gamma * math.sqrt(dim)


@validation.arguments('noise_multiplier', 'clip', 'dim',
                      cohort=validation.Real(0.0, low_open=True))
def calibrate(noise_multiplier: float, clip: float, cohort: float, dim: int,
              ddp: DistributedDP) -> DdpCalibration:
  """The DDG parameters of TFF's `DistributedDpSumFactory` (fixed clip).

  The local noise is z S / sqrt(n) before scaling; the scale is TFF's
  heuristic, which fits k stddevs of the noised sum in the 2^b modulus
  (Kairouz et al. 2021, Sec. 4.2), capped at 1e6:
  s = sqrt(2^(2b) - n k^2) / (2 k sqrt(S^2 n^2 / d_pad + n sigma^2)).

  Args:
    noise_multiplier: z >= 0, the central noise over the clip.
    clip: S > 0, the L2 clip of a record.
    cohort: The expected records per round (> 0, canaries included); the
      noise is split into n = max(1, round(cohort)) shares, as TFF's
      integer `expected_clients_per_round`.
    dim: d >= 1, the record's dimension.
    ddp: The modulus and the wrap-around probability.

  Returns:
    The calibration.

  Raises:
    TypeError: if `ddp` is not a `DistributedDP`.
    ValueError: if an argument is out of range; naming `bits` when the modulus cannot hold the sum of n
      records (2^b < n, or 2^(2b) < n k^2, as TFF), or when the scale makes
      the scaled norm bound overflow float32's exact integers.
  """
  records = max(1, round(cohort))
  if not isinstance(ddp, DistributedDP):
    raise TypeError(f'ddp must be a DistributedDP; got {ddp!r}.')
  k = _num_stddevs(ddp.modclip_prob)
  modulus = 2.0 ** ddp.bits
  if modulus < records or modulus ** 2 < records * k ** 2:
    raise ValueError(
        f'bits={ddp.bits} is too small for the sum of {records} records: '
        f'needs 2^bits >= {records} and 2^(2 bits) >= n k^2 = '
        f'{records * k ** 2:.4g} (k = {k:.3g} stddevs for modclip_prob='
        f'{ddp.modclip_prob:g}); raise bits.')
  padded_dim = 2 ** math.ceil(math.log2(dim))
  local = noise_multiplier * clip / math.sqrt(records)
  scale = math.sqrt(modulus ** 2 - records * k ** 2) / (
      2.0 * k * math.sqrt(clip ** 2 * records ** 2 / padded_dim +
                          records * local ** 2))
  scale = min(scale, _MAX_SCALE)
  scaled_l2 = (inflated_l2_bound(clip, 1.0 / scale, padded_dim) +
               _NORM_LEEWAY) * scale
  if scaled_l2 >= _FLOAT32_EXACT:
    raise ValueError(
        f'bits={ddp.bits}: the discretization scale {scale:.4g} makes the '
        f'scaled norm bound {scaled_l2:.4g} overflow float32 integers '
        f'(2^24); lower bits.')
  # TFF's L1 bound: L1 <= sqrt(d) L2 and, for integers, L1 <= L2^2.
  scaled_l1 = math.ceil(scaled_l2 * min(math.sqrt(padded_dim), scaled_l2))
  return DdpCalibration(
      padded_dim=padded_dim, scale=scale, scaled_l2_bound=scaled_l2,
      local_stddev=(local * scale if ddp.noise == 'skellam' else
                    math.ceil(local * scale)),
      records=records, bits=ddp.bits, noise=ddp.noise,
      scaled_l1_bound=float(scaled_l1))


@validation.arguments(local_stddev=validation.Real(0.0),
                      records=validation.Int(1),
                      scaled_l2_bound=validation.Real(0.0, low_open=True))
def effective_noise_multiplier(local_stddev: float, records: int,
                               scaled_l2_bound: float) -> float:
  """z_eff = sqrt(n) sigma_l / Delta: n local shares as one Gaussian.

  Args:
    local_stddev: sigma_l >= 0 of each local discrete Gaussian.
    records: n >= 1 noise shares in the sum.
    scaled_l2_bound: Delta > 0, the L2 sensitivity in the scaled domain.

  Returns:
    The noise multiplier of the Gaussian approximation (see the module).

  Raises:
    ValueError: if an argument is out of range.
  """
  return math.sqrt(records) * local_stddev / scaled_l2_bound


@validation.arguments('sigma')
def discrete_gaussian_variance(sigma: float) -> float:
  """The variance of the discrete Gaussian N_Z(0, sigma^2) on the integers.

  sum_x x^2 exp(-x^2 / (2 sigma^2)) / sum_x exp(-x^2 / (2 sigma^2)), summed
  to 40 sigma (slightly below sigma^2 for small sigma; Canonne et al. 2020).

  Args:
    sigma: The parameter, > 0.

  Returns:
    The variance.

  Raises:
    ValueError: if sigma <= 0.
  """
  x = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2,
                dtype=np.float64)
  weights = np.exp(-x ** 2 / (2.0 * sigma ** 2))
  return float(np.sum(x ** 2 * weights) / np.sum(weights))


def skellam_rdp(calibration: DdpCalibration,
                orders: tuple[int, ...] = SKELLAM_RDP_ORDERS) -> np.ndarray:
  """RDP of one round of the distributed Skellam mechanism, per order.

  Agarwal, Kairouz and Liu (2021), Theorem 3.5, in the scaled integer
  domain: with the summed variance mu = n sigma_l^2 and the record's bounds
  Delta_2, Delta_1,
  eps(a) = a Delta_2^2 / (2 mu)
           + min(((2a - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2),
                 3 Delta_1 / (2 mu)).
  The first term is the Gaussian mechanism's RDP at z_eff. Canary audits
  (Andrew et al., ICLR 2024, Sec. 4) compare against this accounting.

  Args:
    calibration: a Skellam calibration (`calibrate` with noise='skellam').
    orders: integer RDP orders > 1.

  Returns:
    float64 array of eps(a) (inf when there is no noise).

  Raises:
    TypeError: if `calibration` is not a DdpCalibration.
    ValueError: for a discrete Gaussian calibration or an order <= 1.
  """
  if not isinstance(calibration, DdpCalibration):
    raise TypeError(f'calibration must be a DdpCalibration; got '
                    f'{calibration!r}.')
  if calibration.noise != 'skellam':
    raise ValueError('skellam_rdp accounts noise=\'skellam\' calibrations; '
                     f'got noise={calibration.noise!r}.')
  alphas = np.asarray(orders, dtype=np.float64)
  if alphas.size == 0 or np.any(alphas <= 1):
    raise ValueError(f'orders must be > 1; got {orders}.')
  variance = calibration.records * float(calibration.local_stddev) ** 2
  if variance == 0:
    return np.full(alphas.shape, math.inf)
  l2 = calibration.scaled_l2_bound
  l1 = calibration.scaled_l1_bound
  correction = np.minimum(((2 * alphas - 1) * l2**2 + 6 * l1) /
                          (4 * variance**2), 3 * l1 / (2 * variance))
  return alphas * l2**2 / (2 * variance) + correction


@validation.arguments('delta', compositions=validation.Int(1))
def skellam_epsilon(calibration: DdpCalibration, delta: float,
                    compositions: int = 1) -> float:
  """eps at delta of `compositions` rounds of distributed Skellam, by RDP.

  The rounds' `skellam_rdp` is summed and converted with dp_accounting's
  RDP-to-(eps, delta) conversion (no amplification by sampling).

  Args:
    calibration: a Skellam calibration.
    delta: in (0, 1).
    compositions: rounds >= 1 in which a record takes part.

  Returns:
    eps (inf without noise).

  Raises:
    TypeError: if `calibration` is not a DdpCalibration.
    ValueError: if `delta` or `compositions` is out of range, or for a
      discrete Gaussian calibration (`skellam_rdp`).
  """
  rdp = skellam_rdp(calibration) * compositions
  if not np.all(np.isfinite(rdp)):
    return math.inf
  epsilon, _ = rdp_privacy_accountant.compute_epsilon(
      SKELLAM_RDP_ORDERS, rdp, delta)
  return float(epsilon)


def run_calibration(ddp: DistributedDP,
                    facts: references.RunFacts) -> DdpCalibration:
  """The aggregation's parameters for a run's z, clip, cohort and d.

  Args:
    ddp: The secure sum's bits, modular-clip probability and local noise.
    facts: The run's facts; `clip` and `cohort` are needed.

  Returns:
    TFF's calibration of the run (`calibrate`).

  Raises:
    ValueError: if `facts.clip` or `facts.cohort` is None, or as `calibrate`.
  """
  if facts.clip is None or facts.cohort is None:
    raise ValueError('distributed DP needs a fixed clip and the expected '
                     'cohort (RunFacts.clip, RunFacts.cohort).')
  return calibrate(facts.noise_multiplier, facts.clip, facts.cohort,
                   facts.dim, ddp)


def run_references(ddp: DistributedDP,
                   facts: references.RunFacts) -> references.References:
  """A run's references: the Gaussian rules at z_eff, and Skellam's bound.

  Args:
    ddp: The secure sum's parameters.
    facts: The run's facts; `clip` and `cohort` are needed.

  Returns:
    The references at the effective noise multiplier of the summed shares
    (their Gaussian approximation), the calibration's setting with them;
    with Skellam noise the setting adds `ddp_skellam_epsilon`, the RDP bound
    over the rounds a real client may join (Agarwal et al., 2021).
  """
  calibration = run_calibration(ddp, facts)
  found = references.gaussian_references(
      calibration.noise_multiplier,
      dataclasses.replace(facts, round_event=None, round_events=None))
  setting = calibration.setting()
  if calibration.noise == 'skellam':
    participation = facts.participation
    joins = (participation.epochs if participation is not None and
             participation.sampling == 'shuffle' else facts.rounds)
    if joins is not None:
      setting['ddp_skellam_epsilon'] = skellam_epsilon(calibration,
                                                       facts.delta, joins)
  return dataclasses.replace(found, setting=setting)
