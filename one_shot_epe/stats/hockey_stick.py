"""The hockey-stick divergence between two Gaussians, in log space.

Section 3.2 of Andrew et al., "One-shot Empirical Privacy Estimation for
Federated Learning" (ICLR 2024) compares two Gaussians through the
privacy-loss random variable: N(mu_p, std_p^2) is (eps, delta)-close to
N(mu_q, std_q^2) in one direction iff the hockey-stick divergence
E_eps(P || Q) = sup_S P(S) - e^eps Q(S) is at most delta. This module
evaluates log E_eps (`log_hockey_stick`) from the log-probabilities of the
set where the privacy loss exceeds eps, accurate far into the tails, so
that eps can be searched for delta down to 1e-300 (`estimation`, which
holds the searches). numpy/scipy only; the arguments are the searches'
own, already checked.
"""

import math
from collections.abc import Sequence

from scipy import special

__all__ = ['log_diff', 'log_hockey_stick', 'log_prob_below']


def log_diff(log_a: float, log_b: float) -> float:
  """log(exp(log_a) - exp(log_b)) for log_a >= log_b, without cancellation.

  log(1 - e^x), x = log_b - log_a < 0, is taken as log(-expm1(x)) for
  x > -log 2 and log1p(-e^x) below (Maechler, 2012): for x within an ulp of 0,
  exp(x) rounds to 1 and log1p(-1) would raise a math domain error.

  Args:
    log_a: The log of the larger value.
    log_b: The log of the smaller value (-inf for 0).

  Returns:
    The log of the difference; -inf when log_b >= log_a.
  """
  if log_b == -math.inf:
    return log_a
  if log_b >= log_a:
    return -math.inf
  x = log_b - log_a
  if x > -math.log(2.0):
    return log_a + math.log(-math.expm1(x))
  return log_a + math.log1p(-math.exp(x))


def log_prob_below(z: float) -> float:
  """log P(Z < z) for a standard normal Z, accurate in the lower tail.

  Args:
    z: The point.

  Returns:
    log Phi(z) as a float.
  """
  return float(special.log_ndtr(z))


def _log_prob_above(z: float) -> float:
  return float(special.log_ndtr(-z))


def _log_prob_between(lo: float, hi: float) -> float:
  """log P(lo < Z < hi) for standard normal Z, stable in either tail."""
  if hi <= lo:
    return -math.inf
  if lo >= 0.0:  # Both in the upper tail: difference of survival functions.
    return log_diff(_log_prob_above(lo), _log_prob_above(hi))
  if hi <= 0.0:  # Both in the lower tail: difference of CDFs.
    return log_diff(log_prob_below(hi), log_prob_below(lo))
  return math.log1p(-math.exp(log_prob_below(lo)) -
                    math.exp(_log_prob_above(hi)))


def _log_sum_exp(logs: Sequence[float]) -> float:
  """log(sum(exp(logs))) of a few floats, without scipy's per-call overhead.

  scipy.special.logsumexp costs ~0.1 ms per call, most of the time of an eps
  evaluation; this is the same max-shifted sum in plain floats.
  """
  top = max(logs, default=-math.inf)
  if top == -math.inf:
    return -math.inf
  return top + math.log(math.fsum(math.exp(value - top) for value in logs))


def _log_prob_of_set(intervals: Sequence[tuple[float, float]], mean: float,
                     std: float) -> float:
  """log P(X in union of disjoint intervals) for X ~ N(mean, std^2)."""
  logs = []
  for lo, hi in intervals:
    zlo, zhi = (lo - mean) / std, (hi - mean) / std
    if zlo == -math.inf:
      logs.append(log_prob_below(zhi))
    elif zhi == math.inf:
      logs.append(_log_prob_above(zlo))
    else:
      logs.append(_log_prob_between(zlo, zhi))
  return _log_sum_exp(logs)


def _privacy_loss_superlevel_set(mu_p: float, std_p: float, mu_q: float,
                                 std_q: float,
                                 eps: float) -> list[tuple[float, float]]:
  """Intervals where log p(x) - log q(x) > eps, for p = N(mu_p, std_p^2) etc.

  The privacy loss is the quadratic a x^2 + b x + c with
    a = 1/(2 std_q^2) - 1/(2 std_p^2),
    b = mu_p/std_p^2 - mu_q/std_q^2,
    c = mu_q^2/(2 std_q^2) - mu_p^2/(2 std_p^2) + log(std_q/std_p).
  Its superlevel set is a half-line (a = 0), two tails (a > 0) or an interval
  (a < 0). Roots use the cancellation-free form of the quadratic formula.
  """
  a = 0.5 / std_q**2 - 0.5 / std_p**2
  b = mu_p / std_p**2 - mu_q / std_q**2
  c = (0.5 * mu_q**2 / std_q**2 - 0.5 * mu_p**2 / std_p**2 +
       math.log(std_q / std_p) - eps)
  if a == 0.0:
    if b == 0.0:
      return [(-math.inf, math.inf)] if c > 0 else []
    root = -c / b
    return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
  disc = b * b - 4.0 * a * c
  if disc <= 0.0:  # No sign change: everywhere (a > 0) or nowhere (a < 0).
    return [(-math.inf, math.inf)] if a > 0 else []
  q = -0.5 * (b + math.copysign(math.sqrt(disc), b))
  r1, r2 = sorted((q / a, c / q))
  if a > 0:
    return [(-math.inf, r1), (r2, math.inf)]
  return [(r1, r2)]


def log_hockey_stick(mu_p: float, std_p: float, mu_q: float, std_q: float,
                     eps: float) -> float:
  """log E_eps(P || Q) = log sup_S P(S) - e^eps Q(S) for two Gaussians.

  The supremum is attained on S = {x : log p(x)/q(x) > eps}, on which
  P(S) >= e^eps Q(S) pointwise, so the logarithm of the difference is formed
  from log P(S) and log Q(S) without cancellation.

  Args:
    mu_p: The mean of P.
    std_p: The standard deviation of P, > 0.
    mu_q: The mean of Q.
    std_q: The standard deviation of Q, > 0.
    eps: The epsilon of the divergence.

  Returns:
    log E_eps(P || Q); -inf when the divergence is 0.
  """
  intervals = _privacy_loss_superlevel_set(mu_p, std_p, mu_q, std_q, eps)
  if not intervals:
    return -math.inf
  log_p = _log_prob_of_set(intervals, mu_p, std_p)
  log_q = _log_prob_of_set(intervals, mu_q, std_q)
  return log_diff(log_p, eps + log_q)
