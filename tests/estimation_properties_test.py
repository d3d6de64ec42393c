"""Property-based tests (hypothesis) of one_shot_epe.stats.estimation over wide ranges.

Issue 5, item 4: numerical robustness. Every property below is a mathematical
fact about the quantity computed (proved in the test's docstring where it is
not a textbook identity), checked on inputs drawn far beyond the typical
operating point: means up to 100 standard deviations apart, delta from 1e-300,
dimensions from 3 to 1e9, cosines at +-1. Each library call runs under
`_strict_numerics`, so any floating-point warning, numpy division/overflow/
invalid operation or scipy special-function error fails the test instead of
silently producing inf or NaN.

Independent truths: the Balle-Wang total-variation identity at eps = 0, the
Beta-function definition of the Jeffreys bound evaluated forwards, Mills-ratio
bounds on the null's tail derived below, and the 30-digit mpmath quadrature of
the Theorem 3.1 density shared with tests/estimation_test.py.

Examples are derandomised (fixed per test) and counts are chosen so that the
file runs in well under a minute on a loaded 2-core machine.
"""

import contextlib
import json
import math
import warnings

from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest
from scipy import special
from scipy import stats

from null_distribution_test import _mp_null_logsf
from one_shot_epe.stats import estimation as est
from one_shot_epe.stats import lower_bound
from one_shot_epe.stats import null_distribution
from one_shot_epe.reporting import privacy_report


def _settings(max_examples: int) -> settings:
  return settings(deadline=None, derandomize=True, database=None,
                  max_examples=max_examples)


@contextlib.contextmanager
def _strict_numerics():
  """Turns warnings, numpy FP errors and scipy special errors into exceptions.

  Underflow stays silent: a tail probability or density that underflows to 0
  is the correct double-precision answer (numpy's default ignores it too).
  DeprecationWarning stays silent: scipy 1.9's stats.norm calls
  np.find_common_type, deprecated in numpy 1.25, which says nothing about the
  numbers (pytest.ini ignores it suite-wide for the same reason).
  """
  with warnings.catch_warnings(), np.errstate(all='raise', under='ignore'), \
      special.errstate(all='raise', underflow='ignore'):
    warnings.simplefilter('error')
    warnings.simplefilter('ignore', DeprecationWarning)
    yield


def _log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
  return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: 10.0**e)


_DELTA = _log_uniform(1e-12, 0.5)
_STD = _log_uniform(1e-6, 1e6)
_STD_RATIO = _log_uniform(0.2, 5.0)
_GAP_IN_STDS = st.floats(-100.0, 100.0)  # In units of the larger std.
_DIM = st.floats(math.log10(3), 9.0).map(
    lambda e: min(max(int(round(10.0**e)), 3), 10**9))


def _eps(*args: float) -> float:
  with _strict_numerics():
    return est.epsilon_two_gaussians(*args)


def _close(a: float, b: float, rel: float, abs_: float) -> bool:
  return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_


# ----------------------------------------------------------------------------
# Section 3.2: epsilon between two Gaussians.


@_settings(200)
@given(std0=_STD, ratio=_STD_RATIO, offset=st.floats(-1e3, 1e3),
       gap=_GAP_IN_STDS, delta=_log_uniform(1e-300, 0.5))
def test_two_gaussian_epsilon_is_finite_and_nonnegative(std0, ratio, offset,
                                                        gap, delta):
  std1 = std0 * ratio
  mu0 = offset * std0
  mu1 = mu0 + gap * max(std0, std1)
  eps = _eps(mu0, std0, mu1, std1, delta)
  assert math.isfinite(eps) and eps >= 0.0


@_settings(100)
@given(ratio=_STD_RATIO, gaps=st.lists(st.floats(0.0, 100.0), min_size=2,
                                       max_size=2),
       sign=st.sampled_from([-1.0, 1.0]), std0=_STD, delta=_DELTA)
