"""Tests of DP-FTRL's tree aggregation on the JAX engine (`tree_noise`).

Independent truths: the rows rebuilt here from the nodes' own noise by the
tree's definition (each prefix's binary decomposition, Honaker's recursion
written out per node); the rows' covariance over rounds against the closed
form sigma^2 D A A^T D^T of a node-by-prefix matrix A built here by brute
force, whose diagonal is `accounting.tree_aggregation.tree_prefix_variance`
(the prefix variances the TFF engine's test measures); the TFF engine's own
aggregator's noise measured the same way (where TFF is installed: .venv);
the report's epsilons against the Gaussian mechanism's delta(eps) written
out with scipy; a resumed run against an uninterrupted one; and the
launcher's flags.

Error rates of the moment tests: an entry of an empirical covariance over d
i.i.d. coordinates has standard error sqrt((S_ii S_jj + S_ij^2) / d); each
entry is allowed 5 of them, a false failure of about 6e-7 per entry (normal
approximation), under 1e-4 over all the entries checked here. The seeds are
fixed, so each run of the suite gives the same verdict.
"""

import csv
import itertools
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
from scipy import stats

from experiments import train
from experiments import train_config
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import tree_aggregation
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import checkpoints
from one_shot_epe.jax_engine import support
from one_shot_epe.jax_engine import training
from one_shot_epe.jax_engine import tree_noise
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory

import tiny_jax
import tiny_run

# The moment tests: rounds, coordinates, node std.
ROUNDS, DIM, SIGMA = 7, 40_000, 1.5
# Standard errors an empirical covariance entry may be off by.
TOLERANCE = 5.0


def _node_values(rounds: int, efficient: bool) -> dict:
  """Each complete node's buffer value as coefficients of the own noises."""
  nodes = [(level, index) for level in range(rounds.bit_length())
           for index in range(rounds >> level)]
  column = {node: i for i, node in enumerate(nodes)}
  values = {}
  for level, index in nodes:  # Children before parents.
    value = np.zeros(len(nodes))
    value[column[(level, index)]] = 1.0
    if efficient and level > 0:
      value += 0.5 * (values[(level - 1, 2 * index)] +
                      values[(level - 1, 2 * index + 1)])
    values[(level, index)] = value
  return values


def _decomposition(prefix: int) -> list[tuple[int, int]]:
  """The nodes (level, index) whose rounds make up [0, prefix)."""
  nodes, start = [], 0
  for level in reversed(range(prefix.bit_length())):
    if prefix >> level & 1:
      nodes.append((level, start >> level))
      start += 1 << level
  return nodes


def _weight(level: int, efficient: bool) -> float:
  return 1.0 / (2.0 - 0.5**level) if efficient else 1.0


def _prefix_matrix(rounds: int, efficient: bool) -> np.ndarray:
  """A [T, nodes]: prefix p's noise in the nodes' own noises (brute force)."""
  values = _node_values(rounds, efficient)
  return np.array([sum(_weight(level, efficient) * values[(level, index)]
                       for level, index in _decomposition(prefix))
                   for prefix in range(1, rounds + 1)])


def _row_covariance(rounds: int, efficient: bool, sigma: float) -> np.ndarray:
  """sigma^2 D A A^T D^T: the rows P(t + 1) - P(t) over the T rounds."""
  difference = np.eye(rounds) - np.eye(rounds, k=-1)
  rows = difference @ _prefix_matrix(rounds, efficient)
  return sigma**2 * rows @ rows.T


def _standard_errors(truth: np.ndarray, count: int) -> np.ndarray:
  """An empirical covariance entry's standard error over `count` draws."""
  diagonal = np.diag(truth)
  return np.sqrt((np.outer(diagonal, diagonal) + truth**2) / count)


