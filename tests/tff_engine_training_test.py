"""Tests of one_shot_epe.tff_engine.training and loop_managers: rounds, metrics.

Each round's client datasets depend on (seed, round) only, so a resumed run
trains on the data an uninterrupted one does; the compact metrics keep the
named scalars only, so no model-sized vector reaches the CSV or TensorBoard;
each optimizer name builds its own update rule (checked against the rule
written out by hand).
(Whole runs, resumed and not, are tested through the launcher: train_test.py,
train_resume_test.py.)
"""

import numpy as np
import pytest
import tensorflow as tf

from experiments import train
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.tff_engine import loop_managers
from one_shot_epe.tff_engine import training
import tiny_run


def test_round_datasets_depend_only_on_seed_and_round(tmp_path):
  # A resumed run must select round t's clients, and the examples each uses,
  # as an uninterrupted run does, whatever ran before it in the process. With
  # 3 of 8 examples per client, the examples used depend on the shuffle. (The
  # order of a client's batches is not compared: TFF's EMNIST preprocessing
  # maps batches in parallel, non-deterministically.)
  setup = train.prepare(tiny_run.config(str(tmp_path), client_batch_size=1,
                                        max_examples_per_client=3))

  def examples_used(select, round_num):
    return [sorted(int(batch[1][0]) for batch in dataset)
            for dataset in select(round_num)]

  def new_selection_fn():
    return training.selection_fn(
        setup.plan.sampler,
        setup.data.preprocessed_train_data.create_tf_dataset_for_client,
        setup.config.seed)

  seeded = new_selection_fn()
  first = examples_used(seeded, 2)
  for round_num in (1, 3, 1):
    seeded(round_num)
  assert examples_used(seeded, 2) == first
  assert examples_used(new_selection_fn(), 2) == first
  # Without the per-round seed, the shuffles (so the examples used) differ
  # between calls; all three clients agreeing by chance has probability about
  # (1 / C(8, 3))^3 = 6e-6.
  unseeded = participation.make_training_selection_fn(
      setup.plan.sampler,
      setup.data.preprocessed_train_data.create_tf_dataset_for_client)
  assert examples_used(unseeded, 2) != examples_used(unseeded, 2)


def test_compact_metrics_keeps_named_scalars_only():
  metrics = {'aggregator': {'clip': np.float32(0.5), 'update': np.zeros(7),
                            'inserted': np.int32(3)},
             'pair': (1.0, np.ones(2)), 'empty': ()}
  assert loop_managers.compact_metrics(metrics) == {
      'aggregator/clip': 0.5, 'aggregator/inserted': 3, 'pair/0': 1.0}


@pytest.mark.parametrize('name, momentum, want', [
    # w - lr g, twice.
    ('sgd', 0.0, [1.0 - 0.2 * 0.5]),
    # a = m a + g; w - lr a: a = 0.5, then 0.5 * 0.5 + 0.5 = 0.75.
    ('sgdm', 0.5, [1.0 - 0.1 * 0.5 - 0.1 * 0.75]),
    # Adam's first steps move each weight by about lr against the gradient.
    ('adam', 0.0, [1.0 - 0.2]),
])
def test_each_optimizer_name_builds_its_own_rule(name, momentum, want):
  optimizer = training.optimizer(run_plan.OptimizerSpec(name, 0.1, momentum))
  weights = (tf.constant([1.0]),)
  gradients = (tf.constant([0.5]),)
  state = optimizer.initialize((tf.TensorSpec([1], tf.float32),))
  for _ in range(2):
    state, weights = optimizer.next(state, weights, gradients)
  np.testing.assert_allclose(weights[0].numpy(), want, rtol=1e-3)
