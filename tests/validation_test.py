"""Tests of one_shot_epe.validation: types, bounds and messages."""

import dataclasses
import math

import numpy as np
import pytest

from one_shot_epe import validation


def test_integers_in_range_pass_as_python_ints():
  assert validation.check_int('n', 3, low=1) == 3
  value = validation.check_int('n', np.int64(7), low=0, high=7)
  assert value == 7 and type(value) is int  # pylint: disable=unidiomatic-typecheck
  assert validation.check_int('n', -5) == -5


@pytest.mark.parametrize('value', [True, np.bool_(False), 1.0, '3', None,
                                   np.float32(2)])
def test_wrong_types_raise_a_type_error_that_is_also_a_value_error(value):
  with pytest.raises(TypeError, match=r'^count must be an int; got '):
    validation.check_int('count', value, low=0)
  with pytest.raises(ValueError):
    validation.check_int('count', value, low=0)


@pytest.mark.parametrize('low, high, value, message', [
    (1, None, 0, 'count must be >= 1; got 0.'),
    (None, 4, 5, 'count must be <= 4; got 5.'),
    (2, 4, 1, r'count must be in \[2, 4\]; got 1.'),
    (2, 4, 5, r'count must be in \[2, 4\]; got 5.'),
])
def test_out_of_range_names_the_argument_and_the_range(low, high, value,
                                                       message):
  with pytest.raises(ValueError, match=message) as raised:
    validation.check_int('count', value, low=low, high=high)
  assert not isinstance(raised.value, TypeError)


@pytest.mark.parametrize('kwargs, value, message', [
    (dict(low=0.0), -0.5, r'rate must be a finite number >= 0.0'),
    (dict(low=0.0, low_open=True), 0.0, r'rate must be a finite number > 0.0; got 0.0'),
    (dict(low=0.0, high=1.0), 1.5, r'in \[0.0, 1.0\]; got 1.5'),
    (dict(high=1.0, high_open=True), 1.0, r'must be a finite number < 1.0; got 1.0'),
    # An infinity is named as such, not as the end of an interval.
    (dict(low=0.0), math.inf, r'rate must be a finite number >= 0.0; got inf'),
    (dict(), float('nan'), 'finite'),
    (dict(), float('inf'), 'finite'),
])
def test_reals_out_of_their_interval_are_named(kwargs, value, message):
  with pytest.raises(ValueError, match=message):
    validation.check_real('rate', value, **kwargs)


def test_reals_accept_ints_and_numpy_and_reject_other_types():
  assert validation.check_real('rate', 1, low=0.0) == 1.0
  assert validation.check_real('rate', np.float32(0.5), high=1.0) == 0.5
  for value in (True, '0.5', None):
    with pytest.raises(validation.ArgumentTypeError,
                       match='rate must be a real number'):
      validation.check_real('rate', value)


def test_infinity_passes_only_when_allowed_and_inside_the_interval():
  assert validation.check_real('noise', float('inf'), 0.0,
                               allow_infinite=True) == float('inf')
  with pytest.raises(ValueError, match=r'noise must be a number in \[0.0, 5'):
    validation.check_real('noise', float('inf'), 0.0, 5.0, allow_infinite=True)
  with pytest.raises(ValueError, match='must be a number'):
    validation.check_real('noise', float('nan'), allow_infinite=True)


@pytest.mark.parametrize('value', [0.0, 1.0, -0.1, 1.1])
def test_probabilities_lie_in_the_open_unit_interval(value):
  assert validation.check_probability('delta', 0.25) == 0.25
  with pytest.raises(ValueError, match=r'delta must be a finite number in '
                     r'\(0.0, 1.0\)'):
    validation.check_probability('delta', value)


@pytest.mark.parametrize('values, min_size, message', [
    ([[0.1, 0.2]], 2, r'seen must be 1-D; got shape \(1, 2\)'),
    ([0.1], 2, 'seen needs at least 2 values; got 1'),
    ([0.1, float('nan')], 2, 'seen contains NaN or infinite values'),
    (['a', 'b'], 2, 'seen must be a 1-D array of numbers'),
    ([], 1, 'seen needs at least 1 values; got 0'),
])
def test_bad_samples_are_named(values, min_size, message):
  with pytest.raises(ValueError, match=message):
    validation.check_sample('seen', values, min_size)


