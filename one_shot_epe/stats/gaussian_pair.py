"""The Gaussian-pair lower bound: eps from the fitted Gaussian pair itself.

When the canary's score is Gaussian both when it is inserted, N(m1, s1^2),
and when it is not, N(m0, s0^2), the mechanism's eps at delta is at least
that pair's (post-processing), and the pair's is at least that of mu-GDP at

  mu = (m1 - m0) / max(s0, s1),

the mean shift in units of the larger standard deviation (docs/bounds.md,
"The Gaussian-pair bound"). A one-sided 1 - alpha lower confidence bound
on that mu, carried through `estimation.epsilon_of_gdp`, is a 1 - alpha
lower bound on eps. mu is min(shift / s0, shift / s1); each ratio has its own
bound, valid whenever its standard deviation is the larger one, and the
bound is the smaller of the two (so it holds whichever is larger):

* Final model (`epsilon_lo_known_null`): the null's mean and std are known
  (0 and 1/sqrt(d), Theorem 3.1). shift / s0 has the z bound with the known
  std (exact when s1 <= s0), shift / s1 the noncentral-t bound from the seen
  sample alone (exact for every s1). The cosines' laws are Gaussian only as
  d grows: the final-model report computes it from d = MIN_FINAL_DIM on
  (docs/bounds.md; `benchmarks.final_model_dim` measures it with the truth
  known).
* All iterates (`epsilon_lo_two_sample`): the unseen canaries' scores are
  the null's sample. shift / s_j has the noncentral-t bound of
  (seen mean - unseen mean) / (S_j sqrt(1/k1 + 1/k0)) with sample j's
  std S_j: exact when s0 = s1; when s_j is the larger it overstates the
  mean difference's variance, a Welch-type bound (checked by simulation).

The noncentral-t distribution function is integrated here (Gauss-Hermite
quadrature over whichever of its normal and chi parts spreads less), not
taken from scipy's `nctdtrinc`, which caps the noncentrality at 1e6 and
does not return for t = 1e9 at 1 degree of freedom. numpy/scipy only.
"""

import functools
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.stats import estimation

__all__ = ['MIN_FINAL_DIM', 'epsilon_lo_known_null', 'epsilon_lo_two_sample',
           'mu_lo_known_null', 'mu_lo_two_sample', 'noncentrality_lower']

# The smallest d at which the final-model report gives the bound. Below it
# the cosines' laws are too far from Gaussian: for a canary released as
# c + N(0, sigma^2 I_d), the bound at its population value exceeds the
# cosines' own eps by about 4/d of it, which 1,000 canaries at d = 100
# (48% of runs above the truth at eps = 10) and 100,000 at d = 1,000 (57%)
# expose; at d = 10,000 the excess is 0.04% and 100,000 canaries hold (2%;
# docs/bounds.md, benchmarks.final_model_dim).
MIN_FINAL_DIM = 10_000

_NODES = 80  # Gauss-Hermite nodes of the noncentral-t distribution function.
_POSITIVE = validation.Real(0.0, low_open=True)


@functools.lru_cache(maxsize=1)
def _standard_normal_rule() -> tuple[np.ndarray, np.ndarray]:
  """Nodes and weights of E f(Z), Z ~ N(0, 1) (weights sum to 1)."""
  nodes, weights = special.roots_hermitenorm(_NODES)
  return nodes, weights / math.sqrt(2.0 * math.pi)


def _chi_over_root_df(z: np.ndarray, df: float) -> np.ndarray:
  """sqrt(V / df), V ~ chi^2(df), at its quantile Phi(z) (each tail direct)."""
  squares = np.where(z <= 0.0, stats.chi2.ppf(special.ndtr(z), df),
                     stats.chi2.isf(special.ndtr(-z), df))
  return np.sqrt(squares / df)


def _t_cdf(t: float, df: float, noncentrality: float) -> float:
  """P(T <= t), T = (Z + noncentrality) / sqrt(V / df), by quadrature."""
  nodes, weights = _standard_normal_rule()
  if abs(t) <= math.sqrt(2.0 * df):
    # t sqrt(V / df) spreads less than Z: integrate over V.
    return float(weights @ special.ndtr(
        t * _chi_over_root_df(nodes, df) - noncentrality))
  # Over Z: P(sqrt(V / df) >= a / t) with a = Z + noncentrality.
  ratio = (nodes + noncentrality) / t
  beyond = df * ratio**2
  if t > 0.0:
    inner = np.where(ratio <= 0.0, 1.0, stats.chi2.sf(beyond, df))
  else:
    inner = np.where(ratio >= 0.0, stats.chi2.cdf(beyond, df), 0.0)
  return float(weights @ inner)


@validation.arguments('alpha', t=validation.Real(), df=_POSITIVE)
def noncentrality_lower(t: float, df: float, alpha: float) -> float:
  """1 - alpha lower confidence bound on a noncentral t's noncentrality.

  The root in nc of P(T_df(nc) <= t) = 1 - alpha, which decreases in nc.

  Args:
    t: The observed t statistic.
    df: Its degrees of freedom, > 0.
    alpha: 1 - confidence, in (0, 1).

  Returns:
    The lower bound on the noncentrality.

  Raises:
    ValueError: if an argument is out of range.
  """
  target = 1.0 - alpha

  def excess(noncentrality: float) -> float:
    return _t_cdf(t, df, noncentrality) - target

  # The normal approximation, then a bracket grown around it.
  guess = t - special.ndtri(target) * math.sqrt(1.0 + t * t / (2.0 * df))
  width = 1.0 + abs(t) / math.sqrt(df)
  low, high = guess - width, guess + width
  while excess(low) < 0.0:
    low -= width
    width *= 2.0
  while excess(high) > 0.0:
    high += width
    width *= 2.0
  return optimize.brentq(excess, low, high, xtol=1e-12 * (1.0 + abs(t)),
                         rtol=1e-12, maxiter=500)


