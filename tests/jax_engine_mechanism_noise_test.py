"""The JAX engine's noise registry gives each mechanism's documented noise.

`mechanism_noise.NOISES` names each mechanism's rows and strategy by import
path; here each entry, resolved for a plan, is held to the noise written
out from its definition with the plan's own numbers: the tree's nodes of
std z S keyed by the plan's seed with the mechanism's estimator
(`tree_noise.TreeNoise`), jax-privacy's privatizer at z S sens(C) for the
strategy optimised for the run's rounds and participation (where
jax-privacy is installed), and none for independent Gaussian noise (the
round's own draw). Bit equality, from round 0 and from a resumed round.
"""

import importlib.util
import itertools

import numpy as np
import pytest

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import mechanism_noise
from one_shot_epe.jax_engine import tree_noise

_Z, _CLIP, _SEED, _ROUNDS, _DIM = 0.7, 1.5, 11, 6, 64


def _plan(mechanism: mechanisms.Mechanism) -> run_plan.RunPlan:
  return run_plan.RunPlan(
      sampler=participation.ShuffledEpochs(12, 4, seed=1),
      spec=canary_spec.CanarySpec(seed=3, num_seen=2, num_unseen=2,
                                  schedule=[[0], [], [1], [], [], []]),
      dp=canary_spec.DPAggregation(noise_multiplier=_Z, clients_per_round=4.5,
                                   clip=_CLIP),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', 1.0), batch_size=2,
      epochs=1, max_examples=None, total_rounds=_ROUNDS, seed=_SEED,
      noise_seed=None, rounds_per_checkpoint=3, mechanism=mechanism)


def _rows(rows, first_round: int, count: int = 3) -> np.ndarray:
  return np.array([np.asarray(row) for row in
                   itertools.islice(rows(_DIM, first_round), count)])


def test_independent_gaussian_noise_has_no_rows_and_no_strategy():
  plan = _plan(mechanisms.Gaussian())
  noise = mechanism_noise.noise_of(plan.mechanism)
  assert noise.noise_rows(plan) is None
  assert noise.correlated_strategy(plan) is None
  assert not noise.decorrelates and noise.requires is None


@pytest.mark.parametrize('efficient', [True, False])
def test_the_trees_rows_are_its_nodes_of_std_z_s_keyed_by_the_seed(efficient):
  plan = _plan(mechanisms.TreeAggregation(efficient=efficient))
  noise = mechanism_noise.noise_of(plan.mechanism)
  truth = tree_noise.TreeNoise(_Z * _CLIP, _SEED, efficient).rows
  for first_round in (0, 2):
    np.testing.assert_array_equal(_rows(noise.noise_rows(plan), first_round),
                                  _rows(truth, first_round))
  # The other estimator, or another seed, draws other rows.
  assert not np.array_equal(
      _rows(noise.noise_rows(plan), 1),
      _rows(tree_noise.TreeNoise(_Z * _CLIP, _SEED, not efficient).rows, 1))
  assert noise.correlated_strategy(plan) is None and not noise.decorrelates


@pytest.mark.skipif(importlib.util.find_spec('jax_privacy') is None,
                    reason='matrix-factorization noise needs jax-privacy')
def test_matrix_factorization_rows_are_the_privatizers_of_the_runs_strategy():
  # Banded (BLT's optimisation takes minutes; both take the same path).
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
  mechanism = mechanisms.MatrixFactorization('banded', 2)
  plan = _plan(mechanism)
  noise = mechanism_noise.noise_of(mechanism)
  assert noise.requires == 'jax_privacy' and noise.decorrelates
  # Shuffled epochs of 12 clients, 4 a round: 3 rounds an epoch, 2 epochs.
  strategy = correlated_noise.build_strategy(
      mechanism.strategy, _ROUNDS, correlated_noise.ParticipationBounds(1, 2),
      mechanism.num_bands)
  assert noise.correlated_strategy(plan) is strategy
  truth = correlated_noise.NoiseStream(correlated_noise.privatizer(
      strategy, _Z, _CLIP, seed=_SEED)).rows
  for first_round in (0, 2):
    np.testing.assert_array_equal(_rows(noise.noise_rows(plan), first_round),
                                  _rows(truth, first_round))
