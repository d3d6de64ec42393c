"""Tests of experiments.run_outputs: the line a launcher prints about its rounds."""

import numpy as np
import pytest

from experiments import run_outputs
from one_shot_epe import canary_spec


def _result(resumed_from: int, trained: int) -> run_outputs.RunResult:
  empty = np.zeros(0)
  return run_outputs.RunResult(
      config=None, run_dir='/runs/x', total_rounds=8, delta=1e-5,
      outcome=canary_spec.CanaryOutcome(
          final_cosines=empty, final_unseen_cosines=empty, seen_maxima=empty,
          unseen_maxima=empty, accuracy=0.5, dim=3,
          resumed_from_round=resumed_from, rounds_trained=trained),
      report=None)


def test_the_outcomes_fields_are_the_results():
  result = _result(2, 6)
  assert (result.accuracy, result.dim, result.rounds_trained) == (0.5, 3, 6)
  with pytest.raises(AttributeError):
    result.no_such_field  # pylint: disable=pointless-statement


def test_rounds_line_says_what_this_invocation_did():
  assert run_outputs.rounds_line(_result(0, 8)) == (
      'Rounds: 8 (trained 8); test accuracy 0.5000')
  assert run_outputs.rounds_line(_result(2, 6)) == (
      'Rounds: 8 (resumed from round 2, trained 6 now); test accuracy 0.5000')
  assert run_outputs.rounds_line(_result(8, 0)) == (
      'Rounds: 8 (resumed from round 8: already complete, nothing trained); '
      'test accuracy 0.5000')
