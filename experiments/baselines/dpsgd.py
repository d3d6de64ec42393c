"""DP-SGD with one-example clients, with the one-shot method's canaries.

Sec. 5.4 of Andrew et al. (ICLR 2024) runs both estimators on one training
run in CANIFE's setting: every training example is its own client, so
DP-FedSGD with one local step is DP-SGD with per-example clipping
(Abadi et al. 2016). Round t (0-based):

  rho_bar_t = (sum_{i in cohort(t)} clip(g_i; C) + sum_{j in canaries(t)} C c_j
               + N(0, sigma^2 C^2 I_d)) / B
  v_t = beta v_{t-1} + rho_bar_t,  v_{-1} = 0
  theta_{t+1} = theta_t - eta v_t

with B the expected cohort size (the normalisation of DP-FedAvg's
`NormalizedQuery`, also used by `one_shot_epe.tff_engine.canary_aggregator`) and eta the
learning rate, beta the server momentum (`server_momentum`, 0 by default:
plain DP-SGD). Real clients are sampled by `sampling`
(`one_shot_epe.design.participation`): with 'poisson' every client joins each round
independently with probability q = B / N (`BernoulliSampling`; the DP
literature's "Poisson subsampling", CANIFE's accounting assumption); with
'shuffle' each joins exactly once per epoch (`ShuffledEpochs`). Training runs
epochs * ceil(N / B) rounds.

The seen canaries c_j (`one_shot_epe.tff_engine.canaries`, identical to those of the TFF
pipeline for the same seed and d) are inserted by `canary_insertion`
(`canary_schedule`):
  'once' (default): every seen canary exactly once in the whole run, at a
    uniformly random round (`canary_schedules.periodic_canary_schedule` with one
    period; per-round counts differ by at most one). Each canary is then one
    unamplified Gaussian release, the mechanism of the paper's "analytical
    eps" of Sec. 5.4 (34.5).
  'poisson': each canary joins each round with probability q, as a
    Poisson-sampled client; a canary may be inserted several times or never
    (about e^{-epochs} of them), so "seen" is a mixture.
  'shuffle': once per epoch, as a shuffled client (for one epoch the same
    schedule as 'once').

Tracking (Algorithm 3): the cosine of every seen and unseen canary with every
round's statistic vector enters a running maximum: rho_bar_t, the noised
update (`statistic='update'`, the paper's), or the model's step
theta_t - theta_{t+1} = eta v_t (`statistic='model_delta'`), which with
momentum carries every earlier round's update too and so dilutes each
canary's signal (Sec. 5.4's setting, whose numbers a weaker signal
reproduces; see the CANIFE section of the README). The maxima are kept by the project's one tracker
(`cosine_tracking.CosineTracker`, fed each aggregate; it buffers them and
regenerates the canaries once per block of rounds). The final-model
cosines of Algorithm 2 are taken with theta_T - theta_0
(`final_model.final_model_cosines`); an inserted canary moves theta along
-c, as in tff.learning.

An optional hook is called with the frozen parameters before the update of
chosen rounds; CANIFE audits run there without touching the training's
random streams, so training is the same whether or not it is audited.
"""

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from experiments.baselines import per_example
from one_shot_epe import validation
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import final_model

__all__ = ['CANARY_INSERTIONS', 'SAMPLINGS', 'STATISTICS', 'TrainingConfig',
           'TrainingResult', 'canary_schedule', 'train']

SAMPLINGS = ('poisson', 'shuffle')
STATISTICS = ('update', 'model_delta')
CANARY_INSERTIONS = ('once',) + SAMPLINGS


@validation.fields(
    'clip', 'noise_multiplier', 'learning_rate', 'num_unseen', 'seed',
    batch_size=validation.Int(1), epochs=validation.Int(1),
    num_seen=validation.Int(0), buffer_rounds=validation.Int(1),
    sampling=validation.Choice(SAMPLINGS),
    canary_insertion=validation.Choice(CANARY_INSERTIONS),
    server_momentum=validation.Real(0.0, 1.0, high_open=True),
    statistic=validation.Choice(STATISTICS))
