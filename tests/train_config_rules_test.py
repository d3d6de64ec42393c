"""Each launcher flag that is a core parameter allows what the core allows.

For each flag of `experiments.train_config.TrainConfig` that is a parameter
of the core (its name, or the name of the core's argument it becomes, has a
rule in `validation.PARAMETERS` or in the `validation.fields` of
`run_plan.OptimizerSpec`, `run_plan.RunPlan`, `canary_spec.DPAggregation`,
`canary_spec.CanarySpec`, `dp_fedavg.Participation` or a mechanism), values
at and around the boundaries, of the flag's type, go to the launcher
(`TrainConfig.validate`) and to the core object that takes the value
(built here: an `OptimizerSpec`, a `DPAggregation`, a `CanarySpec`, a
`RunPlan`, a mechanism, or the rule of `validation.PARAMETERS` for the values
that only the library's functions take); both must accept the same ones.
"""

import math
from collections.abc import Callable
from typing import Any

import pytest

from experiments import train_config
from one_shot_epe import validation
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan

_INTS = (-1, 0, 1, 2, 3, 2**16, 2**16 + 1, 10**9, 10**9 + 1,
         2**31 - 10**9, 2**31 - 10**9 + 1, 2**31 - 1, 2**31, 2**32 - 1,
         2**32, 2**40)
_FLOATS = (-math.inf, -1.0, -1e-12, 0.0, 1e-12, 0.25, 0.5, 0.5 - 1e-12,
           1.0 - 1e-12, 1.0, 1.0 + 1e-12, 1.5, 2.0**31, math.inf, math.nan)
# A valid launch that each probe changes in one flag.
_BASE = dict(use_synthetic_data=True, total_rounds=10)


def _spec(**fields: Any) -> canary_spec.CanarySpec:
  return canary_spec.CanarySpec(**{'seed': 0, 'num_seen': 2, 'num_unseen': 2,
                                   **fields})


def _aggregation(**fields: Any) -> canary_spec.DPAggregation:
  return canary_spec.DPAggregation(**{'noise_multiplier': 0.0,
                                      'clients_per_round': 10.0, 'clip': 1.0,
                                      **fields})


def _plan(**fields: Any) -> run_plan.RunPlan:
  return run_plan.RunPlan(**{
      'sampler': participation.ShuffledEpochs(8, 4, seed=1),
      'total_rounds': 3, 'spec': None, 'dp': _aggregation(), 'delta': 1e-3,
      'client_optimizer': run_plan.OptimizerSpec('sgd', 0.1),
      'server_optimizer': run_plan.OptimizerSpec('sgd', 1.0), 'batch_size': 2,
      'epochs': 1, 'max_examples': None, 'seed': 0, 'noise_seed': None,
      **fields})


def _canary_count(field: str) -> Callable[[int], Any]:
  """0 (no canaries), or a count a CanarySpec takes whose cosines fit."""

  def core(count: int) -> Any:
    if count != 0:
      _spec(**{field: count})
      validation.PARAMETERS['cosines']('cosines', [0.0] * min(count, 2))
  return core


def _parameter(name: str) -> Callable[[Any], Any]:
  return lambda value: validation.PARAMETERS[name](name, value)


