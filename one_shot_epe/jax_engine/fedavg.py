"""One DP-FedAvg round with canaries, as the TFF path computes it, in JAX.

Andrew et al. (ICLR 2024), Algorithm 2, on the TFF path's aggregation
(one_shot_epe/canary_aggregator.py, seeded_queries.py; experiments/train.py
`build_aggregator`): in round t with clip S_t,

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
   and, for the adaptive clip, `value_noise_multiplier` (the noise split that
   leaves an overall multiplier z, as tff.aggregators'
   `DifferentiallyPrivateFactory.gaussian_adaptive` and the canary factory do);
5. the noised sum is divided by the expected cohort size (NormalizedQuery);
6. adaptive clipping (Andrew et al. 2021, tensorflow_privacy's
   QuantileEstimatorQuery, geometric update): b = clamp((sum of (unclipped -
   1/2) + N(0, sigma_b^2)) / cohort + 1/2, 0, 1) and S_{t+1} = S_t
   exp(-eta (b - gamma));
7. the server optimizer takes the noised mean as its gradient.

Clients are processed in parallel: local training is vmapped over a padded
client axis (absent clients are masked out of every sum), the round is
jit-compiled, and the client axis is sharded over all local devices
(`jax.sharding`), so XLA sums the clients' updates across devices. For several
hosts, the same code runs under `jax.distributed.initialize()` with a mesh over
`jax.devices()` of all hosts, each host feeding its slots of the client axis.

The noise is a pure function of the round key (`jax.random`): distributed as
the TFF path's seeded noise, not bit-equal to it.
"""

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import optimizers

CANARY_CLIPS = ('project', 'clip')
CLIENT_AXIS = 'clients'
_tree_map = jax.tree_util.tree_map
# loss(params, inputs, labels, example_mask, dropout_key) -> scalar.
LossFn = Callable[[Any, jax.Array, jax.Array, jax.Array, Any], jax.Array]


def _check_real(value: object, name: str, low: float, *,
                low_open: bool = False, high: float = math.inf) -> float:
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise TypeError(f'{name} must be a real number; got '
                    f'{type(value).__name__}.')
  if (not math.isfinite(value) or value < low or value > high or
      (low_open and value == low)):
    bracket = '(' if low_open else '['
    raise ValueError(f'{name} must be in {bracket}{low}, {high}]; got '
                     f'{value}.')
  return float(value)


def value_noise_multiplier(noise_multiplier: float,
                           clipped_count_stddev: float) -> float:
  """Noise multiplier z_v of the update sum under adaptive clipping.

  The released unclipped count is a Gaussian query of sensitivity 1/2 and std
  sigma_b; composed with the update sum (sensitivity 1, std z_v) it is a
  Gaussian mechanism with 1/z^2 = 1/z_v^2 + 1/(2 sigma_b)^2 (Andrew et al.
  2021, Sec. 3), so z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2) gives overall z.

  Raises:
    ValueError: sigma_b <= z / 2 (no z_v reaches z).
  """
  if noise_multiplier == 0.0:
    return 0.0
  if noise_multiplier >= 2.0 * clipped_count_stddev:
    raise ValueError(
        f'clipped_count_stddev must exceed noise_multiplier / 2 = '
        f'{noise_multiplier / 2} for the overall noise multiplier to be '
        f'{noise_multiplier}; got {clipped_count_stddev}.')
  return (noise_multiplier**-2 - (2.0 * clipped_count_stddev)**-2)**-0.5


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """DP-FedAvg aggregation: fixed clip if `clip` is set, else adaptive.

  Attributes:
    noise_multiplier: z >= 0, the overall noise multiplier.
    clients_per_round: expected cohort size (the mean's denominator), > 0.
    clip: fixed clip S > 0, or None for adaptive clipping.
    initial_clip: S_0 of adaptive clipping (TFF's default 0.1).
    target_unclipped_quantile: gamma in [0, 1].
    clip_learning_rate: eta >= 0 of the geometric update.
    clipped_count_stddev: sigma_b of the unclipped count; None:
      0.05 * clients_per_round if z > 0, else 0 (TFF's default).
    canary_clip: 'project' or 'clip' (see the module docstring).
  """
  noise_multiplier: float
  clients_per_round: float
  clip: float | None = None
  initial_clip: float = 0.1
  target_unclipped_quantile: float = 0.5
  clip_learning_rate: float = 0.2
  clipped_count_stddev: float | None = None
  canary_clip: str = 'project'

  def __post_init__(self):
    _check_real(self.noise_multiplier, 'noise_multiplier', 0.0)
    _check_real(self.clients_per_round, 'clients_per_round', 0.0,
                low_open=True)
    if self.clip is not None:
      _check_real(self.clip, 'clip', 0.0, low_open=True)
    _check_real(self.initial_clip, 'initial_clip', 0.0, low_open=True)
    _check_real(self.target_unclipped_quantile, 'target_unclipped_quantile',
                0.0, high=1.0)
    _check_real(self.clip_learning_rate, 'clip_learning_rate', 0.0)
    if self.clipped_count_stddev is not None:
      _check_real(self.clipped_count_stddev, 'clipped_count_stddev', 0.0)
    if self.canary_clip not in CANARY_CLIPS:
      raise ValueError(f'canary_clip must be one of {list(CANARY_CLIPS)}; got '
                       f'{self.canary_clip!r}.')
    if self.adaptive:
      value_noise_multiplier(self.noise_multiplier, self.count_stddev)

  @property
  def adaptive(self) -> bool:
    """Whether the clip adapts (no fixed clip given)."""
    return self.clip is None

  @property
  def count_stddev(self) -> float:
    """sigma_b, the std of the noise on the unclipped count."""
    if self.clipped_count_stddev is not None:
      return self.clipped_count_stddev
    return 0.05 * self.clients_per_round if self.noise_multiplier > 0 else 0.0

  @property
  def update_noise_multiplier(self) -> float:
    """z_v: the update sum's noise std is z_v * S_t."""
    if not self.adaptive:
      return self.noise_multiplier
    return value_noise_multiplier(self.noise_multiplier, self.count_stddev)


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


