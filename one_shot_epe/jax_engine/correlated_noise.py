"""DP-FTRL's correlated noise: BLT and banded matrix-factorization strategies.

The matrix-factorization (MF) mechanism privatises the rounds' sums x_1..x_n
(each client's update clipped to S) by releasing C x + Z, where C is a lower
triangular n x n strategy (the encoder) and Z has i.i.d. N(0, sigma^2)
entries; the server then trains on x + C^{-1} Z, i.e. the sum of round t gets
the noise row (C^{-1} Z)_t, whose covariance across rounds is
sigma^2 C^{-1} C^{-T}. With sigma = z S sens(C), sens the largest norm of a
participant's sum of columns of C under the run's participation, the run is
one Gaussian mechanism at noise multiplier z (jax-privacy's
`SingleReleaseTrainingAccountant`; no amplification is claimed). C = I is
DP-FedAvg's independent noise (the paper's Sec. 2 mechanism).

Everything matrix-shaped comes from jax-privacy 2.0 (installed with the
[jax] extra's environment, .venv-jax; not in the TFF environment):

* blt: `matrix_factorization.buffered_toeplitz.optimize` for the run's n
  rounds and participation; its C^{-1} is streamed with a few d-sized
  buffers (one per BLT buffer), so memory does not grow with n.
* banded: the first b Toeplitz coefficients of the optimal max-error strategy
  (`toeplitz.optimal_max_error_strategy_coefs`, Fichtenberger et al. 2023),
  a b-banded Toeplitz C whose C^{-1} is streamed with b buffers
  (`toeplitz.inverse_as_streaming_matrix`).
* the sensitivity: `toeplitz.minsep_sensitivity_squared` (both strategies
  have non-negative, non-increasing Toeplitz coefficients, where that bound
  is exact);
* the noise: `noise_addition.matrix_factorization_privatizer` with C^{-1} as
  its noising matrix (streaming).

Participation (`participation_bounds`): the sensitivity needs a worst case
over the rounds a client may take part in. Shuffled epochs put a client in
at most one round per epoch, but the last round of one epoch and the first of
the next may both hold it: min separation 1, at most `epochs` participations.
Bernoulli and Poisson cohorts may hold a client in every round: min
separation 1, n participations (jax-privacy has no amplified analysis for
these samplers with a BLT; none is claimed here).

Resuming: the noise of round t is a function of (seed, the rounds before
t) only; a resumed run regenerates the streaming state by replaying rounds
0..t-1 of the privatizer from the seed (`NoiseStream.rows`), so nothing beyond the
model is checkpointed.

This module imports jax-privacy at import time: import it only where the
[jax] extra is installed (`available` says whether it is, without importing).
"""

import dataclasses
import functools
import importlib.util
import math
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax_privacy import noise_addition

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.design import run_plan
from jax_privacy.accounting import accountants
from jax_privacy.accounting import analysis
from jax_privacy.matrix_factorization import buffered_toeplitz
from jax_privacy.matrix_factorization import streaming_matrix
from jax_privacy.matrix_factorization import toeplitz

__all__ = ['NoiseStream', 'ParticipationBounds', 'Strategy',
           'accounted_epsilon', 'available', 'build_strategy',
           'canary_column_norm', 'participation_bounds', 'plan_rows',
           'plan_strategy', 'privatizer', 'report_numbers']


def available() -> bool:
  """Whether jax-privacy is installed (without importing it).

  Returns:
    True if the jax_privacy package can be found.
  """
  return importlib.util.find_spec('jax_privacy') is not None


@dataclasses.dataclass(frozen=True)
class ParticipationBounds:
  """The worst case a strategy's sensitivity is computed for.

  min_sep: the least number of rounds between two participations of one
  client (1: consecutive rounds); max_participations: at most this many.
  """
  min_sep: int
  max_participations: int


def participation_bounds(sampling: str, rounds: int,
                         epochs: int) -> ParticipationBounds:
  """The participation worst case of a sampler (module docstring).

  Args:
    sampling: 'shuffle', 'bernoulli' or 'poisson'.
    rounds: n >= 1.
    epochs: shuffled epochs the rounds touch (`dp_fedavg.Participation`).

  Returns:
    min separation 1 and at most `epochs` (shuffle) or n participations.

  Raises:
    ValueError: for another sampling.
  """
  if sampling == 'shuffle':
    return ParticipationBounds(1, min(epochs, rounds))
  if sampling in ('bernoulli', 'poisson'):
    return ParticipationBounds(1, rounds)
  raise ValueError(f'sampling must be shuffle, bernoulli or poisson; got '
                   f'{sampling!r}.')


