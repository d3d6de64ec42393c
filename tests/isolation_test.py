"""Tests that local TFF executors are unreachable beyond loopback.

Sockets and namespaces are read from /proc/<pid>/net of the process itself,
i.e. in the namespace that process really listens in; the control runs TFF's
plain context, whose worker is reachable from other hosts.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from one_shot_epe.tff_engine import exposure
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import network_namespace
import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOST_HAS_NETWORK = network_namespace.namespace_interfaces() != ['lo']
_NEEDS_NETWORK = pytest.mark.skipif(
    not _HOST_HAS_NETWORK, reason='this host has no interface but loopback')


def _python(script: str, env: dict[str, str] | None = None,
            prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
  return programs.run([*prefix, sys.executable, '-c', textwrap.dedent(script)],
                      cwd=_REPO, timeout=120,
                      env={**os.environ, **(env or {})})


def test_listening_addresses_are_this_process_sockets():
  with socket.socket() as loop, socket.socket() as wild, socket.socket() as idle:
    loop.bind(('127.0.0.1', 0))
    loop.listen()
    wild.bind(('0.0.0.0', 0))
    wild.listen()
    idle.bind(('127.0.0.1', 0))  # Bound, not listening.
    loop_address = f'127.0.0.1:{loop.getsockname()[1]}'
    wild_address = f'0.0.0.0:{wild.getsockname()[1]}'
    found = exposure.listening_addresses(os.getpid())
    assert loop_address in found and wild_address in found
    assert f'127.0.0.1:{idle.getsockname()[1]}' not in found
    exposed = exposure.exposed_listeners(os.getpid())
    assert loop_address not in exposed
    assert (wild_address in exposed) == _HOST_HAS_NETWORK


def test_ipv6_addresses_are_decoded():
  if not socket.has_ipv6:
    pytest.skip('no IPv6')
  with socket.socket(socket.AF_INET6) as wild, socket.socket(
      socket.AF_INET6) as loop:
    wild.bind(('::', 0))
    wild.listen()
    loop.bind(('::1', 0))
    loop.listen()
    found = exposure.listening_addresses(os.getpid())
    assert f'[::]:{wild.getsockname()[1]}' in found
    assert f'[::1]:{loop.getsockname()[1]}' in found
    assert f'[::1]:{loop.getsockname()[1]}' not in (
        exposure.exposed_listeners(os.getpid()))


_ENTER = """
    import socket
    from one_shot_epe.tff_engine import network_namespace
    network_namespace.enter_private_network()
    with socket.socket() as server:
      server.bind(('127.0.0.1', 0))
      server.listen()
      socket.create_connection(server.getsockname()).close()
    print('INTERFACES', network_namespace.namespace_interfaces())
"""


def test_enter_private_network_leaves_only_loopback_up():
  done = _python(_ENTER)
  assert done.returncode == 0, done.stderr
  assert "INTERFACES ['lo']" in done.stdout


def test_unprivileged_user_enters_through_a_user_namespace():
  if os.geteuid() != 0 or not shutil.which('setpriv'):
    pytest.skip('needs root and setpriv to run as another user')
  done = _python(_ENTER, prefix=('setpriv', '--reuid=65534', '--regid=65534',
                                 '--clear-groups'))
  if 'cannot create a network namespace' in done.stderr:
    pytest.skip(f'this kernel refuses user namespaces: {done.stderr}')
  assert done.returncode == 0, done.stderr
  assert "INTERFACES ['lo']" in done.stdout


# A stand-in for worker_binary: serves on [::]:<--port> (every interface, as
# the worker does) and answers each line with it reversed.
_ECHO_SERVER = """
import socket, sys, threading
port = int(sys.argv[1].split('=')[1])
server = socket.create_server(('', port), family=socket.AF_INET6,
                              dualstack_ipv6=True)
def serve(conn):
  with conn, conn.makefile('rwb') as f:
    for line in f:
      f.write(line.rstrip(b'\\n')[::-1] + b'\\n')
      f.flush()
while True:
  threading.Thread(target=serve, args=(server.accept()[0],)).start()
"""


def _tcp_listening_ports_here() -> set[int]:
  """Every LISTEN port in this process's network namespace (/proc/net)."""
  found = set()
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/self/net/{table}', encoding='ascii') as f:
      for line in f.read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == '0A':
          found.add(int(fields[1].rsplit(':', 1)[1], 16))
  return found


