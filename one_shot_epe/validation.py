"""Argument checks with one order and one wording: (name, value, bounds).

`check_int` for counts, sizes and seeds; `check_real` for finite numbers in
an interval (noise multipliers, clips, probabilities).

A wrong type raises `ArgumentTypeError`, a `TypeError` that is also a
`ValueError`, so code that reports bad values (the launchers' flag checks)
reports it too; a value of the right type out of range raises `ValueError`.
Messages name the argument and what is allowed. Framework-free (numpy only,
for its integer types).
"""

import math
import numbers

import numpy as np


class ArgumentTypeError(TypeError, ValueError):
  """An argument of the wrong type (also a ValueError; see module docstring)."""


def _bounds(low: int | None, high: int | None) -> str:
  if low is not None and high is not None:
    return f'in [{low}, {high}]'
  if low is not None:
    return f'>= {low}'
  return f'<= {high}'


def check_int(name: str, value: object, low: int | None = None,
              high: int | None = None) -> int:
  """`value` as an int in [low, high] (either bound may be None).

  Python and numpy integers qualify; bools do not.

  Raises:
    ArgumentTypeError: `value` is not an integer.
    ValueError: it is out of range.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, numbers.Integral):
    raise ArgumentTypeError(
        f'{name} must be an int; got {type(value).__name__} {value!r}.')
  if (low is not None and value < low) or (high is not None and value > high):
    raise ValueError(f'{name} must be {_bounds(low, high)}; got {value}.')
  return int(value)


def check_real(name: str, value: object, low: float = -math.inf,
               high: float = math.inf, *, low_open: bool = False,
               high_open: bool = False) -> float:
  """`value` as a finite float in the interval from `low` to `high`.

  The interval is closed unless `low_open` / `high_open`; integers qualify,
  bools do not, and NaN and infinities never pass.

  Raises:
    ArgumentTypeError: `value` is not a real number.
    ValueError: it is not finite or lies outside the interval.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value,
                                                           numbers.Real):
    raise ArgumentTypeError(
        f'{name} must be a real number; got {type(value).__name__} '
        f'{value!r}.')
  value = float(value)
  if (not math.isfinite(value) or value < low or value > high or
      (low_open and value == low) or (high_open and value == high)):
    interval = (f'{"(" if low_open else "["}{low}, {high}'
                f'{")" if high_open else "]"}')
    raise ValueError(f'{name} must be a finite number in {interval}; got '
                     f'{value!r}.')
  return value
