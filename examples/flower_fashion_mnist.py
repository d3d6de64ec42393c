"""Canaries in Flower's DP-FedAvg on Fashion-MNIST, three noise levels, audited.

The task of the Flower App in examples/flowerapp (`fashion_audit.task`:
clients training softmax regression on their non-IID shard of
Fashion-MNIST, Debian's files in /usr/share/datasets/fashion-mnist or with
--use_synthetic_data its synthetic stand-in; FedAvg under Flower's
server-side DP wrapper), run by one program at a few noise multipliers.
Auditing a run takes three lines
(`one_shot_epe.flower_engine.audit.CanaryAudit`): plan the canaries, wrap
the DP strategy, start it. By default this process calls the clients
(`flower_engine.local_grid`); with the flag runtime set to simulation,
Flower's simulation runtime runs them in Ray through
`flwr.simulation.run_simulation`, which Flower 1.42 deprecates in favour of
`flwr run` (the app: docs/flower.md). Flower prints its essential lines once
(`fashion_audit.console`; --verbose: all of them) and the program ends with
the reports' table:

  python -m examples.flower_fashion_mnist --output_dir=/tmp/flower_demo

(or, from anywhere, `python <repo>/examples/flower_fashion_mnist.py`). Ctrl-C
or SIGTERM saves each run after its last completed round and ends with one
line naming it; the same command resumes from there.

With --canary_kind=data the canaries are data canaries instead
(`one_shot_epe.flower_engine.canary_nodes.DataCanaryAudit`): k more nodes
after the N clients, each training on its canary's test images with random
labels; the strategy is the plain DP wrapper, the grid the audit's
`observe`, and each run ends with `finish`, which scores every canary's
cross-entropy on the final model. Such a run does not resume (an interrupt
ends it; the same command runs it again).
"""

import dataclasses
import logging
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

if not __package__:  # Run as a script: its repository's root is the path.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))

from absl import app as absl_app
from absl import flags
from absl import logging as absl_logging
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from examples.flowerapp.fashion_audit import console
from examples.flowerapp.fashion_audit import task as fashion
from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import canary_nodes
from one_shot_epe.flower_engine import local_grid
from one_shot_epe import validation
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import run_directory


def make_audit(setting: fashion.Setting, run_dir: str,
               seed: int = 0) -> audit_lib.CanaryAudit:
  """Step 1: plan the canaries of one run (checked now, before any work).

  Args:
    setting: The run (its rounds, canaries and clients).
    run_dir: The run directory.
    seed: Seeds the sampling and noise of each round.

  Returns:
    The audit.

  Raises:
    ValueError: naming the argument, for a plan the audit refuses (fewer
      than 2 canaries, rounds that cannot fit this machine, ...).
  """
  return audit_lib.CanaryAudit(
      run_dir=run_dir, num_canaries=setting.num_canaries,
      rounds=setting.rounds, delta=setting.num_clients**-1.1, seed=seed)


def make_data_audit(setting: fashion.Setting, run_dir: str,
                    task: fashion.Task) -> canary_nodes.DataCanaryAudit:
  """Step 1 with data canaries: k canary nodes after the setting's clients.

  Args:
    setting: The run (its rounds, canaries and clients).
    run_dir: The run directory.
    task: The task: the canaries' images are its test split's.

  Returns:
    The audit.

  Raises:
    ValueError: naming the argument, for a plan the audit refuses (fewer
      than 2 canaries, more canaries than clients, ...).
  """
  return canary_nodes.DataCanaryAudit(
      run_dir=run_dir, num_canaries=setting.num_canaries,
      rounds=setting.rounds, delta=setting.num_clients**-1.1,
      num_real_nodes=setting.num_clients, kind='emnist',
      num_labels=fashion.CLASSES, images=task.data.test_images)