def _jax_rows(efficient: bool, seed: int = 0) -> np.ndarray:
  noise = tree_noise.TreeNoise(SIGMA, seed, efficient)
  return np.array([np.asarray(row, np.float64) for row in
                   itertools.islice(noise.rows(DIM, 0), ROUNDS)])


def _check_moments(rows: np.ndarray, efficient: bool) -> None:
  """The rows' covariance (and their prefix sums' variance) are the tree's."""
  truth = _row_covariance(ROUNDS, efficient, SIGMA)
  empirical = rows @ rows.T / rows.shape[1]
  errors = _standard_errors(truth, rows.shape[1])
  assert np.all(np.abs(empirical - truth) <= TOLERANCE * errors), (
      (empirical - truth) / errors)
  prefixes = np.cumsum(rows, axis=0)
  for prefix in range(1, ROUNDS + 1):
    variance = SIGMA**2 * tree_aggregation.tree_prefix_variance(prefix,
                                                                efficient)
    assert np.var(prefixes[prefix - 1]) == pytest.approx(
        variance, rel=TOLERANCE * math.sqrt(2 / rows.shape[1]))


@pytest.mark.parametrize('efficient', [True, False])
def test_the_closed_form_is_the_accountings_and_tells_the_estimators_apart(
    efficient):
  for rounds in (1, 2, 3, 7, 8, 13):
    prefix = _prefix_matrix(rounds, efficient)
    np.testing.assert_allclose(
        np.sum(prefix**2, axis=1),
        [tree_aggregation.tree_prefix_variance(p, efficient)
         for p in range(1, rounds + 1)], rtol=1e-12)
  # The moment tests have the power to reject the other estimator and
  # independent rounds of the same variances.
  truth = _row_covariance(ROUNDS, efficient, SIGMA)
  errors = _standard_errors(truth, DIM)
  other = _row_covariance(ROUNDS, not efficient, SIGMA)
  assert np.max(np.abs(other - truth) / errors) > 4 * TOLERANCE
  independent = np.diag(np.diag(truth))
  assert np.max(np.abs(independent - truth) / errors) > 4 * TOLERANCE


@pytest.mark.parametrize('efficient', [True, False])
def test_rows_are_the_differences_of_the_prefixes_node_noise(efficient):
  noise = tree_noise.TreeNoise(0.7, 11, efficient)
  rounds, dim = 13, 5
  node = {(level, index): np.asarray(noise.node(level, index, dim),
                                     np.float64)
          for level in range(rounds.bit_length())
          for index in range(rounds >> level)}
  values = {}
  for level, index in sorted(node):  # Levels in order: children first.
    values[(level, index)] = node[(level, index)] + (
        0.5 * (values[(level - 1, 2 * index)] +
               values[(level - 1, 2 * index + 1)])
        if efficient and level > 0 else 0.0)
  previous = np.zeros(dim)
  for prefix, row in zip(range(1, rounds + 1), noise.rows(dim, 0)):
    expected = sum(_weight(level, efficient) * values[(level, index)]
                   for level, index in _decomposition(prefix))
    np.testing.assert_allclose(np.asarray(row), expected - previous,
                               rtol=1e-5, atol=1e-5)
    previous = expected
  # Each node's noise is a pure function of (seed, node), and of its std.
  np.testing.assert_array_equal(
      np.asarray(tree_noise.TreeNoise(0.7, 11).node(2, 1, dim)), node[(2, 1)])
  np.testing.assert_allclose(
      np.asarray(tree_noise.TreeNoise(1.4, 11).node(2, 1, dim)),
      2 * node[(2, 1)], rtol=1e-6)
  assert not np.allclose(np.asarray(tree_noise.TreeNoise(0.7, 12).node(
      2, 1, dim)), node[(2, 1)])


@pytest.mark.parametrize('efficient', [True, False])
def test_rows_have_the_trees_covariance(efficient):
  _check_moments(_jax_rows(efficient), efficient)