def test_two_gaussian_epsilon_nondecreasing_in_mean_gap(ratio, gaps, sign, std0,
                                                        delta):
  """E_eps(P||Q_m), Q_m = N(m, s^2), P = N(0, 1), is nondecreasing in m >= 0.

  d/dm E = e^eps int_S q'(x - m) dx over the superlevel set S, which at its
  end points r1 < r2 (where p = e^eps q) gives +-(p(r1) - p(r2)); the roots'
  midpoint m / (1 - s^2) lies on the side that makes this >= 0 in all four
  cases (s < 1 or s > 1, either direction), and for s = 1 S is a half-line.
  So the smallest eps with both divergences <= delta is nondecreasing in the
  gap.
  """
  small, large = sorted(gaps)
  std1 = std0 * ratio
  unit = sign * max(std0, std1)
  eps_small = _eps(0.0, std0, small * unit, std1, delta)
  eps_large = _eps(0.0, std0, large * unit, std1, delta)
  assert eps_large >= eps_small - (1e-10 * eps_small + 1e-11)


@_settings(100)
@given(ratio=_STD_RATIO, gap=_GAP_IN_STDS, deltas=st.lists(
    st.floats(-12.0, math.log10(0.5)), min_size=2, max_size=2))
def test_two_gaussian_epsilon_nonincreasing_in_delta(ratio, gap, deltas):
  small, large = sorted(10.0**d for d in deltas)
  mu1 = gap * max(1.0, ratio)
  eps_small = _eps(0.0, 1.0, mu1, ratio, small)
  eps_large = _eps(0.0, 1.0, mu1, ratio, large)
  assert eps_large <= eps_small + (1e-10 * eps_small + 1e-11)


@_settings(100)
@given(std0=_STD, ratio=_STD_RATIO, offset=st.floats(-1e3, 1e3),
       gap=_GAP_IN_STDS, delta=_DELTA, shift=st.floats(-1e3, 1e3),
       scale=_log_uniform(1e-6, 1e6))
def test_two_gaussian_epsilon_symmetries(std0, ratio, offset, gap, delta,
                                         shift, scale):
  """eps is a function of the pair of laws, and x -> c x + b (c != 0) is a
  bijection that preserves every hockey-stick divergence; eps takes the max
  over both directions, so it is also symmetric in the two Gaussians."""
  std1 = std0 * ratio
  mu0 = offset * std0
  mu1 = mu0 + gap * max(std0, std1)
  base = _eps(mu0, std0, mu1, std1, delta)
  variants = {
      'swap': _eps(mu1, std1, mu0, std0, delta),
      'mirror': _eps(-mu0, std0, -mu1, std1, delta),
      'shift and scale': _eps(scale * (mu0 + shift * std0), scale * std0,
                              scale * (mu1 + shift * std0), scale * std1,
                              delta),
      'mirror and scale': _eps(-scale * mu0, scale * std0, -scale * mu1,
                               scale * std1, delta),
  }
  for name, value in variants.items():
    assert _close(value, base, 1e-8, 1e-10), (name, value, base)


@_settings(80)
@given(std=_STD, offset=st.floats(-1e3, 1e3),
       gap=st.floats(1e-3, 100.0), sign=st.sampled_from([-1.0, 1.0]),
       delta=_DELTA)
def test_equal_variances_are_the_gaussian_mechanism(std, offset, gap, sign,
                                                    delta):
  mu0 = offset * std
  mu1 = mu0 + sign * gap * std
  with _strict_numerics():
    expected = est.gaussian_epsilon(std / abs(mu1 - mu0), delta)
  assert _close(_eps(mu0, std, mu1, std, delta), expected, 1e-9, 1e-11)


# ----------------------------------------------------------------------------
# Balle and Wang (2018): the Gaussian mechanism.