def client_update(loss_fn: LossFn, optimizer: optimizers.Optimizer,
                  params: Any, inputs: jax.Array, labels: jax.Array,
                  example_mask: jax.Array, dropout_key: Any = None) -> Any:
  """A client's model delta (initial - trained) after local training.

  One optimizer step per batch (leading axis of inputs/labels/example_mask)
  on the batch's mean loss over its valid examples; batches without valid
  examples are skipped (the optimizer state does not advance). The optimizer
  starts fresh every round, as in TFF. A delta with a non-finite entry is
  zeroed (TFF's `zero_all_if_any_non_finite`). `dropout_key` None: no
  dropout; else batch m uses fold_in(dropout_key, m).
  """
  grad_fn = jax.grad(loss_fn)

  def step(carry, batch):
    weights, state = carry
    index, x, y, mask = batch
    key = None if dropout_key is None else jax.random.fold_in(dropout_key,
                                                              index)
    grads = grad_fn(weights, x, y, mask, key)
    new_state, new_weights = optimizer.step(state, weights, grads)
    present = jnp.sum(mask) > 0
    keep = lambda new, old: jnp.where(present, new, old)  # pylint: disable=unnecessary-lambda-assignment
    return (_tree_map(keep, new_weights, weights),
            _tree_map(keep, new_state, state)), None

  num_batches = example_mask.shape[0]
  (trained, _), _ = jax.lax.scan(
      step, (params, optimizer.init(params)),
      (jnp.arange(num_batches), inputs, labels, example_mask))
  delta = _tree_map(lambda w0, w: w0 - w, params, trained)
  finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in
                                jax.tree_util.tree_leaves(delta)]))
  return _tree_map(lambda x: jnp.where(finite, x, 0.0), delta)


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
                         count_noise: jax.Array, config: DPConfig
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
                      config: DPConfig) -> ServerState:
  """The state before round 0: S_0 is the fixed or the initial clip."""
  params = _tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
  clip = config.initial_clip if config.adaptive else config.clip
  return ServerState(params=params,
                     optimizer_state=server_optimizer.init(params),
                     clip=jnp.asarray(clip, jnp.float32),
                     round_num=jnp.asarray(0, jnp.int32))