def data_canary_run(grid: Grid, task: fashion.Task, setting: fashion.Setting,
                    audit: canary_nodes.DataCanaryAudit,
                    strategy: Strategy) -> None:
  """Steps 2 and 3 with data canaries: train on the observed grid, finish.

  Args:
    grid: Flower's grid, of N + k nodes.
    task: The task (the central accuracy).
    setting: The run.
    audit: The run's data canaries (`make_data_audit`).
    strategy: The plain DP wrapper (`fashion.dp_strategy` on N + k nodes).
  """
  # The canaries scored on every round's model (all iterates) and the last.
  result = strategy.start(audit.observe(grid, fashion.canary_losses),
                          fashion.initial_arrays(), num_rounds=setting.rounds,
                          evaluate_fn=fashion.central_evaluation(task))
  audit.finish(result.arrays, fashion.canary_losses, dp=strategy,
               accuracy=fashion.accuracy(result.arrays, task))


def audited_run(grid: Grid, task: fashion.Task, setting: fashion.Setting,
                strategy: Strategy) -> None:
  """Step 3: one audited DP-FedAvg run on `grid` (resumed if its directory
  holds it); the report is then the audit's `report`.

  Args:
    grid: Flower's grid.
    task: The task (for the central accuracy).
    setting: The run.
    strategy: The audited strategy (`CanaryAudit.wrap` of
      `fashion.dp_strategy`).
  """
  strategy.start(grid, fashion.initial_arrays(), num_rounds=setting.rounds,
                 evaluate_fn=fashion.central_evaluation(task))


def simulate(setting: fashion.Setting, serve: Callable[[Grid], None],
             verbose: bool = False, num_canaries: int = 0) -> None:
  """Runs `serve(grid)` as the ServerApp of a Flower simulation (Ray).

  Through `flwr.simulation.run_simulation`, deprecated in Flower 1.42 (it
  warns once): its replacement is `flwr run` of a Flower App, which cannot
  run a function of this process. The ClientApp's nodes are the setting's
  clients (node partition i holds shard i); each Ray actor loads the task
  once (`fashion.load_task`). With data canaries, k more nodes follow.

  Args:
    setting: The clients and their training.
    serve: The ServerApp's work, given Flower's grid.
    verbose: Flower's DEBUG lines too.
    num_canaries: k data canary nodes after the clients (0: none).
  """
  # pylint: disable=g-import-not-at-top
  from flwr.simulation import run_simulation
  client_app, server_app = ClientApp(), ServerApp()

  @client_app.train()
  def train(message: Message, context: Context) -> Message:
    client = int(context.node_config['partition-id'])
    return Message(content=fashion.train_reply(
        fashion.load_task(setting), setting, client,
        message.content['config']['server-round'], message, num_canaries),
                   reply_to=message)

  @server_app.main()
  def main_app(grid: Grid, context: Context) -> None:
    del context
    serve(grid)

  run_simulation(server_app=server_app, client_app=client_app,
                 num_supernodes=setting.num_clients + num_canaries,
                 backend_config={'client_resources': {'num_cpus': 1}},
                 verbose_logging=verbose)


