"""Tests of one_shot_epe.runtime.cosine_buffer against brute force."""

import numpy as np
import pytest

from one_shot_epe.runtime import cosine_buffer


def test_folded_blocks_give_the_max_over_all_rounds_and_each_rounds_summary():
  rng = np.random.default_rng(0)
  seen, unseen, rounds = 3, 4, 7
  cosines = rng.uniform(-1, 1, size=(seen + unseen, rounds)).astype(
      np.float32)
  norms = rng.uniform(1, 2, size=rounds)
  buffer = cosine_buffer.CosineBuffer(
      seen, unseen, projections=np.zeros((seen + unseen, rounds)))
  summaries = []
  for block in ([0, 1, 2], [3], [], [4, 5, 6]):  # Blocks of any size.
    summaries += buffer.fold([t + 1 for t in block], cosines[:, block],
                             norms[block])
  np.testing.assert_array_equal(buffer.maxima, cosines.max(axis=1))
  np.testing.assert_array_equal(buffer.split().seen, cosines[:seen].max(1))
  np.testing.assert_array_equal(buffer.split().unseen, cosines[seen:].max(1))
  np.testing.assert_allclose(buffer.projections, cosines * norms, rtol=1e-6)
  assert [s.round_num for s in summaries] == list(range(1, rounds + 1))
  for t, summary in enumerate(summaries):
    assert summary.seen_mean == pytest.approx(cosines[:seen, t].mean(),
                                              rel=1e-6)
    assert summary.seen_max == cosines[:seen, t].max()
    assert summary.unseen_max == cosines[seen:, t].max()


def test_a_buffer_resumed_from_maxima_continues_them():
  first = cosine_buffer.CosineBuffer(2, 0)
  first.fold([1], np.array([[0.5], [-0.2]]))
  resumed = cosine_buffer.CosineBuffer(2, 0, first.maxima)
  summary, = resumed.fold([2], np.array([[0.1], [0.3]]))
  np.testing.assert_array_equal(resumed.maxima, np.float32([0.5, 0.3]))
  assert np.isnan(summary.unseen_mean) and np.isnan(summary.unseen_max)
  with pytest.raises(ValueError, match='3 rows'):
    cosine_buffer.CosineBuffer(2, 1, maxima=np.zeros(2))