def test_private_network_server_is_reached_only_through_its_socket():
  namespace = os.readlink('/proc/self/ns/net')
  with isolation.private_network_server(
      [sys.executable, '-c', _ECHO_SERVER]) as (bridge, path):
    (server,) = psutil.Process(bridge.pid).children()
    with socket.socket(socket.AF_UNIX) as client:
      client.connect(path)
      with client.makefile('rwb') as f:
        for text in (b'abc', b'x' * 300_000):
          f.write(text + b'\n')
          f.flush()
          assert f.readline() == text[::-1] + b'\n'
    assert network_namespace.namespace_interfaces(server.pid) == ['lo']
    assert network_namespace.namespace_interfaces(bridge.pid) == ['lo']
    assert exposure.listening_addresses(server.pid)  # Not vacuous.
    assert exposure.exposed_listeners(server.pid) == []
    # The server's port listens in its namespace, not here (other test
    # workers may open listeners here meanwhile: compare the port only).
    (address,) = exposure.listening_addresses(server.pid)
    assert int(address.rsplit(':', 1)[1]) not in _tcp_listening_ports_here()
    assert os.readlink('/proc/self/ns/net') == namespace
  assert bridge.returncode == 0
  assert not psutil.pid_exists(server.pid) or server.status() == (
      psutil.STATUS_ZOMBIE)
  assert not os.path.exists(os.path.dirname(path))


def test_server_that_exits_at_start_is_an_error():
  with pytest.raises(RuntimeError, match='exited at start'):
    with isolation.private_network_server(
        [sys.executable, '-c', 'raise SystemExit(3)']):
      pass


def test_check_program_refusal_and_modes(monkeypatch, capsys):
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'maybe')
  with pytest.raises(SystemExit) as exited:
    isolation.check_program(['prog'])
  assert exited.value.code == 2
  assert isolation.ISOLATION_ENV in capsys.readouterr().err
  monkeypatch.setattr(isolation, 'private_network_refusal',
                      lambda: 'unshare: Operation not permitted')
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'require')
  with pytest.raises(SystemExit) as exited:
    isolation.check_program(['prog'])
  assert exited.value.code == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and f'{isolation.ISOLATION_ENV}=require' in err
  # Remote workers start nothing here; 'auto' and 'off' never refuse.
  isolation.check_program(['prog', '--tff_worker_addresses=h:1'])
  for mode in ('auto', 'off'):
    monkeypatch.setenv(isolation.ISOLATION_ENV, mode)
    isolation.check_program(['prog'])
  assert capsys.readouterr().err == ''


def test_probe_changes_nothing_here():
  namespace = os.readlink('/proc/self/ns/net')
  refusal = isolation.private_network_refusal()
  assert refusal is None or 'network namespace' in refusal
  assert os.readlink('/proc/self/ns/net') == namespace


def test_remote_workers_requested_reads_flags_and_flagfiles(tmp_path):
  flagfile = tmp_path / 'remote.cfg'
  flagfile.write_text('--noise_multiplier=0.1\n--tff_worker_addresses=h:80\n')
  plain = tmp_path / 'plain.cfg'
  plain.write_text('# grid: --noise_multiplier=0,0.1\n--total_rounds=3\n')
  requested = isolation.remote_workers_requested
  assert requested(['prog', '--tff_worker_addresses=h1:8000,h2:8000'])
  assert requested(['prog', '--other', '--tff_worker_addresses', 'h:1'])
  assert requested(['prog', f'--flagfile={flagfile}'])
  assert requested(['prog', f'--config={flagfile}'], flagfile_flags=('config',))
  assert not requested(['prog', f'--config={flagfile}'])
  assert not requested(['prog', f'--config={plain}'], flagfile_flags=('config',))
  assert not requested(['prog', f'--config={flagfile}',
                        '--tff_worker_addresses='], flagfile_flags=('config',))
  assert not requested(['prog', '--tff_workers=2', '--tff_worker_addresses='])
  assert not requested(['prog', '--flagfile=/nonexistent.cfg'])


# The executors of real runs (TFF; each test starts processes for seconds).


def _tree(pid: int) -> list[psutil.Process]:
  root = psutil.Process(pid)
  return [root, *root.children(recursive=True)]


