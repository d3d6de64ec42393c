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

Clients are processed in parallel: local training is vmapped over a padded
client axis (absent clients are masked out of every sum; `packed_round` packs
several clients back to back into each lane of that axis), the round is
jit-compiled, and the client axis is sharded over all local devices
(`jax.sharding`), so XLA sums the clients' updates across devices. For several
hosts, the same code runs under `jax.distributed.initialize()` with a mesh over
`jax.devices()` of all hosts, each host feeding its slots of the client axis.

The noise is a pure function of the round key (`jax.random`): distributed as
the TFF path's seeded noise, not bit-equal to it.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.design import canary_spec
from one_shot_epe.data import client_arrays
from one_shot_epe import validation
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packing

__all__ = ['CLIENT_AXIS', 'LOCAL_TRAINING', 'LossFn', 'RoundEngine',
           'RoundOutput', 'ServerState', 'adaptive_clip_update', 'batch_key',
           'canary_records', 'client_keys', 'client_update',
           'clip_by_global_norm', 'default_local_training', 'dp_fedavg_round',
           'finite_delta', 'init_server_state', 'local_step', 'noise_scales',
           'packed_round', 'run_state', 'server_round', 'stack_states']

CLIENT_AXIS = 'clients'
# How clients train locally (`RoundEngine`).
LOCAL_TRAINING = ('loop', 'vmap')
_tree_map = jax.tree_util.tree_map
# loss(params, inputs, labels, example_mask, dropout_key) -> scalar.
LossFn = Callable[[Any, jax.Array, jax.Array, jax.Array, Any], jax.Array]


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


def _global_norm(tree: Any) -> jax.Array:
  leaves = jax.tree_util.tree_leaves(tree)
  return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves))


def clip_by_global_norm(tree: Any, clip: jax.Array) -> tuple[Any, jax.Array]:
  """tf.clip_by_global_norm: (tree * clip min(1/norm, 1/clip), norm)."""
  norm = _global_norm(tree)
  scale = clip * jnp.minimum(1.0 / norm, 1.0 / clip)
  return _tree_map(lambda x: x * scale, tree), norm


def local_step(loss_fn: LossFn, optimizer: optimizers.Optimizer,
               weights: Any, state: Any, inputs: jax.Array, labels: jax.Array,
               example_mask: jax.Array, key: Any) -> tuple[Any, Any]:
  """One local optimizer step on a batch's mean loss over its valid examples.

  A batch without valid examples leaves weights and optimizer state as they
  are. `key` None: no dropout.
  """
  grads = jax.grad(loss_fn)(weights, inputs, labels, example_mask, key)
  new_state, new_weights = optimizer.step(state, weights, grads)
  present = jnp.sum(example_mask) > 0
  keep = lambda new, old: jnp.where(present, new, old)  # pylint: disable=unnecessary-lambda-assignment
  return _tree_map(keep, new_weights, weights), _tree_map(keep, new_state,
                                                          state)


def batch_key(client_key: Any, batch_index: Any) -> Any:
  """The dropout key of a client's batch (None without dropout)."""
  return None if client_key is None else jax.random.fold_in(client_key,
                                                            batch_index)


def finite_delta(initial: Any, trained: Any) -> Any:
  """initial - trained, zeroed if any entry is not finite (TFF's client work)."""
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
  delta with a non-finite entry is zeroed (`finite_delta`). `dropout_key`
  None: no dropout; else batch m uses `batch_key(dropout_key, m)`.
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


def canary_records(directions: jax.Array, canary_mask: jax.Array,
                   clip: jax.Array) -> jax.Array:
  """Sum over the inserted canaries of c_j S_t / ||c_j|| (float32 [d]).

  directions: float32 [k, d]; canary_mask: [k], 1 for the canaries inserted
  this round (a fixed k keeps one compiled round).
  """
  norms = jnp.linalg.norm(directions, axis=1)
  scale = jnp.where(canary_mask > 0, clip / norms, 0.0)
  return scale @ directions


