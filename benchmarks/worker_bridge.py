"""Cost of the isolated worker: FedAvg rounds through the bridge vs directly.

`runtime.local_cpp_context()` starts TFF's worker_binary alone in a
loopback-only network namespace and reaches it through a Unix-domain socket
forwarded to the worker's port by a bridge process
(`isolation.private_network_server`). This times the same DP-FedAvg rounds
with canaries (`audit.CanaryAudit.gaussian_fixed`, a 784-200-10 MLP of 159,010
parameters, synthetic clients) on two contexts:

* bridged: the default, ONE_SHOT_EPE_NETWORK_ISOLATION=auto;
* direct: ONE_SHOT_EPE_NETWORK_ISOLATION=off, the worker started in this
  process's namespace and reached on 127.0.0.1:port, as TFF's own context
  reaches it.

Each repetition starts a fresh context of each kind, alternating which goes
first so that a drift of the machine's speed hits both, and times its start
(until the worker accepts gRPC calls) and its rounds; the first round of
each context (tracing, the worker's caches) is excluded. Prints the median
start-up seconds and seconds per round of each, and the ratio bridged /
direct of the round times (goal <= 1.03).

  python -m benchmarks.worker_bridge [--repeats=3] [--rounds=4] [--clients=10]
"""

import sys

if __name__ == '__main__':
  # The isolation mode's checks (exit 2), then a quiet TensorFlow import.
  from benchmarks import tff_start
  tff_start.start(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import os
import statistics
import time
import types
from collections.abc import Sequence

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine import audit as audit_lib
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import runtime


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'repeats': flags.DEFINE_integer(
          'repeats', 3, 'Contexts of each kind.', lower_bound=1,
          flag_values=flag_values),
      'rounds': flags.DEFINE_integer(
          'rounds', 4, 'Rounds per context, the first (warm-up) excluded.',
          lower_bound=2, flag_values=flag_values),
      'clients': flags.DEFINE_integer(
          'clients', 10, 'Clients per round.', lower_bound=1,
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one context of each kind, 2 rounds of 10 clients.
_TINY = dict(repeats=1, rounds=2, clients=10)

_FEATURES, _HIDDEN, _CLASSES, _EXAMPLES = 784, 200, 10, 32
_KINDS = {'bridged': 'auto', 'direct': 'off'}


def _model_fn() -> tff.learning.models.VariableModel:
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(_FEATURES,)),
      tf.keras.layers.Dense(_HIDDEN, activation='relu'),
      tf.keras.layers.Dense(_CLASSES)])
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(tf.TensorSpec([None, _FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def _clients(round_num: int, count: int) -> list[tf.data.Dataset]:
  rng = np.random.default_rng(round_num)
  return [tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(_EXAMPLES, _FEATURES)).astype(np.float32),
       rng.integers(0, _CLASSES, _EXAMPLES).astype(np.int32))).batch(16)
          for _ in range(count)]


def _run(kind: str, rounds: int, clients: int) -> tuple[float, list[float]]:
  """Start-up seconds and per-round seconds of one fresh context of `kind`."""
  os.environ[isolation.ISOLATION_ENV] = _KINDS[kind]
  canary_audit = audit_lib.CanaryAudit(
      num_canaries=10, rounds=rounds, clients_per_round=clients, delta=1e-5,
      noise_seed=0)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=canary_audit.gaussian_fixed(noise_multiplier=0.5,
                                                   clip=1.0))
  start = time.perf_counter()
  with runtime.local_cpp_context():
    startup = time.perf_counter() - start
    state = process.initialize()
    canary_audit.observe(state)
    seconds = []
    for round_num in range(1, rounds + 1):
      data = _clients(round_num, clients)
      begin = time.perf_counter()
      state = process.next(state, data).state
      canary_audit.observe(state)
      seconds.append(time.perf_counter() - begin)
  return startup, seconds[1:]


def main(argv: Sequence[str]) -> None:
  """Times bridged and direct rounds, interleaved, and prints the ratio.

  Exits with an error message (status 1) where no private network
  namespace can be made: then there is nothing to compare.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).
  """
  del argv  # Unused.
  tiny.shrink(_FLAGS, _TINY)
  refusal = isolation.private_network_refusal()
  if refusal is not None:
    sys.exit(f'error: no network namespace here ({refusal}): nothing to '
             'compare.')
  startups = {kind: [] for kind in _KINDS}
  rounds = {kind: [] for kind in _KINDS}
  for repeat in range(_FLAGS.repeats.value):
    order = list(_KINDS) if repeat % 2 == 0 else list(_KINDS)[::-1]
    for kind in order:
      startup, seconds = _run(kind, _FLAGS.rounds.value, _FLAGS.clients.value)
      startups[kind].append(startup)
      rounds[kind] += seconds
  for kind in _KINDS:
    print(f'{kind:8s} start-up {statistics.median(startups[kind]):.3f} s, '
          f'round {statistics.median(rounds[kind]):.3f} s (median of '
          f'{len(rounds[kind])})')
  ratio = (statistics.median(rounds['bridged']) /
           statistics.median(rounds['direct']))
  print(f'ratio bridged / direct (round): {ratio:.3f} (goal <= 1.03)')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
