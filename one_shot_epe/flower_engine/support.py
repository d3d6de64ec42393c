"""Which plans the Flower engine runs: `supports(plan)`.

The engine x mechanism table is the mechanisms' own (`accounting.mechanisms`,
each entry's `engines`): Flower's DP wrappers (server-side clipping, or
client-side fixed clipping) add independent Gaussian noise, which the audit
needs canaries to measure. Framework-free.
"""

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_plan

__all__ = ['ENGINE', 'supports']

# The engine's name in `mechanisms.ENGINES`.
ENGINE = 'flower'


def supports(plan: run_plan.Supportable) -> run_plan.Support:
  """Whether the Flower engine runs `plan`, and if not, why.

  Args:
    plan: The run's plan (a `run_plan.RunPlan`, or anything holding a
      mechanism and canaries).

  Returns:
    A true `Support`, or a false one with the reason: a mechanism other than
    the DP wrappers' Gaussian noise, or no canaries to audit it with.
  """
  reason = mechanisms.engine_reason(plan.mechanism, ENGINE)
  if reason is None and plan.spec is None:
    reason = 'the Flower engine audits runs with canaries'
  return run_plan.Support(reason)
