"""What a run's references are computed from, and what they are.

`RunFacts` holds what a mechanism's references depend on besides the
mechanism itself (Andrew et al., ICLR 2024, Section 4): z, delta, d, the
canaries' presentations and schedule, the rounds, the clip and cohort, the
real clients' sampling, one round's DpEvent, the server's momentum and,
under matrix-factorization noise, the strategy's numbers. `References` is
what a mechanism's entry (`accounting.mechanisms`) gives back for the
report: the analytical eps of a canary, the accounted eps of a real client
and the final-model reference, each with the mechanism it assumes.
`gaussian_references` are the rules of independent Gaussian noise, which
distributed DP reuses at its effective noise multiplier.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import dp_accounting
import numpy as np

from one_shot_epe import validation
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import last_iterate

__all__ = ['References', 'RunFacts', 'gaussian_references']


@validation.fields(server_momentum=validation.PARAMETERS['momentum'])
@dataclasses.dataclass(frozen=True)
class RunFacts:
  """What a run's references depend on besides its mechanism (Sec. 4).

  Attributes:
    noise_multiplier: z, the run's noise multiplier.
    delta: The delta of every epsilon.
    dim: d, the model's trainable parameters.
    canary_presentations: r, each seen canary's insertions.
    rounds: T, the rounds of the run (or observed so far), also
      `dp_fedavg.Participation.rounds` when that is given; None when unknown (then no
      accounted epsilon and no last-iterate heuristic).
    clip: The fixed clip S; None for adaptive clipping.
    cohort: The expected records per round, canaries included (the DP
      average's denominator).
    participation: The real clients' sampling; None accounts a client in
      every round.
    presentation_counts: Each seen canary's insertions in the schedule, for
      the last-iterate heuristic's mixture; None: r for every canary.
    schedule: The canary schedule (entry t: the seen ids of 0-based round
      t), for the tree's references.
    round_event: One round's `dp_accounting.DpEvent` as the aggregator
      recorded it; None: a Gaussian at z.
    round_events: Where the rounds' events differ (a round noised at a
      lower effective noise multiplier, one that released nothing): one
      entry per round of `rounds`, its event or None
      (`dp_fedavg.client_epsilon_of_rounds`); None: `round_event` in every
      round.
    correlated: The strategy's numbers under matrix-factorization noise,
      which the engine computes (`dp_fedavg.CorrelatedNoise`).
    server_momentum: beta in [0, 1), the server's heavy-ball momentum (the
      launcher's --server_momentum under sgdm), which weighs the rounds in
      the final model (`last_iterate`); 0 for server SGD, or where the
      server optimizer is not known (the final-model references then
      assume SGD and say so).

  Raises:
    ValueError: at construction, for a server_momentum outside [0, 1) (a
      `validation.ArgumentTypeError` for one that is not a number).
  """
  noise_multiplier: float
  delta: float
  dim: int
  canary_presentations: int = 1
  rounds: int | None = None
  clip: float | None = None
  cohort: float | None = None
  participation: dp_fedavg.Participation | None = None
  presentation_counts: np.ndarray | None = None
  schedule: Sequence[Any] | None = None
  round_event: dp_accounting.DpEvent | None = None
  round_events: Sequence[dp_accounting.DpEvent | None] | None = None
  correlated: dp_fedavg.CorrelatedNoise | None = None
  server_momentum: float = 0.0

  @property
  def seen_presentations(self) -> np.ndarray:
    """Each seen canary's insertions, the final-model references' K.

    Returns:
      `presentation_counts`, or [r] when they are not given.
    """
    if self.presentation_counts is None:
      return np.full(1, self.canary_presentations)
    return self.presentation_counts

  @property
  def seen_signals(self) -> np.ndarray:
    """Each seen canary's signal in the final model, the references' draws.

    The sum over its rounds of the server's weights w_t
    (`last_iterate.canary_signals`): from the schedule's first `rounds`
    entries where both are given (its presentations under SGD), else,
    under SGD, `seen_presentations`.

    Returns:
      float64 [k] (or `seen_presentations` as they are).

    Raises:
      ValueError: if `server_momentum` > 0 and `rounds` or `schedule` is
        None.
    """
    if self.rounds is None or self.schedule is None:
      if self.server_momentum > 0:
        raise ValueError('the final-model references under server momentum '
                         'need each canary\'s rounds (RunFacts.rounds and '
                         'RunFacts.schedule).')
      return self.seen_presentations
    # The rounds checked here, the momentum at construction.
    weights = last_iterate.momentum_weights.unchecked(
        validation.check_int('rounds', self.rounds, 1), self.server_momentum)
    return last_iterate.canary_signals(
        self.schedule, weights, None if self.presentation_counts is None else
        self.presentation_counts.size)


@dataclasses.dataclass(frozen=True)
class References:
  """A mechanism's references for one run (`Mechanism.references`).

  Attributes:
    noise_multiplier: The noise multiplier the report names (z, or z_eff
      for distributed DP).
    analytical: The canary's analytical epsilon at r presentations.
    accounted: A real client's epsilon over the run; None when the rounds
      are unknown.
    last_iterate: The final-model reference (the last-iterate heuristic, or
      under correlated noise the Gaussian a canary meets in the final model:
      the tree's noised prefix sums, the matrix mechanism's w^T C^-1 Z, w
      the server's weights of the rounds, all ones under SGD); None where
      the rounds are unknown.
    setting: Entries the report's setting gains (the mechanism's
      parameters).
    all_iterates_note: What the all-iterates statistic estimates under this
      mechanism's noise, if it differs from the paper's; None otherwise.
  """
  noise_multiplier: float
  analytical: dp_fedavg.MechanismEpsilon
  accounted: dp_fedavg.MechanismEpsilon | None
  last_iterate: dp_fedavg.MechanismEpsilon | None
  setting: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  all_iterates_note: tuple[str, str] | None = None


def gaussian_references(noise_multiplier: float,
                        facts: RunFacts) -> References:
  """The Gaussian rules at `noise_multiplier` (DP-FedAvg, Sec. 4).

  Args:
    noise_multiplier: z of the Gaussian noise (z_eff for distributed DP).
    facts: The run's facts; `round_event`, if given, is one round's event
      as the aggregator recorded it (default a Gaussian at z);
      `round_events`, if given, each round's own.

  Returns:
    The canary's r-fold Gaussian eps, and with `facts.rounds` a real
    client's eps under its sampling (dp_accounting) and the last-iterate
    heuristic for the schedule's presentation counts.
  """
  analytical = dp_fedavg.canary_epsilon(noise_multiplier, facts.delta,
                                        facts.canary_presentations)
  rounds = facts.rounds
  if rounds is None:
    return References(noise_multiplier, analytical, None, None)
  if facts.round_events is not None:
    accounted = dp_fedavg.client_epsilon_of_rounds(
        facts.round_events, facts.delta, facts.participation)
  else:
    event = (dp_accounting.GaussianDpEvent(noise_multiplier)
             if facts.round_event is None else facts.round_event)
    accounted = dp_fedavg.client_epsilon_of_event(event, facts.delta,
                                                  facts.participation, rounds)
  # z and delta checked by canary_epsilon, the rounds by the accountant,
  # the momentum by RunFacts.
  heuristic = dp_fedavg.last_iterate_epsilon.unchecked(
      noise_multiplier, facts.delta, rounds, facts.seen_signals,
      facts.server_momentum)
  return References(noise_multiplier, analytical, accounted, heuristic)
