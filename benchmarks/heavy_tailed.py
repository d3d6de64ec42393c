"""Simulated mechanisms outside the Gaussian family, with known truth.

`benchmarks.coverage --mechanism=laplace|mixture|student_t|contaminated`
scores a canary by 1 + noise when inserted and by noise when not (one
release), the noise one of `NOISES`:

* 'laplace': Laplace noise;
* 'mixture': a half-half mixture of N(0, s^2) and N(0, (MIXTURE_RATIO s)^2);
* 'student_t': s times a Student t with STUDENT_DF degrees of freedom,
  tails only a little heavier than a Gaussian's;
* 'contaminated': N(0, s^2), but with probability CONTAMINATION from
  N(0, (CONTAMINATION_RATIO s)^2), a Gaussian with a few outliers.

Each is scaled so that the sensitivity-1 mechanism is exactly
(eps, delta)-DP: `laplace_scale` in closed form, the others by bisection
(`noise_scale`) on their exact eps (`noise_epsilon`: the hockey-stick
divergence between the shifted and the unshifted noise, integrated
numerically). The last two are the scores a normality test on 1,000 of
them often passes, on which the bounds of the Gaussian family overshoot
(docs/bounds.md, "The Gaussian family's limit"). `scores` draws the seen
and unseen canaries' scores. No absl flags.
"""

import math

import numpy as np
from scipy import stats

# The noises `scores` draws; each but 'laplace' has `noise_epsilon`.
NOISES = ('laplace', 'mixture', 'student_t', 'contaminated')
# 'mixture': N(0, scale^2) or N(0, (MIXTURE_RATIO scale)^2), each with
# probability 1/2.
MIXTURE_RATIO = 3.0
# 'student_t': scale times a t variable with STUDENT_DF degrees of freedom.
STUDENT_DF = 30.0
# 'contaminated': N(0, scale^2), but with probability CONTAMINATION from
# N(0, (CONTAMINATION_RATIO scale)^2).
CONTAMINATION = 0.02
CONTAMINATION_RATIO = 2.0


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


def _mixture_logpdf(x: np.ndarray, scale: float, ratio: float,
                    weight: float) -> np.ndarray:
  """log density of N(0, scale^2) w.p. 1 - weight, N(0, (ratio scale)^2)."""
  narrow = stats.norm.logpdf(x, scale=scale)
  wide = stats.norm.logpdf(x, scale=ratio * scale)
  if weight == 0.5:
    return np.logaddexp(narrow, wide) - math.log(2.0)
  return np.logaddexp(narrow + math.log1p(-weight), wide + math.log(weight))


def _profile_epsilon(logpdf, step: float, half_width: float,
                     delta: float) -> float:
  """eps at delta of the shift by 1 of a symmetric noise density, on a grid.

  delta(eps) = integral of max(p - e^eps q, 0), p the density shifted by 1
  and q unshifted (the noise is symmetric, so the other direction gives the
  same), by the midpoint rule with `step` over +-`half_width`; eps is the
  root of delta(eps) = delta (bisection to 1e-10).
  """
  grid = np.arange(-half_width, half_width, step)
  p = np.exp(logpdf(grid - 1.0))
  log_q = logpdf(grid)

  def profile(epsilon: float) -> float:
    return float(np.sum(np.maximum(p - np.exp(log_q + epsilon), 0.0)) * step)

  low, high = 0.0, 1.0
  while profile(high) > delta:
    low, high = high, 2.0 * high
  while high - low > 1e-10:
    middle = 0.5 * (low + high)
    low, high = (middle, high) if profile(middle) > delta else (low, middle)
  return high


def mixture_epsilon(scale: float, delta: float,
                    ratio: float = MIXTURE_RATIO, weight: float = 0.5) -> float:
  """Exact eps at delta of the sensitivity-1 mechanism with mixture noise.

  The noise is N(0, scale^2) with probability 1 - weight and N(0, (ratio
  scale)^2) with probability weight. The hockey-stick divergence is
  integrated by the midpoint rule on a grid of step min(scale, 1)/200 over
  +-(14 max(ratio, 1) scale + 2), beyond which the densities are below
  1e-40 (`_profile_epsilon`). With ratio 1 it is the Gaussian mechanism's
  eps.

  Args:
    scale: s > 0, the narrow Gaussian's std.
    delta: delta in (0, 1).
    ratio: The other Gaussian's std over s.
    weight: The other Gaussian's probability, in [0, 1).

  Returns:
    The mechanism's eps at `delta`.
  """
  return _profile_epsilon(
      lambda x: _mixture_logpdf(x, scale, ratio, weight),
      min(scale, 1.0) / 200.0, 14.0 * max(ratio, 1.0) * scale + 2.0, delta)


