"""What a run writes into its run directory, for either engine; its errors.

Both engines (`--backend=tff`, `--backend=jax`; `experiments.train`) report
their rounds as `one_shot_epe.runtime.round_record` records, which `RoundWriter`
turns into metrics.csv and canary_cosines.csv (and
`one_shot_epe.runtime.training_health` watches), and end with the same
results, written by `write_results`: the privacy report of the run's plan
(`one_shot_epe.reporting.run_report`), with the cosine CSVs of both threat
models (Algorithms 2 and 3) and the density plot (Figures 1 and 3), by the
one writer of every engine (`one_shot_epe.reporting.run_files`), under the
run directory's layout (`one_shot_epe.runtime.run_directory`).
`REPORTED_ERRORS` are what a launcher reports in one line. Framework-free.
"""

import collections
import dataclasses
import os
from collections.abc import Sequence

from experiments import engine
from experiments import train_config
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.design import canary_spec
from one_shot_epe.design import tasks
from one_shot_epe.reporting import run_files
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import run_lock
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import write_failures

__all__ = ['REPORTED_ERRORS', 'RoundWriter', 'RunResult', 'rounds_line',
           'write_results']

# What a launcher reports in one line with exit status 2: a bad flag, a run
# directory in use by another launcher, a failed write (a full disk, ...), a
# device out of memory, a file refused by its limit (`bounded_reads`).
REPORTED_ERRORS = (train_config.ConfigError, run_lock.RunLockedError,
                   write_failures.WriteFailure, engine.DeviceOutOfMemory,
                   bounded_reads.InputRefused)


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What a run produced.

  Attributes:
    config: The validated config (run name resolved).
    run_dir: Directory holding the outputs (`one_shot_epe.runtime.run_directory`).
    total_rounds: T, the number of training rounds of the run.
    delta: The delta of the report.
    outcome: What the engine measured (cosines, accuracy, rounds trained
      now); its fields are also this result's (`result.accuracy`, ...).
    report: The privacy report; None without canaries.
    previous_round: The last round an earlier invocation of the run reached
      (`RoundWriter.previous_round`), or None.
  """
  config: train_config.TrainConfig
  run_dir: str
  total_rounds: int
  delta: float
  outcome: canary_spec.CanaryOutcome
  report: run_report.RunReport | None
  previous_round: int | None = None

  def __getattr__(self, name: str):
    if name in canary_spec.CanaryOutcome._fields:
      return getattr(self.outcome, name)
    raise AttributeError(name)


class RoundWriter:
  """Writes metrics.csv and canary_cosines.csv from an engine's rounds.

  A `round_record.RoundObserver`: each round's `RoundRecord` is kept,
  completed with its `CanaryCosines` when they are scored, and written at
  the next `on_checkpoint`, which the engines call just before they save a
  checkpoint: both files are rewritten, atomically, with every round
  through the checkpoint's, so a resumed run finds the rows of its
  checkpoint. A round whose vector the checkpoint holds unscored (one saved
  on an interrupt) gets its metrics row then and its cosines row when it is
  scored, in this invocation or in the next, which resumes from that
  checkpoint. The rows an earlier invocation wrote up to the checkpoint this
  one resumes from are kept. Columns: round, then each column in the order
  rows first bring it (`csv_format`).

  It also marks the last round reached in the run directory
  (`run_directory.write_progress`): each trained round as it is reported,
  and a checkpoint's round (which a round reported after it but not saved
  with it may exceed). `previous_round` is the mark an earlier invocation
  left.

  Attributes:
    previous_round: The last round an earlier invocation of the run reached,
      or None if none left a mark.
  """

  def __init__(self, run_dir: str, *, total_rounds: int, with_canaries: bool,
               resumed_from: int, csv_format: run_directory.CsvFormat):
    """Reads the rows to keep and the progress mark; writes nothing yet.

    Args:
      run_dir: The run directory.
      total_rounds: T, which bounds the size of the files read back
        (`bounded_reads.round_csv`).
      with_canaries: Whether the run reports cosines (and canary_cosines.csv
        is written).
      resumed_from: The checkpoint the run resumes from (0: a fresh run).
      csv_format: The engine's layout of the files.
    """
    self._run_dir = run_dir
    self._with_canaries = with_canaries
    self._format = csv_format
    names = [run_directory.METRICS_FILE]
    if with_canaries:
      names.append(run_directory.CANARY_COSINES_FILE)
    self._files = {}
    for name in names:
      columns, rows = run_directory.read_rounds(os.path.join(run_dir, name),
                                                resumed_from, total_rounds)
      self._files[name] = (columns or ['round'], rows)
    self._records: list[round_record.RoundRecord] = []
    # Rounds with a metrics row and no cosines row yet, ascending.
    self._unscored: list[int] = []
    if with_canaries:
      scored = {row['round'] for row in
                self._files[run_directory.CANARY_COSINES_FILE][1]}
      self._unscored = [
          int(row['round']) for row in
          self._files[run_directory.METRICS_FILE][1]
          if int(row['round']) >= 1 and row['round'] not in scored]
    self.previous_round = run_directory.read_progress(run_dir)
    self._marked = self.previous_round

  def _add(self, name: str, row: dict[str, object]) -> None:
    columns, rows = self._files[name]
    new = [column for column in row if column not in columns]
    columns.extend(sorted(new) if self._format.sort_new_columns else new)
    rows.append(row)

  def _add_cosines(self, cosines: round_record.CanaryCosines) -> None:
    self._add(run_directory.CANARY_COSINES_FILE,
              dict(zip(run_directory.COSINE_FIELDS, cosines)))

  def _mark(self, round_num: int) -> None:
    """Marks `round_num` as the last round reached (unless it is already)."""
    if round_num != self._marked:
      run_directory.write_progress(self._run_dir, round_num)
      self._marked = round_num

  def on_round(self, record: round_record.RoundRecord) -> None:
    """Keeps the round's record (round 0: the initial evaluation).

    Args:
      record: the round just trained or evaluated.

    Raises:
      OSError: writing the progress mark failed.
    """
    self._records.append(record)
    if record.round_num >= 1:
      self._mark(record.round_num)

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Completes the rounds' records with their cosines.

    Args:
      cosines: one entry per scored round, in round order, each of a round
        reported to `on_round` or of a round written without its cosines
        (by this invocation or the one it resumed from).

    Raises:
      ValueError: a row's round was not reported.
    """
    index = {record.round_num: i for i, record in enumerate(self._records)}
    for row in cosines:
      if self._unscored and row.round_num == self._unscored[0]:
        self._unscored.pop(0)
        self._add_cosines(row)
      elif row.round_num in index:
        i = index[row.round_num]
        self._records[i] = dataclasses.replace(self._records[i], cosines=row)
      else:
        raise ValueError(f'cosines of round {row.round_num}, whose record '
                         'was not reported.')

  def on_checkpoint(self, round_num: int) -> None:
    """Writes both files with every round through `round_num`.

    Records of later rounds are kept for a later checkpoint.

    Args:
      round_num: the checkpoint the engine saves next.

    Raises:
      OSError: rewriting the CSVs or the progress mark failed.
    """
    done = [record for record in self._records
            if record.round_num <= round_num]
    self._records = [record for record in self._records
                     if record.round_num > round_num]
    for record in done:
      self._add(run_directory.METRICS_FILE,
                {'round': record.round_num, **record.metrics})
      if record.cosines is not None:
        self._add_cosines(record.cosines)
      elif self._with_canaries and record.round_num >= 1:
        self._unscored.append(record.round_num)
    for name, (columns, rows) in self._files.items():
      run_directory.write_rounds(os.path.join(self._run_dir, name), columns,
                                 rows, self._format)
    self._mark(round_num)


