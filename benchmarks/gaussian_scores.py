"""Simulated Gaussian mechanisms' canary statistics, with known truth.

What `benchmarks.coverage` scores for the Gaussian family (its docstring
derives each law):

* independent noise: the seen canaries' cosines with one Gaussian release
  (`final_model_scores`, exact) and their maxima over rounds of the
  per-round cosine, each inserted in one round (`all_iterates_scores`, the
  d -> infinity law), with unseen canaries drawn from the null;
* DP-FTRL's correlated noise of a strategy C (`strategy_matrix`,
  jax-privacy's BLT or banded strategy; needs .venv-jax): the final model,
  the raw per-round maximum and the decorrelated matched filter
  (`correlated_scores`). No absl flags.
"""

import math

import numpy as np

from one_shot_epe.stats import decorrelation
from one_shot_epe.stats import gaussian_simulation


def final_model_scores(rng: np.random.Generator, dim: int, canaries: int,
                       sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """Seen cosines with one Gaussian release; unseen ones from the exact null.

  Args:
    rng: The simulation's generator.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    sigma: The release's noise std over the canaries' norm.

  Returns:
    (seen, unseen) cosines, [k] each.
  """
  seen = gaussian_simulation.simulate_cosines(dim, canaries, sigma, rng)
  half = (dim - 1) / 2.0
  unseen = 2.0 * rng.beta(half, half, canaries) - 1.0
  return seen, unseen


def all_iterates_scores(rng: np.random.Generator, dim: int, canaries: int,
                        sigma: float,
                        rounds: int) -> tuple[np.ndarray, np.ndarray]:
  """Max-over-rounds cosines, each seen canary inserted once (coverage doc).

  Args:
    rng: The simulation's generator.
    dim: d.
    canaries: k seen and k unseen canaries.
    sigma: The rounds' noise std over the canaries' norm.
    rounds: T.

  Returns:
    (seen, unseen) maxima, [k] each.
  """
  per_round = rng.standard_normal((2 * canaries, rounds))
  per_round[np.arange(canaries), rng.integers(0, rounds, canaries)] += (
      1.0 / sigma)
  maxima = per_round.max(axis=1) / math.sqrt(dim)
  return maxima[:canaries], maxima[canaries:]


def correlated_scores(
    rng: np.random.Generator, dim: int, canaries: int, scale: float,
    strategy: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """Seen and unseen statistics under correlated noise (coverage's doc).

  Args:
    rng: The simulation's generator.
    dim: d.
    canaries: k seen (inserted in round 0) and k unseen.
    scale: s, the std of Z's entries (clip 1).
    strategy: C, lower triangular [T, T].

  Returns:
    {'final', 'all', 'all_decorrelated'}: (seen, unseen) cosines.
  """
  inverse = np.linalg.inv(strategy)
  final_sigma = scale * np.linalg.norm(inverse.sum(axis=0))
  scores = {'final': final_model_scores(rng, dim, canaries, final_sigma)}
  rounds = strategy.shape[0]
  signal = np.zeros((2 * canaries, rounds))
  signal[:canaries, 0] = 1.0
  noise = scale * rng.standard_normal((2 * canaries, rounds)) @ inverse.T
  per_round = (signal + noise) / (scale * np.linalg.norm(inverse, axis=1))
  maxima = per_round.max(axis=1) / math.sqrt(dim)
  scores['all'] = (maxima[:canaries], maxima[canaries:])
  seen, unseen = decorrelation.matched_filter_scores(
      signal + noise, strategy, [range(canaries)] + [[]] * (rounds - 1),
      canaries, scale)
  scores['all_decorrelated'] = (seen / math.sqrt(dim),
                                unseen / math.sqrt(dim))
  return scores


def strategy_matrix(mechanism: str, rounds: int) -> np.ndarray:
  """jax-privacy's C for `rounds` rounds, one participation (needs it).

  Args:
    mechanism: 'blt' or 'banded' (4 bands, at most `rounds`).
    rounds: T.

  Returns:
    C, lower triangular Toeplitz [T, T].
  """
  # Imported here: jax-privacy is installed only in .venv-jax.
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
  bounds = correlated_noise.ParticipationBounds(1, 1)
  strategy = correlated_noise.build_strategy(mechanism, rounds, bounds,
                                             num_bands=min(4, rounds))
  index = np.subtract.outer(np.arange(rounds), np.arange(rounds))
  return np.where(index >= 0, strategy.coefs[np.maximum(index, 0)], 0.0)
