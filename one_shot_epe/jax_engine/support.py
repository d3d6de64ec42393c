"""Which plans the JAX engine runs: `supports(plan)`.

The engine x mechanism table is the mechanisms' own (`accounting.mechanisms`,
each entry's `engines`); the engine audits runs with canaries only, and its
matrix-factorization noise needs jax-privacy in the environment.
Framework-free (it only looks for jax-privacy), so the launcher asks it
before JAX is imported.
"""

import importlib.util

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_plan

__all__ = ['ENGINE', 'supports']

# The engine's name in `mechanisms.ENGINES`.
ENGINE = 'jax'


def supports(plan: run_plan.Supportable) -> run_plan.Support:
  """Whether the JAX engine runs `plan`, and if not, why.

  Args:
    plan: The run's plan (a `run_plan.RunPlan`, or anything holding a
      mechanism and canaries).

  Returns:
    A true `Support`, or a false one with the reason: a mechanism the engine
    has no noise for, a run without canaries, or matrix-factorization noise
    without jax-privacy installed.
  """
  mechanism = plan.mechanism
  reason = mechanisms.engine_reason(mechanism, ENGINE)
  if reason is None and plan.spec is None:
    reason = ('the JAX engine audits runs with canaries; the TFF engine runs '
              'one without')
  if reason is None and isinstance(
      mechanism, mechanisms.MatrixFactorization) and (
          importlib.util.find_spec('jax_privacy') is None):
    reason = (f'the {mechanism.name} mechanism needs jax-privacy, installed '
              "with the [jax] extra's environment (make .venv-jax/.installed; "
              'run with .venv-jax/bin/python), not in this one')
  return run_plan.Support(reason)
