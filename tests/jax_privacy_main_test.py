"""multi_split, bca_bootstrap and gdp_threshold against jax-privacy main.

jax-privacy's `auditing.MultiSplit`, BCa bootstrap and one-sided
`epsilon_from_gdp` (fixed in its commit aab3e1c, PR #270, 2026-07-27) are
newer than its 2.0.0 release, so the test runs its main branch's
`jax_privacy/auditing.py` (the commit below, which holds all three)
from source (it needs numpy, scipy and dp_accounting, not JAX). The source
is not part of this project; fetch it to .cache/ (git-ignored):

  mkdir -p .cache/jax_privacy_main && git -C <clone of
  github.com/google-deepmind/jax_privacy> show \
  8967688c26d46f3b74bfdfe61ef1f984b887abab:jax_privacy/auditing.py \
  > .cache/jax_privacy_main/auditing.py

Without it the tests are skipped. The same seeds give the same splits and
resamples, so results are compared to 1e-6 relative (and, for the one-run
certificates and the GDP bound, whose roots jax-privacy finds to 1e-6 in
eps, 1e-6 absolute).
"""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from one_shot_epe.stats import attack_metrics
from one_shot_epe.stats import bca_bootstrap
from one_shot_epe.stats import gdp_threshold
from one_shot_epe.stats import multi_split

_SOURCE = (pathlib.Path(__file__).resolve().parent.parent / '.cache' /
           'jax_privacy_main' / 'auditing.py')


def _load_auditing():
  if not _SOURCE.exists():
    return None
  spec = importlib.util.spec_from_file_location('jax_privacy_main_auditing',
                                                _SOURCE)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there.
  spec.loader.exec_module(module)
  return module


auditing = _load_auditing()
pytestmark = pytest.mark.skipif(
    auditing is None, reason=f'jax-privacy main source absent ({_SOURCE})')


def _cases(count, seed):
  rng = np.random.default_rng(seed)
  for index in range(count):
    seen_size, unseen_size = rng.integers(20, 300, size=2)
    seen = rng.normal(rng.uniform(0.5, 3.0), 1.0, seen_size)
    unseen = rng.normal(0.0, 1.0, unseen_size)
    if index % 3 == 0:  # Ties within and across the sets.
      seen, unseen = np.round(seen, 1), np.round(unseen, 1)
    yield (seen, unseen, float(rng.choice([0.05, 0.1])),
           float(rng.choice([1e-3, 1e-5])), int(rng.integers(1000)))


_METHODS = {'one_run': 'epsilon_one_run',
            'clopper_pearson': 'epsilon_clopper_pearson'}


@pytest.mark.parametrize('bound', ['one_run', 'clopper_pearson'])
@pytest.mark.parametrize('fraction', [0.5, 0.3])
def test_multi_split_equals_jax_privacy_main(bound, fraction):
  values = []
  for seen, unseen, alpha, delta, seed in _cases(6, 11):
    strategy = auditing.MultiSplit(num_samples=15,
                                   threshold_estimation_frac=fraction,
                                   seed=seed)
    expected = getattr(auditing.CanaryScoreAuditor(seen, unseen),
                       _METHODS[bound])(alpha, delta,
                                        threshold_strategy=strategy)
    got = multi_split.epsilon_multi_split(
        seen, unseen, bound=bound, delta=delta, alpha=alpha, splits=15,
        fraction=fraction, seed=seed)
    # jax-privacy finds the one-run roots to 1e-6 in eps (brentq's xtol),
    # this project to 1e-9: they agree to 1e-6 relative or absolute.
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-6), (
        seen.size, unseen.size, alpha, delta, seed)
    values.append(got)
  assert max(values) > 0.5  # Not 0 == 0.


def test_two_sided_clopper_pearson_multi_split():
  for seen, unseen, alpha, delta, seed in _cases(4, 12):
    # Scores of the seen canaries lower: only the reversed test finds them.
    strategy = auditing.MultiSplit(num_samples=10, seed=seed)
    auditor = auditing.CanaryScoreAuditor(-seen, unseen)
    expected = auditor.epsilon_clopper_pearson(
        alpha, delta, one_sided=False, threshold_strategy=strategy)
    got = multi_split.epsilon_multi_split(
        -seen, unseen, bound='clopper_pearson', delta=delta, alpha=alpha,
        splits=10, one_sided=False, seed=seed)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)


@pytest.mark.skipif(
    auditing is not None and not hasattr(auditing.dp_accounting,
                                         'get_sigma_gaussian'),
    reason="this dp_accounting predates jax-privacy main's get_sigma_gaussian")
