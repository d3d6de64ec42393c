"""DP-FTRL's tree-aggregation noise on the JAX engine (`--mechanism=tree`).

The noise of the TFF engine's `CanaryDPFactory.tree_aggregation`
(tensorflow_privacy's `TreeResidualSumQuery`, Kairouz et al. 2021), in law,
drawn by `jax.random`: one binary tree over the run's rounds, never
restarted. Node (l, j) covers the rounds [j 2^l, (j + 1) 2^l) and has its
own noise n_(l, j) ~ N(0, sigma^2 I_d), sigma = z S in the sum's units (the
round's aggregate divides by the expected cohort), drawn from the key
fold_in(fold_in(fold_in(PRNGKey(seed), `TREE_STREAM`), l), j): a pure
function of (seed, node), apart from the rounds' keys fold_in(PRNGKey(seed),
t). A node is drawn when its last round arrives, so only nodes within the
run's rounds are ever drawn.

The noised prefix sum of the first p rounds carries the noise of the nodes of
p's binary decomposition, kept as a buffer of at most depth d-sized vectors
(the most recent node, the lowest level, first):

* efficient (Honaker 2015, tensorflow_privacy's `EfficientTreeAggregator`,
  TFF's default): a completed node's buffer value is
  v = 0.5 (v_left + v_right) + n, variance (2 - 2^-l) sigma^2, and the prefix
  noise is sum_l v_l / (2 - 2^-l);
* plain (`TreeAggregator`): a completed node's value is its own noise n, and
  the prefix noise the plain sum of the buffer.

Round t (0-based) releases its sum plus P(t + 1) - P(t), the difference of
consecutive prefix sums' noise (P(0) = 0): `TreeNoise.rows` yields these
rows, which replace the round's independent Gaussian draw
(`fedavg.server_round`). The prefix variances are
`accounting.tree_aggregation.tree_prefix_variance`.

Resuming: the rows from round t on are a function of (seed, the rounds before
t); `rows(d, t)` replays the buffer's updates of rounds 0..t-1 (the same
operations, so the same bits) and yields from round t, so a resumed run
equals an uninterrupted one.
"""

import dataclasses
import functools
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp

from one_shot_epe import validation
from one_shot_epe.design import run_plan

__all__ = ['TREE_STREAM', 'TreeNoise', 'plan_rows']

# Folded into PRNGKey(seed) for the tree's node keys ('tree' in ASCII): the
# rounds' keys fold in the round, far below it.
TREE_STREAM = 0x74726565


@functools.partial(jax.jit, static_argnames=('dim',))
def _node(base: jax.Array, level: jax.Array, index: jax.Array,
          std: jax.Array, dim: int) -> jax.Array:
  """Node (level, index)'s own noise: std N(0, I_dim) from its key."""
  key = jax.random.fold_in(jax.random.fold_in(base, level), index)
  return std * jax.random.normal(key, (dim,), jnp.float32)


@functools.partial(jax.jit, static_argnames=('dim',))
def _efficient_parent(left: jax.Array, right: jax.Array, base: jax.Array,
                      level: jax.Array, index: jax.Array, std: jax.Array,
                      dim: int) -> jax.Array:
  """A completed node's efficient buffer value 0.5 (v_left + v_right) + n."""
  return 0.5 * (left + right) + _node(base, level, index, std, dim)


