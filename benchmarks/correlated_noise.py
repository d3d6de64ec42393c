"""Round time and noise memory of DP-FTRL's correlated noise (--mechanism).

Two launcher runs on the JAX engine with the same flags (synthetic EMNIST,
the 1,206,590-parameter CNN), --mechanism=gaussian and --mechanism=blt (and
banded), timed per round (metrics.csv's training_time_in_seconds, the first
round, which compiles, left out): the ratio of the medians to gaussian's,
target <= 1.1. Then the streaming noise state's bytes for n rounds and 10 n
rounds (`correlated_noise.NoiseStream`: a few d-sized buffers whatever n;
jax-privacy's BLT optimiser picks 1 to 10 buffers for each n, the banded
strategy keeps its b): memory bounded independently of the rounds. Prints
one JSON object.

Needs jax-privacy: run with .venv-jax/bin/python -m benchmarks.correlated_noise.
"""

import csv
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

from experiments import train
from experiments import train_config
from one_shot_epe.jax_engine import correlated_noise


def define_flags() -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Returns:
    The flags' holders by name.
  """
  return {
      'rounds': flags.DEFINE_integer('rounds', 12, 'Rounds of each timed run.'),
      'clients_per_round': flags.DEFINE_integer(
          'clients_per_round', 4, 'Clients per round.'),
      'repeats': flags.DEFINE_integer(
          'repeats', 2, 'Runs per mechanism, interleaved (gaussian, blt, '
          'banded, gaussian, ...) so that a busy spell of the machine hits '
          'all alike.'),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()


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
  with open(os.path.join(result.run_dir, 'metrics.csv'), newline='') as f:
    rows = list(csv.DictReader(f))
  return [float(row['training_time_in_seconds']) for row in rows[1:]]


def _state_bytes(mechanism: str, rounds: int, dim: int) -> int:
  """Bytes of the privatizer's state for `rounds` rounds of d = `dim`."""
  bounds = correlated_noise.participation_bounds('shuffle', rounds, 1)
  strategy = correlated_noise.build_strategy(mechanism, rounds, bounds,
                                             num_bands=4)
  state = correlated_noise.privatizer(strategy, 1.0, 1.0, 0).init(
      jnp.zeros((dim,), jnp.float32))
  return sum(x.nbytes for x in jax.tree_util.tree_leaves(state))


def main(argv: Sequence[str]) -> None:
  """Times the three mechanisms, measures the noise state, prints JSON.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).
  """
  del argv
  result = {
      'rounds': _FLAGS.rounds.value,
      'clients_per_round': _FLAGS.clients_per_round.value,
      'device': str(jax.devices()[0])
  }
  mechanisms = (('gaussian', {}), ('blt', dict(mechanism='blt')),
                ('banded', dict(mechanism='banded', num_bands=4)))
  seconds: dict[str, list[float]] = {name: [] for name, _ in mechanisms}
  with tempfile.TemporaryDirectory() as root:
    for repeat in range(_FLAGS.repeats.value):
      for name, overrides in mechanisms:
        seconds[name] += _round_seconds(
            os.path.join(root, f'{name}{repeat}'), **overrides)
  medians = {name: statistics.median(values)
             for name, values in seconds.items()}
  result['median_round_seconds'] = medians
  result['ratio_to_gaussian'] = {
      name: medians[name] / medians['gaussian'] for name in ('blt', 'banded')}
  dim = 1_206_590
  result['noise_state_bytes'] = {
      name: {str(n): _state_bytes(name, n, dim) for n in (50, 500)}
      for name in ('blt', 'banded')}
  # In d-sized float32 vectors: the BLT's buffers (the optimiser picks how
  # many, at most 10, for each n) or the b bands.
  result['noise_state_vectors'] = {
      name: {n: count / (4 * dim) for n, count in sizes.items()}
      for name, sizes in result['noise_state_bytes'].items()}
  print(json.dumps(result, indent=1))


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main)
