"""Which plans the TFF engine runs: `supports(plan)`.

The engine x mechanism table is the mechanisms' own (`accounting.mechanisms`,
each entry's `engines`); a run without canaries uses TFF's own Gaussian DP
factory, so a mechanism that factory does not run (the engine's noise entry
says, `mechanism_noise.MechanismNoise.without_canaries`), whose aggregator
inserts canaries, needs them. Framework-free, so the launcher asks it
before TensorFlow is imported.
"""

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_plan
from one_shot_epe.tff_engine import mechanism_noise

__all__ = ['ENGINE', 'supports']

# The engine's name in `mechanisms.ENGINES`.
ENGINE = 'tff'


def supports(plan: run_plan.Supportable) -> run_plan.Support:
  """Whether the TFF engine runs `plan`, and if not, why.

  Args:
    plan: The run's plan (a `run_plan.RunPlan`, or an audit holding a
      mechanism and canaries).

  Returns:
    A true `Support`, or a false one with the reason: a mechanism TFF has no
    aggregator for, or a mechanism other than Gaussian noise without
    canaries.
  """
  mechanism = plan.mechanism
  reason = mechanisms.engine_reason(mechanism, ENGINE)
  if reason is None and plan.spec is None and not mechanism_noise.noise_of(
      mechanism).without_canaries:
    reason = (f'the {mechanism.name} mechanism needs canaries: a run without '
              "them uses TFF's own Gaussian DP factory")
  return run_plan.Support(reason)
