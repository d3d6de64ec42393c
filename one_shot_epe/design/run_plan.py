"""What a training run is, whichever engine runs it (framework-free).

A `RunPlan` is everything a DP-FedAvg run with canaries depends on besides
the engine's own model and data (Andrew et al., ICLR 2024, Section 5): who
participates in each round, T, the canaries (`canary_spec.CanarySpec`,
`spec`), the DP aggregation (`canary_spec.DPAggregation`, `dp`: z and the
clip), the mechanism that privatizes it (`mechanisms`, `mechanism`), the
optimizers, the client training, the seeds and the checkpoint and
evaluation rhythm. `experiments.train` builds one from the flags; the TFF
engine (`tff_engine.training.train`) and the JAX engine
(`jax_engine.training.train`) both run it. Rounds are numbered as in
`runtime.round_record`. Engines and reports read a run from its plan only,
never from the launcher's flags.

Each engine answers `supports(plan)` with a `Support`: whether it runs the
plan, and if not, why (in the spirit of dp_accounting's
`PrivacyAccountant.supports(event)`); the launcher, the API and the docs ask
it and keep no list of their own.
"""

import dataclasses
from typing import Protocol

import numpy as np

from one_shot_epe import validation
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_options

__all__ = ['OptimizerSpec', 'RunPlan', 'Support', 'Supportable']


@dataclasses.dataclass(frozen=True)
class Support:
  """An engine's answer to `supports(plan)`: true, or false with a reason.

  Attributes:
    reason: None when the engine runs the plan; else one line saying why it
      does not (and what to use instead).
  """
  reason: str | None = None

  def __bool__(self) -> bool:
    return self.reason is None


class Supportable(Protocol):
  """What an engine's `supports(plan)` reads: the mechanism and canaries.

  A `RunPlan` is one; so is an audit that holds a mechanism and a canary
  spec (`tff_engine.audit.CanaryAudit`).
  """

  @property
  def mechanism(self) -> mechanisms.Mechanism:
    """The DP mechanism of the run's aggregate."""

  @property
  def spec(self) -> canary_spec.CanarySpec | None:
    """The canaries; None for a run without."""


@validation.fields('learning_rate', 'momentum')
@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
  """A client or server optimizer: one of TFF's sgd, sgdm or adam.

  Attributes:
    name: One of `run_options.OPTIMIZERS`.
    learning_rate: Its learning rate, > 0.
    momentum: sgdm's momentum in [0, 1) (0 for the others).

  Raises:
    ValueError: at construction, for an unknown name, a learning rate that
      is not > 0, or a momentum outside [0, 1) or nonzero for sgd or adam.
  """
  name: str
  learning_rate: float
  momentum: float = 0.0

  def __post_init__(self):
    validation.check_choice('optimizer name', self.name,
                            run_options.OPTIMIZERS)
    if self.name != 'sgdm' and self.momentum != 0.0:
      raise ValueError(f'momentum applies to sgdm only; got {self.momentum} '
                       f'for {self.name!r}.')

  @property
  def slots(self) -> int:
    """d-sized float32 vectors the optimizer keeps in the training state."""
    return run_options.OPTIMIZER_SLOTS[self.name]


@validation.fields('total_rounds', 'rounds_per_checkpoint',
                   rounds_per_evaluation=validation.Int(1))
