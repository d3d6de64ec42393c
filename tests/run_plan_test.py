"""Tests of one_shot_epe.design.run_plan: the engine-neutral run and its optimizers.

Independent truths: the optimizers' state sizes written out from their update
rules (sgd keeps nothing, momentum one vector, adam two moments), and the
names the flags allow.
"""

import pytest

from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_options
from one_shot_epe.design import run_plan


def _plan(**overrides) -> run_plan.RunPlan:
  settings = dict(
      sampler=participation.ShuffledEpochs(8, 4, seed=1), total_rounds=3,
      spec=canary_spec.CanarySpec(seed=0, num_seen=2, num_unseen=2,
                                  schedule=[[0], [1], []]),
      dp=canary_spec.DPAggregation(noise_multiplier=0.1,
                                   clients_per_round=4.0),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgdm', 1.0, 0.9),
      batch_size=2, epochs=1, max_examples=None, seed=0, noise_seed=None)
  settings.update(overrides)
  return run_plan.RunPlan(**settings)


def test_slots_are_the_vectors_each_update_rule_keeps():
  assert run_options.OPTIMIZERS == ('sgd', 'sgdm', 'adam')
  assert [run_plan.OptimizerSpec(name, 0.1).slots
          for name in run_options.OPTIMIZERS] == [0, 1, 2]


@pytest.mark.parametrize('name', ['adagrad', 'Adam', '', None])
def test_an_unknown_optimizer_is_an_error_naming_the_allowed(name):
  with pytest.raises(ValueError) as caught:
    run_plan.OptimizerSpec(name, 0.1)
  assert str(caught.value) == (
      "optimizer name must be one of ['sgd', 'sgdm', 'adam']; "
      f'got {name!r}.')


def test_momentum_belongs_to_sgdm_only():
  assert run_plan.OptimizerSpec('sgdm', 0.1, 0.9).momentum == 0.9
  with pytest.raises(ValueError, match='momentum applies to sgdm only'):
    run_plan.OptimizerSpec('adam', 0.1, 0.9)
  with pytest.raises(ValueError, match='learning_rate'):
    run_plan.OptimizerSpec('sgd', -1.0)


def test_plan_checks_its_rounds_against_the_schedule():
  assert _plan().spec.num_seen == 2
  assert _plan(spec=None).spec is None  # A run without canaries.
  with pytest.raises(ValueError, match='spec.schedule must cover the 4'):
    _plan(total_rounds=4)
  with pytest.raises(ValueError, match='rounds_per_checkpoint'):
    _plan(rounds_per_checkpoint=0)


def test_run_facts_are_the_plans():
  plan = _plan(spec=canary_spec.CanarySpec(
      seed=0, num_seen=2, num_unseen=2, schedule=[[0, 1], [1], [1]],
      repetitions=2))
  facts = plan.run_facts(dim=50)
  assert (facts.noise_multiplier, facts.delta, facts.dim,
          facts.canary_presentations, facts.rounds, facts.clip,
          facts.cohort) == (0.1, 1e-3, 50, 2, 3, None, 4.0)
  # Canary 1 is in all three rounds of the schedule, canary 0 in one.
  assert facts.presentation_counts.tolist() == [1, 3]
  assert [list(ids) for ids in facts.schedule] == [[0, 1], [1], [1]]
  assert facts.participation == plan.client_participation
  assert facts.correlated is None
  without = _plan(spec=None).run_facts(dim=50)
  assert (without.canary_presentations, without.presentation_counts,
          without.schedule) == (1, None, None)