def define_flags() -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Returns:
    The flags' holders by name.
  """
  return {
      'output_dir': flags.DEFINE_string(
          'output_dir', 'output/flower_demo', 'Where the run directories go.'),
      'noise_multipliers': flags.DEFINE_list(
          'noise_multipliers', ['0.5', '1', '2'], 'The noise multipliers z to '
          'run (each >= 0).'),
      'rounds': flags.DEFINE_integer(
          'rounds', fashion.Setting.rounds, 'T, the rounds (>= 1).'),
      'num_canaries': flags.DEFINE_integer(
          'num_canaries', fashion.Setting.num_canaries, 'k seen (and k '
          'unseen) canaries (>= 2).'),
      'data_dir': flags.DEFINE_string(
          'data_dir', fashion.DEFAULT_DATA_DIR, "Fashion-MNIST's files "
          "(Debian's dataset-fashion-mnist); a directory without them exits "
          '2.'),
      'use_synthetic_data': flags.DEFINE_bool(
          'use_synthetic_data', False, 'Train on the synthetic stand-in '
          'instead of --data_dir.'),
      'runtime': flags.DEFINE_enum(
          'runtime', 'local', ['local', 'simulation'],
          "The clients called in-process, or Flower's simulation runtime "
          '(Ray, through the deprecated run_simulation).'),
      'canary_kind': flags.DEFINE_string(
          'canary_kind', 'gradient', "gradient: the paper's canaries, "
          'inserted by a strategy wrapper; data: data canaries, k more nodes '
          'of the federation (--num_canaries at most the 200 clients).'),
      'verbose': flags.DEFINE_bool(
          'verbose', False, "All of Flower's lines (every round's), not "
          'only its essential ones.'),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()


def _defining(setting: fashion.Setting,
              canary_kind: str = 'gradient') -> dict[str, object]:
  """What defines a run of the demo, besides its noise: its directory's name."""
  defining = {**dataclasses.asdict(setting),
              'data_dir': None if setting.use_synthetic_data else
              os.path.abspath(setting.data_dir)}
  if canary_kind != 'gradient':
    defining['canary_kind'] = canary_kind
  return defining


def _checked_plan() -> tuple[fashion.Setting, list[Any], list[Strategy],
                             fashion.Task]:
  """The flags' setting, audits, audited strategies and data, all checked.

  Returns:
    (setting, one audit and one strategy per noise multiplier, task): with
    --canary_kind=data each audit a `DataCanaryAudit` and each strategy the
    plain DP wrapper.

  Raises:
    ValueError: naming the flag, for any bad flag, an output directory that
      cannot be written or a data directory without Fashion-MNIST (checked
      before Flower's strategies are built).
  """
  canary_kind = validation.check_choice(
      '--canary_kind', _FLAGS.canary_kind.value, ('gradient', 'data'))
  setting = fashion.Setting(
      rounds=_FLAGS.rounds.value, num_canaries=_FLAGS.num_canaries.value,
      data_dir=_FLAGS.data_dir.value,
      use_synthetic_data=_FLAGS.use_synthetic_data.value)
  try:
    fashion.check_data(setting)
  except ValueError as error:
    raise ValueError(f'--data_dir: {error} Install Debian\'s '
                     'dataset-fashion-mnist, point --data_dir at the files, '
                     'or pass --use_synthetic_data.') from None
  noises = []
  for value in _FLAGS.noise_multipliers.value:
    try:
      noises.append(validation.PARAMETERS['noise_multiplier'](
          '--noise_multipliers', float(value)))
    except ValueError as error:
      message = str(error) if str(error).startswith('--') else (
          f'--noise_multipliers must be numbers >= 0; got {value!r}.')
      raise ValueError(message) from None
  output_dir = _FLAGS.output_dir.value
  try:
    run_directory.check_writable(output_dir)
  except run_directory.RunDirectoryError as error:
    raise ValueError(f'--output_dir: {error}') from None
  if canary_kind == 'data':
    return (setting, *_data_canary_plan(setting, noises, output_dir))
  try:
    audits = [make_audit(setting, os.path.join(
        output_dir, fashion.run_name(z, _defining(setting)))) for z in noises]
    # 2. Wrap (the canaries' share of a round is checked here).
    wrapped = [audit.wrap(fashion.dp_strategy(setting, z))
               for audit, z in zip(audits, noises)]
  except ValueError as error:  # The audit names its argument: our flag's.
    raise ValueError(f'--{error}') from None
  try:
    task = fashion.load_task(setting)
  except ValueError as error:  # Files there, but malformed.
    raise ValueError(f'--data_dir: {error}') from None
  return setting, audits, wrapped, task