@_settings(100)
@given(sigma=_log_uniform(1e-3, 1e3), delta=_DELTA)
def test_gaussian_sigma_inverts_gaussian_epsilon(sigma, delta):
  with _strict_numerics():
    eps = est.gaussian_epsilon(sigma, delta)
    assert math.isfinite(eps) and eps >= 0.0
    if eps == 0.0:
      # (0, delta)-DP: the total variation 2 Phi(1/(2 sigma)) - 1 <= delta.
      tv = stats.norm.cdf(0.5 / sigma) - stats.norm.cdf(-0.5 / sigma)
      assert tv <= delta * (1 + 1e-9)
    else:
      assert est.gaussian_sigma(eps, delta) == pytest.approx(sigma, rel=1e-9)


@_settings(100)
@given(eps=_log_uniform(1e-6, 1e5), delta=_DELTA,
       factor=_log_uniform(1.0, 10.0))
def test_gaussian_epsilon_inverts_gaussian_sigma_and_is_monotone(eps, delta,
                                                                 factor):
  with _strict_numerics():
    sigma = est.gaussian_sigma(eps, delta)
    assert math.isfinite(sigma) and sigma > 0.0
    # gaussian_epsilon's root search stops at 1e-13 absolute.
    assert _close(est.gaussian_epsilon(sigma, delta), eps, 1e-9, 1e-12)
    # More noise or a larger delta never needs a larger epsilon.
    tolerance = 1e-9 * eps + 1e-12
    assert est.gaussian_epsilon(sigma * factor, delta) <= eps + tolerance
    assert est.gaussian_epsilon(sigma, min(delta * factor,
                                           0.5)) <= eps + tolerance


# ----------------------------------------------------------------------------
# Theorems 3.1 and 3.2: the exact null of a cosine, d from 3 to 1e9.


def _null_taus(dim: int, z_scores: list[float], raw: list[float]) -> np.ndarray:
  """Cosines at z standard deviations (1/sqrt(d)) plus raw points in [-1.5, 1.5]."""
  scaled = [z / math.sqrt(dim) for z in z_scores]
  return np.sort(np.array([t for t in scaled if abs(t) < 1.0] + raw))


@_settings(100)
@given(dim=_DIM, z_scores=st.lists(st.floats(-50.0, 50.0), max_size=12),
       raw=st.lists(st.floats(-1.5, 1.5), min_size=1, max_size=8))
def test_null_cdf_is_monotone_and_complements_the_survival_function(
    dim, z_scores, raw):
  """P(T <= tau) + P(T > tau) = 1, and by T ~ -T, null_cdf(tau) = P(T > -tau)."""
  tau = _null_taus(dim, z_scores, raw)
  with _strict_numerics():
    cdf = null_distribution.null_cdf(tau, dim)
    log_sf = null_distribution.null_logsf(tau, dim)
    sf = np.exp(log_sf)
  assert not np.any(np.isnan(cdf)) and not np.any(np.isnan(log_sf))
  assert np.all((cdf >= 0.0) & (cdf <= 1.0))
  assert np.all(cdf[1:] >= cdf[:-1])
  assert np.all(log_sf[1:] <= log_sf[:-1])  # Comparisons, as -inf - -inf is NaN.
  np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=1e-15)
  np.testing.assert_array_equal(cdf[tau >= 1.0], 1.0)
  np.testing.assert_array_equal(sf[tau <= -1.0], 1.0)


