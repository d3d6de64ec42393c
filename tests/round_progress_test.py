"""Tests of one_shot_epe.runtime.round_progress: the rounds' progress bar.

Independent truth: the counts and values a reader sees on stderr.
"""

from one_shot_epe.runtime import round_progress
from one_shot_epe.runtime import round_record


def test_bar_counts_training_rounds_from_the_resumed_one(capsys):
  bar = round_progress.ProgressBar(5, enabled=True)
  bar.on_round(round_record.RoundRecord(0, {'evaluation/loss': 1.0}))
  assert capsys.readouterr().err == ''  # Round 0 is not a training round.
  bar.on_round(round_record.RoundRecord(3, {}, seconds=0.1, clip=0.5,
                                        loss=1.25))
  bar.on_cosines([round_record.CanaryCosines(3, 0.0, 0.1, 0.0, 0.1)])
  bar.close()
  last = capsys.readouterr().err.strip().split('\r')[-1]
  assert '3/5' in last and 'clip=0.5' in last and 'loss=1.25' in last


def test_disabled_bar_shows_nothing(capsys):
  bar = round_progress.ProgressBar(5, enabled=False)
  bar.on_round(round_record.RoundRecord(1, {}, clip=0.5))
  bar.close()
  assert capsys.readouterr().err == ''
