"""A whole DP-FedAvg run with canaries on the JAX engine, resumable.

The run of `experiments.train` (Andrew et al., ICLR 2024, Section 5) without
TensorFlow: each round t samples its clients with the same
`one_shot_epe.participation` sampler, builds their padded batches, inserts the
scheduled seen canaries and runs `fedavg.RoundEngine`; then, as Algorithm 3
(lines 10-16) asks, every canary's cosine with the round's vector is taken
and its running maximum updated. Canaries are regenerated on the device every
round (`jax_engine.canaries`), so the maxima are exact and current after
every round, with no buffer. At the end the seen canaries' cosines with the
final model (Algorithm 2) are taken the same way.

Determinism: round t's client sample depends on (seed, t) (the sampler), its
batch shuffles on numpy's generator seeded by (seed, t), and its dropout and
DP noise on `fold_in(PRNGKey(seed), t)`. A checkpoint (an .npz of the server
state and the maxima, written atomically) therefore resumes a run exactly:
a run killed and rerun gives the same results as one never interrupted.
"""

import dataclasses
import io
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from one_shot_epe import atomic_io
from one_shot_epe import participation
from one_shot_epe import run_options
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import optimizers

ALL_ITERATES_STATISTICS = ('aggregate', 'model_delta')
FINAL_MODEL_STATISTICS = ('delta', 'final')
_CHECKPOINT = re.compile(r'^round_(\d{8})\.npz$')


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything a run depends on.

  Attributes:
    model: a `models.EmnistCnn` or `models.WordLstm` (loss, init, correct).
    train: the training clients.
    test: the evaluation examples (all clients pooled), or None.
    sampler: who participates in round t (`participation`).
    schedule: entry t lists the seen canary ids inserted in round t.
    num_seen: k, seen canaries (ids 0..k-1).
    num_unseen: m, unseen canaries tracked but never inserted.
    canary_seed: seed of the canary directions.
    dp: the DP aggregation (clip, noise, cohort, canary clip).
    client_optimizer, server_optimizer: TFF's optimizers.
    batch_size, epochs, max_examples: client training (max_examples None:
      all of a client's examples).
    total_rounds: T.
    seed: seed of batches, dropout and noise.
    all_iterates_statistic: 'aggregate' (rho_bar_t, Algorithm 3) or
      'model_delta' (theta_{t-1} - theta_t).
    final_model_statistic: 'delta' (theta_0 - theta_T) or 'final' (theta_T).
  """
  model: Any
  train: data.ClientArrays
  test: data.ClientArrays | None
  sampler: participation.ClientSampler
  schedule: Sequence[Sequence[int]]
  num_seen: int
  num_unseen: int
  canary_seed: int
  dp: fedavg.DPConfig
  client_optimizer: optimizers.Optimizer
  server_optimizer: optimizers.Optimizer
  batch_size: int
  epochs: int
  max_examples: int | None
  total_rounds: int
  seed: int
  all_iterates_statistic: str = 'aggregate'
  final_model_statistic: str = 'delta'

  def __post_init__(self):
    if self.all_iterates_statistic not in ALL_ITERATES_STATISTICS:
      raise ValueError('all_iterates_statistic must be one of '
                       f'{list(ALL_ITERATES_STATISTICS)}; got '
                       f'{self.all_iterates_statistic!r}.')
    if self.final_model_statistic not in FINAL_MODEL_STATISTICS:
      raise ValueError('final_model_statistic must be one of '
                       f'{list(FINAL_MODEL_STATISTICS)}; got '
                       f'{self.final_model_statistic!r}.')
    if len(self.schedule) < self.total_rounds:
      raise ValueError(f'schedule must cover the {self.total_rounds} rounds; '
                       f'got {len(self.schedule)}.')


class RoundRecord(NamedTuple):
  """What one round reports (1-based `round_num`, as TFF numbers rounds)."""
  round_num: int
  clip: float
  aggregate_norm: float
  canaries_inserted: int
  num_clients: int
  seconds: float
  seen_mean: float
  seen_max: float
  unseen_mean: float
  unseen_max: float


class Outcome(NamedTuple):
  """A finished run: cosines of both threat models and the final accuracy."""
  final_cosines: np.ndarray
  final_unseen_cosines: np.ndarray
  seen_maxima: np.ndarray
  unseen_maxima: np.ndarray
  accuracy: float
  dim: int
  resumed_from_round: int
  rounds_trained: int


def _tracked_ids(num_seen: int, num_unseen: int) -> np.ndarray:
  return np.concatenate([np.arange(num_seen),
                         run_options.UNSEEN_ID_OFFSET + np.arange(num_unseen)])


def checkpoint_rounds(directory: str) -> list[int]:
  """Rounds of the complete checkpoints in `directory`, ascending."""
  if not os.path.isdir(directory):
    return []
  return sorted(int(m.group(1)) for m in map(_CHECKPOINT.match,
                                             os.listdir(directory)) if m)


def _save(directory: str, round_num: int, state: fedavg.ServerState,
          maxima: jax.Array, initial: np.ndarray) -> None:
  leaves = jax.tree_util.tree_leaves(state)
  buffer = io.BytesIO()
  np.savez(buffer, maxima=np.asarray(maxima), initial=initial,
           **{f'leaf_{i}': np.asarray(leaf) for i, leaf in enumerate(leaves)})
  os.makedirs(directory, exist_ok=True)
  atomic_io.write_bytes(os.path.join(directory, f'round_{round_num:08d}.npz'),
                        buffer.getvalue())


def _load(path: str, template: fedavg.ServerState
          ) -> tuple[fedavg.ServerState, np.ndarray, np.ndarray]:
  with np.load(path) as saved:
    treedef = jax.tree_util.tree_structure(template)
    leaves = [saved[f'leaf_{i}'] for i in range(treedef.num_leaves)]
    return (jax.tree_util.tree_unflatten(treedef, leaves), saved['maxima'],
            saved['initial'])


def _slot_ids(ids: Sequence[int], slots: int) -> tuple[np.ndarray, np.ndarray]:
  """Ids padded to `slots` (padding repeats id 0) and their 0/1 mask."""
  padded = np.zeros(slots, np.int64)
  padded[:len(ids)] = ids
  return padded, (np.arange(slots) < len(ids)).astype(np.float32)


def evaluate(model: Any, params: Any, test: data.ClientArrays,
             batch_size: int = 256) -> float:
  """Accuracy of `params` on every example of `test` (TFF's metric)."""
  pooled = data.ClientArrays(kind=test.kind, client_ids=np.asarray(['all']),
                             offsets=np.asarray([0, test.offsets[-1]]),
                             features=test.features)
  batches = data.client_batches(
      pooled, [0], batch_size=batch_size, epochs=1, max_examples=None,
      rng=np.random.default_rng(0), shuffle_buffer=1)
  correct = jax.jit(model.correct)
  hits = total = 0.0
  for m in range(batches.example_mask.shape[1]):
    got, count = correct(params, batches.inputs[0, m], batches.labels[0, m],
                         batches.example_mask[0, m])
    hits, total = hits + float(got), total + float(count)
  return hits / max(total, 1.0)


def train(plan: Plan, checkpoint_dir: str, rounds_per_checkpoint: int,
          on_round: Callable[[RoundRecord], None] | None = None) -> Outcome:
  """Trains (or resumes from `checkpoint_dir`) and returns the outcome.

  Checkpoints are written after round 0 (the initial state), every
  `rounds_per_checkpoint` rounds and after the last round; `on_round` is
  called after every round trained now.
  """
  engine = fedavg.RoundEngine(plan.model.loss, plan.client_optimizer,
                              plan.server_optimizer, plan.dp)
  state = engine.init_state(plan.model.init(jax.random.PRNGKey(plan.seed)))
  dim = int(ravel_pytree(state.params)[0].shape[0])
  tracked = _tracked_ids(plan.num_seen, plan.num_unseen)
  maxima = jnp.full(tracked.size, -jnp.inf)
  initial = np.asarray(ravel_pytree(state.params)[0])
  done = checkpoint_rounds(checkpoint_dir)
  if done:
    state, maxima, initial = _load(
        os.path.join(checkpoint_dir, f'round_{done[-1]:08d}.npz'), state)
  else:
    _save(checkpoint_dir, 0, state, maxima, initial)
  resumed_from = done[-1] if done else 0
  canary_slots = max(1, max(len(ids) for ids in plan.schedule))
  sizes = plan.train.client_sizes() * plan.epochs
  if plan.max_examples is not None:
    sizes = np.minimum(sizes, plan.max_examples)
  max_batches = data.max_batches_for(int(sizes.max()), plan.batch_size)
  base_key = jax.random.PRNGKey(plan.seed)
  for t in range(resumed_from, plan.total_rounds):
    start = time.perf_counter()
    clients = plan.sampler.indices(t)
    batches = data.client_batches(
        plan.train, clients, batch_size=plan.batch_size, epochs=plan.epochs,
        max_examples=plan.max_examples,
        rng=np.random.default_rng([plan.seed, t]),
        num_slots=engine.num_slots(len(clients)), max_batches=max_batches)
    ids, mask = _slot_ids(plan.schedule[t], canary_slots)
    previous = state.params
    state, output = engine(state, batches,
                           canaries.directions(plan.canary_seed, ids, dim),
                           mask, jax.random.fold_in(base_key, t))
    vector = output.aggregate
    if plan.all_iterates_statistic == 'model_delta':
      vector = ravel_pytree(previous)[0] - ravel_pytree(state.params)[0]
    cosines = np.asarray(canaries.cosines(plan.canary_seed, tracked, vector))
    maxima = jnp.maximum(maxima, cosines)
    seen, unseen = cosines[:plan.num_seen], cosines[plan.num_seen:]
    record = RoundRecord(
        round_num=t + 1, clip=float(output.clip),
        aggregate_norm=float(jnp.linalg.norm(output.aggregate)),
        canaries_inserted=int(output.canaries_inserted),
        num_clients=int(output.num_clients),
        seconds=time.perf_counter() - start,
        seen_mean=float(seen.mean()) if seen.size else float('nan'),
        seen_max=float(seen.max()) if seen.size else float('nan'),
        unseen_mean=float(unseen.mean()) if unseen.size else float('nan'),
        unseen_max=float(unseen.max()) if unseen.size else float('nan'))
    if on_round is not None:
      on_round(record)
    if (t + 1) % rounds_per_checkpoint == 0 or t + 1 == plan.total_rounds:
      _save(checkpoint_dir, t + 1, state, maxima, initial)
  final = np.asarray(ravel_pytree(state.params)[0])
  vector = initial - final if plan.final_model_statistic == 'delta' else final
  final_cosines = (np.asarray(canaries.cosines(plan.canary_seed, tracked,
                                               vector), np.float64)
                   if plan.num_seen else np.zeros(0))
  maxima = np.asarray(maxima, np.float64)
  accuracy = (evaluate(plan.model, state.params, plan.test)
              if plan.test is not None else float('nan'))
  return Outcome(final_cosines=final_cosines[:plan.num_seen],
                 final_unseen_cosines=final_cosines[plan.num_seen:],
                 seen_maxima=maxima[:plan.num_seen],
                 unseen_maxima=maxima[plan.num_seen:], accuracy=accuracy,
                 dim=dim, resumed_from_round=resumed_from,
                 rounds_trained=plan.total_rounds - resumed_from)
