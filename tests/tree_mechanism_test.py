"""Tests of `--mechanism=tree` (DP-FTRL tree aggregation, TFF engine).

Independent truths: the tree's 0/1 node-by-round matrix built here by
brute force (a record's node shift; a client's largest shift over its
participation patterns, enumerated), the noise of the canary aggregator's own
tree process measured over many coordinates (the final prefix sum's
variance), the Gaussian mechanism's exact delta(eps) written out with
scipy (the analytical epsilons), dp_accounting's PLD accountant of a
Gaussian event and its RDP of the tree event (the accounted epsilon), and the launcher's flags, exit status and
report.json, whose references the JAX engine's run of the same flags
repeats (its noise's law: tests/jax_engine_tree_test.py).
"""

import dataclasses
import itertools
import json
import math
import os
import re
import sys
from typing import Any, NamedTuple

import dp_accounting
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf
import tensorflow_federated as tff

import programs
import tiny_run
from experiments import train
from experiments import train_config
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import run_directory
from one_shot_epe.accounting import tree_aggregation
from one_shot_epe.tff_engine import audit
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.tff_engine import runtime

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPLACE_SPECIAL = (
    dp_accounting.privacy_accountant.NeighboringRelation.REPLACE_SPECIAL)


def _tree_matrix(rounds: int) -> np.ndarray:
  """Brute force: one 0/1 row per node [j 2^l, (j + 1) 2^l) within T."""
  rows = []
  size = 1
  while size <= rounds:
    for start in range(0, rounds - size + 1, size):
      row = np.zeros(rounds)
      row[start:start + size] = 1.0
      rows.append(row)
    size *= 2
  return np.array(rows)


def _gaussian_delta(epsilon: float, mu: float) -> float:
  """delta(eps) of N(mu, 1) against N(0, 1) (Balle and Wang 2018, Thm. 8)."""
  return (stats.norm.cdf(-epsilon / mu + mu / 2) -
          math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2))


# The tree's numbers.


@pytest.mark.parametrize('rounds', [1, 2, 3, 5, 8, 13])
def test_node_norm_and_depth_match_the_tree_matrix(rounds):
  matrix = _tree_matrix(rounds)
  assert tree_aggregation.tree_depth(rounds) == len(
      {int(row.sum()) for row in matrix})
  rng = np.random.default_rng(rounds)
  for size in range(1, rounds + 1):
    chosen = rng.choice(rounds, size=size, replace=False)
    shift = matrix[:, chosen].sum(axis=1)
    assert tree_aggregation.tree_node_norm(chosen, rounds) == pytest.approx(
        np.linalg.norm(shift), rel=1e-12)
  schedule = [[0, 1], [1], [], [0, 2]][:rounds]
  tree = tree_aggregation.TreeAggregation.of_schedule(schedule, rounds)
  norms = [np.linalg.norm(matrix[:, [t for t, ids in enumerate(schedule)
                                     if j in ids]].sum(axis=1))
           for j in range(3)]
  assert tree.canary_node_norm == pytest.approx(max(norms), rel=1e-12)


def test_bad_record_rounds_are_refused():
  with pytest.raises(ValueError, match='record_rounds'):
    tree_aggregation.tree_node_norm([0, 0], 4)
  with pytest.raises(ValueError, match='record_rounds'):
    tree_aggregation.tree_node_norm([4], 4)


