"""The one interface of the launcher's two training engines.

`experiments.train` turns a `TrainConfig` into a `PreparedRun` (the engine's
data and the engine-neutral `one_shot_epe.design.run_plan.RunPlan`:
participation, canaries, DP aggregation and its mechanism) and hands it to
the engine its --backend names:
`--backend=tff` (`experiments.backend_tff`, TensorFlow Federated) or
`--backend=jax` (`experiments.backend_jax`, which imports neither
TensorFlow nor TFF). An engine trains the plan, reporting its rounds to a
`one_shot_epe.runtime.round_record.RoundObserver`, and keeps its checkpoints in its
`one_shot_epe.runtime.checkpoint_store.CheckpointStore`. The launcher writes
config.json, the per-round CSVs, the report and the figure
(`experiments.run_outputs`); an engine may add files of its own beside them
(the TFF engine's TensorBoard events in tensorboard/).
`experiments.train` imports an engine only when a run asks for it, so a JAX
run works on a machine without TensorFlow (the accelerator machines) and a
TFF run never loads JAX's engine.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from experiments import train_config
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_spec
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.design import run_plan

__all__ = ['Backend', 'Data', 'DeviceOutOfMemory', 'PreparedRun',
           'SYNTHETIC_DATA_SEED']

# Synthetic data stands in for a fixed data set: it does not vary with --seed.
SYNTHETIC_DATA_SEED = 0


class DeviceOutOfMemory(RuntimeError):
  """The engine's device ran out of memory (the message says what to change)."""


class Data(Protocol):
  """A task's data as an engine loaded it."""

  @property
  def client_ids(self) -> Sequence[str]:
    """The training clients' ids (participation samples from them)."""

  @property
  def num_parameters(self) -> int:
    """d, the task model's trainable parameters."""

  @property
  def data_source(self) -> str:
    """Where the data came from ('synthetic' or a directory), for the report."""


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """A validated run: everything an engine needs to train it.

  Attributes:
    config: The validated config (run name resolved).
    data: The engine's data of the task.
    plan: The run, engine-neutral (its delta: --delta, else m^-1.1).
    canaries: With data canaries (--canary_kind=data or both), every
      tracked data canary's examples, seen first
      (`run_planning.data_canary_arrays`); None otherwise.
  """
  config: train_config.TrainConfig
  data: Any
  plan: run_plan.RunPlan
  canaries: client_arrays.ClientArrays | None = None

  @property
  def num_train_clients(self) -> int:
    """m, the training clients of the task."""
    return len(self.data.client_ids)


class Backend(Protocol):
  """What `experiments.train` asks of an engine's module: all of it."""

  # Whether the engine trains several runs as one program (`train_program`);
  # the launcher refuses --runs_per_program > 1 otherwise (`train.run_program`).
  PROGRAMS: bool

  def supports(self, plan: run_plan.Supportable) -> run_plan.Support:
    """Whether the engine runs `plan` (its mechanism and canaries), and why not.

    The engine's own `supports` (`tff_engine.support`, `jax_engine.support`),
    which asks the mechanisms' one engine x mechanism table; the launcher
    keeps no list of its own.

    Args:
      plan: the run's plan.

    Returns:
      A true `run_plan.Support`, or a false one with the reason.
    """

  def check_options(self, config: train_config.TrainConfig) -> None:
    """Raises `train_config.ConfigError` for an engine flag it cannot take.

    The flags that belong to one engine (its devices, workers, data
    placement), not to the plan (`supports`).

    Args:
      config: the validated launcher config.

    Raises:
      train_config.ConfigError: naming the flag the engine cannot take.
    """

  def load_data(self, config: train_config.TrainConfig) -> Data:
    """The task's data; `train_config.ConfigError` naming the flag if absent.

    Args:
      config: the validated launcher config (task, data directory, sizes).

    Returns:
      The engine's data of the task.

    Raises:
      train_config.ConfigError: the data is absent or does not fit the flags.
    """

  # The layout of the engine's per-round CSVs (`run_directory.CsvFormat`).
  CSV_FORMAT: run_directory.CsvFormat

  def checkpoints(self, directory: str) -> checkpoint_store.CheckpointStore:
    """The engine's checkpoints in `directory` (creates nothing).

    Args:
      directory: the run directory's checkpoint folder.

    Returns:
      The engine's store of checkpoints there.
    """

  def checkpoint_bytes(self, run: PreparedRun) -> int:
    """About how many bytes one checkpoint of `run` takes.

    Args:
      run: the prepared run.

    Returns:
      An estimate in bytes, for `run_directory.check_free_space`.
    """

  def check_device_memory(self, run: PreparedRun, runs: int = 1) -> None:
    """`train_config.ConfigError` if `runs` runs like `run` (one program)
    cannot fit the device's memory.

    Args:
      run: the prepared run (all runs of a program are alike).
      runs: how many such runs train as one program (>= 1).

    Raises:
      train_config.ConfigError: the runs would not fit; the message says
        which flag to lower.
    """

  def train(self, run: PreparedRun, store: checkpoint_store.CheckpointStore,
            observer: round_record.RoundObserver) -> canary_spec.CanaryOutcome:
    """Trains (or resumes from `store`) `run`, reporting to `observer`.

    Args:
      run: the prepared run.
      store: the run's checkpoints; training resumes from the newest.
      observer: receives every round's record and the canary cosines.

    Returns:
      What the run measured (`canary_spec.CanaryOutcome`): the seen and
      unseen canaries' final-model and max-over-rounds cosines (Algorithms
      2 and 3), the test accuracy, d and the rounds this invocation
      trained.
    """

  def train_program(
      self, runs: Sequence[PreparedRun],
      stores: Sequence[checkpoint_store.CheckpointStore],
      observers: Sequence[round_record.RoundObserver]
  ) -> list[canary_spec.CanaryOutcome]:
    """Trains `runs` as one program (engines with `PROGRAMS` only).

    Args:
      runs: the prepared runs, alike but for their seeds and run names.
      stores: each run's checkpoints, in the order of `runs`.
      observers: each run's observer, in the order of `runs`.

    Returns:
      Each run's `canary_spec.CanaryOutcome`, in the order of `runs`.
    """

  def correlated_report(
      self, run: PreparedRun) -> dp_fedavg.CorrelatedNoise | None:
    """The report's numbers of `run`'s correlated noise; None if it has none.

    Args:
      run: the prepared run.

    Returns:
      The correlated-noise numbers for the report (matrix mechanisms only),
      else None.
    """
