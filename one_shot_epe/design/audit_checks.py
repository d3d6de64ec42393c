"""The checks every audit API makes before any work, in one wording.

Both `CanaryAudit`s (the TFF engine's for `tff.learning`, the Flower
engine's for Flower's strategies) take the same arguments for the same
things, and refuse the same plans with the same words, at construction,
before the user's training starts: fewer than 2 seen canaries or 1 unseen
(`canary_spec.AUDITED_CANARIES`), rounds or canaries that cannot fit this
machine (`run_size.check`), and, once the cohort is known, canaries that
would be more than half of a round's participants
(`canary_schedules.check_canary_share`). The launcher asks the same rules
of its flags (`experiments.run_planning`). Framework-free.
"""

from one_shot_epe import validation
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import canary_spec
from one_shot_epe.design import run_size

__all__ = ['check_audit', 'check_share']

# The audits' argument of each `run_size.PlanRefused` parameter.
_ARGUMENTS = {'total_rounds': 'rounds', 'num_canaries': 'num_canaries',
              'num_unseen_canaries': 'num_unseen_canaries'}


def check_audit(rounds: object, num_canaries: object,
                num_unseen_canaries: object) -> tuple[int, int, int]:
  """An audit's rounds and canary counts, checked whole.

  Args:
    rounds: T, the training rounds.
    num_canaries: k, the seen canaries.
    num_unseen_canaries: m, the unseen canaries.

  Returns:
    (T, k, m) as ints.

  Raises:
    ValueError: naming the argument: T < 1, k < 2, m = 1 (or a wrong type),
      or a run whose rounds' records or canaries' tracking would exceed
      this machine's memory (`run_size.check`).
  """
  rounds = validation.check_int('rounds', rounds, 1)
  num_canaries = canary_spec.AUDITED_CANARIES['num_seen']('num_canaries',
                                                          num_canaries)
  num_unseen_canaries = canary_spec.AUDITED_CANARIES['num_unseen'](
      'num_unseen_canaries', num_unseen_canaries)
  values = {'rounds': rounds, 'num_canaries': num_canaries,
            'num_unseen_canaries': num_unseen_canaries}
  try:
    run_size.check(run_size.RunShape(total_rounds=rounds,
                                      num_seen=num_canaries,
                                      num_unseen=num_unseen_canaries))
  except run_size.PlanRefused as error:
    name = _ARGUMENTS[error.parameter]
    raise ValueError(f'{name}={values[name]}: {error}.') from None
  return rounds, num_canaries, num_unseen_canaries


def check_share(num_canaries: int, clients_per_round: float,
                cohort: float) -> None:
  """Refuses canaries that would be over half of a round's participants.

  Args:
    num_canaries: k, for the message.
    clients_per_round: The expected real clients per round.
    cohort: The expected participants per round, canaries included.

  Raises:
    ValueError: naming num_canaries (`canary_schedules.check_canary_share`).
  """
  try:
    canary_schedules.check_canary_share(clients_per_round, cohort)
  except run_size.PlanRefused as error:
    raise ValueError(f'num_canaries={num_canaries}: {error}.') from None
