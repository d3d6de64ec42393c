"""one_shot_epe.stats.one_run against jax-privacy 2.0.0, its oracle.

jax-privacy cannot be installed beside TFF 0.87 (which pins jax), so this
runs in the TensorFlow-free environment of `make test-jax`, where
requirements-jax.txt installs it; elsewhere it is skipped. Many random score
sets: sizes from 2 to 800, separations, ties, three alphas and deltas.
"""

import numpy as np
import pytest

from one_shot_epe.stats import one_run
from one_shot_epe.reporting import privacy_report

try:
  from jax_privacy import auditing
except ImportError:  # Not beside TFF: the tests are collected and skipped.
  auditing = None

pytestmark = pytest.mark.skipif(auditing is None,
                                reason='jax-privacy is not installed')


def _cases(count: int, seed: int):
  rng = np.random.default_rng(seed)
  for index in range(count):
    seen_size, unseen_size = rng.integers(2, 800, size=2)
    shift = rng.uniform(0.0, 4.0)
    seen = rng.normal(shift, 1.0, seen_size)
    unseen = rng.normal(0.0, 1.0, unseen_size)
    if index % 4 == 0:  # Ties within and across the sets.
      seen, unseen = np.round(seen, 1), np.round(unseen, 1)
    alpha = float(rng.choice([0.01, 0.05, 0.1]))
    delta = float(rng.choice([1e-3, 1e-5, 1e-6]))
    yield seen, unseen, alpha, delta


@pytest.mark.parametrize('seed', range(4))
def test_one_run_bounds_equal_jax_privacys_canary_score_auditor(seed):
  for seen, unseen, alpha, delta in _cases(15, seed):
    auditor = auditing.CanaryScoreAuditor(seen, unseen)
    expected = (auditor.epsilon_one_run(significance=alpha, delta=delta),
                auditor.epsilon_one_run_fdp(significance=alpha, delta=delta))
    got = (one_run.epsilon_one_run(seen, unseen, delta=delta, alpha=alpha),
           one_run.epsilon_one_run_fdp(seen, unseen, delta=delta, alpha=alpha))
    # jax-privacy finds each root to 1e-6 in eps.
    assert got == pytest.approx(expected, rel=1e-3, abs=1e-5), (
        seen.size, unseen.size, alpha, delta)


def test_the_oracle_is_not_trivial():
  # Some cases bound eps well above 0, so agreement is not 0 == 0.
  values = [auditing.CanaryScoreAuditor(s, u).epsilon_one_run(
      significance=a, delta=d) for s, u, a, d in _cases(15, 0)]
  assert max(values) > 2.0


def test_report_fields_equal_jax_privacy_in_both_threat_models():
  # PrivacyReport.epsilon_one_run(_fdp) of either threat model, against the
  # auditor on the same seen and unseen scores.
  rng = np.random.default_rng(7)
  dim = 10**5
  seen = rng.normal(2.0, 1.0, 500) / np.sqrt(dim)
  unseen = rng.normal(0.0, 1.0, 500) / np.sqrt(dim)
  auditor = auditing.CanaryScoreAuditor(seen, unseen)
  expected = (auditor.epsilon_one_run(significance=0.05, delta=1e-6),
              auditor.epsilon_one_run_fdp(significance=0.05, delta=1e-6))
  for report in (
      privacy_report.final_model_report(seen, dim, 1e-6, unseen=unseen,
                                        bootstrap_resamples=20),
      privacy_report.all_iterates_report(seen, unseen, 1e-6,
                                         bootstrap_resamples=20)):
    got = (report.epsilon_one_run, report.epsilon_one_run_fdp)
    assert got == pytest.approx(expected, rel=1e-3, abs=1e-5)
  assert expected[0] > 1.0
