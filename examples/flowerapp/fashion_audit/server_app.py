"""The ServerApp: DP-FedAvg under Flower's DP wrapper, audited with canaries.

The run config (`[tool.flwr.app.config]` of the app's pyproject.toml, each
key overridable with `flwr run --run-config`) sets the federated task
(`task.setting_from_config`), the noise multiplier, the reports' delta
(-1: num-clients^-1.1), where runs go ('output-dir'), the seed (-1:
unpredictable sampling and noise, as a deployment needs; an int >= 0: a
reproducible simulation) and how often the run checkpoints.

Every value is checked first (`checked_config`), each refusal one line
naming its key, before the audit, Flower's DP wrapper or the data are built:
the ServerApp then raises `RunConfigError`, which Flower records as the
run's failure (its status 'finished:failed', the line as its details), the
line alone in the run's log (`console.refuse`).

A run's directory follows from what defines it (`run_directory`): under
'output-dir', `noise_<z>-<digest>`, the digest of every value but
'output-dir' and 'verbose'; another config is another run, the same config
resumes (the log says 'new run in <dir>' or 'resumed from round N in
<dir>'). An interrupt of the ServerApp's process (SIGINT, SIGTERM: Flower
ends the process through its exit handlers) saves the state after the last
completed round and prints the line naming it (`CanaryAudit.stop`). Unless
'verbose', Flower prints its essential lines once (`console.flower_logs`);
the run ends with the report's opening sentences and table.
"""

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.exit import add_exit_handler

from fashion_audit import console
from fashion_audit import task
from one_shot_epe import validation
from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import audit as audit_lib

app = ServerApp()


class RunConfigError(ValueError):
  """A run config value refused before any work, naming its key."""


def _int(low: int | None = None) -> Callable[[str, object], int]:
  return lambda name, value: validation.check_int(name, value, low)


def _real(low: float, low_open: bool) -> Callable[[str, object], float]:
  return lambda name, value: validation.check_real(name, value, low,
                                                   low_open=low_open)


def _or_minus_one(rule: Callable[[str, object], Any], what: str
                  ) -> Callable[[str, object], Any]:
  """-1 (the key's default meaning), or a value `rule` accepts."""

  def check(name: str, value: object) -> Any:
    if isinstance(value, (int, float)) and not isinstance(
        value, bool) and value == -1:
      return value
    try:
      return rule(name, value)
    except ValueError as error:
      raise ValueError(f'{name} must be -1 ({what}) or '
                       f'{str(error).split(" must be ", 1)[1]}') from None

  return check


def _kind(kind: type, what: str) -> Callable[[str, object], Any]:

  def check(name: str, value: object) -> Any:
    if not isinstance(value, kind) or (kind is str and not value):
      raise ValueError(f'{name} must be {what}; got {value!r}.')
    return value

  return check


# Each key of [tool.flwr.app.config] and its rule.
_RULES: dict[str, Callable[[str, object], Any]] = {
    'num-clients': _int(1),
    'clients-per-round': _int(1),
    'num-server-rounds': _int(1),
    'noise-multiplier': _real(0.0, False),
    'clipping-norm': _real(0.0, False),
    'num-canaries': canary_spec.AUDITED_CANARIES['num_seen'],
    'rounds-per-checkpoint': _int(1),
    'delta': _or_minus_one(validation.check_probability, 'num-clients^-1.1'),
    'seed': _or_minus_one(
        lambda name, value: canary_spec.check_seed(value, name),
        'unpredictable'),
    'output-dir': _kind(str, 'a directory (a non-empty string)'),
    'local-epochs': _int(1),
    'batch-size': _int(1),
    'learning-rate': _real(0.0, True),
    'data-dir': _kind(str, 'a directory (a non-empty string)'),
    'use-synthetic-data': _kind(bool, 'true or false'),
    'verbose': _kind(bool, 'true or false'),
}
# The values that do not define the run (its directory's digest).
_NOT_THE_RUN = ('output-dir', 'verbose')


def _key(name: str) -> str:
  return f'run config {name!r}'


def checked_config(run_config: Mapping[str, Any]) -> dict[str, Any]:
  """Every run config value, checked by its key's rule.

  Args:
    run_config: Flower's run config.

  Returns:
    The values, by key.

  Raises:
    RunConfigError: one line naming the first key whose value is refused
      (or missing).
  """
  values = {}
  for key, rule in _RULES.items():
    if key not in run_config:
      raise RunConfigError(f'{_key(key)} is missing; the app\'s '
                           'pyproject.toml declares it.')
    try:
      values[key] = rule(_key(key), run_config[key])
    except ValueError as error:
      raise RunConfigError(str(error)) from None
  if values['clients-per-round'] > values['num-clients']:
    raise RunConfigError(
        f"{_key('clients-per-round')} must be <= num-clients = "
        f"{values['num-clients']}; got {values['clients-per-round']}.")
  return values


