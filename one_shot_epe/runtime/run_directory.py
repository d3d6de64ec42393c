"""A run's directory, for either engine: its files, one writer, resumption.

Layout (both engines; all result files written atomically):

  config.json            the validated flags; a rerun must match them
  metrics.csv            per-round compact metrics (column `round`)
  canary_cosines.csv     per-round mean and max cosine of the seen and of the
                         unseen canaries with the round's released vector
  tensorboard/           the same (TFF engine)
  checkpoints/           the engine's checkpoints (learning and canary state)
  final_cosines.csv      columns `cosine` (seen), `unseen`: final model
  max_cosines.csv        columns `seen`, `unseen`: max-over-rounds cosines
  report.json, report.md the privacy report (`run_report`)
  cosine_densities.png   the cosine sets against the null N(0, 1/d)
  .progress.json         the last round the run reached (`write_progress`)

`check_writable` decides first, before anything is read or loaded, whether
the run directory can be written at all; `check`, before anything is
written, whether a directory may hold
the run: absent, empty (but for the lock file), or holding a run whose saved
config the caller accepts and whose newest checkpoint reads back;
`check_free_space`, whether its disk holds the checkpoints still to come.
`write_progress` and `read_progress` keep a marker of the last round a run
reached, so that the next invocation can say how many rounds a kill between
checkpoints lost; nothing else reads it.
`owned` is the block in which a launcher writes: the run lock (`run_lock`) held, the
directory checked again (another launcher may have written it meanwhile),
unfinished writes of a killed run removed, and a failed write reported as
one line (`write_failures`). Framework-free: the engine's checkpoints are
seen through `checkpoint_store.CheckpointStore`.
"""

import contextlib
import csv
import dataclasses
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import run_lock
from one_shot_epe.runtime import write_failures

__all__ = ['CANARY_COSINES_FILE', 'CHECKPOINT_DIR', 'CONFIG_FILE',
           'COSINE_FIELDS', 'DATA_CANARY_DROPS_FILE', 'DATA_CANARY_LOSSES_FILE', 'CsvFormat', 'DENSITY_PLOT_FILE',
           'FINAL_COSINES_FILE', 'MAX_COSINES_FILE', 'METRICS_FILE',
           'PROGRESS_FILE', 'REPORT_JSON_FILE', 'REPORT_MARKDOWN_FILE',
           'RunDirectoryError', 'TENSORBOARD_DIR', 'check', 'check_free_space',
           'check_writable', 'checkpoint_rounds', 'is_checkpoint_round',
           'owned', 'read_progress', 'read_rounds', 'write_config',
           'write_progress', 'write_rounds']

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'
CANARY_COSINES_FILE = 'canary_cosines.csv'
TENSORBOARD_DIR = 'tensorboard'
CHECKPOINT_DIR = 'checkpoints'
FINAL_COSINES_FILE = 'final_cosines.csv'
MAX_COSINES_FILE = 'max_cosines.csv'
# Data canaries' final-model losses: columns seen, unseen (--canary_kind).
DATA_CANARY_LOSSES_FILE = 'data_canary_losses.csv'
# Their largest excess one-round loss drops: columns seen_drop, unseen_drop.
DATA_CANARY_DROPS_FILE = 'data_canary_drops.csv'
REPORT_JSON_FILE = 'report.json'
REPORT_MARKDOWN_FILE = 'report.md'
DENSITY_PLOT_FILE = 'cosine_densities.png'
# The progress marker: {"round": N}, the last round the run reached.
PROGRESS_FILE = '.progress.json'
# The columns of canary_cosines.csv (`round`: the training round, from 1;
# `round_record` numbers rounds).
COSINE_FIELDS = ('round', 'seen_cosine_mean', 'seen_cosine_max',
                 'unseen_cosine_mean', 'unseen_cosine_max')


