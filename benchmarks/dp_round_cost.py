"""End-to-end cost of auditing: a DP-FedAvg round, stock TFF vs with canaries.

One EMNIST CNN round (TFF's 1,206,590-parameter `cnn_dropout`, batch 16, one
local epoch, client SGD 0.031, server SGD with momentum 0.9: the paper's
EMNIST setting, Sec. 5.2.1) on synthetic EMNIST-shaped clients, two ways,
interleaved round by round in one process and one TFF runtime:

* stock: TFF's own task pieces (`cnn_dropout`, TFF's EMNIST preprocessing)
  and `tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive`;
* audited: this project's pieces, as `experiments.train` runs them: the
  reproducible task (`tasks.determinism`: input-keyed dropout, batches in
  order), `audit.CanaryAudit.gaussian_adaptive` with k seen + m unseen
  canaries (k r / T inserted per round, the cohort arithmetic, seeded noise),
  and `CanaryAudit.observe` after every round. The tracker's block of B rounds
  (regenerate every canary once, one matrix product) runs every B rounds; it
  is timed once on its own and amortised over B.

Both see the same clients each round; the order of the two alternates so that
a drift of the machine's speed hits both. The first round of each (tracing,
warm-up) is excluded. Prints the median seconds per round of each, the
audited round's breakdown and the ratio audited / stock (goal <= 1.05 at
1000 + 1000 canaries).

  python -m benchmarks.dp_round_cost [--clients=40] [--rounds=6]
      [--num_canaries=1000] [--num_unseen_canaries=1000]
      [--noreproducible_task] [--notime_block]
"""

import sys

if __name__ == '__main__':
  # The isolation mode's checks (exit 2), then a quiet TensorFlow import.
  from benchmarks import tff_start
  tff_start.start(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import statistics
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

from absl import app
from absl import flags
import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.emnist import char_recognition_tasks

from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.tff_engine import audit as audit_lib
from one_shot_epe.tff_engine import cosine_tracking
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tasks
from one_shot_epe.tff_engine.tasks import synthetic


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'clients': flags.DEFINE_integer(
          'clients', 40, 'Real clients per round.', lower_bound=1,
          flag_values=flag_values),
      'rounds': flags.DEFINE_integer(
          'rounds', 6, 'Rounds of each kind, the first (warm-up) excluded.',
          lower_bound=2, flag_values=flag_values),
      'examples_per_client': flags.DEFINE_integer(
          'examples_per_client', 200, 'Examples per synthetic client (real '
          'EMNIST: ~200 per writer).', lower_bound=1, flag_values=flag_values),
      'num_canaries': flags.DEFINE_integer(
          'num_canaries', 1000, 'Seen canaries k.', lower_bound=1,
          flag_values=flag_values),
      'num_unseen_canaries': flags.DEFINE_integer(
          'num_unseen_canaries', 1000, 'Unseen canaries m.', lower_bound=0,
          flag_values=flag_values),
      'total_rounds': flags.DEFINE_integer(
          'total_rounds', 510, 'T of the audited run: k r / T canaries per '
          'round (EMNIST: 15 epochs x 34 rounds).', lower_bound=1,
          flag_values=flag_values),
      'noise_multiplier': flags.DEFINE_float(
          'noise_multiplier', 0.0958, 'Noise multiplier.', lower_bound=0.0,
          flag_values=flag_values),
      'reproducible_task': flags.DEFINE_bool(
          'reproducible_task', True, "Audited round on the project's "
          'reproducible task (as experiments.train); --noreproducible_task '
          "gives it TFF's stock task, to separate the cost of the canaries "
          'from that of reproducibility.', flag_values=flag_values),
      'time_block': flags.DEFINE_bool(
          'time_block', True, "Time the tracker's block of B rounds (tens of "
          'seconds at d = 1.2M on 2 cores) and amortise it.',
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): 2 rounds of 2 clients of 4 examples, 2 + 2
# canaries.
_TINY = dict(clients=2, rounds=2, examples_per_client=4, num_canaries=2,
             num_unseen_canaries=2, total_rounds=4)

_CLIENT_LR = 0.031
_SERVER_LR = 1.0
_SERVER_MOMENTUM = 0.9
_BATCH = 16
_GOAL = 1.05


def _fed_avg(model_fn: Callable[[], Any],
             aggregator: tff.aggregators.UnweightedAggregationFactory) -> Any:
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(_CLIENT_LR),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          _SERVER_LR, momentum=_SERVER_MOMENTUM),
      model_aggregator=aggregator)


def _stock_task(train_data, test_data) -> Any:
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=_BATCH)
  return char_recognition_tasks.create_character_recognition_task_from_datasets(
      spec, None, 'cnn_dropout', False, train_data, test_data)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
  start = time.perf_counter()
  result = fn()
  return time.perf_counter() - start, result


def _block_seconds(spec: Any, aggregator_state: Any, dim: int) -> tuple[
    float, int]:
  """Seconds of one tracker block of B rounds, and B."""
  tracker = cosine_tracking.CosineTracker(spec, dim)
  rounds = tracker.buffer_rounds
  for t in range(1, rounds):
    tracker.observe(aggregator_state._replace(round_num=np.int32(t)))
  seconds, _ = _timed(lambda: tracker.observe(
      aggregator_state._replace(round_num=np.int32(rounds))))
  return seconds, rounds


