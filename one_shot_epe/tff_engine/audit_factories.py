"""The DP aggregation one `CanaryAudit` audits, and the factories that build it.

One audit audits one DP aggregation under one mechanism (`mechanisms`): the
one given to `from_spec`, whose factory `aggregator()` builds, or the one its
first factory method builds (`gaussian_fixed`, `gaussian_adaptive`,
`tree_aggregation`, with TFF's argument names). Each factory inserts the
audit's canaries (`canary_aggregator.CanaryDPFactory`, or
`distributed_dp_aggregator.CanaryDistributedDPFactory` under distributed DP)
and divides by the expected cohort, canaries included (they participate as
clients do, Sec. 4); a factory method asking for another aggregation raises,
so the report never depends on which one ran first. `AuditedAggregation`
holds the aggregation and builds its factories; `audit.CanaryAudit` is one.
Which builder serves a mechanism is the engine's entry of it
(`mechanism_noise.NOISES`): `gaussian_factory`, `tree_factory` or
`distributed_dp_factory` below.
"""

from typing import Any

import dp_accounting
import tensorflow_federated as tff

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import aggregator_state
from one_shot_epe.tff_engine import canary_aggregator
from one_shot_epe.tff_engine import distributed_dp_aggregator
from one_shot_epe.tff_engine import mechanism_noise

__all__ = ['AuditedAggregation', 'distributed_dp_factory', 'gaussian_factory',
           'tree_factory']


class AuditedAggregation:
  """The DP aggregation of one audit under one mechanism, and its factories.

  Attributes:
    spec: The canary plan (`canary_spec.CanarySpec`) the factories insert.
    expected_cohort: The expected records per round, canaries included: the
      DP average's denominator and the adaptive clip's expected count.
    mechanism: The audited mechanism (`mechanisms`); None before a factory
      method chose it.
  """

  def __init__(self, spec: canary_spec.CanarySpec, expected_cohort: float,
               dp: canary_spec.DPAggregation | None,
               mechanism: mechanisms.Mechanism | None,
               noise_seed: int | None):
    """Holds the audited aggregation, or none before the first factory.

    Args:
      spec: The canary plan, schedule and statistics included.
      expected_cohort: The expected records per round, canaries included.
      dp: The audited DP aggregation, or None for the first factory method
        to choose.
      mechanism: The mechanism `dp` runs under (with `dp`), or None.
      noise_seed: None for unpredictable DP noise; an int seeds it.
    """
    self.spec = spec
    self.expected_cohort = expected_cohort
    self.mechanism = mechanism
    self._dp = dp
    self._noise_seed = noise_seed

  @property
  def dp(self) -> canary_spec.DPAggregation | None:
    """The audited DP aggregation; None before a factory method built one."""
    return self._dp

  @property
  def noise_seed(self) -> int | None:
    """The seed of the DP noise; None for unpredictable noise."""
    return self._noise_seed

  @property
  def needs_record_specs(self) -> bool:
    """Whether `aggregator()` needs the aggregated value's specs.

    True under a mechanism whose noise has the value's shape (tree
    aggregation; `mechanism_noise.MechanismNoise.needs_record_specs`).
    """
    return self.mechanism is not None and mechanism_noise.noise_of(
        self.mechanism).needs_record_specs

  def _record(self, dp: canary_spec.DPAggregation,
              mechanism: mechanisms.Mechanism) -> None:
    """Records the factory's aggregation; one per audit."""
    if self._dp is not None and (self._dp, self.mechanism) != (dp, mechanism):
      raise ValueError(f'this audit audits {self._dp} under {self.mechanism}; '
                       f'one audit audits one aggregation, not also {dp} '
                       f'under {mechanism}.')
    self._dp, self.mechanism = dp, mechanism

  def aggregator(
      self, record_specs: Any = None
  ) -> (canary_aggregator.CanaryDPFactory |
        distributed_dp_aggregator.CanaryDistributedDPFactory):
    """The factory of the `dp` and `mechanism` given to `from_spec`.

    Args:
      record_specs: Where the mechanism needs them (`needs_record_specs`:
        tree aggregation), the `tf.TensorSpec`s of the aggregated value (the
        model's trainable weights); ignored otherwise.

    Returns:
      The factory of the mechanism's entry (`mechanism_noise.NOISES`):
      `gaussian_factory`, `tree_factory` or `distributed_dp_factory`.

    Raises:
      ValueError: if the audit was not built from a `dp`, or a mechanism
        that needs `record_specs` (`needs_record_specs`) is asked for
        without them.
    """
    if self._dp is None:
      raise ValueError('aggregator() needs the audit of from_spec(spec, dp); '
                       'otherwise call gaussian_fixed/gaussian_adaptive.')
    noise = mechanism_noise.noise_of(self.mechanism)
    if noise.needs_record_specs and record_specs is None:
      raise ValueError(f'aggregator() of the {self.mechanism.name} mechanism '
                       'needs record_specs, the aggregated value\'s specs.')
    return noise.build(self, record_specs)

  def gaussian_fixed(
      self, *, noise_multiplier: float, clip: float,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with a fixed clip, canaries inserted.

    Args:
      noise_multiplier: z >= 0; the noise std is z S.
      clip: The clip S > 0.
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.gaussian_fixed`) over
      the expected cohort.

    Raises:
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, clip=clip, spec=self.spec,
        noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    self._record(factory.dp, mechanisms.Gaussian())
    return factory

  def gaussian_adaptive(
      self, *, noise_multiplier: float, initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5, learning_rate: float = 0.2,
      clipped_count_stddev: float | None = None,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FedAvg's aggregation with adaptive clipping (TFF's defaults).

    Args:
      noise_multiplier: z >= 0, the overall noise multiplier.
      initial_l2_norm_clip: S_0 > 0.
      target_unclipped_quantile: gamma in (0, 1).
      learning_rate: eta >= 0 of the geometric clip update.
      clipped_count_stddev: sigma_b of the unclipped count; None for TFF's
        default (`canary_spec.DPAggregation`).
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.gaussian_adaptive`)
      over the expected cohort.

    Raises:
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.gaussian_adaptive(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort,
        initial_l2_norm_clip=initial_l2_norm_clip,
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=learning_rate, clipped_count_stddev=clipped_count_stddev,
        spec=self.spec, noise_seed=self._noise_seed,
        record_aggregation_factory=record_aggregation_factory)
    self._record(factory.dp, mechanisms.Gaussian())
    return factory

  def tree_aggregation(
      self, *, noise_multiplier: float, l2_norm_clip: float,
      record_specs: Any, use_efficient: bool = True,
      record_aggregation_factory: (
          tff.aggregators.UnweightedAggregationFactory | None) = None
  ) -> canary_aggregator.CanaryDPFactory:
    """DP-FTRL's tree aggregation (TFF's `tree_aggregation`), canaries in.

    One tree over every round, never restarted; `report()` then takes the
    tree's references (`mechanisms.TreeAggregation`).

    Args:
      noise_multiplier: Noise std per tree node over `l2_norm_clip`, >= 0.
      l2_norm_clip: The clip norm, > 0.
      record_specs: `tf.TensorSpec`s of the aggregated value.
      use_efficient: Whether to use the efficient tree estimator.
      record_aggregation_factory: Sums the clients' clipped records (default
        `tff.aggregators.SumFactory`).

    Returns:
      The factory (`canary_aggregator.CanaryDPFactory.tree_aggregation`).

    Raises:
      TypeError: if `record_specs` or `use_efficient` has the wrong type.
      ValueError: if an argument is out of range, or the audit already
        audits another aggregation.
    """
    factory = canary_aggregator.CanaryDPFactory.tree_aggregation(
        noise_multiplier=noise_multiplier,
        clients_per_round=self.expected_cohort, l2_norm_clip=l2_norm_clip,
        record_specs=record_specs, spec=self.spec,
        noise_seed=self._noise_seed, use_efficient=use_efficient,
        record_aggregation_factory=record_aggregation_factory)
    self._record(
        canary_spec.DPAggregation(noise_multiplier=float(noise_multiplier),
                                  clients_per_round=self.expected_cohort,
                                  clip=float(l2_norm_clip)),
        mechanisms.TreeAggregation(efficient=use_efficient))
    return factory

  def dp_event(self, learning_state: Any) -> dp_accounting.DpEvent:
    """The DpEvent of the round that produced `learning_state`.

    Args:
      learning_state: The state of a process built with this audit's factory.

    Returns:
      The event the aggregator recorded
      (`aggregator_state.extract_dp_event_from_state`).
    """
    return aggregator_state.extract_dp_event_from_state(
        learning_state.aggregator)


