"""Tight one-run lower bounds on epsilon (Xiang et al., 2025, arXiv 2509.08704).

The game: each of n canaries is inserted with probability 1/2, independently;
from the trained model the auditor ranks the canaries by confidence, guesses
in/out for its r most confident ones and makes u mistakes. For a family of
mechanisms indexed by theta, Xiang et al. show that the number of mistakes T
of any mechanism in the family is stochastically no smaller than that of the
family's worst case, for which

  P[T <= u] = E_W[BinCDF(u; r, gbar_theta(W))],  W ~ Beta(n - r, r + 1),

where W is the (n - r)-th of n uniform confidence quantiles (the cut below
the r released guesses) and gbar_theta(w) is the mean error of the optimal
(MAP) guess over the most confident fraction 1 - w of the mixture (P + Q)/2
of the family's pair of output laws, ranked by their likelihood ratio. That
is the p-value of "the mechanism is no more private than theta"; the bound is
the largest theta rejected at level alpha, by bisection (the p-value grows
with theta: a more private mechanism errs more), converted to eps at delta.

When the "out" law is known exactly (the final model's null, Theorem 3.1),
`epsilon_lo_known_null` tests the channel family against it directly: no
unseen canaries and no coin-flip design, the seen scores i.i.d. as epsilon_lo
assumes. Any (eps, delta)-DP mechanism has P(X > t) <= e^eps Q(t) + delta
for its "in" law P and "out" law Q, so the r-th largest of k seen scores
x_(r) rejects eps when P[Bin(k, e^eps Q(x_(r)) + delta) >= r] <= level,
i.e. eps_r = ln(p_r - delta) - ln Q(x_(r)) with p_r the level-quantile of
Beta(r, k - r + 1); r runs over a halving grid k, k/2, ... >= 2
(`known_null_ranks`) at alpha / (grid size), the best kept.

Two families (`FAMILIES`), derivations in docs/bounds.md:

* 'channel': the four-atom (eps, delta) channel, the worst case of every
  (eps, delta)-DP mechanism at the given delta: a fraction delta of the
  mixture is certain (error 0), the rest errs with probability 1/(1 + e^eps),
  so gbar(w) = max(s - delta, 0) / (s (1 + e^eps)) with s = 1 - w.
* 'gdp': mu-Gaussian DP, N(mu/2, 1) against N(-mu/2, 1): the most confident
  fraction s is |x| >= c with s = Phi-bar(c - mu/2) + Phi-bar(c + mu/2) and
  its mean error is Phi-bar(c + mu/2) / s. It holds when the mechanism is
  Gaussian in the canary's direction; eps is that of mu-GDP at delta.

The auditor's guesses use the scores only: "in" at or above the pooled
median of all n scores, "out" below, most confident = farthest from that
median (the MAP rule of a location family symmetric about the midpoint of
its two laws, which the pooled median estimates without labels); equal
distances go highest score first, and among identical scores, which no rule
of the scores can tell apart, the wrong guesses come first: the mistakes are
the most that any order of the ties independent of the labels could give.

The project's design inserts a uniformly random k of its n canaries, not
each by a fair coin. Under it the game's p-value here is max(p(theta), p0),
p0 the exact p-value of "no signal" under that design
(`balanced_null.permutation_p_value`), so a bound above 0 is valid at its
level under the design the project runs when the scores carry no signal; for
a signal the Bernoulli game's p(theta) is used (docs/bounds.md).

The number of guesses r is not chosen on the data: every r of a fixed
halving grid (n, n/2, n/4, ... >= `MIN_GUESSES`) is tested at alpha / (grid
size) and the largest bound kept (union bound). numpy/scipy only.
"""

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import special
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.stats import balanced_null
from one_shot_epe.stats import estimation

__all__ = ['DESIGNS', 'Design', 'FAMILIES', 'Family', 'GUESS_FRACTIONS',
           'MAX_IMBALANCE_SDS', 'MIN_CANARIES', 'MIN_GUESSES',
           'MIN_KNOWN_NULL_RANK', 'QUADRATURE_NODES', 'check_design',
           'epsilon_lo_known_null', 'epsilon_lo_tight', 'guess_grid',
           'known_null_ranks', 'mean_map_error', 'mistakes', 'tight_p_value']

