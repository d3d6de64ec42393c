"""Simulation of Algorithm 1 (Section 3): canary cosines, Gaussian mechanism.

Algorithm 1 of the paper audits the Gaussian sum query with k canaries c_j drawn
uniformly from the unit sphere S^{d-1}:

  rho = sum_j c_j + N(0, sigma^2 I_d),     g_j = <c_j, rho> / ||rho||,

and fits a Gaussian to the cosines g_1..g_k (Theorem 3.3 says that
sqrt(d) * mean -> 1/sigma and d * var -> 1). As in Theorem 3.3 the data vectors
x_i are left out of rho: the simulation is the canaries plus the noise.

Two exact samplers of the k cosines are offered behind `simulate_cosines`:

* 'gram' (default): works in the (k+1)-dimensional span of the vectors
  through the Bartlett decomposition of their Gram matrix (see
  `bartlett_factor`). It costs O(k^2) per simulation whatever d is, so the
  paper's Table 2 (d = 10^6, k = 10^3, 150 simulations) takes seconds instead
  of hours.
* 'stream': materialises the d-dimensional vectors, streamed in chunks of
  coordinates so that memory is O(k * chunk_size) whatever d is. It costs
  O(k d) per simulation and serves as the reference implementation.

Canaries are drawn as c_j = u_j / ||u_j|| with u_j ~ N(0, I_d), which is uniform
on the sphere by the rotation invariance of the standard Gaussian. The module
needs numpy only.
"""

import functools
import math

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe import validation
from one_shot_epe.stats import null_distribution

__all__ = ['METHODS', 'bartlett_factor', 'cosines_from_gaussians',
           'default_chunk_size', 'simulate_cosines', 'stream_chunk',
           'stream_chunk_seeds']

METHODS = ('gram', 'stream')

# Default number of float64 values held per chunk by the 'stream' sampler:
# 2^21 values = 16 MiB for the block of canary coordinates.
_STREAM_CHUNK_VALUES = 2**21


def _check_rng(rng) -> np.random.Generator:
  if not isinstance(rng, np.random.Generator):
    raise ValueError(
        f'rng must be a numpy.random.Generator, got {type(rng).__name__}.')
  return rng


@validation.arguments('sigma')
def cosines_from_gaussians(gaussians: ArrayLike, noise: ArrayLike,
                           sigma: float) -> np.ndarray:
  """Algorithm 1, lines 2-8, given the Gaussian vectors behind canaries, noise.

  Canary j is c_j = u_j / ||u_j|| where u_j is row j of `gaussians`, the
  released vector is rho = sum_j c_j + sigma * z with z = `noise`, and the
  result is g_j = <c_j, rho> / ||rho||. The rows may be full d-dimensional
  vectors or their coordinates in any orthonormal basis of a subspace holding
  all of them (for instance the rows of `bartlett_factor`): the cosines depend
  on the vectors only through their inner products, which such coordinates
  preserve.

  Args:
    gaussians: (k, m) array, row j is u_j. No row may be zero.
    noise: (m,) array, the standard Gaussian noise direction z.
    sigma: noise multiplier, > 0.

  Returns:
    The k cosines g_1..g_k as a float64 array.

  Raises:
    ValueError: `sigma` is not a finite number > 0, `gaussians` is not a
      non-empty 2-D array, `noise` does not have shape (m,), a value is not
      finite, or a row of `gaussians` is zero.
  """
  gaussians = np.asarray(gaussians, dtype=np.float64)
  noise = np.asarray(noise, dtype=np.float64)
  if gaussians.ndim != 2 or gaussians.shape[0] < 1 or gaussians.shape[1] < 1:
    raise ValueError('gaussians must be a non-empty 2-D array, got shape '
                     f'{gaussians.shape}.')
  if noise.shape != gaussians.shape[1:]:
    raise ValueError(f'noise must have shape {gaussians.shape[1:]}, got '
                     f'{noise.shape}.')
  if not (np.all(np.isfinite(gaussians)) and np.all(np.isfinite(noise))):
    raise ValueError('gaussians and noise must be finite.')
  norms = np.linalg.norm(gaussians, axis=1)
  if np.any(norms == 0):
    raise ValueError('gaussians must have no zero row.')
  canaries = gaussians / norms[:, np.newaxis]
  rho = canaries.sum(axis=0) + sigma * noise
  return canaries @ rho / np.linalg.norm(rho)