def student_t_epsilon(scale: float, delta: float,
                      df: float = STUDENT_DF) -> float:
  """Exact eps at delta of the sensitivity-1 mechanism with scaled t noise.

  The shifted t's likelihood ratio is not monotone, so the hockey-stick
  divergence is integrated whole (`_profile_epsilon`: step min(scale, 1)/200
  over +-(scale t_df^-1(1 - 1e-30) + 2), the mass beyond below 1e-30).

  Args:
    scale: s > 0, the t variable's multiplier.
    delta: delta in (0, 1).
    df: Its degrees of freedom (a Gaussian as df grows).

  Returns:
    The mechanism's eps at `delta`.
  """
  return _profile_epsilon(
      lambda x: stats.t.logpdf(x, df, scale=scale), min(scale, 1.0) / 200.0,
      scale * float(stats.t.isf(1e-30, df)) + 2.0, delta)


def noise_epsilon(noise: str, scale: float, delta: float) -> float:
  """Exact eps at delta of the sensitivity-1 mechanism with `noise`.

  Args:
    noise: 'mixture', 'student_t' or 'contaminated'.
    scale: The noise's scale.
    delta: delta in (0, 1).

  Returns:
    The mechanism's eps at `delta`.

  Raises:
    ValueError: for another noise.
  """
  if noise == 'mixture':
    return mixture_epsilon(scale, delta)
  if noise == 'student_t':
    return student_t_epsilon(scale, delta)
  if noise == 'contaminated':
    return mixture_epsilon(scale, delta, ratio=CONTAMINATION_RATIO,
                           weight=CONTAMINATION)
  raise ValueError(f'no numerical eps for noise {noise!r}.')


def noise_scale(noise: str, epsilon: float, delta: float) -> float:
  """The scale whose exact eps at delta is `epsilon` (bisection).

  Args:
    noise: As for `noise_epsilon`.
    epsilon: eps > 0, within what scales in [1e-3, 1e3] give.
    delta: delta in (0, 1).

  Returns:
    The scale of `noise_epsilon`.
  """
  low, high = 1e-3, 1e3  # eps falls as the scale grows.
  for _ in range(60):
    middle = math.sqrt(low * high)
    if noise_epsilon(noise, middle, delta) > epsilon:
      low = middle
    else:
      high = middle
  return math.sqrt(low * high)


def _noise(rng: np.random.Generator, noise: str, size: int,
           scale: float) -> np.ndarray:
  """`size` draws of `noise` at `scale`."""
  if noise == 'laplace':
    return rng.laplace(0.0, scale, size)
  if noise == 'student_t':
    return scale * rng.standard_t(STUDENT_DF, size)
  ratio, weight = ((MIXTURE_RATIO, 0.5) if noise == 'mixture' else
                   (CONTAMINATION_RATIO, CONTAMINATION))
  return scale * rng.standard_normal(size) * np.where(
      rng.random(size) < 1.0 - weight, 1.0, ratio)


def scores(rng: np.random.Generator, mechanism: str, canaries: int,
           scale: float, dim: int) -> tuple[np.ndarray, np.ndarray]:
  """A canary's score: 1 + noise if inserted, noise if not, over sqrt(d).

  Dividing by sqrt(d) keeps the scores inside [-1, 1] without changing any
  bound (all are invariant to scaling the scores).

  Args:
    rng: The simulation's generator.
    mechanism: One of `NOISES`.
    canaries: k seen and k unseen canaries.
    scale: The noise's scale (`laplace_scale`, `noise_scale`).
    dim: d, the divisor's square.

  Returns:
    (seen, unseen) scores, [k] each.
  """
  noise = _noise(rng, mechanism, 2 * canaries, scale)
  noise[:canaries] += 1.0
  scaled = noise / math.sqrt(dim)
  return scaled[:canaries], scaled[canaries:]

