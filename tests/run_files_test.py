"""Tests of one_shot_epe.reporting.run_files: a run's result files, one writer.

Truths: the outcome's arrays read back from the CSVs with the csv module,
the report's own JSON and Markdown, the PNG signature, and the directory's
listing (the layout's names, no temporary file left).
"""

import csv
import json
import math
import os

import numpy as np
import pytest

from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import run_directory

_DIM = 10**4


def _outcome(num_unseen: int) -> canary_spec.CanaryOutcome:
  rng = np.random.default_rng(num_unseen)
  scale = 1 / math.sqrt(_DIM)
  return canary_spec.CanaryOutcome(
      final_cosines=rng.normal(2, 1, 60) * scale,
      final_unseen_cosines=rng.normal(0, 1, num_unseen) * scale,
      seen_maxima=rng.normal(4, 1, 60) * scale,
      unseen_maxima=rng.normal(2, 1, num_unseen) * scale, accuracy=0.5,
      dim=_DIM, resumed_from_round=0, rounds_trained=3)


def _report(outcome: canary_spec.CanaryOutcome) -> run_report.RunReport:
  return run_report.build_run_report(
      outcome, references.RunFacts(noise_multiplier=1.0, delta=1e-5,
                                   dim=_DIM), mechanisms.Gaussian())


def _columns(path: str) -> dict[str, list[float]]:
  with open(path, encoding='utf-8', newline='') as stream:
    rows = list(csv.DictReader(stream))
  return {name: [float(row[name]) for row in rows] for name in rows[0]}


def test_every_file_of_a_run_with_unseen_canaries(tmp_path):
  outcome = _outcome(60)
  report = _report(outcome)
  run_files.write_results(str(tmp_path), outcome, report, title='t')
  assert sorted(os.listdir(tmp_path)) == sorted([
      run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
      run_directory.REPORT_JSON_FILE, run_directory.REPORT_MARKDOWN_FILE,
      run_directory.DENSITY_PLOT_FILE])
  final = _columns(str(tmp_path / run_directory.FINAL_COSINES_FILE))
  assert final == {'cosine': outcome.final_cosines.tolist(),
                   'unseen': outcome.final_unseen_cosines.tolist()}
  maxima = _columns(str(tmp_path / run_directory.MAX_COSINES_FILE))
  assert maxima == {'seen': outcome.seen_maxima.tolist(),
                    'unseen': outcome.unseen_maxima.tolist()}
  written = (tmp_path / run_directory.REPORT_JSON_FILE).read_text()
  assert written == report.to_json() + '\n'
  assert run_report.RunReport.from_dict(json.loads(written)) == report
  assert (tmp_path / run_directory.REPORT_MARKDOWN_FILE).read_text(
      encoding='utf-8') == report.to_markdown()
  assert (tmp_path / run_directory.DENSITY_PLOT_FILE).read_bytes()[:8] == (
      b'\x89PNG\r\n\x1a\n')


def test_without_unseen_canaries_there_is_no_max_cosines_file(tmp_path):
  outcome = _outcome(0)
  report = _report(outcome)
  assert report.all_iterates is None
  run_files.write_results(str(tmp_path), outcome, report, title='t')
  assert run_directory.MAX_COSINES_FILE not in os.listdir(tmp_path)
  final = _columns(str(tmp_path / run_directory.FINAL_COSINES_FILE))
  assert list(final) == ['cosine']


def test_a_failed_write_raises_and_leaves_no_partial_file(tmp_path):
  outcome = _outcome(60)
  report = _report(outcome)
  # A directory where report.json should go: that write fails.
  os.mkdir(tmp_path / run_directory.REPORT_JSON_FILE)
  with pytest.raises(OSError):
    run_files.write_results(str(tmp_path), outcome, report, title='t')
  assert sorted(os.listdir(tmp_path)) == sorted([
      run_directory.FINAL_COSINES_FILE, run_directory.MAX_COSINES_FILE,
      run_directory.REPORT_JSON_FILE])
