"""Argument checks with one order and one wording, each parameter ruled once.

Public functions and dataclasses check their arguments where they enter, and
only there: a function is decorated with `arguments('delta', 'dim', ...)`, a
dataclass with `fields(...)`, and each named parameter is checked by its
rule in `PARAMETERS`, the one place that says what a parameter of that name
allows (a function whose parameter means something narrower passes its own
rule by keyword: `arguments(dim=Int(3))`). Inner functions take checked
values and do not check again: a decorated function carries its body as
`unchecked`, and every decorated function or dataclass its rules as `rules`
(name -> rule), which a launcher applies to the flags that are these
parameters.

The rules: `Int` for counts, sizes and seeds; `Real` for finite numbers in
an interval (noise multipliers, clips); `Probability` for (0, 1); `Choice`
for one of a few names; `Sample` and `Cosines` for 1-D samples of finite
numbers (canary statistics); `Optional` lets None through. Each is also a
function (`check_int`, `check_real`, ...) for the checks no signature
carries (an element of a list, a combination of arguments).

A wrong type raises `ArgumentTypeError`, a `TypeError` that is also a
`ValueError`, so code that reports bad values (the launchers' flag checks)
reports it too; a value of the right type out of range raises `ValueError`.
Messages name the argument and what is allowed. Framework-free (numpy only,
for its integer types).
"""

import dataclasses
import functools
import inspect
import math
import numbers
import types
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

__all__ = ['ArgumentTypeError', 'Choice', 'Cosines', 'Int', 'Optional',
           'PARAMETERS', 'Probability', 'Real', 'Rule', 'Sample', 'arguments',
           'check_choice', 'check_cosines', 'check_ids', 'check_int',
           'check_probability', 'check_real', 'check_sample', 'fields']


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

  Args:
    name: the argument's name, as the error message shows it (a flag or
      parameter name).
    value: the value to check.
    low: the smallest allowed value, or None for no lower bound.
    high: the largest allowed value, or None for no upper bound.

  Returns:
    `value` as a Python int.

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

  Args:
    name: the argument's name, as the error message shows it.
    value: the value to check.
    low: the interval's lower end (-inf: unbounded below).
    high: the interval's upper end (inf: unbounded above).
    low_open: whether `low` itself is excluded.
    high_open: whether `high` itself is excluded.
    allow_infinite: whether +-inf may pass (when inside the interval).

  Returns:
    `value` as a Python float.

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
    kind = 'a number' if allow_infinite else 'a finite number'
    raise ValueError(f'{name} must be {kind}'
                     f'{_interval(low, high, low_open, high_open)}; got '
                     f'{value!r}.')
  return value


def _interval(low: float, high: float, low_open: bool,
              high_open: bool) -> str:
  """' in [low, high]', or ' >= low' for an unbounded high end, ..."""
  if math.isinf(low) and math.isinf(high):
    return ''
  if math.isinf(high):
    return f' {">" if low_open else ">="} {low}'
  if math.isinf(low):
    return f' {"<" if high_open else "<="} {high}'
  return (f' in {"(" if low_open else "["}{low}, {high}'
          f'{")" if high_open else "]"}')


def check_probability(name: str, value: object) -> float:
  """`check_real` on the open interval (0, 1): delta, alpha, rates.

  Args:
    name: the argument's name, as the error message shows it.
    value: the value to check.

  Returns:
    `value` as a float strictly between 0 and 1.

  Raises:
    ArgumentTypeError: `value` is not a real number.
    ValueError: it is NaN or not strictly between 0 and 1.
  """
  return check_real(name, value, 0.0, 1.0, low_open=True, high_open=True)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
  """`value` if it is one of `choices`, else ValueError listing them.

  Args:
    name: the argument's name, as the error message shows it.
    value: the value to check; only a str can match.
    choices: the allowed strings.

  Returns:
    `value`, unchanged.

  Raises:
    ValueError: `value` is not one of `choices`.
  """
  if isinstance(value, str) and value in choices:
    return value
  raise ValueError(f'{name} must be one of {list(choices)}; got {value!r}.')


