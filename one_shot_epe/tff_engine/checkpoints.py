"""Integrity of a run's checkpoint directory (`tff.program` program state).

`tff.program.FileProgramStateManager` saves version N as a SavedModel written
to `<prefix>N_temp<random>` and renamed to `<prefix>N`, so a process killed
while saving leaves a `_temp` directory that is never taken for a version. A
renamed version can still be damaged afterwards (a disk error, a truncated
copy, a hand edit); loading it then fails deep inside TensorFlow. Before a run
resumes, `verify_latest` reads the version it would resume from — the
SavedModel proto and every saved tensor, whose CRC32C checksums TensorFlow
checks on read — and turns any damage into one clear error, before anything
is written. `check_layout` refuses, as clearly, a version saved by version
0.1 of the launcher (learning and tracker state apart), which this version
(the learning state with the canaries' audit) cannot resume.

`ProgramStateCheckpoints` is the TFF engine's `checkpoint_store.
CheckpointStore`: a `tff.program.ProgramStateManager` that TFF's training
loop saves to and loads from, keeping round 0 and the last two rounds.
"""

import asyncio
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import message
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
import tensorflow_federated as tff
from tensorflow_federated.python.program import file_utils

from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import checkpoint_store

__all__ = ['CheckpointError', 'PREFIX', 'ProgramStateCheckpoints',
           'check_layout', 'remove_partial', 'verify', 'verify_latest',
           'versions']

PREFIX = 'program_state_'
_VERSION = re.compile(re.escape(PREFIX) + r'(\d+)$')
_PARTIAL = re.compile(re.escape(PREFIX) + r'\d+_temp\d+$')
CheckpointError = checkpoint_store.CheckpointError


def versions(directory: str) -> list[int]:
  """Complete versions in `directory`, ascending ([] if none or no directory).

  Args:
    directory: The run's checkpoint directory.

  Returns:
    The version numbers N of the `program_state_N` subdirectories.
  """
  if not os.path.isdir(directory):
    return []
  found = []
  for name in os.listdir(directory):
    match = _VERSION.match(name)
    if match and os.path.isdir(os.path.join(directory, name)):
      found.append(int(match.group(1)))
  return sorted(found)


def remove_partial(directory: str) -> list[str]:
  """Deletes the `_temp` directories of interrupted saves; returns their names.

  Args:
    directory: The run's checkpoint directory (nothing is done if absent).

  Returns:
    The names of the removed `program_state_N_tempM` directories, sorted.
  """
  if not os.path.isdir(directory):
    return []
  removed = []
  for name in sorted(os.listdir(directory)):
    if _PARTIAL.match(name):
      shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
      removed.append(name)
  return removed


def verify(path: str, limit: bounded_reads.Limit | None = None) -> None:
  """Reads the SavedModel at `path` completely; raises CheckpointError if damaged.

  Its files are checked first (`bounded_reads.directory_bytes`): regular
  files, together no larger than `limit`.

  Args:
    path: Directory of one saved version (`program_state_N`).
    limit: The most its files may hold (`bounded_reads.checkpoint`); None:
      no size limit.

  Raises:
    CheckpointError: it holds more than `limit` or something other than
      files, a file is missing or unreadable, the SavedModel proto does not
      parse, or a variable cannot be read back.
  """
  try:
    bounded_reads.directory_bytes(path, limit or bounded_reads.NO_LIMIT, 'checkpoint')
  except bounded_reads.InputRefused as refusal:
    raise CheckpointError(str(refusal).rstrip('.')) from None
  try:
    proto = os.path.join(path, 'saved_model.pb')
    saved_model_pb2.SavedModel.FromString(
        bounded_reads.read_bytes(proto, limit or bounded_reads.NO_LIMIT))
    reader = tf.train.load_checkpoint(os.path.join(path, 'variables',
                                                   'variables'))
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (OSError, ValueError, IndexError, message.DecodeError,
          tf.errors.OpError) as error:
    # A missing file, a bad proto, a checksum mismatch or a short read
    # (IndexError, as TF reports a truncated tensor file): the
    # version cannot be resumed from.
    summary = str(error).strip().splitlines()[0] if str(error).strip() else (
        type(error).__name__)
    raise CheckpointError(f'checkpoint {path!r} is damaged ({summary})') from None


# The top-level keys of a version saved by version 0.1 of the launcher.
_OLD_LAYOUT_KEYS = ('learning', 'tracker')


