"""Argument checks with one order and one wording: (name, value, bounds).

`check_int` for counts, sizes and seeds; `check_real` for finite numbers in
an interval (noise multipliers, clips, probabilities); `check_choice` for one
of a few names; `check_ids` for 1-D arrays of integer ids; `check_sample` and
`check_cosines` for 1-D samples of finite numbers (canary statistics).

A wrong type raises `ArgumentTypeError`, a `TypeError` that is also a
`ValueError`, so code that reports bad values (the launchers' flag checks)
reports it too; a value of the right type out of range raises `ValueError`.
Messages name the argument and what is allowed. Framework-free (numpy only,
for its integer types).
"""

import math
import numbers
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ['ArgumentTypeError', 'check_choice', 'check_cosines', 'check_ids',
           'check_int', 'check_probability', 'check_real', 'check_sample']


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
               high_open: bool = False, allow_infinite: bool = False) -> float:
  """`value` as a float in the interval from `low` to `high`.

  The interval is closed unless `low_open` / `high_open`; integers qualify,
  bools do not, and NaN never passes. Infinities pass only with
  `allow_infinite` (e.g. "no noise" as an infinite noise multiplier) and
  inside the interval.

  Raises:
    ArgumentTypeError: `value` is not a real number.
    ValueError: it is NaN, infinite (unless allowed) or outside the interval.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value,
                                                           numbers.Real):
    raise ArgumentTypeError(
        f'{name} must be a real number; got {type(value).__name__} '
        f'{value!r}.')
  value = float(value)
  if (math.isnan(value) or (math.isinf(value) and not allow_infinite) or
      value < low or value > high or (low_open and value == low) or
      (high_open and value == high)):
    interval = (f'{"(" if low_open else "["}{low}, {high}'
                f'{")" if high_open else "]"}')
    kind = 'a number' if allow_infinite else 'a finite number'
    raise ValueError(f'{name} must be {kind} in {interval}; got {value!r}.')
  return value


def check_probability(name: str, value: object) -> float:
  """`check_real` on the open interval (0, 1): delta, alpha, rates."""
  return check_real(name, value, 0.0, 1.0, low_open=True, high_open=True)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
  """`value` if it is one of `choices`, else ValueError listing them."""
  if isinstance(value, str) and value in choices:
    return value
  raise ValueError(f'{name} must be one of {list(choices)}; got {value!r}.')


def check_ids(name: str, values: ArrayLike, high: int) -> np.ndarray:
  """A non-empty 1-D array of integer ids in [0, high), as int64."""
  array = np.asarray(values)
  if array.ndim != 1 or array.size == 0 or array.dtype.kind not in 'iu':
    raise ValueError(f'{name} must be a non-empty 1-D sequence of integers; '
                     f'got {values!r}.')
  if array.min() < 0 or array.max() >= high:
    raise ValueError(f'{name} must be in [0, {high}); got '
                     f'{array.min()}..{array.max()}.')
  return array.astype(np.int64)


def check_sample(name: str, values: ArrayLike, min_size: int = 2) -> np.ndarray:
  """`values` as a 1-D float64 array of at least `min_size` finite numbers.

  Raises:
    ValueError: not numbers, not 1-D, too few, or NaN/infinite entries.
  """
  try:
    array = np.asarray(values, dtype=np.float64)
  except (TypeError, ValueError):
    raise ValueError(f'{name} must be a 1-D array of numbers.') from None
  if array.ndim != 1:
    raise ValueError(f'{name} must be 1-D; got shape {array.shape}.')
  if array.size < min_size:
    raise ValueError(
        f'{name} needs at least {min_size} values; got {array.size}.')
  if not np.all(np.isfinite(array)):
    raise ValueError(f'{name} contains NaN or infinite values.')
  return array


def check_cosines(name: str, values: ArrayLike) -> np.ndarray:
  """`check_sample` for cosines: every value in [-1, 1] up to rounding (1e-6).

  Values rounded just outside [-1, 1] are clipped back onto it.
  """
  array = check_sample(name, values)
  if np.any(np.abs(array) > 1.0 + 1e-6):
    raise ValueError(f'{name} are cosines and must lie in [-1, 1].')
  return np.clip(array, -1.0, 1.0)