def test_samples_come_back_as_float64_and_cosines_are_clipped_onto_the_sphere():
  sample = validation.check_sample('seen', [1, 2, 3])
  assert sample.dtype == np.float64 and sample.tolist() == [1.0, 2.0, 3.0]
  cosines = validation.check_cosines('seen', [1.0 + 1e-9, -1.0 - 1e-9, 0.5])
  assert cosines.tolist() == [1.0, -1.0, 0.5]
  with pytest.raises(ValueError, match=r'seen are cosines and must lie in '
                     r'\[-1, 1\]'):
    validation.check_cosines('seen', [0.5, 1.01])


def test_arguments_checks_and_converts_the_named_arguments_only():
  calls = []

  @validation.arguments('delta', dim=validation.Int(3))
  def function(name, delta, dim=10):
    calls.append((name, delta, dim))
    return delta

  assert function('a', 1 / 4, np.int64(5)) == 0.25
  assert calls[-1] == ('a', 0.25, 5) and type(calls[-1][2]) is int
  function(name='b', delta=0.5)  # A default is not checked.
  with pytest.raises(ValueError, match=r'delta must be a finite number in '
                     r'\(0.0, 1.0\); got 1.0'):
    function('c', 1.0)
  with pytest.raises(ValueError, match='dim must be >= 3; got 2'):
    function('c', 0.5, dim=2)
  assert len(calls) == 2
  with pytest.raises(KeyError, match='no rule'):
    validation.arguments('no_such_parameter')
  with pytest.raises(TypeError, match='has no parameters'):
    validation.arguments('delta')(lambda x: x)


def test_fields_checks_a_dataclass_before_its_own_post_init():
  seen = []

  @validation.fields('delta', count=validation.Int(1))
  @dataclasses.dataclass(frozen=True)
  class WithPostInit:
    delta: float
    count: int = 1

    def __post_init__(self):
      seen.append(type(self.count))

  @validation.fields('noise_multiplier')
  @dataclasses.dataclass(frozen=True)
  class Plain:
    noise_multiplier: float

  assert WithPostInit(0.5, np.int32(2)).count == 2 and seen == [int]
  with pytest.raises(ValueError, match='count must be >= 1'):
    WithPostInit(0.5, 0)
  assert len(seen) == 1
  assert Plain(1).noise_multiplier == 1.0
  with pytest.raises(ValueError, match='noise_multiplier must be a finite '
                     'number >= 0.0; got inf'):
    Plain(math.inf)


def test_a_decorated_function_carries_its_body_and_its_rules():
  calls = []

  @validation.arguments('delta', dim=validation.Int(3))
  def function(dim, delta):
    calls.append((dim, delta))
    return dim

  # The body alone takes what it is given: no check, no conversion.
  assert function.unchecked(2, 7) == 2 and calls == [(2, 7)]
  assert dict(function.rules) == {'delta': validation.PARAMETERS['delta'],
                                  'dim': validation.Int(3)}
  with pytest.raises(TypeError):
    function.rules['delta'] = validation.Real()  # Read-only.

  @validation.fields('momentum', count=validation.Int(1))
  @dataclasses.dataclass(frozen=True)
  class Checked:
    momentum: float
    count: int = 1

  assert dict(Checked.rules) == {'momentum': validation.PARAMETERS['momentum'],
                                 'count': validation.Int(1)}


@pytest.mark.parametrize('rule, low, high', [
    (validation.Real(0.0, low_open=True), 1, None),
    (validation.Real(0.0), 0, None),
    (validation.Real(0.5, 3.0, high_open=True), 1, 2),
    (validation.Real(-2.5, 3.5), -2, 3),
    (validation.Real(-1.0, 1.0, low_open=True, high_open=True), 0, 0),
    (validation.Real(high=4.0), None, 4),
])
def test_the_integers_of_an_interval_are_exactly_those_inside_it(rule, low,
                                                                 high):
  assert rule.integers() == validation.Int(low, high)
  for value in range(-5, 7):
    try:
      rule('x', value)
    except ValueError:
      with pytest.raises(ValueError):
        rule.integers()('x', value)
    else:
      assert rule.integers()('x', value) == value


@pytest.mark.parametrize('value, allowed', [
    (0.0, True), (0.9, True), (1.0 - 1e-12, True), (1.0, False), (-0.1, False)])
def test_momentum_lies_in_the_half_open_unit_interval(value, allowed):
  # Momentum 1 would never forget a step; every layer takes this one rule.
  try:
    validation.PARAMETERS['momentum']('momentum', value)
  except ValueError:
    assert not allowed
  else:
    assert allowed