def test_final_prefix_noise_of_the_factory_has_the_tree_variance():
  # The noise a canary meets in the final model: the sum of the process's
  # aggregates over t rounds (zero records) is the prefix sum's tree noise
  # over the cohort; its variance over 40,000 coordinates estimates
  # v(t) (z S / n)^2 within 1.5% (standard error); 7% is 4.7 of them.
  # The efficient estimator (the launcher's); the plain sum of nodes below.
  efficient = True
  dim, z, clip, cohort, rounds = 40_000, 0.8, 0.5, 2.0, 7
  spec = canary_spec.CanarySpec(seed=1, num_seen=1, num_unseen=0,
                                schedule=[[]] * rounds)
  factory = canary_aggregator.CanaryDPFactory.tree_aggregation(
      noise_multiplier=z, clients_per_round=cohort, l2_norm_clip=clip,
      record_specs=tf.TensorSpec([dim], tf.float32), spec=spec, noise_seed=5,
      use_efficient=efficient)
  process = factory.create(tff.TensorType(np.float32, [dim]))
  zeros = [np.zeros(dim, np.float32)]
  with runtime.local_cpp_context():
    state = process.initialize()
    prefix = np.zeros(dim)
    for t in range(1, rounds + 1):
      output = process.next(state, zeros)
      state = output.state
      prefix += np.asarray(output.result, np.float64)
      expected = tree_aggregation.tree_prefix_variance(t, efficient)
      assert np.var(prefix) / (z * clip / cohort)**2 == pytest.approx(
          expected, rel=0.07)
  assert tree_aggregation.tree_prefix_variance(7, True) == pytest.approx(
      1 + 1 / 1.5 + 1 / 1.75)
  # The plain sum: one unit of variance per node of the prefix.
  for t in range(1, 40):
    assert tree_aggregation.tree_prefix_variance(t, False) == bin(t).count('1')


def test_analytical_epsilons_are_the_closed_form_gaussians():
  z, delta, rounds = 0.9, 1e-5, 6
  # Canary 0 in rounds 0 and 1 (nodes [0], [1], [0, 2), [0, 4): counts
  # 1, 1, 2, 2), canary 1 in round 5 (nodes [5], [4, 6)).
  tree = tree_aggregation.TreeAggregation.of_schedule(
      [[0], [0], [], [], [], [1]], rounds, efficient=False)
  assert tree.canary_node_norm == pytest.approx(math.sqrt(10))
  assert tree.canary_presentations == 2
  analytical = tree_aggregation.canary_epsilon(z, delta, tree).epsilon
  assert _gaussian_delta(analytical, math.sqrt(10) / z) == pytest.approx(
      delta, rel=1e-6)
  # Final model: the prefix at T = 6 = 0b110 is two nodes' noise (plain
  # sum), and canary 0 appears twice in the exact sum.
  final = tree_aggregation.final_model_epsilon(z, delta, tree, [2]).epsilon
  assert _gaussian_delta(final, 2 / (z * math.sqrt(2))) == pytest.approx(
      delta, rel=1e-6)
  assert final < analytical  # The final model is a post-processing.
  # Both canaries: the mixture of K = 2 and K = 1, below K = 2 alone.
  mixed = tree_aggregation.final_model_epsilon(z, delta, tree, [2, 1])
  assert mixed.epsilon == pytest.approx(dp_fedavg.last_iterate_epsilon(
      z * math.sqrt(2 / rounds), delta, rounds, [2, 1]).epsilon, rel=1e-12)
  assert mixed.epsilon < final
  assert math.isinf(tree_aggregation.canary_epsilon(0.0, delta, tree).epsilon)


# The accounted epsilon: the exact Gaussian of a client's largest shift.


def _rdp_epsilon(event: dp_accounting.DpEvent, delta: float,
                 relation=None) -> float:
  accountant = (dp_accounting.rdp.RdpAccountant() if relation is None else
                dp_accounting.rdp.RdpAccountant(neighboring_relation=relation))
  accountant.compose(event)
  return accountant.get_epsilon(delta)


def _pld_epsilon(noise_multiplier: float, delta: float) -> float:
  """dp_accounting's PLD of one Gaussian event (sensitivity 1)."""
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier))
  return accountant.get_epsilon(delta)


def _brute_force_shift(rounds: int, rounds_per_epoch: int) -> float:
  """max ||A (e_t1 + ... + e_tE)|| over one round per epoch, enumerated."""
  matrix = _tree_matrix(rounds)
  epochs = [range(start, min(start + rounds_per_epoch, rounds))
            for start in range(0, rounds, rounds_per_epoch)]
  return max(np.linalg.norm(matrix[:, list(pattern)].sum(axis=1))
             for pattern in itertools.product(*epochs))


