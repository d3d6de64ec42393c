"""Tests for one_shot_epe.tff_engine.tff_workers: worker addresses and loopback workers.

Truths: the process table (psutil, /proc) and the kernel's sockets: started
workers exist and listen, stopped ones are gone and their ports can be bound.
"""

import logging
import os
import signal
import subprocess
import sys

import psutil
import pytest
import tensorflow_federated as tff

from one_shot_epe.tff_engine import exposure
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import network_namespace
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tff_workers


def assert_stopped(pids, addresses):
  """The workers (and bridges) are gone, their ports or sockets free again."""
  for pid in pids:
    assert not psutil.pid_exists(pid), f'process {pid} still exists'
  assert runtime.worker_processes() == []
  assert psutil.Process().children() == []
  for address in addresses:
    if address.startswith('unix:'):  # The socket and its directory.
      assert not os.path.exists(os.path.dirname(address[len('unix:'):]))
    else:
      assert tff_workers.port_is_free(port_of(address))


def port_of(address):
  """The port of a 'host:port' address."""
  return int(address.rpartition(':')[2])


def _tree_pids():
  return [p.pid for p in psutil.Process().children(recursive=True)]


@pytest.mark.parametrize('addresses', ['', 'host', 'host:0', 'host:70000',
                                       ':80', 'a:1,b', ['a:x']])
def test_parse_addresses_rejects_bad_entries(addresses):
  with pytest.raises(ValueError, match='addresses'):
    tff_workers.parse_addresses(addresses)


def test_parse_addresses_accepts_lists_and_comma_lists():
  assert tff_workers.parse_addresses('h1:8000, [::1]:9000') == [
      'h1:8000', '[::1]:9000'
  ]
  assert tff_workers.parse_addresses(['127.0.0.1:80']) == ['127.0.0.1:80']


def test_workers_run_alone_in_loopback_only_namespaces(monkeypatch, caplog):
  monkeypatch.delenv(isolation.ISOLATION_ENV, raising=False)
  if isolation.private_network_refusal() is not None:
    pytest.skip('this host grants no network namespace')
  namespace = os.readlink('/proc/self/ns/net')
  with caplog.at_level(logging.WARNING), tff_workers.local_workers(
      2) as addresses:
    workers = runtime.worker_processes()
    pids = _tree_pids()
    assert len(workers) == 2 and all(a.startswith('unix:') for a in addresses)
    for worker in workers:
      assert network_namespace.namespace_interfaces(worker.pid) == ['lo']
      assert exposure.listening_addresses(worker.pid)  # Not vacuous.
    assert exposure.listening_addresses(os.getpid()) == []
  assert os.readlink('/proc/self/ns/net') == namespace
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
  assert_stopped(pids, addresses)


@pytest.mark.skipif(network_namespace.namespace_interfaces() == ['lo'],
                    reason='this host has no interface but loopback')
@pytest.mark.parametrize('refused', [False, True])
def test_unisolated_workers_are_reported_with_their_addresses(
    monkeypatch, caplog, refused):
  # With ISOLATION=off, or 'auto' where the host refuses a namespace, the
  # workers listen in this process's network: each exact exposure is logged
  # once it listens.
  if refused:
    monkeypatch.delenv(isolation.ISOLATION_ENV, raising=False)
    monkeypatch.setattr(isolation, 'private_network_server', _refused)
  else:
    monkeypatch.setenv(isolation.ISOLATION_ENV, 'off')
  with caplog.at_level(
      logging.WARNING), tff_workers.local_workers(2) as addresses:
    for address in addresses:
      (listening,) = [a for pid in (w.pid for w in runtime.worker_processes())
                      for a in exposure.listening_addresses(pid)
                      if a.endswith(f':{port_of(address)}')]
      assert listening.startswith(('[::]:', '0.0.0.0:'))
      assert any(f'listens on {listening},' in record.getMessage()
                 for record in caplog.records)
  assert refused == any('No network isolation' in r.getMessage()
                        for r in caplog.records)
  assert_stopped([], addresses)


def _refused(*args, **kwargs):
  del args, kwargs  # Unused.
  raise network_namespace.IsolationError('unshare: Operation not permitted')


def test_required_isolation_refused_starts_no_worker(monkeypatch):
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'require')
  monkeypatch.setattr(isolation, 'private_network_server', _refused)
  with pytest.raises(network_namespace.IsolationError,
                     match=f'{isolation.ISOLATION_ENV}=require'):
    with tff_workers.local_workers(2):
      pass
  assert psutil.Process().children() == []


def test_workers_that_ignore_sigint_are_killed():
  # Children inherit an ignored SIGINT (a launcher started with nohup ... &);
  # they must still be stopped, by the SIGKILL after the timeout.
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    workers = tff_workers.local_workers(1, shutdown_timeout_s=0.5)
    addresses = workers.__enter__()
  finally:
    signal.signal(signal.SIGINT, previous)
  (worker,) = [c.pid for c in runtime.worker_processes()]
  pids = _tree_pids()
  with open(f'/proc/{worker}/status') as status:
    ignored = next(int(line.split()[1], 16) for line in status
                   if line.startswith('SigIgn:'))
  assert ignored & (1 << (signal.SIGINT - 1))  # The premise holds.
  workers.__exit__(None, None, None)
  assert_stopped(pids, addresses)


@pytest.mark.parametrize('kwargs, name', [
    (dict(num_workers=0), 'num_workers'),
    (dict(num_workers=2, startup_timeout_s=0), 'startup_timeout_s'),
    (dict(num_workers=2, log_dir='/nonexistent/dir'), 'log_dir'),
])
def test_local_workers_rejects_bad_arguments(kwargs, name):
  with pytest.raises(ValueError, match=name):
    with tff_workers.local_workers(**kwargs):
      pass
  assert runtime.worker_processes() == []


def test_finds_the_installed_worker_without_importing_tensorflow():
  # The launcher's flag checks use this module before TensorFlow may load.
  code = ('import sys\n'
          'from one_shot_epe.tff_engine import tff_workers\n'
          'print(tff_workers.worker_binary_path())\n'
          'print(sorted(m for m in sys.modules if m.startswith("tensorflow")))\n')
  done = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, timeout=120, check=True)
  path, imported = done.stdout.strip().splitlines()
  assert imported == '[]'
  assert path == os.path.join(os.path.dirname(tff.__file__), 'data',
                              'worker_binary')
  assert os.access(path, os.X_OK)
