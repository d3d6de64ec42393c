"""The DP mechanism of a run, as a small typed value, with its report rules.

A run's server aggregate is privatized by one mechanism. Each is a frozen
value built once (from the launcher's flags, `from_name`, or by the API's
user) and carried by `design.run_plan.RunPlan`. Each mechanism is one entry,
its class, which holds everything about it: its names (`names`), the
options it takes (`options`, `from_options`), why it needs a fixed clip
(`fixed_clip_reason`), the engines that run it and why each other one
cannot (`engines`; each engine's `supports(plan)` asks `engine_reason`) and
its report rules (`references`): the analytical eps of a canary, the
accounted eps of a real client and the final-model reference. The noise
itself is the engines' (each engine's noise for the mechanism). The
mechanisms:

* `Gaussian`: independent Gaussian noise each round, DP-FedAvg (Andrew et
  al., ICLR 2024, Sections 2 and 4): the canary's r-fold Gaussian mechanism,
  a real client under its sampling (dp_accounting), the last-iterate
  heuristic (Steinke et al., 2025).
* `MatrixFactorization`: DP-FTRL's correlated noise from a BLT or banded
  strategy (jax-privacy; JAX engine): the canary under the strategy, one
  Gaussian mechanism for a real client, the final model's Gaussian
  (`correlated_final_model`).
* `TreeAggregation`: DP-FTRL's binary-tree noise, one tree over the run (TFF
  and JAX engines; `tree_aggregation`).
* `DistributedDP`: discrete noise shares added by the clients and summed by
  secure aggregation (TFF engine; `distributed_dp`): the Gaussian rules at
  the effective noise multiplier z_eff, and Skellam's own RDP bound.

The mechanisms other than `Gaussian` need a fixed clip; each says why
(`fixed_clip_reason`).

Adding a mechanism: its class here (names, options, fixed-clip reason,
engines, references) and `MECHANISMS` below, and its noise in each engine
that runs it (docs/architecture.md, "Extending the house").
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from one_shot_epe import validation
from one_shot_epe.accounting import correlated_final_model
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import references as references_lib
from one_shot_epe.accounting import tree_aggregation

__all__ = ['CORRELATED_ALL_ITERATES_NOTE', 'DistributedDP', 'ENGINES',
           'Gaussian', 'MECHANISMS', 'MECHANISM_NAMES', 'MatrixFactorization',
           'Mechanism', 'TREE_ALL_ITERATES_NOTE',
           'TreeAggregation', 'check_clip', 'engine_reason', 'from_name']

# The engines a mechanism may run on: TensorFlow Federated, JAX, Flower.
ENGINES = ('tff', 'jax', 'flower')
# Why Flower's engine runs only independent Gaussian noise: its DP wrappers.
_FLOWER_GAUSSIAN_ONLY = (
    "Flower's DP wrappers add independent Gaussian noise each round, the "
    'one mechanism the Flower engine audits')

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
class Gaussian:
  """Independent Gaussian noise each round: DP-FedAvg (Sections 2 and 4)."""
  name: ClassVar[str] = 'gaussian'
  names: ClassVar[tuple[str, ...]] = ('gaussian',)
  options: ClassVar[tuple[str, ...]] = ()
  fixed_clip_reason: ClassVar[str | None] = None
  engines: ClassVar[Mapping[str, str | None]] = {
      'tff': None, 'jax': None, 'flower': None}

  @classmethod
  def from_options(cls, name: str) -> 'Gaussian':
    """The mechanism of --mechanism=`name` (it takes no options).

    Args:
      name: 'gaussian'.

    Returns:
      The mechanism.
    """
    del name
    return cls()

  def setting(self) -> dict[str, Any]:
    """The report's setting entries of the mechanism (none: the default).

    Returns:
      The entries by name, for the report's setting table.
    """
    return {}

  def references(
      self, facts: references_lib.RunFacts) -> references_lib.References:
    """The canary's r-fold Gaussian, a real client's eps, the heuristic.

    Args:
      facts: The run's facts; `round_event`, if given, is what the
        aggregator recorded (adaptive clipping's count noise included).

    Returns:
      The references at z.
    """
    return references_lib.gaussian_references(facts.noise_multiplier, facts)


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
  names: ClassVar[tuple[str, ...]] = ('blt', 'banded')
  options: ClassVar[tuple[str, ...]] = ('num_bands',)
  fixed_clip_reason: ClassVar[str] = (
      'the correlated noise of different rounds must share one scale')
  engines: ClassVar[Mapping[str, str | None]] = {
      'tff': ("TFF's aggregators have no matrix-factorization noise (the BLT "
              "and banded strategies are jax-privacy's); the JAX engine runs "
              'it'),
      'jax': None,
      'flower': _FLOWER_GAUSSIAN_ONLY}

  @classmethod
  def from_options(cls, name: str,
                   num_bands: int | None = None) -> 'MatrixFactorization':
    """The mechanism of --mechanism=`name` ('blt' or 'banded').

    Args:
      name: The strategy, 'blt' or 'banded'.
      num_bands: The bands of 'banded' (only there).

    Returns:
      The mechanism.

    Raises:
      ValueError: as the constructor.
    """
    return cls(name, num_bands)

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

  def references(
      self, facts: references_lib.RunFacts) -> references_lib.References:
    """The canary under the strategy; a real client as one Gaussian.

    Args:
      facts: The run's facts; `correlated` must hold the strategy's numbers
        (the engine computes them from the schedule).

    Returns:
      The references; the final-model reference is the Gaussian of the
      final model's noise w^T C^-1 Z (`correlated_final_model`; w = 1 under
      server SGD), None when `facts.rounds` is.

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
    final = (None if facts.rounds is None else
             correlated_final_model.final_model_epsilon(
                 z, facts.delta, correlated, facts.rounds, facts.seen_signals,
                 facts.server_momentum))
    return references_lib.References(
        z, analytical, accounted, final, self.setting(),
        ('all_iterates_under_correlated_noise', CORRELATED_ALL_ITERATES_NOTE))