@dataclasses.dataclass(frozen=True)
class RunPlan:
  """A run, for either engine.

  Attributes:
    sampler: Who participates in each round (`participation`).
    total_rounds: T, the training rounds.
    spec: The canaries; None for a run without (TFF engine only).
    dp: The DP aggregation (its cohort counts the expected canaries).
    delta: The delta of the run's accounting.
    client_optimizer, server_optimizer: The optimizers.
    batch_size: Client batch size.
    epochs: Client epochs per round.
    max_examples: A client's examples per round; None for all.
    seed: Seed of the model's initialisation and each round's data.
    noise_seed: Seed of the DP noise; None for unseeded noise (TFF engine).
    rounds_per_checkpoint: Checkpoint every this many rounds (and at 0, T).
    rounds_per_evaluation: Test-set evaluation every this many rounds.
    max_eval_examples: Test examples evaluated; None for all.
    mechanism: The DP mechanism of the aggregate (`mechanisms`): independent
      Gaussian noise by default; the others need a fixed clip (`dp.clip`).
    canary_kind: --canary_kind: 'gradient' (the server inserts `spec`'s
      canaries), 'data' (the canary clients of `data_canaries` join the
      rounds `spec` schedules; the server inserts nothing) or 'both'
      (`canary_kinds`).
    data_canaries: The data canaries ('data' and 'both'), else None.

  Raises:
    ValueError: at construction, if total_rounds or a period is not an int
      >= 1, the canary schedule covers fewer than T rounds, or the mechanism
      needs a fixed clip and `dp` adapts it.
  """
  sampler: participation.ClientSampler
  total_rounds: int
  spec: canary_spec.CanarySpec | None
  dp: canary_spec.DPAggregation
  delta: float
  client_optimizer: OptimizerSpec
  server_optimizer: OptimizerSpec
  batch_size: int
  epochs: int
  max_examples: int | None
  seed: int
  noise_seed: int | None
  rounds_per_checkpoint: int = 1
  rounds_per_evaluation: int = 1
  max_eval_examples: int | None = None
  mechanism: mechanisms.Mechanism = mechanisms.Gaussian()
  canary_kind: str = 'gradient'
  data_canaries: canary_kinds.DataCanaryPlan | None = None

  def __post_init__(self):
    kinds = canary_kinds.kinds_of(self.canary_kind)
    if any(kind.joins_cohort for kind in kinds) != (
        self.data_canaries is not None):
      raise ValueError(f'canary_kind {self.canary_kind!r} needs data_canaries '
                       'exactly when its canaries join the cohort.')
    if self.spec is not None and len(self.spec.schedule) < self.total_rounds:
      raise ValueError(f'spec.schedule must cover the {self.total_rounds} '
                       f'rounds; got {len(self.spec.schedule)}.')
    mechanisms.check_clip(self.mechanism, self.dp.adaptive)

  @property
  def inserted_spec(self) -> canary_spec.CanarySpec | None:
    """The canaries the server inserts: `spec`, with no rounds for 'data'.

    Under --canary_kind=data the gradient canaries are tracked (their
    cosines cost a matrix product per block) but never inserted: only the
    data canaries' clients join the rounds.
    """
    spec = self.spec
    if spec is None or any(kind.server_inserts for kind in
                           canary_kinds.kinds_of(self.canary_kind)):
      return spec
    return dataclasses.replace(spec, schedule=[()] * len(spec.schedule))

  def cohort(self, round_index: int) -> np.ndarray:
    """The clients of 0-based round `round_index`, data canaries included.

    Args:
      round_index: The round, in [0, T).

    Returns:
      The sampler's indices, then the data canaries' clients that join
      (indices from `data_canaries.num_real_clients` on), int64.
    """
    real = np.asarray(self.sampler.indices(round_index), np.int64)
    if self.data_canaries is None:
      return real
    return np.concatenate([real, self.data_canaries.clients(round_index)])

  @property
  def client_participation(self) -> dp_fedavg.Participation:
    """How real clients take part, as the accounting reads it."""
    return dp_fedavg.Participation(
        sampling=self.sampler.sampling,
        clients_per_round=self.sampler.clients_per_round,
        num_clients=self.sampler.num_clients, rounds=self.total_rounds)

  def run_facts(self, dim: int,
                correlated: dp_fedavg.CorrelatedNoise | None = None
                ) -> references.RunFacts:
    """What the run's report references rest on (`run_report`).

    Args:
      dim: d, the model's trainable parameters.
      correlated: The strategy's numbers under matrix-factorization noise
        (the engine computes them); None otherwise.

    Returns:
      z, delta, d, the canaries' presentations and schedule (none without
      canaries), T, the clip, the expected cohort, the clients' sampling
      and the server's momentum (sgdm's; 0 for sgd and adam).
    """
    spec = self.spec
    return references.RunFacts(
        noise_multiplier=float(self.dp.noise_multiplier), delta=self.delta,
        dim=dim, canary_presentations=1 if spec is None else spec.repetitions,
        rounds=self.total_rounds, clip=self.dp.clip,
        cohort=self.dp.clients_per_round,
        participation=self.client_participation,
        presentation_counts=(None if spec is None else
                             spec.presentation_counts()),
        schedule=None if spec is None else spec.schedule,
        correlated=correlated,
        server_momentum=self.server_optimizer.momentum)
