"""Flower's privacy accountant beside the audit's: the same releases, both ε.

A fixed-clipping DP wrapper built with `accountant=` (Flower's
`RdpAccountant`, or any `flwr.serverapp.PrivacyAccountant`) composes, for
each round it releases, a `GaussianPrivacyEvent` at its noise multiplier z,
the round's sample of `num_sampled_clients` and the accountant's population,
and refuses to configure a round whose event would take ε past the
accountant's `max_epsilon` (`PrivacyBudgetExhausted`). The audit leaves all
of it in place: the messages the wrapper counts and the replies it checks
are the real clients' (the canaries join inside it, in
`strategies.CanaryStrategy`), so it composes exactly the events it composes
unaudited, and the budget stops an audited run where it stops an unaudited
one. Flower accounts without amplification (its wrappers take no other
sampling), as the audit does: each event is one Gaussian at z, composed by
RDP there and by dp_accounting's PLD in the report's accounted ε, the
tighter of two bounds on one mechanism.

What the audit adds: a run resumed from a checkpoint restarts with the
accountant the restarted ServerApp built, fresh; `resume` composes into it
the events of the rounds already trained (the wrapper's, `round_event`), so
its ε and its budget count the whole run. `flower_epsilon` is its ε at the
report's δ, with what it accounts, for the report
(`reporting.run_report.RunReport.framework_epsilon`).
"""

from flwr.serverapp import GaussianPrivacyEvent
from flwr.serverapp.strategy import Strategy

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.flower_engine import strategies

__all__ = ['flower_epsilon', 'resume', 'round_event']


def round_event(dp: Strategy, num_sampled_clients: int) -> GaussianPrivacyEvent:
  """The event `dp` composes for a round, as its `configure_train` builds it.

  Args:
    dp: A DP wrapper built with `accountant=`.
    num_sampled_clients: The wrapper's `num_sampled_clients` as the user
      built it (a round's configured messages must number that).

  Returns:
    A Gaussian at the wrapper's noise multiplier, sampling
    `num_sampled_clients` of the accountant's population.
  """
  return GaussianPrivacyEvent(
      noise_multiplier=dp.noise_multiplier, sample_size=num_sampled_clients,
      population_size=dp.accountant.config.population_size)


def resume(dp: Strategy, num_sampled_clients: int, rounds: int) -> None:
  """Makes `dp`'s accountant (if any) hold the `rounds` rounds trained.

  A fresh accountant gets `round_event` composed `rounds` times; one that
  already holds `rounds` releases (restored from its `state_dict`) is kept.

  Args:
    dp: The audited DP wrapper.
    num_sampled_clients: The wrapper's `num_sampled_clients` as the user
      built it.
    rounds: The rounds the run resumes after (0 for a new run).

  Raises:
    strategies.AuditRefused: the accountant holds another number of
      releases, which the report's two ε would not share.
  """
  accountant = getattr(dp, 'accountant', None)
  if accountant is None or accountant.num_releases == rounds:
    return
  if accountant.num_releases:
    raise strategies.AuditRefused(
        f'{type(dp).__name__}\'s accountant holds '
        f'{accountant.num_releases} releases, but the run '
        f'{"resumes after" if rounds else "starts at"} round {rounds}: give '
        'it a fresh accountant (the audit composes the rounds trained) or '
        'one restored to them.')
  accountant.compose(round_event(dp, num_sampled_clients), rounds)


def flower_epsilon(dp: Strategy, delta: float, num_sampled_clients: int
                   ) -> dp_fedavg.MechanismEpsilon | None:
  """The ε of `dp`'s accountant at `delta`, and what it accounts.

  Args:
    dp: The audited DP wrapper.
    delta: The report's δ, in (0, 1).
    num_sampled_clients: The wrapper's `num_sampled_clients` as the user
      built it.

  Returns:
    None without an accountant; else its ε at `delta` and a line naming the
    accountant, its method and sampling, the releases and their noise.
  """
  accountant = getattr(dp, 'accountant', None)
  if accountant is None:
    return None
  spent = accountant.get_privacy_spent(delta)
  config = accountant.config
  return dp_fedavg.MechanismEpsilon(
      float(spent.epsilon),
      f"Flower's {type(accountant).__name__} ({spent.accounting_method}, "
      f'{config.sampling_method.value}): {spent.num_releases} releases, each '
      f'a Gaussian at z = {float(dp.noise_multiplier):g} on '
      f'{num_sampled_clients} of {config.population_size} clients')