@dataclasses.dataclass(frozen=True)
class Strategy:
  """A Toeplitz strategy C for n rounds and its sensitivity.

  coefs: float64 [n], C's first column (C[i, j] = coefs[i - j]);
  noising_matrix: C^{-1} as jax-privacy's streaming matrix.
  """
  mechanism: str
  rounds: int
  coefs: np.ndarray
  bounds: ParticipationBounds
  sensitivity: float
  noising_matrix: streaming_matrix.StreamingMatrix


@functools.lru_cache(maxsize=4)
def build_strategy(mechanism: str, rounds: int, bounds: ParticipationBounds,
                   num_bands: int | None = None) -> Strategy:
  """The mechanism's strategy for `rounds` rounds under `bounds`.

  Args:
    mechanism: 'blt' or 'banded'.
    rounds: n >= 1.
    bounds: the participation worst case.
    num_bands: b in [1, n], for 'banded'.

  Returns:
    The strategy, its C^{-1} and its sensitivity (cached: the launcher asks
    twice, for the noise and for the report).

  Raises:
    ValueError: for another mechanism, or num_bands out of range.
  """
  with jax.enable_x64(True):
    if mechanism == 'blt':
      blt = buffered_toeplitz.optimize(
          n=rounds, min_sep=bounds.min_sep,
          max_participations=bounds.max_participations)
      coefs = np.asarray(blt.toeplitz_coefs(rounds), np.float64)
      noising = blt.inverse_as_streaming_matrix()
    elif mechanism == 'banded':
      if num_bands is None or not 1 <= num_bands <= rounds:
        raise ValueError(f'num_bands must be in [1, {rounds}] (the rounds); '
                         f'got {num_bands}.')
      band = np.asarray(toeplitz.optimal_max_error_strategy_coefs(rounds),
                        np.float64)[:num_bands]
      coefs = np.zeros(rounds)
      coefs[:num_bands] = band
      noising = toeplitz.inverse_as_streaming_matrix(
          jnp.asarray(band, jnp.float32))
    else:
      raise ValueError(f'mechanism must be blt or banded; got {mechanism!r}.')
    sensitivity = math.sqrt(float(toeplitz.minsep_sensitivity_squared(
        jnp.asarray(coefs), bounds.min_sep, bounds.max_participations,
        n=rounds)))
  return Strategy(mechanism, rounds, coefs, bounds, sensitivity, noising)


def canary_column_norm(strategy: Strategy, rounds: Sequence[int]) -> float:
  """||sum_{t in rounds} C[:, t]||: a unit canary's shift of C x.

  Args:
    strategy: the strategy C.
    rounds: the (0-based) rounds the canary is inserted in, distinct.

  Returns:
    The norm (sqrt(r) when C = I).
  """
  n = strategy.rounds
  column = np.zeros(n)
  for t in rounds:
    column[t:] += strategy.coefs[:n - t]
  return float(np.linalg.norm(column))


def report_numbers(strategy: Strategy,
                   schedule: Sequence[Sequence[int]]) -> dp_fedavg.CorrelatedNoise:
  """The numbers the core's report needs (`dp_fedavg.CorrelatedNoise`).

  Args:
    strategy: the run's strategy.
    schedule: entry t: the seen canaries inserted in 0-based round t.

  Returns:
    The mechanism, sens(C), the largest seen canary's column norm and C's
    first column (for the final model's noise,
    `correlated_final_model.final_noise_norm`).
  """
  rounds_of: dict[int, list[int]] = {}
  for t, ids in enumerate(schedule):
    for canary in ids:
      rounds_of.setdefault(int(canary), []).append(t)
  norm = max((canary_column_norm(strategy, rounds)
              for rounds in rounds_of.values()), default=1.0)
  return dp_fedavg.CorrelatedNoise(strategy.mechanism, strategy.sensitivity,
                                    norm, strategy.coefs)


