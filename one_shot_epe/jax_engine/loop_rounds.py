"""The 'loop' local-training strategy of `round_engine.RoundEngine` (CPUs).

Andrew et al. (ICLR 2024), Algorithm 2's round as small jitted computations
called from Python: one `client_training.local_step` per real batch of each
client (`client_training.accumulated_step` per batch when batches are cut
into micro-batches), a fold of each client's clipped update into the running
sum, and `fedavg.server_round`. On a CPU this is the fast way: XLA computes a
convolution's weight gradient 15-40x slower inside a loop body than at top
level and turns vmapped convolutions into grouped ones. Padding costs
nothing: a client runs only its own batches, and empty slots none.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.design import canary_spec
from one_shot_epe.jax_engine import client_training
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import optimizers

__all__ = ['LoopRounds', 'host_bytes']


def host_bytes(*arrays: Any) -> int:
  """Bytes of the host (numpy) arrays among `arrays`: what goes to the device.

  Args:
    *arrays: anything; only numpy arrays count.

  Returns:
    Their bytes.
  """
  return sum(int(x.nbytes) for x in arrays if isinstance(x, np.ndarray))


class LoopRounds:
  """Rounds, and a program's runs one after another, the 'loop' way.

  Args:
    loss_fn, client_optimizer, server_optimizer, config, canary_clip,
      client_dropout: as `round_engine.RoundEngine`'s.
    note: called with a computation's name and its arguments before every
      call (`RoundEngine` counts the compiled signatures).
  """

  def __init__(self, loss_fn: client_training.LossFn,
               client_optimizer: optimizers.Optimizer,
               server_optimizer: optimizers.Optimizer,
               config: canary_spec.DPAggregation, canary_clip: str,
               client_dropout: bool, note: Callable[..., None]):
    self._client_optimizer = client_optimizer
    self._client_dropout = client_dropout
    self._note = note
    # What the last `round` or `program` sent to the device.
    self.upload_bytes = 0

    def step_fn(weights, state, inputs, labels, example_mask, key):
      return client_training.local_step(loss_fn, client_optimizer, weights,
                                        state, inputs, labels, example_mask,
                                        key)

    def micro_step_fn(weights, state, inputs, labels, example_mask, keys):
      return client_training.accumulated_step(loss_fn, client_optimizer,
                                              weights, state, inputs, labels,
                                              example_mask, keys)

    def fold_fn(initial, trained, clip, clipped_sum, unclipped_sum):
      clipped, norm = client_training.clip_by_global_norm(
          client_training.finite_delta(initial, trained), clip)
      return (clipped_sum + ravel_pytree(clipped)[0],
              unclipped_sum + (norm <= clip) - 0.5)

    def server_fn(state, clipped_sum, unclipped_sum, num_clients,
                  canary_directions, canary_mask, key, noise, scales=None):
      return fedavg.server_round(server_optimizer, config, canary_clip, state,
                                 clipped_sum, unclipped_sum, num_clients,
                                 canary_directions, canary_mask, key, noise,
                                 scales)

    self._step = jax.jit(step_fn)
    self._micro_step = jax.jit(micro_step_fn)
    self._fold = jax.jit(fold_fn)
    self._server = jax.jit(server_fn)

  def round(self, state: fedavg.ServerState, batches: data.RoundBatches,
            per_batch: int, canary_directions: jax.Array,
            canary_mask: jax.Array, key: jax.Array, noise: jax.Array | None,
            scales: np.ndarray | None = None
            ) -> tuple[fedavg.ServerState, fedavg.RoundOutput]:
    """One round: each client's real batches, one jitted step each.

    Args:
      state: the server state.
      batches: the round's batches, cut into `per_batch` micro-batches a
        batch (`data.micro_batches`; 1: whole batches).
      per_batch: micro-batches per batch; a batch's non-empty ones (a prefix
        of it) are one `client_training.accumulated_step`, micro-batch i of
        a client with dropout key `batch_key(client key, i)`.
      canary_directions: float32 [k, d], the canaries' directions.
      canary_mask: float32 [k], 1 for the canaries inserted this round.
      key: the round's key.
      noise: the round's correlated noise row, or None.
      scales: as `fedavg.server_round`'s, or None for the engine's config.

    Returns:
      The new state and the round's output.
    """
    slots = batches.client_mask.shape[0]
    keys = fedavg.client_keys(key, slots)
    flat, _ = ravel_pytree(state.params)
    clipped_sum = jnp.zeros_like(flat)
    unclipped_sum = jnp.zeros((), jnp.float32)
    initial_optimizer_state = self._client_optimizer.init(state.params)
    present = np.flatnonzero(batches.client_mask > 0)
    counts = (batches.example_mask.sum(axis=2) > 0).reshape(
        slots, -1, per_batch).sum(axis=2)
    for slot in present:
      weights, optimizer_state = state.params, initial_optimizer_state
      client_key = keys[slot] if self._client_dropout else None
      for batch in np.flatnonzero(counts[slot]):
        if per_batch == 1:
          name, step, rows = 'step', self._step, batch
          dropout = client_training.batch_key(client_key, batch)
        else:  # The batch's micro-batches, [count, micro_batch, ...].
          name, step = 'micro_step', self._micro_step
          rows = slice(batch * per_batch,
                       batch * per_batch + counts[slot, batch])
          dropout = [client_training.batch_key(client_key, i)
                     for i in range(rows.start, rows.stop)]
        args = (weights, optimizer_state, batches.inputs[slot, rows],
                batches.labels[slot, rows], batches.example_mask[slot, rows],
                dropout)
        self.upload_bytes += host_bytes(*args[2:5])
        self._note(name, *args)
        weights, optimizer_state = step(*args)
      args = (state.params, weights, state.clip, clipped_sum, unclipped_sum)
      self._note('fold', *args)
      clipped_sum, unclipped_sum = self._fold(*args)
    args = (state, clipped_sum, unclipped_sum,
            jnp.asarray(present.size, jnp.float32), canary_directions,
            canary_mask, key, noise, scales)
    self._note('server', *args)
    return self._server(*args)

  def program(self, states: fedavg.ServerState,
              runs: Sequence[tuple[data.RoundBatches, int]],
              canary_directions: Sequence[jax.Array],
              canary_masks: Sequence[np.ndarray], keys: Sequence[jax.Array],
              noises: Sequence[jax.Array] | None, scales: np.ndarray,
              active: np.ndarray
              ) -> tuple[fedavg.ServerState, fedavg.RoundOutput]:
    """`RoundEngine.run_rounds`: the active runs' rounds one after another.

    Args:
      states: the runs' states stacked on a leading run axis.
      runs: each run's (batches, micro-batches a batch), as `round` takes
        them.
      canary_directions: each run's [k, d] directions.
      canary_masks: each run's [k] mask.
      keys: each run's round key.
      noises: each run's correlated noise row, or None for none.
      scales: float32 [R, 2], each run's `fedavg.noise_scales`.
      active: bool [R]; an inactive run keeps its state, and its output
        repeats an active run's.

    Returns:
      The new states and the rounds' outputs, stacked by run.
    """
    new_states, outputs = [], []
    uploaded = 0
    scales = np.asarray(scales, np.float32)
    for run, (batches, per_batch) in enumerate(runs):
      state = fedavg.run_state(states, run)
      if not active[run]:
        new_states.append(state)
        outputs.append(None)
        continue
      noise = None if noises is None else noises[run]
      self.upload_bytes = host_bytes(canary_directions[run],
                                     canary_masks[run], noise, scales[run])
      state, output = self.round(
          state, batches, per_batch,
          jnp.asarray(canary_directions[run], jnp.float32),
          jnp.asarray(canary_masks[run], jnp.float32), keys[run], noise,
          scales[run])
      uploaded += self.upload_bytes
      new_states.append(state)
      outputs.append(output)
    some = next(output for output in outputs if output is not None)
    self.upload_bytes = uploaded
    return (fedavg.stack_states(new_states),
            fedavg.stack_states([some if output is None else output
                                 for output in outputs]))

  def cost(self, state: fedavg.ServerState, batches: data.RoundBatches,
           canary_directions: np.ndarray, canary_mask: np.ndarray,
           key: jax.Array) -> dict[str, float]:
    """XLA's own cost analysis of one round: {'flops', 'bytes accessed'}.

    Summed over the round's computations as this strategy runs them (one
    local step per real batch, a fold per client, the server step), so no
    loop body is counted once for all its trips. For roofline predictions
    on hardware that is not here (`benchmarks/accelerator_round.py`).

    Args:
      state: the server state.
      batches: the round's batches (whole batches).
      canary_directions: float32 [k, d], the canaries' directions.
      canary_mask: float32 [k], 1 for the canaries inserted.
      key: the round's key.

    Returns:
      {'flops': ..., 'bytes accessed': ...} of the round.
    """
    keys = fedavg.client_keys(key, batches.client_mask.shape[0])
    flat, _ = ravel_pytree(state.params)
    optimizer_state = self._client_optimizer.init(state.params)
    zero = jnp.zeros((), jnp.float32)
    total = {'flops': 0.0, 'bytes accessed': 0.0}

    def add(function, count, *args):
      cost = function.lower(*args).compile().cost_analysis()
      cost = cost[0] if isinstance(cost, (list, tuple)) else cost
      for name in total:
        total[name] += count * float(cost.get(name, 0.0))

    steps = int((batches.example_mask.sum(axis=2) > 0).sum())
    clients = int((batches.client_mask > 0).sum())
    add(self._step, steps, state.params, optimizer_state,
        batches.inputs[0, 0], batches.labels[0, 0], batches.example_mask[0, 0],
        client_training.batch_key(
            keys[0] if self._client_dropout else None, 0))
    add(self._fold, clients, state.params, state.params, state.clip,
        jnp.zeros_like(flat), zero)
    add(self._server, 1, state, jnp.zeros_like(flat), zero, zero,
        jnp.asarray(canary_directions, jnp.float32),
        jnp.asarray(canary_mask, jnp.float32), key, None)
    return total
