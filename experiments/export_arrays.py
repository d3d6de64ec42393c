"""Converts TFF's SQLite EMNIST / StackOverflow for the JAX engine (--backend=jax).

Run where TensorFlow Federated is installed (this project's .venv); copy the
output to the accelerator machine and pass it as --data_dir:

  python -m experiments.export_arrays --task=emnist_character \
      --data_dir=$HOME/tff_data --output_dir=$HOME/jax_data
  python -m experiments.train --backend=jax --flagfile=configs/emnist.cfg \
      --data_dir=$HOME/jax_data --noise_multiplier=0.0958

The format and conversion are `one_shot_epe.tff_engine.tasks.export_arrays`'s.
"""

import sys
import types

if __name__ == '__main__':
  # Before TensorFlow starts a thread: a quiet TensorFlow import.
  from one_shot_epe.runtime import command_line as _cli
  _cli.check_flagfiles_or_exit(sys.argv)  # Before absl opens them.
  from one_shot_epe.tff_engine import quiet
  quiet.quiet_startup(sys.argv, import_tensorflow=True)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from collections.abc import Sequence

from absl import app
from absl import flags

from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine.tasks import export_arrays

__all__ = ['main']


def define_flags() -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Returns:
    The flags' holders by name.
  """
  return {
      'task': flags.DEFINE_enum(
          'task', None, list(export_arrays.exportable_tasks()),
          'Dataset to convert.', required=True),
      'data_dir': flags.DEFINE_string(
          'data_dir', None, "Directory with TFF's SQLite files (as for "
          'experiments.train).', required=True),
      'output_dir': flags.DEFINE_string(
          'output_dir', None, 'Where <task>/train and <task>/test are written.',
          required=True),
      'vocab_size': flags.DEFINE_integer(
          'vocab_size', 10000, 'StackOverflow vocabulary size.', lower_bound=1),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()


def main(argv: Sequence[str]) -> None:
  """Converts the flags' task and prints the directories written.

  Args:
    argv: The program name alone (absl took the flags; more exits 2).
  """
  command_line.refuse_positional_arguments(argv)
  try:
    written = export_arrays.export(
        _FLAGS.task.value, _FLAGS.data_dir.value, _FLAGS.output_dir.value,
        _FLAGS.vocab_size.value)
  except (OSError, ValueError) as error:
    print(f'error: --data_dir: {error}', file=sys.stderr)
    sys.exit(2)
  for directory in written:
    print(f'Wrote {directory}')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
