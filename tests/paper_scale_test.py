"""Tests of benchmarks/paper_scale.py at toy size: its grids
(benchmarks/paper_grids.py) and JSON figures (benchmarks/paper_figures.py).

Independent truths: the paper's run and round counts (Sec. 5: 16 runs of 510
EMNIST rounds, of 2,048 StackOverflow rounds, and 2 x 50 x (1 + 10) runs for
Table 5), the bytes of an EMNIST example (28 x 28 float32 pixels, an int32
label, a float32 mask), the padding recomputed from the client-size law
directly, and the hours recomputed from the measured round.
"""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

from benchmarks import paper_figures
from benchmarks import paper_grids
from benchmarks import paper_scale
from benchmarks import round_timing
from one_shot_epe.data import client_arrays

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


@pytest.fixture(scope='module')
def toy_figures():
  """A 3-client EMNIST round measured on the JAX engine, then figured."""
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  run = round_timing.LauncherRun(
      task_flags=paper_grids.launcher_run('emnist', 3).task_flags,
      kind='emnist', clients=3, rounds=2, examples_per_client=8,
      max_examples=-1, num_canaries=2, noise_multiplier=0.1)
  measured = round_timing.run_jax(run)
  child = paper_scale.jax_figures(measured)
  return measured, child, paper_figures.task_figures('emnist', child,
                                                     [2.0, 0.5], seeds=3)


def test_grids_are_the_papers():
  assert [(g.runs, g.rounds) for g in map(
      paper_grids.paper_grid, ('emnist', 'stackoverflow', 'table5'))] == [
          (16, 510), (16, 2048), (1100, 2048)]


@pytest.mark.slow
def test_measured_round_is_the_runs_round_one(toy_figures):
  measured, child, _ = toy_figures
  plan = measured.prepared.plan
  sizes = measured.prepared.data.train.client_sizes()[plan.sampler.indices(1)]
  assert child['measured_examples'] == sizes.sum()
  assert child['measured_clients'] == 3
  assert child['measured_batches'] == np.sum(-(-sizes // 16))
  assert child['trivial_loop_steps'] == child['measured_batches']
  assert child['h2d_bytes_per_position'] == 28 * 28 * 4 + 4 + 4
  # 'loop' sends each client's batches, partial last batches padded, and
  # the round's canary mask (a float32 per canary slot: a few bytes).
  batch_bytes = child['h2d_bytes_per_position'] * measured.stats.padding_ratio
  assert child['h2d_bytes_per_example'] >= batch_bytes
  assert child['h2d_bytes_per_example'] == pytest.approx(batch_bytes,
                                                         rel=1e-3)
  assert child['flops'] > 0 and child['round_s'] > 0


@pytest.mark.slow
def test_figures_follow_from_the_measurement(toy_figures):
  _, child, figures = toy_figures
  examples, batches = [], []
  for seed in range(3):
    sizes = client_arrays.client_sizes('emnist', 101, 198, 'realistic', seed)
    examples.append(sizes.sum())
    batches.append(np.sum(-(-sizes // 16)))
  assert figures['expected_examples_per_round'] == pytest.approx(
      np.mean(examples))
  assert figures['padding_ratio_loop'] == pytest.approx(
      np.sum(batches) * 16 / np.sum(examples))
  assert 1 <= figures['padding_ratio_loop'] <= figures['padding_ratio_vmap']
  assert figures['padding_ratio_vmap'] < figures['padding_ratio_per_slot']
  scale = np.mean(examples) / child['measured_examples']
  assert figures['round_s_cpu_jax'] == pytest.approx(child['round_s'] * scale)
  assert figures['round_s_cpu_tff'] == pytest.approx(0.5 * scale)
  assert figures['startup_s_tff'] == pytest.approx(1.5)
  hours = 16 * (510 * figures['round_s_cpu_tff'] + 1.5) / 3600
  assert figures['predicted_table_hours_cpu_tff'] == pytest.approx(hours)
  assert figures['predicted_table_hours_cpu'] == pytest.approx(min(
      hours, figures['predicted_table_hours_cpu_jax']))
  assert figures['ray_hours']['cpu_tff']['4'] == pytest.approx(hours / 4)
  assert figures['ray_hours']['cpu_tff']['64'] == pytest.approx(hours / 16)
  assert figures['h2d_bytes_per_round'] == pytest.approx(
      child['h2d_bytes_per_example'] * np.mean(examples))
  assert figures['h2d_bytes_per_round_host_fed'] == pytest.approx(
      figures['h2d_bytes_per_round_resident'] * 3144 / 4)
  assert figures['flops_per_round_vmap'] >= figures['flops_per_round'] > 0
  assert figures['predicted_h100_round_s'] > max(
      figures['roofline_h100_round_s'], figures['dispatch_overhead_vmap_s'])
  h100 = 16 * (510 * figures['predicted_h100_round_s'] +
               child['compile_s']) / 3600
  assert figures['predicted_table_hours_1xh100'] == pytest.approx(h100)
  assert not math.isnan(figures['dispatch_overhead_s'])


@pytest.mark.parametrize('kind', ['emnist', 'stackoverflow'])
def test_packed_lanes_process_at_most_115_percent_of_the_examples(kind):
  # The run-wide layout of a full cohort (EMNIST's 101 clients,
  # StackOverflow's 167) at the paper's client-size laws, ten draws.
  full = paper_figures.cohort_expectations(kind, seeds=10)
  assert 1 <= full['padding_ratio_loop'] <= full['padding_ratio_vmap'] <= 1.15


def test_a_bad_task_exits_2_naming_the_flag():
  completed = subprocess.run(
      [sys.executable, '-m', 'benchmarks.paper_scale', '--tasks=mnist'],
      cwd=REPO, capture_output=True, text=True, check=False)
  assert completed.returncode == 2
  assert '--tasks' in completed.stderr
