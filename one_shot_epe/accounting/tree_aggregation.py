"""Analytical and accounted epsilons of DP-FTRL's tree aggregation (no TF).

`--mechanism=tree` (`tff_engine.canary_aggregator.CanaryDPFactory.
tree_aggregation`, TFF's `DifferentiallyPrivateFactory.tree_aggregation`)
replaces DP-FedAvg's independent noise of Andrew et al. (ICLR 2024, Sec. 4)
by the binary-tree noise of DP-FTRL (Kairouz et al. 2021, "Practical and
Private (Deep) Learning without Sampling or Shuffling"; its App. D has the
tree's accounting):
one tree over the run's T rounds, never restarted (as TFF builds it). Leaf
t (0-based round) holds round t's sum of clipped records; node n at level l
covers the rounds [j 2^l, (j + 1) 2^l) and holds their records' sum plus
its own noise N(0, (z S)^2 I) (noise multiplier z, clip S). Only the nodes
whose rounds all lie before T are ever drawn (`tree_depth` levels of them);
the released noised prefix sum at round t is the exact prefix sum plus the
noise of the nodes of t's binary decomposition (plainly summed, or with
Honaker's 2015 efficient estimator, TFF's default), and the round's
aggregate is the difference of consecutive prefix sums
(tensorflow_privacy's `TreeResidualSumQuery`). Every release is therefore a
post-processing of the noised nodes.

The references of a run's report (`run_report.build_run_report`):

* `canary_epsilon`, the analytical eps of a canary (both threat models). A
  canary of norm S inserted in rounds t_1..t_r shifts node n by k_n S c (k_n
  of its rounds under n, c its unit direction). The nodes' noise is
  i.i.d. N(0, (z S)^2 I), so the adversary who knows the rounds and sees
  every node faces one Gaussian mechanism with
  mu = sqrt(sum_n k_n^2) / z (`tree_node_norm`), the matrix mechanism's
  mu of `dp_fedavg.matrix_factorization_canary_epsilon` with C the tree's
  0/1 node-by-round matrix. Every iterate and the final model are functions
  of the nodes, so this bounds both threat models' eps. With r = 1 and
  T = 1 it is the Gaussian mechanism's 1 / z.
* `final_model_epsilon`, the final-model reference. With server SGD and a
  linear loss the model moves by the sum of the rounds' aggregates, which
  telescopes to the final noised prefix sum: the exact sum of every record
  plus the noise of the prefix at T. A canary inserted K times appears K
  times in that exact sum, in its direction as N(K S, v(T) (z S)^2) against
  N(0, v(T) (z S)^2) when absent, where v(T) = sum over the set bits l of T
  of w_l (`tree_prefix_variance`): w_l = 1 for the plain sum, and
  w_l = 1 / (2 - 2^-l) for the efficient estimator (its level-l buffer is
  v = n + (v_left + v_right) / 2, variance (2 - 2^-l) (z S)^2, reweighted by
  1 / (2 - 2^-l)). So mu = K / (z sqrt(v(T))). Exact for a linear loss and
  server SGD; a heuristic otherwise, like `dp_fedavg.last_iterate_epsilon`
  (which is this with v(T) = T for independent noise).
* `client_epsilon`, a real client's accounted eps: dp_accounting's
  `SingleEpochTreeAggregationDpEvent` with its RDP accountant (the only one
  that supports it; neighbouring relation REPLACE_SPECIAL, a client's
  records replaced by zeros). That event assumes each record at most once
  in the tree, i.e. sensitivity sqrt(depth) S. A run of one shuffled epoch
  is exactly that. Over E > 1 shuffled epochs (one tree, no restart: the
  event's composition over several trees does not apply) a client's shift
  is at most E sqrt(depth) S (at each of the depth levels the node counts
  k_n sum to at most E, so sum_n k_n^2 <= E^2), accounted as the event at
  noise multiplier z / E. Bernoulli or Poisson sampling: tree aggregation's
  accounting claims no amplification by sampling, so the client is
  accounted in every round (shift `tree_node_norm` of all T rounds, the
  most any pattern can reach, as the event at z sqrt(depth) / that norm).
"""

import dataclasses
import math
from collections.abc import Sequence

import dp_accounting
import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.stats import estimation
from one_shot_epe import validation

