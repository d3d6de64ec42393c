"""Seconds per DP-FedAvg round with canaries: the JAX engine vs the TFF path.

The paper's settings (Andrew et al., ICLR 2024, Sec. 5.1-5.2): EMNIST, the
1,206,590-parameter CNN, 101 clients per round; StackOverflow, the
4,050,748-parameter LSTM, 167 clients per round; batch 16, one local epoch,
adaptive clipping, 1,000 seen + 1,000 unseen canaries. On synthetic clients
with the real data's structure and about its mean size (EMNIST: 671,585
examples over 3,400 writers, ~200 each; StackOverflow: --so_examples).

* jax: `jax_engine.fedavg.RoundEngine` (clients vmapped, sharded over
  `jax.devices()`), plus this round's exact Algorithm 3 update: every canary
  regenerated on the device and its running maximum cosine updated
  (`jax_engine.canaries.update_maxima`). A round's time includes building its
  padded batches on the host. Compilation (the first round) is excluded.
* tff (where TensorFlow Federated imports): `experiments.train` on the same
  settings with synthetic data, in a subprocess; its per-round
  `training_time_in_seconds` (metrics.csv), first round excluded. It does not
  include the lazy cosine blocks (amortised, see benchmarks/canary_tracking.py).

Prints seconds per round (median, min-max) and rounds per second for each,
and the ratio tff / jax where both ran. Goals on one H100: EMNIST <= 0.1 s,
StackOverflow <= 0.5 s per round. JAX on a CPU is far slower than TF for these
convolutions; use --clients and --*_examples to keep a CPU run short.

  python -m benchmarks.accelerator_round [--tasks=emnist,stackoverflow]
      [--rounds=5] [--clients=N] [--tff=auto|yes|no]
"""

import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from one_shot_epe import canary_spec
from one_shot_epe import client_arrays
from one_shot_epe.jax_engine import canaries
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# Per task: clients per round, client and server learning rates, config file
# (the paper's Tables 3 and 4).
_SETTINGS = {
    'emnist': dict(clients=101, client_lr=0.031, server_lr=1.0,
                   config='configs/emnist.cfg'),
    'stackoverflow': dict(clients=167, client_lr=1.0, server_lr=0.56,
                          config='configs/stackoverflow.cfg'),
}

_TASKS = flags.DEFINE_list('tasks', ['emnist', 'stackoverflow'],
                           'Tasks to time: emnist, stackoverflow.')
_ROUNDS = flags.DEFINE_integer('rounds', 5, 'Measured rounds per engine.',
                               lower_bound=1)
_CLIENTS = flags.DEFINE_integer(
    'clients', None, 'Clients per round (default: the paper\'s, 101 / 167).',
    lower_bound=1)
_EMNIST_EXAMPLES = flags.DEFINE_integer(
    'emnist_examples', 200, 'Examples per synthetic EMNIST client.',
    lower_bound=1)
_SO_EXAMPLES = flags.DEFINE_integer(
    'so_examples', 256, 'Sentences per synthetic StackOverflow client.',
    lower_bound=1)
_NUM_CANARIES = flags.DEFINE_integer('num_canaries', 1000, 'Seen canaries.',
                                     lower_bound=0)
_NUM_UNSEEN = flags.DEFINE_integer('num_unseen_canaries', 1000,
                                   'Unseen canaries.', lower_bound=0)
_TOTAL_ROUNDS = flags.DEFINE_integer(
    'total_rounds', 510, 'Rounds of the whole run the canaries are spread '
    'over (k / total_rounds inserted per round; EMNIST: 15 epochs x 34).',
    lower_bound=1)
_NOISE = flags.DEFINE_float('noise_multiplier', 0.1, 'Noise multiplier z.',
                            lower_bound=0.0)
_TFF = flags.DEFINE_enum('tff', 'auto', ['auto', 'yes', 'no'],
                         'Time the TFF path too (auto: if it imports).')


def _model_and_data(task: str, clients: int):
  if task == 'emnist':
    return models.EmnistCnn(), client_arrays.synthetic_emnist(clients,
                                                     _EMNIST_EXAMPLES.value)
  return models.WordLstm(), client_arrays.synthetic_stackoverflow(clients,
                                                         _SO_EXAMPLES.value)