@dataclasses.dataclass(frozen=True)
class CsvFormat:
  """How a run's per-round CSVs are laid out (`write_rounds`).

  Each engine keeps the layout its runs have always had, so that their
  directories resume and their files stay byte for byte the same: the TFF
  engine's (TFF's CSV release managers': a row's new columns sorted, lines
  ending in CRLF) or the JAX engine's (columns as reported, LF).

  Attributes:
    sort_new_columns: Whether the columns a row adds are sorted by name
      (else kept in the row's order).
    line_terminator: What ends each line.
  """
  sort_new_columns: bool
  line_terminator: str


class RunDirectoryError(ValueError):
  """The directory cannot hold the run; `flag` names what to change."""

  def __init__(self, message: str, flag: str = 'run_name'):
    """Builds the error.

    Args:
      message: what is wrong and what to do.
      flag: the launcher flag to change (no dashes), e.g. 'run_name' or
        'root_output_dir'.
    """
    super().__init__(message)
    self.flag = flag


def check(run_dir: str, *, accept_config: Callable[[Mapping[str, Any]], None],
          checkpoints: checkpoint_store.CheckpointStore,
          checkpoint_limit: bounded_reads.Limit | None = None) -> None:
  """Whether `run_dir` may hold the run; reads, never writes.

  Args:
    run_dir: The run directory (its parent is the output root).
    accept_config: Raises (any ValueError) unless the saved config of an
      earlier invocation may be resumed with this one's.
    checkpoints: The engine's checkpoints in the run directory's
      CHECKPOINT_DIR; the newest must read back (`verify`).
    checkpoint_limit: The most the newest checkpoint may hold
      (`bounded_reads.checkpoint` of the state the run keeps); None: no
      size limit.

  Raises:
    RunDirectoryError: the root or the run directory is not a directory, the
      run directory holds other files but no config, or the config does not
      read.
    ValueError: from `accept_config`, or `checkpoint_store.CheckpointError`.
  """
  root = os.path.dirname(os.path.abspath(run_dir))
  if os.path.exists(root) and not os.path.isdir(root):
    raise RunDirectoryError(f'{root!r} exists and is not a directory.',
                            flag='root_output_dir')
  if not os.path.exists(run_dir):
    return
  if not os.path.isdir(run_dir):
    raise RunDirectoryError(f'{run_dir!r} exists and is not a directory.')
  config_path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(config_path):
    if set(os.listdir(run_dir)) - {run_lock.LOCK_FILE}:
      raise RunDirectoryError(
          f'{run_dir!r} is not empty and holds no {CONFIG_FILE}; choose '
          'another --run_name or --root_output_dir.')
    return
  try:
    saved = json.loads(bounded_reads.read_text(config_path,
                                               bounded_reads.RUN_CONFIG))
  except bounded_reads.InputRefused as refusal:
    raise RunDirectoryError(f'{refusal} Choose another --run_name or '
                            '--root_output_dir.') from None
  except ValueError as error:
    raise RunDirectoryError(f'cannot read {config_path!r}: {error}.') from None
  accept_config(saved)
  checkpoints.verify(checkpoint_limit)


def check_writable(run_dir: str) -> None:
  """Whether this process can create and write `run_dir`; reads only.

  The run directory, or else its nearest existing ancestor (where it would
  be created), must be a directory this process can create entries in. It
  is tried, not inferred from permission bits (which a privileged process
  or a read-only or virtual file system makes wrong): an empty directory is
  created there and removed at once.

  Args:
    run_dir: The run directory (it and its parents may not exist yet).

  Raises:
    RunDirectoryError: naming 'root_output_dir' and the directory that is
      not a directory or not writable, with the system's reason.
  """
  directory = os.path.abspath(run_dir)
  while not os.path.lexists(directory):
    directory = os.path.dirname(directory)
  if not os.path.isdir(directory):
    raise RunDirectoryError(f'{directory!r} exists and is not a directory.',
                            flag='root_output_dir')
  try:
    os.rmdir(tempfile.mkdtemp(prefix='.write-check-', dir=directory))
  except OSError as error:
    raise RunDirectoryError(
        f'{directory!r} is not writable: creating a directory there failed '
        f'({error.strerror or error}); write the run elsewhere.',
        flag='root_output_dir') from None


