"""A simulated discrete-Gaussian mechanism with known truth (no absl flags).

The distributed discrete Gaussian of TFF's `DistributedDpSumFactory`
(Kairouz et al. 2021) as `benchmarks.coverage --mechanism=discrete_gaussian`
simulates it: every canary c (uniform on the unit sphere, clip 1) is scaled
by gamma = scale * sqrt(d) and stochastically rounded to an integer vector z
(unbiased: each coordinate goes up with probability its fractional part),
the rounded vectors are summed and integer noise with i.i.d. discrete
Gaussian N_Z(0, sigma^2) coordinates is added. No modular wrap-around, no
conditional rounding and no rotation (a rotation leaves uniform canaries
uniform); the noise is one discrete Gaussian, not a sum of n shares.

The auditor's statistic is the paper's cosine of the continuous canary c with
the release (Section 3: Algorithm 2 for the final model, the maximum over
rounds of Algorithm 3 for all iterates). Its truth is exact: inserting z
into a d-dimensional discrete Gaussian is the composition over coordinates of
one-dimensional discrete Gaussian mechanisms of sensitivity |z_i|, whose
privacy loss distributions `dp_accounting.pld` builds exactly
(`DiscreteGaussianPrivacyLoss`, composed with connect-the-dots
discretisation, an upper bound within about 1e-4 of the exact eps here).
Those are the eps of an adversary who knows the rounded z; one who knows
only c, as the cosine does, meets the rounding as extra noise, so the truth
is an upper bound whose gap is the rounding's share of ||z||^2 (about
1 / (6 scale^2)). A cell's truth is that of its seen canary with the largest
||z||^2 over all runs: at sigma >> 1 the eps depends on z through ||z||
alone (to 1e-3: tests/coverage_discrete_gaussian_test.py), so it is the
largest of the canaries', and the audit's mixture over canaries is no less
private than its worst canary.
"""

import math
from collections.abc import Sequence

import numpy as np
from dp_accounting.pld import privacy_loss_distribution

# Noise support [-TAILS * sigma - 1, TAILS * sigma + 1]: mass outside < 1e-31.
TAILS = 12.0
# Loss discretisation of the truth's privacy loss distributions.
DISCRETIZATION = 1e-4


def check_sigma(sigma: float) -> float:
  """sigma, the discrete Gaussian's parameter, as a positive finite float.

  Args:
    sigma: the parameter to check (any real number).

  Returns:
    `sigma` as a float.

  Raises:
    ValueError: naming sigma if it is not positive and finite.
  """
  sigma = float(sigma)
  if not math.isfinite(sigma) or sigma <= 0:
    raise ValueError(f'sigma must be positive and finite; got {sigma}.')
  return sigma


def discrete_gaussian_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
  """The support and probabilities of N_Z(0, sigma^2), truncated at 12 sigma.

  Args:
    sigma: the parameter sigma > 0 (Canonne et al. 2020): P(k) is
      proportional to exp(-k^2 / (2 sigma^2)) on the integers.

  Returns:
    (support, pmf): int64 integers -K..K and their normalised probabilities.
  """
  sigma = check_sigma(sigma)
  bound = int(math.ceil(TAILS * sigma)) + 1
  support = np.arange(-bound, bound + 1, dtype=np.int64)
  weights = np.exp(-support.astype(np.float64) ** 2 / (2.0 * sigma**2))
  return support, weights / weights.sum()


def sample_discrete_gaussian(rng: np.random.Generator, sigma: float,
                             size: int | tuple[int, ...]) -> np.ndarray:
  """Exact i.i.d. draws of N_Z(0, sigma^2) (up to the 1e-31 tail), vectorised.

  Args:
    rng: the generator.
    sigma: the parameter sigma > 0.
    size: the output shape.

  Returns:
    float64 array of integers of shape `size`.
  """
  support, pmf = discrete_gaussian_pmf(sigma)
  cdf = np.cumsum(pmf)
  index = np.searchsorted(cdf, rng.random(size) * cdf[-1], side='right')
  return support[np.minimum(index, support.size - 1)].astype(np.float64)


def stochastic_round(rng: np.random.Generator,
                     values: np.ndarray) -> np.ndarray:
  """Unbiased randomised rounding to integers (TFF's rounding step).

  Args:
    rng: the generator.
    values: real array.

  Returns:
    float64 array of integers z with E[z] = values, |z - values| < 1.
  """
  floor = np.floor(values)
  return floor + (rng.random(values.shape) < values - floor)