@_settings(100)
@given(dim=_DIM, steps=st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=10))
def test_null_logsf_far_tail_is_finite_decreasing_and_within_mills_bounds(
    dim, steps):
  """From 1/sqrt(d) to 0.999, log P(T > tau) obeys two-sided Mills-ratio bounds.

  With f(u) = C (1 - u^2)^k, k = (d - 3)/2, and tau > 0:
    upper: int_tau^1 f <= int_tau^1 f(u) u/tau du = f(tau) (1 - tau^2)/((d-1) tau);
    lower: integrating by parts, int_tau^1 (1-u^2)^k du =
      (1-tau^2)^(k+1)/((d-1) tau) - int_tau^1 (1-u^2)^(k+1)/((d-1) u^2) du,
      and the last integral is at most 1/((d-1) tau^2) times the first, so
      P(T > tau) >= upper / (1 + 1/((d-1) tau^2)).
  log f is formed here with math.lgamma, independently of the library.
  """
  start = 1.0 / math.sqrt(dim)
  # Distinct, increasing cosines spread over [start, 0.999].
  tau = start + (0.999 - start) * np.cumsum(steps) / sum(steps)
  with _strict_numerics():
    log_sf = null_distribution.null_logsf(tau, dim)
  assert np.all(np.isfinite(log_sf))
  assert np.all(np.diff(log_sf) < 0.0)
  log_norm = (math.lgamma(dim / 2) - math.lgamma((dim - 1) / 2) -
              0.5 * math.log(math.pi))
  log_upper = (log_norm + 0.5 * (dim - 1) * np.log1p(-tau * tau) -
               np.log((dim - 1) * tau))
  log_lower = log_upper - np.log1p(1.0 / ((dim - 1) * tau * tau))
  # lgamma of 5e8 carries ~1e-6 absolute rounding; the bounds are exact.
  slack = 1e-12 * np.abs(log_upper) + 1e-5
  assert np.all(log_sf <= log_upper + slack)
  assert np.all(log_sf >= log_lower - slack)


@_settings(100)
@given(dim=_DIM, side=st.sampled_from([-1.0, 1.0]))
def test_null_logsf_is_continuous_where_its_method_changes(dim, side):
  """At |tau| sqrt(d) = 1 the series for the centre hands over to the
  continued fraction; both sides must agree as the law has a density."""
  edge = side / math.sqrt(dim)
  tau = np.array([edge * (1 - 1e-13), edge * (1 + 1e-13)])
  with _strict_numerics():
    inside, outside = null_distribution.null_logsf(tau, dim)
  assert inside == pytest.approx(outside, rel=1e-10)


@_settings(60)
@given(dim=_DIM, z_scores=st.lists(st.floats(-60.0, 60.0), min_size=1,
                                   max_size=30))
def test_null_logsf_of_an_array_equals_elementwise_calls(dim, z_scores):
  """Each element's series or continued fraction stops at its own
  convergence, so a vectorised call (as eps_lo makes with every candidate
  threshold at once) returns exactly what scalar calls return."""
  tau = _null_taus(dim, z_scores, [])
  assume(tau.size > 0)
  with _strict_numerics():
    together = null_distribution.null_logsf(tau, dim)
    alone = [float(null_distribution.null_logsf(t, dim)) for t in tau]
  np.testing.assert_array_equal(together, alone)


@_settings(60)
@given(dim=_DIM, z_scores=st.lists(st.floats(-40.0, 8.0), min_size=1,
                                   max_size=10),
       raw=st.lists(st.floats(-0.999, 0.999), max_size=4))
def test_null_ppf_inverts_null_cdf_where_well_conditioned(dim, z_scores, raw):
  """ppf(cdf(tau)) = tau. cdf is accurate relative to min(q, 1 - q) up to the
  double-precision spacing of q near 1, so the error in tau is bounded by that
  accuracy divided by the density."""
  tau = _null_taus(dim, z_scores, raw)
  with _strict_numerics():
    q = null_distribution.null_cdf(tau, dim)
    keep = (q > 1e-300) & (q < 1.0 - 1e-6)
    assume(np.any(keep))
    tau, q = tau[keep], q[keep]
    back = null_distribution.null_ppf(q, dim)
    density = null_distribution.null_pdf(tau, dim)
  assert np.all(np.diff(null_distribution.null_ppf(np.sort(q), dim)) >= 0.0)
  bound = 1e-10 * np.minimum(q, 1.0 - q) + 1e-15
  assert np.all(np.abs(back - tau) * density <= bound)


