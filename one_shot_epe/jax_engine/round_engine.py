"""`RoundEngine`: the DP-FedAvg round of `fedavg`, compiled per platform.

Andrew et al. (ICLR 2024), Algorithm 2: the round math is `fedavg`'s; this
module decides how a device runs it, in one place (`default_local_training`):
the clients' local training and a program's run axis are a Python loop of
small jitted computations on a CPU ('loop'), and one vmapped, sharded
computation on accelerators ('vmap'). Both give the same rounds
(`tests/jax_engine_fedavg_test.py`, `tests/jax_engine_program_test.py`).
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from one_shot_epe import validation
from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import client_training
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import lane_layouts
from one_shot_epe.jax_engine import loop_rounds
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.design import canary_spec

__all__ = ['CLIENT_AXIS', 'LOCAL_TRAINING', 'RoundEngine',
           'default_local_training']

CLIENT_AXIS = 'clients'
# How clients train locally (`RoundEngine`).
LOCAL_TRAINING = ('loop', 'vmap')
_tree_map = jax.tree_util.tree_map

def default_local_training() -> str:
  """The platform's faster strategy: 'loop' on one CPU process, else 'vmap'.

  The one place the strategy is chosen (`RoundEngine`'s 'auto', for a
  round's clients and for a program's runs alike). Several processes
  (`jax.distributed`) share the client axis: 'vmap'.

  Returns:
    'loop' when JAX's default backend is the CPU and this is its only
    process, else 'vmap'.
  """
  if jax.default_backend() == 'cpu' and jax.process_count() == 1:
    return 'loop'
  return 'vmap'


class RoundEngine:
  """One DP-FedAvg round, compiled the way the backend runs it fast.

  `local_training` picks how the clients train (both give the same round,
  `tests/jax_engine_fedavg_test.py` checks one against the other):

  * 'vmap' (accelerators): `packed_round` as one jit: the clients packed
    back to back into lanes (`packing`: over a run, at most 1.15x the real
    examples on realistic client sizes, against 1.8-2.9x for one client per
    slot padded to the largest), lanes vmapped and sharded over a 1-D mesh of
    `devices` (default `jax.devices()`), local steps a loop. The number of
    client slots must be a multiple of the number of devices (`num_slots`).
    One computation per (lanes, lane length) layout: `fix_layout` sets one
    for every later round (each looping only over the batches it needs;
    with `set_micro_batch`, over micro-batches, for small clients);
    else a round reuses a compiled layout its clients fit
    (`lane_layouts.LaneLayouts`). With the split on the devices (`upload`)
    a round takes `data.RoundRows` and sends only its examples' int32 rows;
    each local step gathers its batch there.
  * 'loop' (the default on CPU, `loop_rounds.LoopRounds`): one jitted
    `local_step` per batch, called from Python client by client, each
    client's clipped update folded into a running sum by a second jit, and
    `server_round` as the third. A client runs only its own batches.

  A program's runs (`run_rounds`) follow the same strategy: 'vmap' adds a
  vmapped run axis to the one computation; 'loop' runs them one after the
  other, each as its own 'loop' round, so a program costs no more than its
  runs in sequence (on a CPU a vmapped run axis turns the CNN's convolutions
  into grouped ones, 15x slower on the demo: `benchmarks/program_speed.py`).

  Either way the round compiles a fixed number of computations (`compiles`,
  counted) whatever the cohort size, given fixed slot and batch counts.

  Args:
    loss_fn: the model's loss (`client_training.LossFn`).
    client_optimizer, server_optimizer: the local and server optimizers.
    config: the DP aggregation of every round.
    canary_clip: 'project' or 'clip' (`canary_spec.CANARY_CLIPS`).
    client_dropout: whether local steps get dropout keys.
    devices: the devices of the client axis (default `jax.devices()`).
    local_training: 'loop', 'vmap' or 'auto' (`default_local_training`).

  Raises:
    TypeError: an optimizer or `config` of the wrong type.
    ValueError: an unknown `canary_clip` or `local_training`, or no devices.
  """

  def __init__(self, loss_fn: client_training.LossFn,
               client_optimizer: optimizers.Optimizer,
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
    mesh = jax.sharding.Mesh(np.asarray(self._devices), (CLIENT_AXIS,))
    self._by_client = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(CLIENT_AXIS))
    self._runs_by_client = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(None, CLIENT_AXIS))
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())
    self._shapes: set[tuple[str, Any]] = set()
    self._lanes = lane_layouts.LaneLayouts(len(self._devices))
    self._micro_batch: int | None = None
    self._resident: tuple[jax.Array, jax.Array] | None = None
    self.upload_bytes = 0

    def round_fn(state, resident, packed, slot_keys, canary_directions,
                 canary_mask, key, noise, num_steps, scales=None,
                 micro_per_batch=1):
      kind = (packed_batches.PackedBatches if resident is None else
              packed_batches.PackedRows)
      return fedavg.packed_round(
          loss_fn, client_optimizer, server_optimizer, config, canary_clip,
          client_dropout, state, kind(*packed), slot_keys, canary_directions,
          canary_mask, key, noise, scales, resident=resident,
          num_steps=num_steps, micro_per_batch=micro_per_batch)

    def program_fn(states, resident, packed, slot_keys, canary_directions,
                   canary_masks, keys, noises, num_steps, scales, active,
                   micro_per_batch=1):

      def one_run(state, packed, slot_keys, canary_directions, canary_mask,
                  key, noise, scale):
        return round_fn(state, resident, packed, slot_keys,
                        canary_directions, canary_mask, key, noise,
                        num_steps, scale, micro_per_batch)

      new_states, outputs = jax.vmap(one_run)(
          states, packed, slot_keys, canary_directions, canary_masks, keys,
          noises, scales)

      def keep(new, old):
        return jnp.where(active.reshape((-1,) + (1,) * (new.ndim - 1)), new,
                         old)

      return _tree_map(keep, new_states, states), outputs

    self._round = jax.jit(round_fn, static_argnames='micro_per_batch')
    self._program = jax.jit(program_fn, static_argnames='micro_per_batch')
    self._loop = loop_rounds.LoopRounds(
        loss_fn, client_optimizer, server_optimizer, config, canary_clip,
        client_dropout, self._note)

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
    """Client slots for `num_clients`: the next multiple of the devices.

    Args:
      num_clients: the round's clients, >= 0 (0 counts as 1).

    Returns:
      The least multiple of `num_devices` that is >= max(num_clients, 1).
    """
    return lane_layouts.round_up(num_clients, self.num_devices)

  def init_state(self, params: Any) -> fedavg.ServerState:
    """The replicated server state before round 0.

    Args:
      params: the initial model parameters (a pytree, cast to float32).

    Returns:
      `fedavg.init_server_state` of `params`, replicated on every device.
    """
    return jax.device_put(
        fedavg.init_server_state(params, self.server_optimizer, self.config),
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

    Args:
      arrays: the training split whose model inputs and labels
        (`client_arrays.model_inputs`) are put on the devices.

    Raises:
      ValueError: local training is 'loop' (it reads host batches).
    """
    if self.local_training != 'vmap':
      raise ValueError("upload needs local_training='vmap'; got "
                       f'{self.local_training!r}.')
    inputs, labels = client_arrays.model_inputs(
        arrays.kind, {name: np.asarray(array)
                      for name, array in arrays.features.items()})
    self._resident = tuple(jax.device_put((inputs, labels),
                                          self._replicated))

  def __call__(self, state: fedavg.ServerState,
               batches: data.RoundBatches | data.RoundRows,
               canary_directions: np.ndarray | jax.Array,
               canary_mask: np.ndarray | jax.Array,
               key: jax.Array, noise: jax.Array | None = None
               ) -> tuple[fedavg.ServerState, fedavg.RoundOutput]:
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
    self.upload_bytes = loop_rounds.host_bytes(canary_directions, canary_mask,
                                               noise)
    canary_directions = jnp.asarray(canary_directions, jnp.float32)
    canary_mask = jnp.asarray(canary_mask, jnp.float32)
    if self.local_training == 'loop':
      self._loop.upload_bytes = self.upload_bytes
      output = self._loop.round(state, *self._micro_view(batches),
                                canary_directions, canary_mask, key, noise)
      self.upload_bytes = self._loop.upload_bytes
      return output
    batches, micro_per_batch = self._micro_view(batches)
    (lanes,), lane_batches, steps = self._lanes.choose([batches])
    pack = (packed_batches.pack_rows if resident else
            packed_batches.pack_batches)
    packed = pack(batches, lanes, lane_batches)
    fields = tuple(getattr(packed, f.name) for f in dataclasses.fields(packed))
    self.upload_bytes += loop_rounds.host_bytes(*fields)
    sharded = jax.device_put(fields, self._by_client)
    replicated = jax.device_put(
        (fedavg.client_keys(key, slots), canary_directions, canary_mask, key,
         noise, np.int32(steps)), self._replicated)
    split = self._resident if resident else None
    self._note('round', state, split, sharded, *replicated, micro_per_batch)
    return self._round(state, split, sharded, *replicated,
                       micro_per_batch=micro_per_batch)

  def padded_examples(self, batches: data.RoundBatches | data.RoundRows
                      ) -> int:
    """Examples the round's local training processes, padding included.

    'vmap': the packed lanes (`lane_layouts.LaneLayouts.choose`), lanes x
    the (micro-)batches they loop over x their size; 'loop': each client's
    non-empty micro-batches (`set_micro_batch`; whole batches by default)
    at full size.

    Args:
      batches: the round's batches or rows, as `__call__` takes them.

    Returns:
      The examples processed, padding included (>= the real examples).
    """
    batches, _ = self._micro_view(batches)
    batch_size = batches.example_mask.shape[2]
    if self.local_training == 'loop':
      return int((batches.example_mask.sum(axis=2) > 0).sum()) * batch_size
    (lanes,), _, steps = self._lanes.choose([batches])
    return len(lanes) * steps * batch_size

  def set_micro_batch(self, micro_batch: int | None) -> None:
    """Local steps on micro-batches of `micro_batch` examples from now on.

    Batches are cut into micro-batches (`data.micro_batches`) whose
    gradients add up to the batch's before its one optimizer step
    (`client_training.accumulated_step`, `packed_round`'s
    `micro_per_batch`): the same training up to float rounding, a partial
    batch padded to a multiple of `micro_batch` only. Micro-batch i of a
    client gets dropout key `batch_key(client key, i)` in both strategies.
    None (the default): whole batches. `packing.run_layout` picks it for
    'vmap'.

    Args:
      micro_batch: examples per micro-batch, >= 1, dividing the batch size
        of later rounds; None for whole batches.

    Raises:
      ValueError: `micro_batch` < 1.
    """
    self._micro_batch = (None if micro_batch is None else
                         validation.check_int('micro_batch', micro_batch,
                                              low=1))

  def _micro_view(self, batches: data.RoundBatches | data.RoundRows
                  ) -> tuple[data.RoundBatches | data.RoundRows, int]:
    """(`batches` cut into the engine's micro-batches, micro-batches a batch)."""
    per_batch = batches.example_mask.shape[2] // (self._micro_batch or
                                                  batches.example_mask.shape[2])
    if per_batch == 1:
      return batches, 1
    return data.micro_batches(batches, self._micro_batch), per_batch

  def fix_layout(self, num_lanes: int, lane_batches: int) -> None:
    """Compiles every later round for `num_lanes` lanes of `lane_batches`.

    A round then loops only over the batches its clients need at that width
    (`packing.lane_capacity`): one compiled round for a whole run whose
    rounds all fit (`packing.run_layout`). With micro-batches
    (`set_micro_batch`), lengths count micro-batches.

    Args:
      num_lanes: lanes of every later round, >= 1, a multiple of the devices.
      lane_batches: the most (micro-)batches of a lane, >= 1.

    Raises:
      ValueError: local training is not 'vmap', or `num_lanes` is not a
        multiple of the devices.
    """
    if self.local_training != 'vmap':
      raise ValueError("fix_layout needs local_training='vmap'; got "
                       f'{self.local_training!r}.')
    self._lanes.fix(num_lanes, lane_batches)

  def run_rounds(self, states: fedavg.ServerState,
                 runs: Sequence[data.RoundBatches | data.RoundRows],
                 canary_directions: Sequence[jax.Array],
                 canary_masks: Sequence[np.ndarray],
                 keys: Sequence[jax.Array],
                 noises: Sequence[jax.Array] | None,
                 scales: np.ndarray, active: np.ndarray
                 ) -> tuple[fedavg.ServerState, fedavg.RoundOutput]:
    """A round of R runs as one program, in the engine's strategy.

    'vmap': `packed_round` with a run axis. The runs' clients are packed
    into one layout (`lane_layouts.LaneLayouts.choose`, the same lanes and
    lane length for every run), so the R rounds are one computation,
    vmapped over the runs, each run's lanes sharded over the devices.
    'loop': each active run's round in turn, as `__call__` runs it (what the
    runs cost one after another).
    Either way a run gets what its own round would (its batches, canaries,
    key, the dropout keys of its own slot count, its noise): the program
    equals R separate rounds up to float rounding ('loop': exactly).

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
      ValueError: rows without `upload`.
    """
    if self.local_training == 'loop':
      output = self._loop.program(
          states, [self._micro_view(batches) for batches in runs],
          canary_directions, canary_masks, keys, noises, scales, active)
      self.upload_bytes = self._loop.upload_bytes
      return output
    resident = isinstance(runs[0], data.RoundRows)
    if resident and self._resident is None:
      raise ValueError('batches of rows (data.RoundRows) need the split on '
                       'the device: call upload(arrays) first.')
    views = [self._micro_view(batches) for batches in runs]
    runs, micro_per_batch = [view for view, _ in views], views[0][1]
    layouts, lane_batches, steps = self._lanes.choose(runs)
    pack = packed_batches.pack_rows if resident else packed_batches.pack_batches
    packed = [pack(batches, lanes, lane_batches)
              for batches, lanes in zip(runs, layouts)]
    fields = tuple(np.stack([getattr(p, f.name) for p in packed])
                   for f in dataclasses.fields(packed[0]))
    slots = max(batches.client_mask.shape[0] for batches in runs)
    slot_keys = jnp.stack([
        jnp.zeros((slots,) + keys[0].shape, keys[0].dtype).at[
            :batches.client_mask.shape[0]].set(
                fedavg.client_keys(key, batches.client_mask.shape[0]))
        for key, batches in zip(keys, runs)])
    host = (fields, np.stack(canary_masks).astype(np.float32),
            np.asarray(scales, np.float32), np.asarray(active, bool))
    self.upload_bytes = loop_rounds.host_bytes(*fields, *host[1:])
    sharded = jax.device_put(fields, self._runs_by_client)
    replicated = jax.device_put(
        (slot_keys, jnp.stack([jnp.asarray(d, jnp.float32)
                               for d in canary_directions]), host[1],
         jnp.stack(keys), None if noises is None else jnp.stack(noises),
         np.int32(steps), host[2], host[3]), self._replicated)
    resident_split = self._resident if resident else None
    self._note('program', states, sharded, *replicated, micro_per_batch)
    return self._program(states, resident_split, sharded, *replicated,
                         micro_per_batch=micro_per_batch)

  def program_padded_examples(
      self, runs: Sequence[data.RoundBatches | data.RoundRows]) -> int:
    """Examples a `run_rounds` call processes, padding included.

    Args:
      runs: each run's batches or rows, as `run_rounds` takes them.

    Returns:
      'loop': the sum of the runs' `padded_examples`; 'vmap': runs x lanes x
      the (micro-)batches each lane loops over x their size.
    """
    if self.local_training == 'loop':
      return sum(self.padded_examples(batches) for batches in runs)
    runs = [self._micro_view(batches)[0] for batches in runs]
    layouts, _, steps = self._lanes.choose(runs)
    return len(runs) * len(layouts[0]) * steps * runs[0].example_mask.shape[2]

  def round_cost(self, state: fedavg.ServerState, batches: data.RoundBatches,
                 canary_directions: np.ndarray, canary_mask: np.ndarray,
                 key: jax.Array) -> dict[str, float]:
    """XLA's cost analysis of one round, 'loop' computations
    (`loop_rounds.LoopRounds.cost`): {'flops', 'bytes accessed'}.

    Whatever `local_training` is, the round is costed as 'loop' runs it (one
    local step per real batch), so no loop body counts once for all trips.

    Args:
      state: the server state before the round.
      batches: the round's whole batches (host arrays).
      canary_directions: float32 [k, d], the run's seen canaries.
      canary_mask: float32 [k], 1 for the canaries inserted this round.
      key: the round's PRNG key.

    Returns:
      {'flops': ..., 'bytes accessed': ...}, summed over the round's
      computations.
    """
    return self._loop.cost(state, batches, canary_directions, canary_mask,
                           key)
