"""Suite-wide fixtures: nothing leaks; a network-call recorder.

At the end of the session the suite fails if anything it started is still
there: a TFF worker or any other child process, a listening socket of this
process or a child, or a file or directory left in the session's temporary
directory. The session gets a temporary directory of its own (TMPDIR and
`tempfile.tempdir`, inherited by subprocesses), so the check sees only what
the suite and the code under test created. Exempt are pytest's own
`tmp_path` directories (under `pytest-of-<user>`), TensorFlow autograph's
generated sources and matplotlib's fallback config directory, which their
libraries delete at interpreter exit. The
directory is removed at the end unless a test failed.

"""

import contextlib
import os
import shutil
import signal
import tempfile
import urllib.request

import psutil
import pytest

from one_shot_epe.tff_engine import runtime

# pytest's tmp_path directories; the source files TensorFlow's autograph
# writes for each converted function, and the config directory matplotlib
# makes when HOME is not writable (as in Bazel's sandbox), both deleted by
# their library at interpreter exit.
_EXEMPT_TEMP_PREFIXES = ('pytest-of-', '__autograph_generated_file',
                         'matplotlib-')


def pytest_configure(config):
  # A suite started in the background (`make test &`, nohup) inherits an
  # ignored SIGINT, and so would every TFF worker it starts; TFF's own local
  # executor (`ServiceManager.__del__`, TFF's test contexts) stops its worker
  # with SIGINT and waits without a timeout, which would then never return.
  if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
  # Under pytest-xdist each worker makes its own inside the controller's.
  config.session_temp = tempfile.mkdtemp(prefix='one_shot_epe_tests_')
  os.environ['TMPDIR'] = config.session_temp
  tempfile.tempdir = config.session_temp


def pytest_unconfigure(config):
  # The controller's directory, once its workers have removed theirs.
  with contextlib.suppress(OSError):
    os.rmdir(config.session_temp)


def _listening_sockets(processes):
  found = []
  for process in processes:
    try:
      found += [(process.pid, conn.laddr) for conn in
                process.net_connections(kind='inet')
                if conn.status == psutil.CONN_LISTEN]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      continue
  return found


@pytest.fixture(autouse=True, scope='session')
def _nothing_leaks(request):
  session_temp = tempfile.gettempdir()
  yield
  leftover_workers = runtime.worker_processes()
  runtime.shutdown_workers()
  me = psutil.Process()
  children = [child for child in me.children(recursive=True)
              if child.status() != psutil.STATUS_ZOMBIE]
  sockets = _listening_sockets([me, *children])
  leftover_files = sorted(name for name in os.listdir(session_temp)
                          if not name.startswith(_EXEMPT_TEMP_PREFIXES))
  for child in children:
    child.kill()
  if request.session.testsfailed:
    print(f'\nTemporary files of this session kept in {session_temp}')
  else:
    shutil.rmtree(session_temp, ignore_errors=True)
  assert not leftover_workers, (
      f'TFF worker processes left running: {leftover_workers}')
  assert not children, f'child processes left running: {children}'
  assert not sockets, f'sockets left listening: {sockets}'
  assert not leftover_files, (
      f'left in the temporary directory: {leftover_files}')


@pytest.fixture(name='network_calls')
def fixture_network_calls(monkeypatch):
  """Records (and refuses) every call into TFF's download path or urlopen."""
  from tensorflow_federated.python.simulation.datasets import download  # pylint: disable=g-import-not-at-top
  calls = []

  def refuse(*args, **kwargs):
    calls.append((args, kwargs))
    raise AssertionError('network access attempted')

  monkeypatch.setattr(urllib.request, 'urlopen', refuse)
  monkeypatch.setattr(download, '_fetch_lzma_file', refuse)
  return calls
