"""The canary plan of a `CanaryAudit`: made from its arguments, or checked.

`audit.CanaryAudit` takes the arguments of a plan (k seen and m unseen
canaries, T rounds, the expected real clients per round, ...) or a plan made
elsewhere (a `canary_spec.CanarySpec` and the run's
`canary_spec.DPAggregation`, as `tff_engine.training` makes them). `plan`
makes the first: every seen canary once in each of r equal periods (Sec.
5.2), and the expected cohort, the real clients and the expected canaries per
round, k r / T (canaries participate as clients do, Sec. 4), the canaries'
share of it checked. `check_plan` checks the second, and that the TFF engine
runs its mechanism (`support.supports`).
"""

import dataclasses
from collections.abc import Sequence

from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import audit_checks
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import support

__all__ = ['check_plan', 'plan']


@dataclasses.dataclass(frozen=True)
class _Planned:
  """A mechanism and canaries, as the engine's `supports(plan)` reads them."""
  mechanism: mechanisms.Mechanism
  spec: canary_spec.CanarySpec


def plan(*, num_canaries: int | None, rounds: int | None,
         clients_per_round: float | None, num_unseen_canaries: int | None,
         repetitions: int | None, canary_seed: int | None,
         canary_clip: str | None, mechanism: mechanisms.Mechanism | None
         ) -> tuple[canary_spec.CanarySpec, float, str | None]:
  """The canary plan of `CanaryAudit`'s arguments and its expected cohort.

  Args:
    num_canaries: k >= 2 seen canaries.
    rounds: T, the number of training rounds.
    clients_per_round: The expected number of real clients per round.
    num_unseen_canaries: m unseen canaries (None: k).
    repetitions: r, presentations of each seen canary (None: 1).
    canary_seed: The canaries' seed (None: 0).
    canary_clip: 'project' or 'clip' (None: 'project').
    mechanism: Must be None: without a plan made elsewhere, the factory
      method called chooses the mechanism.

  Returns:
    (the `canary_spec.CanarySpec`, the expected cohort: real clients and
    expected canaries per round; the warning to give when the canaries are
    a large share of it (`canary_schedules.canary_share_warning`), or
    None).

  Raises:
    TypeError: `num_canaries`, `rounds` or `clients_per_round` is missing,
      or `mechanism` is given.
    ValueError: an argument is out of range or the plan cannot fit this
      machine (`audit_checks.check_audit`), or canaries would be over half
      of a round's expected participants (`audit_checks.check_share`),
      each before the schedule is drawn.
  """
  if num_canaries is None or rounds is None or clients_per_round is None:
    raise TypeError('CanaryAudit needs num_canaries, rounds and '
                    'clients_per_round (or spec and dp).')
  if mechanism is not None:
    raise TypeError('mechanism goes with spec and dp; otherwise the '
                    'factory method called chooses it.')
  num_unseen = (num_canaries if num_unseen_canaries is None else
                num_unseen_canaries)
  repetitions = 1 if repetitions is None else repetitions
  audit_checks.check_audit(rounds, num_canaries, num_unseen, repetitions)
  canary_seed = 0 if canary_seed is None else canary_seed
  # The cohort and the canaries' share of it before the schedule, which
  # grows with k r.
  expected_cohort = canary_schedules.expected_cohort(
      clients_per_round, num_canaries, repetitions, rounds)
  audit_checks.check_share(num_canaries, clients_per_round, expected_cohort)
  schedule = canary_schedules.periodic_canary_schedule(
      num_canaries, rounds, repetitions, canary_seed)
  spec = canary_spec.CanarySpec(
      seed=canary_seed, num_seen=num_canaries, num_unseen=num_unseen,
      schedule=schedule.as_round_lists(),
      canary_clip='project' if canary_clip is None else canary_clip,
      repetitions=repetitions)
  return spec, expected_cohort, canary_schedules.canary_share_warning(
      clients_per_round, expected_cohort)


def check_plan(spec: canary_spec.CanarySpec, dp: canary_spec.DPAggregation,
               mechanism: mechanisms.Mechanism | None,
               given: Sequence[str]) -> mechanisms.Mechanism:
  """Checks a plan made elsewhere; the mechanism it runs under.

  Args:
    spec: The canary plan, schedule and statistics included.
    dp: The run's DP aggregation.
    mechanism: The mechanism `dp` runs under; None for `mechanisms.Gaussian`.
    given: The names of the plan's own arguments given beside `spec` and
      `dp` (none may be).

  Returns:
    `mechanism`, or `mechanisms.Gaussian()` when it is None.

  Raises:
    TypeError: a plan argument is given too, or `spec`, `dp` or `mechanism`
      has the wrong type.
    ValueError: `spec`'s canary counts are out of range, the TFF engine does
      not run `mechanism` (`support.supports`), or `mechanism` needs a fixed
      clip that `dp` lacks.
  """
  if given:
    raise TypeError(f'CanaryAudit takes spec and dp or the arguments of '
                    f'a plan, not both; got spec/dp and {list(given)}.')
  if not isinstance(spec, canary_spec.CanarySpec):
    raise TypeError(f'spec must be a canary_spec.CanarySpec; got {spec!r}.')
  if not isinstance(dp, canary_spec.DPAggregation):
    raise TypeError(f'dp must be a canary_spec.DPAggregation; got {dp!r}.')
  for name in ('num_seen', 'num_unseen'):
    canary_spec.AUDITED_CANARIES[name](f'spec.{name}', getattr(spec, name))
  mechanism = mechanisms.Gaussian() if mechanism is None else mechanism
  mechanisms.check_mechanism('mechanism', mechanism)
  answer = support.supports(_Planned(mechanism, spec))
  if not answer:
    raise ValueError(f'mechanism={mechanism!r}: the TFF engine does not '
                     f'run it: {answer.reason}.')
  mechanisms.check_clip(mechanism, dp.adaptive)
  return mechanism
