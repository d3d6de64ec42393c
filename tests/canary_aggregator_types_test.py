"""Type signatures of the canary DP aggregation process (TFF conformance).

In the style of TFF's own `test_type_properties` for
`tff.aggregators.DifferentiallyPrivateFactory`: the exact
`initialize.type_signature` and `next.type_signature`, written out by hand,
for a tiny value type. The state starts with TFF's `DPAggregatorState` fields
(query_state, agg_state, dp_event, is_init_state) and the measurements with
TFF's (dp_query_metrics, dp); the canaries' fields follow. Only types are
built; no computation runs.
"""

import collections

import numpy as np
import pytest

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canary_aggregator as ca

tff = pytest.importorskip('tensorflow_federated')

_F32 = tff.TensorType(np.float32)
_STR = tff.TensorType(np.str_)
_GAUSSIAN_EVENT = tff.StructType([('module_name', _STR),
                                  ('class_name', _STR),
                                  ('noise_multiplier', _F32)])
_GAUSSIAN_SUM_STATE = tff.StructType([('l2_norm_clip', _F32),
                                      ('stddev', _F32)])


def _spec():
  return canary_spec.CanarySpec(seed=5, num_seen=2, num_unseen=3,
                                schedule=[[0], [1]])


def _normalized(numerator_state):
  return tff.StructType([('numerator_state', numerator_state),
                         ('denominator', _F32)])


def _fixed_query_state():
  return _normalized(_GAUSSIAN_SUM_STATE)


def _adaptive_query_state():
  quantile_state = tff.StructType([
      ('current_estimate', _F32), ('target_quantile', _F32),
      ('learning_rate', _F32),
      ('below_estimate_state', _normalized(_GAUSSIAN_SUM_STATE))])
  return _normalized(tff.StructType([
      ('noise_multiplier', _F32), ('sum_state', _GAUSSIAN_SUM_STATE),
      ('quantile_estimator_state', quantile_state)]))


def _adaptive_event():
  # ComposedDpEvent([update sum's GaussianDpEvent, count's GaussianDpEvent]).
  return tff.StructType([('module_name', _STR), ('class_name', _STR),
                         ('events', tff.StructType([_GAUSSIAN_EVENT,
                                                    _GAUSSIAN_EVENT]))])


def _state_type(query_state, dp_event, value_dim):
  fields = [('query_state', query_state), ('agg_state', tff.StructType([])),
            ('dp_event', dp_event),
            ('is_init_state', tff.TensorType(np.bool_)),
            ('round_num', tff.TensorType(np.int32)),
            ('aggregate', tff.TensorType(np.float32, [value_dim]))]
  return tff.FederatedType(tff.StructType(fields), tff.SERVER)


def _measurements_type(query_metrics):
  fields = [('dp_query_metrics', query_metrics),
            ('dp', tff.StructType([])), ('clip', _F32),
            ('canaries_inserted', tff.TensorType(np.int32)),
            ('aggregate_norm', _F32)]
  return tff.FederatedType(tff.StructType(fields), tff.SERVER)


def _check_type_properties(process, value_type, state_type, measurements):
  assert isinstance(process, tff.templates.AggregationProcess)
  expected_initialize = tff.FunctionType(parameter=None, result=state_type)
  assert process.initialize.type_signature.is_equivalent_to(
      expected_initialize), process.initialize.type_signature
  expected_next = tff.FunctionType(
      parameter=collections.OrderedDict(
          state=state_type,
          value=tff.FederatedType(value_type, tff.CLIENTS)),
      result=tff.templates.MeasuredProcessOutput(
          state=state_type,
          result=tff.FederatedType(value_type, tff.SERVER),
          measurements=measurements))
  assert process.next.type_signature.is_equivalent_to(expected_next), (
      process.next.type_signature)


def test_gaussian_fixed_type_properties():
  value_type = tff.TensorType(np.float32, [3])
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=1.0, clients_per_round=4.0, clip=0.5,
      spec=_spec())
  _check_type_properties(
      factory.create(value_type), value_type,
      _state_type(_fixed_query_state(), _GAUSSIAN_EVENT, 3),
      _measurements_type(tff.StructType([])))


def test_gaussian_adaptive_type_properties():
  # A small struct (as tff.learning's model updates, with a container):
  # d = 2 + 3.
  value_type = tff.StructWithPythonType(
      [('a', tff.TensorType(np.float32, [2])),
       ('b', tff.TensorType(np.float32, [3]))], collections.OrderedDict)
  factory = ca.CanaryDPFactory.gaussian_adaptive(
      noise_multiplier=1.0, clients_per_round=20.0,
      spec=_spec(), noise_seed=3)
  _check_type_properties(
      factory.create(value_type), value_type,
      _state_type(_adaptive_query_state(), _adaptive_event(), 5),
      _measurements_type(tff.StructType([('clip', _F32)])))


def test_types_match_tffs_own_factory():
  # The fields shared with tff.aggregators.DifferentiallyPrivateFactory have
  # exactly its types.
  value_type = tff.TensorType(np.float32, [3])
  ours = ca.CanaryDPFactory.gaussian_adaptive(
      noise_multiplier=1.0, clients_per_round=20.0,
      spec=_spec()).create(value_type)
  tffs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=1.0, clients_per_round=20.0).create(value_type)
  our_state = ours.initialize.type_signature.result.member
  tff_state = tffs.initialize.type_signature.result.member
  for name in ('query_state', 'agg_state', 'dp_event', 'is_init_state'):
    assert our_state[name].is_equivalent_to(tff_state[name]), name
  our_measurements = ours.next.type_signature.result.measurements.member
  tff_measurements = tffs.next.type_signature.result.measurements.member
  for name in ('dp_query_metrics', 'dp'):
    assert our_measurements[name].is_equivalent_to(tff_measurements[name])