def adaptive_clip_update(clip: jax.Array, unclipped_sum: jax.Array,
                         count_noise: jax.Array,
                         config: canary_spec.DPAggregation
                         ) -> tuple[jax.Array, jax.Array]:
  """(S_{t+1}, b): the geometric quantile update of Andrew et al. 2021.

  unclipped_sum: sum over records of (1[norm <= S_t] - 1/2); count_noise: its
  N(0, sigma_b^2) noise. b = clamp((sum + noise) / cohort + 1/2, 0, 1);
  S_{t+1} = S_t exp(-eta (b - gamma)).
  """
  fraction = (unclipped_sum + count_noise) / config.clients_per_round + 0.5
  fraction = jnp.clip(fraction, 0.0, 1.0)
  new_clip = clip * jnp.exp(
      -config.clip_learning_rate *
      (fraction - config.target_unclipped_quantile))
  return new_clip, fraction


def init_server_state(params: Any, server_optimizer: optimizers.Optimizer,
                      config: canary_spec.DPAggregation) -> ServerState:
  """The state before round 0: S_0 is the fixed or the initial clip."""
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

  clipped_sum: float32 [d], the sum of the clients' clipped updates;
  unclipped_sum: sum over the clients of (1[norm <= S_t] - 1/2);
  num_clients: their number; key: the round's key (`round_keys`);
  noise: float32 [d], the round's row of correlated noise that replaces
  step 4's independent draw (`correlated_noise`), or None for step 4;
  scales: float32 [2], (z_v, sigma_b) in place of `config`'s
  (`noise_scales`: a run of a program whose runs differ in z), or None.
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
  """float32 [2]: (z_v, sigma_b), the value and count noise of `config`."""
  return np.asarray([config.update_noise_multiplier, config.count_stddev],
                    np.float32)


def client_keys(key: jax.Array, slots: int) -> jax.Array:
  """The dropout keys of a round's client slots (from the round's key)."""
  dropout_key, _, _ = jax.random.split(key, 3)
  return jax.random.split(dropout_key, slots)


def dp_fedavg_round(loss_fn: LossFn, client_optimizer: optimizers.Optimizer,
                    server_optimizer: optimizers.Optimizer,
                    config: canary_spec.DPAggregation, canary_clip: str,
                    client_dropout: bool, state: ServerState,
                    inputs: jax.Array, labels: jax.Array,
                    example_mask: jax.Array, client_mask: jax.Array,
                    canary_directions: jax.Array, canary_mask: jax.Array,
                    key: jax.Array) -> tuple[ServerState, RoundOutput]:
  """One round (module docstring, steps 1-7), clients vmapped; jit-able.

  inputs, labels, example_mask: [slots, batches, batch_size, ...] (see
  `data.RoundBatches`); client_mask [slots]; canary_directions [k, d] and
  canary_mask [k] (k may be 0); key: the round's PRNG key (client dropout,
  update noise and count noise use independent sub-keys).
  """
  clip = state.clip

  def one_client(x, y, mask, client_key):
    delta = client_update(loss_fn, client_optimizer, state.params, x, y, mask,
                          client_key if client_dropout else None)
    clipped, norm = clip_by_global_norm(delta, clip)
    return ravel_pytree(clipped)[0], norm

  keys = client_keys(key, client_mask.shape[0])
  clipped, norms = jax.vmap(one_client)(inputs, labels, example_mask, keys)
  return server_round(server_optimizer, config, canary_clip, state,
                      client_mask @ clipped,
                      jnp.sum(client_mask * ((norms <= clip) - 0.5)),
                      jnp.sum(client_mask), canary_directions, canary_mask,
                      key)


