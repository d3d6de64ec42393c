"""Tests of experiments.run_outputs: the line a launcher prints about its rounds."""

import numpy as np

from experiments import run_outputs


def _result(resumed_from: int, trained: int) -> run_outputs.RunResult:
  empty = np.zeros(0)
  return run_outputs.RunResult(
      config=None, run_dir='/runs/x', total_rounds=8,
      resumed_from_round=resumed_from, rounds_trained=trained, dim=3,
      delta=1e-5, accuracy=0.5, final_cosines=empty,
      final_unseen_cosines=empty, seen_maxima=empty, unseen_maxima=empty,
      report=None)


def test_rounds_line_says_what_this_invocation_did():
  assert run_outputs.rounds_line(_result(0, 8)) == (
      'Rounds: 8 (trained 8); test accuracy 0.5000')
  assert run_outputs.rounds_line(_result(2, 6)) == (
      'Rounds: 8 (resumed from round 2, trained 6 now); test accuracy 0.5000')
  assert run_outputs.rounds_line(_result(8, 0)) == (
      'Rounds: 8 (resumed from round 8: already complete, nothing trained); '
      'test accuracy 0.5000')