def test_multi_split_fdp_equals_jax_privacy_main():
  # Mahloujifar et al.'s recursion needs the Gaussian mechanism's sigma at
  # each eps: jax-privacy takes dp_accounting's, this project its own root
  # (estimation.gaussian_sigma), which differ in the last digits.
  for seen, unseen, alpha, delta, seed in _cases(3, 13):
    strategy = auditing.MultiSplit(num_samples=8, seed=seed)
    expected = auditing.CanaryScoreAuditor(seen, unseen).epsilon_one_run_fdp(
        alpha, delta, threshold_strategy=strategy)
    got = multi_split.epsilon_multi_split(
        seen, unseen, bound='one_run_fdp', delta=delta, alpha=alpha,
        splits=8, seed=seed)
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize('signal', [True, False])
def test_one_sided_gdp_bound_equals_jax_privacy_main(signal):
  values = []
  for seen, unseen, alpha, delta, seed in _cases(8, 15):
    if not signal:  # Where jax-privacy 2.0.0's two-sided bound finds eps > 1.
      seen = np.random.default_rng(seed).normal(0.0, 1.0, seen.size)
    expected = auditing.CanaryScoreAuditor(seen, unseen).epsilon_from_gdp(
        alpha, delta)
    got = gdp_threshold.epsilon_gdp_thresholds(seen, unseen, delta=delta,
                                               alpha=alpha)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-6), (
        seen.size, unseen.size, alpha, delta)
    values.append(got)
  assert (max(values) > 0.5) == signal  # Not 0 == 0 throughout.


def test_tpr_at_given_fpr_and_max_accuracy_equal_jax_privacy_main():
  fprs = np.array([0.0, 1e-3, 0.01, 0.05, 0.1, 0.37, 1.0])
  for seen, unseen, alpha, _, _ in _cases(8, 16):
    auditor = auditing.CanaryScoreAuditor(seen, unseen)
    np.testing.assert_allclose(
        attack_metrics.tpr_at_given_fpr(seen, unseen, fprs),
        auditor.tpr_at_given_fpr(fprs), rtol=1e-6)
    assert attack_metrics.tpr_at_given_fpr(seen, unseen, 0.01) == (
        pytest.approx(auditor.tpr_at_given_fpr(0.01), rel=1e-6))
    assert attack_metrics.max_accuracy(seen, unseen) == pytest.approx(
        auditor.max_accuracy(), rel=1e-6)
    assert attack_metrics.max_accuracy(
        seen, unseen, prevalence=0.3, alpha=alpha) == pytest.approx(
            auditor.max_accuracy(prevalence=0.3, significance=alpha),
            rel=1e-6)


def _auroc(seen, unseen):
  return attack_metrics.auroc_two_samples(seen, unseen)


@pytest.mark.parametrize('bias_correction,acceleration',
                         [(False, False), (True, False), (True, True)])
def test_bootstrap_quantiles_equal_jax_privacy_main(bias_correction,
                                                    acceleration):
  for seen, unseen, _, _, seed in _cases(4, 14):
    params = auditing.BootstrapParams(
        num_samples=200, quantiles=(0.025, 0.5, 0.975),
        bias_correction=bias_correction, acceleration=acceleration, seed=seed)
    auditor = auditing.CanaryScoreAuditor(seen, unseen)
    # The same statistic on both sides: the Mann-Whitney AUROC of the
    # auditor's scores, and jax-privacy's own hull AUROC. (jax-privacy's bias
    # correction compares its list of values with the estimate, which works
    # for numpy scalars only.)
    for ours, theirs in (
        (_auroc, lambda a: np.float64(
            _auroc(a._in_canary_scores, a._out_canary_scores))),
        (lambda s, u: auditing.CanaryScoreAuditor(s, u).attack_auroc(),
         auditing.CanaryScoreAuditor.attack_auroc)):
      expected = auditor._bootstrap(theirs, params)
      got = bca_bootstrap.bca_quantiles(
          seen, unseen, ours, quantiles=(0.025, 0.5, 0.975), resamples=200,
          bias_correction=bias_correction, acceleration=acceleration,
          seed=seed)
      np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_bca_moves_the_levels():
  # A skewed statistic: BCa's levels differ from the requested ones.
  rng = np.random.default_rng(5)
  seen, unseen = rng.exponential(1.0, 60), rng.exponential(1.0, 60)
  maximum = lambda s, u: float(np.max(s) - np.max(u))
  values = bca_bootstrap.resampled_values(seen, unseen, maximum, 200, 0)
  levels = bca_bootstrap.bca_levels(
      values, maximum(seen, unseen), [0.025, 0.975],
      bca_bootstrap.jackknife_values(seen, unseen, maximum))
  assert np.all(np.abs(levels - [0.025, 0.975]) > 1e-3)
