"""What the canary aggregators share: their state, measurements, value types.

Both canary aggregation factories, DP-FedAvg's Gaussian one
(`canary_aggregator.CanaryDPFactory`) and distributed DP's
(`distributed_dp_aggregator.CanaryDistributedDPFactory`), create processes
with this module's state (`CanaryAggregatorState`) and measurements
(`CANARY_MEASUREMENTS`), over the value types `check_value_type` accepts.

Conformance with `tff.aggregators.DifferentiallyPrivateFactory` (TFF 0.87).
The state carries TFF's fields `query_state`, `agg_state` (the record
aggregation's state), `dp_event` (the `dp_accounting.DpEvent` that the DP
query's `get_noised_result` reported for the last round, as a named tuple) and
`is_init_state`; `extract_dp_event_from_state` returns the event, which an
accountant composes over rounds exactly as for TFF's own factory. The
measurements start with TFF's `dp_query_metrics` (the query's
`derive_metrics` after the round, e.g. the next adaptive clip) and `dp` (the
record aggregation's measurements).

The canaries' per-round measurements stay compact (no d-sized vectors): `clip`
(S_t, the clip applied this round), `canaries_inserted` and `aggregate_norm`
(||rho_bar_t||).
"""

from typing import Any, NamedTuple

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

__all__ = ['CANARY_MEASUREMENTS', 'CanaryAggregatorState', 'check_value_type',
           'extract_dp_event_from_state']

# The measurements of the canaries, after TFF's `dp_query_metrics` and `dp`.
CANARY_MEASUREMENTS = ('clip', 'canaries_inserted', 'aggregate_norm')


class CanaryAggregatorState(NamedTuple):
  """State of the canary aggregation process (placed at the server).

  The first four fields are those of TFF's `DPAggregatorState`.

  Attributes:
    query_state: Global state of the DP query (holds the current clip).
    agg_state: State of the record aggregation process.
    dp_event: `DpEvent.to_named_tuple()` of the last round's DP event (a
      placeholder in the initial state); see `extract_dp_event_from_state`.
    is_init_state: True in the state of `initialize`, False after a round.
    round_num: Number of completed rounds t (int32).
    aggregate: float32 [d], the noised aggregate rho_bar of the last round
      (zeros initially), for `cosine_tracking.CosineTracker.observe`.
  """
  query_state: Any
  agg_state: Any
  dp_event: Any
  is_init_state: Any
  round_num: Any
  aggregate: Any


def extract_dp_event_from_state(state: Any) -> dp_accounting.DpEvent:
  """The `DpEvent` of the round that produced `state`.

  The counterpart of TFF's `differential_privacy.extract_dp_event_from_state`
  for a state of a process created by a canary aggregation factory (e.g.
  `learning_state.aggregator` of a `tff.learning` process): the event that the
  DP query's `get_noised_result` reported for that round, which covers the
  canaries too (they are records of the same query). Compose the events of
  all rounds in a `dp_accounting` accountant for the run's guarantee.

  Args:
    state: A state returned by the process's `next()`, or an object with its
      fields `dp_event` and `is_init_state`.

  Returns:
    The round's `dp_accounting.DpEvent`.

  Raises:
    ValueError: for the state of `initialize()`, whose event is a placeholder
      (as TFF), or an object without the fields `dp_event`, `is_init_state`.
  """
  if not (hasattr(state, 'dp_event') and hasattr(state, 'is_init_state')):
    raise ValueError('state must be a state of a CanaryDPFactory process, '
                     "with fields 'dp_event' and 'is_init_state'; got "
                     f'{type(state).__name__}.')
  if bool(np.asarray(state.is_init_state)):
    raise ValueError(
        'state is the one returned by initialize(), whose DpEvent is a '
        'placeholder; pass a state returned by next().')
  return dp_accounting.DpEvent.from_named_tuple(state.dp_event)


def check_value_type(value_type: Any) -> Any:
  """The TensorSpecs of an aggregated value type (a factory's `create`).

  Args:
    value_type: The `tff.TensorType` or `tff.StructType` given to `create`.

  Returns:
    Its `tf.TensorSpec`s, in its structure.

  Raises:
    ValueError: unless it holds float32 tensors of fully defined shapes.
  """
  if not isinstance(value_type, (tff.TensorType, tff.StructType)):
    raise ValueError('value_type must be a tff.TensorType or tff.StructType of '
                     f'float32 tensors; got {value_type!r}.')
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  for spec in tf.nest.flatten(specs):
    if spec.dtype != tf.float32 or not spec.shape.is_fully_defined():
      raise ValueError('value_type must hold float32 tensors with fully '
                       f'defined shapes; got {value_type!r}.')
  return specs
