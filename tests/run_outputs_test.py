"""Tests of experiments.run_outputs: the rounds' CSVs and the rounds line.

Independent truths: the CSV bytes written out by hand for a few rounds, the
checkpoint rhythm (what is on disk after each report), and a writer fed the
same rounds without interruption as the oracle of writers interrupted at a
checkpoint that leaves rounds unscored.
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


def _result(resumed_from: int, trained: int,
            previous: int | None = None) -> run_outputs.RunResult:
  empty = np.zeros(0)
  return run_outputs.RunResult(
      config=None, run_dir='/runs/x', total_rounds=8, delta=1e-5,
      outcome=canary_spec.CanaryOutcome(
          final_cosines=empty, final_unseen_cosines=empty, seen_maxima=empty,
          unseen_maxima=empty, accuracy=0.5, dim=3,
          resumed_from_round=resumed_from, rounds_trained=trained),
      report=None, previous_round=previous)


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
  # The previous invocation had reached the round it was resumed from.
  assert run_outputs.rounds_line(_result(2, 6, previous=2)) == (
      run_outputs.rounds_line(_result(2, 6)))
  assert run_outputs.rounds_line(_result(8, 0, previous=8)) == (
      run_outputs.rounds_line(_result(8, 0)))


def test_rounds_line_counts_the_rounds_a_kill_lost():
  assert run_outputs.rounds_line(_result(2, 6, previous=5)) == (
      'Rounds: 8 (resumed from round 2; the previous invocation had '
      'completed round 5: 3 rounds lost (ended between checkpoints); '
      'trained 6 now); test accuracy 0.5000')
  assert run_outputs.rounds_line(_result(0, 8, previous=1)) == (
      'Rounds: 8 (resumed from round 0; the previous invocation had '
      'completed round 1: 1 round lost (ended between checkpoints); '
      'trained 8 now); test accuracy 0.5000')


def _writer(run_dir, csv_format, resumed_from=0, with_canaries=True):
  return run_outputs.RoundWriter(
      str(run_dir), total_rounds=8, with_canaries=with_canaries,
      resumed_from=resumed_from,
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


def test_files_are_written_at_each_checkpoint_through_its_round(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_cosines([_cosines(1)])
  writer.on_cosines([_cosines(2)])
  assert _read(tmp_path, run_directory.METRICS_FILE) is None
  writer.on_checkpoint(2)
  assert _read(tmp_path, run_directory.METRICS_FILE) == (
      'round,z_clip,a_count\n1,0.25,1\n2,0.5,2\n')
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) == (
      'round,seen_cosine_mean,seen_cosine_max,unseen_cosine_mean,'
      'unseen_cosine_max\n1,0.125,0.5,nan,-1.0\n2,0.25,1.0,nan,-1.0\n')
  writer.on_round(_record(3))
  writer.on_cosines([_cosines(3)])  # No checkpoint: nothing rewritten.
  assert _read(tmp_path, run_directory.METRICS_FILE).count('\n') == 3


def test_tff_layout_sorts_new_columns_and_ends_lines_with_crlf(tmp_path):
  writer = _writer(tmp_path, _TFF_FORMAT)
  writer.on_round(round_record.RoundRecord(0, {'evaluation/loss': 2.5}))
  writer.on_checkpoint(0)
  assert _read(tmp_path, run_directory.METRICS_FILE) == (
      'round,evaluation/loss\r\n0,2.5\r\n')
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) == 'round\r\n'
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_cosines([_cosines(1), _cosines(2)])
  writer.on_checkpoint(2)
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
    if t % 2 == 0:
      writer.on_checkpoint(t)
  # Killed after round 4's files; resumed from checkpoint 2.
  resumed = _writer(tmp_path, _JAX_FORMAT, resumed_from=2)
  for t in (3, 4, 5):
    resumed.on_round(round_record.RoundRecord(t, {'z_clip': 0.0,
                                                  'a_count': t}))
    resumed.on_cosines([_cosines(t)])
  resumed.on_checkpoint(5)
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
  writer.on_checkpoint(2)
  assert _read(tmp_path, run_directory.METRICS_FILE).count('\r\n') == 3
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE) is None


def test_cosines_of_an_unreported_round_are_refused(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  writer.on_round(_record(1))
  with pytest.raises(ValueError, match='cosines of round 2'):
    writer.on_cosines([_cosines(2)])


class _Engine:
  """Reports rounds to a writer as an engine does, in blocks of 3 rounds.

  A block is scored when it fills and at a regular checkpoint; a
  checkpoint saved on an interrupt keeps its rounds buffered, and the
  invocation resumed from it (`resume`) goes on with them.
  """

  def __init__(self, writer):
    self.writer = writer
    self.buffered = []

  def round(self, t, evaluated=False):
    metrics = {'z_clip': t / 4, 'a_count': t}
    if evaluated:
      metrics['evaluation/loss'] = 1.0 / t
    self.writer.on_round(round_record.RoundRecord(t, metrics))
    self.buffered.append(t)
    if len(self.buffered) == 3:
      self.score()

  def score(self):
    self.writer.on_cosines([_cosines(t) for t in self.buffered])
    self.buffered = []

  def checkpoint(self, t, regular=True):
    if regular:
      self.score()
    self.writer.on_checkpoint(t)

  def resume(self, writer, saved):
    self.writer = writer
    self.buffered = [t for t in self.buffered if t <= saved]


def _start(run_dir, csv_format):
  engine = _Engine(_writer(run_dir, csv_format))
  engine.writer.on_round(round_record.RoundRecord(0, {'evaluation/loss': 2.5}))
  engine.checkpoint(0)
  return engine


@pytest.mark.parametrize('csv_format', [_JAX_FORMAT, _TFF_FORMAT])
def test_interrupted_writers_end_with_the_uninterrupted_files(
    tmp_path, csv_format):
  # 8 rounds, checkpoints at 0, 5 and 8, evaluations at 4 and 8.
  whole, cut = tmp_path / 'whole', tmp_path / 'cut'
  whole.mkdir()
  cut.mkdir()
  engine = _start(whole, csv_format)
  for t in range(1, 9):
    engine.round(t, evaluated=t in (4, 8))
    if t in (5, 8):
      engine.checkpoint(t)
  engine = _start(cut, csv_format)
  # Interrupted after round 2 (its block unscored).
  for t in (1, 2):
    engine.round(t)
  engine.checkpoint(2, regular=False)
  engine.resume(_writer(cut, csv_format, resumed_from=2), 2)
  # Round 3 fills the block: the cosines of rounds 1 and 2, written without
  # them, come with it. Interrupted after round 4, round 5 reported but not
  # saved (as on the TFF engine).
  for t in (3, 4, 5):
    engine.round(t, evaluated=t == 4)
  engine.checkpoint(4, regular=False)
  assert [line.split(',')[0] for line in _read(
      cut, run_directory.CANARY_COSINES_FILE).splitlines()] == [
          'round', '1', '2', '3']
  assert _read(cut, run_directory.METRICS_FILE).splitlines()[-1].startswith(
      '4,')
  engine.resume(_writer(cut, csv_format, resumed_from=4), 4)
  for t in range(5, 9):
    engine.round(t, evaluated=t == 8)
    if t in (5, 8):
      engine.checkpoint(t)
  for name in (run_directory.METRICS_FILE, run_directory.CANARY_COSINES_FILE):
    assert _read(cut, name) == _read(whole, name), name


def test_late_cosines_are_refused_for_rounds_already_scored(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_cosines([_cosines(1)])
  writer.on_checkpoint(2)  # Round 2 left unscored.
  resumed = _writer(tmp_path, _JAX_FORMAT, resumed_from=2)
  with pytest.raises(ValueError, match='cosines of round 1'):
    resumed.on_cosines([_cosines(1)])
  resumed.on_cosines([_cosines(2)])
  resumed.on_checkpoint(2)
  assert _read(tmp_path, run_directory.CANARY_COSINES_FILE).splitlines()[
      -1].startswith('2,')


def test_the_progress_mark_is_the_last_round_reported_or_saved(tmp_path):
  writer = _writer(tmp_path, _JAX_FORMAT)
  assert writer.previous_round is None
  writer.on_round(_record(1))
  writer.on_round(_record(2))
  writer.on_checkpoint(2)
  writer.on_round(_record(3))
  writer.on_round(_record(4))
  # Killed here: the next invocation finds round 4.
  assert _writer(tmp_path, _JAX_FORMAT, resumed_from=2).previous_round == 4
  # A checkpoint of round 3 saved on an interrupt after round 4's report.
  writer.on_checkpoint(3)
  assert _writer(tmp_path, _JAX_FORMAT, resumed_from=3).previous_round == 3
  with open(tmp_path / run_directory.PROGRESS_FILE, 'w') as stream:
    stream.write('{"round": "3"')  # Unreadable: no mark.
  assert _writer(tmp_path, _JAX_FORMAT, resumed_from=3).previous_round is None