@_settings(10)
@given(dim=_DIM, z=st.floats(-5.0, 40.0))
def test_null_logsf_matches_mpmath_quadrature(dim, z):
  """Few examples: the 30-digit quadrature costs ~30 ms per point. (The
  quadrature helper recurses forever at tau = 0, where P(T > 0) = 1/2.)"""
  assume(z != 0.0)
  for tau in (z / math.sqrt(dim), 0.3 * z / math.sqrt(dim)):
    assume(abs(tau) < 1.0)
    with _strict_numerics():
      got = float(null_distribution.null_logsf(tau, dim))
    assert got == pytest.approx(float(_mp_null_logsf(tau, dim)), rel=1e-10)


# ----------------------------------------------------------------------------
# Section 5.1: eps_lo and the Jeffreys bound.


_ALPHA = _log_uniform(1e-15, 0.4999)


@_settings(100)
@given(trials=st.integers(1, 10**7), fractions=st.lists(
    st.floats(0.0, 1.0), min_size=2, max_size=6),
       alphas=st.lists(_ALPHA, min_size=2, max_size=2))
def test_jeffreys_upper_is_the_beta_quantile_and_monotone(trials, fractions,
                                                          alphas):
  """Checked forwards with betainc: P(B <= u) = 1 - alpha, and in the tail,
  P(B > u) = I_{1-u}(n - x + 1/2, x + 1/2) = alpha to 1e-8 relative where
  1 - u >= 1/2 is exact enough to resolve it. (scipy's betainc is itself only
  good to ~3e-10 for n ~ 1e5 to 1e7, checked against mpmath, hence 1e-9.)"""
  failures = np.sort(np.round(np.array(fractions) * trials))
  low_alpha, high_alpha = sorted(alphas)
  with _strict_numerics():
    upper = lower_bound.jeffreys_upper(failures, trials, high_alpha)
    stricter = lower_bound.jeffreys_upper(failures, trials, low_alpha)
    more_trials = lower_bound.jeffreys_upper(failures, 2 * trials, high_alpha)
  assert np.all((upper > 0.0) & (upper <= 1.0))
  some = failures < trials
  x, u = failures[some], upper[some]
  np.testing.assert_allclose(special.betainc(x + 0.5, trials - x + 0.5, u),
                             1.0 - high_alpha, rtol=0, atol=1e-9)
  low = u <= 0.5
  np.testing.assert_allclose(
      special.betainc(trials - x[low] + 0.5, x[low] + 0.5, 1.0 - u[low]),
      high_alpha, rtol=1e-8)
  np.testing.assert_array_equal(upper[~some], 1.0)
  # Beta(a, b) is stochastically increasing in a and decreasing in b; the
  # slack is the quantile's 1e-10 root-finding tolerance.
  slack = 1e-9 * upper
  assert np.all(upper[1:] >= upper[:-1] - slack[1:])
  assert np.all(stricter >= upper - slack)
  assert np.all(more_trials <= upper + slack)


def _cosine_sample(seed: int, size: int, mean: float, std: float) -> np.ndarray:
  """Normal cosines, clipped to [-1, 1] (so small d also yields ties at +-1)."""
  rng = np.random.default_rng(seed)
  return np.clip(rng.normal(mean, std, size), -1.0, 1.0)


def _fitted_sample(seed: int, size: int, mean: float, std: float) -> np.ndarray:
  """A sample whose mean and population std are exactly `mean` and `std`."""
  z = np.random.default_rng(seed).standard_normal(size)
  return mean + std * (z - z.mean()) / z.std()


_SEED = st.integers(0, 2**32 - 1)


def _lower_bound(seen, **kwargs) -> float:
  """The paper's eps_lo unless another threshold_strategy is given."""
  kwargs.setdefault('threshold_strategy', 'paper')
  with _strict_numerics():
    return lower_bound.epsilon_lower_bound(seen, **kwargs)


