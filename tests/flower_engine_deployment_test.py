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
socket of every process started (loopback only), no ClientApp process
left once a run is done. A third SuperNode stopped while it trains: the
round Flower's DP wrapper skips is recorded unreleased and the accounted ε
is dp_accounting's of the rounds released. The ServerApp stopped after its
first checkpoint: its line in `flwr log`, and the rerun resumed to the
report and cosines of the uninterrupted run, byte for byte. A refused value:
one line naming its key, the run `finished:failed` in `flwr ls`. The
commands of docs/flower.md's §3 and §4, run as written and in order on a
fresh FLWR_HOME (free ports for the fixed ones, two rounds instead of 30).
Every process started (the SuperExecs and app processes Flower spawns, in
sessions of their own, and Ray's, included) is stopped within a bounded
time, and none is left. The Flower flags the documents name
(tests/docs_test.py) are checked against the programs' --help. Runs in the
Flower environment (`make test-flower`; minutes); skipped where flwr is
absent.
"""

import csv
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
    self.env['XDG_CACHE_HOME'] = os.path.join(directory, 'cache')
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
      self.add_supernode(partition, partitions=2)

  def add_supernode(self, partition: int,
                    partitions: int) -> subprocess.Popen:
    """Starts a SuperNode (in a session of its own), on 127.0.0.1."""
    port = _free_port()
    self.ports.append(port)
    node = self._start(
        f'supernode_{partition}_of_{partitions}', 'flower-supernode',
        '--insecure', '--superlink', f'127.0.0.1:{self.superlink_port}',
        '--host', '127.0.0.1', '--port', str(port), '--node-config',
        f'partition-id={partition} num-partitions={partitions}')
    _wait_for_port(port, node, os.path.join(
        self._directory, f'supernode_{partition}_of_{partitions}.log'))
    return node

  def flwr(self, arguments: list[str], timeout: float = 120) -> str:
    """`flwr <arguments>` against the deployment; its output."""
    done = subprocess.run([os.path.join(_BIN, 'flwr'), *arguments],
                          cwd=self._directory, env=self.env,
                          capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr

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


def _metrics(run_dir: str) -> list[dict[str, str]]:
  with open(os.path.join(run_dir, 'metrics.csv'), encoding='utf-8') as stream:
    return list(csv.DictReader(stream))


def _rounds(run_dir: str) -> list[int]:
  return [int(row['round']) for row in _metrics(run_dir)]


def _run_dir(output_dir) -> str:
  """The one run directory the app wrote under `output_dir`."""
  names = os.listdir(output_dir)
  assert len(names) == 1 and names[0].startswith('noise_1-'), names
  return os.path.join(output_dir, names[0])


def _pld_epsilon(events, delta: float) -> float:
  accountant = dp_accounting.pld.PLDAccountant()
  accountant.compose(dp_accounting.ComposedDpEvent(list(events)))
  return accountant.get_epsilon(delta)


def _table_row(output: str) -> list[str]:
  """The cells of the one data row of the table `flwr run` printed."""
  lines = [line for line in output.splitlines() if line.startswith('| ')]
  assert lines[0].startswith('| noise | analytical ε | accounted ε |'), output
  assert len(lines) == 2, output
  return [cell.strip() for cell in lines[1].strip('|').split('|')]


def _clientapps(deployment: _Deployment) -> list[psutil.Process]:
  """The live ClientApp processes the SuperNodes started."""
  return [process for process in deployment.tree()
          if _running(process) and _named(process, 'flwr-clientapp')]


def _named(process: psutil.Process, name: str) -> bool:
  try:
    return any(name in part for part in process.cmdline())
  except psutil.NoSuchProcess:
    return False


_ROUNDS = 4


@pytest.fixture(scope='module')
def uninterrupted(deployment, tmp_path_factory):
  """A 4-round run of _RUN_CONFIG: `flwr run --stream`'s output, its dir."""
  output_dir = tmp_path_factory.mktemp('uninterrupted')
  output = deployment.flwr_run(
      f"{_RUN_CONFIG} num-server-rounds={_ROUNDS} output-dir='{output_dir}'",
      stream=True)
  return output, _run_dir(output_dir)


def test_the_app_runs_audited_on_the_deployment_engine(deployment,
                                                       uninterrupted):
  output, run_dir = uninterrupted
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
  assert f'new run in {run_dir}' in output
  report = _report(run_dir)
  for key in ('epsilon_est_final', 'epsilon_lo_final', 'epsilon_est_all',
              'epsilon_lo_all', 'accounted_epsilon', 'analytical_epsilon'):
    assert isinstance(report[key], float) and math.isfinite(report[key]), key
  assert report['setting']['num_sampled_clients'] == 2
  assert report['setting']['rounds'] == _ROUNDS
  assert _rounds(run_dir) == list(range(1, _ROUNDS + 1))
  assert report['accounted_epsilon'] == pytest.approx(_pld_epsilon(
      [dp_accounting.GaussianDpEvent(1.0)] * _ROUNDS, 2**-1.1), rel=1e-3)
  row = _table_row(output)
  assert row[0] == '1'
  assert float(row[2]) == pytest.approx(report['accounted_epsilon'], rel=1e-3)
  assert float(row[6]) == pytest.approx(report['epsilon_est_final'],
                                        rel=1e-3, abs=1e-4)
  # No ClientApp process outlives its message.
  deadline = time.monotonic() + 30
  while _clientapps(deployment):
    assert time.monotonic() < deadline, _clientapps(deployment)
    time.sleep(0.5)


@pytest.mark.slow
def test_an_audit_survives_a_lost_supernode(deployment, tmp_path):
  # A third SuperNode, stopped while it trains a round's message: Flower's
  # DP wrapper gets its error reply and skips the round; the audit goes on.
  node = deployment.add_supernode(partition=2, partitions=3)
  output_dir = tmp_path / 'runs'
  rounds, lost = 6, []

  def stop_the_node_mid_round() -> None:
    deadline = time.monotonic() + 600
    while node.poll() is None and time.monotonic() < deadline:
      try:
        training = any(_named(child, 'flwr-clientapp') for child in
                       psutil.Process(node.pid).children(recursive=True))
      except psutil.NoSuchProcess:
        return
      if training:
        lost.append(time.monotonic())
        os.killpg(node.pid, signal.SIGTERM)
        return
      time.sleep(0.05)

  stopper = threading.Thread(target=stop_the_node_mid_round, daemon=True)
  stopper.start()
  output = deployment.flwr_run(
      _RUN_CONFIG.replace('num-clients=2', 'num-clients=3') +
      f' num-server-rounds={rounds} '
      f"output-dir='{output_dir}'", stream=True, timeout=900)
  stopper.join(timeout=5)
  assert lost, output  # Sampled in one of 6 rounds but with p = 3^-6.
  run_dir = _run_dir(output_dir)
  report = _report(run_dir)
  metrics = _metrics(run_dir)
  assert [int(row['round']) for row in metrics] == list(range(1, rounds + 1))
  skipped = [int(row['round']) for row in metrics if row['released'] == '0']
  assert skipped and report['setting']['skipped_rounds'] == skipped, metrics
  assert all(int(row['failures']) >= 1 for row in metrics
             if row['released'] == '0')
  # The accounted ε composes the rounds released, each at its multiplier.
  events = [dp_accounting.GaussianDpEvent(float(
      row['effective_noise_multiplier'])) for row in metrics
            if row['released'] == '1']
  delta = 3**-1.1
  assert report['accounted_epsilon'] == pytest.approx(
      _pld_epsilon(events, delta), rel=1e-3)
  assert report['accounted_epsilon'] < _pld_epsilon(
      [dp_accounting.GaussianDpEvent(1.0)] * rounds, delta)
  assert f'Round {skipped[0]}' in report['notes'][0]


def _serverapps(deployment: _Deployment) -> list[psutil.Process]:
  """The live ServerApp processes Flower's SuperExec started."""
  return [process for process in deployment.tree()
          if _running(process) and _named(process, 'flwr-serverapp')]


@pytest.mark.slow
def test_a_stopped_server_app_saves_its_last_round_and_resumes(
    deployment, uninterrupted, tmp_path):
  # SIGTERM (Flower's graceful stop) to the ServerApp after its first
  # checkpoint: it saves the last completed round and says so in the run's
  # log; the same `flwr run` resumes from that round to the report an
  # uninterrupted run writes.
  output_dir = tmp_path / 'runs'
  run_config = (f"{_RUN_CONFIG} num-server-rounds={_ROUNDS} "
                f"output-dir='{output_dir}'")
  earlier = {process.pid for process in _serverapps(deployment)}
  started = deployment.flwr_run(run_config, stream=False)
  run_id = started.split('Successfully started run ')[1].split()[0]
  deadline = time.monotonic() + 300
  while not (output_dir.exists() and os.listdir(output_dir) and any(
      name.endswith('.npz') for name in _listing(
          os.path.join(_run_dir(output_dir), 'checkpoints')))):
    assert time.monotonic() < deadline, os.listdir(tmp_path)
    time.sleep(0.2)
  stopped = [process for process in _serverapps(deployment)
             if process.pid not in earlier]
  assert len(stopped) == 1, stopped
  stopped[0].send_signal(signal.SIGTERM)
  deadline = time.monotonic() + 60  # Not our child: gone or a zombie.
  while _running(stopped[0]):
    assert time.monotonic() < deadline
    time.sleep(0.1)
  run_dir = _run_dir(output_dir)
  assert not os.path.exists(os.path.join(run_dir, 'report.json'))
  log = deployment.flwr(['log', run_id, _CONNECTION, '--show'])
  line = [text for text in log.splitlines()
          if f'of {_ROUNDS} ({run_dir}); rerun the same command' in text]
  assert len(line) == 1, log
  saved = int(line[0].split('interrupted after round ')[1].split()[0])
  assert saved in range(2, _ROUNDS)

  output = deployment.flwr_run(run_config, stream=True)
  assert f'resumed from round {saved} in {run_dir}' in output
  assert _rounds(run_dir) == list(range(1, _ROUNDS + 1))
  _, whole = uninterrupted
  for name in ('report.json', 'final_cosines.csv', 'max_cosines.csv',
               'canary_cosines.csv'):
    with open(os.path.join(run_dir, name), encoding='utf-8') as a, open(
        os.path.join(whole, name), encoding='utf-8') as b:
      assert a.read() == b.read(), name


def _listing(directory: str) -> list[str]:
  return os.listdir(directory) if os.path.isdir(directory) else []


# The line a negative noise multiplier is refused with.
_REFUSED = ("run config 'noise-multiplier' must be a finite number >= 0.0; "
            'got -1.0.')


@pytest.mark.slow
def test_a_refused_value_fails_the_run_in_one_line(deployment, tmp_path):
  output = deployment.flwr_run(
      f"{_RUN_CONFIG} noise-multiplier=-1 output-dir='{tmp_path}'",
      stream=True)
  refused = [line for line in output.splitlines() if 'run config' in line]
  assert len(refused) == 1 and refused[0].endswith(_REFUSED), output
  assert 'Traceback' not in output and 'Exit Code' not in output, output
  run_id = output.split('Successfully started run ')[1].split()[0]
  runs = json.loads(deployment.flwr(['ls', _CONNECTION, '--run-id', run_id,
                                     '--format', 'json']))['runs']
  assert runs[0]['status'] == 'finished:failed', runs
  assert runs[0]['status-details'].endswith(_REFUSED), runs
  log = deployment.flwr(['log', run_id, _CONNECTION, '--show'])
  assert [line for line in log.splitlines() if 'run config' in line] == (
      refused), log
  assert not os.listdir(tmp_path)


def _documented_commands() -> list[tuple[str, str]]:
  """docs/flower.md's code blocks of §3 and §4, in order: (kind, text)."""
  with open(os.path.join(_REPO, 'docs', 'flower.md'), encoding='utf-8') as doc:
    text = doc.read()
  section = text[text.index('\n## 3. '):text.index('\n## 5. ')]
  return re.findall(r'```(sh|toml)\n(.*?)```', section, re.S)


@pytest.mark.slow
def test_the_documented_commands_run_in_order(tmp_path):
  # §3's simulation and §4's deployment, as docs/flower.md writes them, on a
  # fresh FLWR_HOME, both SuperLinks in one working directory (the default
  # output-dir of both runs under it): free loopback ports for the fixed
  # ones (the shared machine may use them), and two rounds instead of 30,
  # with canaries to match (`--run-config "num-server-rounds=2
  # num-canaries=4"` added).
  work = tmp_path / 'checkout'
  work.mkdir()
  os.symlink(os.path.join(_REPO, 'examples'), work / 'examples')
  home = tmp_path / 'flwr_home'
  ports = {'8000': _free_port(), '9094': _free_port(), '9095': _free_port()}
  local_port = _free_port()
  # Ray's session files (its sockets need a short path), removed at the end.
  ray_directory = tempfile.mkdtemp(prefix='ray-', dir='/tmp')
  env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED='0',
             RAY_TMPDIR=ray_directory,
             FLWR_DISABLE_UPDATE_CHECK='1',
             FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(local_port),
             FLWR_LOCAL_CONTROL_API_PORT=str(_free_port()),
             XDG_CACHE_HOME=str(tmp_path / 'cache'),
             PATH=_BIN + os.pathsep + os.environ.get('PATH', ''))
  started, outputs = [], []

  def ported(line: str) -> str:
    for old, new in ports.items():
      line = re.sub(rf'\b{old}\b', str(new), line)
    return line

  def flwr(words: list[str]) -> str:
    done = subprocess.run([os.path.join(_BIN, 'flwr'), *words[1:]], cwd=work,
                          env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output

  def start(words: list[str]) -> None:
    log = tmp_path / f'{len(started)}.log'
    with open(log, 'w', encoding='utf-8') as stream:
      process = subprocess.Popen(
          [os.path.join(_BIN, words[0]), *words[1:]], cwd=work, env=env,
          stdout=stream, stderr=subprocess.STDOUT, start_new_session=True)
    started.append(process)
    _wait_for_port(int(words[words.index('--port') + 1]), process, str(log))

  def start_local() -> None:
    # The SuperLink `flwr run ... local` starts, started as it starts it
    # (flwr 1.42 gives it 15 s, which a loaded machine can exceed), with the
    # environment exported so far; `flwr run` finds it up and uses it.
    if not any('--simulation' in process.args for process in started):
      start(['flower-superlink', '--insecure', '--simulation', '--isolation',
             'subprocess', '--host', '127.0.0.1', '--port', str(local_port)])

  try:
    for kind, block in _documented_commands():
      if kind == 'toml':
        with open(home / 'config.toml', 'a', encoding='utf-8') as config:
          config.write('\n' + ported(block))
        continue
      for line in block.splitlines():
        words = shlex.split(ported(line))
        if words[0] == 'export':
          name, value = words[1].split('=', 1)
          env[name] = value
        elif words[0] in ('flower-superlink', 'flower-supernode'):
          start(words)
        else:
          assert words[:2] == ['flwr', 'run'], line
          if 'local' in words:
            start_local()
          outputs.append(flwr([*words, '--run-config',
                               'num-server-rounds=2 num-canaries=4']))
    # A refused value on the simulation engine: one line, the run failed.
    refused = flwr(['flwr', 'run', 'examples/flowerapp', 'local', '--stream',
                    '--run-config', 'noise-multiplier=-1'])
    runs = json.loads(flwr(['flwr', 'ls', 'local', '--format', 'json']))
  finally:
    survivors = []
    for process in started:
      if process.poll() is None:
        survivors += _stop_tree(psutil.Process(process.pid))
    shutil.rmtree(ray_directory, ignore_errors=True)
    assert not survivors, survivors
  assert len(outputs) == 2, outputs
  directories = []
  for output in outputs:
    opened = [line for line in output.splitlines() if 'new run in ' in line]
    assert len(opened) == 1, output
    directories.append(opened[0].split('new run in ')[1])
    assert directories[-1].startswith(str(work / 'output' / 'flower_app'))
    assert os.path.exists(os.path.join(directories[-1], 'report.json'))
    assert _table_row(output)[0] == '1'
  assert directories[0] != directories[1]
  lines = [line for line in refused.splitlines() if 'run config' in line]
  assert len(lines) == 1 and lines[0].endswith(_REFUSED), refused
  assert 'Traceback' not in refused and 'Exit Code' not in refused, refused
  assert sorted(run['status'] for run in runs['runs']) == [
      'finished:completed', 'finished:failed'], runs


def _stop_tree(root: psutil.Process) -> list[str]:
  """Stops a process and its descendants (SIGTERM, then SIGKILL)."""
  try:
    processes = [root, *root.children(recursive=True)]
  except psutil.NoSuchProcess:
    return []
  for process in processes:
    try:
      process.terminate()
    except psutil.NoSuchProcess:
      continue
  _, alive = psutil.wait_procs(processes, timeout=_STOP_SECONDS)
  for process in alive:
    try:
      process.kill()
    except psutil.NoSuchProcess:
      continue
  _, alive = psutil.wait_procs(alive, timeout=5)
  return [repr(process) for process in alive if _running(process)]


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
