"""One DP-FedAvg round with canaries, as the TFF path computes it, in JAX.

Andrew et al. (ICLR 2024), Algorithm 2, on the TFF engine's aggregation
(`tff_engine.canary_aggregator`, `tff_engine.seeded_queries`), for the same
`canary_spec.DPAggregation` and canary clip: in round t with clip S_t,

1. every client runs local SGD (the client optimizer) over its batches for the
   configured epochs, from the server model; its update is Delta = initial -
   trained (zeroed if not finite, as TFF's client work does);
2. Delta is clipped to L2 norm S_t (tf.clip_by_global_norm: scale
   S_t min(1/||Delta||, 1/S_t)); with adaptive clipping the client also
   reports whether ||Delta|| <= S_t;
3. the clipped updates are summed; the round's canaries (unit directions c_j)
   enter the sum as c_j S_t / ||c_j|| (Algorithm 2, line 7), counted as
   unclipped ('project', the paper) or clipped ('clip', its published code);
4. the sum gets Gaussian noise of std z_v S_t, where z_v = z for a fixed clip
   and, for the adaptive clip, `canary_spec.value_noise_multiplier` (the
   noise split that leaves an overall multiplier z, as tff.aggregators'
   `DifferentiallyPrivateFactory.gaussian_adaptive` and the canary factory do);
5. the noised sum is divided by the expected cohort size (NormalizedQuery);
6. adaptive clipping (Andrew et al. 2021, tensorflow_privacy's
   QuantileEstimatorQuery, geometric update): b = clamp((sum of (unclipped -
   1/2) + N(0, sigma_b^2)) / cohort + 1/2, 0, 1) and S_{t+1} = S_t
   exp(-eta (b - gamma));
7. the server optimizer takes the noised mean as its gradient.

This module is the round's math as pure, jit-able functions: the clients
vmapped over a padded client axis (`dp_fedavg_round`; absent clients are
masked out of every sum) or packed back to back into lanes of that axis
(`packed_round`), and the server's steps (`server_round`). A client's local
training (steps 1-2) is `client_training`'s.
`round_engine.RoundEngine` compiles them the way each device runs them
fastest and shards the client axis over all local devices.

The noise is a pure function of the round key (`jax.random`): distributed as
the TFF path's seeded noise, not bit-equal to it.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.jax_engine import client_training
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.design import canary_spec

__all__ = ['RoundOutput', 'ServerState', 'adaptive_clip_update',
           'canary_records', 'client_keys', 'dp_fedavg_round',
           'init_server_state', 'noise_scales', 'packed_round', 'run_state',
           'server_round', 'stack_states']

_tree_map = jax.tree_util.tree_map


class ServerState(NamedTuple):
  """What the server carries between rounds (a pytree).

  Attributes:
    params: the model parameters.
    optimizer_state: the server optimizer's state.
    clip: S_t, float32 scalar.
    round_num: t, int32 scalar (rounds completed).
  """
  params: Any
  optimizer_state: Any
  clip: jax.Array
  round_num: jax.Array


class RoundOutput(NamedTuple):
  """Per-round results.

  Attributes:
    aggregate: float32 [d], the noised mean update rho_bar_t (flattened in
      parameter order; Algorithm 3's aggregate whose canary cosines are
      tracked).
    clip: S_t used in this round.
    unclipped_fraction: the noised, clamped fraction b of unclipped records
      (adaptive clipping; NaN for a fixed clip).
    num_clients: number of real clients in the round.
    canaries_inserted: number of canaries inserted.
  """
  aggregate: jax.Array
  clip: jax.Array
  unclipped_fraction: jax.Array
  num_clients: jax.Array
  canaries_inserted: jax.Array


def canary_records(directions: jax.Array, canary_mask: jax.Array,
                   clip: jax.Array) -> jax.Array:
  """Sum over the inserted canaries of c_j S_t / ||c_j|| (Algorithm 2, l. 7).

  Args:
    directions: float32 [k, d], the run's seen canaries (nonzero rows; k may
      be 0).
    canary_mask: [k], 1 for the canaries inserted this round, 0 for the
      others (a fixed k keeps one compiled round).
    clip: S_t > 0, the round's clip.

  Returns:
    float32 [d]: the inserted canaries, each scaled to norm S_t, summed.
  """
  norms = jnp.linalg.norm(directions, axis=1)
  scale = jnp.where(canary_mask > 0, clip / norms, 0.0)
  return scale @ directions


def adaptive_clip_update(clip: jax.Array, unclipped_sum: jax.Array,
                         count_noise: jax.Array,
                         config: canary_spec.DPAggregation
                         ) -> tuple[jax.Array, jax.Array]:
  """(S_{t+1}, b): the geometric quantile update of Andrew et al. 2021.

  b = clamp((sum + noise) / cohort + 1/2, 0, 1);
  S_{t+1} = S_t exp(-eta (b - gamma)).

  Args:
    clip: S_t > 0, the round's clip.
    unclipped_sum: sum over the round's records (clients and canaries) of
      1[norm <= S_t] - 1/2.
    count_noise: a draw of N(0, sigma_b^2), the noise on that sum.
    config: the aggregation (cohort = `clients_per_round`, eta =
      `clip_learning_rate`, gamma = `target_unclipped_quantile`).

  Returns:
    (S_{t+1}, b): the next clip and the noised unclipped fraction in [0, 1].
  """
  fraction = (unclipped_sum + count_noise) / config.clients_per_round + 0.5
  fraction = jnp.clip(fraction, 0.0, 1.0)
  new_clip = clip * jnp.exp(
      -config.clip_learning_rate *
      (fraction - config.target_unclipped_quantile))
  return new_clip, fraction


def init_server_state(params: Any, server_optimizer: optimizers.Optimizer,
                      config: canary_spec.DPAggregation) -> ServerState:
  """The state before round 0: S_0 is the fixed or the initial clip.

  Args:
    params: the initial model parameters (cast to float32).
    server_optimizer: the server optimizer (its state starts from `init`).
    config: the aggregation (`clip`, or `initial_clip` when adaptive).

  Returns:
    The `ServerState` with round_num 0.
  """
  params = _tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
  clip = config.initial_clip if config.adaptive else config.clip
  return ServerState(params=params,
                     optimizer_state=server_optimizer.init(params),
                     clip=jnp.asarray(clip, jnp.float32),
                     round_num=jnp.asarray(0, jnp.int32))


def server_round(server_optimizer: optimizers.Optimizer,
                 config: canary_spec.DPAggregation, canary_clip: str,
                 state: ServerState, clipped_sum: jax.Array,
                 unclipped_sum: jax.Array, num_clients: jax.Array,
                 canary_directions: jax.Array, canary_mask: jax.Array,
                 key: jax.Array, noise: jax.Array | None = None,
                 scales: jax.Array | None = None
                 ) -> tuple[ServerState, RoundOutput]:
  """Steps 3-7 of the module docstring, from the clients' clipped sum.

  Args:
    server_optimizer: the server optimizer (its gradient: the noised mean).
    config: the aggregation.
    canary_clip: 'project' (canaries count as unclipped, the paper) or
      'clip' (as clipped, its published code), for the adaptive clip.
    state: the server's state before the round (S_t in `state.clip`).
    clipped_sum: float32 [d], the sum of the clients' clipped updates.
    unclipped_sum: sum over the clients of (1[norm <= S_t] - 1/2).
    num_clients: their number (reported only).
    canary_directions: float32 [k, d], the run's seen canaries.
    canary_mask: [k], 1 for the canaries inserted this round.
    key: the round's PRNG key (training: fold_in(PRNGKey(seed), t)); its
      second and third sub-keys draw the update and count noise.
    noise: float32 [d], the round's row of correlated noise that replaces
      step 4's independent draw (`correlated_noise`), or None for step 4.
    scales: float32 [2], (z_v, sigma_b) in place of `config`'s
      (`noise_scales`: a run of a program whose runs differ in z), or None.

  Returns:
    (the state after the round, the round's `RoundOutput`).
  """
  clip = state.clip
  if scales is None:
    scales = noise_scales(config)
  flat_params, unravel = ravel_pytree(state.params)
  _, update_key, count_key = jax.random.split(key, 3)
  canary_sum = canary_records(canary_directions, canary_mask, clip)
  if noise is None:
    std = scales[0] * clip
    noise = std * jax.random.normal(update_key, flat_params.shape,
                                    jnp.float32)
  noised = clipped_sum + canary_sum + noise
  aggregate = noised / config.clients_per_round

  optimizer_state, params = server_optimizer.step(
      state.optimizer_state, state.params, unravel(aggregate))
  if config.adaptive:
    canary_sign = 0.5 if canary_clip == 'project' else -0.5
    unclipped_sum = unclipped_sum + canary_sign * jnp.sum(canary_mask)
    count_noise = scales[1] * jax.random.normal(count_key, (), jnp.float32)
    new_clip, fraction = adaptive_clip_update(clip, unclipped_sum, count_noise,
                                              config)
  else:
    new_clip, fraction = clip, jnp.asarray(jnp.nan, jnp.float32)
  new_state = ServerState(params=params, optimizer_state=optimizer_state,
                          clip=new_clip.astype(jnp.float32),
                          round_num=state.round_num + 1)
  return new_state, RoundOutput(
      aggregate=aggregate, clip=clip, unclipped_fraction=fraction,
      num_clients=num_clients, canaries_inserted=jnp.sum(canary_mask))


def noise_scales(config: canary_spec.DPAggregation) -> np.ndarray:
  """float32 [2]: (z_v, sigma_b), the value and count noise of `config`.

  Args:
    config: the aggregation.

  Returns:
    float32 [2]: z_v, the update's noise multiplier (std z_v S_t), and
    sigma_b, the std of the unclipped count's noise.
  """
  return np.asarray([config.update_noise_multiplier, config.count_stddev],
                    np.float32)


def client_keys(key: jax.Array, slots: int) -> jax.Array:
  """The dropout keys of a round's client slots (from the round's key).

  Args:
    key: the round's PRNG key; its first sub-key makes the dropout keys.
    slots: the round's client slots (padding ones included), >= 1.

  Returns:
    [slots] PRNG keys, one per slot.
  """
  dropout_key, _, _ = jax.random.split(key, 3)
  return jax.random.split(dropout_key, slots)


def dp_fedavg_round(loss_fn: client_training.LossFn,
                    client_optimizer: optimizers.Optimizer,
                    server_optimizer: optimizers.Optimizer,
                    config: canary_spec.DPAggregation, canary_clip: str,
                    client_dropout: bool, state: ServerState,
                    inputs: jax.Array, labels: jax.Array,
                    example_mask: jax.Array, client_mask: jax.Array,
                    canary_directions: jax.Array, canary_mask: jax.Array,
                    key: jax.Array) -> tuple[ServerState, RoundOutput]:
  """One round (module docstring, steps 1-7), clients vmapped; jit-able.

  Args:
    loss_fn: the model's loss (`client_training.LossFn`).
    client_optimizer: the clients' local optimizer.
    server_optimizer: the server optimizer.
    config: the aggregation.
    canary_clip: 'project' or 'clip', as `server_round`.
    client_dropout: whether the clients train with dropout (keys from
      `client_keys`).
    state: the server's state before the round.
    inputs: [slots, batches, batch_size, ...] the clients' inputs (see
      `data.RoundBatches`).
    labels: [slots, batches, batch_size, ...] their targets.
    example_mask: [slots, batches, batch_size], 1 for valid examples.
    client_mask: [slots], 1 for the round's clients, 0 for padding slots.
    canary_directions: float32 [k, d], the run's seen canaries (k may be 0).
    canary_mask: [k], 1 for the canaries inserted this round.
    key: the round's PRNG key (client dropout, update noise and count noise
      use independent sub-keys).

  Returns:
    (the state after the round, the round's `RoundOutput`).
  """
  clip = state.clip

  def one_client(x, y, mask, client_key):
    delta = client_training.client_update(
        loss_fn, client_optimizer, state.params, x, y, mask,
        client_key if client_dropout else None)
    clipped, norm = client_training.clip_by_global_norm(delta, clip)
    return ravel_pytree(clipped)[0], norm

  keys = client_keys(key, client_mask.shape[0])
  clipped, norms = jax.vmap(one_client)(inputs, labels, example_mask, keys)
  return server_round(server_optimizer, config, canary_clip, state,
                      client_mask @ clipped,
                      jnp.sum(client_mask * ((norms <= clip) - 0.5)),
                      jnp.sum(client_mask), canary_directions, canary_mask,
                      key)


def packed_round(loss_fn: client_training.LossFn,
                 client_optimizer: optimizers.Optimizer,
                 server_optimizer: optimizers.Optimizer,
                 config: canary_spec.DPAggregation, canary_clip: str,
                 client_dropout: bool, state: ServerState,
                 packed: (packed_batches.PackedBatches |
                          packed_batches.PackedRows),
                 slot_keys: jax.Array, canary_directions: jax.Array,
                 canary_mask: jax.Array, key: jax.Array,
                 noise: jax.Array | None = None,
                 scales: jax.Array | None = None, *,
                 resident: tuple[jax.Array, jax.Array] | None = None,
                 num_steps: jax.Array | None = None,
                 micro_per_batch: int = 1
                 ) -> tuple[ServerState, RoundOutput]:
  """`dp_fedavg_round` on clients packed into lanes; jit-able.

  Each lane is a loop over its batches (the first `num_steps`, a traced
  int32 scalar, or all of them), vmapped over the lanes: a layout longer
  than the round's lanes costs no local steps, so one compiled round serves
  every round of a run (`packing.run_layout`). A client's first batch
  restarts the model and the client optimizer from the server's; after its
  last batch its update (initial - trained, zeroed if not finite) is clipped
  and added to the lane's sum, and its unclipped indicator counted.

  Args:
    loss_fn: the model's loss (`client_training.LossFn`).
    client_optimizer: the clients' local optimizer.
    server_optimizer: the server optimizer.
    config: the aggregation.
    canary_clip: 'project' or 'clip', as `server_round`.
    client_dropout: whether the clients train with dropout.
    state: the server's state before the round.
    packed: the lanes' batches (`packed_batches.PackedBatches`), or their
      rows in the split (`packed_batches.PackedRows`) with the split's
      (inputs, labels) in `resident`: each step gathers its batch on the
      device.
    slot_keys: the clients' dropout keys by `RoundBatches` slot
      (`client_keys`), so a client's batches get the keys 'loop' gives them.
    canary_directions: float32 [k, d], the run's seen canaries (k may be 0).
    canary_mask: [k], 1 for the canaries inserted this round.
    key: the round's PRNG key, as `server_round`.
    noise: as `server_round`.
    scales: as `server_round`.
    resident: the split's (inputs, labels) on the device when `packed` is
      `packed_batches.PackedRows`; None with `packed_batches.PackedBatches`.
    num_steps: how many of each lane's batches to run (what the round's
      clients need at the layout's width, `packing.lane_capacity`), an int32
      scalar that may be traced; None runs every batch of the layout.
    micro_per_batch: g, static: `packed` holds micro-batches, g to a batch
      (`data.micro_batches`; its `batch_index` is the micro-batch's index
      within its client). A client's micro-batches accumulate their
      gradients (`client_training.micro_batch_gradient`) and the optimizer
      steps after each batch's last one (as
      `client_training.accumulated_step`); 1: every packed batch is a whole
      batch and takes its own `client_training.local_step`.

  Returns:
    (the state after the round, the round's `RoundOutput`).
  """
  clip = state.clip
  initial_optimizer_state = client_optimizer.init(state.params)
  flat, _ = ravel_pytree(state.params)

  def step(carry, batch):
    weights, optimizer_state, accumulated, clipped_sum, unclipped_sum = carry
    x, y, mask, slot, index, start, end = batch

    def restart(initial, current):
      return jnp.where(start > 0, initial, current)

    weights = _tree_map(restart, state.params, weights)
    optimizer_state = _tree_map(restart, initial_optimizer_state,
                                optimizer_state)
    dropout_key = (client_training.batch_key(slot_keys[slot], index)
                   if client_dropout else None)
    if micro_per_batch == 1:
      weights, optimizer_state = client_training.local_step(
          loss_fn, client_optimizer, weights, optimizer_state, x, y, mask,
          dropout_key)
    else:
      # A batch's first micro-batch starts its sums; its last (or the
      # client's last) takes the step.
      first = index % micro_per_batch == 0
      grads, count = client_training.micro_batch_gradient(
          loss_fn, weights, x, y, mask, dropout_key)
      total, counted = accumulated
      total = _tree_map(lambda s, g: jnp.where(first, 0.0, s) + g, total,
                        grads)
      counted = jnp.where(first, 0.0, counted) + count
      last = (end > 0) | (index % micro_per_batch == micro_per_batch - 1)
      weights, optimizer_state = client_training.apply_gradient(
          client_optimizer, weights, optimizer_state, total,
          jnp.where(last, counted, 0.0))
      accumulated = (total, counted)
    clipped, norm = client_training.clip_by_global_norm(
        client_training.finite_delta(state.params, weights), clip)
    clipped_sum = clipped_sum + end * ravel_pytree(clipped)[0]
    unclipped_sum = unclipped_sum + end * ((norm <= clip) - 0.5)
    return (weights, optimizer_state, accumulated, clipped_sum,
            unclipped_sum), None

  kind = type(packed)
  fields = tuple(getattr(packed, f.name) for f in dataclasses.fields(kind))

  def lane(*lane_fields):
    lane_packed = kind(*lane_fields)

    def body(i, carry):
      if resident is None:
        x, y = lane_packed.inputs[i], lane_packed.labels[i]
        mask = lane_packed.example_mask[i]
      else:
        rows = lane_packed.rows[i]
        index = jnp.maximum(rows, 0)
        x, y = resident[0][index], resident[1][index]
        mask = (rows >= 0).astype(jnp.float32)
      return step(carry, (x, y, mask, lane_packed.slot[i],
                          lane_packed.batch_index[i], lane_packed.start[i],
                          lane_packed.end[i]))[0]

    accumulated = (None if micro_per_batch == 1 else
                   (_tree_map(jnp.zeros_like, state.params),
                    jnp.zeros((), jnp.float32)))
    carry = (state.params, initial_optimizer_state, accumulated,
             jnp.zeros_like(flat), jnp.zeros((), jnp.float32))
    steps = lane_packed.slot.shape[0] if num_steps is None else num_steps
    *_, clipped_sum, unclipped_sum = jax.lax.fori_loop(0, steps, body, carry)
    return clipped_sum, unclipped_sum

  clipped_sums, unclipped_sums = jax.vmap(lane)(*fields)
  return server_round(server_optimizer, config, canary_clip, state,
                      jnp.sum(clipped_sums, axis=0), jnp.sum(unclipped_sums),
                      jnp.sum(packed.end), canary_directions, canary_mask,
                      key, noise, scales)


def stack_states(states: Sequence[ServerState]) -> ServerState:
  """The runs' states on a leading run axis (`RoundEngine.run_rounds`).

  Args:
    states: one state per run, all of the same structure and shapes.

  Returns:
    A `ServerState` whose every leaf is the runs' leaves stacked on axis 0.
  """
  return _tree_map(lambda *leaves: jnp.stack(leaves), *states)


def run_state(states: ServerState, run: int) -> ServerState:
  """Run `run`'s state out of stacked `states`.

  Args:
    states: states on a leading run axis (`stack_states`).
    run: the run's index on that axis, in [0, runs).

  Returns:
    The `ServerState` of run `run`: every leaf indexed at `run`.
  """
  return _tree_map(lambda leaf: leaf[run], states)