def test_the_tff_aggregators_noise_has_the_same_law():
  # Where TFF is installed (.venv): its aggregator's rows, zero records,
  # times the cohort; both engines' against the closed form and each other.
  tf = pytest.importorskip('tensorflow')
  tff = pytest.importorskip('tensorflow_federated')
  from one_shot_epe.tff_engine import canary_aggregator  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import runtime  # pylint: disable=g-import-not-at-top
  clip, cohort = 0.5, 2.0
  spec = canary_spec.CanarySpec(seed=1, num_seen=1, num_unseen=0,
                                schedule=[[]] * ROUNDS)
  factory = canary_aggregator.CanaryDPFactory.tree_aggregation(
      noise_multiplier=SIGMA / clip, clients_per_round=cohort,
      l2_norm_clip=clip, record_specs=tf.TensorSpec([DIM], tf.float32),
      spec=spec, noise_seed=5)
  process = factory.create(tff.TensorType(np.float32, [DIM]))
  with runtime.local_cpp_context():
    state = process.initialize()
    tff_rows = []
    for _ in range(ROUNDS):
      output = process.next(state, [np.zeros(DIM, np.float32)])
      state = output.state
      tff_rows.append(np.asarray(output.result, np.float64) * cohort)
  tff_rows = np.array(tff_rows)
  _check_moments(tff_rows, efficient=True)
  jax_rows = _jax_rows(efficient=True)
  truth = _row_covariance(ROUNDS, True, SIGMA)
  difference = tff_rows @ tff_rows.T / DIM - jax_rows @ jax_rows.T / DIM
  assert np.all(np.abs(difference) <= TOLERANCE * math.sqrt(2) *
                _standard_errors(truth, DIM))


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match='noise_std'):
    tree_noise.TreeNoise(-1.0, 0)
  with pytest.raises(TypeError, match='efficient'):
    tree_noise.TreeNoise(1.0, 0, efficient=1)
  with pytest.raises(ValueError, match='first_round'):
    tree_noise.TreeNoise(1.0, 0).rows(4, -1)
  with pytest.raises(ValueError, match='dim'):
    tree_noise.TreeNoise(1.0, 0).rows(0, 0)


# The engine: the rows replace the round's Gaussian draw, in both strategies.

# Noise that drowns the clients' and canaries' sums, and a server step small
# enough that the model stays where its clients train well.
_Z, _CLIP, _SERVER_RATE = 1000.0, 1.0, 1e-3


def _plan(mechanism=mechanisms.TreeAggregation(), **overrides
          ) -> run_plan.RunPlan:
  settings = dict(
      sampler=participation.PoissonSampling(12, 4.0, seed=1),
      spec=canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                  schedule=[[0], [1, 2], [], [3], []],
                                  buffer_rounds=2),
      dp=canary_spec.DPAggregation(noise_multiplier=_Z, clients_per_round=4.8,
                                   clip=_CLIP),
      delta=1e-3,
      client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', _SERVER_RATE),
      batch_size=2, epochs=1, max_examples=None, total_rounds=5, seed=4,
      noise_seed=None, rounds_per_checkpoint=3, mechanism=mechanism)
  settings.update(overrides)
  return run_plan.RunPlan(**settings)


def _train(directory: str, local_training: str):
  plan = _plan()
  recorder = tiny_jax.Recorder()
  noise = tree_noise.TreeNoise(_Z * _CLIP, plan.seed)
  outcome = training.train(
      plan, tiny_jax.MODEL, tiny_jax.arrays(), None,
      checkpoints.TrainingStateCheckpoints(directory), recorder,
      local_training=local_training, noise_rows=noise.rows)
  norms = [event.metrics['aggregate_norm'] for event in recorder.events
           if isinstance(event, round_record.RoundRecord)]
  return outcome, norms


@pytest.fixture(scope='module', name='engine_runs')
def fixture_engine_runs(tmp_path_factory):
  return {strategy: _train(str(tmp_path_factory.mktemp(strategy)), strategy)
          for strategy in ('loop', 'vmap')}


