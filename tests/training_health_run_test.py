"""A launcher run made to run away: its clip note, logged once, in the report.

A tiny adaptive-clipping run on each engine whose clip starts far below the
updates' norms and learns fast toward a high unclipped quantile: every real
update is clipped, so each round multiplies the clip by about
exp(lr (quantile - unclipped share)), far more than `CLIP_FACTOR` over four
rounds. The independent truth is the clips the run wrote to metrics.csv.
"""

import csv
import json
import logging
import os

import pytest

from experiments import train
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import training_health
import tiny_run

_LOGGER = 'one_shot_epe.runtime.training_health'
# The run's clip's columns in metrics.csv, by engine.
_CLIP_COLUMNS = {'tff': ('aggregator/clip', 'aggregator/dp_query_metrics/clip'),
                 'jax': ('clip',)}
_RUNAWAY = dict(clipping_norm=0.0, initial_clip=1e-4, clip_learning_rate=5.0,
                target_unclipped_quantile=0.9, noise_multiplier=0.0,
                rounds_per_checkpoint=4)
_HEALTHY = dict(clipping_norm=0.0, noise_multiplier=0.0,
                rounds_per_checkpoint=4)


def _clips(run_dir: str, backend: str) -> list[float]:
  with open(os.path.join(run_dir, run_directory.METRICS_FILE),
            newline='', encoding='utf-8') as stream:
    rows = list(csv.DictReader(stream))
  column = next(name for name in _CLIP_COLUMNS[backend] if name in rows[0])
  return [float(row[column]) for row in rows if row.get(column)]


@pytest.mark.slow
@pytest.mark.parametrize('backend', ['tff', 'jax'])
def test_a_runaway_clip_is_logged_once_and_noted_in_the_report(
    tmp_path, caplog, backend):
  pytest.importorskip('tensorflow_federated' if backend == 'tff' else 'jax')
  with caplog.at_level(logging.WARNING, logger=_LOGGER):
    runaway = train.run_training(tiny_run.config(
        str(tmp_path), backend=backend, run_name='runaway', **_RUNAWAY))
    healthy = train.run_training(tiny_run.config(
        str(tmp_path), backend=backend, run_name='healthy', **_HEALTHY))
  clips = _clips(runaway.run_dir, backend)
  growth = max(clips) / clips[0]
  assert growth > training_health.CLIP_FACTOR, clips
  warnings = [record.getMessage() for record in caplog.records
              if record.name == _LOGGER]
  assert len(warnings) == 1, warnings
  assert warnings[0].startswith(f'{runaway.run_dir}: the adaptive clip grew '
                                f'from {clips[0]:.4g} (round 1)')
  with open(os.path.join(runaway.run_dir, run_directory.REPORT_JSON_FILE),
            encoding='utf-8') as stream:
    (note,) = json.load(stream)['notes']
  assert note.startswith(f'The adaptive clip grew from {clips[0]:.4g} (round '
                         f'1) to {max(clips):.4g} (round '
                         f'{clips.index(max(clips)) + 1}), {growth:.4g}x')
  with open(os.path.join(runaway.run_dir,
                         run_directory.REPORT_MARKDOWN_FILE),
            encoding='utf-8') as stream:
    assert stream.read().count(f'**Training health:** {note}') == 1
  # The same run at the default clip learning rate: no note, no warning.
  healthy_clips = _clips(healthy.run_dir, backend)
  assert max(healthy_clips) / min(healthy_clips) < training_health.CLIP_FACTOR
  assert healthy.report.notes == ()