def _data_canary_plan(setting: fashion.Setting, noises: Sequence[float],
                      output_dir: str
                      ) -> tuple[list[canary_nodes.DataCanaryAudit],
                                 list[Strategy], fashion.Task]:
  """The data canaries' audits and plain DP wrappers, and the data.

  The data comes first: the canaries' images are its test split's.

  Args:
    setting: The flags' setting.
    noises: The noise multipliers.
    output_dir: Where the run directories go.

  Returns:
    (one audit and one DP wrapper per noise multiplier, task).

  Raises:
    ValueError: naming the flag, as `_checked_plan`.
  """
  try:
    task = fashion.load_task(setting)
  except ValueError as error:  # Files there, but malformed.
    raise ValueError(f'--data_dir: {error}') from None
  try:
    audits = [make_data_audit(setting, os.path.join(
        output_dir, fashion.run_name(z, _defining(setting, 'data'))), task)
              for z in noises]
  except ValueError as error:  # The audit names its argument: our flag's.
    raise ValueError(f'--{error}') from None
  nodes = setting.num_clients + setting.num_canaries
  return audits, [fashion.dp_strategy(setting, z, nodes) for z in noises], task


def _quiet_logs(verbose: bool) -> None:
  """Each of Flower's lines once; other libraries' INFO lines unless verbose.

  Flower's logger has its own handler: its records reach absl's root
  handler too (each line twice) unless they stop at it.

  Args:
    verbose: Keep absl's INFO verbosity (other libraries' INFO lines).
  """
  logging.getLogger(console.FLOWER_LOGGER).propagate = False
  if not verbose:
    absl_logging.set_verbosity(absl_logging.WARNING)


def main(argv: Sequence[str]) -> None:
  """Runs the demo at each noise multiplier and prints the reports' table.

  Every flag, the output directory and the data are checked before the
  first round (a bad one: one line, exit 2); Ctrl-C or SIGTERM saves the
  run after its last completed round and stops with one line naming it,
  exit 130, and a rerun resumes from it.

  Args:
    argv: absl's leftover arguments (none expected).

  Raises:
    SystemExit: with status 2 for a bad flag (an interrupt ends the process
      with status 130, `interrupts.exit_interrupted`).
  """
  command_line.refuse_positional_arguments(argv)
  verbose = _FLAGS.verbose.value
  _quiet_logs(verbose)
  try:
    setting, audits, wrapped, task = _checked_plan()
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  data = _FLAGS.canary_kind.value == 'data'
  num_canaries = setting.num_canaries if data else 0
  current = []

  def run_all(grid: Grid) -> None:
    with console.flower_logs(verbose):
      for audit, strategy in zip(audits, wrapped):
        if data:
          data_canary_run(grid, task, setting, audit, strategy)
          continue
        current[:] = [audit]
        audited_run(grid, task, setting, strategy)  # 3. Run; audit.report.

  try:
    with interrupts.stop_on_signals():
      if _FLAGS.runtime.value == 'local':
        run_all(local_grid.LocalGrid(
            setting.num_clients + num_canaries,
            lambda node, message: fashion.train_reply(
                task, setting, node - 1, message.content['config'][
                    'server-round'], message, num_canaries)))
      else:
        simulate(setting, run_all, verbose, num_canaries)
  except KeyboardInterrupt as error:
    if current and not isinstance(error, interrupts.Interrupted):
      # Flower's simulation runs the ServerApp in a thread: saved from here.
      error = interrupts.Interrupted(current[0].stop())
    interrupts.exit_interrupted(
        error, 'interrupted; a data-canary run does not resume: rerun the '
        'same command' if data else 'interrupted before the first round; '
        'rerun the same command')
  print(f'Data: {task.source}; {setting.num_clients} clients, '
        f'{setting.clients_per_round} per round, {setting.rounds} rounds.')
  print(console.report_table([audit.report for audit in audits]))
  print(f'Run directories (report.md, CSVs, plot): {_FLAGS.output_dir.value}/')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  absl_app.run(main, flags_parser=command_line.parse_flags_or_exit)
