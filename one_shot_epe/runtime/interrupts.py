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
same command to resume". A block that must complete or not start (a
round's bookkeeping) runs inside `deferred_signals`: SIGINT and SIGTERM
received meanwhile are delivered when it ends. Framework-free.
"""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

__all__ = ['EXIT_STATUS', 'Interrupted', 'deferred_signals',
           'exit_interrupted', 'resume_line', 'stop_on_signals']

# The exit status of a program stopped by a signal it was asked to stop on
# (128 + SIGINT's number, the shell's convention).
EXIT_STATUS = 130


class Interrupted(KeyboardInterrupt):
  """An interrupt that knows how far the work got; its message says so.

  A `KeyboardInterrupt`, so that code that lets interrupts through lets it
  through too.
  """


def resume_line(round_num: int, total_rounds: int, what: str = '') -> str:
  """The one line of an interrupted run.

  Args:
    round_num: The last round completed (0: none).
    total_rounds: T, the run's rounds.
    what: The run, for a program of several (e.g. its directory); '' for
      one.

  Returns:
    'interrupted after round N of T[ (<what>)]; rerun the same command to
    resume'.
  """
  run = f' ({what})' if what else ''
  return (f'interrupted after round {round_num} of {total_rounds}{run}; rerun '
          'the same command to resume')


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


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
  """The block that SIGINT and SIGTERM do not interrupt: they wait for its end.

  In the main thread (where Python runs signal handlers), each signal's
  handler installed from Python is replaced for the block by one that notes
  the signal; at the block's end the handlers are restored and each noted
  signal is raised again, once, so that its handler (Python's, the
  program's, a framework's) runs then. Elsewhere the block runs as is: no
  handler runs in its thread.

  Yields:
    None.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  noted = []
  held = {}
  for signum in (signal.SIGINT, signal.SIGTERM):
    if signal.getsignal(signum) is not None:  # None: not set from Python.
      held[signum] = signal.signal(
          signum, lambda number, frame: noted.append(number))
  try:
    yield
  finally:
    for signum, handler in held.items():
      signal.signal(signum, handler)
    for signum in dict.fromkeys(noted):
      signal.raise_signal(signum)


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