def gaussian_factory(
    aggregation: AuditedAggregation,
    record_specs: Any = None) -> canary_aggregator.CanaryDPFactory:
  """The Gaussian mechanism's factory: DP-FedAvg, fixed or adaptive clip.

  Args:
    aggregation: The audited aggregation (its `dp` given).
    record_specs: Ignored.

  Returns:
    `canary_aggregator.CanaryDPFactory.from_spec(dp, spec, noise_seed)`.
  """
  del record_specs
  return canary_aggregator.CanaryDPFactory.from_spec(
      aggregation.dp, aggregation.spec, aggregation.noise_seed)


def tree_factory(aggregation: AuditedAggregation,
                 record_specs: Any) -> canary_aggregator.CanaryDPFactory:
  """Tree aggregation's factory: DP-FTRL's tree, with the mechanism's estimator.

  Args:
    aggregation: The audited aggregation (its `dp` given, fixed clip).
    record_specs: The `tf.TensorSpec`s of the aggregated value.

  Returns:
    `canary_aggregator.CanaryDPFactory.tree_aggregation` at the aggregation's
    noise multiplier, clip, expected cohort and noise seed.
  """
  dp = aggregation.dp
  return canary_aggregator.CanaryDPFactory.tree_aggregation(
      noise_multiplier=float(dp.noise_multiplier),
      clients_per_round=aggregation.expected_cohort,
      l2_norm_clip=float(dp.clip), record_specs=record_specs,
      spec=aggregation.spec, noise_seed=aggregation.noise_seed,
      use_efficient=aggregation.mechanism.efficient)


def distributed_dp_factory(
    aggregation: AuditedAggregation, record_specs: Any = None
) -> distributed_dp_aggregator.CanaryDistributedDPFactory:
  """Distributed DP's factory: the clients' noise shares and secure sum.

  Args:
    aggregation: The audited aggregation (its `dp` given, fixed clip).
    record_specs: Ignored.

  Returns:
    `distributed_dp_aggregator.CanaryDistributedDPFactory` of the
    mechanism's parameters; the noise seed seeds the rotations.
  """
  del record_specs
  return distributed_dp_aggregator.CanaryDistributedDPFactory(
      aggregation.dp, aggregation.mechanism.params, aggregation.spec,
      aggregation.noise_seed)
