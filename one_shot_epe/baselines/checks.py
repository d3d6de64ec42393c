"""Argument checks shared by the CANIFE modules: ValueErrors that name the argument."""

import math
from typing import Any


def open_unit_interval(name: str, value: Any) -> float:
  """`value` as a float in (0, 1): a probability or a delta."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    raise ValueError(
        f'{name} must be a number in (0, 1); got {value!r}.') from None
  if not 0.0 < number < 1.0:
    raise ValueError(f'{name} must be a number in (0, 1); got {value!r}.')
  return number


def non_negative(name: str, value: Any) -> float:
  """`value` as a float in [0, inf] (infinity allowed: no noise, or eps = inf)."""
  try:
    number = float(value)
  except (TypeError, ValueError):
    raise ValueError(
        f'{name} must be a number in [0, inf]; got {value!r}.') from None
  if math.isnan(number) or number < 0.0:
    raise ValueError(f'{name} must be a number in [0, inf]; got {value!r}.')
  return number