@contextlib.contextmanager
def owned(run_dir: str, *, recheck: Callable[[], None],
          checkpoints: checkpoint_store.CheckpointStore) -> Iterator[None]:
  """The block in which this process alone writes `run_dir`.

  Takes the run lock (creating the directory), runs `recheck` (the `check`
  of `prepare`, again) and removes unfinished writes: the project's
  temporary files and the engine's partial checkpoints
  (`checkpoints.remove_partial`), also when the block fails. A failed write
  under the output root inside the block becomes
  `write_failures.WriteFailure`.

  Args:
    run_dir: the run directory (its parent is the output root).
    recheck: called once the lock is held; raises if the directory may no
      longer hold the run (another process may have written it meanwhile).
    checkpoints: the engine's checkpoints in the run directory, whose
      partial saves are removed.

  Yields:
    None; the block runs with the lock held.

  Raises:
    run_lock.RunLockedError: another process holds the lock.
    write_failures.WriteFailure: a write under the output root failed.
    What `recheck` raises.
  """

  def clean() -> None:
    atomic_io.remove_temporaries(run_dir)
    checkpoints.remove_partial()

  root = os.path.dirname(os.path.abspath(run_dir))
  with write_failures.reported(root), run_lock.acquire(run_dir):
    recheck()
    clean()
    try:
      yield
    except BaseException:
      # Best effort on a failing disk: the next run removes them too.
      with contextlib.suppress(OSError):
        clean()
      raise


def is_checkpoint_round(round_num: int, every: int,
                        final_round: int | None = None) -> bool:
  """Whether a run checkpoints after `round_num`: 0, every `every`-th, the last.

  The last round is saved too, so a finished run resumes without training.

  Args:
    round_num: the round just finished (0: the initial state).
    every: the checkpoint period in rounds (>= 1).
    final_round: the run's last round, or None if it is not to be forced.

  Returns:
    True if `round_num` is a multiple of `every` or is `final_round`.
  """
  return round_num % every == 0 or round_num == final_round


def checkpoint_rounds(total_rounds: int, every: int) -> list[int]:
  """The rounds a run checkpoints (`is_checkpoint_round`), ascending.

  Args:
    total_rounds: the run's number of training rounds T.
    every: the checkpoint period in rounds (>= 1).

  Returns:
    The rounds in [0, T] that are checkpointed: 0, the multiples of `every`,
    and T.
  """
  return [t for t in range(total_rounds + 1)
          if is_checkpoint_round(t, every, total_rounds)]


def check_free_space(run_dir: str, *, checkpoint_bytes: int,
                     to_write: int, saved: int, kept: int | None) -> None:
  """Refuses, before training, a run whose checkpoints cannot fit the disk.

  At its peak the directory holds min(saved + to_write, kept + 1)
  checkpoints (`kept` are kept and one more is written before the oldest is
  removed; all of them when `kept` is None), of which `saved` exist already.
  A further MiB is left for the CSVs, the report and the plot.

  Args:
    run_dir: the run directory; the free space is measured on its nearest
      existing ancestor's file system.
    checkpoint_bytes: the size of one checkpoint in bytes (an estimate).
    to_write: how many checkpoints the run still writes.
    saved: how many checkpoints the directory already holds.
    kept: how many checkpoints are kept at most, or None to keep all.

  Raises:
    RunDirectoryError: naming the free and the needed space.
  """
  peak = saved + to_write if kept is None else min(saved + to_write, kept + 1)
  needed = max(0, peak - saved) * checkpoint_bytes + 2**20
  directory = os.path.abspath(run_dir)
  while not os.path.exists(directory):
    directory = os.path.dirname(directory)
  free = shutil.disk_usage(directory).free
  if free < needed:
    raise RunDirectoryError(
        f'{directory!r} has {free / 2**20:.1f} MiB free, but this run needs '
        f'about {needed / 2**20:.1f} MiB: {peak - saved} more checkpoint(s) of '
        f'~{checkpoint_bytes / 2**20:.1f} MiB each at once; free some space '
        'or write the run elsewhere.', flag='root_output_dir')


