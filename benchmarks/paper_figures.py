"""The JSON figures of a paper table, from its kind's measured round.

`benchmarks.paper_scale` measures one round per task kind and turns it into
each table's figures here (`task_figures`; the figures are defined in
`benchmarks.paper_scale`'s docstring): the measured round scaled to the
expected round of a full paper cohort (`cohort_expectations`, over draws of
the cohort laid out as one run's rounds, the Shakespeare ones from the real
roles, `shakespeare_layouts`), a roofline of the full 'vmap' round on one
H100 (at ACHIEVABLE_FRACTION of its peaks), and the table's hours on one
machine (`table_hours`) and on N machines with Ray (`ray_hours`). No absl
flags.
"""

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import packing
from benchmarks import paper_grids
from benchmarks import round_timing
from one_shot_epe.data import shakespeare

# The share of an H100's FLOP/s and bytes/s peaks a round achieves (an
# assumption); the paper's client batch size; the N of `ray_hours`.
ACHIEVABLE_FRACTION = 0.3
BATCH_SIZE = 16
RAY_MACHINES = (4, 16, 64)
_BYTES_PER_INDEX = 4  # int32


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
  """Means over `seeds` draws of a full paper cohort (both layouts).

  Args:
    kind: The task kind ('emnist', 'stackoverflow', 'shakespeare').
    seeds: Draws of the cohort, laid out as the rounds of one run.

  Returns:
    The cohort's clients, the mean examples, batches, packed examples, lanes
    and lane length, the micro-batch, and the padding ratios ('loop',
    'vmap', per slot) over all draws.
  """
  config = paper_grids.config_flags(
      f'{round_timing.REPO}/{paper_grids.CONFIGS[kind]}')
  cohort = int(config['clients_per_round'])
  # The draws as the rounds of one run, laid out as the engine lays a run out.
  if kind == 'shakespeare':
    layouts = shakespeare_layouts(cohort,
                                  int(config['max_examples_per_client']),
                                  range(seeds))
  else:
    layouts = packing.run_layouts(kind, cohort,
                                  paper_grids.MEAN_EXAMPLES[kind],
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
  """runs x (rounds x round_s + startup_s) / 3600 (None if unmeasured).

  Args:
    runs: The table's runs.
    rounds: Rounds of each run.
    round_s: Seconds of a round, or None.
    startup_s: A run's start-up seconds, or None for none.

  Returns:
    The hours, or None without `round_s`.
  """
  if round_s is None:
    return None
  return runs * (rounds * round_s + (startup_s or 0.0)) / 3600


def ray_hours(runs: int, rounds: int, round_s: float | None,
              startup_s: float | None) -> dict[str, Any]:
  """The table on N machines, one run per machine at a time (a formula).

  Args:
    runs: The table's runs.
    rounds: Rounds of each run.
    round_s: Seconds of a round, or None.
    startup_s: A run's start-up seconds, or None for none.

  Returns:
    The formula and its hours for each N of RAY_MACHINES; {} without
    `round_s`.
  """
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
    child: The JAX engine's figures of the task's kind
      (`paper_scale.jax_figures`).
    tff_seconds: The TFF engine's measured round seconds, or None.
    seeds: Draws of the full cohort the expectations average.

  Returns:
    The task's JSON figures.
  """
  spec = paper_grids.paper_grid(task)
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
