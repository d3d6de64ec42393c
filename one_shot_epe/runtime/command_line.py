"""Shared command-line behaviour of the project's absl programs.

Bad input is answered with exit status 2 and a message naming the flag, never
a traceback (absl's own parser exits with status 1).

absl reads flagfiles itself, whole, with `open()`: before it does, every
flagfile a command line names (--flagfile, a program's flags whose value is
a flagfile such as reproduce's --config, and the --flagfile lines inside
them, followed as absl follows them) is read here against
`bounded_reads.FLAGFILES` (`check_flagfiles`): a flagfile that is not a
regular file, not UTF-8 text, or past the limit is refused in one line
naming it, before absl opens it.
"""

import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

from absl import flags

from one_shot_epe.runtime import bounded_reads

__all__ = ['check_flagfiles', 'check_flagfiles_or_exit', 'known_string_flags',
           'parse_flags_or_exit', 'refuse_positional_arguments',
           'requested_backend']


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """absl `flags_parser`: parses `argv`; a bad flag prints one line and exits 2.

  The line names the flag (absl's own message) and where to read about it; a
  flagfile that cannot be read, or that `check_flagfiles` refuses, is named
  with the reason.

  Args:
    argv: The program's command line, program name first.

  Returns:
    The arguments absl leaves unparsed, program name first.
  """
  check_flagfiles_or_exit(argv)
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    _exit(_error_line(error))


def _exit(line: str) -> NoReturn:
  """One line on stderr, exit status 2."""
  sys.stderr.write(f'error: {line}\n')
  sys.exit(2)


def _file_arguments(tokens: Sequence[str], names: Sequence[str]
                    ) -> Iterator[tuple[str, str]]:
  """(flag, path) of each flag of `names` in `tokens`, as absl reads them.

  A flag NAME of `names` as `--NAME=PATH` or `-NAME=PATH`, or followed by
  PATH as the next token; the scan stops at `--`.
  """
  tokens = iter(tokens)
  for token in tokens:
    if token == '--':
      return
    for name in names:
      for dashes in ('--', '-'):
        flag = dashes + name
        if token == flag:
          path = next(tokens, None)
          if path is not None:  # Without one, absl's parse refuses it.
            yield name, path
        elif token.startswith(flag + '='):
          yield name, token[len(flag) + 1:]


def check_flagfiles(argv: Sequence[str],
                    flagfile_flags: Sequence[str] = ()) -> None:
  """Reads every flagfile of `argv` against `bounded_reads.FLAGFILES`.

  The flagfiles are those of --flagfile and of each flag of
  `flagfile_flags` on the command line, and, inside them, the lines
  `--flagfile=PATH` (followed as absl follows them: relative to the working
  directory, a file already being read skipped) and those of
  `flagfile_flags`. Together they may hold at most the limit.

  Args:
    argv: The program's command line, program name first.
    flagfile_flags: Flags whose value names a flagfile (reproduce's
      --config).

  Raises:
    bounded_reads.InputRefused: a flagfile cannot be read, is not a regular
      file or not UTF-8 text, or the flagfiles hold more than the limit;
      the message names the flag and, for a nested one, the file naming it.
  """
  names = ('flagfile', *flagfile_flags)
  left = bounded_reads.FLAGFILES.max_bytes

  def visit(name: str, path: str, named_in: str | None,
            reading: list[str]) -> None:
    nonlocal left
    path = os.path.expanduser(path.strip())
    if not path or path in reading:
      return  # absl ignores an empty name and a circular flagfile.
    flag = f'--{name}' if named_in is None else (
        f'--{name} (in {named_in!r})')
    limit = bounded_reads.FLAGFILES
    if left < limit.max_bytes:
      limit = bounded_reads.Limit(
          'what is left of the flagfiles of one command line (together '
          f'{bounded_reads.size_text(limit.max_bytes)})', left)
    text = bounded_reads.read_text(path, limit, flag)
    left -= len(text.encode('utf-8'))
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith(('#', '//'))]
    for inner, inner_path in _file_arguments(lines, names):
      visit(inner, inner_path, path, [*reading, path])

  for name, path in _file_arguments(argv[1:], names):
    visit(name, path, None, [])


def check_flagfiles_or_exit(argv: Sequence[str],
                            flagfile_flags: Sequence[str] = ()) -> None:
  """`check_flagfiles`; a refusal prints its one line and exits 2.

  A program's first step, before it imports anything large.

  Args:
    argv: The program's command line, program name first.
    flagfile_flags: Flags whose value names a flagfile.
  """
  try:
    check_flagfiles(argv, flagfile_flags)
  except bounded_reads.InputRefused as refusal:
    _exit(str(refusal))


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
    flags.Error: if `argv` cannot be parsed, or a flagfile is refused
      (`check_flagfiles`; the full parse then reports it).
  """
  try:
    check_flagfiles(argv, flagfile_flags)
  except bounded_reads.InputRefused as refusal:
    raise flags.Error(str(refusal)) from None
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
