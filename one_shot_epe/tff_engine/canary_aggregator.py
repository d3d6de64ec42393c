"""DP-FedAvg aggregation that inserts canary clients and tracks their cosines.

Implements the server side of Algorithms 2 and 3 of Andrew et al., "One-shot
Empirical Privacy Estimation for Federated Learning" (ICLR 2024, Sec. 4) as a
`tff.aggregators.UnweightedAggregationFactory`, so it plugs into
`tff.learning.algorithms.build_unweighted_fed_avg(..., model_aggregator=...)`
unchanged.

Each round t (0-based count of `next` calls):

1. Real clients clip their updates with the DP query of DP-FedAvg (McMahan et
   al. 2018): fixed clip S (`GaussianSumQuery`) or the adaptive clip of Andrew
   et al. 2021 (`QuantileAdaptiveClipSumQuery`, geometric update of S towards a
   target quantile of update norms), both normalised by the expected number of
   clients per round (`NormalizedQuery`), as
   `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed/_adaptive` do;
   or DP-FTRL's tree aggregation (`tree_aggregation`, tensorflow_privacy's
   `TreeResidualSumQuery`, as `DifferentiallyPrivateFactory.tree_aggregation`;
   `dp_queries` builds the queries).
   The clipped records are aggregated over clients by the process of
   `record_aggregation_factory` (default `tff.aggregators.SumFactory`; any
   factory that sums without raising the records' sensitivity, as in TFF).
2. At the server, every seen canary that the schedule names for round t
   becomes a record and goes through the same query's `preprocess_record` as
   a client's update would (`canary_records`: 'project', the paper's text,
   `Proj(c_j; S_t)` of Algorithm 2, line 7, counted as unclipped; or 'clip',
   the paper's published code, counted as clipped), and its record is merged
   into the clients' sum before `get_noised_result`, so it is noised with
   everything else (noise std = noise multiplier x S_t).
3. The noised average rho_bar_t (Algorithm 3, line 9) is the process result.
   The state exposes it (`aggregator_state.CanaryAggregatorState.aggregate`)
   for `cosine_tracking.CosineTracker`, which keeps every canary's running
   maximum cosine with it (Algorithm 3, lines 10-16) outside the TFF state.

The process's state and measurements are TFF's, then the canaries'
(`aggregator_state`, which also reads a state's DP event for accounting:
`aggregator_state.extract_dp_event_from_state`), as for distributed DP
(`distributed_dp_aggregator.CanaryDistributedDPFactory`).

Sign convention: the result is the noised mean *update* of `tff.learning`
(initial - trained weights), which the server optimizer subtracts; it
contains +c, so inserted canaries have positive cosines with it.
"""

import collections
import contextlib
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from one_shot_epe import validation
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import canary_records
from one_shot_epe.tff_engine import dp_queries
from one_shot_epe.tff_engine import seeded_queries

__all__ = ['CanaryDPFactory']

class CanaryDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """DP-FedAvg Gaussian aggregation with canary insertion.

  Build it with `from_spec`, `gaussian_fixed`, `gaussian_adaptive` or
  `tree_aggregation`, which check their arguments once; see the module
  docstring for what the created process does. The aggregated value must be a
  structure of float32 tensors with fully defined shapes (model updates).
  """

  @classmethod
  def from_spec(cls, dp: canary_spec.DPAggregation,
                spec: canary_spec.CanarySpec, noise_seed: int | None = None,
                record_aggregation_factory: (
                    tff.aggregators.UnweightedAggregationFactory | None
                ) = None) -> 'CanaryDPFactory':
    """The factory of a run's DP aggregation and canary plan.

    A fixed clip S (`dp.clip` set): noise std z S. Adaptive clipping: the
    geometric update of Andrew et al. (2021) with the noise split of
    `canary_spec.value_noise_multiplier`. Either way the noised sum is
    divided by `dp.clients_per_round`.

    Args:
      dp: The DP aggregation (validated by `canary_spec.DPAggregation`).
      spec: Canaries, schedule and tracking parameters.
      noise_seed: If set, round t's noise is a pure function of
        (noise_seed, t) (`seeded_queries`); None for tensorflow_privacy's
        unseeded noise.
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`; see `__init__`).

    Returns:
      The factory.

    Raises:
      TypeError: if `dp` is not a `canary_spec.DPAggregation` (and as
        `__init__`).
      ValueError: as `__init__`.
    """
    if not isinstance(dp, canary_spec.DPAggregation):
      raise TypeError(f'dp must be a canary_spec.DPAggregation; got {dp!r}.')
    query, clip_from_params = dp_queries.gaussian_query(
        dp, noise_seed is not None)
    return cls(query, clip_from_params, spec, noise_seed,
               record_aggregation_factory, dp=dp)

  @classmethod
  def gaussian_fixed(cls, *, noise_multiplier: float, clients_per_round: float,
                     clip: float, spec: canary_spec.CanarySpec,
                     noise_seed: int | None = None,
                     record_aggregation_factory: (
                         tff.aggregators.UnweightedAggregationFactory | None
                     ) = None) -> 'CanaryDPFactory':
    """Fixed clip S, noise std noise_multiplier * S, mean over the cohort.

    `from_spec` of `canary_spec.DPAggregation(noise_multiplier,
    clients_per_round, clip=clip)`, with TFF's argument names; see there.

    Args:
      noise_multiplier: z >= 0, the noise std over the clip.
      clients_per_round: The expected records per round (> 0), the
        denominator of the mean.
      clip: The fixed L2 clip S > 0.
      spec: Canaries, schedule and tracking parameters.
      noise_seed: As `from_spec`.
      record_aggregation_factory: As `from_spec`.

    Returns:
      The factory.

    Raises:
      TypeError: as `from_spec`.
      ValueError: as `canary_spec.DPAggregation` and `from_spec`.
    """
    dp = dp_queries.dp_aggregation(noise_multiplier=noise_multiplier,
                         clients_per_round=clients_per_round, clip=clip)
    return cls.from_spec(dp, spec, noise_seed, record_aggregation_factory)

  @classmethod
  def gaussian_adaptive(cls, *, noise_multiplier: float,
                        clients_per_round: float, spec: canary_spec.CanarySpec,
                        initial_l2_norm_clip: float = 0.1,
                        target_unclipped_quantile: float = 0.5,
                        learning_rate: float = 0.2,
                        clipped_count_stddev: float | None = None,
                        noise_seed: int | None = None,
                        record_aggregation_factory: (
                            tff.aggregators.UnweightedAggregationFactory | None
                        ) = None) -> 'CanaryDPFactory':
    """Adaptive clip (Andrew et al. 2021, geometric update), TFF's defaults.

    Each round S <- S exp(-learning_rate (b - target_unclipped_quantile)),
    where b is the noised fraction of records (clients and canaries) with norm
    <= S, normalised by clients_per_round and clamped to [0, 1].
    `noise_multiplier` is the overall noise multiplier: the update sum gets
    `canary_spec.value_noise_multiplier(noise_multiplier,
    clipped_count_stddev)` times S, slightly more (see that function).
    `clipped_count_stddev` defaults to 0.05 * clients_per_round (0 when
    noise_multiplier is 0). `from_spec` of the `canary_spec.DPAggregation` of
    these arguments (TFF's names); see there for the rest.

    Args:
      noise_multiplier: z >= 0, the overall noise multiplier.
      clients_per_round: The expected records per round (> 0), the
        denominator of the mean and of the clipped fraction b.
      spec: Canaries, schedule and tracking parameters.
      initial_l2_norm_clip: The first round's clip S_0 > 0.
      target_unclipped_quantile: The targeted fraction of unclipped records,
        in (0, 1).
      learning_rate: The geometric update's rate, >= 0.
      clipped_count_stddev: The noise std of the unclipped count, > z / 2
        when set; None for TFF's default (above).
      noise_seed: If set, each round's noise (of the sum and of the count)
        is a pure function of (noise_seed, t); see `from_spec`.
      record_aggregation_factory: Sums the clipped records (`from_spec`).

    Returns:
      The factory, its clip adapting each round.

    Raises:
      ValueError: as `canary_spec.DPAggregation` (naming TFF's arguments)
        and `from_spec`.
      TypeError: as `from_spec`.
    """
    dp = dp_queries.dp_aggregation(
        noise_multiplier=noise_multiplier, clients_per_round=clients_per_round,
        initial_clip=initial_l2_norm_clip,
        target_unclipped_quantile=target_unclipped_quantile,
        clip_learning_rate=learning_rate,
        clipped_count_stddev=clipped_count_stddev)
    return cls.from_spec(dp, spec, noise_seed, record_aggregation_factory)

  @classmethod
  def tree_aggregation(cls, *, noise_multiplier: float,
                       clients_per_round: float, l2_norm_clip: float,
                       record_specs: Any, spec: canary_spec.CanarySpec,
                       noise_seed: int | None = None,
                       use_efficient: bool = True,
                       record_aggregation_factory: (
                           tff.aggregators.UnweightedAggregationFactory | None
                       ) = None) -> 'CanaryDPFactory':
    """DP-FTRL's tree-aggregated noise, as TFF's `tree_aggregation`.

    tensorflow_privacy's `TreeResidualSumQuery` (Kairouz et al. 2021,
    "Practical and Private (Deep) Learning without Sampling or Shuffling")
    clips records to `l2_norm_clip`, adds to the running sum of records the
    noise of a binary tree (std `l2_norm_clip * noise_multiplier` per node;
    the efficient estimator of Honaker 2015 with `use_efficient`) and releases
    the residual between consecutive noised running sums, divided by
    `clients_per_round`. Canaries are records of this query like any other
    (Proj(c_j; l2_norm_clip), Algorithm 2 line 7). The noise is correlated
    across rounds, so tensorflow_privacy reports an `UnsupportedDpEvent`:
    account for it with the tree accountant, not as a Gaussian mechanism.

    Args:
      noise_multiplier: Noise std per tree node over `l2_norm_clip`, >= 0.
      clients_per_round: Expected records per round (> 0), the denominator.
      l2_norm_clip: The clip norm, > 0.
      record_specs: `tf.TensorSpec`s of the aggregated value (the tree's noise
        has this structure; must match the value type given to `create`).
      spec: Canaries, schedule and tracking parameters.
      noise_seed: Seed of tensorflow_privacy's tree noise generator, which
        makes the noise of every round reproducible; None for a seed from the
        system time.
      use_efficient: Whether to use the efficient tree estimator.
      record_aggregation_factory: Sums the clipped records (default
        `tff.aggregators.SumFactory`; see `__init__`).

    Returns:
      The factory.

    Raises:
      TypeError: as `dp_queries.tree_query` and `__init__`.
      ValueError: as `dp_queries.tree_query`.
    """
    query, clip_from_params = dp_queries.tree_query(
        noise_multiplier=noise_multiplier,
        clients_per_round=clients_per_round, l2_norm_clip=l2_norm_clip,
        record_specs=record_specs, noise_seed=noise_seed,
        use_efficient=use_efficient)
    return cls(query, clip_from_params, spec, None,
               record_aggregation_factory)

  @validation.arguments(noise_seed=validation.Optional(canary_spec.SEED))
  def __init__(self, query: tfp.SumAggregationDPQuery,
               clip_from_params: dp_queries.ClipFromParams,
               spec: canary_spec.CanarySpec, noise_seed: int | None = None,
               record_aggregation_factory: (
                   tff.aggregators.UnweightedAggregationFactory | None
               ) = None, *, dp: canary_spec.DPAggregation | None = None):
    """Low-level constructor; prefer the class methods.

    Args:
      query: The DP sum query whose `preprocess_record` clips records.
      clip_from_params: Returns the round's clip norm from the query's sample
        params.
      spec: Canaries, schedule and tracking parameters.
      noise_seed: If set, the seed of the round seeds that `query` (built from
        `seeded_queries`) draws its noise from; None for other queries.
      record_aggregation_factory: Aggregates the clients' preprocessed
        records, as in `tff.aggregators.DifferentiallyPrivateFactory`: None
        for `tff.aggregators.SumFactory`; another factory must implement a sum
        that does not increase the records' sensitivity (e.g. secure
        aggregation). The canaries' records are added at the server after it.
      dp: The Gaussian DP aggregation `query` implements (`from_spec`), for
        accounting; None for another query.

    Raises:
      TypeError: for a `query`, `spec` or `record_aggregation_factory` of the
        wrong type.
      ValueError: if `noise_seed` is not in [0, canary_spec.MAX_SEED].
    """
    if not isinstance(query, tfp.SumAggregationDPQuery):
      raise TypeError(
          f'query must be a tfp.SumAggregationDPQuery; got {query!r}.')
    if not isinstance(spec, canary_spec.CanarySpec):
      raise TypeError(
          f'spec must be a canary_spec.CanarySpec; got {spec!r}.')
    if record_aggregation_factory is None:
      record_aggregation_factory = tff.aggregators.SumFactory()
    if not isinstance(record_aggregation_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError('record_aggregation_factory must be a '
                      'tff.aggregators.UnweightedAggregationFactory or None; '
                      f'got {record_aggregation_factory!r}.')
    self._query = query
    self._record_aggregation_factory = record_aggregation_factory
    self._noise_seed = noise_seed
    self._clip_from_params = clip_from_params
    self._spec = spec
    self._dp = dp

  @property
  def dp(self) -> canary_spec.DPAggregation | None:
    """The Gaussian DP aggregation of the query; None for tree aggregation."""
    return self._dp

  @property
  def spec(self) -> canary_spec.CanarySpec:
    """The canaries, schedule and tracking this factory was built with."""
    return self._spec

  # --------------------------------------------------------------------------
  # TensorFlow building blocks (traced into TFF computations).

  def _core_fields(self) -> tuple[str, ...]:
    """State fields computed in TensorFlow: all but the record aggregation's."""
    return tuple(name for name in aggregator_state.CanaryAggregatorState._fields
                 if name != 'agg_state')

  def _noised_result(self, sample_state: Any, query_state: Any,
                     round_num: tf.Tensor) -> tuple[Any, Any, Any]:
    """The query's `get_noised_result`, in round `round_num`'s seed scope."""
    if self._noise_seed is None:
      noise_scope = contextlib.nullcontext()
    else:
      noise_scope = seeded_queries.noise_seed_scope(
          seeded_queries.round_seed(self._noise_seed, round_num))
    with noise_scope:
      return self._query.get_noised_result(sample_state, query_state)

  def _initial_core(self, specs: Any,
                    dim: int) -> collections.OrderedDict[str, Any]:
    """The initial state's `_core_fields()` (traced in TensorFlow).

    As in TFF's factory, the initial `dp_event` is that of a round on an
    empty sample: a placeholder of the right type, never to be accounted.
    """
    query_state = self._query.initial_global_state()
    round_num = tf.constant(0, tf.int32)
    _, _, event = self._noised_result(
        self._query.initial_sample_state(specs), query_state, round_num)
    core = dict(query_state=query_state, dp_event=event.to_named_tuple(),
                is_init_state=tf.constant(True), round_num=round_num,
                aggregate=tf.zeros([dim], tf.float32))
    return collections.OrderedDict(
        (name, core[name]) for name in self._core_fields())

  def _server_update(self, client_sum: Any, core: Any, specs: Any, dim: int):
    """Inserts canaries and noises; returns core, result, measurements.

    `core` holds the state's `_core_fields()`; so does the new core.
    """
    query_state, round_num = core['query_state'], core['round_num']
    params = self._query.derive_sample_params(query_state)
    canary_sum, inserted = canary_records.canary_sample_state(
        self._query, self._clip_from_params, self._spec, params, round_num,
        specs, dim)
    result, new_query_state, event = self._noised_result(
        self._query.merge_sample_states(client_sum, canary_sum), query_state,
        round_num)
    flat = canaries.flatten(result)
    measurements = collections.OrderedDict(
        clip=tf.cast(self._clip_from_params(params), tf.float32),
        canaries_inserted=inserted,
        aggregate_norm=tf.norm(flat))
    new_core = dict(query_state=new_query_state,
                    dp_event=event.to_named_tuple(),
                    is_init_state=tf.constant(False),
                    round_num=round_num + 1, aggregate=flat)
    new_core = collections.OrderedDict(
        (name, new_core[name]) for name in self._core_fields())
    return new_core, result, measurements

  # --------------------------------------------------------------------------
  # TFF process.

  def create(self, value_type: Any) -> tff.templates.AggregationProcess:
    """Builds the `tff.templates.AggregationProcess` for `value_type`.

    The structure follows `tff.aggregators.DifferentiallyPrivateFactory.
    create`: clients preprocess (clip) their values with the query's sample
    params, the record aggregation process sums them, and the server adds the
    canaries' records and calls `get_noised_result`.

    Args:
      value_type: The `tff.TensorType` or `tff.StructType` of the aggregated
        value: float32 tensors of fully defined shapes.

    Returns:
      The aggregation process, its state an
      `aggregator_state.CanaryAggregatorState`.

    Raises:
      ValueError: for a `value_type` that `aggregator_state.check_value_type`
        refuses, or a model the audit cannot audit (`canaries.check_model`:
        d < 3, or too large for this machine), naming its parameter count.
    """
    specs = aggregator_state.check_value_type(value_type)
    dim = canaries.flat_size(specs)
    canaries.check_model(dim, self._spec)
    core_fields = self._core_fields()

    @tff.tensorflow.computation
    def initial_core():
      return self._initial_core(specs, dim)

    core_type = initial_core.type_signature.result
    query_state_type = core_type.query_state

    @tff.tensorflow.computation(query_state_type)
    def sample_params(query_state):
      return self._query.derive_sample_params(query_state)

    @tff.tensorflow.computation(sample_params.type_signature.result, value_type)
    def client_record(params, value):
      return self._query.preprocess_record(params, value)

    record_process = self._record_aggregation_factory.create(
        client_record.type_signature.result)
    client_sum_type = record_process.next.type_signature.result.result.member

    @tff.tensorflow.computation(client_sum_type, core_type)
    def server_update(client_sum, core):
      return self._server_update(client_sum, core, specs, dim)

    derive_metrics = tff.tensorflow.computation(self._query.derive_metrics,
                                                query_state_type)

    def zip_state(core, agg_state):
      fields = {name: getattr(core, name) for name in core_fields}
      return tff.federated_zip(
          aggregator_state.CanaryAggregatorState(agg_state=agg_state,
                                                 **fields))

    @tff.federated_computation
    def init_fn():
      return zip_state(tff.federated_eval(initial_core, tff.SERVER),
                       record_process.initialize())

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      params = tff.federated_broadcast(
          tff.federated_map(sample_params, state.query_state))
      records = tff.federated_map(client_record, (params, value))
      record_output = record_process.next(state.agg_state, records)
      core = tff.federated_zip(collections.OrderedDict(
          (name, getattr(state, name)) for name in core_fields))
      new_core, result, canary_measurements = tff.federated_map(
          server_update, (record_output.result, core))
      measurements = collections.OrderedDict(
          dp_query_metrics=tff.federated_map(derive_metrics,
                                             new_core.query_state),
          dp=record_output.measurements)
      for name in aggregator_state.CANARY_MEASUREMENTS:
        measurements[name] = getattr(canary_measurements, name)
      return tff.templates.MeasuredProcessOutput(
          state=zip_state(new_core, record_output.state), result=result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)