@functools.lru_cache(maxsize=8)
def _strict_lower_indices(rows: int,
                          cols: int) -> tuple[np.ndarray, np.ndarray]:
  """Indices (i, j) with j < i of a rows x cols array (cached, read-only)."""
  indices = np.tril_indices(rows, k=-1, m=cols)
  for index in indices:
    index.flags.writeable = False
  return indices


@validation.arguments('dim', num_vectors=validation.Int(1))
def bartlett_factor(dim: int, num_vectors: int,
                    rng: np.random.Generator) -> np.ndarray:
  """Exact coordinates of `num_vectors` i.i.d. N(0, I_d) vectors in their span.

  Let x_1..x_n (n = `num_vectors`) be i.i.d. N(0, I_d) and m = min(d, n). Apply
  Gram-Schmidt to x_1, x_2, ... in order and let q_1..q_m be the resulting
  orthonormal vectors, so that x_i = sum_{j <= min(i, m)} L_ij q_j.

  * For i <= m: conditional on x_1..x_{i-1}, hence on q_1..q_{i-1}, the vector
    x_i is still N(0, I_d). Its coefficients in any orthonormal basis of R^d
    that starts with q_1..q_{i-1} are i.i.d. N(0, 1) by rotation invariance.
    The first i-1 of them are L_i1..L_i,i-1 ~ N(0, 1); the other d-i+1 make up
    the residual x_i - proj(x_i), whose norm is L_ii ~ sqrt(chi^2_{d-i+1}),
    and q_i is the residual's direction.
  * For i > m (only when d < n): q_1..q_d already span R^d, so the d
    coefficients L_i1..L_id are i.i.d. N(0, 1) and there is no residual.

  None of these conditional laws depends on the vectors conditioned on, so all
  entries of L are independent with the stated laws. For n <= d this is the
  Bartlett decomposition of the Wishart_n(d, I) matrix X^T X = L L^T.

  Since q_1..q_m are orthonormal, row i of L holds the coordinates of x_i in an
  orthonormal basis of span(x_1..x_n): every inner product <x_i, x_j> equals
  <L_i, L_j>. Any statistic of the vectors that depends on them only through
  their inner products therefore has exactly the same law when computed from
  the rows of L, at a cost of O(n m) random numbers instead of O(n d).

  Args:
    dim: the ambient dimension d, >= 1.
    num_vectors: the number n of Gaussian vectors, >= 1.
    rng: source of randomness.

  Returns:
    The (n, min(d, n)) lower-trapezoidal float64 matrix L.
  """
  rng = _check_rng(rng)
  rank = min(dim, num_vectors)
  factor = np.zeros((num_vectors, rank))
  lower = _strict_lower_indices(num_vectors, rank)
  factor[lower] = rng.standard_normal(lower[0].size)
  degrees_of_freedom = dim - np.arange(rank)  # d - i + 1 for i = 1..rank.
  diagonal = np.arange(rank)
  factor[diagonal, diagonal] = np.sqrt(rng.chisquare(degrees_of_freedom))
  return factor


def _gram_cosines(dim: int, num_canaries: int, sigma: float,
                  rng: np.random.Generator) -> np.ndarray:
  """The 'gram' sampler: Algorithm 1 in the span of the k+1 Gaussian vectors.

  The vectors u_1..u_k behind the canaries and the noise direction z are k+1
  i.i.d. N(0, I_d) vectors, and the cosines depend on them only through inner
  products (`cosines_from_gaussians`), so their exact coordinates from
  `bartlett_factor` (rows 1..k for the u_j, row k+1 for z) give cosines with
  exactly the law of Algorithm 1's. Valid for every d >= 1.
  """
  coordinates = bartlett_factor.unchecked(dim, num_canaries + 1, rng)
  return cosines_from_gaussians.unchecked(coordinates[:num_canaries],
                                          coordinates[num_canaries], sigma)


