"""Ctrl-C and SIGTERM end a long program with one line, its state consistent.

A long program (a training run, a grid of runs, a Flower audit) runs inside
`stop_on_signals`: SIGTERM is made to raise `KeyboardInterrupt` as Ctrl-C
(SIGINT) does, so both unwind the same way: every `finally` and context
manager runs (execution contexts and worker processes shut down, the run
lock released, temporary files of an unfinished atomic write removed; a
checkpoint is complete or absent), and the program's top level turns the
interrupt into one line on stderr and exit status 130 (`exit_interrupted`),
never a traceback. The code that knows how far the work got raises
`Interrupted` with that line: "interrupted after round N of T; rerun the
same command to resume from round N" where round N was saved on the way
out.

An interrupt may land anywhere, also between two updates that belong
together (a round's record, its cosines, its checkpoint). Such bookkeeping
runs inside `deferred`: a signal that arrives there is recorded and raised
again once the block is done, so what the process holds in memory always
corresponds to whole rounds when the interrupt unwinds it. Framework-free.
"""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

__all__ = ['EXIT_STATUS', 'Interrupted', 'deferred', 'exit_interrupted',
           'resume_line', 'stop_on_signals']

# The exit status of a program stopped by a signal it was asked to stop on
# (128 + SIGINT's number, the shell's convention).
EXIT_STATUS = 130


class Interrupted(KeyboardInterrupt):
  """An interrupt that knows how far the work got; its message says so.

  A `KeyboardInterrupt`, so that code that lets interrupts through lets it
  through too.
  """


def resume_line(round_num: int, total_rounds: int, what: str = '',
                saved: bool = False) -> str:
  """The one line of an interrupted run.

  Args:
    round_num: The last round completed (0: none).
    total_rounds: T, the run's rounds.
    what: The run, for a program of several (e.g. its directory); '' for
      one.
    saved: Whether round `round_num` was saved, so that the rerun resumes
      from it (the line says so).

  Returns:
    'interrupted after round N of T[ (<what>)]; rerun the same command to
    resume[ from round N]'.
  """
  run = f' ({what})' if what else ''
  where = f' from round {round_num}' if saved else ''
  return (f'interrupted after round {round_num} of {total_rounds}{run}; rerun '
          f'the same command to resume{where}')


def _raise_interrupt(signum: int, frame: object) -> None:
  """The SIGTERM handler: the interrupt Ctrl-C raises."""
  del signum, frame
  raise KeyboardInterrupt


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
  """The block in which SIGTERM interrupts as Ctrl-C does.

  Yields:
    None; the previous SIGTERM handler is restored on leaving.
  """
  previous = signal.signal(signal.SIGTERM, _raise_interrupt)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


# The signals `deferred` holds back: those a long program stops on.
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
  """The block in which SIGINT and SIGTERM wait for the block to end.

  For work that must not be cut in half by an interrupt (a round's
  bookkeeping, a checkpoint saved on the way out). Inside the block each of
  the two signals is recorded instead of handled; on leaving it (however it
  is left) the handlers that were installed before are back, and the first
  signal recorded is raised again (`signal.raise_signal`), so that its
  handler runs then: Ctrl-C's `KeyboardInterrupt` (or that of SIGTERM under
  `stop_on_signals`) comes out of the block's end, after its work. A
  signal whose previous handler ignores it stays ignored; one whose handler
  was not installed from Python is left alone.

  Blocks nest (an inner block's signal reaches the outer one's record and
  waits for the outer block). `_thread.interrupt_main` (which Ray's
  cancellation uses) is deferred as a SIGINT is.

  Main thread only: Python runs signal handlers in the main thread alone and
  lets only the main thread install them, so entered from any other thread
  the block does nothing (no handler is touched) and protects nothing: an
  interrupt then reaches the main thread at once, wherever it is, and
  nothing waits for the other thread's block. Bookkeeping that must not be
  cut in half therefore runs in the main thread.

  Yields:
    None.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received: list[int] = []

  def record(signum: int, frame: object) -> None:
    del frame
    received.append(signum)

  previous = {}
  try:
    for signum in _DEFERRED_SIGNALS:
      if signal.getsignal(signum) is not None:
        previous[signum] = signal.signal(signum, record)
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
    if received:
      signal.raise_signal(received[0])


def exit_interrupted(error: KeyboardInterrupt, otherwise: str) -> NoReturn:
  """Ends the program for an interrupt: one line on stderr, status 130.

  Called once the interrupt has unwound the program (every `finally` and
  context manager has run). The process then ends at once (`os._exit`),
  after flushing its output, so that no thread a framework left running (a
  checkpoint being saved in the background, say) writes or logs after the
  line; what such a thread leaves is a killed run's leftovers, which the
  rerun removes before it resumes (`run_directory.owned`).

  Args:
    error: The interrupt: an `Interrupted`, whose message is the line, or a
      plain `KeyboardInterrupt`.
    otherwise: The line for a plain interrupt (where the program stopped
      and what to do), e.g. 'interrupted before training began; nothing was
      written: rerun the same command'. It does not return: the process
      exits with `EXIT_STATUS`.
  """
  line = (str(error) if isinstance(error, Interrupted) and str(error) else
          otherwise)
  sys.stdout.flush()
  sys.stderr.write(f'{line}\n')
  sys.stderr.flush()
  os._exit(EXIT_STATUS)  # pylint: disable=protected-access
