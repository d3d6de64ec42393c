"""The JAX engine's noise of each mechanism: one entry per mechanism it runs.

Every mechanism the JAX engine runs (an `accounting.mechanisms` entry whose
`engines['jax']` is None) has one entry here, keyed by its class: the rows
of noise its rounds' aggregates carry in place of the round's independent
Gaussian draw (none for DP-FedAvg's own; DP-FTRL's tree,
`tree_noise.plan_rows`; matrix-factorization noise,
`correlated_noise.plan_rows`), the correlated strategy C whose numbers the
report takes and which decorrelates the all-iterates statistic
(`correlated_noise.plan_strategy`), and the module beyond JAX the noise
needs (jax-privacy). No other module of the engine or of the launcher
tells one mechanism from another.

Framework-free: an entry names its functions by import path, relative to
this package (as the task entries name the engine's models,
`design.tasks.entry_point`), and each is imported only when a run uses it,
so that `support.supports` reads the entries before JAX (or jax-privacy) is
imported.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_plan
from one_shot_epe.design import tasks

__all__ = ['MechanismNoise', 'NOISES', 'noise_of']

# The package the entries' functions are named in.
_PACKAGE = 'one_shot_epe.jax_engine'


@dataclasses.dataclass(frozen=True)
class MechanismNoise:
  """The JAX engine's noise of one mechanism.

  Attributes:
    rows: 'module:function' of function(plan), relative to the JAX
      engine's package, giving the run's noise rows as
      `training.train`'s `noise_rows` takes them ((d, first round) ->
      float32 [d] rows from that round on); None: each round's independent
      Gaussian draw (`fedavg`).
    strategy: 'module:function' of function(plan) giving the run's
      matrix-factorization strategy (`correlated_noise.Strategy`), for the
      report's correlated-noise numbers and the decorrelated all-iterates
      statistic; None: the noise has none.
    requires: The module beyond JAX the noise imports (found with
      `importlib.util.find_spec`); None: JAX alone.
  """
  rows: str | None = None
  strategy: str | None = None
  requires: str | None = None

  @property
  def decorrelates(self) -> bool:
    """Whether the run keeps each canary's projection on every round's
    aggregate for the decorrelated statistic (a strategy is given)."""
    return self.strategy is not None

  def noise_rows(self, plan: run_plan.RunPlan) -> Any:
    """The run's noise rows, for `training.train`'s `noise_rows`.

    Args:
      plan: The run (its mechanism, noise multiplier, clip, seed, rounds
        and participation).

    Returns:
      A function of (d, first round) giving the rounds' rows; None for
      each round's independent Gaussian draw.
    """
    if self.rows is None:
      return None
    return tasks.entry_point(self.rows, _PACKAGE)(plan)

  def correlated_strategy(self, plan: run_plan.RunPlan) -> Any:
    """The run's matrix-factorization strategy, or None.

    Args:
      plan: The run (its mechanism, rounds and participation).

    Returns:
      The `correlated_noise.Strategy` of the run; None where the noise has
      no strategy.
    """
    if self.strategy is None:
      return None
    return tasks.entry_point(self.strategy, _PACKAGE)(plan)


# The mechanisms the JAX engine runs, each with its noise; their engines'
# 'jax' entries are None (tests/engine_support_test.py).
NOISES: Mapping[type[mechanisms.Mechanism], MechanismNoise] = {
    mechanisms.Gaussian: MechanismNoise(),
    mechanisms.MatrixFactorization: MechanismNoise(
        rows='correlated_noise:plan_rows',
        strategy='correlated_noise:plan_strategy', requires='jax_privacy'),
    mechanisms.TreeAggregation: MechanismNoise(rows='tree_noise:plan_rows'),
}


def noise_of(mechanism: mechanisms.Mechanism) -> MechanismNoise:
  """The JAX engine's entry of `mechanism` (`mechanisms.entry_of`).

  Args:
    mechanism: A mechanism the engine runs (`support.supports`).

  Returns:
    Its entry in `NOISES`; a ValueError if it has none.
  """
  return mechanisms.entry_of(NOISES, mechanism, 'JAX')
