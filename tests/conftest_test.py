"""Tests of the suite's leak checks (tests/conftest.py).

Each case runs a one-test pytest session in a subprocess, with this suite's
conftest, and a test that leaves one kind of thing behind; the session must
fail and name it. A clean test must pass, so the checks do not fire on
their own.
"""

import os
import shutil
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_LEAKS = {
    'clean': ('', None),
    'temporary file': (
        'import tempfile\n'
        'tempfile.NamedTemporaryFile(delete=False).close()\n',
        'left in the temporary directory'),
    'child process': (
        'import subprocess\n'
        "subprocess.Popen(['sleep', '60'])\n",
        'child processes left running'),
    'listening socket': (
        'import socket\n'
        '_SOCKETS.append(socket.create_server(("127.0.0.1", 0)))\n',
        'sockets left listening'),
}


@pytest.mark.parametrize('case', list(_LEAKS))
def test_session_fails_on_a_leak(tmp_path, case):
  body, message = _LEAKS[case]
  shutil.copy(os.path.join(_REPO, 'tests', 'conftest.py'), tmp_path)
  test_body = ''.join('  ' + line + '\n' for line in body.splitlines())
  (tmp_path / 'leak_test.py').write_text(
      '_SOCKETS = []\n\n\ndef test_leak():\n' + (test_body or '  pass\n'))
  env = dict(os.environ, PYTHONPATH=_REPO)
  done = subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
       str(tmp_path / 'leak_test.py')],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
      check=False)
  if message is None:
    assert done.returncode == 0, done.stdout[-2000:]
  else:
    assert done.returncode != 0, done.stdout[-2000:]
    assert message in done.stdout