def _moments(sample: np.ndarray, name: str) -> tuple[float, float]:
  """Mean and sample std (ddof=1), refusing zero spread."""
  std = float(np.std(sample, ddof=1))
  if not std > 0.0:
    raise ValueError(f'{name} has zero spread; a Gaussian cannot be fit.')
  return float(np.mean(sample)), std


@validation.arguments('seen', 'alpha', null_std=_POSITIVE,
                      null_mean=validation.Real())
def mu_lo_known_null(seen: ArrayLike, *, null_std: float,
                     null_mean: float = 0.0, alpha: float = 0.05) -> float:
  """1 - alpha lower bound on (seen mean - null mean) / max(null std, seen std).

  The smaller of the z bound in null stds (exact when the seen std is at most
  the null's) and the noncentral-t bound in seen stds (exact for any).

  Args:
    seen: The inserted canaries' scores, i.i.d. Gaussian, at least 2.
    null_std: The known std of a score of a canary not inserted, > 0.
    null_mean: Its known mean.
    alpha: 1 - confidence, in (0, 0.5).

  Returns:
    The lower bound on mu (negative when the data show no shift upwards).

  Raises:
    ValueError: if an argument is out of range or `seen` has zero spread.
  """
  mean, std = _moments(seen, 'seen')
  root = math.sqrt(seen.size)
  known = (mean - null_mean) / null_std - special.ndtri(1.0 - alpha) / root
  fitted = noncentrality_lower.unchecked(
      root * (mean - null_mean) / std, seen.size - 1.0, alpha) / root
  return min(known, fitted)


@validation.arguments('seen', 'unseen', 'alpha')
def mu_lo_two_sample(seen: ArrayLike, unseen: ArrayLike, *,
                     alpha: float = 0.05) -> float:
  """1 - alpha lower bound on (seen mean - unseen mean) / max(both stds).

  The smaller of the noncentral-t bounds in each sample's std (module
  docstring: exact for equal stds, Welch-type otherwise).

  Args:
    seen: The inserted canaries' scores, i.i.d. Gaussian, at least 2.
    unseen: The never-inserted canaries' scores, i.i.d. Gaussian, at least 2.
    alpha: 1 - confidence, in (0, 0.5).

  Returns:
    The lower bound on mu (negative when the data show no shift upwards).

  Raises:
    ValueError: if an argument is out of range or a sample has zero spread.
  """
  seen_mean, seen_std = _moments(seen, 'seen')
  unseen_mean, unseen_std = _moments(unseen, 'unseen')
  scale = math.sqrt(1.0 / seen.size + 1.0 / unseen.size)
  shift = seen_mean - unseen_mean
  return min(noncentrality_lower.unchecked(
      shift / (std * scale), size - 1.0, alpha) * scale
             for std, size in ((seen_std, seen.size),
                               (unseen_std, unseen.size)))


@validation.arguments('seen', 'delta', 'alpha',
                      null_std=_POSITIVE, null_mean=validation.Real())
def epsilon_lo_known_null(seen: ArrayLike, *, null_std: float, delta: float,
                          null_mean: float = 0.0,
                          alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps: the Gaussian pair against a known null.

  Holds when the seen scores are i.i.d. Gaussian (any mean and std) and a
  canary not inserted scores N(null_mean, null_std^2) (the final model:
  0 and 1/sqrt(d)); docs/bounds.md.

  Args:
    seen: The inserted canaries' scores, at least 2.
    null_std: The null's known std, > 0.
    delta: The delta of the reported eps, in (0, 1).
    null_mean: The null's known mean.
    alpha: 1 - confidence, in (0, 0.5).

  Returns:
    eps_lo >= 0: mu-GDP's eps at delta of `mu_lo_known_null`.

  Raises:
    ValueError: if an argument is out of range or `seen` has zero spread.
  """
  return estimation.epsilon_of_gdp.unchecked(mu_lo_known_null.unchecked(
      seen, null_std=null_std, null_mean=null_mean, alpha=alpha), delta)


@validation.arguments('seen', 'unseen', 'delta', 'alpha')
def epsilon_lo_two_sample(seen: ArrayLike, unseen: ArrayLike, *,
                          delta: float, alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps: the Gaussian pair, seen against unseen.

  Holds when both samples are i.i.d. Gaussian (any means and stds; exact
  for equal stds, Welch-type otherwise); docs/bounds.md.

  Args:
    seen: The inserted canaries' scores, at least 2.
    unseen: The never-inserted canaries' scores, at least 2.
    delta: The delta of the reported eps, in (0, 1).
    alpha: 1 - confidence, in (0, 0.5).

  Returns:
    eps_lo >= 0: mu-GDP's eps at delta of `mu_lo_two_sample`.

  Raises:
    ValueError: if an argument is out of range or a sample has zero spread.
  """
  return estimation.epsilon_of_gdp.unchecked(
      mu_lo_two_sample.unchecked(seen, unseen, alpha=alpha), delta)
