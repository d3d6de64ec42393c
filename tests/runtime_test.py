"""Tests that TFF computations run and leave no worker process behind."""

import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

from one_shot_epe.tff_engine import exposure
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import network_namespace
from one_shot_epe.tff_engine import runtime

tff = pytest.importorskip('tensorflow_federated')
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_context_runs_and_stops_its_worker():
  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(values):
    return tff.federated_sum(values)

  with runtime.local_cpp_context():
    assert total([1.0, 2.0, 4.5]) == pytest.approx(7.5)
    assert len(runtime.worker_processes()) == 1
  assert runtime.worker_processes() == []


def test_plain_script_exit_leaves_no_worker():
  # A script that uses TFF's default context and just exits: the atexit hook of
  # `runtime` must stop the worker, so the pipe we read closes and run() returns.
  script = textwrap.dedent("""
      import numpy as np
      import tensorflow_federated as tff
      from one_shot_epe.tff_engine import runtime
      @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
      def total(values):
        return tff.federated_sum(values)
      print('SUM', total([1, 2]), 'WORKERS', len(runtime.worker_processes()))
  """)
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=True)
  assert 'SUM 3 WORKERS 1' in done.stdout


@pytest.mark.skipif(network_namespace.namespace_interfaces() == ['lo'],
                    reason='this host has no interface but loopback')
def test_unisolated_worker_is_reported_with_its_address(caplog, monkeypatch):
  # ONE_SHOT_EPE_NETWORK_ISOLATION=off (as where the host refuses a
  # namespace): the worker listens in this process's network, and its exact
  # exposure is logged once it listens.
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'off')
  with caplog.at_level(logging.WARNING), runtime.local_cpp_context():
    assert tff.tensorflow.computation(lambda: 1)() == 1
    (worker,) = runtime.worker_processes()
    (address,) = exposure.listening_addresses(worker.pid)
  assert address.startswith(('[::]:', '0.0.0.0:'))
  assert any(f'pid {worker.pid}) listens on {address}' in record.getMessage()
             for record in caplog.records)


def test_worker_of_a_killed_process_is_reaped():
  # SIGKILL runs no finaliser and no atexit hook: the context's reaper kills
  # the worker, so it neither outlives the script nor holds its pipes open.
  script = textwrap.dedent("""
      import os, signal, time
      from one_shot_epe.tff_engine import runtime
      import tensorflow_federated as tff
      with runtime.local_cpp_context():
        assert tff.tensorflow.computation(lambda: 1)() == 1
        (worker,) = runtime.worker_processes()
        print('WORKER', worker.pid, 'BRIDGE', worker.ppid(), flush=True)
        time.sleep(1)  # Several of the reaper's polls.
        os.kill(os.getpid(), signal.SIGKILL)
  """)
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == -9, done.stderr[-3000:]
  words = done.stdout.split()
  for pid in (int(words[words.index('WORKER') + 1]),
              int(words[words.index('BRIDGE') + 1])):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and psutil.pid_exists(pid):
      try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
          break
      except psutil.NoSuchProcess:
        break
      time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(
        pid).status() == psutil.STATUS_ZOMBIE


_ROUNDS_SCRIPT = """
import os
from one_shot_epe.tff_engine import audit, exposure, network_namespace, runtime
from examples import canaries_in_fedavg as example
import tensorflow_federated as tff

def listeners():
  found = set()
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/self/net/{table}') as f:
      found |= {line.split()[1] for line in f.read().splitlines()[1:]
                if line.split()[3] == '0A'}
  return found

namespace = os.readlink('/proc/self/ns/net')
before = listeners()
canary_audit = audit.CanaryAudit(num_canaries=4, rounds=3,
                                 clients_per_round=example.CLIENTS_PER_ROUND,
                                 delta=1e-3, noise_seed=0)
process = tff.learning.algorithms.build_unweighted_fed_avg(
    example.model_fn,
    client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    model_aggregator=canary_audit.gaussian_fixed(noise_multiplier=0.5,
                                                 clip=1.0))
with runtime.local_cpp_context():
  (worker,) = runtime.worker_processes()
  print('WORKER', network_namespace.namespace_interfaces(worker.pid),
        exposure.listening_addresses(worker.pid))
  state = process.initialize()
  canary_audit.observe(state)
  for round_num in range(1, 4):
    state = process.next(state, example.select_clients(round_num)).state
    canary_audit.observe(state)
    print('NEW LISTENERS', sorted(listeners() - before))
print('SAME NAMESPACE', os.readlink('/proc/self/ns/net') == namespace)
print('WORKERS LEFT', len(runtime.worker_processes()))
"""


@pytest.mark.slow
def test_a_script_running_rounds_keeps_its_network_namespace():
  # A plug-in script: the worker runs in a loopback-only namespace of its own
  # and nothing of it listens in the script's namespace while rounds run.
  env = {k: v for k, v in os.environ.items()
         if k != isolation.ISOLATION_ENV}
  done = subprocess.run([sys.executable, '-c', _ROUNDS_SCRIPT],
                        capture_output=True, text=True, timeout=300,
                        check=False, env=env, cwd=_REPO)
  assert done.returncode == 0, done.stderr[-3000:]
  if isolation.private_network_refusal() is not None:
    pytest.skip('this host grants no network namespace')
  worker_line = done.stdout.split('WORKER ')[1].splitlines()[0]
  assert worker_line.startswith("['lo'] [")  # Listens, in its own network.
  assert worker_line != "['lo'] []"
  assert done.stdout.count('NEW LISTENERS []') == 3, done.stdout
  assert 'SAME NAMESPACE True' in done.stdout
  assert 'WORKERS LEFT 0' in done.stdout
  assert 'EXPOSED' not in done.stderr
