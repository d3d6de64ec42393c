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

The mode `engines` measures something else: the Flower App
(examples/flowerapp) under `flwr run`, its audited round on the deployment
engine (a SuperLink and two SuperNodes on 127.0.0.1, as docs/flower.md's
deployment on one machine, a private FLWR_HOME, every process stopped at
the end) against the same run config on
the simulation engine (a local SuperLink in simulation mode, as many
simulated nodes): the mean of metrics.csv's round times, the first round of
each left out (Ray's actors, the data cache), and their ratio. The run
config is the app's default but for the federation: num-clients =
clients-per-round = the SuperNodes (a SuperNode is one client), as many
canaries as rounds.

  python -m benchmarks.flower_round [--runtime=local] [--tiny]
  python -m benchmarks.flower_round engines [--rounds=20]

--tiny (benchmarks/tiny.py): 2 rounds of 2 of 4 synthetic clients, 2 + 2
canaries, one repeat, the local runtime (unless --runtime is given).
"""

import argparse
import csv
import dataclasses
import glob
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import psutil

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


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Flower's programs, installed beside this interpreter.
_BIN = os.path.dirname(sys.executable)


def _free_port() -> int:
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


def _serving(port: int) -> bool:
  with socket.socket() as probe:
    return probe.connect_ex(('127.0.0.1', port)) == 0


def _stop(processes: Sequence[psutil.Process]) -> None:
  """Stops the processes and their descendants (10 s, then SIGKILL)."""
  everything = []
  for process in processes:
    try:
      everything += [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
      continue
  for process in everything:
    try:
      process.terminate()
    except psutil.NoSuchProcess:
      continue
  _, alive = psutil.wait_procs(everything, timeout=10)
  for process in alive:
    try:
      process.kill()
    except psutil.NoSuchProcess:
      continue
  psutil.wait_procs(alive, timeout=5)


def _round_seconds(output_dir: str) -> list[float]:
  """The audited run's round times (metrics.csv), its first round left out."""
  path, = glob.glob(os.path.join(output_dir, '*', 'metrics.csv'))
  with open(path, encoding='utf-8') as stream:
    return [float(row['training_time_in_seconds'])
            for row in csv.DictReader(stream)][1:]


def _engines(rounds: int, supernodes: int) -> dict[str, list[float]]:
  """The app's round times on the simulation and the deployment engine."""
  work = tempfile.mkdtemp(prefix='flower_engines_')
  home = os.path.join(work, 'flwr_home')
  os.makedirs(home)
  port, local_port = _free_port(), _free_port()
  env = dict(os.environ, FLWR_HOME=home, FLWR_TELEMETRY_ENABLED='0',
             FLWR_DISABLE_UPDATE_CHECK='1',
             FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION='1',
             FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(local_port),
             FLWR_LOCAL_CONTROL_API_PORT=str(_free_port()),
             XDG_CACHE_HOME=os.path.join(work, 'cache'),
             PATH=_BIN + os.pathsep + os.environ.get('PATH', ''))
  with open(os.path.join(home, 'config.toml'), 'w', encoding='utf-8') as out:
    out.write('[superlink]\ndefault = "local"\n\n[superlink.local]\n'
              'address = ":local:"\n\n[superlink.deployment]\n'
              f'address = "127.0.0.1:{port}"\ninsecure = true\n')
  started = []

  def start(*command: str) -> None:
    with open(os.path.join(work, f'{len(started)}.log'), 'w',
              encoding='utf-8') as log:
      started.append(psutil.Process(subprocess.Popen(
          [os.path.join(_BIN, command[0]), *command[1:]], cwd=work, env=env,
          stdout=log, stderr=subprocess.STDOUT,
          start_new_session=True).pid))

  def wait_for(served: int) -> None:
    deadline = time.monotonic() + 120
    while not _serving(served):
      if time.monotonic() > deadline:
        raise RuntimeError(f'nothing serves 127.0.0.1:{served}; see {work}.')
      time.sleep(0.2)

  config = (f'num-clients={supernodes} clients-per-round={supernodes} '
            f'num-server-rounds={rounds} num-canaries={rounds} seed=0 '
            f'rounds-per-checkpoint={rounds}')
  times = {}
  try:
    start('flower-superlink', '--insecure', '--host', '127.0.0.1', '--port',
          str(port), '--disable-runtime-dependency-installation')
    wait_for(port)
    # The local SuperLink as `flwr run ... local` starts it (flwr 1.42
    # allows it 15 s, which a loaded machine exceeds); `flwr run` uses it.
    start('flower-superlink', '--insecure', '--simulation', '--isolation',
          'subprocess', '--host', '127.0.0.1', '--port', str(local_port))
    wait_for(local_port)
    for partition in range(supernodes):
      node_port = _free_port()
      start('flower-supernode', '--insecure', '--superlink',
            f'127.0.0.1:{port}', '--host', '127.0.0.1', '--port',
            str(node_port), '--node-config',
            f'partition-id={partition} num-partitions={supernodes}')
      wait_for(node_port)
    for engine, connection, federation in (
        ('simulation', 'local', ['--federation-config',
                                 f'num-supernodes={supernodes}']),
        ('deployment', 'deployment', [])):
      output_dir = os.path.join(work, engine)
      done = subprocess.run(
          [os.path.join(_BIN, 'flwr'), 'run',
           os.path.join(_REPO, 'examples', 'flowerapp'), connection,
           '--stream', *federation, '--run-config',
           f"{config} output-dir='{output_dir}'"], cwd=work, env=env,
          capture_output=True, text=True, timeout=3600, check=False)
      if done.returncode:
        raise RuntimeError(f'flwr run on the {engine} engine failed:\n'
                           f'{done.stdout}{done.stderr}')
      times[engine] = _round_seconds(output_dir)
  finally:
    _stop(started)
    shutil.rmtree(work, ignore_errors=True)
  return times


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
  parser.add_argument('mode', nargs='?', default='arms',
                      choices=('arms', 'engines'),
                      help="arms: audited over plain rounds; engines: the "
                      "Flower App's round on the deployment engine over the "
                      'simulation engine.')
  parser.add_argument('--tiny', action='store_true', help=tiny.HELP)
  args = parser.parse_args(argv[1:])
  defaults = _TINY if args.tiny else _DEFAULTS
  for name, value in defaults.items():
    if getattr(args, name) is None:
      setattr(args, name, value)
  if args.mode == 'engines':
    supernodes = 2
    times = _engines(args.rounds, supernodes)
    simulated, deployed = (statistics.fmean(times[engine])
                           for engine in ('simulation', 'deployment'))
    print(f'the Flower App under flwr run: {args.rounds} rounds of '
          f'{supernodes} clients, audited (the first round of each left '
          'out)')
    print(f'mean round, wall time: simulation {simulated:.2f} s, deployment '
          f'{deployed:.2f} s; ratio {deployed / simulated:.2f} (target <= 2)')
    return
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