@pytest.mark.parametrize('strategy', ['loop', 'vmap'])
def test_each_rounds_aggregate_carries_the_trees_row(engine_runs, strategy):
  outcome, norms = engine_runs[strategy]
  plan = _plan()
  rows = [np.asarray(row, np.float64) for row in itertools.islice(
      tree_noise.TreeNoise(_Z * _CLIP, plan.seed).rows(outcome.dim, 0),
      plan.total_rounds)]
  # The aggregate is (sum + row) / cohort: the row's norm up to the sum's
  # share (below 1e-4 here); an independent draw of the same variance, or
  # one added to the row, is off by percents (d is a few hundred).
  assert outcome.dim < 2000
  np.testing.assert_allclose(
      norms, [np.linalg.norm(row) / plan.dp.clients_per_round
              for row in rows], rtol=1e-3)
  # theta_0 - theta_T = rate (sum of the rows + the sums) / cohort: its
  # cosines are those of the final prefix sum's noise.
  expected = canaries.cosines(plan.spec.seed, plan.spec.tracked_ids(),
                              np.sum(rows, axis=0).astype(np.float32))
  np.testing.assert_allclose(outcome.final_cosines,
                             np.asarray(expected)[:plan.spec.num_seen],
                             atol=2e-3)


@pytest.mark.parametrize('strategy', ['loop', 'vmap'])
def test_a_resumed_engine_run_equals_an_uninterrupted_one(engine_runs,
                                                          strategy, tmp_path):
  whole, _ = engine_runs[strategy]
  directory = str(tmp_path)
  _train(directory, strategy)
  store = checkpoints.TrainingStateCheckpoints(directory)
  assert store.rounds() == [0, 3, 5]
  os.remove(os.path.join(directory, 'round_00000005.npz'))
  resumed, norms = _train(directory, strategy)
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (3, 2)
  assert len(norms) == 2
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima',
                'final_unseen_cosines'):
    np.testing.assert_array_equal(getattr(resumed, field),
                                  getattr(whole, field))


# The launcher (--backend=jax --mechanism=tree).


def _gaussian_delta(epsilon: float, mu: float) -> float:
  """delta(eps) of N(mu, 1) against N(0, 1) (Balle and Wang 2018, Thm. 8)."""
  return (stats.norm.cdf(-epsilon / mu + mu / 2) -
          math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2))


def _report(run_dir: str) -> dict:
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as stream:
    return json.load(stream)


# The TFF engine's tree run of tests/tree_mechanism_test.py, on the JAX engine.
_TREE_FLAGS = dict(mechanism='tree', clipping_norm=1.0, noise_multiplier=0.5,
                   total_rounds=2, rounds_per_checkpoint=2,
                   rounds_per_evaluation=2, canary_repeats=1, num_canaries=4,
                   num_unseen_canaries=4)


@pytest.mark.slow
def test_launcher_reports_the_trees_epsilons(tmp_path):
  result = train.run_training(tiny_run.config(str(tmp_path), backend='jax',
                                              **_TREE_FLAGS))
  report = _report(result.run_dir)
  z, delta = 0.5, report['delta']
  assert report['setting']['mechanism'] == 'tree'
  assert report['setting']['backend'] == 'jax'
  assert report['setting']['tree_estimator'] == 'efficient (Honaker 2015)'
  # As on the TFF engine: 2 rounds of 3 of 12 clients, one shuffled epoch;
  # a canary's round lies under 2 complete nodes ([t] and [0, 2)).
  assert _gaussian_delta(report['analytical_epsilon'],
                         math.sqrt(2) / z) == pytest.approx(delta, rel=1e-6)
  # A client once in the tree of depth 2: mu = sqrt(2) / z, exactly.
  assert _gaussian_delta(report['accounted_epsilon'],
                         math.sqrt(2) / z) == pytest.approx(delta, rel=1e-6)
  # The final model: the prefix at T = 2, one node, efficient weight 2 / 3.
  assert _gaussian_delta(report['last_iterate_epsilon'],
                         1 / (z * math.sqrt(2 / 3))) == pytest.approx(
                             delta, rel=1e-6)
  assert 'all_iterates_under_tree_noise' in report['setting']


