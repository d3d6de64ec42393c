"""A distributed-DP aggregation round: TFF's own vs with canaries.

Two aggregation processes over the same clients' float32 [d] updates, in one
process and TFF's test runtime (which simulates the secure sums that TFF's
factory needs), interleaved round by round, the order alternating:

* stock: TFF's `DistributedDpSumFactory(mechanism='distributed_dgauss',
  rotation_type='hd')` at noise multiplier z, clip S, b bits, without
  canaries;
* audited: `distributed_dp_aggregator.CanaryDistributedDPFactory` with the same
  parameters and `--canaries_per_round` canaries encoded as clients
  (rotation, scaling, rounding, local noise, modulus) and added to the
  modular sum, the expected cohort counting them.

The first round of each (tracing, warm-up) is excluded. Prints one JSON line:
the median seconds per aggregation round of each and the ratio audited /
stock (goal <= 1.1). The model's training is not timed: it is the same for
both and would only dilute the ratio.

  python -m benchmarks.distributed_dp_round [--dim=100000] [--clients=10]
      [--canaries_per_round=2] [--rounds=5] [--bits=16]
"""

import sys

if __name__ == '__main__':
  # The isolation mode's checks (exit 2), then a quiet TensorFlow import.
  from benchmarks import tff_start
  tff_start.start(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import json
import statistics
import time
import types
from collections.abc import Sequence

from absl import app
from absl import flags
import numpy as np
import tensorflow_federated as tff
# TFF 0.87 does not export the factory at tff.aggregators.
from tensorflow_federated.python.aggregators import distributed_dp as tff_ddp

from benchmarks import tiny
from one_shot_epe.design import canary_spec
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine import distributed_dp_aggregator


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'dim': flags.DEFINE_integer(
          'dim', 100000, 'Update dimension d.', lower_bound=1,
          flag_values=flag_values),
      'clients': flags.DEFINE_integer(
          'clients', 10, 'Real clients per round.', lower_bound=1,
          flag_values=flag_values),
      'canaries_per_round': flags.DEFINE_integer(
          'canaries_per_round', 2, 'Canaries inserted per round.',
          lower_bound=0, flag_values=flag_values),
      'rounds': flags.DEFINE_integer(
          'rounds', 5, 'Rounds of each kind, the first (warm-up) excluded.',
          lower_bound=2, flag_values=flag_values),
      'bits': flags.DEFINE_integer(
          'bits', 16, 'Bits b of the modulus 2^b.', lower_bound=1,
          upper_bound=distributed_dp.DDP_MAX_BITS, flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): d = 100, 2 clients, 1 canary, 2 rounds.
_TINY = dict(dim=100, clients=2, canaries_per_round=1, rounds=2)
_NOISE = 1.0
_CLIP = 1.0


def _timed_round(process, state, values) -> tuple[float, object]:
  """Seconds of one `next` of `process`, and its new state."""
  start = time.perf_counter()
  state = process.next(state, values).state
  return time.perf_counter() - start, state


def main(argv: Sequence[str]) -> None:
  """Times both processes round by round; prints the JSON line.

  Args:
    argv: the command line as absl passes it after parsing the flags
      (unused: the flags say everything).
  """
  del argv
  tiny.shrink(_FLAGS, _TINY)
  dim, clients = _FLAGS.dim.value, _FLAGS.clients.value
  per_round = _FLAGS.canaries_per_round.value
  rounds = _FLAGS.rounds.value
  value_type = tff.TensorType(np.float32, [dim])
  stock = tff_ddp.DistributedDpSumFactory(noise_multiplier=_NOISE,
                                          expected_clients_per_round=clients,
                                          bits=_FLAGS.bits.value,
                                          l2_clip=_CLIP,
                                          mechanism='distributed_dgauss',
                                          rotation_type='hd').create(value_type)
  ids = list(range(per_round))
  spec = canary_spec.CanarySpec(
      seed=0, num_seen=max(per_round, 1), num_unseen=0,
      schedule=[ids] * rounds, canary_clip='project', repetitions=rounds)
  dp = canary_spec.DPAggregation(noise_multiplier=_NOISE,
                                 clients_per_round=float(clients + per_round),
                                 clip=_CLIP)
  audited = distributed_dp_aggregator.CanaryDistributedDPFactory(
      dp,
      distributed_dp.DistributedDP(bits=_FLAGS.bits.value),
      spec,
      rotation_seed=0).create(value_type)
  rng = np.random.default_rng(0)
  times = {'stock': [], 'audited': []}
  with tff.framework.get_context_stack().install(
      tff.backends.test.create_sync_test_cpp_execution_context()):
    states = {'stock': stock.initialize(), 'audited': audited.initialize()}
    processes = {'stock': stock, 'audited': audited}
    for t in range(rounds):
      values = [rng.normal(size=dim).astype(np.float32) * 0.01
                for _ in range(clients)]
      order = ('stock', 'audited') if t % 2 == 0 else ('audited', 'stock')
      for name in order:
        seconds, states[name] = _timed_round(processes[name], states[name],
                                             values)
        if t > 0:
          times[name].append(seconds)
  stock_s = statistics.median(times['stock'])
  audited_s = statistics.median(times['audited'])
  print(
      json.dumps({
          'benchmark': 'distributed_dp_round',
          'dim': dim,
          'clients': clients,
          'canaries_per_round': per_round,
          'bits': _FLAGS.bits.value,
          'rounds_timed': rounds - 1,
          'stock_s': stock_s,
          'audited_s': audited_s,
          'ratio': audited_s / stock_s,
          'goal_ratio': 1.1
      }))


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