@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """DP-SGD and canary parameters (defaults: Sec. 5.4 where it says).

  Attributes:
    clip: Clip norm C (1.0 in Sec. 5.4).
    noise_multiplier: sigma (0.2 in Sec. 5.4).
    batch_size: Expected cohort size B (128 in Sec. 5.4).
    epochs: Passes over the data (1 in Sec. 5.4).
    learning_rate: eta (not stated in the paper).
    sampling: Real clients' sampling, 'poisson' or 'shuffle' (module
      docstring).
    canary_insertion: Seen canaries' schedule, 'once', 'poisson' or
      'shuffle' (module docstring).
    num_seen: Seen canaries k (1000 in Sec. 5.4; 0 disables the canaries).
    num_unseen: Unseen canaries (1000 in Sec. 5.4).
    buffer_rounds: Aggregates buffered per cosine computation.
    seed: Seeds initialisation, sampling, noise and canaries.
    server_momentum: beta in [0, 1): heavy-ball momentum of the server step
      (module docstring); 0 is plain DP-SGD.
    statistic: The vector each round's canary cosines are taken with:
      'update' (rho_bar_t) or 'model_delta' (eta v_t).
  """
  clip: float = 1.0
  noise_multiplier: float = 0.2
  batch_size: int = 128
  epochs: int = 1
  learning_rate: float = 0.5
  sampling: str = 'poisson'
  canary_insertion: str = 'once'
  num_seen: int = 1000
  num_unseen: int = 1000
  buffer_rounds: int = 64
  seed: int = 0
  server_momentum: float = 0.0
  statistic: str = 'update'

  def __post_init__(self):
    if self.num_seen == 0 and self.num_unseen > 0:
      raise ValueError('num_unseen must be 0 when num_seen is 0.')

  def num_rounds(self, num_clients: int) -> int:
    """epochs * ceil(N / B) rounds.

    Args:
      num_clients: N, the training examples.

    Returns:
      T.
    """
    return self.epochs * math.ceil(num_clients / self.batch_size)

  def sampling_rate(self, num_clients: int) -> float:
    """q = B / N.

    Args:
      num_clients: N, the training examples.

    Returns:
      The sampling rate q.
    """
    return self.batch_size / num_clients


@dataclasses.dataclass(frozen=True)
class TrainingResult:
  """A finished run.

  Attributes:
    initial_params, final_params: theta_0 and theta_T, float32 [d].
    num_rounds: T.
    canary_seed: Seed of the canaries.
    seen_maxima: Max over rounds of each seen canary's cosine (Algorithm 3).
    unseen_maxima: The same for the unseen canaries.
    final_cosines: Seen canaries' cosines with theta_T - theta_0 (Alg. 2).
    final_unseen_cosines: The unseen canaries' (the one-run certificates'
      null).
    appearances: Rounds in which each seen canary was inserted.
    train_seconds: Wall time of training proper (gradients, noise, updates).
    one_shot_seconds: Wall time the one-shot method added (canary records,
      cosine tracking, final cosines); the hook's time is in neither.
  """
  initial_params: np.ndarray
  final_params: np.ndarray
  num_rounds: int
  canary_seed: int
  seen_maxima: np.ndarray
  unseen_maxima: np.ndarray
  final_cosines: np.ndarray
  final_unseen_cosines: np.ndarray
  appearances: np.ndarray
  train_seconds: float
  one_shot_seconds: float


def _sampler(sampling: str, num_clients: int, batch_size: int,
             seed: int) -> participation.ClientSampler:
  if sampling == 'poisson':
    return participation.BernoulliSampling(num_clients, batch_size, seed)
  return participation.ShuffledEpochs(num_clients, batch_size, seed)


@validation.arguments('num_clients')
def canary_schedule(config: TrainingConfig, num_clients: int,
                    seed: int) -> canary_schedules.CanarySchedule:
  """The rounds at which each seen canary is inserted (`canary_insertion`).

  'once' is `canary_schedules.periodic_canary_schedule(k, T, 1, seed)`;
  'poisson' and 'shuffle' are the canary schedules of the same-named client
  samplers at the clients' rate q = B / N (module docstring). A pure function
  of (config, num_clients, seed).

  Args:
    config: The training configuration (canaries, insertion, epochs).
    num_clients: N, the training examples.
    seed: Seed of the schedule.

  Returns:
    The seen canaries' rounds.

  Raises:
    TypeError: `config` is not a TrainingConfig.
    ValueError: there are no seen canaries, or N < the batch size.
  """
  if not isinstance(config, TrainingConfig):
    raise TypeError(f'config must be a TrainingConfig; got {config!r}.')
  if config.num_seen < 1:
    raise ValueError('config.num_seen must be >= 1 for a canary schedule; got '
                     f'{config.num_seen}.')
  if num_clients < config.batch_size:
    raise ValueError(f'num_clients must be >= batch_size = {config.batch_size}'
                     f'; got {num_clients}.')
  num_rounds = config.num_rounds(num_clients)
  if config.canary_insertion == 'once':
    return canary_schedules.periodic_canary_schedule(config.num_seen, num_rounds,
                                                  1, seed)
  return _sampler(config.canary_insertion, num_clients, config.batch_size,
                  seed).canary_schedule(config.num_seen, num_rounds, seed)