def check_layout(path: str) -> None:
  """Raises CheckpointError if the version at `path` has the 0.1 layout.

  Args:
    path: Directory of one saved version (`program_state_N`).

  Raises:
    CheckpointError: its state's top-level keys include 'learning' or
      'tracker' (the 0.1 layout).
  """
  state = asyncio.run(file_utils.read_saved_model(path))
  if isinstance(state, Mapping) and set(state) & set(_OLD_LAYOUT_KEYS):
    raise CheckpointError(
        f'checkpoint {path!r} was saved by an earlier version of the launcher '
        '(learning and tracker state apart), which this version cannot '
        'resume; start the run afresh in another --run_name or '
        '--root_output_dir')


def verify_latest(directory: str,
                  limit: bounded_reads.Limit | None = None) -> int | None:
  """Verifies the newest complete version in `directory`; returns it (or None).

  Args:
    directory: The run's checkpoint directory.
    limit: The most a version may hold (`verify`).

  Returns:
    The newest complete version, or None when there is none.

  Raises:
    CheckpointError: the newest version is damaged. The message says which
      older version a rerun would use once the damaged one is removed.
  """
  found = versions(directory)
  if not found:
    return None
  latest = found[-1]
  try:
    verify(os.path.join(directory, f'{PREFIX}{latest}'), limit)
  except CheckpointError as error:
    fallback = (f'remove it to resume from version {found[-2]}'
                if len(found) > 1 else 'remove it to start the run afresh')
    raise CheckpointError(f'{error}; {fallback}') from None
  return latest


class ProgramStateCheckpoints(checkpoint_store.CheckpointStore):
  """The TFF engine's checkpoints: TFF program state, round 0 and the last two.

  A `checkpoint_store.CheckpointStore` (plain `save(state, round_num)` and
  `load(round_num, template)`) kept by a `tff.program.
  FileProgramStateManager`, created at the first save or load (creating it
  creates the directory; checking writes nothing). TFF's training loops
  await a `tff.program.ProgramStateManager`: `program_state_manager()` is
  the same checkpoints as one.
  """

  kept = 3  # Round 0 and the last two.

  def __init__(self, directory: str):
    """Keeps checkpoints in `directory`; creates nothing yet.

    Args:
      directory: The run's checkpoints/ folder.
    """
    self.directory = directory
    self._files = None

  def _manager(self) -> tff.program.FileProgramStateManager:
    if self._files is None:
      self._files = tff.program.FileProgramStateManager(
          self.directory, keep_total=self.kept, keep_first=True)
    return self._files

  def rounds(self) -> list[int]:
    """The complete versions, ascending.

    Returns:
      The round numbers N of the `program_state_N` directories (`versions`).
    """
    return versions(self.directory)

  def verify(self, limit: bounded_reads.Limit | None = None) -> None:
    """Raises CheckpointError if the newest version is damaged or too old.

    Too old: saved in the layout of version 0.1 of the launcher.

    Args:
      limit: The most the version's files may hold (`verify`).
    """
    latest = verify_latest(self.directory, limit)
    if latest is not None:
      check_layout(os.path.join(self.directory, f'{PREFIX}{latest}'))

  def remove_partial(self) -> None:
    """Deletes the `_temp` directories of interrupted saves."""
    remove_partial(self.directory)

  def save(self, state: Any, round_num: int) -> None:
    """Saves `state` as round `round_num`; keeps 0 and the last two.

    Args:
      state: The program state after round `round_num`.
      round_num: Its round.
    """
    asyncio.run(self._manager().save(state, round_num))

  def load(self, round_num: int, template: Any) -> Any:
    """The state saved at round `round_num`, in the structure of `template`.

    Args:
      round_num: A saved round.
      template: A program state of the structure to read.

    Returns:
      The saved program state.
    """
    return asyncio.run(self._manager().load(round_num, template))

  def program_state_manager(self) -> tff.program.ProgramStateManager:
    """These checkpoints as the manager TFF's training loops await.

    Returns:
      A `tff.program.ProgramStateManager` reading and writing this directory.
    """
    return _AwaitedCheckpoints(self)


class _AwaitedCheckpoints(tff.program.ProgramStateManager):
  """`ProgramStateCheckpoints` in TFF's coroutine API (names as TFF's)."""

  def __init__(self, store: ProgramStateCheckpoints):
    self._store = store

  async def get_versions(self) -> Sequence[int] | None:
    """The saved versions."""
    return await self._store._manager().get_versions()  # pylint: disable=protected-access

  async def load(self, version: int, structure: Any) -> Any:
    """The state saved at round `version`, in the structure of `structure`."""
    return await self._store._manager().load(version, structure)  # pylint: disable=protected-access

  async def save(self, program_state: Any, version: int) -> None:
    """Saves `program_state` as round `version`."""
    await self._store._manager().save(program_state, version)  # pylint: disable=protected-access
