"""Shared command-line behaviour of the project's absl programs.

Bad input is answered with exit status 2 and a message naming the flag, never
a traceback (absl's own parser exits with status 1).
"""

import sys

from absl import flags


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """absl `flags_parser`: parses `argv`; a bad flag prints why and exits 2."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    sys.stderr.write(f'FATAL Flags parsing error: {error}\n'
                     'Pass --helpshort or --helpfull to see help on flags.\n')
    sys.exit(2)