Family = Literal['channel', 'gdp']
FAMILIES = ('channel', 'gdp')
# Both: a uniformly random subset of the observed size was inserted (the
# project's k of 2k; the Bernoulli(1/2) design given its count).
# 'balanced': the p-value is max(p(theta), p0), p0 the exact p-value of no
# signal under that design (module docstring). 'fixed_count': the Bernoulli
# p-value divided by P[Bin(n, 1/2) = seen], which holds exactly at every
# theta (docs/bounds.md) but costs that factor in the level.
Design = Literal['balanced', 'fixed_count']
DESIGNS = ('balanced', 'fixed_count')
# The game needs this many canaries in all, and seen and unseen counts no
# further than this many binomial standard deviations sqrt(n)/2 from n/2.
MIN_CANARIES = 20
MAX_IMBALANCE_SDS = 4.0
# The fractions of the n canaries guessed, fixed before seeing the data (the
# bound pays for the best of them with a union bound). On simulated Gaussian
# mechanisms at eps = 1 to 10 (n = 2000, benchmarks/coverage.py) the 'gdp'
# bound is largest at r = n/2 and the channel's at n/16 to n/4 (it needs
# guesses with almost no mistakes).
GUESS_FRACTIONS = {'channel': (1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32),
                   'gdp': (1 / 2, 1 / 4, 1 / 8)}
# The smallest number of guesses on a grid.
MIN_GUESSES = 8
# The smallest rank of `known_null_ranks`.
MIN_KNOWN_NULL_RANK = 2
# Gauss-Legendre nodes of the expectation over W.
QUADRATURE_NODES = 96
_NORMAL_RANGE = 8.5
# The largest theta searched (eps for 'channel', mu for 'gdp').
_THETA_CEILING = 1e3
_THETA_TOLERANCE = 1e-9
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# The rules of this module's own parameters (validation.arguments).
_FAMILY = validation.Choice(FAMILIES)
_THETA = validation.Real(0.0)


def _gdp_cut(half_mu: float, top: np.ndarray) -> np.ndarray:
  """c >= 0 with Phi-bar(c - a) + Phi-bar(c + a) = s, a = mu/2, s = `top`.

  Newton on log S(c) = log s, kept inside the bracket
  [max(0, a + Phi-bar^-1(s)), a + Phi-bar^-1(s/2)] (S(c) lies between
  Phi-bar(c - a) and 2 Phi-bar(c - a)); a step that leaves it is a bisection.
  """
  log_top = np.log(top)
  lo = np.maximum(0.0, half_mu + special.ndtri(1.0 - top))
  hi = half_mu - special.ndtri(0.5 * top)
  cut = 0.5 * (lo + hi)
  for _ in range(60):
    log_s = np.logaddexp(special.log_ndtr(half_mu - cut),
                         special.log_ndtr(-half_mu - cut))
    error = log_s - log_top
    lo = np.where(error > 0.0, cut, lo)  # S decreases in c.
    hi = np.where(error < 0.0, cut, hi)
    log_density = np.logaddexp(-0.5 * (cut - half_mu)**2,
                               -0.5 * (cut + half_mu)**2) - _LOG_SQRT_2PI
    stepped = cut + error * np.exp(log_s - log_density)
    stepped = np.where((stepped > lo) & (stepped < hi), stepped,
                       0.5 * (lo + hi))
    if np.all(np.abs(stepped - cut) <= 1e-13 * (1.0 + np.abs(cut))):
      return stepped
    cut = stepped
  return cut


def _mean_map_error(family: str, theta: float, delta: float,
                    top: np.ndarray) -> np.ndarray:
  """`mean_map_error` of checked arguments."""
  if family == 'channel':
    return np.maximum(top - delta, 0.0) / (top * (1.0 + math.exp(theta)))
  half_mu = 0.5 * theta
  cut = _gdp_cut(half_mu, top)
  return np.exp(special.log_ndtr(-cut - half_mu) - np.log(top))


