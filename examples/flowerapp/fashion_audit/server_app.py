"""The ServerApp: DP-FedAvg under Flower's DP wrapper, audited with canaries.

The run config (`[tool.flwr.app.config]` of the app's pyproject.toml, each
key overridable with `flwr run --run-config`) sets the federated task
(`task.setting_from_config`), the noise multiplier, the reports' delta
(-1: num-clients^-1.1), the run directory ('output-dir', one `noise_<z>`
directory per noise multiplier, relative paths taken from the SuperLink's
working directory), the seed (-1: unpredictable sampling and noise, as a
deployment needs; an int >= 0: a reproducible simulation) and how often the
run checkpoints. The audit is the documented few lines of `audited_run`; a
rerun on the same directory resumes from its newest checkpoint. Unless
'verbose', Flower prints its essential lines once (`console.flower_logs`);
the run ends with the report's table.
"""

import os
import sys
from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fashion_audit import console
from fashion_audit import task
from one_shot_epe.flower_engine import audit as audit_lib

app = ServerApp()


def run_directory(run_config: Mapping[str, Any]) -> str:
  """The run directory: 'output-dir'/noise_<z>, absolute.

  Args:
    run_config: Flower's run config.

  Returns:
    The directory's absolute path.
  """
  noise = float(run_config['noise-multiplier'])
  return os.path.join(os.path.abspath(str(run_config['output-dir'])),
                      f'noise_{noise:g}')


# The audit's arguments, by the run config keys that set them.
_KEYS = {'num_canaries': 'num-canaries', 'rounds': 'num-server-rounds',
         'delta': 'delta', 'seed': 'seed', 'run_dir': 'output-dir',
         'rounds_per_checkpoint': 'rounds-per-checkpoint'}


class RunConfigError(ValueError):
  """A run config value refused before any work, naming its key."""


def _naming_key(error: ValueError) -> RunConfigError:
  """`error` with the audit's argument name replaced by its run config key."""
  text = str(error)
  # 'num_canaries must be ...', 'num_canaries=400: ...', 'delta: ...'.
  name = text.split(maxsplit=1)[0].split('=')[0].rstrip(':') if text else ''
  if name in _KEYS:
    return RunConfigError(f'run config {_KEYS[name]!r}{text[len(name):]}')
  return RunConfigError(f'run config: {text}')


def audited_run(grid: Grid, run_config: Mapping[str, Any]
                ) -> audit_lib.CanaryAudit:
  """Trains (or resumes) the audited run the run config describes.

  The audit and its wrapped strategy are built (every value checked) before
  the data loads and before any round.

  Args:
    grid: Flower's grid.
    run_config: Flower's run config.

  Returns:
    The audit; its `report` is the run's privacy report.

  Raises:
    RunConfigError: a run config value the audit or Flower's DP wrapper
      refuses, or a data directory without Fashion-MNIST, naming its key.
  """
  try:
    setting = task.setting_from_config(run_config)
    seed, delta = int(run_config['seed']), float(run_config['delta'])
    audit = audit_lib.CanaryAudit(
        run_dir=run_directory(run_config), num_canaries=setting.num_canaries,
        rounds=setting.rounds,
        delta=setting.num_clients**-1.1 if delta < 0 else delta,
        seed=None if seed < 0 else seed,
        rounds_per_checkpoint=int(run_config['rounds-per-checkpoint']))
    strategy = audit.wrap(task.dp_strategy(
        setting, float(run_config['noise-multiplier'])))
  except ValueError as error:
    raise _naming_key(error) from None
  try:
    data = task.load_task(setting)  # The test set: the model's accuracy.
  except ValueError as error:
    raise RunConfigError(f"run config 'data-dir': {error} Point it at "
                         "Fashion-MNIST's files or set "
                         'use-synthetic-data=true.') from None
  strategy.start(grid, task.initial_arrays(), num_rounds=setting.rounds,
                 evaluate_fn=task.central_evaluation(data))
  return audit


@app.main()
def main(grid: Grid, context: Context) -> None:
  """Runs the audited DP-FedAvg and prints its report's table.

  Args:
    grid: Flower's grid (the simulation's nodes, or the SuperNodes).
    context: The run's context (its run config).

  Raises:
    SystemExit: status 2, after one line naming the run config key of a
      value refused before any work (`RunConfigError`).
  """
  run_config = context.run_config
  with console.flower_logs(bool(run_config['verbose'])):
    try:
      audit = audited_run(grid, run_config)
    except RunConfigError as error:
      # One line, no traceback; Flower ends the run with its exit code.
      print(error, file=sys.stderr)
      raise SystemExit(2) from None
  resumed = (f'resumed from round {audit.resumed_from}; '
             if audit.resumed_from else '')
  print(f'Audited {audit.rounds} rounds ({resumed}run directory '
        f'{audit.run_dir}: report.md, CSVs, plot):')
  print(console.report_table([audit.report]))
