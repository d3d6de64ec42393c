"""The checks every audit API makes before any work, in one wording.

Both `CanaryAudit`s (the TFF engine's for `tff.learning`, the Flower
engine's for Flower's strategies) take the same arguments for the same
things, and refuse the same plans with the same words, at construction,
before the user's training starts: fewer than 2 seen canaries or 1 unseen
(`canary_spec.AUDITED_CANARIES`), rounds or canaries (their schedule
included) that cannot fit this machine (`run_size.check`), and, once the
cohort is known, canaries that would be more than half of a round's
participants (`canary_schedules.check_canary_share`), each before anything
is allocated in proportion to it. Once the user's model is known (its d),
`check_model` refuses a model too small for the final-model null (d < 3) or
too large for this machine. The launcher asks the same rules of its flags
(`experiments.run_planning`). Framework-free.
"""

from one_shot_epe import validation
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import canary_spec
from one_shot_epe.design import run_size
from one_shot_epe.stats import null_distribution

__all__ = ['check_audit', 'check_dim', 'check_model', 'check_share']

# The audits' argument of each `run_size.PlanRefused` parameter.
_ARGUMENTS = {'total_rounds': 'rounds', 'num_canaries': 'num_canaries',
              'num_unseen_canaries': 'num_unseen_canaries'}


def check_audit(rounds: object, num_canaries: object,
                num_unseen_canaries: object,
                repetitions: object = 1) -> tuple[int, int, int]:
  """An audit's rounds and canary counts, checked whole.

  Args:
    rounds: T, the training rounds.
    num_canaries: k, the seen canaries.
    num_unseen_canaries: m, the unseen canaries.
    repetitions: r, each seen canary's presentations, in [1, T] (its
      schedule's k r entries are counted in the run's memory).

  Returns:
    (T, k, m) as ints.

  Raises:
    ValueError: naming the argument: T < 1, k < 2, m = 1, r outside [1, T]
      (or a wrong type), or a run whose rounds' records or canaries'
      schedule and tracking would exceed this machine's memory
      (`run_size.check`).
  """
  rounds = validation.check_int('rounds', rounds, 1)
  num_canaries = canary_spec.AUDITED_CANARIES['num_seen']('num_canaries',
                                                          num_canaries)
  num_unseen_canaries = canary_spec.AUDITED_CANARIES['num_unseen'](
      'num_unseen_canaries', num_unseen_canaries)
  repetitions = validation.check_int('repetitions', repetitions, 1, rounds)
  _check_size(run_size.RunShape(
      total_rounds=rounds, num_seen=num_canaries,
      num_unseen=num_unseen_canaries,
      canary_presentations=num_canaries * repetitions))
  return rounds, num_canaries, num_unseen_canaries


def _check_size(shape: run_size.RunShape) -> None:
  """`run_size.check`, its refusal naming the audit's argument."""
  try:
    run_size.check(shape)
  except run_size.PlanRefused as error:
    if error.parameter == 'dim':
      raise ValueError(f'the model has {shape.dim:,} parameters: '
                       f'{error}.') from None
    name = _ARGUMENTS[error.parameter]
    value = {'rounds': shape.total_rounds, 'num_canaries': shape.num_seen,
             'num_unseen_canaries': shape.num_unseen}[name]
    raise ValueError(f'{name}={value}: {error}.') from None


def check_dim(dim: int) -> None:
  """Refuses a model of fewer parameters than the final-model null needs.

  Args:
    dim: d, the model's trainable parameters.

  Raises:
    ValueError: d < 3 (Theorem 3.1's null, `null_distribution.DIM`), in
      one sentence naming the model's parameter count.
  """
  if dim < null_distribution.DIM.low:
    raise ValueError(
        f'the model has {dim} parameters; the final-model cosines\' null '
        f'needs at least {null_distribution.DIM.low} (Theorem 3.1).')


def check_model(dim: int, rounds: int, num_canaries: int,
                num_unseen_canaries: int) -> None:
  """Refuses a model the audit cannot audit, once its d is known.

  The final-model cosines' null (Theorem 3.1) needs d >= 3, and the run's
  model state and canary tracking must fit this machine
  (`run_size.check`, with d). For the point where d becomes known (an
  audit's aggregation factory, created on the user's model), before the
  first round trains.

  Args:
    dim: d, the model's trainable parameters.
    rounds: T, as checked by `check_audit`.
    num_canaries: k, as checked.
    num_unseen_canaries: m, as checked.

  Raises:
    ValueError: naming the model's parameter count: d < 3, or a run of
      this model that would exceed this machine's memory.
  """
  check_dim(dim)
  _check_size(run_size.RunShape(total_rounds=rounds, num_seen=num_canaries,
                                num_unseen=num_unseen_canaries, dim=dim))


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