def time_jax(task: str, clients: int, rounds: int) -> list[float]:
  """Seconds of each measured JAX round (one extra round compiles first)."""
  settings = _SETTINGS[task]
  model, arrays = _model_and_data(task, clients)
  k, m = _NUM_CANARIES.value, _NUM_UNSEEN.value
  per_round = k / _TOTAL_ROUNDS.value
  config = canary_spec.DPAggregation(noise_multiplier=_NOISE.value,
                                     clients_per_round=clients + per_round)
  engine = fedavg.RoundEngine(
      model.loss, optimizers.Optimizer('sgd', settings['client_lr']),
      optimizers.Optimizer('sgdm', settings['server_lr'], momentum=0.9),
      config)
  state = engine.init_state(model.init(jax.random.PRNGKey(0)))
  dim = model.num_parameters()
  tracked = canary_spec.tracked_ids(k, m)
  maxima = jnp.full(tracked.size, -jnp.inf)
  # A fixed number of inserted slots keeps one compiled round.
  slots = max(1, int(np.ceil(per_round)) + 1)
  rng = np.random.default_rng(0)
  times = []
  for round_num in range(rounds + 1):
    start = time.perf_counter()
    batches = data.client_batches(
        arrays, range(clients), batch_size=16, epochs=1, max_examples=None,
        rng=rng, num_slots=engine.num_slots(clients))
    inserted = rng.poisson(per_round) if k else 0
    ids = rng.choice(max(k, 1), size=slots)
    mask = (np.arange(slots) < min(inserted, slots)).astype(np.float32)
    state, output = engine(state, batches, canaries.directions(0, ids, dim),
                           mask, jax.random.PRNGKey(round_num))
    if tracked.size:
      maxima = canaries.update_maxima(maxima, 0, tracked, output.aggregate)
    jax.block_until_ready((state, maxima))
    times.append(time.perf_counter() - start)
  return times[1:]


def time_tff(task: str, clients: int, rounds: int) -> list[float]:
  """Seconds of each measured round of `experiments.train` (subprocess)."""
  settings = _SETTINGS[task]
  examples = _EMNIST_EXAMPLES.value if task == 'emnist' else _SO_EXAMPLES.value
  with tempfile.TemporaryDirectory() as root:
    with open(os.path.join(REPO, settings['config'])) as stream:
      paper_flags = [line.strip() for line in stream
                     if line.startswith('--') and not line.startswith(
                         ('--train_epochs', '--total_rounds'))]
    command = [
        sys.executable, '-m', 'experiments.train', *paper_flags,
        '--use_synthetic_data', f'--synthetic_num_clients={clients}',
        f'--synthetic_examples_per_client={examples}',
        f'--clients_per_round={clients}', f'--total_rounds={rounds + 1}',
        f'--noise_multiplier={_NOISE.value}',
        f'--num_canaries={_NUM_CANARIES.value}',
        f'--num_unseen_canaries={_NUM_UNSEEN.value}',
        f'--rounds_per_evaluation={rounds + 1}', '--max_eval_examples=16',
        f'--rounds_per_checkpoint={rounds + 1}', f'--root_output_dir={root}',
        '--run_name=bench']
    completed = subprocess.run(command, cwd=REPO, capture_output=True,
                               text=True, check=False)
    if completed.returncode:
      raise RuntimeError('experiments.train failed:\n' +
                         completed.stderr[-2000:])
    with open(os.path.join(root, 'bench', 'metrics.csv')) as stream:
      seconds = [float(row['training_time_in_seconds'])
                 for row in csv.DictReader(stream)
                 if row.get('training_time_in_seconds')]
  return seconds[1:]


def _tff_available() -> bool:
  if _TFF.value != 'auto':
    return _TFF.value == 'yes'
  completed = subprocess.run(
      [sys.executable, '-c', 'import tensorflow_federated'],
      capture_output=True, check=False)
  return completed.returncode == 0


def _summary(name: str, times: Sequence[float]) -> str:
  median = statistics.median(times)
  return (f'  {name}: {median:.3f} s/round (min {min(times):.3f}, max '
          f'{max(times):.3f}; {1 / median:.2f} rounds/s; {len(times)} rounds)')


def main(argv: Sequence[str]) -> None:
  """Times each task's round on both engines and prints the figures."""
  del argv
  for task in _TASKS.value:
    if task not in _SETTINGS:
      raise app.UsageError(f'--tasks: each must be one of {list(_SETTINGS)}; '
                           f'got {task!r}.')
  with_tff = _tff_available()
  print(f'JAX {jax.__version__} on {len(jax.devices())} x '
        f'{jax.devices()[0].device_kind}; canaries '
        f'{_NUM_CANARIES.value} + {_NUM_UNSEEN.value}; z = {_NOISE.value}')
  for task in _TASKS.value:
    clients = _CLIENTS.value or _SETTINGS[task]['clients']
    print(f'{task}, {clients} clients per round:')
    jax_times = time_jax(task, clients, _ROUNDS.value)
    print(_summary('jax', jax_times))
    if with_tff:
      tff_times = time_tff(task, clients, _ROUNDS.value)
      print(_summary('tff', tff_times))
      print(f'  ratio tff / jax: '
            f'{statistics.median(tff_times) / statistics.median(jax_times):.2f}')


if __name__ == '__main__':
  app.run(main)