def train(model: Any, train_inputs: np.ndarray, train_labels: np.ndarray,
          config: TrainingConfig, *,
          hook: Callable[[int, np.ndarray], None] | None = None,
          hook_rounds: Sequence[int] = (),
          oracle: per_example.GradientOracle | None = None) -> TrainingResult:
  """Trains with canaries; calls hook(t, theta_t) before round t's update.

  Args:
    model: The model (see `experiments.baselines.per_example`).
    train_inputs: float32 [N, *input_shape]; example i is client i.
    train_labels: Label distributions [N, K] (one-hot rows).
    config: The training configuration.
    hook: Called with the round and a copy of the frozen parameters.
    hook_rounds: Rounds (0-based) at which the hook is called.
    oracle: The model's compiled gradients, if already built (saves
      recompiling them for every run).

  Returns:
    theta_0 and theta_T, the canaries' cosines (final and per-round maxima)
    and the run's bookkeeping.

  Raises:
    ValueError: `config` is not a TrainingConfig, the data's sizes disagree
      or are smaller than a batch, a hook round is out of range, or
      `oracle` was built for another model.
  """
  if not isinstance(config, TrainingConfig):
    raise ValueError(f'config must be a TrainingConfig; got {config!r}.')
  num_clients = len(train_inputs)
  if num_clients < 1 or len(train_labels) != num_clients:
    raise ValueError('train_inputs and train_labels must hold the same number '
                     f'(>= 1) of examples; got {num_clients} and '
                     f'{len(train_labels)}.')
  if config.batch_size > num_clients:
    raise ValueError(f'batch_size={config.batch_size} exceeds the '
                     f'{num_clients} training examples.')
  num_rounds = config.num_rounds(num_clients)
  hook_rounds = set(int(r) for r in hook_rounds)
  if hook_rounds and (hook is None or min(hook_rounds) < 0 or
                      max(hook_rounds) >= num_rounds):
    raise ValueError(f'hook_rounds must lie in [0, {num_rounds}) and need a '
                     'hook.')
  (init_seed, sampler_seed, schedule_seed, noise_seed,
   canary_seed) = (int(s) for s in
                   np.random.SeedSequence(config.seed).generate_state(5))
  if oracle is None:
    oracle = per_example.GradientOracle(model)
  elif oracle.model is not model:
    raise ValueError('oracle must be built for the same model.')
  sampler = _sampler(config.sampling, num_clients, config.batch_size,
                     sampler_seed)
  dim = model.dim
  clip = float(config.clip)
  noise_rng = np.random.default_rng(noise_seed)
  initial = model.initial_params(init_seed)
  params = initial.copy()
  velocity = np.zeros(dim, np.float32)
  momentum = np.float32(config.server_momentum)

  use_canaries = config.num_seen > 0
  if use_canaries:
    schedule = canary_schedule(config, num_clients, schedule_seed)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)],
                 autograph=False)
    def canary_direction(canary_id):
      return canaries.canary(canary_seed, canary_id, dim)

    tracker = cosine_tracking.CosineTracker(
        canary_spec.CanarySpec(canary_seed, config.num_seen,
                               config.num_unseen,
                               buffer_rounds=config.buffer_rounds),
        dim)
  train_seconds = one_shot_seconds = 0.0

  for t in range(num_rounds):
    if t in hook_rounds:
      hook(t, params.copy())
    start = time.perf_counter()
    cohort = sampler.indices(t)
    total = np.zeros(dim, np.float32)
    if cohort.size:
      total += oracle.clipped_sum(params, train_inputs[cohort],
                                  train_labels[cohort], clip).numpy()
    total += noise_rng.standard_normal(dim).astype(np.float32) * np.float32(
        config.noise_multiplier * clip)
    train_seconds += time.perf_counter() - start
    if use_canaries:
      start = time.perf_counter()
      for canary_id in schedule.canaries(t):
        total += np.float32(clip) * canary_direction(
            tf.constant(canary_id, tf.int64)).numpy()
      one_shot_seconds += time.perf_counter() - start
    start = time.perf_counter()
    aggregate = total / np.float32(config.batch_size)
    velocity = momentum * velocity + aggregate
    params = params - np.float32(config.learning_rate) * velocity
    train_seconds += time.perf_counter() - start
    if use_canaries:
      start = time.perf_counter()
      # Cosines are scale-free: the model's step eta v_t is taken as v_t.
      tracker.observe_aggregate(
          velocity if config.statistic == 'model_delta' else aggregate)
      one_shot_seconds += time.perf_counter() - start

  if not use_canaries:
    empty = np.zeros(0)
    return TrainingResult(initial, params, num_rounds, canary_seed, empty,
                          empty, empty, empty, np.zeros(0, np.int64),
                          train_seconds, one_shot_seconds)
  start = time.perf_counter()
  maxima = tracker.maxima()
  final_cosines = final_model.final_model_cosines(
      params, canary_seed=canary_seed,
      canary_ids=np.concatenate([canary_spec.seen_ids(config.num_seen),
                                 canary_spec.unseen_ids(config.num_unseen)]),
      initial_weights=initial, statistic='delta',
      model_moves_along=final_model.TFF_LEARNING_DIRECTION)
  one_shot_seconds += time.perf_counter() - start
  return TrainingResult(
      initial_params=initial, final_params=params, num_rounds=num_rounds,
      canary_seed=canary_seed, seen_maxima=maxima.seen,
      unseen_maxima=maxima.unseen,
      final_cosines=final_cosines[:config.num_seen],
      final_unseen_cosines=final_cosines[config.num_seen:],
      appearances=schedule.appearance_counts(), train_seconds=train_seconds,
      one_shot_seconds=one_shot_seconds)
