"""Shared command-line behaviour of the project's absl programs.

Bad input is answered with exit status 2 and a message naming the flag, never
a traceback (absl's own parser exits with status 1).
"""

import re
import sys
from collections.abc import Sequence

from absl import flags

__all__ = ['known_string_flags', 'parse_flags_or_exit',
           'refuse_positional_arguments', 'requested_backend']


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """absl `flags_parser`: parses `argv`; a bad flag prints one line and exits 2.

  The line names the flag (absl's own message) and where to read about it; a
  flagfile that cannot be read is named with the reason.

  Args:
    argv: The program's command line, program name first.

  Returns:
    The arguments absl leaves unparsed, program name first.
  """
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    sys.stderr.write(f'error: {_error_line(error)}\n')
    sys.exit(2)


def refuse_positional_arguments(argv: Sequence[str]) -> None:
  """A program's `main` takes flags only: any other argument exits 2.

  absl's `app.run` answers the `app.UsageError` raised here with the
  program's usage and the message, and exits with its status 2.

  Args:
    argv: What absl leaves of the command line, program name first.

  Raises:
    app.UsageError: `argv` holds more than the program name.
  """
  # Imported here: importing absl.app defines its flags, which a module's
  # import must not do (tests/import_side_effects_test.py).
  from absl import app  # pylint: disable=g-import-not-at-top
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {list(argv[1:])}',
                         exitcode=2)


# absl's message for a flagfile it cannot open (also one named inside another).
_UNREADABLE_FLAGFILE = re.compile(
    r"Unable to open flagfile: \[Errno \d+\] (?P<reason>[^:]+): '(?P<path>.*)'")


def _error_line(error: flags.Error) -> str:
  """One line for absl's `error`: the flag, or the flagfile, and what is wrong."""
  unreadable = _UNREADABLE_FLAGFILE.search(str(error))
  if unreadable:
    return (f"--flagfile '{unreadable['path']}' cannot be read: "
            f"{unreadable['reason']}.")
  return f'{error} (--helpshort lists the flags)'


def known_string_flags(argv: Sequence[str], names: Sequence[str],
                       flagfile_flags: Sequence[str] = ()) -> flags.FlagValues:
  """String flags `names` of `argv`, before the program's full parse.

  absl with known_only: every other flag is skipped. Follows --flagfile and
  each flag of `flagfile_flags` whose value is a flagfile (reproduce's
  --config, whose values the command line overrides). Imports nothing beyond
  absl, so a program can read these before it imports numpy or TensorFlow.

  Args:
    argv: The program's command line, program name first.
    names: The string flags to read.
    flagfile_flags: Flags whose value names a flagfile to follow (read
      before the command line, which overrides them); they are read too.

  Returns:
    A `flags.FlagValues` holding the flags of `names` and `flagfile_flags`
    (None where the command line does not set one).

  Raises:
    flags.Error: if `argv` cannot be parsed (the full parse then reports it).
  """
  names = (*names, *(name for name in flagfile_flags if name not in names))

  def parse(args: Sequence[str]) -> flags.FlagValues:
    values = flags.FlagValues()
    for name in names:
      flags.DEFINE_string(name, None, '', flag_values=values)
    values(list(args), known_only=True)
    return values

  values = parse(argv)
  files = [f'--flagfile={values[name].value}' for name in flagfile_flags
           if values[name].value]
  return parse([argv[0], *files, *argv[1:]]) if files else values


def requested_backend(argv: Sequence[str],
                      flagfile_flags: Sequence[str] = ()) -> str:
  """The --backend of a command line: 'tff' (default) or what it names.

  Lets a program pick its engine before importing numpy or TensorFlow
  (flagfiles followed as `known_string_flags`). An unparsable command line
  counts as 'tff', whose full parse then reports the error; a value that is
  not a backend is returned as given, for the full parse to refuse.

  Args:
    argv: The program's command line, program name first.
    flagfile_flags: Flags whose value names a flagfile to follow.

  Returns:
    The value of --backend, or 'tff' when it is unset or `argv` cannot be
    parsed.
  """
  try:
    backend = known_string_flags(argv, ('backend',), flagfile_flags).backend
  except flags.Error:
    return 'tff'
  return backend or 'tff'