@_settings(60)
@given(seed=_SEED, size=st.integers(4, 300), dim=_DIM,
       mean_z=st.floats(-3.0, 100.0), spread=_log_uniform(1e-2, 5.0),
       delta=_log_uniform(1e-300, 0.5), alpha=_ALPHA, extremes=st.booleans())
def test_lower_bound_is_finite_and_nonnegative(seed, size, dim, mean_z, spread,
                                               delta, alpha, extremes):
  scale = 1.0 / math.sqrt(dim)
  seen = _cosine_sample(seed, size, mean_z * scale, spread * scale)
  unseen = _cosine_sample(seed + 1, size, 0.0, scale)
  if extremes:  # Cosines of exactly +-1 (parallel vectors).
    seen[0], seen[-1], unseen[0] = 1.0, -1.0, -1.0
  for kwargs in (dict(dim=dim), dict(dim=dim, null='gaussian'),
                 dict(unseen=unseen), dict(dim=dim, threshold_strategy='split',
                                           seed=seed),
                 dict(dim=dim, threshold_strategy='bonferroni'),
                 dict(unseen=unseen, threshold_strategy='bonferroni')):
    bound = _lower_bound(seen, delta=delta, alpha=alpha, **kwargs)
    assert math.isfinite(bound) and bound >= 0.0, kwargs


@_settings(60)
@given(seed=_SEED, size=st.integers(2, 200), dim=_DIM,
       mean_z=st.floats(0.0, 8.0), delta=_DELTA,
       alphas=st.lists(_ALPHA, min_size=2, max_size=2),
       deltas=st.lists(_DELTA, min_size=2, max_size=2),
       empirical=st.booleans())
def test_lower_bound_all_thresholds_invariances_and_monotonicity(
    seed, size, dim, mean_z, delta, alphas, deltas, empirical):
  """threshold_strategy='paper' takes the max over the sorted unique cosines of

    max(log(1 - delta - FPR) - log FNR, log(1 - delta - FNR) - log FPR),

  with FNR (and an empirical FPR) Jeffreys upper bounds. So it is invariant
  under permuting the inputs; a smaller alpha raises every Jeffreys bound and
  a larger delta lowers 1 - delta - rate, and both lower every term (up to
  the Jeffreys quantile's 1e-10 root-finding tolerance, for alpha).
  """
  scale = 1.0 / math.sqrt(dim)
  seen = _cosine_sample(seed, size, mean_z * scale, scale)
  source = dict(unseen=_cosine_sample(seed + 1, size, 0.0, scale)) if (
      empirical) else dict(dim=dim)
  base = _lower_bound(seen, delta=delta, **source)
  permuted = np.random.default_rng(seed).permutation(seen)
  if empirical:
    source_permuted = dict(unseen=source['unseen'][::-1])
  else:
    source_permuted = source
  assert _lower_bound(permuted, delta=delta, **source_permuted) == base
  low_alpha, high_alpha = sorted(alphas)
  stricter = _lower_bound(seen, delta=delta, alpha=low_alpha, **source)
  looser = _lower_bound(seen, delta=delta, alpha=high_alpha, **source)
  assert stricter <= looser + 1e-9 * looser + 1e-12
  small_delta, large_delta = sorted(deltas)
  assert (_lower_bound(seen, delta=large_delta, **source) <=
          _lower_bound(seen, delta=small_delta, **source))


@_settings(60)
@given(seed=_SEED, size=st.integers(2, 200), dim=_DIM,
       mean_z=st.floats(-2.0, 8.0), delta=_DELTA, position=st.floats(0.0, 1.0),
       empirical=st.booleans())
