"""Tests of the run-directory lock with real processes (flock semantics).

Independent truths: what another process observes (refused, with the
holder's pid, or granted), the kernel releasing the lock of a SIGKILLed
holder, and a child process that outlives its parent not keeping the lock.
"""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from one_shot_epe.runtime import run_lock

import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Tries the lock of argv[1] once; prints "refused <pid>" or "granted".
_TRY = r'''
import sys
from one_shot_epe.runtime import run_lock
try:
  run_lock.acquire(sys.argv[1]).release()
except run_lock.RunLockedError as error:
  print('refused', error.pid, str(error), sep='\n')
else:
  print('granted')
'''

# Takes the lock of argv[1] (after argv[2] exists, if given), starts a
# `sleep` that inherits every inheritable descriptor, prints "won" and the
# sleep's pid, and holds the lock until killed.
_HOLD = r'''
import os, subprocess, sys, time
from one_shot_epe.runtime import run_lock
if len(sys.argv) > 2:
  while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
try:
  lock = run_lock.acquire(sys.argv[1])
except run_lock.RunLockedError as error:
  print('refused', error.pid, flush=True)
  sys.exit(0)
child = subprocess.Popen(['sleep', '600'], close_fds=False)
print('won', child.pid, flush=True)
time.sleep(600)
'''


def _try(directory):
  done = programs.run([sys.executable, '-c', _TRY, directory], cwd=_REPO,
                      timeout=60)
  assert done.returncode == 0, done.stderr
  return done.stdout.splitlines()


def _holder(*args):
  return subprocess.Popen([sys.executable, '-c', _HOLD, *args], cwd=_REPO,
                          stdout=subprocess.PIPE, text=True,
                          start_new_session=True)


def _kill_group(process):
  try:
    os.killpg(process.pid, signal.SIGKILL)
  except ProcessLookupError:
    pass
  process.communicate()


def _lock_text(directory):
  return (pathlib.Path(directory) / run_lock.LOCK_FILE).read_text()


def test_acquire_creates_the_directory_and_writes_the_pid(tmp_path):
  directory = str(tmp_path / 'runs' / 'run')
  lock = run_lock.acquire(directory)
  assert os.listdir(directory) == [run_lock.LOCK_FILE]
  assert _lock_text(directory) == f'{os.getpid()}\n'
  lock.release()
  lock.release()  # Idempotent.
  assert _lock_text(directory) == ''  # Kept, emptied.


def test_another_process_is_refused_naming_the_holder(tmp_path):
  directory = str(tmp_path / 'run')
  with run_lock.acquire(directory):
    before = sorted(os.listdir(directory)), _lock_text(directory)
    status, pid, message = _try(directory)
    assert (sorted(os.listdir(directory)), _lock_text(directory)) == before
  assert (status, pid) == ('refused', str(os.getpid()))
  assert repr(directory) in message and f'process {os.getpid()}' in message
  assert '\n' not in message
  assert _try(directory) == ['granted']  # Released on leaving the block.


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
  with run_lock.acquire(str(tmp_path)):
    with pytest.raises(run_lock.RunLockedError) as refused:
      run_lock.acquire(str(tmp_path))
  assert refused.value.pid == os.getpid()
  assert refused.value.directory == str(tmp_path)


def test_a_killed_holder_never_blocks_and_its_child_does_not_hold(tmp_path):
  directory = str(tmp_path / 'run')
  holder = _holder(directory)
  try:
    status, child_pid = holder.stdout.readline().split()
    assert status == 'won'
    assert _try(directory)[:2] == ['refused', str(holder.pid)]
    os.kill(holder.pid, signal.SIGKILL)  # Not its group: the sleep lives on.
    holder.wait()
    os.kill(int(child_pid), 0)  # Still running, with inherited descriptors.
    assert _lock_text(directory) == f'{holder.pid}\n'  # Stale text.
    with run_lock.acquire(directory):
      assert _lock_text(directory) == f'{os.getpid()}\n'
  finally:
    _kill_group(holder)


def test_of_simultaneous_launchers_exactly_one_wins(tmp_path):
  directory = str(tmp_path / 'run')
  start = str(tmp_path / 'start')
  holders = [_holder(directory, start) for _ in range(4)]
  try:
    time.sleep(0.5)  # Let every process reach the start line.
    pathlib.Path(start).touch()
    answers = [holder.stdout.readline().split() for holder in holders]
    winners = [holder.pid for holder, answer in zip(holders, answers)
               if answer[0] == 'won']
    assert len(winners) == 1, answers
    refusals = [answer for answer in answers if answer[0] == 'refused']
    assert refusals == [['refused', str(winners[0])]] * 3
  finally:
    for holder in holders:
      _kill_group(holder)


def test_argument_and_file_errors(tmp_path):
  with pytest.raises(TypeError, match='directory must be a str'):
    run_lock.acquire(tmp_path)
  with pytest.raises(ValueError, match='non-empty'):
    run_lock.acquire('')
  not_a_directory = tmp_path / 'file'
  not_a_directory.write_text('x')
  with pytest.raises(OSError) as error:
    run_lock.acquire(str(not_a_directory))
  assert error.value.filename == str(not_a_directory)
  (tmp_path / 'run' / run_lock.LOCK_FILE).mkdir(parents=True)
  with pytest.raises(OSError) as error:
    run_lock.acquire(str(tmp_path / 'run'))
  assert error.value.filename == str(tmp_path / 'run' / run_lock.LOCK_FILE)
