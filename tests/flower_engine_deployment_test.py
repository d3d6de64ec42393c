"""The Flower App under `flwr run` on Flower's deployment engine, on loopback.

Starts a `flower-superlink` and two `flower-supernode` processes in insecure
mode, every address they bind given and on 127.0.0.1 (the SuperLink's one
HTTP port serves its Fleet, Control and Runtime APIs in flwr 1.42; each
SuperNode's port serves its ClientApps), with a Flower configuration of its
own (FLWR_HOME) naming the SuperLink, and runs the app of examples/flowerapp
with `flwr run` on two clients of synthetic Fashion-MNIST. Checked against
independent truths: the run directory's report.json (estimates, bounds,
accounted ε present and finite; the accounted ε equal to dp_accounting's
PLD ε of the run's rounds of Gaussian noise, computed here), the table
`flwr run --stream` printed (the same numbers as the file), every listening
socket of every process started (loopback only), and, after the ServerApp
is killed mid-run and the run restarted, a run that resumed from its
checkpoint and recorded each round once. Every process started (the
SuperExecs and app processes Flower spawns, in sessions of their own,
included) is stopped within a bounded time, and none is left. The Flower
flags the documents name (tests/docs_test.py) are checked against the
programs' --help. Runs in the Flower environment (`make test-flower`);
skipped where flwr is absent.
"""

import csv
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,wrong-import-position
import dp_accounting
import psutil

import docs_test

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_APP = os.path.join(_REPO, 'examples', 'flowerapp')
# Flower's programs, installed beside this interpreter; Flower also starts
# its SuperExecs and app processes by name, from PATH.
_BIN = os.path.dirname(sys.executable)
_LOOPBACK = ('127.0.0.1', '::1')
_CONNECTION = 'deployment'
# Two clients; canaries k <= rounds (at most half of a round's participants).
_RUN_CONFIG = ('num-clients=2 clients-per-round=2 num-canaries=6 '
               'use-synthetic-data=true seed=0 rounds-per-checkpoint=2')
_STOP_SECONDS = 20


def _free_port() -> int:
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: str) -> None:
  """Waits until 127.0.0.1:`port` accepts connections (60 s at most)."""
  deadline = time.monotonic() + 60
  while True:
    assert process.poll() is None, _read(log)
    with socket.socket() as probe:
      if probe.connect_ex(('127.0.0.1', port)) == 0:
        return
    assert time.monotonic() < deadline, _read(log)
    time.sleep(0.2)


def _read(path: str) -> str:
  with open(path, encoding='utf-8', errors='replace') as stream:
    return stream.read()