def packed_round(loss_fn: LossFn, client_optimizer: optimizers.Optimizer,
                 server_optimizer: optimizers.Optimizer,
                 config: canary_spec.DPAggregation, canary_clip: str,
                 client_dropout: bool, state: ServerState,
                 packed: data.PackedBatches | data.PackedRows,
                 slot_keys: jax.Array, canary_directions: jax.Array,
                 canary_mask: jax.Array, key: jax.Array,
                 noise: jax.Array | None = None,
                 scales: jax.Array | None = None, *,
                 resident: tuple[jax.Array, jax.Array] | None = None,
                 num_steps: jax.Array | None = None
                 ) -> tuple[ServerState, RoundOutput]:
  """`dp_fedavg_round` on clients packed into lanes; jit-able.

  Each lane is a loop over its batches (the first `num_steps`, a traced
  int32 scalar, or all of them), vmapped over the lanes: a layout longer
  than the round's lanes costs no local steps, so one compiled round serves
  every round of a run (`packing.run_lanes`). A client's first batch
  restarts the model and the client optimizer from the server's; after its
  last batch its update (initial - trained, zeroed if not finite) is clipped
  and added to the lane's sum, and its unclipped indicator counted.

  Args:
    packed: the lanes' batches (`data.PackedBatches`), or their rows in the
      split (`data.PackedRows`) with the split's (inputs, labels) in
      `resident`: each step gathers its batch on the device.
    slot_keys: the clients' dropout keys by `RoundBatches` slot
      (`client_keys`), so a client's batches get the keys 'loop' gives them.
    noise, scales: as `server_round`.
  """
  clip = state.clip
  initial_optimizer_state = client_optimizer.init(state.params)
  flat, _ = ravel_pytree(state.params)

  def step(carry, batch):
    weights, optimizer_state, clipped_sum, unclipped_sum = carry
    x, y, mask, slot, index, start, end = batch

    def restart(initial, current):
      return jnp.where(start > 0, initial, current)

    weights = _tree_map(restart, state.params, weights)
    optimizer_state = _tree_map(restart, initial_optimizer_state,
                                optimizer_state)
    dropout_key = batch_key(slot_keys[slot], index) if client_dropout else None
    weights, optimizer_state = local_step(loss_fn, client_optimizer, weights,
                                          optimizer_state, x, y, mask,
                                          dropout_key)
    clipped, norm = clip_by_global_norm(finite_delta(state.params, weights),
                                        clip)
    clipped_sum = clipped_sum + end * ravel_pytree(clipped)[0]
    unclipped_sum = unclipped_sum + end * ((norm <= clip) - 0.5)
    return (weights, optimizer_state, clipped_sum, unclipped_sum), None

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

    carry = (state.params, initial_optimizer_state, jnp.zeros_like(flat),
             jnp.zeros((), jnp.float32))
    steps = lane_packed.slot.shape[0] if num_steps is None else num_steps
    _, _, clipped_sum, unclipped_sum = jax.lax.fori_loop(0, steps, body,
                                                         carry)
    return clipped_sum, unclipped_sum

  clipped_sums, unclipped_sums = jax.vmap(lane)(*fields)
  return server_round(server_optimizer, config, canary_clip, state,
                      jnp.sum(clipped_sums, axis=0), jnp.sum(unclipped_sums),
                      jnp.sum(packed.end), canary_directions, canary_mask,
                      key, noise, scales)


def default_local_training() -> str:
  """'loop' on one CPU process, else 'vmap' (see `RoundEngine`).

  Several processes (`jax.distributed`) share the client axis: 'vmap'.
  """
  if jax.default_backend() == 'cpu' and jax.process_count() == 1:
    return 'loop'
  return 'vmap'


