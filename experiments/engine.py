"""The one interface of the launcher's two training engines.

`experiments.train` turns a `TrainConfig` into a `PreparedRun` (the canary
plan and DP aggregation of `one_shot_epe.canary_spec`, the participation and
the engine's data) and hands it to the engine its --backend names:
`--backend=tff` (`experiments.backend_tff`, TensorFlow Federated) or
`--backend=jax` (`experiments.backend_jax`, which imports neither
TensorFlow nor TFF). `experiments.train` imports an engine only when a run
asks for it, so a JAX run works on a machine without TensorFlow (the
accelerator machines) and a TFF run never loads JAX's engine.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from experiments import train_config
from one_shot_epe import canary_spec
from one_shot_epe import participation

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
  def data_source(self) -> str:
    """Where the data came from ('synthetic' or a directory), for the report."""


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """A validated run: everything an engine needs to train it.

  Attributes:
    config: The validated config (run name resolved).
    data: The engine's data of the task.
    sampler: Who participates in each round (`participation`).
    total_rounds: T.
    delta: The delta of the report (--delta, else m^-1.1).
    canaries: The canary plan; None for a run without canaries.
    dp: The DP aggregation (its cohort counts the expected canaries).
  """
  config: train_config.TrainConfig
  data: Any
  sampler: participation.ClientSampler
  total_rounds: int
  delta: float
  canaries: canary_spec.CanarySpec | None
  dp: canary_spec.DPAggregation

  @property
  def num_train_clients(self) -> int:
    """m, the training clients of the task."""
    return len(self.data.client_ids)


class Backend(Protocol):
  """What `experiments.train` asks of an engine's module."""

  def check_supported(self, config: train_config.TrainConfig) -> None:
    """Raises `train_config.ConfigError` for flags the engine cannot run."""

  def load_data(self, config: train_config.TrainConfig) -> Data:
    """The task's data; `train_config.ConfigError` naming the flag if absent."""

  def verify_checkpoints(self, directory: str) -> None:
    """Raises ValueError unless the newest checkpoint in `directory` reads."""

  def remove_leftovers(self, run_dir: str) -> None:
    """Deletes the engine's unfinished writes in the run directory."""

  def saved_checkpoints(self, run_dir: str) -> list[int]:
    """The rounds of the complete checkpoints in the run directory."""

  def checkpoint_bytes(self, run: PreparedRun) -> int:
    """About how many bytes one checkpoint of `run` takes."""

  # How many checkpoints the engine keeps (None: all).
  CHECKPOINTS_KEPT: int | None

  def train(self, run: PreparedRun) -> canary_spec.CanaryOutcome:
    """Trains (or resumes) `run` in its locked run directory."""