@validation.arguments('delta', family=_FAMILY, theta=_THETA)
def mean_map_error(family: str, theta: float, delta: float,
                   top: ArrayLike) -> np.ndarray:
  """gbar: the MAP guess's mean error over the most confident fraction `top`.

  Args:
    family: 'channel' ((eps, delta) four-atom channel, theta = eps) or 'gdp'
      (mu-GDP, theta = mu; delta unused).
    theta: The family's parameter, >= 0.
    delta: The channel's delta, in (0, 1).
    top: s = 1 - w, fractions of the mixture (P + Q)/2 in (0, 1].

  Returns:
    The mean errors, in [0, 1/2], of the shape of `top`.

  Raises:
    ValueError: if an argument is out of range.
  """
  top = np.asarray(top, dtype=np.float64)
  if np.any(~(top > 0.0) | ~(top <= 1.0)):
    raise ValueError('top must be fractions in (0, 1].')
  return _mean_map_error(family, theta, delta, top)


def _quadrature(guesses: int, canaries: int) -> tuple[np.ndarray, np.ndarray]:
  """Nodes s = 1 - W (W ~ Beta(n - r, r + 1)) and weights of E over W.

  Gauss-Legendre on the normal scores z in [-_NORMAL_RANGE, _NORMAL_RANGE] of
  W's probability scale (weights phi(z), renormalised; the mass left out is
  1e-17): smooth where the probability scale is not. Each tail is inverted
  on its own side, s = betaincinv(r + 1, n - r, Phi(z)) below the median and
  1 - betaincinv(n - r, r + 1, Phi(-z)) above, so neither loses digits. All
  guesses (r = n): W = 0, a single node s = 1.
  """
  if guesses >= canaries:
    return np.ones(1), np.ones(1)
  nodes, weights = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
  scores = _NORMAL_RANGE * nodes
  weights = weights * np.exp(-0.5 * scores**2)
  lower = special.ndtr(-np.abs(scores))
  top = np.where(
      scores <= 0.0,
      special.betaincinv(guesses + 1.0, canaries - guesses, lower),
      1.0 - special.betaincinv(canaries - guesses, guesses + 1.0, lower))
  return (np.clip(top, np.finfo(np.float64).tiny, 1.0),
          weights / np.sum(weights))


def _p_value(family: str, theta: float, delta: float, mistakes_made: int,
             guesses: int, nodes: tuple[np.ndarray, np.ndarray]) -> float:
  """E_W[BinCDF(u; r, gbar_theta(W))] on the quadrature `nodes`."""
  top, weights = nodes
  errors = _mean_map_error(family, theta, delta, top)
  return float(np.clip(
      weights @ special.bdtr(mistakes_made, guesses, errors), 0.0, 1.0))


@validation.arguments('delta', canaries=validation.Int(1), family=_FAMILY,
                      theta=_THETA)
def tight_p_value(mistakes_made: int, guesses: int, canaries: int,
                  family: str, theta: float, delta: float) -> float:
  """P[T <= u] of the family's worst case at theta (module docstring).

  Args:
    mistakes_made: u, the mistakes among the r guesses, in [0, r].
    guesses: r, the released guesses, in [1, n].
    canaries: n, the canaries of the game.
    family: 'channel' or 'gdp' (`mean_map_error`).
    theta: eps ('channel') or mu ('gdp'), >= 0.
    delta: The channel's delta, in (0, 1).

  Returns:
    The p-value of "the mechanism is no more private than theta", in [0, 1].

  Raises:
    ValueError: if an argument is out of range.
  """
  # Their ranges depend on each other: checked here, not by the decorator.
  guesses = validation.check_int('guesses', guesses, 1, canaries)
  mistakes_made = validation.check_int('mistakes_made', mistakes_made, 0,
                                       guesses)
  return _p_value(family, theta, delta, mistakes_made, guesses,
                  _quadrature(guesses, canaries))