def check_ids(name: str, values: ArrayLike, high: int) -> np.ndarray:
  """A non-empty 1-D array of integer ids in [0, high), as int64.

  Args:
    name: the argument's name, as the error message shows it.
    values: the ids (any array-like of integers).
    high: the exclusive upper bound on every id (e.g. the number of clients).

  Returns:
    The ids as a 1-D int64 array.

  Raises:
    ValueError: `values` is not a non-empty 1-D integer array, or an id is
      outside [0, high).
  """
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

  Args:
    name: the argument's name, as the error message shows it.
    values: the sample (any array-like of numbers).
    min_size: the fewest values allowed.

  Returns:
    The sample as a 1-D float64 array.

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

  Args:
    name: the argument's name, as the error message shows it.
    values: the cosines (at least 2, as `check_sample` requires).

  Returns:
    The cosines as a 1-D float64 array clipped to [-1, 1].

  Raises:
    ValueError: `values` fails `check_sample`, or a value lies further than
      1e-6 outside [-1, 1].
  """
  array = check_sample(name, values)
  if np.any(np.abs(array) > 1.0 + 1e-6):
    raise ValueError(f'{name} are cosines and must lie in [-1, 1].')
  return np.clip(array, -1.0, 1.0)


Rule = Callable[[str, Any], Any]


@dataclasses.dataclass(frozen=True)
class Int:
  """An int in [low, high] (`check_int`); either bound may be None."""
  low: int | None = None
  high: int | None = None

  def __call__(self, name: str, value: object) -> int:
    return check_int(name, value, self.low, self.high)


@dataclasses.dataclass(frozen=True)
class Real:
  """A real number in an interval (`check_real`)."""
  low: float = -math.inf
  high: float = math.inf
  low_open: bool = False
  high_open: bool = False
  allow_infinite: bool = False

  def __call__(self, name: str, value: object) -> float:
    return check_real(name, value, self.low, self.high,
                      low_open=self.low_open, high_open=self.high_open,
                      allow_infinite=self.allow_infinite)

  def integers(self) -> Int:
    """The `Int` rule of exactly the integers this interval holds.

    For an integer flag of a real parameter (e.g. a count of clients that
    the library takes as a real > 0: the ints >= 1).

    Returns:
      `Int(low, high)` with the least and greatest integers inside the
      interval (None where it is unbounded).
    """
    low = high = None
    if math.isfinite(self.low):
      low = math.floor(self.low) + 1 if self.low_open else math.ceil(self.low)
    if math.isfinite(self.high):
      high = math.ceil(self.high) - 1 if self.high_open else math.floor(
          self.high)
    return Int(low, high)


@dataclasses.dataclass(frozen=True)
class Probability:
  """A real number in the open interval (0, 1) (`check_probability`)."""

  def __call__(self, name: str, value: object) -> float:
    return check_probability(name, value)


@dataclasses.dataclass(frozen=True)
class Choice:
  """One of `choices` (`check_choice`)."""
  choices: tuple[str, ...]

  def __call__(self, name: str, value: object) -> str:
    return check_choice(name, value, self.choices)


@dataclasses.dataclass(frozen=True)
class Sample:
  """A 1-D float64 array of at least `min_size` finite numbers."""
  min_size: int = 2

  def __call__(self, name: str, value: object) -> np.ndarray:
    return check_sample(name, value, self.min_size)


@dataclasses.dataclass(frozen=True)
class Cosines:
  """A `Sample` of cosines in [-1, 1] (`check_cosines`)."""

  def __call__(self, name: str, value: object) -> np.ndarray:
    return check_cosines(name, value)


@dataclasses.dataclass(frozen=True)
class Optional:
  """None, or a value that passes `rule`."""
  rule: Rule

  def __call__(self, name: str, value: object) -> Any:
    return None if value is None else self.rule(name, value)


_POSITIVE = Real(0.0, low_open=True)
_NON_NEGATIVE = Real(0.0)
_COUNT = Int(1)

# What each parameter of the project allows, by its name (see the module
# docstring). Every name means the same thing wherever it appears.
PARAMETERS: dict[str, Rule] = {
    # Privacy parameters (Sections 3 and 5).
    'delta': Probability(),
    # The error probability of a 1 - alpha lower bound: a level below one
    # half (every door takes it by this rule: the launcher, the epsilon
    # command line, both `CanaryAudit`s).
    'alpha': Real(0.0, 0.5, low_open=True, high_open=True),
    'epsilon': _POSITIVE,
    'noise_multiplier': _NON_NEGATIVE,
    'sigma': _POSITIVE,
    'mu': Real(),
    'clip': _POSITIVE,
    'sensitivity': _POSITIVE,
    # Sizes and counts.
    'dim': _COUNT,
    'rounds': _COUNT,
    'num_rounds': _COUNT,
    'total_rounds': _COUNT,
    'num_clients': _COUNT,
    'num_canaries': _COUNT,
    'num_seen': _COUNT,
    'num_unseen': Int(0),
    'repetitions': _COUNT,
    'clients_per_round': _POSITIVE,
    'examples_per_client': _COUNT,
    'vocab_size': _COUNT,
    'embedding_size': _COUNT,
    'lstm_size': _COUNT,
    'trials': _COUNT,
    'resamples': _COUNT,
    'bootstrap_resamples': _COUNT,
    'chunk_size': _COUNT,
    'rounds_per_checkpoint': _COUNT,
    'round_index': Int(0),
    'seed': Int(0),
    # Optimisation.
    # A learning rate of 0 trains nothing (at the server it leaves
    # theta_T - theta_0 zero, whose cosines are undefined); a momentum of 1
    # never forgets a step.
    'learning_rate': _POSITIVE,
    'momentum': Real(0.0, 1.0, high_open=True),
    # Canary scores.
    'cosines': Cosines(),
    'seen': Sample(),
    'unseen': Sample(),
    'sample': Sample(),
}

_Function = TypeVar('_Function', bound=Callable[..., Any])


def _rules(names: Sequence[str], rules: dict[str, Rule]) -> dict[str, Rule]:
  unknown = [name for name in names if name not in PARAMETERS]
  if unknown:
    raise KeyError(f'no rule for {unknown} in validation.PARAMETERS; pass '
                   'one by keyword.')
  return {**{name: PARAMETERS[name] for name in names}, **rules}


def arguments(*names: str, **rules: Rule) -> Callable[[_Function], _Function]:
  """Decorator: checks the named arguments of each call, then calls.

  Each argument is replaced by what its rule returns (an int, a float, a
  float64 array), so the function body sees checked, converted values.
  Arguments left at their default are not checked. The decorated function
  carries the undecorated one as `unchecked`: a function of the package
  that already holds checked values calls `name.unchecked(...)` and checks
  nothing twice. Its rules, by parameter name, are its `rules`.

  Args:
    *names: Parameters checked by their rule in `PARAMETERS`.
    **rules: Parameters checked by the rule given here instead.

  Returns:
    The decorator.

  Raises:
    KeyError: if a name has no rule in `PARAMETERS`.
    TypeError: (when decorating) if the function lacks a named parameter.
  """
  checks = _rules(names, rules)

  def decorate(function: _Function) -> _Function:
    signature = inspect.signature(function)
    missing = [name for name in checks if name not in signature.parameters]
    if missing:
      raise TypeError(f'{function.__qualname__} has no parameters {missing}.')

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
      bound = signature.bind(*args, **kwargs)
      for name, rule in checks.items():
        if name in bound.arguments:
          bound.arguments[name] = rule(name, bound.arguments[name])
      return function(*bound.args, **bound.kwargs)

    # The body without the checks, for callers that hold checked values.
    checked.unchecked = function  # type: ignore[attr-defined]
    checked.rules = types.MappingProxyType(checks)  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]

  return decorate


_Class = TypeVar('_Class', bound=type)


def fields(*names: str, **rules: Rule) -> Callable[[_Class], _Class]:
  """Class decorator for a (frozen) dataclass: checks the named fields.

  The fields are checked and converted after `__init__`, before the class's
  own `__post_init__` (which keeps the checks that combine fields). The
  class carries its rules, by field name, as `rules`.

  Args:
    *names: Fields checked by their rule in `PARAMETERS`.
    **rules: Fields checked by the rule given here instead.

  Returns:
    The decorator.

  Raises:
    KeyError: if a name has no rule in `PARAMETERS`.
  """
  checks = _rules(names, rules)

  def decorate(cls: _Class) -> _Class:
    own = cls.__dict__.get('__post_init__')

    def check(self) -> None:
      for name, rule in checks.items():
        object.__setattr__(self, name, rule(name, getattr(self, name)))

    if own is not None:  # The dataclass's __init__ calls __post_init__.
      def post_init(self) -> None:
        check(self)
        own(self)

      cls.__post_init__ = functools.wraps(own)(post_init)
    else:
      init = cls.__init__

      def checked_init(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        check(self)

      cls.__init__ = functools.wraps(init)(checked_init)
    cls.rules = types.MappingProxyType(checks)
    return cls

  return decorate
