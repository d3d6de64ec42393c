"""A program of R runs against the same R runs one after another (JAX engine).

`experiments.reproduce --runs_per_program=R` trains R runs of a grid as one
program (`jax_engine.training.train_program`). A program must never be
slower than its runs in sequence: on a CPU a vmapped run axis turned the
demo's CNN into grouped convolutions (8 min 29 s against 33 s for three runs
of `configs/demo.cfg --scale=0.25`), so the engine runs a program's runs in
turn there and vmaps them on accelerators (`round_engine.RoundEngine`,
`default_local_training`). This times, in one process and on the same
device, the launcher's R runs of the config's grid

* in sequence: `experiments.train.run_training` once per run (the baseline);
* as one program: `experiments.train.run_program` on the same configs;

and prints both wall-clock times (training, evaluation and every output
included) and the ratio program / sequence (<= 1 plus noise is the claim).

  python -m benchmarks.program_speed [--config=configs/demo.cfg]
      [--scale=0.25] [--runs=3] [--json=PATH]
"""

import dataclasses
import json
import os
import tempfile
import time
import types
from collections.abc import Sequence

import jax
from absl import app
from absl import flags

from benchmarks import tiny
from experiments import grid
from experiments import train
from experiments import train_config
from experiments import train_flags
from one_shot_epe.jax_engine import round_engine
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
      'config': flags.DEFINE_string(
          'config', 'configs/demo.cfg', 'Flagfile of the runs (its "# grid:" '
          'noise multipliers).', flag_values=flag_values),
      'scale': flags.DEFINE_float(
          'scale', 0.25, 'Shrink factor of rounds, clients and canaries '
          '(experiments.grid.scale_config).', flag_values=flag_values),
      'runs': flags.DEFINE_integer(
          'runs', 3, 'Runs of the program (R).', lower_bound=2,
          flag_values=flag_values),
      'json': flags.DEFINE_string('json', None, 'Also write the figures here.',
                                  flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): 2 runs of the config at --scale=0.05.
_TINY = dict(scale=0.05, runs=2)


def run_configs(config_path: str, scale: float, runs: int,
                output_dir: str) -> list[train_config.TrainConfig]:
  """`runs` JAX runs of the config's grid at `scale`, written under output_dir.

  The grid's noise multipliers in order (cycled if it has fewer than
  `runs`), as `experiments.reproduce` names them.

  Args:
    config_path: the flagfile.
    scale: as `grid.scale_config`'s.
    runs: the runs wanted.
    output_dir: where their run directories go.

  Returns:
    The runs' configs.
  """
  values = flags.FlagValues()
  train_flags.define_flags(values)
  values(['program_speed', f'--flagfile={config_path}'])
  base = grid.scale_config(dataclasses.replace(
      train_flags.config_from_flags(values), backend='jax',
      progress_bar=False), scale)
  noises = [float(z) for z in grid.parse_grid(config_path).get(
      'noise_multiplier', [base.noise_multiplier])]
  return [dataclasses.replace(
      base, noise_multiplier=noises[r % len(noises)],
      root_output_dir=output_dir, run_name=f'run{r}') for r in range(runs)]


def time_both(configs: Sequence[train_config.TrainConfig],
              output_dir: str) -> dict[str, float]:
  """Seconds of the runs in sequence, then as one program, and their ratio.

  Args:
    configs: the runs (`run_configs`); written under output_dir/sequence
      and output_dir/program.
    output_dir: a fresh directory.

  Returns:
    {'sequence_s', 'program_s', 'program_over_sequence'}.
  """

  def placed(where: str) -> list[train_config.TrainConfig]:
    return [dataclasses.replace(c, root_output_dir=os.path.join(
        output_dir, where)) for c in configs]

  start = time.perf_counter()
  for config in placed('sequence'):
    train.run_training(config)
  sequence = time.perf_counter() - start
  start = time.perf_counter()
  train.run_program(placed('program'))
  program = time.perf_counter() - start
  return {'sequence_s': sequence, 'program_s': program,
          'program_over_sequence': program / sequence}


def main(argv: Sequence[str]) -> None:
  """Times both on this machine's default JAX device and prints them.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).
  """
  del argv
  tiny.shrink(_FLAGS, _TINY)
  device = str(jax.devices()[0])  # Starts the backend before any timing.
  with tempfile.TemporaryDirectory() as output_dir:
    configs = run_configs(_FLAGS.config.value, _FLAGS.scale.value,
                          _FLAGS.runs.value, output_dir)
    figures = {
        'device': device,
        'config': _FLAGS.config.value,
        'scale': _FLAGS.scale.value,
        'runs': _FLAGS.runs.value,
        'local_training': round_engine.default_local_training(),
        **time_both(configs, output_dir)
    }
  print(f'{figures["runs"]} runs of {figures["config"]} at --scale='
        f'{figures["scale"]} on {device} ({figures["local_training"]}):')
  print(f'  in sequence   {figures["sequence_s"]:8.1f} s  (baseline)')
  print(f'  one program   {figures["program_s"]:8.1f} s')
  print(f'  program / sequence: {figures["program_over_sequence"]:.3f}')
  if _FLAGS.json.value:
    with open(_FLAGS.json.value, 'w', encoding='utf-8') as stream:
      json.dump(figures, stream, indent=2)


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