def _worker_pids(pid: int) -> list[int]:
  pids = []
  for process in _tree(pid):
    try:
      if process.name() == 'worker_binary':
        pids.append(process.pid)
    except psutil.NoSuchProcess:
      continue
  return pids


def _await_workers(process: subprocess.Popen, count: int) -> list[int]:
  deadline = time.monotonic() + 240
  while time.monotonic() < deadline and process.poll() is None:
    pids = _worker_pids(process.pid)
    with contextlib.suppress(FileNotFoundError):  # A process just ended.
      if len(pids) == count and all(exposure.listening_addresses(p)
                                    for p in pids):
        return pids
    time.sleep(0.05)
  return []


@pytest.mark.slow
@_NEEDS_NETWORK
def test_control_plain_tff_context_listens_on_every_interface():
  # Without this project's isolation TFF's own worker is exposed: the check
  # below can fail.
  script = textwrap.dedent("""
      import sys
      import numpy as np
      import tensorflow_federated as tff
      from one_shot_epe.tff_engine import runtime  # Only its exit hook: stops the worker.
      @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
      def total(values):
        return tff.federated_sum(values)
      print(total([1, 2]), flush=True)
      sys.stdin.read()  # Until the test closes stdin.
  """)
  with subprocess.Popen([sys.executable, '-c', script], cwd=_REPO,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True,
                        start_new_session=True) as process:
    try:
      assert process.stdout.readline().strip() == '3'
      (worker,) = _worker_pids(process.pid)
      exposed = exposure.exposed_listeners(worker)
      assert exposed and exposed == exposure.listening_addresses(worker)
      assert all(address.startswith(('[::]:', '0.0.0.0:'))
                 for address in exposed)
      process.stdin.close()
      assert process.wait(timeout=60) == 0
    finally:
      # Should the script fail before its exit hook, its worker is in its
      # group.
      with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 9)


_TINY_RUN = ('--use_synthetic_data', '--synthetic_num_clients=12',
             '--synthetic_examples_per_client=8', '--clients_per_round=3',
             '--total_rounds=4', '--client_batch_size=4',
             '--noise_multiplier=0.05', '--num_canaries=4',
             '--num_unseen_canaries=16', '--canary_repeats=2',
             '--rounds_per_evaluation=2', '--rounds_per_checkpoint=3',
             '--max_eval_examples=16', '--run_name=tiny', '--noprogress_bar')


@pytest.mark.slow
@pytest.mark.parametrize('tff_workers', [1, 2])
def test_launcher_workers_listen_only_in_a_private_network(tmp_path,
                                                           tff_workers):
  env = {key: value for key, value in os.environ.items()
         if key not in ('TF_CPP_MIN_LOG_LEVEL', isolation.ISOLATION_ENV)}
  with subprocess.Popen(
      [sys.executable, '-m', 'experiments.train', *_TINY_RUN,
       f'--tff_workers={tff_workers}', f'--root_output_dir={tmp_path}'],
      cwd=_REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, start_new_session=True) as process:
    try:
      workers = _await_workers(process, tff_workers)
      listening = {p.pid: exposure.listening_addresses(p.pid)
                   for p in _tree(process.pid)}
      exposed = {pid: exposure.exposed_listeners(pid) for pid in listening}
      bridges = [psutil.Process(pid).ppid() for pid in workers]
      namespaces = {pid: network_namespace.namespace_interfaces(pid)
                    for pid in (process.pid, *workers, *bridges)}
      stdout, stderr = process.communicate(timeout=300)
    finally:
      if process.poll() is None:
        os.killpg(process.pid, 9)
  assert process.returncode == 0, stderr
  assert len(workers) == tff_workers, stderr
  assert all(listening[pid] for pid in workers)  # Not vacuous.
  assert exposed == {pid: [] for pid in listening}, listening
  # The launcher keeps the host's network; only its workers (and their
  # bridges) are in loopback-only namespaces.
  assert namespaces.pop(process.pid) == (
      network_namespace.namespace_interfaces())
  assert listening[process.pid] == []
  assert process.pid not in bridges
  assert set(map(tuple, namespaces.values())) == {('lo',)}
  assert 'Report:' in stdout
  # The run is also quiet: no TensorFlow start-up lines, no exposure warning.
  for noise in ('tensorflow/', 'Unable to register', 'TF-TRT', 'oneDNN',
                'EXPOSED', 'No network isolation'):
    assert noise not in stderr
