"""The final model's view of a canary under the server's optimizer.

The final-model references (the last-iterate heuristic of Steinke et al.,
2025, `dp_fedavg.last_iterate_epsilon`, and its forms under correlated
noise, `correlated_final_model` and `tree_aggregation.final_model_epsilon`)
read the final model as a linear function of the rounds' released updates
u_1..u_T (a linear loss, a fixed clip S). Server SGD moves the model by
-lr sum_t u_t. Heavy-ball momentum beta (TFF's `build_sgdm` and the JAX
engine's sgdm, not Nesterov: a_t = beta a_(t-1) + u_t, theta_t =
theta_(t-1) - lr a_t, a_0 = 0) carries round t's update into the
accumulators of rounds t..T, so

    theta_T = theta_0 - lr sum_t w_t u_t,  w_t = (1 - beta^(T-t+1)) / (1 - beta)

for rounds t = 1..T (`momentum_weights`; w = 1 at beta = 0). A canary of
norm S inserted in rounds R adds S sum_(t in R) w_t along its direction
(its signal, `canary_signals`, in units of S: its presentation count at
beta = 0); the noise along that direction is Gaussian, of std z S ||w||
under independent noise and z S sens(C) ||w^T C^-1|| under a
matrix-factorization mechanism (`correlated_final_model`). The schedule
draws each canary's rounds and the adversary does not know which canary it
faces: the mixture (1/k) sum_i N(mu_i, 1) against N(0, 1), mu_i = signal_i
/ std, whose exact eps is `mixture_epsilon`.
"""

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special

from one_shot_epe import validation
from one_shot_epe.stats import estimation
from one_shot_epe.stats import hockey_stick

__all__ = ['canary_signals', 'mixture_epsilon', 'momentum_weights']


@validation.arguments('rounds', 'momentum')
def momentum_weights(rounds: int, momentum: float) -> np.ndarray:
  """w_t, the weight of round t's update in the final model (module doc).

  Args:
    rounds: T >= 1, the rounds of the final model.
    momentum: beta in [0, 1), the server's heavy-ball momentum (0: SGD).

  Returns:
    float64 [T]: w_t = (1 - beta^(T-t+1)) / (1 - beta) at index t - 1,
    all ones at beta = 0.

  Raises:
    ValueError: if an argument is out of range.
  """
  exponents = np.arange(rounds, 0, -1, dtype=np.float64)
  return (1.0 - momentum**exponents) / (1.0 - momentum)


def canary_signals(schedule: Sequence[ArrayLike], weights: ArrayLike,
                   num_seen: int | None = None) -> np.ndarray:
  """Each seen canary's signal in the final model: sum_(t in R) w_t.

  Args:
    schedule: Entry t lists the distinct seen ids inserted in 0-based round
      t (`canary_spec.CanarySpec.schedule`); entries past the weights' T
      rounds are not in the final model.
    weights: w [T] (`momentum_weights`).
    num_seen: k, the seen canaries (ids 0..k-1); None: the largest id + 1.

  Returns:
    float64 [k], canary j's signal at index j (its presentation count
    when w = 1).

  Raises:
    ValueError: if `weights` is not a 1-D finite array, or an id of the
      schedule is not an integer in [0, k).
  """
  weight = np.asarray(weights, np.float64)
  if weight.ndim != 1 or not np.all(np.isfinite(weight)):
    raise ValueError(f'weights must be a 1-D finite array; got {weights!r}.')
  rounds = [np.asarray(ids).reshape(-1) for ids in
            list(schedule)[:weight.size]]
  ids = np.concatenate([np.zeros(0, np.int64)] +
                       [r for r in rounds if r.size])
  if ids.size and not np.issubdtype(ids.dtype, np.integer):
    raise ValueError(f'the schedule\'s ids must be integers; got {ids.dtype}.')
  ids = ids.astype(np.int64)
  size = int(ids.max(initial=-1)) + 1 if num_seen is None else num_seen
  if ids.size and (ids.min() < 0 or ids.max() >= size):
    raise ValueError(f'the schedule\'s ids must be in [0, {size}); got ids '
                     f'from {ids.min()} to {ids.max()}.')
  when = np.repeat(np.arange(len(rounds)), [r.size for r in rounds])
  return np.bincount(ids, weight[when], minlength=size).astype(np.float64)