def write_config(run_dir: str, config: Mapping[str, Any]) -> None:
  """Writes config.json (sorted keys), atomically.

  Args:
    run_dir: the run directory (must exist).
    config: the validated flags, JSON-serializable.

  Raises:
    OSError: the write failed (see `atomic_io.write_bytes`).
  """
  atomic_io.write_text(os.path.join(run_dir, CONFIG_FILE),
                       json.dumps(dict(config), indent=2, sort_keys=True) +
                       '\n')


# Rounds a per-round CSV may hold past the checkpoint a run resumes from,
# where the run's T is not given to `read_rounds`.
_ROUNDS_PAST_CHECKPOINT = 1 << 16


def read_rounds(path: str, last_round: int, total_rounds: int | None = None
                ) -> tuple[list[str], list[dict[str, str]]]:
  """A per-round CSV's columns and its rows up to `last_round` (or [], []).

  Args:
    path: the CSV file; a missing file reads as ([], []).
    last_round: the last round to keep (rows of later rounds, written
      after the checkpoint a run resumes from, are dropped).
    total_rounds: the run's rounds T, which bound the file's size
      (`bounded_reads.round_csv`); None: `last_round` + 65,536 rounds.

  Returns:
    The header's column names and the kept rows, as strings by column.

  Raises:
    bounded_reads.InputRefused: the file is not a regular file, not text or
      larger than a CSV of T rounds can be.
    KeyError: the file has rows but no 'round' column.
    ValueError: a 'round' cell is not an integer.
  """
  if not os.path.lexists(path):
    return [], []
  if total_rounds is None:
    total_rounds = last_round + _ROUNDS_PAST_CHECKPOINT
  text = bounded_reads.read_text(path, bounded_reads.round_csv(total_rounds))
  reader = csv.DictReader(io.StringIO(text, newline=''))
  rows = [row for row in reader if int(row['round']) <= last_round]
  return list(reader.fieldnames or []), rows


def write_rounds(path: str, fields: Sequence[str],
                 rows: Sequence[Mapping[str, object]],
                 csv_format: CsvFormat) -> None:
  """Writes a per-round CSV (a row per round, `fields` in order), atomically.

  A row's missing fields are left empty.

  Args:
    path: the target CSV file.
    fields: the column names, in order (the header).
    rows: one mapping per round, by column name.
    csv_format: the line terminator to write (the engine's format).

  Raises:
    ValueError: a row has a field not in `fields` (csv.DictWriter).
    OSError: the write failed (see `atomic_io.write_bytes`).
  """
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=fields,
                          lineterminator=csv_format.line_terminator)
  writer.writeheader()
  writer.writerows(rows)
  atomic_io.write_text(path, buffer.getvalue())


def write_progress(run_dir: str, round_num: int) -> None:
  """Marks round `round_num` as the last the run reached, atomically.

  Not synced to disk (`atomic_io.write_bytes`'s `durable=False`): the mark
  must outlive a killed process, and costs little every round.

  Args:
    run_dir: the run directory (must exist).
    round_num: the round (0: the initial state).

  Raises:
    OSError: the write failed (see `atomic_io.write_bytes`).
  """
  atomic_io.write_text(os.path.join(run_dir, PROGRESS_FILE),
                       json.dumps({'round': int(round_num)}) + '\n',
                       durable=False)


def read_progress(run_dir: str) -> int | None:
  """The round the progress marker names; None if there is none to read.

  Args:
    run_dir: the run directory.

  Returns:
    The last round an earlier invocation reached (`write_progress`), or
    None when the marker is absent or unreadable (a run written before the
    marker was kept, say).
  """
  try:
    with open(os.path.join(run_dir, PROGRESS_FILE), encoding='utf-8') as stream:
      value = json.load(stream)['round']
  except (OSError, ValueError, KeyError, TypeError):
    return None
  return value if isinstance(value, int) and not isinstance(value, bool) else (
      None)
