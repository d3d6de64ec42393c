"""Tests of the training-health watcher, fed round records directly."""

import logging
import math

import pytest

from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import training_health

_LOGGER = 'one_shot_epe.runtime.training_health'


def _feed(health, clips, losses=None):
  """Reports rounds 1.. with these clips (and losses) to `health`."""
  losses = losses or [1.0] * len(clips)
  for round_num, (clip, loss) in enumerate(zip(clips, losses), start=1):
    health.on_round(round_record.RoundRecord(round_num, {}, clip=clip,
                                             loss=loss))


def _warnings(caplog):
  return [record.getMessage() for record in caplog.records
          if record.name == _LOGGER and record.levelno == logging.WARNING]


def test_a_clip_that_grows_past_the_factor_is_logged_once_and_noted(caplog):
  health = training_health.TrainingHealth(name='runs/a')
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    # 0.1 -> 10.0 is exactly 100x: not more than the factor.
    _feed(health, [0.1, 1.0, 10.0])
    assert not _warnings(caplog) and health.notes() == []
    _feed(health, [0.1, 1.0, 10.0, 10.5, 300.0, 2.0])
  (warning,) = _warnings(caplog)
  assert warning.startswith('runs/a: the adaptive clip grew from 0.1 (round 1) '
                            'to 10.5 (round 4), 105x, more than 100x')
  (note,) = health.notes()
  # The report's note names the extreme reached, without the run's name.
  assert note.startswith('The adaptive clip grew from 0.1 (round 1) to 300 '
                         '(round 5), 3000x, more than 100x')


def test_a_clip_that_shrinks_past_the_factor_is_noted():
  health = training_health.TrainingHealth(clip_factor=10)
  _feed(health, [2.0, 0.5, 0.21])
  assert health.notes() == []
  _feed(health, [2.0, 0.5, 0.19])
  (note,) = health.notes()
  assert note.startswith('The adaptive clip shrank from 2 (round 1) to 0.19 '
                         '(round 3)')


def test_a_fixed_clip_and_a_finite_loss_are_healthy(caplog):
  health = training_health.TrainingHealth()
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    _feed(health, [1.0] * 50, [2.3 / t for t in range(1, 51)])
    health.on_round(round_record.RoundRecord(0, {'loss': 2.3}))
  assert health.notes() == [] and not _warnings(caplog)


@pytest.mark.parametrize('bad', [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_is_logged_once_and_noted(caplog, bad):
  health = training_health.TrainingHealth()
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    _feed(health, [1.0] * 5, [2.0, 1.5, bad, bad, 1.0])
  (warning,) = _warnings(caplog)
  assert warning.startswith(f'the training loss became {bad} in round 3')
  assert health.notes() == [f'The training loss became {bad} in round 3: '
                            'the model diverged, and its accuracy and '
                            'cosines after that round say little.']


def test_a_non_finite_evaluation_loss_is_noted_without_a_training_loss(
    caplog):
  # The JAX engine reports no training loss, only metrics.csv's evaluation.
  health = training_health.TrainingHealth()
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    for round_num, loss in ((0, 4.1), (5, 2.0), (10, math.nan), (15, 1.0)):
      health.on_round(round_record.RoundRecord(
          round_num, {'evaluation/accuracy': 0.5, 'evaluation/loss': loss},
          clip=1.0 if round_num else None))
  (warning,) = _warnings(caplog)
  assert warning.startswith('the evaluation loss became nan in round 10')
  assert health.notes()[0].startswith('The evaluation loss became nan in '
                                      'round 10')


def test_a_non_finite_clip_is_a_runaway_and_both_problems_are_noted(caplog):
  health = training_health.TrainingHealth()
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    _feed(health, [1.0, math.inf, math.nan], [1.0, 1.0, math.nan])
  assert len(_warnings(caplog)) == 2
  clip, loss = health.notes()
  assert clip.startswith('The clip became inf in round 2')
  assert loss.startswith('The training loss became nan in round 3')


@pytest.mark.parametrize('factor', [1.0, 0.5, math.inf, math.nan])
def test_a_factor_that_is_not_above_one_is_refused(factor):
  with pytest.raises(ValueError, match='clip_factor'):
    training_health.TrainingHealth(clip_factor=factor)