def dp_fedavg_round(loss_fn: LossFn, client_optimizer: optimizers.Optimizer,
                    server_optimizer: optimizers.Optimizer, config: DPConfig,
                    client_dropout: bool, state: ServerState,
                    inputs: jax.Array, labels: jax.Array,
                    example_mask: jax.Array, client_mask: jax.Array,
                    canary_directions: jax.Array, canary_mask: jax.Array,
                    key: jax.Array) -> tuple[ServerState, RoundOutput]:
  """One round (module docstring, steps 1-7); pure, jit-able.

  inputs, labels, example_mask: [slots, batches, batch_size, ...] (see
  `data.RoundBatches`); client_mask [slots]; canary_directions [k, d] and
  canary_mask [k] (k may be 0); key: the round's PRNG key (client dropout,
  update noise and count noise use independent sub-keys).
  """
  clip = state.clip
  flat_params, unravel = ravel_pytree(state.params)
  dropout_key, update_key, count_key = jax.random.split(key, 3)
  slots = client_mask.shape[0]

  def one_client(x, y, mask, client_key):
    delta = client_update(loss_fn, client_optimizer, state.params, x, y, mask,
                          client_key if client_dropout else None)
    clipped, norm = clip_by_global_norm(delta, clip)
    return ravel_pytree(clipped)[0], norm

  client_keys = jax.random.split(dropout_key, slots)
  clipped, norms = jax.vmap(one_client)(inputs, labels, example_mask,
                                        client_keys)
  total = client_mask @ clipped
  canary_sum = canary_records(canary_directions, canary_mask, clip)
  std = config.update_noise_multiplier * clip
  noised = total + canary_sum + std * jax.random.normal(
      update_key, flat_params.shape, jnp.float32)
  aggregate = noised / config.clients_per_round

  optimizer_state, params = server_optimizer.step(
      state.optimizer_state, state.params, unravel(aggregate))
  if config.adaptive:
    canary_sign = 0.5 if config.canary_clip == 'project' else -0.5
    unclipped_sum = (jnp.sum(client_mask * ((norms <= clip) - 0.5)) +
                     canary_sign * jnp.sum(canary_mask))
    count_noise = config.count_stddev * jax.random.normal(count_key, (),
                                                          jnp.float32)
    new_clip, fraction = adaptive_clip_update(clip, unclipped_sum, count_noise,
                                              config)
  else:
    new_clip, fraction = clip, jnp.asarray(jnp.nan, jnp.float32)
  new_state = ServerState(params=params, optimizer_state=optimizer_state,
                          clip=new_clip.astype(jnp.float32),
                          round_num=state.round_num + 1)
  return new_state, RoundOutput(
      aggregate=aggregate, clip=clip, unclipped_fraction=fraction,
      num_clients=jnp.sum(client_mask),
      canaries_inserted=jnp.sum(canary_mask))


class RoundEngine:
  """`dp_fedavg_round` jit-compiled with the client axis over all devices.

  Round inputs are placed with their client axis sharded over a 1-D mesh of
  `devices` (default `jax.devices()`); the server state and canaries are
  replicated. The number of client slots must be a multiple of the number of
  devices (`num_slots`).
  """

  def __init__(self, loss_fn: LossFn, client_optimizer: optimizers.Optimizer,
               server_optimizer: optimizers.Optimizer, config: DPConfig, *,
               client_dropout: bool = True,
               devices: Sequence[Any] | None = None):
    for name, value, kind in (('client_optimizer', client_optimizer,
                               optimizers.Optimizer),
                              ('server_optimizer', server_optimizer,
                               optimizers.Optimizer),
                              ('config', config, DPConfig)):
      if not isinstance(value, kind):
        raise TypeError(f'{name} must be a {kind.__name__}; got '
                        f'{type(value).__name__}.')
    self._devices = list(jax.devices() if devices is None else devices)
    if not self._devices:
      raise ValueError('devices must name at least one device.')
    self.server_optimizer = server_optimizer
    self.config = config
    mesh = jax.sharding.Mesh(np.asarray(self._devices), (CLIENT_AXIS,))
    self._by_client = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(CLIENT_AXIS))
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())

    def round_fn(state, inputs, labels, example_mask, client_mask,
                 canary_directions, canary_mask, key):
      return dp_fedavg_round(loss_fn, client_optimizer, server_optimizer,
                             config, client_dropout, state, inputs, labels,
                             example_mask, client_mask, canary_directions,
                             canary_mask, key)

    self._round = jax.jit(round_fn)

  @property
  def num_devices(self) -> int:
    """Devices the client axis is spread over."""
    return len(self._devices)

  def num_slots(self, num_clients: int) -> int:
    """Client slots for `num_clients`: the next multiple of the devices."""
    return -(-max(num_clients, 1) // self.num_devices) * self.num_devices

  def init_state(self, params: Any) -> ServerState:
    """The replicated server state before round 0."""
    return jax.device_put(
        init_server_state(params, self.server_optimizer, self.config),
        self._replicated)

  def __call__(self, state: ServerState, batches: data.RoundBatches,
               canary_directions: np.ndarray, canary_mask: np.ndarray,
               key: jax.Array) -> tuple[ServerState, RoundOutput]:
    """Runs one round on `batches` (slots a multiple of the devices)."""
    slots = batches.client_mask.shape[0]
    if slots % self.num_devices:
      raise ValueError(f'batches must have a multiple of {self.num_devices} '
                       f'client slots (num_slots); got {slots}.')
    sharded = jax.device_put(
        (batches.inputs, batches.labels, batches.example_mask,
         batches.client_mask), self._by_client)
    replicated = jax.device_put(
        (jnp.asarray(canary_directions, jnp.float32),
         jnp.asarray(canary_mask, jnp.float32), key), self._replicated)
    return self._round(state, *sharded, *replicated)
