"""The benchmarks' tiny mode: `--tiny` runs a benchmark at toy size in seconds.

Every program in benchmarks/ takes --tiny: its imports, its flags and one
measurement at toy size, so that a moved or renamed name breaks a test
(tests/benchmarks_tiny_test.py runs each tiny mode) rather than a user's
full-size run. Flags given on the command line beside --tiny keep their
values; the figures a tiny run prints measure nothing worth reading.
"""

import dataclasses
import types
from collections.abc import Mapping
from typing import Any

from absl import flags

HELP = ('Toy sizes, in seconds: the imports, flags and one measurement '
        '(tests/benchmarks_tiny_test.py); the figures mean nothing.')


@dataclasses.dataclass(frozen=True)
class Fixed:
  """A flag's value set by --tiny, read like an absl `FlagHolder`.

  Attributes:
    value: the toy value.
    present: False: the command line did not give it.
  """
  value: Any
  present: bool = False


def define_flag(flag_values: flags.FlagValues) -> flags.FlagHolder[bool]:
  """Registers --tiny in `flag_values`.

  Args:
    flag_values: where the program's flags are registered.

  Returns:
    The flag's holder.
  """
  return flags.DEFINE_bool('tiny', False, HELP, flag_values=flag_values)


def shrink(holders: types.SimpleNamespace, sizes: Mapping[str, Any]) -> bool:
  """With --tiny: each flag of `sizes` not given reads its toy value.

  Args:
    holders: the program's flag holders by name (its `tiny` among them);
      those shrunk are replaced by `Fixed` values.
    sizes: flag name -> toy value.

  Returns:
    Whether --tiny is set.
  """
  if not holders.tiny.value:
    return False
  for name, value in sizes.items():
    if not getattr(holders, name).present:
      setattr(holders, name, Fixed(value))
  return True