__all__ = ['TreeAggregation', 'canary_epsilon', 'client_epsilon',
           'final_model_epsilon', 'tree_depth', 'tree_node_norm',
           'tree_prefix_variance']


def tree_depth(rounds: int) -> int:
  """Levels of the tree over `rounds` = T leaves whose nodes are ever drawn.

  Level l has a complete node iff 2^l <= T, so floor(log2 T) + 1 levels, the
  ceil(log2(T + 1)) of dp_accounting's tree accounting.

  Args:
    rounds: T >= 1.

  Returns:
    The depth.

  Raises:
    ValueError: if `rounds` < 1.
  """
  return validation.check_int('rounds', rounds, 1).bit_length()


def _node_sum_of_squares(ids: np.ndarray, record_rounds: np.ndarray,
                         rounds: int, num_ids: int) -> np.ndarray:
  """sum_n k_n^2 per id over the complete nodes (k_n: the id's rounds in n)."""
  total = np.zeros(num_ids, np.int64)
  for level in range(tree_depth(rounds)):
    blocks = record_rounds >> level
    complete = ((blocks + 1) << level) <= rounds
    keys = ids[complete] * (rounds + 1) + blocks[complete]
    unique, counts = np.unique(keys, return_counts=True)
    np.add.at(total, unique // (rounds + 1), counts.astype(np.int64)**2)
  return total


def _check_record_rounds(record_rounds: ArrayLike, rounds: int) -> np.ndarray:
  """`record_rounds` as int64 distinct rounds in [0, rounds), or ValueError."""
  values = np.asarray(record_rounds)
  if (values.ndim != 1 or not np.issubdtype(values.dtype, np.integer) or
      np.any(values < 0) or np.any(values >= rounds) or
      np.unique(values).size != values.size):
    raise ValueError('record_rounds must be distinct 0-based rounds in '
                     f'[0, {rounds - 1}]; got {values.tolist()}.')
  return values.astype(np.int64)


def tree_node_norm(record_rounds: ArrayLike, rounds: int) -> float:
  """sqrt(sum_n k_n^2): a record's shift of the tree's nodes, in clip norms.

  Args:
    record_rounds: The distinct 0-based rounds in which the record (a
      canary, a client) is inserted with norm S.
    rounds: T >= 1, the tree's leaves.

  Returns:
    The L2 norm of the record's shift of all complete nodes over S (the sum
    of the tree matrix's columns at its rounds); sqrt(depth) for one round
    among the first 2^(depth - 1).

  Raises:
    ValueError: if an argument is out of range.
  """
  rounds = validation.check_int('rounds', rounds, 1)
  values = _check_record_rounds(record_rounds, rounds)
  return math.sqrt(float(_node_sum_of_squares(
      np.zeros(values.size, np.int64), values, rounds, 1)[0]))


def tree_prefix_variance(rounds: int, efficient: bool) -> float:
  """v(T): the noise variance of the prefix sum at T, in (z S)^2.

  Args:
    rounds: T >= 1, the prefix (the run's rounds).
    efficient: Honaker's efficient estimator (tensorflow_privacy's
      `EfficientTreeAggregator`) or the plain sum of the nodes.

  Returns:
    sum over the set bits l of T of 1 (plain) or 1 / (2 - 2^-l) (efficient).

  Raises:
    ValueError: if `rounds` < 1.
  """
  rounds = validation.check_int('rounds', rounds, 1)
  levels = [l for l in range(rounds.bit_length()) if rounds >> l & 1]
  if not efficient:
    return float(len(levels))
  return math.fsum(1.0 / (2.0 - 0.5**l) for l in levels)


@dataclasses.dataclass(frozen=True)
class TreeAggregation:
  """A run's tree-aggregation noise as the numbers its references need.

  Attributes:
    rounds: T, the tree's leaves (one tree, never restarted).
    efficient: Honaker's efficient estimator (TFF's default) or the plain
      sum of the prefix's nodes.
    canary_node_norm: The largest `tree_node_norm` over the seen canaries'
      rounds, so the analytical eps bounds every seen canary's (0 when none
      was inserted).
    canary_presentations: K, the most insertions of a seen canary.
  """
  rounds: int
  efficient: bool
  canary_node_norm: float
  canary_presentations: int

  def __post_init__(self):
    validation.check_int('rounds', self.rounds, 1)
    if not isinstance(self.efficient, bool):
      raise TypeError(f'efficient must be a bool; got {self.efficient!r}.')
    validation.check_real('canary_node_norm', self.canary_node_norm, 0.0)
    validation.check_int('canary_presentations', self.canary_presentations,
                         0, self.rounds)

  @classmethod
  def of_schedule(cls, schedule: Sequence[ArrayLike], rounds: int,
                  efficient: bool = True) -> 'TreeAggregation':
    """The numbers of a canary schedule's first `rounds` rounds.

    Args:
      schedule: Entry t lists the distinct seen ids inserted in 0-based
        round t (`canary_spec.CanarySpec.schedule`).
      rounds: T >= 1, the rounds of the tree (later entries are ignored).
      efficient: As the attribute.

    Returns:
      The `TreeAggregation`.

    Raises:
      ValueError: if `rounds` < 1.
    """
    rounds = validation.check_int('rounds', rounds, 1)
    entries = [np.asarray(ids, np.int64).reshape(-1)
               for ids in list(schedule)[:rounds]]
    ids = (np.concatenate(entries) if entries else np.zeros(0, np.int64))
    when = np.repeat(np.arange(len(entries), dtype=np.int64),
                     [e.size for e in entries])
    if ids.size == 0:
      return cls(rounds, efficient, 0.0, 0)
    num_ids = int(ids.max()) + 1
    squares = _node_sum_of_squares(ids, when, rounds, num_ids)
    return cls(rounds, efficient, math.sqrt(float(squares.max())),
               int(np.bincount(ids).max()))

  @property
  def estimator(self) -> str:
    """The prefix sums' estimator, in words."""
    return ('efficient (Honaker 2015)' if self.efficient else
            'plain sum of nodes')


def _gaussian(mu: float, delta: float) -> float:
  """Exact eps of one Gaussian mechanism of mean shift mu (inf at mu = inf)."""
  if math.isinf(mu):
    return math.inf
  if mu == 0:
    return 0.0
  return estimation.gaussian_epsilon(1.0 / mu, delta)


def canary_epsilon(noise_multiplier: float, delta: float,
                   tree: TreeAggregation) -> dp_fedavg.MechanismEpsilon:
  """Analytical eps of a seen canary under tree aggregation (module doc).

  Args:
    noise_multiplier: z >= 0, each node's noise std over the clip.
    delta: The delta, in (0, 1).
    tree: The run's tree and canaries.

  Returns:
    The eps of one Gaussian mechanism at mu = canary_node_norm / z
    (math.inf at z = 0) and its description.

  Raises:
    ValueError: if an argument is out of range.
  """
  z = validation.check_real('noise_multiplier', noise_multiplier, 0.0)
  delta = validation.check_probability('delta', delta)
  norm = tree.canary_node_norm
  mu = (0.0 if norm == 0 else math.inf) if z == 0 else norm / z
  return dp_fedavg.MechanismEpsilon(
      _gaussian(mu, delta),
      f'a canary presented up to {tree.canary_presentations} time(s) in '
      f'known rounds under tree aggregation ({tree.rounds} leaves, one '
      'tree): every node it shifts seen, one Gaussian mechanism at mu = '
      f'sqrt(sum_n k_n^2) / z = {norm:.4g} / {z:g}, no amplification')


def final_model_epsilon(noise_multiplier: float, delta: float,
                        tree: TreeAggregation) -> dp_fedavg.MechanismEpsilon:
  """Final-model eps of a canary under tree aggregation (module doc).

  Args:
    noise_multiplier: z >= 0, each node's noise std over the clip.
    delta: The delta, in (0, 1).
    tree: The run's tree and canaries.

  Returns:
    The eps of one Gaussian mechanism at mu = K / (z sqrt(v(T))), K the
    most presentations of a seen canary (math.inf at z = 0), and its
    description.

  Raises:
    ValueError: if an argument is out of range.
  """
  z = validation.check_real('noise_multiplier', noise_multiplier, 0.0)
  delta = validation.check_probability('delta', delta)
  variance = tree_prefix_variance(tree.rounds, tree.efficient)
  presented = tree.canary_presentations
  mu = ((0.0 if presented == 0 else math.inf) if z == 0 else
        presented / (z * math.sqrt(variance)))
  return dp_fedavg.MechanismEpsilon(
      _gaussian(mu, delta),
      f'heuristic beyond a linear loss and server SGD: the final model as '
      f'the noised prefix sum at T = {tree.rounds} under tree aggregation '
      f'({tree.estimator}, noise variance {variance:.4g} (z S)^2), a canary '
      f'presented {presented} time(s): one Gaussian mechanism at mu = '
      f'{presented} / ({z:g} sqrt({variance:.4g}))')


def client_epsilon(noise_multiplier: float, delta: float, rounds: int,
                   participation: dp_fedavg.Participation | None
                   ) -> dp_fedavg.MechanismEpsilon:
  """Accounted eps of a real client under tree aggregation (module doc).

  dp_accounting's `SingleEpochTreeAggregationDpEvent` over the T rounds,
  with its `RdpAccountant` (REPLACE_SPECIAL), at z divided by the client's
  sensitivity multiplier m: 1 for one shuffled epoch (the event's own
  assumption), min(E, every round's) for E shuffled epochs, every round's
  (`tree_node_norm` of all T rounds / sqrt(depth)) for Bernoulli or Poisson
  sampling or when no participation is given.

  Args:
    noise_multiplier: z >= 0, each node's noise std over the clip.
    delta: The delta, in (0, 1).
    rounds: T >= 1, the tree's leaves (the rounds accounted).
    participation: How real clients take part (its rounds are replaced by
      `rounds`); None for a client in every round.

  Returns:
    The eps (math.inf at z = 0) and a description of what was accounted.

  Raises:
    TypeError: if `participation` is not an `dp_fedavg.Participation`.
    ValueError: if an argument is out of range.
  """
  z = validation.check_real('noise_multiplier', noise_multiplier, 0.0)
  delta = validation.check_probability('delta', delta)
  rounds = validation.check_int('rounds', rounds, 1)
  depth = tree_depth(rounds)
  every_round = tree_node_norm(np.arange(rounds), rounds) / math.sqrt(depth)
  if participation is None:
    multiplier = every_round
    shift = every_round * math.sqrt(depth)
    how = (f'a client in every one of the {rounds} rounds (no sampling '
           f'given): shift sqrt(sum_n k_n^2) = {shift:.4g} clip norms, as '
           f'the event at z / {every_round:.4g}')
  elif not isinstance(participation, dp_fedavg.Participation):
    raise TypeError('participation must be an dp_fedavg.Participation; got '
                    f'{type(participation).__name__}.')
  elif participation.sampling == 'shuffle':
    epochs = dataclasses.replace(participation, rounds=rounds).epochs
    multiplier = 1.0 if epochs == 1 else min(float(epochs), every_round)
    how = ('one shuffled epoch: each client at most once in the tree, the '
           "event's own assumption" if epochs == 1 else
           f'{epochs} shuffled epochs in one tree (no restart): a client\'s '
           f'shift at most {multiplier:.4g} sqrt(depth) clip norms, as the '
           f'event at z / {multiplier:.4g} (an upper bound)')
  else:
    multiplier = every_round
    how = (f'{participation.sampling} sampling, which tree aggregation\'s '
           'accounting does not amplify: a client accounted in every one of '
           f'the {rounds} rounds, as the event at z / {every_round:.4g}')
  description = (
      f'a real client under tree aggregation: dp_accounting '
      f'SingleEpochTreeAggregationDpEvent(z = {z:g}, {rounds} steps, depth '
      f'{depth}), RDP accountant (its conversion to (eps, delta) is looser '
      'than the exact Gaussian eps of the same shift), neighbours by '
      f'replacement with zeros; {how}')
  if z == 0:
    return dp_fedavg.MechanismEpsilon(math.inf, description)
  accountant = dp_accounting.rdp.RdpAccountant(
      neighboring_relation=(
          dp_accounting.privacy_accountant.NeighboringRelation.REPLACE_SPECIAL))
  accountant.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(
      z / multiplier, rounds))
  return dp_fedavg.MechanismEpsilon(float(accountant.get_epsilon(delta)),
                                     description)
