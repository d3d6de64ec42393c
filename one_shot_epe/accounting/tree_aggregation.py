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
  1 / (2 - 2^-l)). So mu = K / (z sqrt(v(T))), mixed over the seen canaries'
  K as in `dp_fedavg.last_iterate_epsilon` (which is this with v(T) = T for
  independent noise). Server momentum weighs round t's update by
  (1 - beta^(T-t+1)) / (1 - beta) (`last_iterate`), which changes both the
  canary's signal and the noise (`correlated_final_model`'s module doc).
  Exact for a linear loss; a heuristic otherwise.
* `client_epsilon`, a real client's accounted eps, exact. A client takes
  part in rounds t_1..t_r with records of norm <= S (zeros when it is
  replaced: REPLACE_SPECIAL, dp_accounting's relation for the tree) and
  shifts node n by at most k_n S (k_n of its rounds under n; equality when
  its records share one direction), so the nodes are one Gaussian mechanism
  at mu = max over the client's possible rounds of sqrt(sum_n k_n^2) / z,
  with the exact eps of `estimation.gaussian_epsilon` (Balle and Wang 2018;
  the PLD of dp_accounting's Gaussian event is the same). The nodes are
  released over the rounds and a client's later records may depend on
  earlier releases; for Gaussian noise an adaptive stream has the guarantee
  of the non-adaptive one (Denisov et al. 2022, "Improved Differential
  Privacy for SGD via Optimal Private Linear Operators on Adaptive
  Streams"; over several participations, Choquette-Choo et al. 2023,
  "Multi-Epoch Matrix Factorization Mechanisms for Private Machine
  Learning"). The possible rounds: one shuffled epoch of R rounds, one round
  anywhere (mu = sqrt(depth) / z, dp_accounting's
  `SingleEpochTreeAggregationDpEvent`, whose RDP conversion is looser);
  E > 1 shuffled epochs in one tree (no restart), one round in each block
  [e R, (e + 1) R) (`worst_case_node_norm`: the largest shift over these
  patterns, by a dynamic program over the tree's nodes); Bernoulli or
  Poisson sampling, which tree aggregation's accounting does not amplify:
  every round (`tree_node_norm` of all T rounds, the most any pattern can
  reach).
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe.accounting import correlated_final_model
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import last_iterate
from one_shot_epe.stats import estimation
from one_shot_epe import validation

__all__ = ['TreeAggregation', 'canary_epsilon', 'client_epsilon',
           'final_model_epsilon', 'tree_depth', 'tree_node_norm',
           'tree_prefix_variance', 'worst_case_node_norm']


@validation.arguments('rounds')
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
  return rounds.bit_length()


def _node_sum_of_squares(ids: np.ndarray, record_rounds: np.ndarray,
                         rounds: int, num_ids: int) -> np.ndarray:
  """sum_n k_n^2 per id over the complete nodes (k_n: the id's rounds in n)."""
  total = np.zeros(num_ids, np.int64)
  for level in range(rounds.bit_length()):  # The levels of `tree_depth`.
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


@validation.arguments('rounds')
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
  return _tree_node_norm(_check_record_rounds(record_rounds, rounds), rounds)


def _tree_node_norm(record_rounds: np.ndarray, rounds: int) -> float:
  """`tree_node_norm` of checked arguments."""
  return math.sqrt(float(_node_sum_of_squares(
      np.zeros(record_rounds.size, np.int64), record_rounds, rounds, 1)[0]))


def _epoch_span(epoch: int, rounds: int, rounds_per_epoch: int
                ) -> tuple[int, int]:
  """The rounds [start, end) of a 0-based shuffled epoch, cut at T."""
  return (epoch * rounds_per_epoch,
          min((epoch + 1) * rounds_per_epoch, rounds))


def _worst_node_sum_of_squares(rounds: int, rounds_per_epoch: int) -> int:
  """max sum_n k_n^2 over one round per epoch (checked arguments).

  A dynamic program over the nodes of the perfect binary tree over the next
  power of two >= T leaves (the nodes not within T weigh 0). For node n,
  the epochs meeting its rounds are those inside it, whose rounds must all
  be under n, and at most two crossing its ends, whose round may lie under
  n or not. best(n)[S] is the largest sum of k_m^2 over the complete nodes
  m under n when S is the set of crossing epochs whose round lies under n;
  a parent joins its children's tables, each epoch's round under at most
  one child and, for an epoch inside the parent, under exactly one.
  """
  leaves = 1 << max(rounds - 1, 0).bit_length()

  def crossing(start: int, end: int) -> tuple[frozenset[int], int]:
    """The epochs crossing [start, end)'s ends, and the count inside it."""
    end = min(end, rounds)
    if start >= end:
      return frozenset(), 0
    first, last = start // rounds_per_epoch, (end - 1) // rounds_per_epoch
    cross = frozenset(
        epoch for epoch in {first, last}
        if _epoch_span(epoch, rounds, rounds_per_epoch)[0] < start or
        _epoch_span(epoch, rounds, rounds_per_epoch)[1] > end)
    return cross, last - first + 1 - len(cross)

  # Level 0: one table per leaf.
  tables = []
  for leaf in range(leaves):
    cross, inside = crossing(leaf, leaf + 1)
    if cross:
      tables.append({frozenset(): 0, cross: 1})
    else:
      tables.append({frozenset(): inside})
  size = 1
  while len(tables) > 1:
    size *= 2
    parents = []
    for index in range(len(tables) // 2):
      start = index * size
      cross, inside = crossing(start, start + size)
      weight = 1 if start + size <= rounds else 0
      child_cross = crossing(start, start + size // 2)[0] | crossing(
          start + size // 2, start + size)[0]
      must = child_cross - cross
      table: dict[frozenset[int], int] = {}
      for left, left_value in tables[2 * index].items():
        for right, right_value in tables[2 * index + 1].items():
          if left & right or not must <= (left | right):
            continue
          chosen = (left | right) & cross
          value = (left_value + right_value +
                   weight * (inside + len(chosen))**2)
          if value > table.get(chosen, -1):
            table[chosen] = value
      parents.append(table)
    tables = parents
  (root,) = tables
  return max(value for chosen, value in root.items()
             if chosen == crossing(0, leaves)[0])


@validation.arguments('rounds', rounds_per_epoch=validation.Int(1))
def worst_case_node_norm(rounds: int, rounds_per_epoch: int) -> float:
  """A client's largest shift of the tree over shuffled epochs, in clip norms.

  The client takes part once in each epoch [e R, (e + 1) R) of the T rounds
  (a last, partial epoch included); the largest `tree_node_norm` over those
  patterns: sqrt(depth) for one epoch, `tree_node_norm` of every round for
  R = 1. Exact, by a dynamic program over the tree (`tree_depth` levels,
  O(T) nodes, each joining at most 4 x 4 states).

  Args:
    rounds: T >= 1, the tree's leaves.
    rounds_per_epoch: R >= 1, the rounds of a shuffled epoch.

  Returns:
    max over (t_1, ..., t_E), t_e in epoch e, of sqrt(sum_n k_n^2).

  Raises:
    ValueError: if an argument is out of range.
  """
  return math.sqrt(float(_worst_node_sum_of_squares(rounds,
                                                    rounds_per_epoch)))


@validation.arguments('rounds')
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
  return _tree_prefix_variance(rounds, efficient)


def _tree_prefix_variance(rounds: int, efficient: bool) -> float:
  """`tree_prefix_variance` of a checked `rounds`."""
  levels = [l for l in range(rounds.bit_length()) if rounds >> l & 1]
  if not efficient:
    return float(len(levels))
  return math.fsum(1.0 / (2.0 - 0.5**l) for l in levels)


@validation.fields('rounds', canary_node_norm=validation.Real(0.0))
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
    """The checks no field's rule carries (see `validation.fields`).

    Raises:
      TypeError: if `efficient` is not a bool.
      ValueError: if `canary_presentations` is not in [0, rounds].
    """
    if not isinstance(self.efficient, bool):
      raise TypeError(f'efficient must be a bool; got {self.efficient!r}.')
    validation.check_int('canary_presentations', self.canary_presentations,
                         0, self.rounds)

  @classmethod
  @validation.arguments('rounds')
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
  return estimation.gaussian_epsilon.unchecked(1.0 / mu, delta)


def _tree_epsilon(noise_multiplier: float, shift: float, delta: float,
                  description: str) -> dp_fedavg.MechanismEpsilon:
  """One Gaussian mechanism at mu = shift / z (0 or inf at z = 0), checked."""
  if noise_multiplier == 0:
    mu = 0.0 if shift == 0 else math.inf
  else:
    mu = shift / noise_multiplier
  return dp_fedavg.MechanismEpsilon(_gaussian(mu, delta), description)


@validation.arguments('noise_multiplier', 'delta')
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
  norm = tree.canary_node_norm
  return _tree_epsilon(
      noise_multiplier, norm, delta,
      f'a canary presented up to {tree.canary_presentations} time(s) in '
      f'known rounds under tree aggregation ({tree.rounds} leaves, one '
      'tree): every node it shifts seen, one Gaussian mechanism at mu = '
      f'sqrt(sum_n k_n^2) / z = {norm:.4g} / {noise_multiplier:g}, no '
      'amplification')


@validation.arguments('noise_multiplier', 'delta', 'momentum')
def final_model_epsilon(noise_multiplier: float, delta: float,
                        tree: TreeAggregation, presentations: ArrayLike,
                        momentum: float = 0.0) -> dp_fedavg.MechanismEpsilon:
  """Final-model eps of the seen canaries under tree aggregation (module doc).

  Args:
    noise_multiplier: z >= 0, as for `canary_epsilon`.
    delta: The delta, in (0, 1).
    tree: The run's tree (its leaves T and estimator).
    presentations: Each seen canary's signal, as
      `dp_fedavg.last_iterate_epsilon` takes it (its insertions under SGD).
    momentum: beta in [0, 1), the server's heavy-ball momentum (0: SGD).

  Returns:
    The eps of the mixture over the seen canaries of one Gaussian mechanism
    at mu_i = s_i / (z ||sum_t (w_t - w_(t+1)) b_t||)
    (`correlated_final_model.tree_final_noise_norm`; K_i / (z sqrt(v(T)))
    under SGD; math.inf at z = 0), and its description.

  Raises:
    ValueError: if an argument is out of range.
  """
  weights = last_iterate.momentum_weights.unchecked(tree.rounds, momentum)
  norm = correlated_final_model.tree_final_noise_norm(weights, tree.efficient)
  per_round = noise_multiplier * norm / math.sqrt(float(np.dot(weights,
                                                               weights)))
  independent = dp_fedavg.last_iterate_epsilon.unchecked(
      per_round, delta, tree.rounds, presentations, momentum)
  return dp_fedavg.MechanismEpsilon(
      independent.epsilon,
      f'tree aggregation ({tree.estimator}, one tree over T = {tree.rounds} '
      f'rounds): the final model\'s noise, the prefix noises weighted by '
      f'w_t - w_(t+1), has std {norm:.4g} z S (sqrt(v(T)) = '
      f'{math.sqrt(_tree_prefix_variance(tree.rounds, tree.efficient)):.4g} '
      f'under server SGD), as the final model of {tree.rounds} independent '
      f'rounds at noise multiplier z_T = {per_round:.4g}; '
      f'{independent.mechanism}')


@validation.arguments('noise_multiplier', 'delta', 'rounds')
def client_epsilon(noise_multiplier: float, delta: float, rounds: int,
                   participation: dp_fedavg.Participation | None
                   ) -> dp_fedavg.MechanismEpsilon:
  """Accounted eps of a real client under tree aggregation (module doc).

  The exact eps of one Gaussian mechanism at mu = m / z, m the client's
  largest shift of the tree's nodes over S: `worst_case_node_norm` over the
  shuffled epochs of `participation` (sqrt(depth) for one epoch, the
  sensitivity of dp_accounting's `SingleEpochTreeAggregationDpEvent`), or
  `tree_node_norm` of every round for Bernoulli or Poisson sampling or when
  no participation is given.

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
  if participation is None:
    shift = _tree_node_norm(np.arange(rounds), rounds)
    how = f'a client in every one of the {rounds} rounds (no sampling given)'
  elif not isinstance(participation, dp_fedavg.Participation):
    raise TypeError('participation must be an dp_fedavg.Participation; got '
                    f'{type(participation).__name__}.')
  elif participation.sampling == 'shuffle':
    rounds_per_epoch = math.ceil(participation.num_clients /
                                 participation.clients_per_round)
    epochs = dataclasses.replace(participation, rounds=rounds).epochs
    shift = math.sqrt(float(_worst_node_sum_of_squares(rounds,
                                                       rounds_per_epoch)))
    how = ('one shuffled epoch: each client at most once in the tree, the '
           'sensitivity sqrt(depth) of dp_accounting\'s '
           'SingleEpochTreeAggregationDpEvent' if epochs == 1 else
           f'{epochs} shuffled epochs of {rounds_per_epoch} rounds in one '
           'tree (no restart): the largest shift over one round per epoch')
  else:
    shift = _tree_node_norm(np.arange(rounds), rounds)
    how = (f'{participation.sampling} sampling, which tree aggregation\'s '
           'accounting does not amplify: a client accounted in every one of '
           f'the {rounds} rounds')
  description = (
      f'a real client under tree aggregation ({rounds} leaves, depth '
      f'{rounds.bit_length()}, one tree): one Gaussian mechanism at mu = max '
      f'sqrt(sum_n k_n^2) / z = {shift:.4g} / {noise_multiplier:g}, its '
      f'exact eps, neighbours by replacement with zeros; {how}')
  return _tree_epsilon(noise_multiplier, shift, delta, description)
