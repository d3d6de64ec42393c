"""The best bound a test of each kind can certify: `bound_limits`' oracles.

The setting is `benchmarks.bound_limits`': k seen canaries scoring
N(mu, 1) and k unseen (or the known null) scoring N(0, 1), mu the mu-GDP
parameter of the Gaussian mechanism that is exactly (eps, delta)-DP
(`gaussian_mu`), bounds at 1 - alpha. A threshold t has FPR(t) =
Phi-bar(t) and FNR(t) = Phi(t - mu). An oracle is the bound a test of a
bound's kind certifies when it knows the seen canaries' law: it tests only
the best threshold (or guess count), at the whole level alpha, and its
counts come out at their expected values k FPR(t) and k FNR(t). It pays
for the k canaries, not for searching.

Counts at their expectations are real numbers. The Clopper-Pearson upper
bound of x failures of n at level a is U_a(x, n) = 1 - B^-1(a; n - x,
x + 1), B^-1 the Beta quantile (`clopper_pearson_upper`): the exact bound
at integer x, increasing in x between them (1 for x >= n). E(p, q) =
max(ln(1 - delta - p) - ln q, ln(1 - delta - q) - ln p) is the eps that
rates p (false positives) and q (false negatives) force on any (eps,
delta)-DP mechanism (Kairouz et al., 2015; `threshold_epsilon`).

* `threshold_known_null` (epsilon_lo and epsilon_lo_tight_any, final
  model: FPR exact, FNR bounded): max over t of
  E(FPR(t), U_alpha(k FNR(t), k)).
* `threshold_two_sample` (epsilon_lo, all iterates: both rates bounded,
  each at alpha / 2 as the report's union bound splits it): max over t of
  E(U_{alpha/2}(k FPR(t), k), U_{alpha/2}(k FNR(t), k)).
* `gdp_thresholds` (epsilon_lo_gdp_thresholds): the eps at delta of
  mu-GDP at max over t of Phi-bar^-1(U_{alpha/2}(k FPR)) -
  Phi^-1(U_{alpha/2}(k FNR)), over the t where both bounds are below
  1 - delta.
* `one_run_guesses` (epsilon_one_run, epsilon_one_run_fdp): guessing "in"
  at or above t makes round(k TPR(t) + k FPR(t)) guesses of which
  round(k TPR(t)) are right, among 2k canaries (the p-values need integer
  counts); the largest eps the bound's own test (`one_run.steinke_p_value`
  or `one_run.fdp_excess`) rejects at level alpha with them, max over t.
* `game` (epsilon_lo_tight_any, all iterates: the channel family;
  epsilon_lo_tight_gdp: the mu-GDP family): r guesses of the n = 2k
  canaries, the most confident ones; the MAP guesses of the true pair err
  on a share gbar_mu(r / n) of them (`tight_audit.mean_map_error` of the
  'gdp' family at mu), so u = r gbar_mu(r / n) expected mistakes. The
  game's p-value E_W[P(Bin(r, gbar_theta(1 - W)) <= u)], W ~ Beta(n - r,
  r + 1), with the binomial distribution function continued to real u as
  I_{1 - g}(r - u, u + 1) (`game_p_value`); the largest theta it rejects
  at alpha (as eps for the channel, as mu-GDP's eps for 'gdp'), max over r.
* `gauss_pair_known_null` (epsilon_lo_gauss_pair, final model): the eps of
  mu - z_{1-alpha} / sqrt(k), the mean shift's bound with the null's std
  known; `gauss_pair_two_sample` (all iterates): of
  mu - z_{1-alpha} sqrt(2 / k), the difference of two means of k each.

Every oracle is clamped at 0. The oracle is a number, not a test; where it
is attained (`best_threshold`, `best_guesses`) is the test that
`benchmarks.bound_best_tests` runs on simulated scores. No absl flags.
"""

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy import special
from scipy import stats

from one_shot_epe.stats import estimation
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit

# Thresholds t searched by the threshold oracles (standardized units), and
# by the one-run oracles, whose integer counts make the search slower.
_THRESHOLD_STEP = 0.002
_GUESS_THRESHOLDS = 241
# Guess counts r searched by the game's oracles (geometric, 8 ... n).
_GAME_GUESSES = 80
# Gauss-Legendre nodes (on normal scores within +-_NORMAL_RANGE) of E over W.
_NODES = 96
_NORMAL_RANGE = 8.5


