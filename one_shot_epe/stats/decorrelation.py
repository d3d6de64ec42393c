"""The all-iterates statistic under matrix-factorization noise, decorrelated.

Under DP-FTRL's matrix-factorization mechanism (`dp_fedavg.CorrelatedNoise`;
the JAX engine's --mechanism=blt|banded) round t's noised sum is
x_t + (C^{-1} Z)_t, with C the lower triangular strategy and Z i.i.d.
N(0, sigma^2): the rounds' noise is correlated, and the maximum over rounds
of per-round cosines (Algorithm 3 of Andrew et al., ICLR 2024) sees a
weaker attack than the mechanism allows. Multiplying the rounds' released
sums by C undoes the correlation: C (x + C^{-1} Z) = C x + Z, whose noise rows
are independent again (the "reconstructed noisy gradients" of the
factorization's encoder). A unit canary c inserted with weight S in the
rounds R then shifts its projections on the rows of C x + Z by S w, with
w = C 1_R, the sum of C's columns over R; the matched filter

    m = <C p, w> / (||w|| s),

where p_t = <v_t, c> are the canary's projections on the rounds' released
vectors v_t and s is the std of a coordinate of the rounds' noise rows Z_t
(in v's units), is N(S ||w|| / s, 1) for an inserted canary and N(0, 1) for a
canary never inserted, up to the real clients' own projections: the
all-iterates release tested with the most powerful test for that canary,
a Gaussian mechanism whose mu is the analytical epsilon's. A never-inserted
canary is scored with the filter of a seen one (paired by index), so both
sets' scores share one law but for the shift.

Checked by simulation with known truth in `benchmarks/coverage.py` (the
scores' estimates within a few % of the release's epsilon, every bound at
its level) and against the closed form in `tests/decorrelation_test.py`.
Numpy only.
"""

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe import validation

__all__ = ['matched_filter_scores', 'toeplitz_strategy']


def toeplitz_strategy(coefs: ArrayLike) -> np.ndarray:
  """The lower triangular Toeplitz C with first column `coefs` [n, n].

  Args:
    coefs: First column of C, a non-empty 1-D array [n] (coefs[0] on the
      diagonal, coefs[l] on the l-th subdiagonal).

  Returns:
    C, float64 [n, n].

  Raises:
    ValueError: `coefs` is empty or not 1-D.
  """
  coefs = np.asarray(coefs, np.float64)
  if coefs.ndim != 1 or not coefs.size:
    raise ValueError(f'coefs must be a non-empty vector; got shape '
                     f'{coefs.shape}.')
  n = coefs.size
  lags = np.arange(n)[:, None] - np.arange(n)[None, :]
  return np.where(lags >= 0, coefs[np.clip(lags, 0, n - 1)], 0.0)


@validation.arguments('num_seen')
def matched_filter_scores(
    projections: ArrayLike, strategy: ArrayLike,
    schedule: Sequence[Sequence[int]], num_seen: int, noise_std: float
) -> tuple[np.ndarray, np.ndarray]:
  """The decorrelated matched-filter scores of the canaries (module docstring).

  Args:
    projections: [k + m, T] p_t = <v_t, c> of each tracked canary (seen ids
      0..k-1 first, then the m unseen) on each round's released vector.
    strategy: C, [T, T] lower triangular.
    schedule: entry t: the seen canaries (ids in [0, k)) inserted in round t.
    num_seen: k.
    noise_std: s > 0, the std of a coordinate of a round's noise row Z_t in
      v's units.

  Returns:
    (seen, unseen) scores, N(0, 1) for a canary never inserted. Seen
    canaries the schedule never inserts carry no signal and are left out;
    both are empty if no seen canary is inserted.

  Raises:
    ValueError: for shapes that do not match or a non-positive noise_std.
  """
  projections = np.asarray(projections, np.float64)
  strategy = np.asarray(strategy, np.float64)
  if projections.ndim != 2 or projections.shape[0] < num_seen:
    raise ValueError('projections must be [k + m, T] with k = num_seen = '
                     f'{num_seen}; got shape {projections.shape}.')
  rounds = projections.shape[1]
  if strategy.shape != (rounds, rounds) or len(schedule) != rounds:
    raise ValueError(f'strategy must be [{rounds}, {rounds}] and schedule '
                     f'{rounds} rounds long; got {strategy.shape} and '
                     f'{len(schedule)}.')
  if not noise_std > 0:
    raise ValueError(f'noise_std must be > 0; got {noise_std}.')
  inserted = np.zeros((rounds, num_seen))
  for t, ids in enumerate(schedule):
    for canary in ids:
      inserted[t, int(canary)] = 1.0
  filters = strategy @ inserted  # Column j: w_j = C 1_{R_j}.
  norms = np.linalg.norm(filters, axis=0)
  live = np.flatnonzero(norms > 0)
  if not live.size:
    return np.zeros(0), np.zeros(0)
  units = filters[:, live] / norms[live]
  decorrelated = projections @ strategy.T  # Row j: (C p_j)^T.
  seen = np.einsum('jt,tj->j', decorrelated[live], units) / noise_std
  unseen_rows = decorrelated[num_seen:]
  paired = units[:, np.arange(unseen_rows.shape[0]) % live.size]
  unseen = np.einsum('jt,tj->j', unseen_rows, paired) / noise_std
  return seen, unseen
