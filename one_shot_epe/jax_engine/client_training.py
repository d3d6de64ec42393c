"""A client's local training in a DP-FedAvg round, as pure jit-able functions.

Andrew et al. (ICLR 2024), Algorithm 2, steps 1-2 of `fedavg`'s module
docstring, as TFF's client work computes them: from the server model, local
SGD (the client optimizer, fresh every round) over the client's batches
(`local_step`), or over the micro-batches a batch is cut into, whose
gradients add up to the batch's before its one step (`micro_batch_gradient`,
`accumulated_step`, `apply_gradient`); the update Delta = initial - trained,
zeroed if not finite (`finite_delta`), clipped to L2 norm S_t
(`clip_by_global_norm`). `client_update` is a whole client's training as one
`lax.scan`; `fedavg`'s rounds and `loop_rounds` run these steps their own way
(clients vmapped, packed into lanes, or one jitted step per batch).
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from one_shot_epe.jax_engine import optimizers

__all__ = ['LossFn', 'accumulated_step', 'apply_gradient', 'batch_key',
           'client_update', 'clip_by_global_norm', 'finite_delta',
           'local_step', 'micro_batch_gradient']

_tree_map = jax.tree_util.tree_map
# loss(params, inputs, labels, example_mask, dropout_key) -> scalar.
LossFn = Callable[[Any, jax.Array, jax.Array, jax.Array, Any], jax.Array]


def _global_norm(tree: Any) -> jax.Array:
  leaves = jax.tree_util.tree_leaves(tree)
  return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves))


def clip_by_global_norm(tree: Any, clip: jax.Array) -> tuple[Any, jax.Array]:
  """tf.clip_by_global_norm: (tree * clip min(1/norm, 1/clip), norm).

  Args:
    tree: a pytree of float arrays (a client's update).
    clip: S > 0, the L2 bound on the whole tree, a float32 scalar.

  Returns:
    (the tree scaled to global L2 norm at most `clip`, a pytree like `tree`
    (unchanged when its norm is at most `clip`, zero stays zero); its global
    norm before clipping, a scalar).
  """
  norm = _global_norm(tree)
  scale = clip * jnp.minimum(1.0 / norm, 1.0 / clip)
  return _tree_map(lambda x: x * scale, tree), norm


def local_step(loss_fn: LossFn, optimizer: optimizers.Optimizer,
               weights: Any, state: Any, inputs: jax.Array, labels: jax.Array,
               example_mask: jax.Array, key: Any) -> tuple[Any, Any]:
  """One local optimizer step on a batch's mean loss over its valid examples.

  A batch without valid examples leaves weights and optimizer state as they
  are.

  Args:
    loss_fn: the model's loss (`LossFn`), the mean over the valid examples.
    optimizer: the client optimizer.
    weights: the model's parameters.
    state: the optimizer's state.
    inputs: [batch_size, ...] the batch's inputs.
    labels: [batch_size, ...] its targets.
    example_mask: [batch_size], 1 for its valid examples, 0 for padding.
    key: the batch's dropout key (`batch_key`), or None for no dropout.

  Returns:
    (weights, optimizer state) after the step.
  """
  grads = jax.grad(loss_fn)(weights, inputs, labels, example_mask, key)
  return _step_if(optimizer, weights, state, grads,
                  jnp.sum(example_mask) > 0)


def _step_if(optimizer: optimizers.Optimizer, weights: Any, state: Any,
             grads: Any, present: jax.Array) -> tuple[Any, Any]:
  """The optimizer's step on `grads` where `present`, else no change."""
  new_state, new_weights = optimizer.step(state, weights, grads)
  keep = lambda new, old: jnp.where(present, new, old)  # pylint: disable=unnecessary-lambda-assignment
  return _tree_map(keep, new_weights, weights), _tree_map(keep, new_state,
                                                          state)


def micro_batch_gradient(loss_fn: LossFn, weights: Any, inputs: jax.Array,
                         labels: jax.Array, example_mask: jax.Array,
                         key: Any) -> tuple[Any, jax.Array]:
  """(n x the gradient of the mean loss, n) over a micro-batch's n examples.

  A batch's micro-batches sum these to n times the gradient of its mean
  loss (a `LossFn` averages over the valid examples), so a batch cut into
  micro-batches (`accumulated_step`, `fedavg.packed_round`) takes the step its
  whole batch would, up to float rounding.

  Args:
    loss_fn: the model's loss.
    weights: the model's parameters.
    inputs: the micro-batch's inputs.
    labels: its targets.
    example_mask: [micro_batch], 1 for its valid examples.
    key: its dropout key, or None.

  Returns:
    (n x gradient, a pytree like `weights`; n, a float32 scalar).
  """
  count = jnp.sum(example_mask)
  grads = jax.grad(loss_fn)(weights, inputs, labels, example_mask, key)
  return _tree_map(lambda g: count * g, grads), count


def accumulated_step(loss_fn: LossFn, optimizer: optimizers.Optimizer,
                     weights: Any, state: Any, inputs: jax.Array,
                     labels: jax.Array, example_mask: jax.Array,
                     keys: Sequence[Any]) -> tuple[Any, Any]:
  """`local_step` on a batch given as micro-batches ([k, micro, ...] each).

  The gradient is the example-weighted mean of the micro-batches'
  (`micro_batch_gradient`); micro-batch j gets dropout key keys[j]. k is
  static: the micro-batches are unrolled (no loop body, so no slow
  convolution gradients on a CPU).

  Args:
    loss_fn: the model's loss.
    optimizer: the client optimizer.
    weights: the model's parameters.
    state: the optimizer's state.
    inputs: [k, micro_batch, ...] the batch's micro-batches' inputs.
    labels: [k, micro_batch, ...] their targets.
    example_mask: [k, micro_batch], 1 for valid examples.
    keys: k dropout keys (None each: no dropout).

  Returns:
    (weights, optimizer state) after the step; unchanged without examples.
  """
  total, count = None, jnp.zeros((), jnp.float32)
  for j, key in enumerate(keys):
    grads, n = micro_batch_gradient(loss_fn, weights, inputs[j], labels[j],
                                    example_mask[j], key)
    total = grads if total is None else _tree_map(jnp.add, total, grads)
    count = count + n
  return apply_gradient(optimizer, weights, state, total, count)


def apply_gradient(optimizer: optimizers.Optimizer, weights: Any,
                   state: Any, total: Any, count: jax.Array
                   ) -> tuple[Any, Any]:
  """The optimizer's step on total / count; none when count is 0.

  The step of a batch whose micro-batches' `micro_batch_gradient`s sum to
  (`total`, `count`).

  Args:
    optimizer: the client optimizer.
    weights: the model's parameters.
    state: the optimizer's state.
    total: the summed n x gradients, a pytree like `weights`.
    count: the examples they cover, a float32 scalar (0: no step).

  Returns:
    (weights, optimizer state) after the step; unchanged when `count` is 0.
  """
  grads = _tree_map(lambda g: g / jnp.maximum(count, 1.0), total)
  return _step_if(optimizer, weights, state, grads, count > 0)


def batch_key(client_key: Any, batch_index: Any) -> Any:
  """The dropout key of a client's batch (None without dropout).

  Args:
    client_key: the client's dropout key (`fedavg.client_keys`), or None.
    batch_index: the batch's index within the client, an int or int32
      scalar (traced inside a loop).

  Returns:
    fold_in(client_key, batch_index), or None when `client_key` is None.
  """
  return None if client_key is None else jax.random.fold_in(client_key,
                                                            batch_index)


def finite_delta(initial: Any, trained: Any) -> Any:
  """initial - trained, zeroed if any entry is not finite (TFF's client work).

  Args:
    initial: the parameters the client started from (a pytree).
    trained: its parameters after local training, a pytree like `initial`.

  Returns:
    The update initial - trained, a pytree like `initial`; all zeros when
    any of its entries is NaN or infinite.
  """
  delta = _tree_map(lambda w0, w: w0 - w, initial, trained)
  finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in
                                jax.tree_util.tree_leaves(delta)]))
  return _tree_map(lambda x: jnp.where(finite, x, 0.0), delta)


