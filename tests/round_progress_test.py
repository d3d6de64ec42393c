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


def test_bar_shows_the_last_evaluations_test_loss_and_accuracy(capsys):
  initial = round_record.RoundRecord(
      0, {'evaluation/sparse_categorical_accuracy': 0.125,
          'evaluation/loss': 2.5})
  bar = round_progress.ProgressBar(4, enabled=True)
  bar.on_round(initial)
  bar.on_round(round_record.RoundRecord(1, {'clip': 0.5}, clip=0.5))
  bar.close()
  first = capsys.readouterr().err.strip().split('\r')[-1]
  assert 'test_acc=0.125' in first and 'test_loss=2.5' in first
  bar = round_progress.ProgressBar(4, enabled=True)
  bar.on_round(initial)
  bar.on_round(round_record.RoundRecord(
      2, {'evaluation/sparse_categorical_accuracy': 0.75,
          'evaluation/loss': 1.5}, clip=0.5))
  bar.on_round(round_record.RoundRecord(3, {}, clip=0.5))
  bar.close()
  last = capsys.readouterr().err.strip().split('\r')[-1]
  assert '4/4' not in last and 'test_acc=0.75' in last
  assert 'test_loss=1.5' in last


def test_bar_shows_the_named_accuracy_of_several(capsys):
  metrics = {'evaluation/accuracy': 0.5, 'evaluation/loss': 3.0,
             'evaluation/accuracy_without_out_of_vocab_or_end_of_sentence':
                 0.25}
  for name, shown in ((None, None), ('accuracy', '0.5'), (
      'accuracy_without_out_of_vocab_or_end_of_sentence', '0.25')):
    bar = round_progress.ProgressBar(2, enabled=True, accuracy_metric=name)
    bar.on_round(round_record.RoundRecord(1, metrics, clip=0.5))
    bar.close()
    last = capsys.readouterr().err.strip().split('\r')[-1]
    assert 'test_loss=3' in last
    if shown is None:  # Which of several is the task's is not guessed.
      assert 'test_acc' not in last
    else:
      assert f'test_acc={shown}' in last