def main(argv: Sequence[str]) -> None:
  """Times the interleaved rounds and prints the ratio (module docstring).

  Args:
    argv: the program's name, then the arguments absl left after parsing
      the flags (none are accepted).

  Raises:
    app.UsageError: `argv` holds arguments besides the program's name
      (exit code 2).
  """
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  clients, rounds = _FLAGS.clients.value, _FLAGS.rounds.value
  train_data, test_data = synthetic.emnist(clients * rounds,
                                           _FLAGS.examples_per_client.value)
  stock_task = _stock_task(train_data, test_data)
  ours_task = tasks.get_task(
      'emnist_character',
      client_batch_size=_BATCH,
      client_epochs_per_round=1,
      max_examples_per_client=None,
      use_synthetic_data=True,
      synthetic_num_clients=clients * rounds,
      synthetic_examples_per_client=_FLAGS.examples_per_client.value)
  stock = _fed_avg(
      stock_task.model_fn,
      tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
          noise_multiplier=_FLAGS.noise_multiplier.value,
          clients_per_round=float(clients)))
  audit = audit_lib.CanaryAudit(
      num_canaries=_FLAGS.num_canaries.value,
      rounds=_FLAGS.total_rounds.value,
      clients_per_round=float(clients),
      delta=1e-6,
      num_unseen_canaries=_FLAGS.num_unseen_canaries.value,
      noise_seed=1)
  if not _FLAGS.reproducible_task.value:
    ours_task = tasks.Task.from_baseline('emnist_character', stock_task,
                                         'synthetic')
  ours = _fed_avg(
      ours_task.model_fn,
      audit.gaussian_adaptive(noise_multiplier=_FLAGS.noise_multiplier.value))
  ids = train_data.client_ids
  stock_clients = stock_task.datasets.train_data.preprocess(
      stock_task.datasets.train_preprocess_fn)
  stock_s, ours_s, observe_s = [], [], []
  with runtime.local_cpp_context():
    stock_state = stock.initialize()
    ours_state = ours.initialize()
    audit.observe(ours_state)
    for r in range(rounds):
      cohort = ids[r * clients:(r + 1) * clients]
      stock_data = [stock_clients.create_tf_dataset_for_client(i)
                    for i in cohort]
      ours_data = [
          ours_task.preprocessed_train_data.create_tf_dataset_for_client(i)
          for i in cohort]

      def stock_round():
        nonlocal stock_state
        seconds, output = _timed(lambda: stock.next(stock_state, stock_data))  # pylint: disable=cell-var-from-loop
        stock_state = output.state
        return seconds

      def ours_round():
        nonlocal ours_state
        seconds, output = _timed(lambda: ours.next(ours_state, ours_data))  # pylint: disable=cell-var-from-loop
        ours_state = output.state
        observed, _ = _timed(lambda: audit.observe(ours_state))
        return seconds, observed

      if r % 2:
        timed_ours = ours_round()
        timed_stock = stock_round()
      else:
        timed_stock = stock_round()
        timed_ours = ours_round()
      if r:  # Round 0 traces and warms up.
        stock_s.append(timed_stock)
        ours_s.append(timed_ours[0])
        observe_s.append(timed_ours[1])
      print(f'round {r}: stock {timed_stock:6.2f} s, audited '
            f'{timed_ours[0]:6.2f} s + observe {timed_ours[1]:.3f} s',
            flush=True)
    block_s, block_rounds = 0.0, 1
    if _FLAGS.time_block.value:
      block_s, block_rounds = _block_seconds(
          audit.spec, ours_state.aggregator,
          ours_task.num_parameters)
  stock_round_s = statistics.median(stock_s)
  ours_round_s = statistics.median(ours_s)
  observe_round_s = statistics.median(observe_s)
  amortised = ours_round_s + observe_round_s + block_s / block_rounds
  ratio = amortised / stock_round_s
  print(
      f'\nDP-FedAvg round, EMNIST CNN (d = {ours_task.num_parameters:,}), '
      f'{clients} clients, {_FLAGS.num_canaries.value} + '
      f'{_FLAGS.num_unseen_canaries.value} '
      f'canaries ({audit.spec.schedule[0].size} in round 0), '
      f'median of {rounds - 1} rounds:')
  print(f'  stock TFF:  {stock_round_s:7.2f} s per round')
  task = ('reproducible task'
          if _FLAGS.reproducible_task.value else "TFF's stock task")
  print(
      f'  audited ({task}): {amortised:7.2f} s per round = round '
      f'{ours_round_s:.2f} s + observe {observe_round_s:.3f} s + tracker '
      f'block {block_s:.1f} s / B = {block_rounds}' +
      ('' if _FLAGS.time_block.value else ' (block not timed: --notime_block)'))
  print(f'  ratio audited / stock: {ratio:.3f} (goal <= {_GOAL}: '
        f'{"met" if ratio <= _GOAL else "NOT met"})')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
