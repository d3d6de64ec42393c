"""A round's canary records at the server, in TensorFlow (Algorithm 2, l. 7).

Every seen canary that the schedule names for round t becomes a record of
the round's DP query, as a client's update would: its unit direction
(`canaries.gaussian`) scaled to the round's clip S_t and passed through the
query's `preprocess_record`. `canary_spec.CanarySpec.canary_clip` picks the
scale: 'project' (the paper's text) is `project`, Proj(c_j; S_t), norm
exactly S_t as the query's clipping computes it (clipping is a no-op and the
adaptive clip counts it as unclipped); 'clip' (the paper's published code)
is `canary_spec.CLIPPED_CANARY_SCALE` x S_t, which the query's clipping
scales down to norm S_t (counted as clipped). `canary_sample_state` sums the
round's records into one sample state of the query, which the canary
aggregator merges into the clients' sum before noising
(`canary_aggregator.CanaryDPFactory`). Traced into TFF computations.
"""

from typing import Any

import tensorflow as tf
import tensorflow_privacy as tfp

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import dp_queries

__all__ = ['canary_sample_state', 'project']


def project(direction: tf.Tensor, clip: tf.Tensor, specs: Any) -> Any:
  """Proj(c; S) of Algorithm 2 packed into `specs`, with norm S.

  The scale S / ||u|| is stepped down by float32 ulps until the record's
  global norm, computed exactly as the query's clipping computes it, is
  <= S. The record's norm is then S up to float rounding, clipping leaves it
  unchanged, and the quantile estimate counts it as unclipped (norm <= S).

  Args:
    direction: float32 [d], the canary's direction u (any norm > 0).
    clip: The round's clip S, a float32 scalar.
    specs: The `tf.TensorSpec`s of the aggregated value.

  Returns:
    The record, in the structure of `specs`.
  """

  def record(scale):
    return canaries.unflatten(direction * scale, specs)

  def computed_norm(scale):
    return tf.linalg.global_norm(tf.nest.flatten(record(scale)))

  def step_down(scale):
    return (tf.minimum(
        tf.math.nextafter(scale, tf.zeros_like(scale)),
        scale * clip / computed_norm(scale)),)

  (scale,) = tf.while_loop(
      lambda scale: computed_norm(scale) > clip, step_down,
      (clip / tf.norm(direction),), maximum_iterations=32)
  return record(scale)


def canary_sample_state(query: tfp.SumAggregationDPQuery,
                        clip_from_params: dp_queries.ClipFromParams,
                        spec: canary_spec.CanarySpec, params: Any,
                        round_num: tf.Tensor, specs: Any,
                        dim: int) -> tuple[Any, tf.Tensor]:
  """Sum of the preprocessed canary records of the round, and their count.

  Args:
    query: The round's DP sum query.
    clip_from_params: Returns the round's clip norm from `params`.
    spec: The canaries and their schedule (rounds past its end insert none).
    params: The query's sample params of the round.
    round_num: The 0-based round t, an int32 scalar.
    specs: The `tf.TensorSpec`s of the aggregated value.
    dim: d, the value's number of elements.

  Returns:
    (the query's sample state of the records, the int32 count inserted).
  """
  ids_table, offsets = spec.schedule_table()
  num_scheduled = len(offsets) - 1
  start = tf.gather(offsets, tf.minimum(round_num, num_scheduled))
  end = tf.gather(offsets, tf.minimum(round_num + 1, num_scheduled))
  ids = tf.constant(ids_table, tf.int64)[start:end]
  clip = clip_from_params(params)

  def insert(i, total):
    direction = canaries.gaussian(spec.seed, ids[i], dim)
    if spec.canary_clip == 'project':
      record = project(direction, clip, specs)
    else:
      scale = canary_spec.CLIPPED_CANARY_SCALE * clip / tf.norm(direction)
      record = canaries.unflatten(direction * scale, specs)
    record = query.preprocess_record(params, record)
    return i + 1, query.accumulate_preprocessed_record(total, record)

  _, total = tf.while_loop(
      lambda i, _: i < end - start, insert,
      (tf.constant(0), query.initial_sample_state(specs)))
  return total, end - start