@dataclasses.dataclass(frozen=True)
class Setting:
  """One cell of the benchmark.

  Attributes:
    canaries: k seen canaries (and k unseen).
    mu: The seen scores' mean shift (mu-GDP parameter).
    delta: The delta of every eps.
    alpha: The bounds hold at 1 - alpha.
  """
  canaries: int
  mu: float
  delta: float
  alpha: float


def gaussian_mu(epsilon: float, delta: float) -> float:
  """mu of the Gaussian mechanism that is exactly (eps, delta)-DP.

  Args:
    epsilon: eps > 0.
    delta: delta in (0, 1).

  Returns:
    1 / sigma, sigma from `estimation.gaussian_sigma` (Balle and Wang), so
    that `estimation.epsilon_of_gdp(mu, delta)` is eps.
  """
  return 1.0 / estimation.gaussian_sigma(epsilon, delta)


def clopper_pearson_upper(counts: ArrayLike, trials: int,
                          level: float) -> np.ndarray:
  """U_level(x, n): the Clopper-Pearson upper bound at real counts x.

  Args:
    counts: x in [0, n], any shape (real numbers: expected counts).
    trials: n >= 1.
    level: The bound's error probability, in (0, 1).

  Returns:
    1 - B^-1(level; n - x, x + 1), 1 where x >= n.
  """
  counts = np.asarray(counts, dtype=np.float64)
  rest = np.maximum(trials - counts, np.finfo(np.float64).tiny)
  bound = 1.0 - special.betaincinv(rest, counts + 1.0, level)
  return np.where(counts >= trials, 1.0, bound)


def threshold_epsilon(fpr: ArrayLike, fnr: ArrayLike,
                      delta: float) -> np.ndarray:
  """E(p, q): the eps that rates p (FPR) and q (FNR) force, -inf for none.

  Args:
    fpr: False-positive rates p (or their upper bounds).
    fnr: False-negative rates q (or their upper bounds), broadcast with p.
    delta: delta in (0, 1).

  Returns:
    max(ln(1 - delta - p) - ln q, ln(1 - delta - q) - ln p) elementwise.
  """
  fpr = np.asarray(fpr, dtype=np.float64)
  fnr = np.asarray(fnr, dtype=np.float64)
  with np.errstate(divide='ignore', invalid='ignore'):
    first = np.log(np.maximum(1.0 - delta - fpr, 0.0)) - np.log(fnr)
    second = np.log(np.maximum(1.0 - delta - fnr, 0.0)) - np.log(fpr)
  return np.maximum(np.nan_to_num(first, nan=-np.inf),
                    np.nan_to_num(second, nan=-np.inf))


def _thresholds(mu: float) -> np.ndarray:
  """The threshold grid: from deep in the null to far above the seen mean."""
  return np.arange(-8.0, mu + 8.0, _THRESHOLD_STEP)


