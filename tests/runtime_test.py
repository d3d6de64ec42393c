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

from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import runtime

tff = pytest.importorskip('tensorflow_federated')


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


@pytest.mark.skipif(isolation.namespace_interfaces() == ['lo'],
                    reason='this host has no interface but loopback')
def test_exposed_worker_is_reported_with_its_address(caplog):
  # This test process is in the host's network, as a library user's would be:
  # the worker starts with the first computation and its exact exposure is
  # logged by the context's watcher.
  with caplog.at_level(logging.WARNING), runtime.local_cpp_context():
    assert tff.tensorflow.computation(lambda: 1)() == 1
    (worker,) = runtime.worker_processes()
    (address,) = isolation.listening_addresses(worker.pid)
    deadline = time.monotonic() + 30
    while (time.monotonic() < deadline and
           not any('EXPOSED' in r.getMessage() for r in caplog.records)):
      time.sleep(0.05)
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
        print('WORKER', worker.pid, flush=True)
        time.sleep(1)  # Several of the reaper's polls.
        os.kill(os.getpid(), signal.SIGKILL)
  """)
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == -9, done.stderr[-3000:]
  worker = int(done.stdout.split('WORKER')[1].split()[0])
  deadline = time.monotonic() + 30
  while time.monotonic() < deadline and psutil.pid_exists(worker):
    try:
      if psutil.Process(worker).status() == psutil.STATUS_ZOMBIE:
        break
    except psutil.NoSuchProcess:
      break
    time.sleep(0.05)
  assert not psutil.pid_exists(worker) or psutil.Process(
      worker).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(isolation.namespace_interfaces() == ['lo'],
                    reason='this host has no interface but loopback')
def test_a_script_importing_the_runtime_first_gets_a_loopback_only_worker():
  # A plug-in script's worker, as the launcher's: no exposure to report,
  # because importing the runtime before numpy entered a private network.
  script = textwrap.dedent("""
      from one_shot_epe.tff_engine import isolation, runtime
      import tensorflow_federated as tff
      with runtime.local_cpp_context():
        assert tff.tensorflow.computation(lambda: 1)() == 1
        (worker,) = runtime.worker_processes()
        print('PRIVATE', isolation.in_private_network(worker.pid),
              isolation.exposed_listeners(worker.pid))
  """)
  env = {k: v for k, v in os.environ.items()
         if k != isolation.ISOLATION_ENV}
  done = subprocess.run([sys.executable, '-c', script], capture_output=True,
                        text=True, timeout=300, check=False, env=env)
  if done.returncode and 'cannot create a network namespace' in done.stderr:
    pytest.skip('this host refuses network namespaces')
  assert done.returncode == 0, done.stderr[-3000:]
  if 'PRIVATE False' in done.stdout:
    pytest.skip('this host refuses network namespaces (auto mode went on)')
  assert 'PRIVATE True []' in done.stdout
  assert 'EXPOSED' not in done.stderr