def rounds_line(result: RunResult) -> str:
  """What this invocation did, in a line: a fresh run, a resumed one, or none.

  A resumed run whose previous invocation had reached a later round than
  the checkpoint it resumes from (it ended between checkpoints: killed, say)
  says how many rounds were lost.

  Args:
    result: the run's result.

  Returns:
    'Rounds: T (...); test accuracy x', without a trailing newline.
  """
  resumed = result.resumed_from_round
  previous = result.previous_round
  lost = ''
  if previous is not None and previous > resumed:
    count = previous - resumed
    lost = (f'; the previous invocation had completed round {previous}: '
            f'{count} round{"s" if count > 1 else ""} lost (ended between '
            'checkpoints)')
  if resumed == 0 and not lost:
    what = f'trained {result.rounds_trained}'
  elif result.rounds_trained == 0:
    what = (f'resumed from round {resumed}: already complete, nothing '
            'trained')
  else:
    what = (f'resumed from round {resumed}{lost}'
            f'{";" if lost else ","} trained {result.rounds_trained} now')
  return (f'Rounds: {result.total_rounds} ({what}); test accuracy '
          f'{result.accuracy:.4f}')


def write_results(run: engine.PreparedRun,
                  outcome: canary_spec.CanaryOutcome,
                  correlated: dp_fedavg.CorrelatedNoise | None = None,
                  notes: Sequence[str] = ()) -> run_report.RunReport:
  """Writes the cosine CSVs, the privacy report and the density plot.

  The report is built from the plan's facts (`RunPlan.run_facts`: the
  schedule's presentation counts give the last-iterate heuristic its
  mixture) and written with `run_files.write_results`. `correlated`: the
  numbers of --mechanism=blt|banded, None for independent noise.

  Args:
    run: the prepared run, with canaries (its plan has a canary spec).
    outcome: what the engine measured: the canaries' cosines, the accuracy,
      d and the rounds trained.
    correlated: the matrix mechanism's report numbers, or None.
    notes: the run's training-health notes
      (`one_shot_epe.runtime.training_health.TrainingHealth.notes`).

  Returns:
    The run's report, also written to report.json and report.md.

  Raises:
    OSError: a file cannot be written.
  """
  config, plan = run.config, run.plan
  setting = collections.OrderedDict(
      task=config.task, data=run.data.data_source,
      total_rounds=plan.total_rounds,
      clients_per_round=config.clients_per_round, sampling=config.sampling,
      clipping=('adaptive' if config.clipping_norm == 0 else
                config.clipping_norm),
      num_canaries=config.num_canaries,
      num_unseen_canaries=config.num_unseen_canaries,
      canary_repeats=config.canary_repeats,
      all_iterates_statistic=config.all_iterates_statistic,
      canary_clip=config.canary_clip, seed=config.seed,
      canary_seed=config.canary_seed)
  if config.backend != 'tff':
    setting['backend'] = config.backend
  if plan.data_canaries is not None:
    setting['data_canary_examples'] = plan.data_canaries.examples_per_canary
    if tasks.task_entry(config.task).kind == 'emnist':
      setting['data_canary_images'] = config.data_canary_images
    else:
      setting['data_canary_text'] = (
          f'model, temperature {config.data_canary_temperature:g}'
          if config.data_canary_text == 'model' else 'uniform')
  report = run_report.build_run_report(
      outcome, plan.run_facts(outcome.dim, correlated), plan.mechanism,
      alpha=config.alpha, setting=setting, notes=notes,
      canary_kind=plan.canary_kind)
  run_files.write_results(
      config.run_dir, outcome, report,
      title=f'{config.task}, noise {config.noise_multiplier:g}, '
      f'{config.canary_repeats} repetition(s)')
  return report
