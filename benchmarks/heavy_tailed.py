"""Simulated mechanisms outside the Gaussian family, with known truth.

`benchmarks.coverage --mechanism=laplace|mixture` scores a canary by 1 +
noise when inserted and by noise when not (one release), the noise Laplace
or a half-half mixture of N(0, s^2) and N(0, (MIXTURE_RATIO s)^2), scaled so
that the sensitivity-1 mechanism is exactly (eps, delta)-DP: `laplace_scale`
in closed form, `mixture_scale` by bisection on the mixture's exact eps
(`mixture_epsilon`, the hockey-stick divergence integrated numerically).
`scores` draws the seen and unseen canaries' scores. No absl flags.
"""

import math

import numpy as np
from scipy import stats


# The mixture noise: N(0, scale^2) or N(0, (MIXTURE_RATIO scale)^2), each
# with probability 1/2.
MIXTURE_RATIO = 3.0


def laplace_scale(epsilon: float, delta: float) -> float:
  """b of the sensitivity-1 Laplace mechanism that is exactly (eps, delta)-DP.

  Its privacy profile is delta(eps) = 1 - exp((eps - 1/b) / 2) for eps <=
  1/b, so 1/b = eps - 2 log(1 - delta).

  Args:
    epsilon: eps > 0.
    delta: delta in [0, 1).

  Returns:
    The Laplace scale b.
  """
  return 1.0 / (epsilon - 2.0 * math.log1p(-delta))


def _mixture_logpdf(x: np.ndarray, scale: float, ratio: float) -> np.ndarray:
  wide = ratio * scale
  return np.logaddexp(
      stats.norm.logpdf(x, scale=scale), stats.norm.logpdf(x, scale=wide)
  ) - math.log(2.0)


def mixture_epsilon(scale: float, delta: float,
                    ratio: float = MIXTURE_RATIO) -> float:
  """Exact eps at delta of the sensitivity-1 mechanism with mixture noise.

  delta(eps) = integral of max(p - e^eps q, 0) for p the noise density
  shifted by 1 and q unshifted (the noise is symmetric, so the other
  direction gives the same), by the midpoint rule on a grid of step
  min(scale, 1)/200 over +-(14 ratio scale + 2), beyond which the densities
  are below 1e-40; eps is the root of delta(eps) = delta (bisection, 1e-10).
  With ratio 1 it is the Gaussian mechanism's eps.

  Args:
    scale: s > 0, the narrow Gaussian's std.
    delta: delta in (0, 1).
    ratio: The wide Gaussian's std over s.

  Returns:
    The mechanism's eps at `delta`.
  """
  wide = ratio * scale
  step = min(scale, 1.0) / 200.0
  grid = np.arange(-14.0 * wide - 2.0, 14.0 * wide + 2.0, step)
  log_p = _mixture_logpdf(grid - 1.0, scale, ratio)
  log_q = _mixture_logpdf(grid, scale, ratio)

  def profile(epsilon: float) -> float:
    return float(np.sum(np.maximum(np.exp(log_p) - np.exp(log_q + epsilon),
                                   0.0)) * step)

  low, high = 0.0, 1.0
  while profile(high) > delta:
    low, high = high, 2.0 * high
  while high - low > 1e-10:
    middle = 0.5 * (low + high)
    low, high = (middle, high) if profile(middle) > delta else (low, middle)
  return high


def mixture_scale(epsilon: float, delta: float) -> float:
  """The mixture's scale whose exact eps at delta is `epsilon` (bisection).

  Args:
    epsilon: eps > 0, within what scales in [1e-3, 1e3] give.
    delta: delta in (0, 1).

  Returns:
    The scale s of `mixture_epsilon` (ratio MIXTURE_RATIO).
  """
  low, high = 1e-3, 1e3  # eps falls as the scale grows.
  for _ in range(60):
    middle = math.sqrt(low * high)
    if mixture_epsilon(middle, delta) > epsilon:
      low = middle
    else:
      high = middle
  return math.sqrt(low * high)


def scores(rng: np.random.Generator, mechanism: str, canaries: int,
           scale: float, dim: int) -> tuple[np.ndarray, np.ndarray]:
  """A canary's score: 1 + noise if inserted, noise if not, over sqrt(d).

  The noise is Laplace(scale) or the Gaussian mixture of `scale`; dividing
  by sqrt(d) keeps the scores inside [-1, 1] without changing any bound (all
  are invariant to scaling the scores).

  Args:
    rng: The simulation's generator.
    mechanism: 'laplace' or 'mixture'.
    canaries: k seen and k unseen canaries.
    scale: The noise's scale (`laplace_scale`, `mixture_scale`).
    dim: d, the divisor's square.

  Returns:
    (seen, unseen) scores, [k] each.
  """
  if mechanism == 'laplace':
    noise = rng.laplace(0.0, scale, 2 * canaries)
  else:
    noise = scale * rng.standard_normal(2 * canaries) * np.where(
        rng.random(2 * canaries) < 0.5, 1.0, MIXTURE_RATIO)
  noise[:canaries] += 1.0
  scaled = noise / math.sqrt(dim)
  return scaled[:canaries], scaled[canaries:]
