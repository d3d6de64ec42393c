"""Tests of experiments.run_outputs: the rounds' CSVs and the rounds line.

Independent truths: the CSV bytes written out by hand for a few rounds, and
the checkpoint rhythm (what is on disk after each report).
"""

import os

import numpy as np
import pytest

from experiments import run_outputs
from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory

_JAX_FORMAT = run_directory.CsvFormat(False, '\n')
_TFF_FORMAT = run_directory.CsvFormat(True, '\r\n')


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


def _writer(run_dir, csv_format, resumed_from=0, with_canaries=True):
  return run_outputs.RoundWriter(
      str(run_dir), total_rounds=5, rounds_per_checkpoint=2,
      with_canaries=with_canaries, resumed_from=resumed_from,
      csv_format=csv_format)


def _record(t: int) -> round_record.RoundRecord:
  return round_record.RoundRecord(t, {'z_clip': t / 4, 'a_count': t})


def _cosines(t: int) -> round_record.CanaryCosines:
  return round_record.CanaryCosines(t, t / 8, t / 2, float('nan'), -1.0)


def _read(run_dir, name):
  path = os.path.join(run_dir, name)
  if not os.path.exists(path):
    return None
  with open(path, 'rb') as stream:
    return stream.read().decode()


def test_files_are_written_once_every_round_to_a_checkpoint_is_in(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_cosines([_cosines(1)])
  assert _read(tmp_path, run_directory.METRICS_FILE) is None
  writer.on_cosines([_cosines(2)])  # Round 2 (a checkpoint) complete.
  assert _read(tmp_path, run_directory.METRICS_FILE) == (
      'round,z_clip,a_count\n1,0.25,1\n2,0.5,2\n')
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) == (
      'round,seen_cosine_mean,seen_cosine_max,unseen_cosine_mean,'
      'unseen_cosine_max\n1,0.125,0.5,nan,-1.0\n2,0.25,1.0,nan,-1.0\n')
  writer.on_round(_record(3))
  writer.on_cosines([_cosines(3)])  # Not a checkpoint: nothing rewritten.
  assert _read(tmp_path, run_directory.METRICS_FILE).count('\n') == 3


def test_tff_layout_sorts_new_columns_and_ends_lines_with_crlf(tmp_path):
  writer = _writer(tmp_path, _TFF_FORMAT)
  writer.on_round(round_record.RoundRecord(0, {'evaluation/loss': 2.5}))
  assert _read(tmp_path, run_directory.METRICS_FILE) == (
      'round,evaluation/loss\r\n0,2.5\r\n')
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) == 'round\r\n'
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_cosines([_cosines(1), _cosines(2)])
  assert _read(tmp_path, run_directory.METRICS_FILE) == (
      'round,evaluation/loss,a_count,z_clip\r\n0,2.5,,\r\n1,,1,0.25\r\n'
      '2,,2,0.5\r\n')
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE).startswith(
      'round,seen_cosine_max,seen_cosine_mean,unseen_cosine_max,'
      'unseen_cosine_mean\r\n1,0.5,0.125,-1.0,nan\r\n')


def test_a_resumed_run_keeps_the_rows_of_its_checkpoint(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  for t in (1, 2, 3, 4):
    writer.on_round(_record(t))
    writer.on_cosines([_cosines(t)])
  # Killed after round 4's files; resumed from checkpoint 2.
  resumed = _writer(tmp_path, _JAX_FORMAT, resumed_from=2)
  for t in (3, 4, 5):
    resumed.on_round(round_record.RoundRecord(t, {'z_clip': 0.0,
                                                  'a_count': t}))
    resumed.on_cosines([_cosines(t)])
  rows = _read(tmp_path, run_directory.METRICS_FILE).splitlines()
  assert rows == ['round,z_clip,a_count', '1,0.25,1', '2,0.5,2', '3,0.0,3',
                  '4,0.0,4', '5,0.0,5']
  assert [line.split(',')[0] for line in _read(
      tmp_path, run_directory.CANARY_COSINES_FILE).splitlines()] == [
          'round', '1', '2', '3', '4', '5']


def test_a_run_without_canaries_writes_metrics_at_checkpoints(tmp_path):
  writer = _writer(tmp_path, _TFF_FORMAT, with_canaries=False)
  writer.on_round(_record(1))
  assert _read(tmp_path, run_directory.METRICS_FILE) is None
  writer.on_round(_record(2))
  assert _read(tmp_path, run_directory.METRICS_FILE).count('\r\n') == 3
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) is None


def test_cosines_of_an_unreported_round_are_refused(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  writer.on_round(_record(1))
  with pytest.raises(ValueError, match='cosines of round 2'):
    writer.on_cosines([_cosines(2)])