def client_update(loss_fn: LossFn, optimizer: optimizers.Optimizer,
                  params: Any, inputs: jax.Array, labels: jax.Array,
                  example_mask: jax.Array, dropout_key: Any = None) -> Any:
  """A client's model delta (initial - trained) after local training.

  One `local_step` per batch (leading axis of inputs/labels/example_mask),
  as a `lax.scan`; the optimizer starts fresh every round, as in TFF. A
  delta with a non-finite entry is zeroed (`finite_delta`).

  Args:
    loss_fn: the model's loss (`LossFn`).
    optimizer: the client optimizer (its state starts from `init`).
    params: the server model the client starts from.
    inputs: [batches, batch_size, ...] the client's batches' inputs.
    labels: [batches, batch_size, ...] their targets.
    example_mask: [batches, batch_size], 1 for valid examples; a batch
      without any takes no step.
    dropout_key: the client's dropout key (batch m uses
      `batch_key(dropout_key, m)`), or None for no dropout.

  Returns:
    The update initial - trained, a pytree like `params`.
  """

  def step(carry, batch):
    index, x, y, mask = batch
    return local_step(loss_fn, optimizer, *carry, x, y, mask,
                      batch_key(dropout_key, index)), None

  num_batches = example_mask.shape[0]
  (trained, _), _ = jax.lax.scan(
      step, (params, optimizer.init(params)),
      (jnp.arange(num_batches), inputs, labels, example_mask))
  return finite_delta(params, trained)
