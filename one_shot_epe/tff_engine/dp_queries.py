"""The tensorflow_privacy DP queries of the canary aggregator's factories.

`canary_aggregator.CanaryDPFactory` clips, sums and noises records with a
tensorflow_privacy `SumAggregationDPQuery`, as TFF's
`tff.aggregators.DifferentiallyPrivateFactory` does; this module builds it
from the factory's arguments, with the round's clip norm read from the
query's sample params:

* DP-FedAvg (McMahan et al. 2018) at a fixed clip S: `GaussianSumQuery`
  (noise std z S), or at the adaptive clip of Andrew et al. 2021
  (`QuantileAdaptiveClipSumQuery`, geometric update towards a target
  quantile of the update norms), each seeded or not (`seeded_queries`) and
  normalised by the expected cohort (`NormalizedQuery`), as Andrew et al.
  (ICLR 2024, Sec. 4) audit it (`gaussian_query`);
* DP-FTRL's tree aggregation (Kairouz et al. 2021): `TreeResidualSumQuery`,
  as `DifferentiallyPrivateFactory.tree_aggregation` (`tree_query`).
"""

from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_privacy as tfp

from one_shot_epe import validation
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import seeded_queries

__all__ = ['ClipFromParams', 'dp_aggregation', 'gaussian_query',
           'tree_query']

# Reads the round's clip norm from a query's sample params.
ClipFromParams = Callable[[Any], tf.Tensor]

# TFF's names of the `canary_spec.DPAggregation` fields it names otherwise.
_TFF_ARGUMENT_NAMES = (('initial_clip', 'initial_l2_norm_clip'),
                       ('clip_learning_rate', 'learning_rate'))


def dp_aggregation(**fields: Any) -> canary_spec.DPAggregation:
  """`canary_spec.DPAggregation(**fields)`, its errors naming TFF's arguments.

  The dataclass is the one check of the DP arguments; the factory methods
  take TFF's names, so its message is rewritten to name the argument given.

  Args:
    **fields: The `canary_spec.DPAggregation` fields.

  Returns:
    The DP aggregation.

  Raises:
    ValueError: as `canary_spec.DPAggregation`, naming TFF's argument
      (`initial_l2_norm_clip`, `learning_rate`) where TFF names it so.
  """
  try:
    return canary_spec.DPAggregation(**fields)
  except ValueError as error:
    message = str(error)
    for field, argument in _TFF_ARGUMENT_NAMES:
      if message.startswith(f'{field} '):
        raise type(error)(argument + message[len(field):]) from None
    raise


def _fixed_clip(params: Any) -> tf.Tensor:
  """Clip norm in the sample params of NormalizedQuery(GaussianSumQuery)."""
  return params


def _adaptive_clip(params: Any) -> tf.Tensor:
  """Clip norm in the sample params of NormalizedQuery(QuantileAdaptive...)."""
  return params.sum_params


def _fixed_query(dp: canary_spec.DPAggregation,
                 seeded: bool) -> tfp.SumAggregationDPQuery:
  """The normalised Gaussian sum query of a fixed clip (`dp` checked)."""
  clip = float(dp.clip)
  stddev = clip * float(dp.noise_multiplier)
  if seeded:
    sum_query = seeded_queries.SeededGaussianSumQuery(
        l2_norm_clip=clip, stddev=stddev, stream=seeded_queries.UPDATE_STREAM)
  else:
    sum_query = tfp.GaussianSumQuery(l2_norm_clip=clip, stddev=stddev)
  return tfp.NormalizedQuery(sum_query,
                             denominator=float(dp.clients_per_round))


def _adaptive_query(dp: canary_spec.DPAggregation,
                    seeded: bool) -> tfp.SumAggregationDPQuery:
  """The normalised adaptive-clip query of `dp` (checked), geometric update."""
  query_class = (seeded_queries.SeededQuantileAdaptiveClipSumQuery if seeded
                 else tfp.QuantileAdaptiveClipSumQuery)
  clients_per_round = float(dp.clients_per_round)
  # tensorflow_privacy's argument order: initial clip, noise multiplier,
  # target quantile, learning rate, count stddev, expected records,
  # geometric update.
  return tfp.NormalizedQuery(
      query_class(float(dp.initial_clip), dp.update_noise_multiplier,
                  float(dp.target_unclipped_quantile),
                  float(dp.clip_learning_rate), float(dp.count_stddev),
                  clients_per_round, True),
      denominator=clients_per_round)


def gaussian_query(dp: canary_spec.DPAggregation, seeded: bool
                   ) -> tuple[tfp.SumAggregationDPQuery, ClipFromParams]:
  """DP-FedAvg's normalised query of a checked `dp`, and its clip reader.

  Args:
    dp: The DP aggregation (checked by its dataclass): a fixed clip, or
      the adaptive clip with the noise split of
      `canary_spec.value_noise_multiplier`.
    seeded: Whether the noise is drawn from the round's seed
      (`seeded_queries`) or by tensorflow_privacy's unseeded ops.

  Returns:
    The query, divided by `dp.clients_per_round`, and the function that
    reads the round's clip norm from its sample params.
  """
  if dp.adaptive:
    return _adaptive_query(dp, seeded), _adaptive_clip
  return _fixed_query(dp, seeded), _fixed_clip


@validation.arguments(
    'noise_multiplier', 'clients_per_round',
    l2_norm_clip=validation.Real(0.0, low_open=True),
    noise_seed=validation.Optional(canary_spec.SEED))
def tree_query(*, noise_multiplier: float, clients_per_round: float,
               l2_norm_clip: float, record_specs: Any, noise_seed: int | None,
               use_efficient: bool
               ) -> tuple[tfp.SumAggregationDPQuery, ClipFromParams]:
  """DP-FTRL's normalised tree query, as TFF's `tree_aggregation` builds it.

  Args:
    noise_multiplier: Noise std per tree node over `l2_norm_clip`, >= 0.
    clients_per_round: Expected records per round (> 0), the denominator.
    l2_norm_clip: The clip norm, > 0.
    record_specs: `tf.TensorSpec`s of the aggregated value.
    noise_seed: Seed of tensorflow_privacy's tree noise generator; None for
      a seed from the system time.
    use_efficient: Whether to use the efficient tree estimator (Honaker
      2015).

  Returns:
    `TreeResidualSumQuery.build_l2_gaussian_query(...)` divided by
    `clients_per_round`, and the function that reads the clip norm from its
    sample params.

  Raises:
    TypeError: for a `use_efficient` that is not a bool or `record_specs`
      that are not a structure of `tf.TensorSpec`.
    ValueError: for a number out of range (a `noise_seed` outside [0,
      canary_spec.MAX_SEED] included).
  """
  if not isinstance(use_efficient, bool):
    raise TypeError(f'use_efficient must be a bool; got {use_efficient!r}.')
  specs = tf.nest.flatten(record_specs)
  if not specs or not all(isinstance(s, tf.TensorSpec) for s in specs):
    raise TypeError('record_specs must be a structure of tf.TensorSpec; '
                    f'got {record_specs!r}.')
  sum_query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
      l2_norm_clip, noise_multiplier, record_specs, noise_seed=noise_seed,
      use_efficient=use_efficient)
  return (tfp.NormalizedQuery(sum_query, denominator=clients_per_round),
          _fixed_clip)