class RoundEngine:
  """One DP-FedAvg round, compiled the way the backend runs it fast.

  `local_training` picks how the clients train (both give the same round,
  `tests/jax_engine_fedavg_test.py` checks one against the other):

  * 'vmap' (accelerators): `packed_round` as one jit: the clients packed
    back to back into lanes (`packing`, at most 1.15x the real local steps
    on realistic client sizes, against 1.8-2.9x for one client per slot
    padded to the largest), lanes vmapped and sharded over a 1-D mesh of
    `devices` (default `jax.devices()`), local steps a loop. The number of
    client slots must be a multiple of the number of devices (`num_slots`).
    One computation per (lanes, lane length) layout: `fix_layout` sets one
    for every later round (each looping only over the batches it needs);
    else a round reuses a compiled layout its clients fit (`_layout`).
    With the split on the devices (`upload`) a round takes
    `data.RoundRows` and sends only its examples' int32 rows; each local
    step gathers its batch there.
  * 'loop' (the default on CPU, where XLA computes a convolution's weight
    gradient 15-40x slower inside a loop body than at top level and turns
    vmapped convolutions into grouped ones): one jitted `local_step` per
    batch, called from Python client by client, each client's clipped update
    folded into a running sum by a second jit, and `server_round` as the
    third. Padding costs nothing: a client runs only its own batches, and
    empty slots none.

  Either way the round compiles a fixed number of computations (`compiles`,
  counted) whatever the cohort size, given fixed slot and batch counts.
  """

  def __init__(self, loss_fn: LossFn, client_optimizer: optimizers.Optimizer,
               server_optimizer: optimizers.Optimizer,
               config: canary_spec.DPAggregation, *,
               canary_clip: str = 'project', client_dropout: bool = True,
               devices: Sequence[Any] | None = None,
               local_training: str = 'auto'):
    for name, value, kind in (('client_optimizer', client_optimizer,
                               optimizers.Optimizer),
                              ('server_optimizer', server_optimizer,
                               optimizers.Optimizer),
                              ('config', config, canary_spec.DPAggregation)):
      if not isinstance(value, kind):
        raise TypeError(f'{name} must be a {kind.__name__}; got '
                        f'{type(value).__name__}.')
    validation.check_choice('canary_clip', canary_clip,
                            canary_spec.CANARY_CLIPS)
    if local_training == 'auto':
      local_training = default_local_training()
    self.local_training = validation.check_choice(
        'local_training', local_training, LOCAL_TRAINING)
    self._devices = list(jax.devices() if devices is None else devices)
    if not self._devices:
      raise ValueError('devices must name at least one device.')
    if local_training == 'loop':
      self._devices = self._devices[:1]
    self.server_optimizer = server_optimizer
    self.config = config
    self._client_dropout = client_dropout
    self._client_optimizer = client_optimizer
    mesh = jax.sharding.Mesh(np.asarray(self._devices), (CLIENT_AXIS,))
    self._by_client = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(CLIENT_AXIS))
    self._runs_by_client = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(None, CLIENT_AXIS))
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())
    self._shapes: set[tuple[str, Any]] = set()
    self._layouts: set[tuple[int, int]] = set()
    self._fixed: tuple[int, int] | None = None
    self._resident: tuple[jax.Array, jax.Array] | None = None
    self.upload_bytes = 0

    def round_fn(state, resident, packed, slot_keys, canary_directions,
                 canary_mask, key, noise, num_steps, scales=None):
      kind = data.PackedBatches if resident is None else data.PackedRows
      return packed_round(loss_fn, client_optimizer, server_optimizer,
                          config, canary_clip, client_dropout, state,
                          kind(*packed), slot_keys, canary_directions,
                          canary_mask, key, noise, scales, resident=resident,
                          num_steps=num_steps)

    def step_fn(weights, state, inputs, labels, example_mask, key):
      return local_step(loss_fn, client_optimizer, weights, state, inputs,
                        labels, example_mask, key)

    def fold_fn(initial, trained, clip, clipped_sum, unclipped_sum):
      clipped, norm = clip_by_global_norm(finite_delta(initial, trained), clip)
      return (clipped_sum + ravel_pytree(clipped)[0],
              unclipped_sum + (norm <= clip) - 0.5)

    def server_fn(state, clipped_sum, unclipped_sum, num_clients,
                  canary_directions, canary_mask, key, noise):
      return server_round(server_optimizer, config, canary_clip, state,
                          clipped_sum, unclipped_sum, num_clients,
                          canary_directions, canary_mask, key, noise)

    def program_fn(states, resident, packed, slot_keys, canary_directions,
                   canary_masks, keys, noises, num_steps, scales, active):

      def one_run(state, packed, slot_keys, canary_directions, canary_mask,
                  key, noise, scale):
        return round_fn(state, resident, packed, slot_keys,
                        canary_directions, canary_mask, key, noise,
                        num_steps, scale)

      new_states, outputs = jax.vmap(one_run)(
          states, packed, slot_keys, canary_directions, canary_masks, keys,
          noises, scales)

      def keep(new, old):
        return jnp.where(active.reshape((-1,) + (1,) * (new.ndim - 1)), new,
                         old)

      return _tree_map(keep, new_states, states), outputs

    self._round = jax.jit(round_fn)
    self._program = jax.jit(program_fn)
    self._step = jax.jit(step_fn)
    self._fold = jax.jit(fold_fn)
    self._server = jax.jit(server_fn)

  @property
  def num_devices(self) -> int:
    """Devices the client axis is spread over."""
    return len(self._devices)

  @property
  def compiles(self) -> int:
    """Computations compiled so far: one per (function, input shapes)."""
    return len(self._shapes)

  def _note(self, name: str, *args: Any) -> None:
    """Records the input signature of a call of the jitted `name`."""
    self._shapes.add((name, tuple(
        (np.shape(x), str(getattr(x, 'dtype', type(x).__name__)))
        for x in jax.tree_util.tree_leaves(args))))

  def num_slots(self, num_clients: int) -> int:
    """Client slots for `num_clients`: the next multiple of the devices."""
    return -(-max(num_clients, 1) // self.num_devices) * self.num_devices

  def init_state(self, params: Any) -> ServerState:
    """The replicated server state before round 0."""
    return jax.device_put(
        init_server_state(params, self.server_optimizer, self.config),
        self._replicated)

  @property
  def resident_bytes(self) -> int:
    """Bytes of the split `upload` put on every device (0: none)."""
    if self._resident is None:
      return 0
    return sum(int(x.nbytes) for x in self._resident)

  def upload(self, arrays: client_arrays.ClientArrays) -> None:
    """Puts the split's model inputs and labels on every device, once.

    Rounds then take `data.RoundRows` (`data.client_rows`): only the rows of
    their examples go to the device, which gathers the batches itself.

    Raises:
      ValueError: local training is 'loop' (it reads host batches).
    """
    if self.local_training != 'vmap':
      raise ValueError("upload needs local_training='vmap'; got "
                       f'{self.local_training!r}.')
    inputs, labels = data.model_inputs(
        arrays.kind, {name: np.asarray(array)
                      for name, array in arrays.features.items()})
    self._resident = tuple(jax.device_put((inputs, labels),
                                          self._replicated))

  def __call__(self, state: ServerState,
               batches: data.RoundBatches | data.RoundRows,
               canary_directions: np.ndarray | jax.Array,
               canary_mask: np.ndarray | jax.Array,
               key: jax.Array, noise: jax.Array | None = None
               ) -> tuple[ServerState, RoundOutput]:
    """Runs one round on `batches` (slots a multiple of the devices).

    `data.RoundRows` need the split on the device (`upload`). What the call
    sends to the device (host arrays among its inputs) is `upload_bytes`.
    `noise`: the round's correlated noise row (`server_round`), or None.
    """
    slots = batches.client_mask.shape[0]
    if slots % self.num_devices:
      raise ValueError(f'batches must have a multiple of {self.num_devices} '
                       f'client slots (num_slots); got {slots}.')
    resident = isinstance(batches, data.RoundRows)
    if resident and self._resident is None:
      raise ValueError('batches of rows (data.RoundRows) need the split on '
                       'the device: call upload(arrays) first.')
    self.upload_bytes = _host_bytes(canary_directions, canary_mask, noise)
    canary_directions = jnp.asarray(canary_directions, jnp.float32)
    canary_mask = jnp.asarray(canary_mask, jnp.float32)
    if self.local_training == 'loop':
      return self._loop_round(state, batches, canary_directions, canary_mask,
                              key, noise)
    (lanes,), lane_batches, steps = self._layout([batches])
    packed = (data.pack_rows if resident else data.pack_batches)(
        batches, lanes, lane_batches)
    fields = tuple(getattr(packed, f.name) for f in dataclasses.fields(packed))
    self.upload_bytes += _host_bytes(*fields)
    sharded = jax.device_put(fields, self._by_client)
    replicated = jax.device_put(
        (client_keys(key, slots), canary_directions, canary_mask, key, noise,
         np.int32(steps)), self._replicated)
    split = self._resident if resident else None
    self._note('round', state, split, sharded, *replicated)
    return self._round(state, split, sharded, *replicated)

  def padded_examples(self, batches: data.RoundBatches | data.RoundRows
                      ) -> int:
    """Examples the round's local training processes, padding included.

    'vmap': the packed lanes (`_layout`), lanes x the batches they loop
    over x batch size; 'loop': each client's non-empty batches at full
    batch size.
    """
    batch_size = batches.example_mask.shape[2]
    if self.local_training == 'loop':
      return int((batches.example_mask.sum(axis=2) > 0).sum()) * batch_size
    (lanes,), _, steps = self._layout([batches])
    return len(lanes) * steps * batch_size

  def fix_layout(self, num_lanes: int, lane_batches: int) -> None:
    """Compiles every later round for `num_lanes` lanes of `lane_batches`.

    A round then loops only over the batches its clients need at that width
    (`packing.lane_capacity`): one compiled round for a whole run whose
    rounds all fit (`packing.run_lanes`).

    Raises:
      ValueError: local training is not 'vmap', or `num_lanes` is not a
        multiple of the devices.
    """
    if self.local_training != 'vmap':
      raise ValueError("fix_layout needs local_training='vmap'; got "
                       f'{self.local_training!r}.')
    num_lanes = validation.check_int('num_lanes', num_lanes, low=1)
    if num_lanes % self.num_devices:
      raise ValueError(f'num_lanes must be a multiple of the {self.num_devices}'
                       f' devices; got {num_lanes}.')
    self._fixed = (num_lanes,
                   validation.check_int('lane_batches', lane_batches, low=1))

  def _layout(self, runs: Sequence[data.RoundBatches | data.RoundRows]
              ) -> tuple[list[list[list[int]]], int, int]:
    """Each run's lanes in one layout: a compiled one if they fit, else new.

    With `fix_layout`, that layout, its lanes only as long as the longest
    run's clients need at its width (`packing.lane_capacity`). Otherwise a
    compiled (lanes, lane length) is reused, smallest first, when every
    run's clients fit it (first-fit-decreasing) with no more padded work
    than one slot per client padded to the round's batches would cost; else
    the longest of the runs' `data.packed_layout` lane lengths, with as many
    lanes as the runs need at that length (one more compile).

    Returns:
      (each run's slots of each lane, lane length, the batches each lane
      loops over); every run has the same number of lanes, a multiple of
      the devices.

    Raises:
      ValueError: a round's clients do not fit the fixed layout.
    """
    present = [np.flatnonzero(batches.client_mask > 0) for batches in runs]
    counts = [data.slot_batch_counts(batches) for batches in runs]
    budget = min(batches.example_mask.shape[0] * batches.example_mask.shape[1]
                 for batches in runs)

    def slots(lanes: list[list[int]], run: int,
              num_lanes: int) -> list[list[int]]:
      return ([[int(present[run][i]) for i in lane] for lane in lanes] +
              [[] for _ in range(num_lanes - len(lanes))])

    if self._fixed is not None:
      num_lanes, lane_batches = self._fixed
      steps = max(packing.lane_capacity(c, num_lanes) for c in counts)
      if steps > lane_batches:
        raise ValueError(f'the round needs lanes of {steps} batches; the '
                         f'fixed layout has {lane_batches} (fix_layout).')
      packed = [packing.first_fit_decreasing(c, steps) for c in counts]
      return ([slots(lanes, run, num_lanes)
               for run, lanes in enumerate(packed)], lane_batches, steps)
    for num_lanes, lane_batches in sorted(self._layouts,
                                          key=lambda s: s[0] * s[1]):
      if (max(c.max(initial=1) for c in counts) > lane_batches
          or num_lanes * lane_batches > budget):
        continue
      packed = [packing.first_fit_decreasing(c, lane_batches) for c in counts]
      if all(len(lanes) <= num_lanes for lanes in packed):
        return ([slots(lanes, run, num_lanes)
                 for run, lanes in enumerate(packed)], lane_batches,
                lane_batches)
    lane_batches = max(data.packed_layout(batches, self.num_devices)[1]
                       for batches in runs)
    packed = [packing.first_fit_decreasing(c, lane_batches) for c in counts]
    num_lanes = self.num_slots(max(len(lanes) for lanes in packed))
    self._layouts.add((num_lanes, lane_batches))
    return ([slots(lanes, run, num_lanes) for run, lanes in enumerate(packed)],
            lane_batches, lane_batches)

  def run_rounds(self, states: ServerState,
                 runs: Sequence[data.RoundBatches | data.RoundRows],
                 canary_directions: Sequence[jax.Array],
                 canary_masks: Sequence[np.ndarray],
                 keys: Sequence[jax.Array],
                 noises: Sequence[jax.Array] | None,
                 scales: np.ndarray, active: np.ndarray
                 ) -> tuple[ServerState, RoundOutput]:
    """A round of R runs as one program: `packed_round` with a run axis.

    The runs' clients are packed into one layout (`_layout`, the same lanes
    and lane length for every run), so the R rounds are one computation,
    vmapped over the runs, each run's lanes sharded over the devices. A run
    gets what its own round would (its batches, canaries, key, the dropout
    keys of its own slot count, its noise): the program equals R separate
    rounds up to float rounding.

    Args:
      states: the runs' `ServerState`s stacked on a leading run axis
        (`stack_states`).
      runs: each run's batches (`data.RoundRows` need `upload`).
      canary_directions: each run's [k, d] directions, k equal for all.
      canary_masks: each run's [k] mask.
      keys: each run's round key.
      noises: each run's [d] row of correlated noise, or None.
      scales: float32 [R, 2], each run's (z_v, sigma_b) (`noise_scales`).
      active: bool [R]; a run that is False keeps its state (it resumed
        from a later round than the program's) and its outputs are junk.

    Returns:
      The new states and the rounds' `RoundOutput`s, stacked by run.

    Raises:
      ValueError: local training is not 'vmap', or rows without `upload`.
    """
    if self.local_training != 'vmap':
      raise ValueError("run_rounds needs local_training='vmap'; got "
                       f'{self.local_training!r}.')
    resident = isinstance(runs[0], data.RoundRows)
    if resident and self._resident is None:
      raise ValueError('batches of rows (data.RoundRows) need the split on '
                       'the device: call upload(arrays) first.')
    layouts, lane_batches, steps = self._layout(runs)
    pack = data.pack_rows if resident else data.pack_batches
    packed = [pack(batches, lanes, lane_batches)
              for batches, lanes in zip(runs, layouts)]
    fields = tuple(np.stack([getattr(p, f.name) for p in packed])
                   for f in dataclasses.fields(packed[0]))
    slots = max(batches.client_mask.shape[0] for batches in runs)
    slot_keys = jnp.stack([
        jnp.zeros((slots,) + keys[0].shape, keys[0].dtype).at[
            :batches.client_mask.shape[0]].set(
                client_keys(key, batches.client_mask.shape[0]))
        for key, batches in zip(keys, runs)])
    host = (fields, np.stack(canary_masks).astype(np.float32),
            np.asarray(scales, np.float32), np.asarray(active, bool))
    self.upload_bytes = _host_bytes(*fields, *host[1:])
    sharded = jax.device_put(fields, self._runs_by_client)
    replicated = jax.device_put(
        (slot_keys, jnp.stack([jnp.asarray(d, jnp.float32)
                               for d in canary_directions]), host[1],
         jnp.stack(keys), None if noises is None else jnp.stack(noises),
         np.int32(steps), host[2], host[3]), self._replicated)
    resident_split = self._resident if resident else None
    self._note('program', states, sharded, *replicated)
    return self._program(states, resident_split, sharded, *replicated)

  def program_padded_examples(
      self, runs: Sequence[data.RoundBatches | data.RoundRows]) -> int:
    """Examples a `run_rounds` call processes, padding included."""
    layouts, _, steps = self._layout(runs)
    return len(runs) * len(layouts[0]) * steps * runs[0].example_mask.shape[2]

  def round_cost(self, state: ServerState, batches: data.RoundBatches,
                 canary_directions: np.ndarray, canary_mask: np.ndarray,
                 key: jax.Array) -> dict[str, float]:
    """XLA's own cost analysis of one round: {'flops', 'bytes accessed'}.

    Summed over the round's computations as the 'loop' strategy runs them
    (one local step per real batch, a fold per client, the server step), so
    no loop body is counted once for all its trips. For roofline predictions
    on hardware that is not here (`benchmarks/accelerator_round.py`).
    """
    keys = client_keys(key, batches.client_mask.shape[0])
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
        batch_key(keys[0] if self._client_dropout else None, 0))
    add(self._fold, clients, state.params, state.params, state.clip,
        jnp.zeros_like(flat), zero)
    add(self._server, 1, state, jnp.zeros_like(flat), zero, zero,
        jnp.asarray(canary_directions, jnp.float32),
        jnp.asarray(canary_mask, jnp.float32), key, None)
    return total

  def _loop_round(self, state: ServerState, batches: data.RoundBatches,
                  canary_directions: jax.Array, canary_mask: jax.Array,
                  key: jax.Array, noise: jax.Array | None
                  ) -> tuple[ServerState, RoundOutput]:
    """The 'loop' round: each client's real batches, one jitted step each."""
    slots = batches.client_mask.shape[0]
    keys = client_keys(key, slots)
    flat, _ = ravel_pytree(state.params)
    clipped_sum = jnp.zeros_like(flat)
    unclipped_sum = jnp.zeros((), jnp.float32)
    initial_optimizer_state = self._client_optimizer.init(state.params)
    present = np.flatnonzero(batches.client_mask > 0)
    batch_counts = batches.example_mask.sum(axis=2) > 0
    for slot in present:
      weights, optimizer_state = state.params, initial_optimizer_state
      client_key = keys[slot] if self._client_dropout else None
      for batch in np.flatnonzero(batch_counts[slot]):
        args = (weights, optimizer_state, batches.inputs[slot, batch],
                batches.labels[slot, batch],
                batches.example_mask[slot, batch],
                batch_key(client_key, batch))
        self.upload_bytes += _host_bytes(*args[2:5])
        self._note('step', *args)
        weights, optimizer_state = self._step(*args)
      args = (state.params, weights, state.clip, clipped_sum, unclipped_sum)
      self._note('fold', *args)
      clipped_sum, unclipped_sum = self._fold(*args)
    args = (state, clipped_sum, unclipped_sum,
            jnp.asarray(present.size, jnp.float32), canary_directions,
            canary_mask, key, noise)
    self._note('server', *args)
    return self._server(*args)


def stack_states(states: Sequence[ServerState]) -> ServerState:
  """The runs' states on a leading run axis (`RoundEngine.run_rounds`)."""
  return _tree_map(lambda *leaves: jnp.stack(leaves), *states)


def run_state(states: ServerState, run: int) -> ServerState:
  """Run `run`'s state out of stacked `states`."""
  return _tree_map(lambda leaf: leaf[run], states)


def _host_bytes(*arrays: Any) -> int:
  """Bytes of the host (numpy) arrays among `arrays`: what goes to the device."""
  return sum(int(x.nbytes) for x in arrays if isinstance(x, np.ndarray))
