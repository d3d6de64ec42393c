"""What the canaries cost a Flower round: audited over plain DP-FedAvg.

Both arms run the same rounds of the Flower example's task
(`examples.flower_fashion_mnist`, the task of the Flower App in
examples/flowerapp: softmax regression, d = 7850, 20 of 200
clients per round, one local epoch) under the same
`DifferentialPrivacyServerSideFixedClipping` around FedAvg; one arm is
wrapped by `flower_engine.audit.CanaryAudit` (500 seen and 500 unseen
canaries, every round's cosines, checkpoints every 25 rounds, the default). The arms
alternate, after an untimed plain run (the clients load their data); a round
is the time between two rounds' sends (`_Timed`: the
strategy's configure, the clients, its aggregation and whatever it does
after, the audit's cosines and checkpoints included), and the mean round
time of each arm is compared.

Two runtimes: Flower's simulation runtime (`run_simulation`, Ray: the
clients in Ray's actors, a simulated round as Flower users run it; wall
time), or the clients called in this process (`flower_engine.local_grid`,
no messaging cost: the least favourable case for the ratio; this process's
CPU time, steadier than wall time on a shared machine, and wall time).

  python -m benchmarks.flower_round [--runtime=local] [--tiny]

--tiny (benchmarks/tiny.py): 2 rounds of 2 of 4 synthetic clients, 2 + 2
canaries, one repeat, the local runtime (unless --runtime is given).
"""

import argparse
import dataclasses
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from benchmarks import tiny
from examples import flower_fashion_mnist as example
from examples.flowerapp.fashion_audit import task as fashion
from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid

# The flags' defaults, and theirs under --tiny (with a toy task).
_DEFAULTS = dict(rounds=20, repeats=3, num_canaries=500, runtime='simulation')
_TINY = dict(rounds=2, repeats=1, num_canaries=2, runtime='local')
_TINY_SETTING = dict(num_clients=4, clients_per_round=2,
                     use_synthetic_data=True)


class _Timed:
  """A grid (any Flower Grid, delegated to) noting when rounds are sent."""

  def __init__(self, grid):
    self._grid = grid
    # (wall seconds, this process's CPU seconds) at each send.
    self.sends: list[tuple[float, float]] = []

  def __getattr__(self, name: str):
    return getattr(self._grid, name)

  def send_and_receive(self, messages, *, timeout=None):
    self.sends.append((time.perf_counter(), time.process_time()))
    return self._grid.send_and_receive(messages, timeout=timeout)


def _arms(setting: fashion.Setting, repeats: int
          ) -> Callable[[object], dict[str, list[tuple[float, float]]]]:
  """Runs both arms `repeats` times on a grid; their rounds' times."""
  times = {'plain': [], 'audited': []}

  def run(grid) -> dict[str, list[tuple[float, float]]]:
    # A first plain run, not timed: the clients load their data.
    fashion.dp_strategy(setting, 1.0).start(grid, fashion.initial_arrays(),
                                            num_rounds=setting.rounds)
    for _ in range(repeats):
      for arm, rounds in times.items():
        timed = _Timed(grid)
        strategy = fashion.dp_strategy(setting, 1.0)
        run_dir = tempfile.mkdtemp()
        if arm == 'audited':
          strategy = audit_lib.CanaryAudit(
              run_dir=f'{run_dir}/run', num_canaries=setting.num_canaries,
              rounds=setting.rounds, delta=1e-5, seed=0).wrap(strategy)
        strategy.start(timed, fashion.initial_arrays(),
                       num_rounds=setting.rounds)
        shutil.rmtree(run_dir)
        rounds.extend((b[0] - a[0], b[1] - a[1])
                      for a, b in zip(timed.sends, timed.sends[1:]))
    return times

  return run


def main(argv: Sequence[str]) -> None:
  """Times both arms and prints their mean rounds and the ratio.

  Args:
    argv: `sys.argv`: the program's name, then its flags.
  """
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rounds', type=int)
  parser.add_argument('--repeats', type=int)
  parser.add_argument('--num_canaries', type=int)
  parser.add_argument('--runtime', choices=('simulation', 'local'))
  parser.add_argument('--tiny', action='store_true', help=tiny.HELP)
  args = parser.parse_args(argv[1:])
  defaults = _TINY if args.tiny else _DEFAULTS
  for name, value in defaults.items():
    if getattr(args, name) is None:
      setattr(args, name, value)
  logging.getLogger('flwr').setLevel(logging.WARNING)
  setting = fashion.Setting(rounds=args.rounds,
                            num_canaries=args.num_canaries)
  if args.tiny:
    setting = dataclasses.replace(setting, **_TINY_SETTING)
  run = _arms(setting, args.repeats)
  if args.runtime == 'local':
    task = fashion.load_task(setting)
    times = run(local_grid.LocalGrid(
        setting.num_clients, lambda node, message: fashion.train_reply(
            task, setting, node - 1,
            message.content['config']['server-round'], message)))
    measures = ((1, 'CPU time of this process'), (0, 'wall time'))
  else:
    results = {}
    example.simulate(setting, lambda grid: results.update(run(grid)))
    times = results
    measures = ((0, 'wall time'),)
  print(f'{args.runtime} runtime: {args.rounds} rounds x {args.repeats} '
        f'repeats each arm, d = 7850, {setting.clients_per_round} clients per '
        f'round, {setting.num_canaries} + {setting.num_canaries} canaries')
  for index, what in measures:
    plain = statistics.fmean(r[index] for r in times['plain'])
    audited = statistics.fmean(r[index] for r in times['audited'])
    print(f'mean round, {what}: plain DP-FedAvg {plain * 1e3:.1f} ms, '
          f'audited {audited * 1e3:.1f} ms; ratio {audited / plain:.3f} '
          '(target <= 1.05)')


if __name__ == '__main__':
  main(sys.argv)
