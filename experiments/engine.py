"""The training engine of a run, picked by its --backend, imported on demand.

`--backend=tff` trains with TensorFlow Federated (`experiments.train`);
`--backend=jax` with the JAX engine (`experiments.train_jax`), which imports
neither TensorFlow nor TFF. Programs that drive many runs
(`experiments.reproduce`) go through this module, so a JAX grid runs on a
machine without TensorFlow (the accelerator machines) and a TFF grid never
loads JAX's engine. Both engines write the same run directory and raise the
same errors (`experiments.run_outputs`).
"""

from types import ModuleType

from experiments import run_outputs
from experiments import train_config


def _engine(config: train_config.TrainConfig) -> ModuleType:
  """The module that trains `config`: `train_jax` or `train` (imported now)."""
  if config.backend == 'jax':
    from experiments import train_jax  # pylint: disable=g-import-not-at-top
    return train_jax
  from experiments import train  # pylint: disable=g-import-not-at-top
  return train


def validate_run(config: train_config.TrainConfig) -> train_config.TrainConfig:
  """Checks `config` against its data and run directory; writes nothing.

  Returns:
    The validated config (run name resolved).

  Raises:
    train_config.ConfigError: as the engine's `prepare`.
  """
  engine = _engine(config)
  if config.backend == 'jax':
    engine.prepare(config)
    return config.validate()
  return engine.prepare(config).config


def run_training(config: train_config.TrainConfig) -> run_outputs.RunResult:
  """Trains (or resumes) the run of `config` and writes its outputs.

  Raises:
    One of `run_outputs.REPORTED_ERRORS`, before anything is written for a
    bad config or a locked run directory.
  """
  return _engine(config).run_training(config)
