"""The TFF engine's noise of each mechanism: one entry per mechanism it runs.

Every mechanism the TFF engine runs (an `accounting.mechanisms` entry whose
`engines['tff']` is None) has one entry here, keyed by its class: the
builder of its aggregation factory, which inserts the audit's canaries and
adds the mechanism's noise (`audit_factories`: DP-FedAvg's Gaussian noise
under a fixed or adaptive clip, DP-FTRL's tree, distributed DP's secure
sum), and what else the engine needs to know of the mechanism: whether the
factory needs the aggregated value's specs (the tree's noise has the
model's shape), and whether a run without canaries runs it with TFF's own
DP factory. No other module of the engine or of the launcher tells one
mechanism from another.

Framework-free: an entry names its builder by import path, relative to
this package (as the task entries name their models,
`design.tasks.entry_point`), so that `support.supports` reads the entries
before TensorFlow is imported.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import tasks

__all__ = ['MechanismNoise', 'NOISES', 'noise_of']

# The package the entries' builders are named in.
_PACKAGE = 'one_shot_epe.tff_engine'


@dataclasses.dataclass(frozen=True)
class MechanismNoise:
  """The TFF engine's noise of one mechanism.

  Attributes:
    factory: 'module:function' of the factory's builder, relative to the
      TFF engine's package: function(aggregation, record_specs) returns the
      aggregation factory of an `audit_factories.AuditedAggregation` (its
      canary plan, DP aggregation, mechanism and noise seed).
    needs_record_specs: Whether the builder needs `record_specs`, the
      `tf.TensorSpec`s of the aggregated value (the model's trainable
      weights); the others ignore them.
    without_canaries: Whether a run without canaries runs the mechanism,
      with TFF's own DP factory (`training.plain_aggregator`).
  """
  factory: str
  needs_record_specs: bool = False
  without_canaries: bool = False

  def build(self, aggregation: Any, record_specs: Any) -> Any:
    """The aggregation factory of `aggregation`, from the entry's builder.

    Args:
      aggregation: The audited aggregation
        (`audit_factories.AuditedAggregation`) under this mechanism.
      record_specs: The aggregated value's specs, or None where the builder
        does not need them.

    Returns:
      The builder's factory.
    """
    return tasks.entry_point(self.factory, _PACKAGE)(aggregation,
                                                     record_specs)


# The mechanisms the TFF engine runs, each with its noise; their engines'
# 'tff' entries are None (tests/engine_support_test.py).
NOISES: Mapping[type[mechanisms.Mechanism], MechanismNoise] = {
    mechanisms.Gaussian: MechanismNoise('audit_factories:gaussian_factory',
                                        without_canaries=True),
    mechanisms.TreeAggregation: MechanismNoise(
        'audit_factories:tree_factory', needs_record_specs=True),
    mechanisms.DistributedDP: MechanismNoise(
        'audit_factories:distributed_dp_factory'),
}


def noise_of(mechanism: mechanisms.Mechanism) -> MechanismNoise:
  """The TFF engine's entry of `mechanism` (`mechanisms.entry_of`).

  Args:
    mechanism: A mechanism the engine runs (`support.supports`).

  Returns:
    Its entry in `NOISES`; a ValueError if it has none.
  """
  return mechanisms.entry_of(NOISES, mechanism, 'TFF')