def test_lower_bound_grows_with_separating_evidence(seed, size, dim, mean_z,
                                                    delta, position, empirical):
  """A seen cosine above every candidate threshold leaves each old threshold's
  miss count x unchanged while n grows, and Beta(x + 1/2, n - x + 1/2) is
  stochastically decreasing in n, so the FNR bound shrinks at every old
  threshold (FPR unchanged) and one candidate is added: the 'paper' bound does
  not decrease. Symmetrically for an unseen cosine below every candidate.
  """
  scale = 1.0 / math.sqrt(dim)
  seen = _cosine_sample(seed, size, mean_z * scale, scale)
  unseen = _cosine_sample(seed + 1, size, 0.0, scale)
  source = dict(unseen=unseen) if empirical else dict(dim=dim)
  base = _lower_bound(seen, delta=delta, **source)
  top = max(seen.max(), unseen.max()) if empirical else seen.max()
  assume(top < 1.0)
  added = top + position * (1.0 - top)
  assume(added > top)
  assert _lower_bound(np.append(seen, added), delta=delta, **source) >= base
  if empirical:
    bottom = min(seen.min(), unseen.min())
    assume(bottom > -1.0)
    below = bottom - position * (1.0 + bottom)
    assume(below < bottom)
    assert _lower_bound(seen, delta=delta,
                        unseen=np.append(unseen, below)) >= base


@_settings(60)
@given(seed=_SEED, size=st.integers(2, 200), dim=_DIM,
       mean_z=st.floats(-2.0, 8.0), shift_z=st.floats(0.0, 5.0), delta=_DELTA)
def test_lower_bound_grows_when_seen_cosines_move_up(seed, size, dim, mean_z,
                                                     shift_z, delta):
  """Against the exact null, raise every seen cosine by c > 0 (keeping them
  distinct). The k-th smallest candidate t_k moves to t_k + c: its miss count
  stays k (it can only be larger at t_k, with ties) while the null's tail
  P(T > t) decreases, so every term of the bound grows: eps_lo does not
  decrease."""
  scale = 1.0 / math.sqrt(dim)
  seen = _cosine_sample(seed, size, mean_z * scale, scale)
  moved = seen + shift_z * scale
  assume(moved.max() <= 1.0)
  assume(np.unique(moved).size == moved.size)
  assert (_lower_bound(moved, delta=delta, dim=dim) >=
          _lower_bound(seen, delta=delta, dim=dim))


# ----------------------------------------------------------------------------
# Algorithms 1-3 on cosine samples.


@_settings(50)
@given(seed=_SEED, size=st.integers(2, 300), dim=st.integers(10**5, 10**9),
       mean_z=st.floats(-100.0, 100.0), ratio=_STD_RATIO, delta=_DELTA)
def test_final_cosine_estimates_finite_and_mirror_invariant(
    seed, size, dim, mean_z, ratio, delta):
  """mu-hat up to 100 null standard deviations from 0. The null N(0, 1/d) is
  symmetric, so reflecting every cosine leaves eps unchanged; so does any
  reordering (the fit uses mean and std only)."""
  scale = 1.0 / math.sqrt(dim)
  cosines = _fitted_sample(seed, size, mean_z * scale, ratio * scale)
  for variance in ('fitted', 'null'):
    with _strict_numerics():
      eps = est.epsilon_from_final_cosines(cosines, dim, delta, variance)
      mirrored = est.epsilon_from_final_cosines(-cosines, dim, delta, variance)
      reordered = est.epsilon_from_final_cosines(cosines[::-1], dim, delta,
                                                 variance)
    assert math.isfinite(eps) and eps >= 0.0
    assert _close(mirrored, eps, 1e-8, 1e-10)
    assert _close(reordered, eps, 1e-8, 1e-10)


@_settings(50)
@given(seed=_SEED, sizes=st.lists(st.integers(2, 300), min_size=2, max_size=2),
       gap=_GAP_IN_STDS, ratio=_STD_RATIO, spread=_log_uniform(1e-4, 1e-3),
       centre=st.floats(-0.4, 0.4), scale=st.floats(-1.0, 1.0), delta=_DELTA)