def discrete_gaussian_epsilon(sensitivity: Sequence[int] | np.ndarray,
                              sigma: float, delta: float) -> float:
  """Exact eps at delta of inserting integer vector z into N_Z(0, sigma^2 I).

  The privacy loss is the sum over coordinates of independent
  one-dimensional discrete Gaussian losses at sensitivities |z_i|; their
  distributions (`dp_accounting.pld`, connect-the-dots, interval 1e-4) are
  composed, each distinct |z_i| self-composed by its multiplicity.

  Args:
    sensitivity: the integer vector z (any shape; zeros are ignored).
    sigma: the noise parameter sigma > 0.
    delta: in (0, 1).

  Returns:
    The smallest eps with hockey-stick divergence at most delta (an upper
    bound on the exact value, within about 1e-4 relative here).

  Raises:
    ValueError: if z is not integer or all zero, sigma is not positive or
      delta is not in (0, 1).
  """
  sigma = check_sigma(sigma)
  if not 0.0 < delta < 1.0:
    raise ValueError(f'delta must be in (0, 1); got {delta}.')
  values = np.abs(np.asarray(sensitivity, dtype=np.float64)).ravel()
  if not np.all(values == np.round(values)):
    raise ValueError('sensitivity must be an integer vector.')
  values, counts = np.unique(values[values > 0].astype(np.int64),
                             return_counts=True)
  if values.size == 0:
    raise ValueError('sensitivity must have a nonzero coordinate.')
  composed = None
  for value, count in zip(values, counts):
    loss = privacy_loss_distribution.from_discrete_gaussian_mechanism(
        sigma, sensitivity=int(value),
        value_discretization_interval=DISCRETIZATION,
        use_connect_dots=True).self_compose(int(count))
    composed = loss if composed is None else composed.compose(loss)
  return float(composed.get_epsilon_for_delta(delta))


def unit_directions(rng: np.random.Generator, count: int,
                    dim: int) -> np.ndarray:
  """`count` independent rows uniform on the unit sphere S^{dim-1}.

  Args:
    rng: the generator the rows are drawn from.
    count: the number of rows, >= 0.
    dim: the dimension d >= 1.

  Returns:
    float64 [count, dim]: normalised standard Gaussian rows.
  """
  rows = rng.standard_normal((count, dim))
  return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def calibrated_sigma(gaussian_sigma: float, scale: float, dim: int) -> float:
  """sigma making the rounded canary about a Gaussian mechanism's eps.

  E||z||^2 = gamma^2 + sum_i f_i (1 - f_i), about gamma^2 (1 + 1 / (6
  scale^2)) when the fractional parts f_i are spread; sigma is that norm
  times the Gaussian noise multiplier of the cell's (eps, delta). The exact
  truth is computed afterwards from the rounded canaries themselves.

  Args:
    gaussian_sigma: the Gaussian noise multiplier at the cell's (eps, delta).
    scale: gamma / sqrt(d), integer units per coordinate std of a canary.
    dim: d.

  Returns:
    sigma > 0.
  """
  gamma = scale * math.sqrt(dim)
  return gaussian_sigma * gamma * math.sqrt(1.0 + 1.0 / (6.0 * scale**2))


def scores(rng: np.random.Generator, dim: int, canaries: int, scale: float,
           sigma: float, rounds: int) -> dict[str, object]:
  """One simulated run of both threat models (module docstring).

  Args:
    rng: the generator.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    scale: gamma / sqrt(d) > 0.
    sigma: the discrete Gaussian's parameter.
    rounds: T rounds of the all-iterates run (each seen canary in one
      uniformly chosen round).

  Returns:
    {'final': (seen, unseen) cosines, unseen from the exact null of Theorem
    3.1; 'all': (seen, unseen) maxima over rounds of per-round cosines;
    'worst': the seen rounded canary z with the largest ||z||^2}.
  """
  gamma = scale * math.sqrt(dim)
  seen = unit_directions(rng, canaries, dim)
  rounded = stochastic_round(rng, gamma * seen)
  release = rounded.sum(axis=0) + sample_discrete_gaussian(rng, sigma, dim)
  final_seen = seen @ release / np.linalg.norm(release)
  half = (dim - 1) / 2.0
  final_unseen = 2.0 * rng.beta(half, half, canaries) - 1.0
  which = rng.integers(0, rounds, canaries)
  updates = sample_discrete_gaussian(rng, sigma, (rounds, dim))
  for round_index in range(rounds):
    updates[round_index] += rounded[which == round_index].sum(axis=0)
  updates /= np.linalg.norm(updates, axis=1, keepdims=True)
  unseen = unit_directions(rng, canaries, dim)
  norms = np.einsum('ij,ij->i', rounded, rounded)
  return {
      'final': (final_seen, final_unseen),
      'all': ((seen @ updates.T).max(axis=1),
              (unseen @ updates.T).max(axis=1)),
      'worst': rounded[int(np.argmax(norms))],
  }