def _mixture_log_delta(epsilon: float, scale: float, values: np.ndarray,
                       weights: np.ndarray) -> float:
  """log delta(eps) between Q = sum_i w_i N(s_i, c^2) and P = N(0, c^2).

  Both ways. The privacy loss log q/p (x) = log sum_i w_i exp((2 s_i x -
  s_i^2) / (2 c^2)) increases in x, so the optimal sets are half-lines: Q -
  e^eps P is largest on {x > x1} with loss(x1) = eps, and P - e^eps Q on
  {x < x2} with loss(x2) = -eps, which exists only while -eps > log w_0
  (w_0 the weight of s = 0; the loss tends to it as x -> -infinity). Tail
  masses are taken as logs.
  """
  log_weights = np.log(weights)

  def loss(x: float) -> float:
    return float(special.logsumexp(
        log_weights + (2.0 * values * x - values**2) / (2.0 * scale**2)))

  def root(level: float) -> float:
    lo, hi = -1.0, 1.0
    while loss(lo) > level:
      lo *= 2.0
    while loss(hi) < level:
      hi *= 2.0
    return optimize.brentq(lambda x: loss(x) - level, lo, hi, xtol=1e-12,
                           rtol=1e-14, maxiter=500)

  x1 = root(epsilon)
  forward = hockey_stick.log_diff(
      float(special.logsumexp(log_weights + special.log_ndtr(
          (values - x1) / scale))),
      epsilon + float(special.log_ndtr(-x1 / scale)))
  backward = -math.inf
  zero = values == 0
  floor = log_weights[zero][0] if np.any(zero) else -math.inf
  if -epsilon > floor:
    x2 = root(-epsilon)
    backward = hockey_stick.log_diff(
        float(special.log_ndtr(x2 / scale)),
        epsilon + float(special.logsumexp(log_weights + special.log_ndtr(
            (x2 - values) / scale))))
  return max(forward, backward)


@validation.arguments('delta', scale=validation.Real(0.0, low_open=True))
def mixture_epsilon(signals: ArrayLike, scale: float, delta: float) -> float:
  """Exact eps between (1/k) sum_i N(s_i, c^2) and N(0, c^2) (module doc).

  Args:
    signals: s_i >= 0, each canary's signal (a non-empty 1-D array).
    scale: c > 0, the noise std in the signals' units.
    delta: The delta, in (0, 1).

  Returns:
    The least eps >= 0 at which both hockey-stick divergences are at most
    delta: 0 when every signal is 0, one Gaussian mechanism's eps at noise
    c / s (`estimation.gaussian_epsilon`) when all equal s.

  Raises:
    ValueError: if an argument is out of range or `signals` is not a
      non-empty 1-D array of finite reals >= 0.
  """
  signal = np.asarray(signals, np.float64)
  if (signal.ndim != 1 or not signal.size or
      not np.all(np.isfinite(signal)) or np.any(signal < 0)):
    raise ValueError('signals must be a non-empty 1-D array of finite reals '
                     f'>= 0; got {signals!r}.')
  values, tally = np.unique(signal, return_counts=True)
  if values[-1] == 0:
    return 0.0
  if values.size == 1:
    return estimation.gaussian_epsilon.unchecked(scale / values[0], delta)
  weights = tally.astype(np.float64)
  weights /= weights.sum()
  log_delta = math.log(delta)

  def excess(epsilon: float) -> float:
    return _mixture_log_delta(epsilon, scale, values, weights) - log_delta

  if excess(0.0) <= 0.0:
    return 0.0
  hi = 1.0
  while excess(hi) > 0.0:
    hi *= 2.0
  return optimize.brentq(excess, 0.0, hi, xtol=1e-10, rtol=1e-12, maxiter=500)