def test_seen_unseen_estimate_symmetric_and_affine_invariant(
    seed, sizes, gap, ratio, spread, centre, scale, delta):
  """Algorithm 3's eps is the two-Gaussian eps of the fits, symmetric in the
  two samples, and an affine map x -> c x + b (c != 0) maps both fits
  exactly, so eps is unchanged."""
  unseen = _fitted_sample(seed, sizes[0], centre, spread)
  seen = _fitted_sample(seed + 1, sizes[1], centre + gap * spread * max(
      1.0, ratio), spread * ratio)
  assume(abs(scale) > 1e-2)
  mapped_seen, mapped_unseen = scale * seen + 0.05, scale * unseen + 0.05
  assume(np.all(np.abs(np.concatenate([seen, unseen, mapped_seen,
                                       mapped_unseen])) <= 1.0))
  with _strict_numerics():
    eps = est.epsilon_from_seen_unseen(seen, unseen, delta)
    swapped = est.epsilon_from_seen_unseen(unseen, seen, delta)
    mapped = est.epsilon_from_seen_unseen(mapped_seen, mapped_unseen, delta)
  assert math.isfinite(eps) and eps >= 0.0
  assert _close(swapped, eps, 1e-8, 1e-10)
  assert _close(mapped, eps, 1e-8, 1e-10)


# ----------------------------------------------------------------------------
# Appendix B and reports.


@_settings(60)
@given(seed=_SEED, size=st.integers(8, 400), loc=st.floats(-1e3, 1e3),
       scale=_log_uniform(1e-6, 1e6), tail=st.floats(0.5, 50.0),
       sign=st.sampled_from([-1.0, 1.0]))
def test_anderson_darling_nonnegative_and_affine_invariant(seed, size, loc,
                                                           scale, tail, sign):
  """A^2 = n int (F_n - F)^2 / (F (1 - F)) dF >= 0, and it depends on the
  sample only through the sorted standardised values, which x -> c x + b
  leaves unchanged (c > 0) or reverses and negates (c < 0, where the formula is
  symmetric). Heavy tails (Student t with `tail` dof) probe extreme z."""
  sample = np.random.default_rng(seed).standard_t(tail, size)
  assume(np.std(sample) > 0.0)
  with _strict_numerics():
    a2 = est.anderson_darling(sample)
    mapped = est.anderson_darling(scale * (sign * sample + loc))
    reordered = est.anderson_darling(sample[::-1])
  assert math.isfinite(a2) and a2 >= 0.0
  assert _close(mapped, a2, 1e-8, 1e-10)
  assert _close(reordered, a2, 1e-12, 1e-12)


@_settings(20)
@given(seed=_SEED, size=st.integers(8, 200), dim=st.integers(10**5, 10**9),
       mean_z=st.floats(0.0, 100.0), delta=_DELTA)
def test_reports_are_finite_and_survive_json(seed, size, dim, mean_z, delta):
  scale = 1.0 / math.sqrt(dim)
  seen = _cosine_sample(seed, size, mean_z * scale, scale)
  unseen = _cosine_sample(seed + 1, size, 0.0, scale)
  with _strict_numerics():
    # Few bootstrap resamples keep the examples fast; the path is the same.
    reports = (privacy_report.final_model_report(seen, dim, delta,
                                                 bootstrap_resamples=50),
               privacy_report.all_iterates_report(seen, unseen, delta,
                                                  bootstrap_resamples=50))
  for report in reports:
    fields = report.to_dict()
    assert json.loads(report.to_json()) == fields
    for value in fields.values():
      if isinstance(value, float):
        assert math.isfinite(value)
    assert report.epsilon_est >= 0.0 and report.epsilon_lo >= 0.0
    low, high = report.epsilon_est_interval
    assert 0.0 <= low <= high and math.isfinite(high)
    assert math.isfinite(report.epsilon_gdp) and report.epsilon_gdp >= 0.0
    assert 0.0 <= report.auroc <= 1.0
    tpr = report.tpr_at_fpr
    assert set(tpr) == {'0.01', '0.001'}
    assert 0.0 <= tpr['0.001'] <= tpr['0.01'] <= 1.0
