"""What the canaries cost a Flower round: audited over plain DP-FedAvg.

Both arms run the same rounds of the Flower example's task
(`examples.flower_fashion_mnist`: softmax regression, d = 7850, 20 of 200
clients per round, one local epoch) in this process (`flower_engine.
local_grid`), under the same `DifferentialPrivacyServerSideFixedClipping`
around FedAvg; one arm is wrapped by `flower_engine.audit.CanaryAudit` (500
seen and 500 unseen canaries, cosines of every round, checkpoints every 10
rounds). The arms alternate; a round is the time between two rounds' sends
(`_TimedGrid`), and the mean round time of each arm is compared (the checkpoint rounds,
which score the buffered rounds' cosines, included):
the printed ratio is the audit's per-round overhead (target <= 1.05).

  python -m benchmarks.flower_round
"""

import argparse
import logging
import shutil
import statistics
import tempfile
import time

from examples import flower_fashion_mnist as example
from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid


class _TimedGrid(local_grid.LocalGrid):
  """A LocalGrid noting when each round's messages are sent.

  The time between two sends is one whole round: the strategy's configure,
  the clients, its aggregation and whatever it does after (the audit's
  cosines and checkpoints), the same measure for both arms.
  """

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.sends: list[float] = []

  def send_and_receive(self, messages, *, timeout=None):
    self.sends.append(time.perf_counter())
    return super().send_and_receive(messages, timeout=timeout)


def main() -> None:
  """Times both arms and prints their medians and the ratio."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--num_canaries', type=int, default=500)
  args = parser.parse_args()
  logging.getLogger('flwr').setLevel(logging.WARNING)
  setting = example.Setting(rounds=args.rounds,
                            num_canaries=args.num_canaries)
  task = example.load_task(setting)
  times = {'plain': [], 'audited': []}
  for _ in range(args.repeats):
    for arm, rounds in times.items():
      grid = _TimedGrid(
          setting.num_clients, lambda node, message: example.train_reply(
              task, setting, node - 1,
              message.content['config']['server-round'], message))
      strategy = example.dp_strategy(setting, 1.0)
      run_dir = tempfile.mkdtemp()
      if arm == 'audited':
        strategy = audit_lib.CanaryAudit(
            run_dir=f'{run_dir}/run', num_canaries=setting.num_canaries,
            rounds=args.rounds, delta=1e-5, seed=0).wrap(strategy)
      strategy.start(grid, example.initial_arrays(), num_rounds=args.rounds)
      shutil.rmtree(run_dir)
      rounds.extend(b - a for a, b in zip(grid.sends, grid.sends[1:]))
  plain = statistics.fmean(times['plain'])
  audited = statistics.fmean(times['audited'])
  print(f'{args.rounds} rounds x {args.repeats} repeats each, d = 7850, '
        f'{setting.clients_per_round} clients per round, '
        f'{setting.num_canaries} + {setting.num_canaries} canaries')
  print(f'mean round: plain DP-FedAvg {plain * 1e3:.1f} ms, audited '
        f'{audited * 1e3:.1f} ms; ratio {audited / plain:.3f} (target <= '
        '1.05)')


if __name__ == '__main__':
  main()