@dataclasses.dataclass(frozen=True)
class TreeAggregation:
  """DP-FTRL's binary-tree noise: one tree over the run, never restarted.

  Attributes:
    efficient: Honaker's efficient prefix-sum estimator (TFF's default) or
      the plain sum of a prefix's nodes.
  """
  efficient: bool = True
  name: ClassVar[str] = 'tree'
  names: ClassVar[tuple[str, ...]] = ('tree',)
  options: ClassVar[tuple[str, ...]] = ()
  fixed_clip_reason: ClassVar[str] = (
      'each tree node\'s noise is calibrated to one clip for every round it '
      'covers')
  engines: ClassVar[Mapping[str, str | None]] = {
      'tff': None, 'jax': None, 'flower': _FLOWER_GAUSSIAN_ONLY}

  @classmethod
  def from_options(cls, name: str) -> 'TreeAggregation':
    """The mechanism of --mechanism=`name` (TFF's default estimator).

    Args:
      name: 'tree'.

    Returns:
      The mechanism, with Honaker's efficient estimator.
    """
    del name
    return cls()

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

  def references(
      self, facts: references_lib.RunFacts) -> references_lib.References:
    """The tree's own references (`tree_aggregation`).

    Args:
      facts: The run's facts; `rounds` and `schedule` are needed.

    Returns:
      The canary's eps over every node it shifts, a real client's exact eps
      at its largest node shift over its participation patterns
      (`tree_aggregation.client_epsilon`), the final model's noise (the
      noised prefix sum at T under server SGD).

    Raises:
      ValueError: if `facts.rounds` or `facts.schedule` is None.
    """
    if facts.rounds is None or facts.schedule is None:
      raise ValueError('the references of tree aggregation need the rounds '
                       'and the canary schedule.')
    z = facts.noise_multiplier
    tree = tree_aggregation.TreeAggregation.of_schedule(
        facts.schedule, facts.rounds, efficient=self.efficient)
    return references_lib.References(
        z, tree_aggregation.canary_epsilon(z, facts.delta, tree),
        tree_aggregation.client_epsilon(z, facts.delta, tree.rounds,
                                        facts.participation),
        tree_aggregation.final_model_epsilon(z, facts.delta, tree,
                                             facts.seen_signals,
                                             facts.server_momentum),
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
  names: ClassVar[tuple[str, ...]] = ('distributed_dp',)
  options: ClassVar[tuple[str, ...]] = ('ddp_bits', 'ddp_noise')
  # The one compression distributed DP takes.
  compression: ClassVar[str] = 'rotation_discretization'
  fixed_clip_reason: ClassVar[str] = (
      'each client\'s discretization scale and noise share are calibrated '
      'to the clip before the round')
  engines: ClassVar[Mapping[str, str | None]] = {
      'tff': None,
      'jax': ('the JAX engine simulates no secure aggregation (clients\' '
              'discretized, modular noise shares); the TFF engine runs it'),
      'flower': ("the Flower engine audits Flower's DP wrappers, not secure "
                 'aggregation')}

  @classmethod
  def from_options(cls, name: str, ddp_bits: int = 16,
                   ddp_noise: str = 'dgauss') -> 'DistributedDP':
    """The mechanism of --mechanism=`name` with its secure sum's options.

    Args:
      name: 'distributed_dp'.
      ddp_bits: The secure sum's bits.
      ddp_noise: The local noise (`distributed_dp.DDP_NOISES`).

    Returns:
      The mechanism.

    Raises:
      ValueError: if an option is out of range.
    """
    del name
    return cls(distributed_dp.DistributedDP(bits=ddp_bits, noise=ddp_noise))

  def calibration(
      self, facts: references_lib.RunFacts) -> distributed_dp.DdpCalibration:
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

  def references(
      self, facts: references_lib.RunFacts) -> references_lib.References:
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
    references = references_lib.gaussian_references(
        calibration.noise_multiplier,
        dataclasses.replace(facts, round_event=None, round_events=None))
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

# Every mechanism, one entry each; the launcher's --mechanism names are theirs.
MECHANISMS: tuple[type, ...] = (Gaussian, MatrixFactorization,
                                DistributedDP, TreeAggregation)
_TYPE_OF_NAME = {name: kind for kind in MECHANISMS for name in kind.names}
MECHANISM_NAMES = tuple(_TYPE_OF_NAME)
# The options of `from_name` and their values when not given.
_OPTION_DEFAULTS = {'num_bands': None, 'ddp_bits': 16, 'ddp_noise': 'dgauss'}


def from_name(name: str, **options: Any) -> Mechanism:
  """The mechanism a launcher's --mechanism names, with its options.

  Args:
    name: One of `MECHANISM_NAMES`.
    **options: The mechanisms' options (`num_bands`, `ddp_bits`,
      `ddp_noise`); one left at its default is not passed on, one given
      another value must be an option of the named mechanism.

  Returns:
    The mechanism.

  Raises:
    ValueError: if `name` is unknown or an option does not apply to it.
  """
  validation.check_choice('mechanism', name, MECHANISM_NAMES)
  kind = _TYPE_OF_NAME[name]
  unknown = sorted(set(options) - set(_OPTION_DEFAULTS))
  if unknown:
    raise ValueError(f'unknown mechanism options {unknown}; the options are '
                     f'{sorted(_OPTION_DEFAULTS)}.')
  for option, value in options.items():
    if option not in kind.options and value != _OPTION_DEFAULTS[option]:
      raise ValueError(f'{option}={value} does not apply to the {name} '
                       'mechanism.')
  return kind.from_options(name, **{option: value for option, value in
                                    options.items() if option in kind.options})


def engine_reason(mechanism: Mechanism, engine: str) -> str | None:
  """Why `engine` cannot run `mechanism`; None if it runs it.

  The one table of engine x mechanism (`engines` of each mechanism), which
  every engine's `supports(plan)` asks.

  Args:
    mechanism: A mechanism.
    engine: One of `ENGINES`.

  Returns:
    None, or one line saying why the engine does not run it.

  Raises:
    ValueError: if `engine` is not one of `ENGINES`.
  """
  validation.check_choice('engine', engine, ENGINES)
  return mechanism.engines[engine]


def check_clip(mechanism: Mechanism, adaptive: bool) -> None:
  """The fixed-clip rule: refuses an adaptive clip under a mechanism that
  needs a fixed one (`fixed_clip_reason`).

  Args:
    mechanism: A mechanism.
    adaptive: Whether the run's clip adapts (no fixed clip given).

  Raises:
    ValueError: 'the <name> mechanism needs a fixed clip: <reason>', if the
      clip adapts and the mechanism needs a fixed one.
  """
  reason = mechanism.fixed_clip_reason
  if adaptive and reason is not None:
    raise ValueError(f'the {mechanism.name} mechanism needs a fixed clip: '
                     f'{reason}.')
