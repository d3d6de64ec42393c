"""The oracles' own tests, run on simulated scores: what a bound's search costs.

An oracle of `benchmarks.bound_oracles` is attained at one threshold t (or
one number of guesses r of the one-run game). Fixed in advance, at the
whole level alpha, that single test can be run on each simulated run's
scores: what a test of the bound's kind certifies in that run when it knows
where to look (`best_test`). Its mean over runs is the fair yardstick for a
bound that searches (epsilon_lo's 16 thresholds or 24 unseen ranks, the
known-null channel bound's ranks, the game's grid of r, the one-run
certificate's hull vertices), each test at alpha over their number: the
ratio of the bound's mean to it is the cost of the search and its union
bound. Its mean is usually above the oracle: the bound is convex in the
counts (Clopper-Pearson's upper bound of a few misses falls fast as they
get fewer), so it gains more from lucky runs than it loses from unlucky
ones.

The tests, on standardized scores (seen N(mu, 1), unseen N(0, 1)):

* threshold, known null (epsilon_lo and epsilon_lo_tight_any, final
  model): the misses of "in iff z >= t", Clopper-Pearson at alpha, the
  FPR Phi-bar(t) exact, eps = E(FPR, FNR upper bound)
  (`bound_oracles.threshold_epsilon`);
* threshold, two-sample (epsilon_lo, all iterates): the unseen scores at
  or above t and the seen below it, each rate's bound at alpha / 2;
* the one-run game's channel family at r guesses (epsilon_lo_tight_any,
  all iterates): the mistakes of `tight_audit.mistakes`, the game's
  p-value (`bound_oracles.game_bound`);
* Steinke's guesses at or above t (epsilon_one_run): the largest eps whose
  `one_run.steinke_p_value` is at most alpha.

No absl flags.
"""

from collections.abc import Callable

import numpy as np
from scipy import stats

from benchmarks import bound_oracles
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit

# A run's test: (seen, unseen) standardized scores -> its bound.
Test = Callable[[np.ndarray, np.ndarray], float]


def _positive(value: float) -> float:
  return max(0.0, float(value))


def known_null_test(setting: bound_oracles.Setting) -> Test:
  """The threshold test against the known null, at the oracle's t.

  Args:
    setting: The cell.

  Returns:
    The run's test.
  """
  threshold = bound_oracles.best_threshold(setting, 'known_null')
  fpr = stats.norm.sf(threshold)

  def test(seen: np.ndarray, unseen: np.ndarray) -> float:
    del unseen  # The null is known.
    misses = np.count_nonzero(seen < threshold)
    fnr_up = lower_bound.clopper_pearson_upper(misses, setting.canaries,
                                               setting.alpha)
    return _positive(bound_oracles.threshold_epsilon(fpr, fnr_up,
                                                     setting.delta))

  return test


def two_sample_test(setting: bound_oracles.Setting) -> Test:
  """The threshold test of seen against unseen scores, at the oracle's t.

  Args:
    setting: The cell.

  Returns:
    The run's test.
  """
  threshold = bound_oracles.best_threshold(setting, 'two_sample')
  k, level = setting.canaries, setting.alpha / 2.0

  def test(seen: np.ndarray, unseen: np.ndarray) -> float:
    alarms = np.count_nonzero(unseen >= threshold)
    misses = np.count_nonzero(seen < threshold)
    return _positive(bound_oracles.threshold_epsilon(
        lower_bound.clopper_pearson_upper(alarms, k, level),
        lower_bound.clopper_pearson_upper(misses, k, level),
        setting.delta))

  return test


def game_test(setting: bound_oracles.Setting) -> Test:
  """The one-run game's channel family at the oracle's r.

  Args:
    setting: The cell.

  Returns:
    The run's test.
  """
  guesses = bound_oracles.best_guesses(setting, 'channel')

  def test(seen: np.ndarray, unseen: np.ndarray) -> float:
    mistakes, _ = tight_audit.mistakes(seen, unseen)
    return bound_oracles.game_bound(setting, 'channel', guesses,
                                    setting.alpha,
                                    float(mistakes[guesses - 1]))

  return test


def steinke_test(setting: bound_oracles.Setting) -> Test:
  """Steinke, Nasr and Jagielski's guesses at the oracle's threshold.

  Args:
    setting: The cell.

  Returns:
    The run's test.
  """
  threshold = bound_oracles.best_threshold(setting, 'steinke')
  canaries = 2 * setting.canaries

  def test(seen: np.ndarray, unseen: np.ndarray) -> float:
    correct = int(np.count_nonzero(seen >= threshold))
    guesses = correct + int(np.count_nonzero(unseen >= threshold))
    if correct == 0:
      return 0.0
    # The binomial tail underflows to 0 at large eps: no warning for that.
    with np.errstate(divide='ignore'):
      return one_run.largest_rejected(
          lambda eps: setting.alpha - one_run.steinke_p_value(
              canaries, guesses, correct, eps, setting.delta), 0.0)

  return test


# The any-mechanism bounds' best tests, by (report field, threat model).
_BEST_TESTS = {
    ('epsilon_lo', 'final'): known_null_test,
    ('epsilon_lo_tight_any', 'final'): known_null_test,
    ('epsilon_lo', 'all'): two_sample_test,
    ('epsilon_lo_tight_any', 'all'): game_test,
    ('epsilon_one_run', 'both'): steinke_test,
}
BEST_TESTS = tuple(_BEST_TESTS)


def best_test(key: str, threat_model: str,
              setting: bound_oracles.Setting) -> Test:
  """The oracle's test of a bound's kind (module docstring).

  Args:
    key: The report field, one of `BEST_TESTS`' first parts.
    threat_model: 'final', 'all' or 'both', as in `BEST_TESTS`.
    setting: The cell.

  Returns:
    (seen, unseen) standardized scores -> the test's bound in that run.

  Raises:
    KeyError: for a bound not in `BEST_TESTS`.
  """
  return _BEST_TESTS[(key, threat_model)](setting)