@validation.arguments(canaries=validation.Int(2 * MIN_GUESSES),
                      family=_FAMILY)
def guess_grid(canaries: int, family: str) -> np.ndarray:
  """The numbers of guesses r tested: n times the family's `GUESS_FRACTIONS`.

  Args:
    canaries: n >= 2 MIN_GUESSES.
    family: 'channel' or 'gdp'.

  Returns:
    Distinct decreasing integers >= MIN_GUESSES (rounded n f).

  Raises:
    ValueError: if an argument is out of range.
  """
  return _guess_grid(canaries, family)


def _guess_grid(canaries: int, family: str) -> np.ndarray:
  grid = np.round(canaries * np.array(GUESS_FRACTIONS[family]))
  grid = np.unique(np.maximum(grid, MIN_GUESSES).astype(np.int64))
  return grid[::-1]


@validation.arguments('seen', 'unseen')
def mistakes(seen: ArrayLike,
             unseen: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  """Cumulative mistakes and "in" guesses of the label-free guesses.

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    unseen: Scores of the canaries never inserted.

  Returns:
    (m, a): m[r - 1] the mistakes and a[r - 1] the "in" guesses among the r
    most confident guesses, r = 1 ... n (a depends on the scores only).

  Raises:
    ValueError: if a set is not a 1-D sample of at least 2 finite numbers.
  """
  return _mistakes(seen, unseen)


def _mistakes(seen: np.ndarray,
              unseen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """`mistakes` of checked samples."""
  scores = np.concatenate([seen, unseen])
  inserted = np.arange(scores.size) < seen.size
  median = np.median(scores)
  guess_in = scores >= median
  wrong = guess_in != inserted
  # Farthest from the median first, then highest score; identical scores
  # with their wrong guesses first (the last key sorts first).
  ranking = np.lexsort((~wrong, -scores, -np.abs(scores - median)))
  return np.cumsum(wrong[ranking]), np.cumsum(guess_in[ranking])


def _largest_rejected(p_value, level: float) -> float:
  """sup{theta >= 0 : p_value(theta) <= level}; p_value increases in theta."""
  if p_value(0.0) > level:
    return 0.0
  low, high = 0.0, 1.0
  while p_value(high) <= level:
    if high >= _THETA_CEILING:
      return high
    low, high = high, 2.0 * high
  return optimize.brentq(lambda theta: p_value(theta) - level, low, high,
                         xtol=_THETA_TOLERANCE)


def check_design(seen_size: int, unseen_size: int) -> None:
  """Refuses score sets that cannot come from a random 1/2 assignment.

  Args:
    seen_size: Inserted canaries.
    unseen_size: Canaries never inserted.

  Raises:
    ValueError: with fewer than MIN_CANARIES canaries, or seen and unseen
      counts more than MAX_IMBALANCE_SDS binomial standard deviations apart
      from n/2.
  """
  total = seen_size + unseen_size
  if total < MIN_CANARIES:
    raise ValueError(f'the one-run game needs at least {MIN_CANARIES} '
                     f'canaries; got {seen_size} seen + {unseen_size} unseen.')
  if abs(seen_size - total / 2.0) > MAX_IMBALANCE_SDS * math.sqrt(total) / 2.0:
    raise ValueError(
        f'{seen_size} seen and {unseen_size} unseen canaries cannot come from '
        'inserting each with probability 1/2 (more than '
        f'{MAX_IMBALANCE_SDS:g} standard deviations from an even split); the '
        'tight one-run bound assumes that design.')


@validation.arguments('seen', 'unseen', 'delta', 'alpha', family=_FAMILY,
                      design=validation.Choice(DESIGNS))
def epsilon_lo_tight(seen: ArrayLike, unseen: ArrayLike, *, delta: float,
                     family: str, alpha: float = 0.05,
                     design: str = 'balanced') -> float:
  """1 - alpha lower bound on eps from the tight one-run audit.

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    unseen: Scores of the canaries never inserted.
    delta: The delta of the reported eps (and of the 'channel' family), in
      (0, 1).
    family: 'channel' (holds for every (eps, delta)-DP mechanism) or 'gdp'
      (holds when the mechanism is Gaussian in the canary's direction).
    alpha: 1 - confidence, in (0, 0.5).
    design: How the seen canaries were chosen, a uniformly random subset of
      the observed size either way: 'balanced' (each r is tested only where
      the exact no-signal p-value `balanced_null.permutation_p_value` is at
      most the level too) or 'fixed_count' (the level is multiplied by
      P[Bin(n, 1/2) = seen]).

  Returns:
    eps_lo >= 0, the best over the guess grid, each r at alpha / (grid size).

  Raises:
    ValueError: if an argument is out of range or the score sets fail
      `check_design`.
  """
  check_design(seen.size, unseen.size)
  canaries = seen.size + unseen.size
  cumulative, guessed_in = _mistakes(seen, unseen)
  grid = _guess_grid(canaries, family)
  level = alpha / grid.size
  if design == 'fixed_count':
    level *= float(stats.binom.pmf(seen.size, canaries, 0.5))
  best = 0.0
  for guesses in grid:
    made = int(cumulative[guesses - 1])
    if design == 'balanced' and balanced_null.permutation_p_value.unchecked(
        made, int(guessed_in[guesses - 1]), int(guesses), seen.size,
        canaries) > level:
      continue
    nodes = _quadrature(int(guesses), canaries)
    best = max(best, _largest_rejected(
        lambda theta, r=int(guesses), u=made, q=nodes: _p_value(
            family, theta, delta, u, r, q), level))
  if family == 'gdp':
    return estimation.epsilon_of_gdp.unchecked(best, delta)
  return best


@validation.arguments(seen_size=validation.Int(1))
def known_null_ranks(seen_size: int) -> np.ndarray:
  """The ranks r tested by `epsilon_lo_known_null`: k, k/2, k/4, ... >= 2.

  Fixed before the scores are seen (halving, rounded); the bound pays for
  the best of them with a union bound.

  Args:
    seen_size: k >= 1, the seen canaries.

  Returns:
    Distinct decreasing integers in [min(k, 2), k].
  """
  return _known_null_ranks(seen_size)


def _known_null_ranks(seen_size: int) -> np.ndarray:
  ranks, rank = [], float(seen_size)
  while round(rank) >= min(seen_size, MIN_KNOWN_NULL_RANK):
    ranks.append(int(round(rank)))
    rank /= 2.0
  return np.unique(ranks)[::-1]


@validation.arguments('seen', 'delta', 'alpha')
def epsilon_lo_known_null(seen: ArrayLike, null_logsf: Callable[
    [np.ndarray], np.ndarray], *, delta: float, alpha: float = 0.05) -> float:
  """1 - alpha lower bound on eps, the channel family against a known null.

  Holds for every (eps, delta)-DP mechanism whose "out" law has the
  log-survival function `null_logsf`, when the seen scores are i.i.d. from
  its "in" law (module docstring; docs/bounds.md).

  Args:
    seen: Scores of the inserted canaries (higher means "inserted").
    null_logsf: log P(out score > t), vectorised over t (for the final
      model, `null_distribution.null_logsf` at the model's dimension).
    delta: The delta of the reported eps, in (0, 1).
    alpha: 1 - confidence, in (0, 0.5).

  Returns:
    eps_lo >= 0, the best over `known_null_ranks`, each at alpha / (number of
    ranks).

  Raises:
    ValueError: if an argument is out of range.
  """
  ranks = _known_null_ranks(seen.size)
  ordered = np.sort(seen)[::-1]
  # P[Bin(k, p) >= r] = I_p(r, k - r + 1): its level-quantile in p.
  rates = special.betaincinv(ranks, seen.size - ranks + 1.0,
                             alpha / ranks.size)
  log_null = np.asarray(null_logsf(ordered[ranks - 1]), np.float64)
  excess = rates - delta
  bounds = np.where(excess > 0.0,
                    np.log(np.maximum(excess, np.finfo(float).tiny)) -
                    log_null, 0.0)
  return float(max(0.0, np.max(bounds)))