def test_worst_case_node_norm_is_the_brute_force_maximum():
  checked = 0
  for rounds in range(1, 17):
    for per_epoch in range(1, rounds + 1):
      if per_epoch ** math.ceil(rounds / per_epoch) > 3000:
        continue
      assert tree_aggregation.worst_case_node_norm(
          rounds, per_epoch) == pytest.approx(
              _brute_force_shift(rounds, per_epoch), rel=1e-12), (
                  rounds, per_epoch)
      checked += 1
  assert checked > 80
  # Two epochs of trees not a power of two (the last epoch partial).
  for rounds in (21, 37, 50):
    per_epoch = math.ceil(rounds / 2)
    assert tree_aggregation.worst_case_node_norm(
        rounds, per_epoch) == pytest.approx(
            _brute_force_shift(rounds, per_epoch), rel=1e-12)
  # One epoch: sqrt(depth); one round per epoch: every round's shift.
  for rounds in (5, 64, 1000):
    assert tree_aggregation.worst_case_node_norm(
        rounds, rounds) == pytest.approx(math.sqrt(rounds.bit_length()))
  assert tree_aggregation.worst_case_node_norm(24, 1) == pytest.approx(
      np.linalg.norm(_tree_matrix(24).sum(axis=1)))
  with pytest.raises(ValueError, match='rounds_per_epoch'):
    tree_aggregation.worst_case_node_norm(8, 0)


def test_one_epoch_is_dp_accountings_tree_event_converted_exactly():
  z, delta, num_clients, per_round = 1.3, 1e-6, 40, 5
  # One shuffled epoch (8 rounds, depth 4): dp_accounting's tree event has
  # the RDP of one Gaussian at z / sqrt(4); the exact eps of that Gaussian
  # is its PLD's, below the RDP conversion.
  one_epoch = dp_fedavg.Participation('shuffle', per_round, num_clients, 8)
  got = tree_aggregation.client_epsilon(z, delta, 8, one_epoch)
  tree_event = _rdp_epsilon(
      dp_accounting.SingleEpochTreeAggregationDpEvent(z, 8), delta,
      _REPLACE_SPECIAL)
  assert _rdp_epsilon(dp_accounting.GaussianDpEvent(z / 2), delta,
                      _REPLACE_SPECIAL) == pytest.approx(tree_event, rel=1e-9)
  assert got.epsilon == pytest.approx(_pld_epsilon(z / 2, delta), rel=1e-3)
  assert got.epsilon < tree_event
  assert 'SingleEpochTreeAggregationDpEvent' in got.mechanism


