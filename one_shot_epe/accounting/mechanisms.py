"""The DP mechanism of a run, as a small typed value, with its report rules.

A run's server aggregate is privatized by one mechanism. Each is a frozen
value built once (from the launcher's flags, `from_name`, or by the API's
user) and carried by `design.run_plan.RunPlan`; engines say which they run
(`supports` in each engine's launcher module) and the report asks the
mechanism for its references (`Mechanism.references`), so each mechanism's
rules for the analytical eps of a canary, the accounted eps of a real client
and the final-model reference are written once, here, next to it:

* `Gaussian`: independent Gaussian noise each round, DP-FedAvg (Andrew et
  al., ICLR 2024, Sections 2 and 4): the canary's r-fold Gaussian mechanism,
  a real client under its sampling (dp_accounting), the last-iterate
  heuristic (Steinke et al., 2025).
* `MatrixFactorization`: DP-FTRL's correlated noise from a BLT or banded
  strategy (jax-privacy; JAX engine): the canary under the strategy, one
  Gaussian mechanism for a real client, no last-iterate heuristic.
* `TreeAggregation`: DP-FTRL's binary-tree noise, one tree over the run (TFF
  engine; `tree_aggregation`).
* `DistributedDP`: discrete noise shares added by the clients and summed by
  secure aggregation (TFF engine; `distributed_dp`): the Gaussian rules at
  the effective noise multiplier z_eff, and Skellam's own RDP bound.

The mechanisms other than `Gaussian` need a fixed clip; each says why
(`fixed_clip_reason`).
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import dp_accounting
import numpy as np

from one_shot_epe import validation
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import tree_aggregation

__all__ = ['CORRELATED_ALL_ITERATES_NOTE', 'DistributedDP', 'Gaussian',
           'MECHANISM_NAMES', 'MatrixFactorization', 'Mechanism',
           'References', 'RunFacts', 'TREE_ALL_ITERATES_NOTE', 'TYPE_OF_NAME',
           'TreeAggregation', 'from_name']

# What the all-iterates statistic estimates under matrix-factorization noise
# (docs/mechanisms.md, "Coverage under correlated noise").
CORRELATED_ALL_ITERATES_NOTE = (
    'the max over rounds of per-round cosines, whose noise rows (of C^-1 Z) '
    'are correlated across rounds: the estimate of a weaker attack than the '
    'mechanism allows (in simulation 10-22% of the true eps), not of the '
    'mechanism; the final-model estimate applies as is')
# The same under tree aggregation, whose rounds' aggregates carry
# differences of consecutive prefix sums' tree noise.
TREE_ALL_ITERATES_NOTE = (
    'the max over rounds of per-round cosines; each round\'s noise is the '
    'difference of two prefix sums\' tree noise, correlated across rounds, '
    'so it estimates that attack, not the mechanism; the analytical eps '
    'bounds both threat models')


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
    correlated: The strategy's numbers under matrix-factorization noise,
      which the engine computes (`dp_fedavg.CorrelatedNoise`).
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
  correlated: dp_fedavg.CorrelatedNoise | None = None


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
      the tree's noised prefix sum); None where the mechanism has none.
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


def _gaussian_references(noise_multiplier: float,
                         facts: RunFacts) -> References:
  """The Gaussian rules at `noise_multiplier` (DP-FedAvg, Sec. 4)."""
  analytical = dp_fedavg.canary_epsilon(noise_multiplier, facts.delta,
                                        facts.canary_presentations)
  rounds = facts.rounds
  if rounds is None:
    return References(noise_multiplier, analytical, None, None)
  event = (dp_accounting.GaussianDpEvent(noise_multiplier)
           if facts.round_event is None else facts.round_event)
  accounted = dp_fedavg.client_epsilon_of_event(event, facts.delta,
                                                facts.participation, rounds)
  counts = (np.full(1, facts.canary_presentations)
            if facts.presentation_counts is None else
            facts.presentation_counts)
  heuristic = dp_fedavg.last_iterate_epsilon(noise_multiplier, facts.delta,
                                             rounds, counts)
  return References(noise_multiplier, analytical, accounted, heuristic)


@dataclasses.dataclass(frozen=True)
class Gaussian:
  """Independent Gaussian noise each round: DP-FedAvg (Sections 2 and 4)."""
  name: ClassVar[str] = 'gaussian'
  fixed_clip_reason: ClassVar[str | None] = None

  def setting(self) -> dict[str, Any]:
    """The report's setting entries of the mechanism (none: the default).

    Returns:
      The entries by name, for the report's setting table.
    """
    return {}

  def references(self, facts: RunFacts) -> References:
    """The canary's r-fold Gaussian, a real client's eps, the heuristic.

    Args:
      facts: The run's facts; `round_event`, if given, is what the
        aggregator recorded (adaptive clipping's count noise included).

    Returns:
      The references at z.
    """
    return _gaussian_references(facts.noise_multiplier, facts)


@validation.fields(strategy=validation.Choice(('blt', 'banded')),
                   num_bands=validation.Optional(validation.Int(1)))
@dataclasses.dataclass(frozen=True)
class MatrixFactorization:
  """DP-FTRL's correlated noise C^-1 Z from a BLT or banded strategy.

  Attributes:
    strategy: 'blt' (a buffered linear Toeplitz strategy) or 'banded' (a
      banded Toeplitz one), optimised by jax-privacy for the run.
    num_bands: b, the bands of 'banded' (None for 'blt').

  Raises:
    ValueError: at construction, for another strategy, num_bands given with
      'blt' or missing with 'banded', or num_bands < 1.
  """
  strategy: str
  num_bands: int | None = None
  fixed_clip_reason: ClassVar[str] = (
      'the correlated noise of different rounds must share one scale')

  def __post_init__(self):
    if (self.strategy == 'banded') != (self.num_bands is not None):
      raise ValueError('num_bands is needed with the banded strategy and only '
                       f'there; got strategy={self.strategy!r}, num_bands='
                       f'{self.num_bands}.')

  @property
  def name(self) -> str:
    """The flag's name of the mechanism: the strategy's."""
    return self.strategy

  def setting(self) -> dict[str, Any]:
    """The report's setting entries: the strategy (and its bands).

    Returns:
      The entries by name, for the report's setting table.
    """
    setting = {'mechanism': self.strategy}
    if self.num_bands is not None:
      setting['num_bands'] = self.num_bands
    return setting

  def references(self, facts: RunFacts) -> References:
    """The canary under the strategy; a real client as one Gaussian.

    Args:
      facts: The run's facts; `correlated` must hold the strategy's numbers
        (the engine computes them from the schedule).

    Returns:
      The references; no last-iterate heuristic (it assumes independent
      rounds).

    Raises:
      ValueError: if `facts.correlated` is None.
    """
    correlated = facts.correlated
    if correlated is None:
      raise ValueError(f'the references of {self.strategy} noise need the '
                       "strategy's numbers (RunFacts.correlated).")
    z = facts.noise_multiplier
    analytical = dp_fedavg.matrix_factorization_canary_epsilon(
        z, facts.delta, correlated.canary_column_norm,
        correlated.sensitivity, correlated.mechanism)
    accounted = dp_fedavg.MechanismEpsilon(
        dp_fedavg.composed_gaussian_epsilon(z, facts.delta, 1),
        f'a real client under {correlated.mechanism} correlated noise: one '
        f'Gaussian mechanism at noise multiplier {z:g} (noise std z S sens, '
        f'sens = {correlated.sensitivity:.4g} for the run\'s worst '
        'participation), no amplification')
    return References(z, analytical, accounted, None, self.setting(),
                      ('all_iterates_under_correlated_noise',
                       CORRELATED_ALL_ITERATES_NOTE))


@dataclasses.dataclass(frozen=True)
class TreeAggregation:
  """DP-FTRL's binary-tree noise: one tree over the run, never restarted.

  Attributes:
    efficient: Honaker's efficient prefix-sum estimator (TFF's default) or
      the plain sum of a prefix's nodes.
  """
  efficient: bool = True
  name: ClassVar[str] = 'tree'
  fixed_clip_reason: ClassVar[str] = (
      'each tree node\'s noise is calibrated to one clip for every round it '
      'covers')

  def __post_init__(self):
    if not isinstance(self.efficient, bool):
      raise validation.ArgumentTypeError(
          f'efficient must be a bool; got {self.efficient!r}.')

  def setting(self) -> dict[str, Any]:
    """The report's setting entries: the mechanism and its estimator.

    Returns:
      The entries by name, for the report's setting table.
    """
    return {'mechanism': self.name,
            'tree_estimator': ('efficient (Honaker 2015)' if self.efficient
                               else 'plain sum of nodes')}

  def references(self, facts: RunFacts) -> References:
    """The tree's own references (`tree_aggregation`).

    Args:
      facts: The run's facts; `rounds` and `schedule` are needed.

    Returns:
      The canary's eps over every node it shifts, a real client's exact eps
      at its largest node shift over its participation patterns
      (`tree_aggregation.client_epsilon`), the final model's noised prefix
      sum.

    Raises:
      ValueError: if `facts.rounds` or `facts.schedule` is None.
    """
    if facts.rounds is None or facts.schedule is None:
      raise ValueError('the references of tree aggregation need the rounds '
                       'and the canary schedule.')
    z = facts.noise_multiplier
    tree = tree_aggregation.TreeAggregation.of_schedule(
        facts.schedule, facts.rounds, efficient=self.efficient)
    return References(
        z, tree_aggregation.canary_epsilon(z, facts.delta, tree),
        tree_aggregation.client_epsilon(z, facts.delta, tree.rounds,
                                        facts.participation),
        tree_aggregation.final_model_epsilon(z, facts.delta, tree),
        self.setting(), ('all_iterates_under_tree_noise',
                         TREE_ALL_ITERATES_NOTE))


@dataclasses.dataclass(frozen=True)
class DistributedDP:
  """Distributed DP: clients' discrete noise shares summed by secure sum.

  Attributes:
    params: The secure aggregation's bits, modular-clip probability and
      local noise (`distributed_dp.DistributedDP`).
  """
  params: distributed_dp.DistributedDP = dataclasses.field(
      default_factory=distributed_dp.DistributedDP)
  name: ClassVar[str] = 'distributed_dp'
  # The one compression distributed DP takes.
  compression: ClassVar[str] = 'rotation_discretization'
  fixed_clip_reason: ClassVar[str] = (
      'each client\'s discretization scale and noise share are calibrated '
      'to the clip before the round')

  def calibration(self, facts: RunFacts) -> distributed_dp.DdpCalibration:
    """The aggregation's parameters for the run's clip, cohort and d.

    Args:
      facts: The run's facts; `clip` and `cohort` are needed.

    Returns:
      TFF's calibration of the run (`distributed_dp.calibrate`).

    Raises:
      ValueError: if `facts.clip` or `facts.cohort` is None.
    """
    if facts.clip is None or facts.cohort is None:
      raise ValueError('distributed DP needs a fixed clip and the expected '
                       'cohort (RunFacts.clip, RunFacts.cohort).')
    return distributed_dp.calibrate(facts.noise_multiplier, facts.clip,
                                    facts.cohort, facts.dim, self.params)

  def setting(self) -> dict[str, Any]:
    """The report's setting entry of the mechanism before calibration.

    Returns:
      The entries by name, for the report's setting table.
    """
    return {'mechanism': self.name}

  def references(self, facts: RunFacts) -> References:
    """The Gaussian rules at z_eff, and Skellam's RDP bound beside them.

    Args:
      facts: The run's facts; `clip` and `cohort` are needed.

    Returns:
      The references at the effective noise multiplier of the summed shares
      (their Gaussian approximation); with Skellam noise the setting adds
      `ddp_skellam_epsilon`, the RDP bound over the rounds a real client may
      join (Agarwal et al., 2021).
    """
    calibration = self.calibration(facts)
    references = _gaussian_references(calibration.noise_multiplier,
                                      dataclasses.replace(facts,
                                                          round_event=None))
    setting = calibration.setting()
    if calibration.noise == 'skellam':
      participation = facts.participation
      joins = (participation.epochs if participation is not None and
               participation.sampling == 'shuffle' else facts.rounds)
      if joins is not None:
        setting['ddp_skellam_epsilon'] = distributed_dp.skellam_epsilon(
            calibration, facts.delta, joins)
    return dataclasses.replace(references, setting=setting)


Mechanism = Gaussian | MatrixFactorization | TreeAggregation | DistributedDP

# The launcher's --mechanism names and the type each names.
TYPE_OF_NAME = {'gaussian': Gaussian, 'blt': MatrixFactorization,
                'banded': MatrixFactorization, 'distributed_dp': DistributedDP,
                'tree': TreeAggregation}
MECHANISM_NAMES = tuple(TYPE_OF_NAME)


def from_name(name: str, *, num_bands: int | None = None,
              ddp_bits: int = 16, ddp_noise: str = 'dgauss') -> Mechanism:
  """The mechanism a launcher's --mechanism names, with its parameters.

  Args:
    name: One of `MECHANISM_NAMES`.
    num_bands: The bands of 'banded' (only there).
    ddp_bits: The secure sum's bits of 'distributed_dp'.
    ddp_noise: The local noise of 'distributed_dp' (`distributed_dp.
      DDP_NOISES`).

  Returns:
    The mechanism.

  Raises:
    ValueError: if `name` is unknown or a parameter does not apply.
  """
  validation.check_choice('mechanism', name, MECHANISM_NAMES)
  if name in ('blt', 'banded'):
    return MatrixFactorization(name, num_bands)
  if num_bands is not None:
    raise ValueError(f'num_bands applies to the banded mechanism only; got '
                     f'mechanism {name!r}.')
  if name == 'distributed_dp':
    return DistributedDP(distributed_dp.DistributedDP(bits=ddp_bits,
                                                      noise=ddp_noise))
  if ddp_noise != 'dgauss':
    raise ValueError(f'ddp_noise={ddp_noise} applies to distributed_dp only; '
                     f'got mechanism {name!r}.')
  return TreeAggregation() if name == 'tree' else Gaussian()