_DISTRIBUTED = dict(mechanism='distributed_dp', clipping_norm=1.0)
# Flag -> (its probes, the core taking the value (raises ValueError when it
# refuses it), the launch the probes change).
CORE = {
    'client_learning_rate': (
        _FLOATS, lambda value: run_plan.OptimizerSpec('sgd', value), {}),
    'server_learning_rate': (
        _FLOATS, lambda value: run_plan.OptimizerSpec('sgd', value), {}),
    'client_momentum': (
        _FLOATS, lambda value: run_plan.OptimizerSpec('sgdm', 0.1, value),
        {'client_optimizer': 'sgdm'}),
    'server_momentum': (
        _FLOATS, lambda value: run_plan.OptimizerSpec('sgdm', 0.1, value),
        {'server_optimizer': 'sgdm'}),
    'total_rounds': (_INTS, lambda value: _plan(total_rounds=value), {}),
    'rounds_per_checkpoint': (
        _INTS, lambda value: _plan(rounds_per_checkpoint=value), {}),
    'rounds_per_evaluation': (
        _INTS, lambda value: _plan(rounds_per_evaluation=value), {}),
    'noise_multiplier': (
        _FLOATS, lambda value: _aggregation(noise_multiplier=value), {}),
    # The expected real clients per round, a real > 0 in the library.
    'clients_per_round': (
        _INTS, lambda value: _aggregation(clients_per_round=value), {}),
    'clipping_norm': (  # 0: adaptive clipping, the aggregation's clip=None.
        _FLOATS, lambda value: _aggregation(clip=value or None), {}),
    'initial_clip': (
        _FLOATS, lambda value: _aggregation(initial_clip=value), {}),
    'target_unclipped_quantile': (
        _FLOATS, lambda value: _aggregation(target_unclipped_quantile=value),
        {}),
    'clip_learning_rate': (
        _FLOATS, lambda value: _aggregation(clip_learning_rate=value), {}),
    'num_canaries': (_INTS, _canary_count('num_seen'),
                     {'num_unseen_canaries': 0}),
    'num_unseen_canaries': (_INTS, _canary_count('num_unseen'), {}),
    'canary_repeats': (_INTS, lambda value: _spec(repetitions=value), {}),
    'canary_seed': (_INTS, lambda value: _spec(seed=value), {}),
    # canary_spec.MAX_SEED bounds every seed of a run, --seed's too.
    'seed': (_INTS, lambda value: canary_spec.check_seed(value, 'seed'), {}),
    'canary_buffer_rounds': (
        _INTS + (None,), lambda value: _spec(buffer_rounds=value), {}),
    'canary_clip': (('project', 'clip', 'scale', ''),
                    lambda value: _spec(canary_clip=value), {}),
    'all_iterates_statistic': (
        ('aggregate', 'model_delta', 'final', ''),
        lambda value: _spec(all_iterates_statistic=value), {}),
    'final_model_statistic': (
        ('delta', 'final', 'initial', ''),
        lambda value: _spec(final_model_statistic=value), {}),
    'sampling': (('shuffle', 'bernoulli', 'poisson', 'uniform', ''),
                 lambda value: dp_fedavg.Participation(
                     sampling=value, clients_per_round=2, num_clients=10,
                     rounds=1), {}),
    # The reports' delta and alpha (their lower bounds' alpha).
    'delta': (_FLOATS + (None,),
              lambda value: value is None or _parameter('delta')(value), {}),
    'alpha': (_FLOATS, _parameter('alpha'), {}),
    'synthetic_num_clients': (_INTS, _parameter('num_clients'), {}),
    'synthetic_examples_per_client': (
        _INTS, _parameter('examples_per_client'), {}),
    'vocab_size': (_INTS, _parameter('vocab_size'), {}),
    'embedding_size': (_INTS, _parameter('embedding_size'), {}),
    'lstm_size': (_INTS, _parameter('lstm_size'), {}),
    'num_bands': (_INTS, lambda value: mechanisms.from_name(
        'banded', num_bands=value), {'mechanism': 'banded',
                                     'clipping_norm': 1.0}),
    'ddp_bits': (_INTS, lambda value: mechanisms.from_name(
        'distributed_dp', ddp_bits=value), _DISTRIBUTED),
    'ddp_noise': (('dgauss', 'skellam', 'gauss', ''),
                  lambda value: mechanisms.from_name(
                      'distributed_dp', ddp_noise=value), _DISTRIBUTED),
}


def _accepts(check: Callable[[], Any]) -> bool:
  try:
    check()
  except ValueError:
    return False
  return True


def _ruled_names() -> set[str]:
  """Every parameter name with a rule in the core's registry or dataclasses."""
  classes = [run_plan.OptimizerSpec, run_plan.RunPlan,
             canary_spec.DPAggregation, canary_spec.CanarySpec,
             dp_fedavg.Participation, distributed_dp.DistributedDP]
  classes += [kind for kind in vars(mechanisms).values()
              if isinstance(kind, type) and hasattr(kind, 'rules')]
  names = set(validation.PARAMETERS)
  for kind in classes:
    names.update(kind.rules)
  return names


def test_every_flag_that_is_a_core_parameter_is_probed():
  flags = {field for field in train_config.TrainConfig.__dataclass_fields__}
  assert flags & _ruled_names() <= set(CORE)
  assert set(CORE) <= flags


@pytest.mark.parametrize('flag', sorted(CORE))
def test_the_launcher_accepts_exactly_what_the_core_accepts(flag):
  probes, core, launch = CORE[flag]
  disagreements = []
  for value in probes:
    config = train_config.TrainConfig(**{**_BASE, **launch, flag: value})
    launcher = _accepts(config.validate)
    if launcher != _accepts(lambda value=value: core(value)):
      disagreements.append(
          f'--{flag}={value!r}: the launcher '
          f'{"accepts" if launcher else "refuses"} it, the core '
          f'{"refuses" if launcher else "accepts"} it')
  assert not disagreements, '\n'.join(disagreements)


def test_a_refused_flag_is_named_with_its_rule():
  config = train_config.TrainConfig(**_BASE, client_momentum=1.0)
  with pytest.raises(train_config.ConfigError) as raised:
    config.validate()
  assert str(raised.value) == (
      '--client_momentum must be a finite number in [0.0, 1.0); got 1.0.')
  config = train_config.TrainConfig(**_BASE, clients_per_round=0)
  with pytest.raises(train_config.ConfigError,
                     match=r'^--clients_per_round must be >= 1; got 0\.$'):
    config.validate()
  config = train_config.TrainConfig(**_BASE, clipping_norm=-1.0)
  with pytest.raises(train_config.ConfigError, match=(
      r'^--clipping_norm must be a finite number > 0.0 or 0 for adaptive '
      r'clipping; got -1.0\.$')):
    config.validate()