@pytest.mark.slow
def test_epochs_are_accounted_at_their_worst_pattern():
  z, delta, num_clients, per_round = 1.3, 1e-6, 40, 5
  # Three epochs of 8 rounds in one tree of 24: the brute-force worst
  # pattern, below the old bound 3 sqrt(depth) = 3 sqrt(5).
  three = dp_fedavg.Participation('shuffle', per_round, num_clients, 24)
  got = tree_aggregation.client_epsilon(z, delta, 24, three)
  shift = _brute_force_shift(24, 8)
  assert shift < 3 * math.sqrt(5)
  assert got.epsilon == pytest.approx(_pld_epsilon(z / shift, delta),
                                      rel=1e-3)
  assert '3 shuffled epochs of 8 rounds' in got.mechanism
  # The settings: T = 8 and 16 rounds in 2 epochs, z = 1: shifts
  # sqrt(10) and sqrt(12) (the root counts 2), RDP 19.1 and 21.4 where the
  # old bound (the tree event at z / 2) gave 25.9 and 30.1.
  for rounds, squares, rdp, old in ((8, 10, 19.05, 25.93),
                                    (16, 12, 21.44, 30.13)):
    two = dp_fedavg.Participation('shuffle', 1, rounds // 2, rounds)
    got = tree_aggregation.client_epsilon(1.0, 1e-5, rounds, two)
    assert _brute_force_shift(rounds, rounds // 2)**2 == pytest.approx(squares)
    assert _rdp_epsilon(dp_accounting.GaussianDpEvent(squares**-0.5),
                        1e-5) == pytest.approx(rdp, abs=0.01)
    assert _rdp_epsilon(dp_accounting.SingleEpochTreeAggregationDpEvent(
        0.5, rounds), 1e-5, _REPLACE_SPECIAL) == pytest.approx(old, abs=0.01)
    assert got.epsilon == pytest.approx(_pld_epsilon(squares**-0.5, 1e-5),
                                        rel=1e-3)
  # Poisson sampling: no amplification, a client in every round: the
  # all-ones column sum of the tree matrix.
  poisson = dp_fedavg.Participation('poisson', per_round, num_clients, 24)
  got = tree_aggregation.client_epsilon(z, delta, 24, poisson)
  every = np.linalg.norm(_tree_matrix(24).sum(axis=1))
  assert got.epsilon == pytest.approx(_pld_epsilon(z / every, delta),
                                      rel=1e-3)
  assert 'does not amplify' in got.mechanism
  assert math.isinf(tree_aggregation.client_epsilon(0.0, delta, 24,
                                                    poisson).epsilon)


# CanaryAudit.report under tree aggregation.


class _LearningState(NamedTuple):
  """The two fields of a tff.learning state that `CanaryAudit` reads."""
  aggregator: Any
  global_model_weights: Any


def test_canary_audit_reports_tree_aggregation_without_a_noise_multiplier():
  # The audit's own factory, run as an aggregation process (zero client
  # updates); the model is theta_0 minus the aggregates, as server SGD.
  dim, rounds, z = 6, 3, 0.6
  spec = canary_spec.CanarySpec(seed=2, num_seen=2, num_unseen=2,
                                schedule=[[0], [1], [0]])
  dp = canary_spec.DPAggregation(noise_multiplier=z, clients_per_round=3.0,
                                 clip=0.5)
  canary_audit = audit.CanaryAudit.from_spec(spec, dp, delta=1e-3,
                                             noise_seed=4,
                                             mechanism=mechanisms.TreeAggregation())
  with pytest.raises(ValueError, match='record_specs'):
    canary_audit.aggregator()
  factory = canary_audit.aggregator(tf.TensorSpec([dim], tf.float32))
  process = factory.create(tff.TensorType(np.float32, [dim]))
  weights = np.ones(dim, np.float32)
  with runtime.local_cpp_context():
    state = process.initialize()
    canary_audit.observe(_LearningState(
        state, tff.learning.models.ModelWeights([weights], [])))
    for _ in range(rounds):
      output = process.next(state, [np.zeros(dim, np.float32)])
      state = output.state
      weights = weights - np.asarray(output.result, np.float32)
      canary_audit.observe(_LearningState(
          state, tff.learning.models.ModelWeights([weights], [])))
  report = canary_audit.report().to_dict()
  tree = tree_aggregation.TreeAggregation.of_schedule(spec.schedule, rounds)
  assert report['noise_multiplier'] == z
  assert report['setting']['mechanism'] == 'tree'
  assert report['analytical_epsilon'] == pytest.approx(
      tree_aggregation.canary_epsilon(z, 1e-3, tree).epsilon)
  assert report['last_iterate_epsilon'] == pytest.approx(
      tree_aggregation.final_model_epsilon(
          z, 1e-3, tree, spec.presentation_counts(rounds)).epsilon)
  # No participation given: a client in every round.
  assert report['accounted_epsilon'] == pytest.approx(
      tree_aggregation.client_epsilon(z, 1e-3, rounds, None).epsilon)


# The launcher (experiments/train.py).


# The launcher's tiny tree run (both engines run it).
_TREE_FLAGS = dict(mechanism='tree', clipping_norm=1.0, noise_multiplier=0.5,
                   total_rounds=2, rounds_per_checkpoint=2,
                   rounds_per_evaluation=2, canary_repeats=1, num_canaries=4,
                   num_unseen_canaries=4)


def _report(run_dir: str) -> dict[str, Any]:
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as stream:
    return json.load(stream)


@pytest.fixture(scope='module', name='tree_run')
def fixture_tree_run(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('tree'))
  return train.run_training(tiny_run.config(root, **_TREE_FLAGS))


@pytest.mark.slow
def test_launcher_reports_the_trees_epsilons(tree_run):
  report = _report(tree_run.run_dir)
  z, delta = 0.5, report['delta']
  # 2 rounds of 3 of 12 clients: one shuffled epoch.
  assert report['setting']['mechanism'] == 'tree'
  # Both rounds lie under 2 complete nodes ([t] and [0, 2)).
  assert _gaussian_delta(report['analytical_epsilon'],
                         math.sqrt(2) / z) == pytest.approx(delta, rel=1e-6)
  # A client once in the 2 rounds: the tree event's Gaussian at z / sqrt(2),
  # converted exactly.
  assert report['accounted_epsilon'] == pytest.approx(
      _pld_epsilon(z / math.sqrt(2), delta), rel=1e-3)
  # The final model: the prefix at T = 2, one node, efficient weight 2 / 3.
  assert _gaussian_delta(report['last_iterate_epsilon'],
                         1 / (z * math.sqrt(2 / 3))) == pytest.approx(
                             delta, rel=1e-6)
  with open(os.path.join(tree_run.run_dir,
                         run_directory.REPORT_MARKDOWN_FILE)) as stream:
    assert 'SingleEpochTreeAggregationDpEvent' in stream.read()


@pytest.mark.slow
def test_the_jax_engine_reports_the_same_references(tree_run, tmp_path):
  # The same flags on --backend=jax (where jax is installed): the same
  # facts, so the same references; the estimates are the run's own.
  pytest.importorskip('jax')
  jax_run = train.run_training(tiny_run.config(str(tmp_path), backend='jax',
                                               **_TREE_FLAGS))
  tff_report, jax_report = _report(tree_run.run_dir), _report(jax_run.run_dir)
  assert jax_report['setting']['backend'] == 'jax'
  for name in ('noise_multiplier', 'delta', 'analytical_epsilon',
               'accounted_epsilon', 'last_iterate_epsilon'):
    assert jax_report[name] == tff_report[name], name
  for name in ('mechanism', 'tree_estimator', 'all_iterates_under_tree_noise'):
    assert jax_report['setting'][name] == tff_report['setting'][name], name


@pytest.mark.slow
def test_resume_with_another_mechanism_is_refused(tree_run):
  changed = dataclasses.replace(tree_run.config, mechanism='gaussian')
  with pytest.raises(train_config.ConfigError, match='--mechanism'):
    train.run_training(changed)


@pytest.mark.parametrize('overrides, named', [
    (dict(backend='jax', num_canaries=0, num_unseen_canaries=0),
     '--backend=jax does not run --mechanism=tree with --num_canaries=0'),
    (dict(clipping_norm=0.0), '--mechanism=tree needs a fixed clip'),
    (dict(num_canaries=0, num_unseen_canaries=0),
     '--mechanism=tree with --num_canaries=0: the tree mechanism needs '
     'canaries'),
])
def test_bad_tree_flags_are_refused_untouched(tmp_path, overrides, named):
  settings = dict(mechanism='tree', clipping_norm=1.0)
  settings.update(overrides)
  with pytest.raises(train_config.ConfigError, match=re.escape(named)):
    train.run_training(tiny_run.config(str(tmp_path), **settings))
  assert not os.listdir(tmp_path)


def test_command_line_tree_without_canaries_on_jax_exits_2(tmp_path):
  done = programs.run(
      [sys.executable, '-m', 'experiments.train', '--use_synthetic_data',
       '--total_rounds=2', f'--root_output_dir={tmp_path}',
       '--mechanism=tree', '--backend=jax', '--clipping_norm=1',
       '--num_canaries=0', '--num_unseen_canaries=0'],
      cwd=_REPO, timeout=300)
  assert done.returncode == 2, done.stderr
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr
  assert '--mechanism=tree' in lines[0] and '--backend=jax' in lines[0]
  assert '--num_canaries=0' in lines[0]
  assert not os.listdir(tmp_path)
