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
  """
  config: train_config.TrainConfig
  run_dir: str
  total_rounds: int
  delta: float
  outcome: canary_spec.CanaryOutcome
  report: run_report.RunReport | None

  def __getattr__(self, name: str):
    if name in canary_spec.CanaryOutcome._fields:
      return getattr(self.outcome, name)
    raise AttributeError(name)


class RoundWriter:
  """Writes metrics.csv and canary_cosines.csv from an engine's rounds.

  A `round_record.RoundObserver`: each round's `RoundRecord` is completed
  with its `CanaryCosines` when they are scored. The rows an earlier
  invocation wrote up to the checkpoint this one resumes from are kept; both
  files are rewritten, atomically, whenever every round up to a checkpoint
  round is complete, which both engines make so before they save that
  checkpoint: a resumed run finds the rows of its checkpoint. Columns: round,
  then each column in the order rows first bring it (`csv_format`).
  """

  def __init__(self, run_dir: str, *, total_rounds: int,
               rounds_per_checkpoint: int, with_canaries: bool,
               resumed_from: int, csv_format: run_directory.CsvFormat):
    """Reads the rows to keep; writes nothing yet.

    Args:
      run_dir: The run directory.
      total_rounds: T (a checkpoint round).
      rounds_per_checkpoint: The engine checkpoints every this many rounds.
      with_canaries: Whether the run reports cosines (and canary_cosines.csv
        is written).
      resumed_from: The checkpoint the run resumes from (0: a fresh run).
      csv_format: The engine's layout of the files.
    """
    self._run_dir = run_dir
    self._every = rounds_per_checkpoint
    self._total_rounds = total_rounds
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

  def _complete(self, record: round_record.RoundRecord) -> bool:
    return (record.cosines is not None or record.round_num == 0 or
            not self._with_canaries)

  def _add(self, name: str, row: dict[str, object]) -> None:
    columns, rows = self._files[name]
    new = [column for column in row if column not in columns]
    columns.extend(sorted(new) if self._format.sort_new_columns else new)
    rows.append(row)

  def _write_if_checkpoint(self) -> None:
    """Writes the records so far if they end complete at a checkpoint."""
    if not (run_directory.is_checkpoint_round(
        self._records[-1].round_num, self._every, self._total_rounds) and
            all(map(self._complete, self._records))):
      return
    for record in self._records:
      self._add(run_directory.METRICS_FILE,
                {'round': record.round_num, **record.metrics})
      if record.cosines is not None:
        self._add(run_directory.CANARY_COSINES_FILE,
                  dict(zip(run_directory.COSINE_FIELDS, record.cosines)))
    self._records = []
    for name, (columns, rows) in self._files.items():
      run_directory.write_rounds(os.path.join(self._run_dir, name), columns,
                                 rows, self._format)

  def on_round(self, record: round_record.RoundRecord) -> None:
    """Keeps the round's record (round 0: the initial evaluation).

    The records so far are written once they end, complete, at a checkpoint
    round.

    Args:
      record: the round just trained or evaluated.

    Raises:
      OSError: rewriting the CSVs failed.
    """
    self._records.append(record)
    self._write_if_checkpoint()

  def on_cosines(self, cosines: Sequence[round_record.CanaryCosines]) -> None:
    """Completes the rounds' records with their cosines.

    Args:
      cosines: one entry per scored round, each of a round already reported
        to `on_round`.

    Raises:
      ValueError: a row's round was not reported.
      OSError: rewriting the CSVs failed.
    """
    index = {record.round_num: i for i, record in enumerate(self._records)}
    for row in cosines:
      if row.round_num not in index:
        raise ValueError(f'cosines of round {row.round_num}, whose record '
                         'was not reported.')
      i = index[row.round_num]
      self._records[i] = dataclasses.replace(self._records[i], cosines=row)
    if cosines:
      self._write_if_checkpoint()


def rounds_line(result: RunResult) -> str:
  """What this invocation did, in a line: a fresh run, a resumed one, or none.

  Args:
    result: the run's result.

  Returns:
    'Rounds: T (...); test accuracy x', without a trailing newline.
  """
  if result.resumed_from_round == 0:
    what = f'trained {result.rounds_trained}'
  elif result.rounds_trained == 0:
    what = (f'resumed from round {result.resumed_from_round}: already '
            'complete, nothing trained')
  else:
    what = (f'resumed from round {result.resumed_from_round}, trained '
            f'{result.rounds_trained} now')
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
  report = run_report.build_run_report(
      outcome, plan.run_facts(outcome.dim, correlated), plan.mechanism,
      alpha=config.alpha, setting=setting, notes=notes)
  run_files.write_results(
      config.run_dir, outcome, report,
      title=f'{config.task}, noise {config.noise_multiplier:g}, '
      f'{config.canary_repeats} repetition(s)')
  return report