def _launcher_config(root, **overrides):
  # Noise that drowns the sums (the rows' norms show in metrics.csv) and a
  # server step small enough for the clients.
  settings = dict(backend='jax', mechanism='tree', clipping_norm=2.0,
                  noise_multiplier=_Z, server_learning_rate=_SERVER_RATE,
                  seed=7, total_rounds=4, rounds_per_checkpoint=3,
                  canary_repeats=1, num_canaries=4, num_unseen_canaries=4,
                  run_name='run')
  settings.update(overrides)
  return tiny_run.config(str(root), **settings)


@pytest.mark.slow
def test_launcher_run_carries_the_trees_rows_and_resumes_exactly(tmp_path):
  whole = train.run_training(_launcher_config(tmp_path / 'whole'))
  with open(os.path.join(whole.run_dir, run_directory.METRICS_FILE),
            newline='', encoding='utf-8') as stream:
    norms = [float(row['aggregate_norm']) for row in csv.DictReader(stream)
             if int(row['round']) > 0]  # Round 0: the evaluation only.
  prepared = train.prepare(_launcher_config(tmp_path / 'other'))
  cohort = prepared.plan.dp.clients_per_round
  rows = itertools.islice(tree_noise.TreeNoise(_Z * 2.0, 7).rows(
      whole.outcome.dim, 0), 4)  # z S, --seed.
  np.testing.assert_allclose(
      norms, [float(np.linalg.norm(np.asarray(row, np.float64))) / cohort
              for row in rows], rtol=1e-3)
  # Killed after the checkpoint of round 3 and rerun: the same run.
  shutil.copytree(tmp_path / 'whole', tmp_path / 'cut')
  os.unlink(tmp_path / 'cut' / 'run' / run_directory.CHECKPOINT_DIR /
            'round_00000004.npz')
  resumed = train.run_training(_launcher_config(tmp_path / 'cut'))
  assert (resumed.resumed_from_round, resumed.rounds_trained) == (3, 1)
  for field in ('final_cosines', 'seen_maxima', 'unseen_maxima',
                'final_unseen_cosines'):
    np.testing.assert_array_equal(getattr(resumed, field),
                                  getattr(whole, field))
  with pytest.raises(train_config.ConfigError, match='--mechanism'):
    train.run_training(_launcher_config(tmp_path / 'cut',
                                        mechanism='gaussian'))


# Which plans the engine runs.


def test_the_engine_runs_the_tree_with_canaries_only():
  assert mechanisms.engine_reason(mechanisms.TreeAggregation(), 'jax') is None
  assert support.supports(_plan())
  assert support.supports(_plan(
      mechanism=mechanisms.TreeAggregation(efficient=False)))
  without = support.supports(_plan(spec=None))
  assert not without and 'canaries' in without.reason


@pytest.mark.parametrize('overrides, named', [
    (dict(clipping_norm=0.0), '--mechanism=tree needs a fixed clip'),
    (dict(num_canaries=0, num_unseen_canaries=0),
     '--backend=jax does not run --mechanism=tree with --num_canaries=0'),
])
def test_bad_tree_flags_are_refused_untouched(tmp_path, overrides, named):
  settings = dict(_TREE_FLAGS, backend='jax')
  settings.update(overrides)
  with pytest.raises(train_config.ConfigError, match=re.escape(named)):
    train.run_training(tiny_run.config(str(tmp_path), **settings))
  assert not os.listdir(tmp_path)
