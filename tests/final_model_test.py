"""Tests for one_shot_epe.tff_engine.final_model (Algorithm 2 final-model cosines)."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import final_model
from one_shot_epe.stats import null_distribution

_SEED = 4242
_SHAPES = ((7, 9), (11,))  # d = 74.
_DIM = 74


def _canary(canary_id: int, dim: int = _DIM) -> np.ndarray:
  u = tf.random.stateless_normal([dim], seed=[_SEED, canary_id],
                                 dtype=tf.float32, alg='philox').numpy()
  return u.astype(np.float64) / np.linalg.norm(u.astype(np.float64))


def _structure(flat: np.ndarray):
  first = np.prod(_SHAPES[0])
  return [flat[:first].reshape(_SHAPES[0]).astype(np.float32),
          flat[first:].astype(np.float32)]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
  return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope='module')
def weights():
  rng = np.random.default_rng(0)
  initial = rng.normal(size=_DIM)
  # tff.learning: the server subtracts the aggregate, which contains +c_1.
  final = initial - 0.8 * _canary(1) + 0.02 * rng.normal(size=_DIM)
  return initial, final


def test_delta_statistic_matches_brute_force(weights):
  initial, final = weights
  ids = [0, 1, 2, canary_spec.UNSEEN_ID_OFFSET]
  got = final_model.final_model_cosines(
      _structure(final), canary_seed=_SEED, canary_ids=ids,
      initial_weights=_structure(initial))
  want = [_cos(_canary(j), initial - final) for j in ids]
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  assert got[1] > 0.9  # The inserted canary, with the tff.learning sign.


def test_final_statistic_and_paper_sign(weights):
  initial, final = weights
  got = final_model.final_model_cosines(
      _structure(final), canary_seed=_SEED, canary_ids=[0, 1],
      statistic='final', model_moves_along=final_model.PAPER_DIRECTION)
  want = [_cos(_canary(j), final) for j in (0, 1)]
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
  # theta_0 dilutes the literal statistic and the paper's sign is the wrong
  # one for tff.learning, so the inserted canary scores lower than with the
  # default (delta, tff.learning sign).
  delta = final_model.final_model_cosines(
      _structure(final), canary_seed=_SEED, canary_ids=[1],
      initial_weights=_structure(initial))
  assert got[1] < delta[0]


def test_unseen_canaries_follow_the_null():
  # Any vector independent of the canaries gives the exact null cosine law
  # (Theorem 3.1): KS against the exact null CDF at level 0.01, fixed seeds.
  dim = 3000
  rng = np.random.default_rng(1)
  vector = [rng.normal(size=dim).astype(np.float32)]
  cosines = final_model.final_model_cosines(
      vector, canary_seed=_SEED, canary_ids=np.arange(500), statistic='final')
  assert stats.kstest(
      cosines, lambda x: null_distribution.null_cdf(x, dim)).pvalue > 0.01


def test_chunk_size_changes_cosines_only_by_rounding(weights):
  initial, final = weights
  args = dict(canary_seed=_SEED, canary_ids=np.arange(10),
              initial_weights=_structure(initial))
  np.testing.assert_allclose(
      final_model.final_model_cosines(_structure(final), chunk_size=1, **args),
      final_model.final_model_cosines(_structure(final), chunk_size=7, **args),
      rtol=0, atol=1e-7)


@pytest.mark.parametrize('kwargs, message', [
    (dict(statistic='delta', initial_weights=None), 'initial_weights'),
    (dict(statistic='middle'), 'statistic'),
    (dict(model_moves_along=0.5), 'model_moves_along'),
    (dict(canary_ids=[[0, 1]]), 'canary_ids'),
    (dict(canary_ids=[-1]), 'canary_ids'),
    (dict(canary_seed=-5), 'canary_seed'),
    (dict(chunk_size=0), 'chunk_size'),
    (dict(initial_weights=[np.zeros(3, np.float32)]), 'initial_weights'),
])
def test_bad_arguments_raise(weights, kwargs, message):
  initial, final = weights
  args = dict(canary_seed=_SEED, canary_ids=[0],
              initial_weights=_structure(initial))
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    final_model.final_model_cosines(_structure(final), **args)


def test_non_finite_weights_raise(weights):
  initial, final = weights
  final = final.copy()
  final[3] = np.nan
  with pytest.raises(ValueError, match='final_weights'):
    final_model.final_model_cosines(
        _structure(final), canary_seed=_SEED, canary_ids=[0],
        initial_weights=_structure(initial))