@validation.arguments('dim', 'chunk_size')
def stream_chunk_seeds(
    dim: int, chunk_size: int,
    rng: np.random.Generator) -> list[np.random.SeedSequence]:
  """One seed per chunk of `chunk_size` coordinates for the 'stream' sampler.

  The seeds are spawned from entropy drawn from `rng`, so that each chunk can be
  regenerated identically in both passes of `_stream_cosines`.

  Args:
    dim: Dimension d of the simulated vectors, >= 1.
    chunk_size: Coordinates per chunk, >= 1; the last chunk may be shorter.
    rng: Source of the entropy the seeds are spawned from (four draws).

  Returns:
    ceil(dim / chunk_size) child seeds, one per chunk in coordinate order.

  Raises:
    ValueError: `dim` or `chunk_size` is < 1, or `rng` is not a
      `numpy.random.Generator`.
  """
  rng = _check_rng(rng)
  entropy = [int(word) for word in rng.integers(0, 2**63, size=4)]
  num_chunks = -(-dim // chunk_size)
  return np.random.SeedSequence(entropy).spawn(num_chunks)


@validation.arguments('num_canaries', width=validation.Int(1))
def stream_chunk(
    seed: np.random.SeedSequence,
    num_canaries: int,
    width: int,
    with_noise: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
  """Regenerates one chunk: `width` coordinates of u_1..u_k and of z.

  The canary block is drawn before the noise from the same generator, so a
  call with `with_noise=False` yields the same canary block without drawing z.

  Returns:
    (canary coordinates of shape (k, width), noise coordinates of shape (width,)
    or None when `with_noise` is False).

  Args:
    seed: The chunk's seed from `stream_chunk_seeds`.
    num_canaries: Number k of canaries, >= 1.
    width: Coordinates in this chunk, >= 1.
    with_noise: Whether to also draw the chunk of the noise direction z.

  Raises:
    ValueError: `seed` is not a `numpy.random.SeedSequence`, or
      `num_canaries` or `width` is < 1.
  """
  if not isinstance(seed, np.random.SeedSequence):
    raise ValueError(
        f'seed must be a numpy.random.SeedSequence, got {type(seed).__name__}.')
  generator = np.random.default_rng(seed)
  gaussians = generator.standard_normal((num_canaries, width))
  noise = generator.standard_normal(width) if with_noise else None
  return gaussians, noise


def _stream_cosines(dim: int, num_canaries: int, sigma: float,
                    rng: np.random.Generator, chunk_size: int) -> np.ndarray:
  """The 'stream' sampler: real d-dimensional vectors, chunk by chunk.

  Chunk c holds coordinates [c * chunk_size, (c+1) * chunk_size) of u_1..u_k
  and z and is generated from its own seed, so it can be regenerated exactly:
    pass 1 accumulates ||u_j||^2 over the chunks (canary norms);
    pass 2 forms the chunk of c_j = u_j / ||u_j|| and of
      rho = sum_j c_j + sigma z, and accumulates <c_j, rho> and ||rho||^2.
  Memory is O(k * chunk_size) and time O(k d).
  """
  seeds = stream_chunk_seeds.unchecked(dim, chunk_size, rng)
  widths = [min(chunk_size, dim - c * chunk_size) for c in range(len(seeds))]
  squared_norms = np.zeros(num_canaries)
  for seed, width in zip(seeds, widths):
    gaussians, _ = stream_chunk.unchecked(seed, num_canaries, width,
                                          with_noise=False)
    squared_norms += np.einsum('ij,ij->i', gaussians, gaussians)
  inverse_norms = 1.0 / np.sqrt(squared_norms)
  inner_products = np.zeros(num_canaries)
  rho_squared_norm = 0.0
  for seed, width in zip(seeds, widths):
    gaussians, noise = stream_chunk.unchecked(seed, num_canaries, width)
    canaries = gaussians * inverse_norms[:, np.newaxis]
    rho = canaries.sum(axis=0) + sigma * noise
    inner_products += canaries @ rho
    rho_squared_norm += float(rho @ rho)
  return inner_products / math.sqrt(rho_squared_norm)


@validation.arguments('num_canaries')
def default_chunk_size(num_canaries: int) -> int:
  """Coordinates per chunk keeping a chunk of canaries near 2^21 float64s.

  Args:
    num_canaries: Number k of canaries, >= 1.

  Returns:
    max(1, 2^21 // k) coordinates.

  Raises:
    ValueError: `num_canaries` < 1 (`validation.ArgumentTypeError` if it is not
      an int).
  """
  return max(1, _STREAM_CHUNK_VALUES // num_canaries)


@validation.arguments('num_canaries', 'sigma', dim=null_distribution.DIM,
                      chunk_size=validation.Optional(validation.Int(1)))
def simulate_cosines(dim: int,
                     num_canaries: int,
                     sigma: float,
                     rng: np.random.Generator,
                     method: str = 'gram',
                     chunk_size: int | None = None) -> np.ndarray:
  """Runs Algorithm 1 once (lines 2-8, no data vectors) and returns the cosines.

  Draws k canaries uniformly on S^{d-1}, releases rho = sum_j c_j + N(0,
  sigma^2 I_d) and returns g_j = <c_j, rho> / ||rho|| for j = 1..k. Both methods
  sample exactly this law; they differ in cost (see the module docstring) and
  use `rng` differently, so equal seeds do not give equal outputs across them.

  Args:
    dim: dimension d, >= 3 (the null cosine law of Theorem 3.1 needs d >= 3).
    num_canaries: number k of canaries, >= 1.
    sigma: standard deviation of the Gaussian noise (noise multiplier for
      sensitivity 1), finite and > 0.
    rng: source of randomness.
    method: 'gram' (O(k^2) via `bartlett_factor`) or 'stream' (O(k d),
      materialised vectors).
    chunk_size: coordinates per chunk for 'stream', >= 1; None picks
      `default_chunk_size(num_canaries)`. Must be None for 'gram'.

  Returns:
    float64 array of the k cosines.

  Raises:
    ValueError: `dim` < 3, `num_canaries` < 1, `sigma` not a finite number
      > 0, `rng` not a `numpy.random.Generator`, an unknown `method`, a
      `chunk_size` given with 'gram', or a `chunk_size` < 1.

  Example:
    The Gaussian mechanism at sigma = 1 in d = 10^6 dimensions: the mean
    cosine is about 1 / (sigma sqrt(d)).

    >>> import numpy as np
    >>> from one_shot_epe.stats import estimation, gaussian_simulation
    >>> cosines = gaussian_simulation.simulate_cosines(
    ...     dim=10**6, num_canaries=1000, sigma=1.0,
    ...     rng=np.random.default_rng(0))
    >>> cosines.shape
    (1000,)
    >>> round(float(cosines.mean()) * 1000, 2)
    1.01
  """
  rng = _check_rng(rng)
  if method not in METHODS:
    raise ValueError(f'method must be one of {METHODS}, got {method!r}.')
  if method == 'gram':
    if chunk_size is not None:
      raise ValueError("chunk_size applies to method='stream' only; got "
                       f'{chunk_size!r} with method={method!r}.')
    return _gram_cosines(dim, num_canaries, sigma, rng)
  if chunk_size is None:
    chunk_size = default_chunk_size.unchecked(num_canaries)
  return _stream_cosines(dim, num_canaries, sigma, rng, chunk_size)