def run_directory(run_config: Mapping[str, Any]) -> str:
  """The run's directory: '<output-dir>/noise_<z>-<digest>', absolute.

  The digest is that of every checked value but 'output-dir' and 'verbose':
  a run config that differs in any other value is another run, in another
  directory; the same values resume the same run.

  Args:
    run_config: The checked run config (`checked_config`).

  Returns:
    The directory's absolute path.
  """
  return os.path.join(
      os.path.abspath(run_config['output-dir']),
      task.run_name(run_config['noise-multiplier'],
                    {key: value for key, value in run_config.items()
                     if key not in _NOT_THE_RUN}))


# The audit's arguments, by the run config keys that set them.
_KEYS = {'num_canaries': 'num-canaries', 'rounds': 'num-server-rounds',
         'delta': 'delta', 'seed': 'seed', 'run_dir': 'output-dir',
         'rounds_per_checkpoint': 'rounds-per-checkpoint'}


def _naming_key(error: ValueError) -> RunConfigError:
  """`error` with the audit's argument name replaced by its run config key."""
  text = str(error)
  # 'num_canaries must be ...', 'num_canaries=400: ...', 'run_dir: ...'.
  name = text.split(maxsplit=1)[0].split('=')[0].rstrip(':') if text else ''
  if name in _KEYS:
    return RunConfigError(f'{_key(_KEYS[name])}{text[len(name):]}')
  return RunConfigError(f'run config: {text}')


def _stop(audit: audit_lib.CanaryAudit) -> None:
  """Flower's exit handler: an unfinished audit saved, its line printed."""
  if audit.report is None:
    print(audit.stop(), file=sys.stderr, flush=True)


def audited_run(grid: Grid, run_config: Mapping[str, Any]
                ) -> audit_lib.CanaryAudit:
  """Trains (or resumes) the audited run the run config describes.

  Every value is checked, then the audit and its wrapped strategy are built,
  then the data is checked, all before the data loads and before any round.

  Args:
    grid: Flower's grid.
    run_config: Flower's run config.

  Returns:
    The audit; its `report` is the run's privacy report.

  Raises:
    RunConfigError: a run config value refused (by its rule, the audit or
      Flower's DP wrapper), or a data directory without Fashion-MNIST,
      naming its key.
  """
  values = checked_config(run_config)
  setting = task.setting_from_config(values)
  seed, delta = values['seed'], values['delta']
  try:
    audit = audit_lib.CanaryAudit(
        run_dir=run_directory(values), num_canaries=setting.num_canaries,
        rounds=setting.rounds,
        delta=setting.num_clients**-1.1 if delta == -1 else delta,
        seed=None if seed == -1 else seed,
        rounds_per_checkpoint=values['rounds-per-checkpoint'])
    strategy = audit.wrap(task.dp_strategy(setting,
                                           values['noise-multiplier']))
  except ValueError as error:
    raise _naming_key(error) from None
  try:
    task.check_data(setting)
  except ValueError as error:
    raise RunConfigError(f"{_key('data-dir')}: {error} Point it at "
                         "Fashion-MNIST's files or set "
                         'use-synthetic-data=true.') from None
  data = task.load_task(setting)  # The test set: the model's accuracy.
  add_exit_handler(functools.partial(_stop, audit),
                   run_before_force_exit=True)
  strategy.start(grid, task.initial_arrays(), num_rounds=setting.rounds,
                 evaluate_fn=task.central_evaluation(data))
  return audit


@app.main()
def main(grid: Grid, context: Context) -> None:
  """Runs the audited DP-FedAvg and prints its report's opening and table.

  Args:
    grid: Flower's grid (the simulation's nodes, or the SuperNodes).
    context: The run's context (its run config).

  Raises:
    RunConfigError: a value refused before any work, in one line naming its
      key; Flower records the run as failed.
  """
  run_config = context.run_config
  with console.flower_logs(run_config.get('verbose') is True):
    try:
      audit = audited_run(grid, run_config)
    except RunConfigError as error:
      console.refuse(error)
  print(console.opening(audit.report))
  print(f'Audited {audit.rounds} rounds (run directory {audit.run_dir}: '
        'report.md, CSVs, plot):')
  print(console.report_table([audit.report]))