class _Deployment:
  """A SuperLink and two SuperNodes on loopback, and `flwr run` against them.

  Attributes:
    env: The environment of every Flower process (its FLWR_HOME, no
      telemetry, no update check, no runtime dependency installation).
    roots: The processes this test started (SuperLink, SuperNodes).
    ports: The ports they were told to bind.
  """

  def __init__(self, directory: str):
    self._directory = directory
    home = os.path.join(directory, 'flwr_home')
    os.makedirs(home)
    self.superlink_port = _free_port()
    with open(os.path.join(home, 'config.toml'), 'w',
              encoding='utf-8') as stream:
      stream.write(f'[superlink]\ndefault = "{_CONNECTION}"\n\n'
                   f'[superlink.{_CONNECTION}]\n'
                   f'address = "127.0.0.1:{self.superlink_port}"\n'
                   'insecure = true\n')
    self.env = dict(os.environ, FLWR_HOME=home, FLWR_TELEMETRY_ENABLED='0',
                    FLWR_DISABLE_UPDATE_CHECK='1',
                    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION='1',
                    PATH=_BIN + os.pathsep + os.environ.get('PATH', ''))
    self.roots: list[subprocess.Popen] = []
    self.ports = [self.superlink_port]
    self.seen: dict[int, psutil.Process] = {}

  def _start(self, name: str, *args: str) -> subprocess.Popen:
    log = os.path.join(self._directory, f'{name}.log')
    with open(log, 'w', encoding='utf-8') as stream:
      process = subprocess.Popen(
          [os.path.join(_BIN, args[0]), *args[1:]], cwd=self._directory,
          env=self.env, stdout=stream, stderr=subprocess.STDOUT,
          start_new_session=True)
    self.roots.append(process)
    return process

  def start(self) -> None:
    """Starts the SuperLink, then two SuperNodes, all on 127.0.0.1."""
    superlink = self._start(
        'superlink', 'flower-superlink', '--insecure', '--host', '127.0.0.1',
        '--port', str(self.superlink_port),
        '--disable-runtime-dependency-installation')
    _wait_for_port(self.superlink_port, superlink,
                   os.path.join(self._directory, 'superlink.log'))
    for partition in range(2):
      port = _free_port()
      self.ports.append(port)
      node = self._start(
          f'supernode_{partition}', 'flower-supernode', '--insecure',
          '--superlink', f'127.0.0.1:{self.superlink_port}', '--host',
          '127.0.0.1', '--port', str(port), '--node-config',
          f'partition-id={partition} num-partitions=2')
      _wait_for_port(port, node, os.path.join(self._directory,
                                              f'supernode_{partition}.log'))

  def tree(self) -> list[psutil.Process]:
    """Every live process started, Flower's descendants included (noted)."""
    found = []
    for root in self.roots:
      try:
        parent = psutil.Process(root.pid)
        found += [parent, *parent.children(recursive=True)]
      except psutil.NoSuchProcess:
        continue
    self.seen.update((process.pid, process) for process in found)
    return found

  def flwr_run(self, run_config: str, *, stream: bool,
               timeout: float = 300) -> str:
    """`flwr run` of the app on the deployment; its output."""
    done = subprocess.run(
        [os.path.join(_BIN, 'flwr'), 'run', _APP, _CONNECTION,
         *(['--stream'] if stream else []), '--run-config', run_config],
        cwd=self._directory, env=self.env, capture_output=True, text=True,
        timeout=timeout, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output

  def stop(self) -> list[str]:
    """Stops every process started, within a bounded time; the survivors."""
    processes = self.tree()
    groups = {root.pid for root in self.roots}
    for process in processes:  # Flower's SuperExecs start sessions of theirs.
      try:
        groups.add(os.getpgid(process.pid))
      except ProcessLookupError:
        continue
    for group in groups:
      try:
        os.killpg(group, signal.SIGTERM)
      except ProcessLookupError:
        continue
    deadline = time.monotonic() + _STOP_SECONDS
    for root in self.roots:
      try:
        root.wait(timeout=max(0.1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        root.kill()
        root.wait()
    _, alive = psutil.wait_procs(list(self.seen.values()),
                                 timeout=max(0.1, deadline - time.monotonic()))
    for process in alive:
      try:
        process.kill()
      except psutil.NoSuchProcess:
        continue
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [repr(process) for process in alive if _running(process)]


def _running(process: psutil.Process) -> bool:
  try:
    return process.status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
  running = _Deployment(str(tmp_path_factory.mktemp('deployment')))
  try:
    running.start()
    yield running
  finally:
    started = time.monotonic()
    survivors = running.stop()
    assert not survivors, survivors
    assert time.monotonic() - started < _STOP_SECONDS + 10


def _report(run_dir: str) -> dict:
  with open(os.path.join(run_dir, 'report.json'), encoding='utf-8') as stream:
    return json.load(stream)


def _rounds(run_dir: str) -> list[int]:
  with open(os.path.join(run_dir, 'metrics.csv'), encoding='utf-8') as stream:
    return [int(row['round']) for row in csv.DictReader(stream)]


def _pld_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
  accountant = dp_accounting.pld.PLDAccountant()
  accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier), rounds)
  return accountant.get_epsilon(delta)


def _table_row(output: str) -> list[str]:
  """The cells of the one data row of the table `flwr run` printed."""
  lines = [line for line in output.splitlines() if line.startswith('| ')]
  assert lines[0].startswith('| noise | analytical ε | accounted ε |'), output
  assert len(lines) == 2, output
  return [cell.strip() for cell in lines[1].strip('|').split('|')]


def test_the_app_runs_audited_on_the_deployment_engine(deployment, tmp_path):
  output_dir = tmp_path / 'runs'
  rounds = 4
  output = deployment.flwr_run(
      f"{_RUN_CONFIG} num-server-rounds={rounds} output-dir='{output_dir}'",
      stream=True)
  listening = []
  for process in deployment.tree():
    try:
      connections = process.net_connections(kind='inet')
    except psutil.NoSuchProcess:
      continue
    for connection in connections:
      if connection.status == psutil.CONN_LISTEN:
        listening.append(connection.laddr)
      assert connection.laddr.ip in _LOOPBACK, (process.cmdline(), connection)
      if connection.raddr:
        assert connection.raddr.ip in _LOOPBACK, (process.cmdline(),
                                                  connection)
  assert {address.port for address in listening} >= set(deployment.ports)

  run_dir = output_dir / 'noise_1'
  report = _report(str(run_dir))
  for key in ('epsilon_est_final', 'epsilon_lo_final', 'epsilon_est_all',
              'epsilon_lo_all', 'accounted_epsilon', 'analytical_epsilon'):
    assert isinstance(report[key], float) and math.isfinite(report[key]), key
  assert report['setting']['num_sampled_clients'] == 2
  assert report['setting']['rounds'] == rounds
  assert _rounds(str(run_dir)) == list(range(1, rounds + 1))
  assert report['accounted_epsilon'] == pytest.approx(
      _pld_epsilon(1.0, rounds, 2**-1.1), rel=1e-3)
  row = _table_row(output)
  assert row[0] == '1'
  assert float(row[2]) == pytest.approx(report['accounted_epsilon'], rel=1e-3)
  assert float(row[6]) == pytest.approx(report['epsilon_est_final'],
                                        rel=1e-3, abs=1e-4)


def _serverapps(deployment: _Deployment) -> list[psutil.Process]:
  """The live ServerApp processes Flower's SuperExec started."""
  found = []
  for process in deployment.tree():
    try:
      if _running(process) and any('flwr-serverapp' in part
                                   for part in process.cmdline()):
        found.append(process)
    except psutil.NoSuchProcess:
      continue
  return found


def test_the_audit_resumes_after_the_server_app_is_killed(deployment,
                                                          tmp_path):
  output_dir = tmp_path / 'runs'
  rounds = 6
  run_config = (f"{_RUN_CONFIG} num-server-rounds={rounds} "
                f"output-dir='{output_dir}'")
  run_dir = output_dir / 'noise_1'
  checkpoints = run_dir / 'checkpoints'
  earlier = {process.pid for process in _serverapps(deployment)}
  deployment.flwr_run(run_config, stream=False)
  deadline = time.monotonic() + 180
  while not (checkpoints.exists() and any(  # A complete one, not a temp.
      name.endswith('.npz') for name in os.listdir(checkpoints))):
    assert time.monotonic() < deadline, os.listdir(tmp_path)
    time.sleep(0.2)
  killed = [process for process in _serverapps(deployment)
            if process.pid not in earlier]
  assert len(killed) == 1, killed
  killed[0].kill()
  deadline = time.monotonic() + 10  # Not our child: gone or a zombie.
  while _running(killed[0]):
    assert time.monotonic() < deadline
    time.sleep(0.1)
  assert not (run_dir / 'report.json').exists()  # Killed mid-run.

  output = deployment.flwr_run(run_config, stream=True)
  resumed = [line for line in output.splitlines()
             if 'resumed from round ' in line]
  assert len(resumed) == 1, output
  resumed_from = int(resumed[0].split('resumed from round ')[1].split(';')[0])
  assert resumed_from in range(2, rounds, 2), output
  assert _rounds(str(run_dir)) == list(range(1, rounds + 1))
  report = _report(str(run_dir))
  assert report['setting']['rounds'] == rounds
  assert math.isfinite(report['epsilon_est_final'])


@pytest.mark.parametrize('program', ['flower-superlink', 'flower-supernode',
                                     'flwr run'])
def test_the_flower_flags_the_documents_name_exist(program, tmp_path):
  flags = docs_test.OTHER_PROGRAMS_FLAGS[program]
  command = program.split()
  done = subprocess.run([os.path.join(_BIN, command[0]), *command[1:],
                         '--help'], capture_output=True, text=True,
                        timeout=120, check=False,
                        env=dict(os.environ, FLWR_HOME=str(tmp_path),
                                 FLWR_DISABLE_UPDATE_CHECK='1',
                                 FLWR_TELEMETRY_ENABLED='0', COLUMNS='200'))
  assert done.returncode == 0, done.stderr
  for flag in flags:
    assert f'--{flag}' in done.stdout, (program, flag)