def _rates(setting: Setting,
           thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(FPR(t), FNR(t)) of "in iff score >= t"."""
  return (stats.norm.sf(thresholds),
          stats.norm.cdf(thresholds - setting.mu))


def _best(values: np.ndarray) -> float:
  return max(0.0, float(np.max(values, initial=0.0)))


def _known_null_values(setting: Setting,
                       thresholds: np.ndarray) -> np.ndarray:
  """E(FPR(t), U_alpha(k FNR(t), k)) at each t."""
  fpr, fnr = _rates(setting, thresholds)
  k = setting.canaries
  return threshold_epsilon(
      fpr, clopper_pearson_upper(k * fnr, k, setting.alpha), setting.delta)


def _two_sample_values(setting: Setting,
                       thresholds: np.ndarray) -> np.ndarray:
  """E(U_{alpha/2}(k FPR(t), k), U_{alpha/2}(k FNR(t), k)) at each t."""
  fpr, fnr = _rates(setting, thresholds)
  k, level = setting.canaries, setting.alpha / 2.0
  return threshold_epsilon(clopper_pearson_upper(k * fpr, k, level),
                           clopper_pearson_upper(k * fnr, k, level),
                           setting.delta)


def threshold_known_null(setting: Setting) -> float:
  """The threshold test's oracle, FPR known (module docstring).

  Args:
    setting: The cell.

  Returns:
    max_t E(FPR(t), U_alpha(k FNR(t), k)), at least 0.
  """
  return _best(_known_null_values(setting, _thresholds(setting.mu)))


def threshold_two_sample(setting: Setting) -> float:
  """The threshold test's oracle, both rates estimated (module docstring).

  Args:
    setting: The cell.

  Returns:
    max_t E(U_{alpha/2}(k FPR(t), k), U_{alpha/2}(k FNR(t), k)), >= 0.
  """
  return _best(_two_sample_values(setting, _thresholds(setting.mu)))


def gdp_thresholds(setting: Setting) -> float:
  """The one-sided GDP threshold bound's oracle (module docstring).

  Args:
    setting: The cell.

  Returns:
    The eps at delta of the best threshold's mu bound, at least 0.
  """
  fpr, fnr = _rates(setting, _thresholds(setting.mu))
  k, level = setting.canaries, setting.alpha / 2.0
  fpr_up = clopper_pearson_upper(k * fpr, k, level)
  fnr_up = clopper_pearson_upper(k * fnr, k, level)
  counted = np.maximum(fpr_up, fnr_up) < 1.0 - setting.delta
  mus = stats.norm.isf(fpr_up[counted]) - stats.norm.ppf(fnr_up[counted])
  return estimation.epsilon_of_gdp(_best(mus), setting.delta)


def _steinke_rejects(setting: Setting, guesses: int,
                     correct: int) -> Callable[[float], float]:
  return lambda eps: setting.alpha - one_run.steinke_p_value(
      2 * setting.canaries, guesses, correct, eps, setting.delta)


def _fdp_rejects(setting: Setting, guesses: int,
                 correct: int) -> Callable[[float], float]:
  return lambda eps: one_run.fdp_excess(
      2 * setting.canaries, guesses, correct, setting.alpha, eps,
      setting.delta)


_ONE_RUN_TESTS = {'steinke': _steinke_rejects, 'fdp': _fdp_rejects}


def _guess_thresholds(setting: Setting) -> np.ndarray:
  return np.linspace(-3.0, setting.mu + 5.0, _GUESS_THRESHOLDS)


def _one_run_at(setting: Setting, test: str, threshold: float) -> float:
  """The one-run test's bound at t's rounded expected counts."""
  k = setting.canaries
  fpr, fnr = _rates(setting, np.array([threshold]))
  correct = int(round(k * (1.0 - fnr[0])))
  guesses = max(correct, int(round(k * (1.0 - fnr[0]) + k * fpr[0])))
  if correct == 0:
    return 0.0
  # The binomial tail underflows to 0 at large eps: no warning for that.
  with np.errstate(divide='ignore'):
    return one_run.largest_rejected(
        _ONE_RUN_TESTS[test](setting, guesses, correct), 0.0)


def one_run_guesses(setting: Setting, test: str) -> float:
  """The one-run certificates' oracle (module docstring).

  Args:
    setting: The cell.
    test: 'steinke' (epsilon_one_run) or 'fdp' (epsilon_one_run_fdp).

  Returns:
    The largest eps the test rejects at level alpha at the best threshold's
    rounded expected counts, at least 0.
  """
  return max(_one_run_at(setting, test, threshold)
             for threshold in _guess_thresholds(setting))


@functools.lru_cache(maxsize=None)
def _weight_nodes() -> tuple[np.ndarray, np.ndarray]:
  """Normal scores z and weights (phi(z), normalised) of E over W."""
  nodes, weights = np.polynomial.legendre.leggauss(_NODES)
  scores = _NORMAL_RANGE * nodes
  weights = weights * np.exp(-0.5 * scores**2)
  return scores, weights / np.sum(weights)


def _top_fractions(guesses: int,
                   canaries: int) -> tuple[np.ndarray, np.ndarray]:
  """Nodes s = 1 - W, W ~ Beta(n - r, r + 1), and their weights."""
  if guesses >= canaries:
    return np.ones(1), np.ones(1)
  scores, weights = _weight_nodes()
  tail = special.ndtr(-np.abs(scores))
  law = stats.beta(guesses + 1.0, canaries - guesses)
  top = np.where(scores <= 0.0, law.ppf(tail), law.isf(tail))
  return np.clip(top, np.finfo(np.float64).tiny, 1.0), weights


def game_p_value(family: str, theta: float, mistakes: float, guesses: int,
                 canaries: int, delta: float) -> float:
  """The one-run game's p-value at a real number of mistakes.

  Args:
    family: 'channel' or 'gdp' (`tight_audit.mean_map_error`).
    theta: eps ('channel') or mu ('gdp'), >= 0.
    mistakes: u in [0, r], a real number.
    guesses: r in [1, n].
    canaries: n.
    delta: The channel's delta.

  Returns:
    E_W[I_{1 - g}(r - u, u + 1)], g = gbar_theta(1 - W); at integer u
    `tight_audit.tight_p_value`.
  """
  top, weights = _top_fractions(guesses, canaries)
  if mistakes >= guesses:
    return 1.0
  errors = tight_audit.mean_map_error(family, theta, delta, top)
  return float(np.clip(weights @ special.betainc(
      guesses - mistakes, mistakes + 1.0, 1.0 - errors), 0.0, 1.0))


def expected_mistakes(setting: Setting, guesses: int) -> float:
  """u: the true pair's MAP guesses' expected mistakes among r of 2k.

  Args:
    setting: The cell.
    guesses: r in [1, 2k].

  Returns:
    r gbar_mu(r / 2k).
  """
  share = guesses / (2.0 * setting.canaries)
  return guesses * float(tight_audit.mean_map_error(
      'gdp', setting.mu, setting.delta, [share])[0])


def game_bound(setting: Setting, family: str, guesses: int, level: float,
               mistakes: float | None = None) -> float:
  """The largest theta the game rejects at `level` with r guesses, as eps.

  Args:
    setting: The cell (n = 2k canaries).
    family: 'channel' or 'gdp'.
    guesses: r in [1, n].
    level: The test's level.
    mistakes: u; `expected_mistakes` when None.

  Returns:
    theta (the channel's eps) or the eps of mu-GDP at theta ('gdp').
  """
  canaries = 2 * setting.canaries
  if mistakes is None:
    mistakes = expected_mistakes(setting, guesses)
  theta = one_run.largest_rejected(
      lambda value: level - game_p_value(family, value, mistakes, guesses,
                                         canaries, setting.delta), 0.0)
  if family == 'gdp':
    return estimation.epsilon_of_gdp(theta, setting.delta)
  return theta


def _game_guesses(setting: Setting) -> np.ndarray:
  return np.unique(np.round(np.geomspace(
      tight_audit.MIN_GUESSES, 2 * setting.canaries, _GAME_GUESSES))).astype(
          int)


def game(setting: Setting, family: str) -> float:
  """The one-run game's oracle (module docstring).

  Args:
    setting: The cell.
    family: 'channel' (epsilon_lo_tight_any, all iterates) or 'gdp'
      (epsilon_lo_tight_gdp).

  Returns:
    The best r's bound at level alpha, at least 0.
  """
  return max([0.0] + [game_bound(setting, family, guesses, setting.alpha)
                      for guesses in _game_guesses(setting)])


def gauss_pair_known_null(setting: Setting) -> float:
  """The Gaussian-pair oracle against the known null: eps(mu - z / sqrt(k)).

  Args:
    setting: The cell.

  Returns:
    `estimation.epsilon_of_gdp` of mu - z_{1-alpha} / sqrt(k).
  """
  margin = stats.norm.isf(setting.alpha) / math.sqrt(setting.canaries)
  return estimation.epsilon_of_gdp(setting.mu - margin, setting.delta)


def gauss_pair_two_sample(setting: Setting) -> float:
  """The two-sample Gaussian-pair oracle: eps(mu - z sqrt(2 / k)).

  Args:
    setting: The cell.

  Returns:
    `estimation.epsilon_of_gdp` of mu - z_{1-alpha} sqrt(2 / k).
  """
  margin = stats.norm.isf(setting.alpha) * math.sqrt(2.0 / setting.canaries)
  return estimation.epsilon_of_gdp(setting.mu - margin, setting.delta)





_THRESHOLD_VALUES = {'known_null': _known_null_values,
                     'two_sample': _two_sample_values}


def best_threshold(setting: Setting, test: str) -> float:
  """The threshold t where a threshold oracle is attained.

  Args:
    setting: The cell.
    test: 'known_null' (`threshold_known_null`), 'two_sample'
      (`threshold_two_sample`), 'steinke' or 'fdp' (`one_run_guesses`).

  Returns:
    The grid's t of the largest value (the first of equal ones).
  """
  if test in _THRESHOLD_VALUES:
    candidates = _thresholds(setting.mu)
    values = _THRESHOLD_VALUES[test](setting, candidates)
  else:
    candidates = _guess_thresholds(setting)
    values = [_one_run_at(setting, test, t) for t in candidates]
  return float(candidates[int(np.argmax(values))])


def best_guesses(setting: Setting, family: str) -> int:
  """The number of guesses r where `game`'s oracle is attained.

  Args:
    setting: The cell.
    family: 'channel' or 'gdp'.

  Returns:
    The grid's r of the largest bound (the first of equal ones).
  """
  candidates = _game_guesses(setting)
  return int(candidates[int(np.argmax([
      game_bound(setting, family, guesses, setting.alpha)
      for guesses in candidates]))])
