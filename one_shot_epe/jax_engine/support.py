"""Which plans the JAX engine runs: `supports(plan)`.

The engine x mechanism table is the mechanisms' own (`accounting.mechanisms`,
each entry's `engines`); the engine audits runs with canaries only, and a
mechanism's noise may need a module beyond JAX in the environment (its
entry's `mechanism_noise.MechanismNoise.requires`: jax-privacy for
matrix-factorization noise). Framework-free (it only looks for that
module), so the launcher asks it before JAX is imported.
"""

import importlib.util

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_plan
from one_shot_epe.jax_engine import mechanism_noise

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
    has no noise for, a run without canaries, or a noise whose module
    beyond JAX is not installed (matrix-factorization noise without
    jax-privacy).
  """
  mechanism = plan.mechanism
  reason = mechanisms.engine_reason(mechanism, ENGINE)
  if reason is None and plan.spec is None:
    reason = ('the JAX engine audits runs with canaries; the TFF engine runs '
              'one without')
  requires = (None if reason is not None else
              mechanism_noise.noise_of(mechanism).requires)
  if requires is not None and importlib.util.find_spec(requires) is None:
    reason = (f'the {mechanism.name} mechanism needs '
              f'{requires.replace("_", "-")}, installed with the [jax] '
              "extra's environment (make .venv-jax/.installed; run with "
              '.venv-jax/bin/python), not in this one')
  return run_plan.Support(reason)
