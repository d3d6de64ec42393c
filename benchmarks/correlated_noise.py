"""Round time and noise memory of DP-FTRL's correlated noise (--mechanism).

Launcher runs on the JAX engine with the same flags (synthetic EMNIST, the
1,206,590-parameter CNN), one per --mechanisms entry (gaussian, blt and
banded), timed per round (metrics.csv's training_time_in_seconds, the first
round, which compiles, left out): the ratio of the medians to gaussian's,
target <= 1.1. Then the streaming noise state's bytes for n rounds and 10 n
rounds (`correlated_noise.NoiseStream`: a few d-sized buffers whatever n;
jax-privacy's BLT optimiser picks 1 to 10 buffers for each n, the banded
strategy keeps its b): memory bounded independently of the rounds. Prints
one JSON object.

Needs jax-privacy: run with .venv-jax/bin/python -m benchmarks.correlated_noise.
"""

import json
import os
import statistics
import tempfile
import types
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from absl import app
from absl import flags

from benchmarks import round_timing
from benchmarks import tiny
from experiments import train
from experiments import train_config
from one_shot_epe.jax_engine import correlated_noise
from one_shot_epe.runtime import command_line


# What --mechanisms may name, in the order they run.
_MECHANISMS = ('gaussian', 'blt', 'banded')


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'rounds': flags.DEFINE_integer('rounds', 12, 'Rounds of each timed run.',
                                     flag_values=flag_values),
      'clients_per_round': flags.DEFINE_integer(
          'clients_per_round', 4, 'Clients per round.',
          flag_values=flag_values),
      'repeats': flags.DEFINE_integer(
          'repeats', 2, 'Runs per mechanism, interleaved (gaussian, blt, '
          'banded, gaussian, ...) so that a busy spell of the machine hits '
          'all alike.', flag_values=flag_values),
      'mechanisms': flags.DEFINE_multi_enum(
          'mechanisms', list(_MECHANISMS), list(_MECHANISMS),
          'A mechanism to time (repeat the flag for several; '
          'ratio_to_gaussian needs gaussian); the noise state is measured '
          'for those other than gaussian.',
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one run of 2 rounds of 10 clients (the 10
# canaries need them), banded only; its noise state at d = 1,000.
_TINY = dict(rounds=2, clients_per_round=10, repeats=1, mechanisms=['banded'])


def _round_seconds(root: str, **overrides) -> list[float]:
  """Per-round seconds of one launcher run (the first round left out)."""
  settings = dict(backend='jax',
                  task='emnist_character',
                  use_synthetic_data=True,
                  synthetic_num_clients=40,
                  synthetic_examples_per_client=16,
                  clients_per_round=_FLAGS.clients_per_round.value,
                  total_rounds=_FLAGS.rounds.value,
                  num_canaries=10,
                  num_unseen_canaries=10,
                  noise_multiplier=1.0,
                  clipping_norm=1.0,
                  rounds_per_checkpoint=_FLAGS.rounds.value,
                  progress_bar=False,
                  root_output_dir=root,
                  run_name='run')
  settings.update(overrides)
  result = train.run_training(train_config.TrainConfig(**settings))
  return round_timing.round_seconds(result.run_dir)[1:]


def _state_bytes(mechanism: str, rounds: int, dim: int) -> int:
  """Bytes of the privatizer's state for `rounds` rounds of d = `dim`."""
  bounds = correlated_noise.participation_bounds('shuffle', rounds, 1)
  strategy = correlated_noise.build_strategy(mechanism, rounds, bounds,
                                             num_bands=4)
  state = correlated_noise.privatizer(strategy, 1.0, 1.0, 0).init(
      jnp.zeros((dim,), jnp.float32))
  return sum(x.nbytes for x in jax.tree_util.tree_leaves(state))


def main(argv: Sequence[str]) -> None:
  """Times the mechanisms, measures their noise state, prints JSON.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).
  """
  del argv
  shrunk = tiny.shrink(_FLAGS, _TINY)
  result = {
      'rounds': _FLAGS.rounds.value,
      'clients_per_round': _FLAGS.clients_per_round.value,
      'device': str(jax.devices()[0])
  }
  flags_of = {'gaussian': {}, 'blt': dict(mechanism='blt'),
              'banded': dict(mechanism='banded',
                             num_bands=min(4, _FLAGS.rounds.value))}
  mechanisms = [(name, flags_of[name]) for name in _MECHANISMS
                if name in _FLAGS.mechanisms.value]
  seconds: dict[str, list[float]] = {name: [] for name, _ in mechanisms}
  with tempfile.TemporaryDirectory() as root:
    for repeat in range(_FLAGS.repeats.value):
      for name, overrides in mechanisms:
        seconds[name] += _round_seconds(
            os.path.join(root, f'{name}{repeat}'), **overrides)
  medians = {name: statistics.median(values)
             for name, values in seconds.items()}
  result['median_round_seconds'] = medians
  correlated = [name for name in medians if name != 'gaussian']
  if 'gaussian' in medians:
    result['ratio_to_gaussian'] = {
        name: medians[name] / medians['gaussian'] for name in correlated}
  dim, horizons = (1_000, (8,)) if shrunk else (1_206_590, (50, 500))
  result['noise_state_bytes'] = {
      name: {str(n): _state_bytes(name, n, dim) for n in horizons}
      for name in correlated}
  # In d-sized float32 vectors: the BLT's buffers (the optimiser picks how
  # many, at most 10, for each n) or the b bands.
  result['noise_state_vectors'] = {
      name: {n: count / (4 * dim) for n, count in sizes.items()}
      for name, sizes in result['noise_state_bytes'].items()}
  print(json.dumps(result, indent=1))


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