def privatizer(strategy: Strategy, noise_multiplier: float, clip: float,
               seed: int) -> optax.GradientTransformation:
  """jax-privacy's streaming MF privatizer at sigma = z S sens(C).

  Its update adds round t's row of C^{-1} Z to the round's sum.

  Args:
    strategy: the strategy C.
    noise_multiplier: z >= 0.
    clip: S > 0, the fixed clip norm.
    seed: the noise seed.

  Returns:
    The privatizer (init with a d-shaped array, then one update per round).
  """
  return noise_addition.matrix_factorization_privatizer(
      strategy.noising_matrix,
      stddev=noise_multiplier * clip * strategy.sensitivity,
      prng_key=jax.random.key(seed), dtype=jnp.float32)


def accounted_epsilon(noise_multiplier: float, delta: float,
                      num_samples: int) -> float:
  """jax-privacy's eps of the run: one release at noise multiplier z.

  `SingleReleaseTrainingAccountant` (un-amplified DP-FTRL) with the PLD
  accountant; the sensitivity is folded into sigma (`privatizer`).

  Args:
    noise_multiplier: z > 0.
    delta: in (0, 1).
    num_samples: the real clients (the accountant's dataset size).

  Returns:
    The eps.
  """
  accountant = analysis.SingleReleaseTrainingAccountant(
      accountants.PldAccountantConfig())
  params = analysis.DpParams(noise_multipliers=noise_multiplier,
                             num_samples=num_samples, delta=delta,
                             batch_size=1)
  return float(accountant.compute_epsilon(1, params))


class NoiseStream:
  """The rounds' rows of a `privatizer`'s noise, for `training.train`.

  `rows(d, first_round)` replays the rounds before `first_round` (a resumed
  run) and then yields one float32 [d] row per round, memory a few d-sized
  buffers whatever the number of rounds.
  """

  def __init__(self, transform: optax.GradientTransformation):
    """Wraps `transform`, jitting its update.

    Args:
      transform: A noise-adding optax transformation (a jax-privacy
        privatizer's); the update of a zero gradient is the round's noise row.
    """
    self._transform = transform
    self._update = jax.jit(transform.update)

  def rows(self, dim: int, first_round: int) -> Iterator[jax.Array]:
    """Rows of rounds first_round, first_round + 1, ... (d = `dim`).

    Args:
      dim: The model dimension d.
      first_round: Rounds to replay and drop first, >= 0 (0 for a fresh run).

    Yields:
      float32 [d] rows without end; the caller takes as many as it needs.
    """
    zeros = jnp.zeros((dim,), jnp.float32)
    state = self._transform.init(zeros)
    for _ in range(first_round):
      _, state = self._update(zeros, state)
    while True:
      row, state = self._update(zeros, state)
      yield row


def plan_strategy(plan: run_plan.RunPlan) -> Strategy:
  """A matrix-factorization run's strategy (its `mechanism_noise` entry).

  Optimised (BLT) or built (banded) for the run's rounds and its sampler's
  participation worst case (`participation_bounds`).

  Args:
    plan: The run: a `mechanisms.MatrixFactorization` mechanism, its rounds
      and its real clients' participation.

  Returns:
    The strategy (`build_strategy`, cached).
  """
  mechanism = plan.mechanism
  participation = plan.client_participation
  bounds = participation_bounds(participation.sampling, plan.total_rounds,
                                participation.epochs)
  return build_strategy(mechanism.strategy, plan.total_rounds, bounds,
                        mechanism.num_bands)


def plan_rows(
    plan: run_plan.RunPlan) -> Callable[[int, int], Iterator[jax.Array]]:
  """A matrix-factorization run's noise rows (its `mechanism_noise` entry).

  The privatizer's key is the plan's seed (a resumed run replays the rounds
  before it, `NoiseStream.rows`); its noise std is z S sens(C) with the
  plan's fixed clip S.

  Args:
    plan: As for `plan_strategy`, with its noise multiplier, clip and seed.

  Returns:
    `NoiseStream(privatizer(...)).rows` of the run's strategy.
  """
  dp = plan.dp
  transform = privatizer(plan_strategy(plan), dp.noise_multiplier, dp.clip,
                         seed=plan.seed)
  return NoiseStream(transform).rows