@validation.fields(noise_std=validation.Real(0.0), seed=validation.Int(0))
@dataclasses.dataclass(frozen=True)
class TreeNoise:
  """A run's tree noise: its rows of rounds, from any round on.

  Attributes:
    noise_std: sigma = z S >= 0, each node's noise std in the sum's units.
    seed: The run's seed (`run_plan.RunPlan.seed`); node (l, j)'s noise is
      a pure function of (seed, l, j).
    efficient: Honaker's efficient prefix estimator (TFF's default) or the
      plain sum of the prefix's nodes.

  Raises:
    ValueError: at construction, for a negative noise_std or seed.
    TypeError: at construction, for an efficient that is not a bool.
  """
  noise_std: float
  seed: int
  efficient: bool = True

  def __post_init__(self):
    if not isinstance(self.efficient, bool):
      raise validation.ArgumentTypeError(
          f'efficient must be a bool; got {self.efficient!r}.')

  def _base(self) -> jax.Array:
    """The key the nodes' keys fold their level and index into."""
    return jax.random.fold_in(jax.random.PRNGKey(self.seed), TREE_STREAM)

  def node(self, level: int, index: int, dim: int) -> jax.Array:
    """Node (level, index)'s own noise n ~ N(0, noise_std^2 I_dim).

    Args:
      level: l >= 0.
      index: j >= 0: the node covers rounds [j 2^l, (j + 1) 2^l).
      dim: d >= 1.

    Returns:
      float32 [dim], a pure function of (seed, level, index).

    Raises:
      ValueError: if an argument is out of range.
    """
    validation.check_int('level', level, 0, 31)
    validation.check_int('index', index, 0, 2**32 - 1)
    validation.check_int('dim', dim, 1)
    return _node(self._base(), jnp.uint32(level), jnp.uint32(index),
                 jnp.float32(self.noise_std), dim)

  def _add_leaf(self, buffer: list[tuple[int, jax.Array]], leaf: int,
                base: jax.Array, dim: int) -> None:
    """Round `leaf`'s update of the buffer: its leaf and the nodes it ends.

    The buffer's first `ended` entries, levels 0..ended-1, are the left
    children of the nodes that round `leaf` completes (`leaf`'s trailing
    one bits); they give way to the highest completed node.
    """
    std = jnp.float32(self.noise_std)
    ended = 0
    while ended < len(buffer) and buffer[ended][0] == ended:
      ended += 1
    if self.efficient:
      value = _node(base, jnp.uint32(0), jnp.uint32(leaf), std, dim)
      for level in range(1, ended + 1):
        value = _efficient_parent(buffer[level - 1][1], value, base,
                                  jnp.uint32(level),
                                  jnp.uint32(leaf >> level), std, dim)
    else:
      value = _node(base, jnp.uint32(ended), jnp.uint32(leaf >> ended), std,
                    dim)
    del buffer[:ended]
    buffer.insert(0, (ended, value))

  def _prefix(self, buffer: list[tuple[int, jax.Array]]) -> jax.Array:
    """The prefix's noise: its nodes' buffer values, weighted if efficient."""
    total = None
    for level, value in buffer:
      term = value * (1.0 / (2.0 - 0.5**level)) if self.efficient else value
      total = term if total is None else total + term
    return total

  def rows(self, dim: int, first_round: int) -> Iterator[jax.Array]:
    """Rows P(t + 1) - P(t) of rounds t = first_round, first_round + 1, ...

    Args:
      dim: d >= 1, the model's parameters.
      first_round: Rounds to replay first, >= 0 (0 for a fresh run).

    Returns:
      An endless iterator of float32 [dim] rows; the caller takes as many as
      it needs.

    Raises:
      ValueError: if an argument is out of range.
    """
    validation.check_int('dim', dim, 1)
    validation.check_int('first_round', first_round, 0)
    return self._rows(dim, first_round)

  def _rows(self, dim: int, first_round: int) -> Iterator[jax.Array]:
    """`rows` of checked arguments."""
    base = self._base()
    buffer: list[tuple[int, jax.Array]] = []
    for leaf in range(first_round):
      self._add_leaf(buffer, leaf, base, dim)
    previous = (self._prefix(buffer) if buffer else
                jnp.zeros((dim,), jnp.float32))
    leaf = first_round
    while True:
      self._add_leaf(buffer, leaf, base, dim)
      prefix = self._prefix(buffer)
      yield prefix - previous
      previous, leaf = prefix, leaf + 1


def plan_rows(
    plan: run_plan.RunPlan) -> Callable[[int, int], Iterator[jax.Array]]:
  """The rows of a tree-aggregation run (its `mechanism_noise` entry).

  Args:
    plan: The run: a `mechanisms.TreeAggregation` mechanism (its estimator),
      a fixed clip S, noise multiplier z and seed.

  Returns:
    `TreeNoise(z S, seed, efficient).rows`: nodes of std z S, keyed by the
    plan's seed.
  """
  dp = plan.dp
  return TreeNoise(dp.noise_multiplier * dp.clip, plan.seed,
                   plan.mechanism.efficient).rows
