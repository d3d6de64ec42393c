"""Tests of one_shot_epe.runtime.interrupts: the line, and `deferred`.

Independent truth: real signals sent to this process (`os.kill`) and
`_thread.interrupt_main`, with the order of what happened recorded: a
signal inside a `deferred` block must come out as the interrupt its
previous handler raises, at the block's end and only there, and the
handlers must be as they were.
"""

import _thread
import os
import signal
import threading

import pytest

from one_shot_epe.runtime import interrupts


def test_the_line_names_the_round_the_rerun_resumes_from():
  assert interrupts.resume_line(7, 30, saved=True) == (
      'interrupted after round 7 of 30; rerun the same command to resume '
      'from round 7')
  assert interrupts.resume_line(3, 4, 'runs/noise0_rep1', saved=True) == (
      'interrupted after round 3 of 4 (runs/noise0_rep1); rerun the same '
      'command to resume from round 3')
  assert interrupts.resume_line(7, 30) == (
      'interrupted after round 7 of 30; rerun the same command to resume')


def _handlers():
  return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_in_the_block_interrupts_at_its_end(signum):
  before = _handlers()
  events = []
  with pytest.raises(KeyboardInterrupt):
    with interrupts.stop_on_signals():
      with interrupts.deferred():
        os.kill(os.getpid(), signum)
        events.append('after the signal')
        os.kill(os.getpid(), signum)  # A second one changes nothing.
        events.append('block done')
      events.append('after the block')  # Not reached.
  assert events == ['after the signal', 'block done']
  assert _handlers() == before


def test_a_block_without_a_signal_changes_nothing():
  before = _handlers()
  with interrupts.deferred():
    inside = _handlers()
  assert inside != before  # The signals were held while it ran.
  assert _handlers() == before


def test_blocks_nest_and_the_interrupt_waits_for_the_outer_one():
  events = []
  with pytest.raises(KeyboardInterrupt):
    with interrupts.deferred():
      with interrupts.deferred():
        _thread.interrupt_main()  # As Ray cancels a task.
        events.append('inner done')
      events.append('outer done')
  assert events == ['inner done', 'outer done']


def test_the_blocks_own_exception_is_the_interrupts_context():
  with pytest.raises(KeyboardInterrupt) as raised:
    with interrupts.deferred():
      os.kill(os.getpid(), signal.SIGINT)
      raise OSError('disk full')
  assert isinstance(raised.value.__context__, OSError)


def test_an_ignored_signal_stays_ignored():
  previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
  try:
    with interrupts.deferred():
      os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
  finally:
    signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_the_block_does_nothing():
  seen = []

  def body():
    with interrupts.deferred():
      seen.append(_handlers())

  before = _handlers()
  thread = threading.Thread(target=body)
  thread.start()
  thread.join()
  assert seen == [before]
