"""Canaries in a Flower simulation: DP-FedAvg on Fashion-MNIST, audited.

A plain Flower app (`flwr` 1.42): a ClientApp whose clients train softmax
regression (numpy, hand-written gradients) on their non-IID shard of
Fashion-MNIST (`one_shot_epe.data.fashion_mnist`: Debian's files in
/usr/share/datasets/fashion-mnist, or with --use_synthetic_data its
synthetic stand-in), and a
ServerApp that runs FedAvg under Flower's server-side DP wrapper at a few
noise multipliers. Auditing it takes three lines of the ServerApp
(`one_shot_epe.flower_engine.audit.CanaryAudit`): plan the canaries, wrap the
DP strategy, print the report. Flower's simulation runtime
(`flwr.simulation.run_simulation`, Ray) runs the clients, or, with the
flag runtime set to local, this process calls them
(`flower_engine.local_grid`):

  python -m examples.flower_fashion_mnist --output_dir=/tmp/flower_demo
"""

import dataclasses
import functools
import os
import sys
import types
from collections.abc import Callable, Sequence

import numpy as np
from absl import app as absl_app
from absl import flags
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy)

from one_shot_epe.data import fashion_mnist
from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid
from one_shot_epe import validation
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import run_directory

FEATURES, CLASSES = 28 * 28, fashion_mnist.NUM_CLASSES
DEFAULT_DATA_DIR = '/usr/share/datasets/fashion-mnist'


@dataclasses.dataclass(frozen=True)
class Setting:
  """The demo's federated task and DP-FedAvg run.

  Attributes:
    num_clients: Clients (Flower nodes), each a label-shard partition.
    clients_per_round: The cohort FedAvg samples each round.
    rounds: T.
    local_epochs, batch_size, learning_rate: A client's SGD.
    clip: The server-side fixed clip S (0: adaptive clipping).
    num_canaries: k seen canaries (and k unseen).
    data_dir: Fashion-MNIST's files (Debian's dataset-fashion-mnist).
    use_synthetic_data: Train on the synthetic stand-in instead of
      `data_dir`'s files.
  """
  num_clients: int = 200
  clients_per_round: int = 20
  rounds: int = 50
  local_epochs: int = 1
  batch_size: int = 32
  learning_rate: float = 0.1
  clip: float = 1.0
  num_canaries: int = 500
  data_dir: str = DEFAULT_DATA_DIR
  use_synthetic_data: bool = False


@dataclasses.dataclass(frozen=True)
class Task:
  """Standardised images [n, 784] and labels, per client and for testing."""
  client_x: list[np.ndarray]
  client_y: list[np.ndarray]
  test_x: np.ndarray
  test_y: np.ndarray
  source: str


@functools.lru_cache(maxsize=2)
def load_task(setting: Setting) -> Task:
  """The clients' shards and the test set.

  Cached: each Ray actor of the simulation loads it once.

  Args:
    setting: The demo's setting.

  Returns:
    The task.

  Raises:
    ValueError: `setting.data_dir` holds no Fashion-MNIST files (and the
      setting does not ask for the synthetic stand-in), or they are
      malformed.
  """
  if setting.use_synthetic_data:
    data = fashion_mnist.synthetic_clients(setting.num_clients, 60, seed=0)
  else:
    data = fashion_mnist.load(setting.data_dir)
  x = fashion_mnist.standardise(data.train_images).reshape(-1, FEATURES)
  parts = fashion_mnist.partition_by_label_shards(
      data.train_labels, setting.num_clients,
      fashion_mnist.SHARDS_PER_CLIENT, fashion_mnist.PARTITION_SEED)
  y = data.train_labels.astype(np.int64)
  return Task([x[p] for p in parts], [y[p] for p in parts],
              fashion_mnist.standardise(data.test_images).reshape(
                  -1, FEATURES), data.test_labels.astype(np.int64),
              data.source)


def initial_arrays() -> ArrayRecord:
  """Softmax regression's weights [784, 10] and bias [10], zero.

  Returns:
    theta_0 as Flower's arrays ('w', 'b').
  """
  return ArrayRecord({'w': Array(np.zeros((FEATURES, CLASSES), np.float32)),
                      'b': Array(np.zeros(CLASSES, np.float32))})


def _logits(w: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
  return x @ w + b


def local_sgd(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray,
              setting: Setting, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray, float]:
  """Minibatch SGD on the softmax cross-entropy; the new weights, mean loss.

  The gradient of the mean cross-entropy of a batch is x^T (p - onehot(y)) / n
  for w and the column sums of (p - onehot(y)) / n for b.

  Args:
    w: The starting weights [784, 10].
    b: The starting bias [10].
    x: The client's standardised images [n, 784].
    y: Their labels [n].
    setting: Its epochs, batch size and learning rate.
    rng: Shuffles the examples.

  Returns:
    (w, b, the mean batch loss).
  """
  w, b = w.copy(), b.copy()
  losses = []
  for _ in range(setting.local_epochs):
    order = rng.permutation(y.size)
    for start in range(0, y.size, setting.batch_size):
      batch = order[start:start + setting.batch_size]
      logits = _logits(w, b, x[batch])
      logits -= logits.max(axis=1, keepdims=True)
      p = np.exp(logits)
      p /= p.sum(axis=1, keepdims=True)
      losses.append(-np.mean(np.log(p[np.arange(batch.size), y[batch]] +
                                    1e-12)))
      p[np.arange(batch.size), y[batch]] -= 1.0
      p /= batch.size
      w -= setting.learning_rate * (x[batch].T @ p).astype(np.float32)
      b -= setting.learning_rate * p.sum(axis=0).astype(np.float32)
  return w, b, float(np.mean(losses))


def accuracy(arrays: ArrayRecord, task: Task) -> float:
  """The model's accuracy on the test set.

  Args:
    arrays: The model ('w', 'b').
    task: The task.

  Returns:
    The fraction of test images classified right.
  """
  w, b = (arrays[name].numpy() for name in ('w', 'b'))
  return float(np.mean(_logits(w, b, task.test_x).argmax(axis=1) ==
                       task.test_y))


def train_reply(task: Task, setting: Setting, client: int, round_num: int,
                message: Message) -> RecordDict:
  """A client's reply to a training message: its model and equal weight.

  Every client reports num-examples = 1: FedAvg's weights stay equal, as
  DP-FedAvg's sensitivity S / N assumes (the audit refuses unequal ones).

  Args:
    task: The task.
    setting: The run.
    client: The client's index (its shard).
    round_num: The server round (seeds its shuffles).
    message: The training message (the global model).

  Returns:
    The reply's content.
  """
  arrays = message.content['arrays']
  w, b, loss = local_sgd(arrays['w'].numpy(), arrays['b'].numpy(),
                         task.client_x[client], task.client_y[client],
                         setting, np.random.default_rng([client, round_num]))
  return RecordDict({'arrays': ArrayRecord({'w': Array(w), 'b': Array(b)}),
                     'metrics': MetricRecord({'num-examples': 1,
                                              'train_loss': loss})})


def dp_strategy(setting: Setting, noise_multiplier: float):
  """FedAvg under Flower's server-side DP wrapper (fixed or adaptive clip).

  Args:
    setting: The run.
    noise_multiplier: z.

  Returns:
    The DP wrapper.
  """
  fedavg = FedAvg(fraction_train=setting.clients_per_round /
                  setting.num_clients, fraction_evaluate=0.0,
                  min_train_nodes=setting.clients_per_round)
  if setting.clip:
    return DifferentialPrivacyServerSideFixedClipping(
        fedavg, noise_multiplier, setting.clip, setting.clients_per_round)
  return DifferentialPrivacyServerSideAdaptiveClipping(
      fedavg, noise_multiplier, setting.clients_per_round)


def make_audit(setting: Setting, run_dir: str,
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


def audited_run(grid: Grid, task: Task, setting: Setting,
                strategy: Strategy) -> None:
  """Step 3: one audited DP-FedAvg run on `grid` (resumed if its directory
  holds it); the report is then the audit's `report`.

  Args:
    grid: Flower's grid.
    task: The task (for the central accuracy).
    setting: The run.
    strategy: The audited strategy (`CanaryAudit.wrap` of `dp_strategy`).
  """
  strategy.start(grid, initial_arrays(), num_rounds=setting.rounds,
                 evaluate_fn=lambda _, arrays: MetricRecord(
                     {'accuracy': accuracy(arrays, task)}))


def simulate(setting: Setting, serve: Callable[[Grid], None]) -> None:
  """Runs `serve(grid)` as the ServerApp of a Flower simulation (Ray).

  The ClientApp's nodes are the setting's clients (node partition i holds
  shard i); each Ray actor loads the task once (`load_task`).

  Args:
    setting: The clients and their training.
    serve: The ServerApp's work, given Flower's grid.
  """
  # pylint: disable=g-import-not-at-top
  from flwr.simulation import run_simulation
  client_app, server_app = ClientApp(), ServerApp()

  @client_app.train()
  def train(message: Message, context: Context) -> Message:
    # Ray's actors import the module by name (it may be __main__ here).
    from examples import flower_fashion_mnist as demo
    client = int(context.node_config['partition-id'])
    return Message(content=demo.train_reply(
        demo.load_task(setting), setting, client,
        message.content['config']['server-round'], message),
                   reply_to=message)

  @server_app.main()
  def main_app(grid: Grid, context: Context) -> None:
    del context
    serve(grid)

  run_simulation(server_app=server_app, client_app=client_app,
                 num_supernodes=setting.num_clients,
                 backend_config={'client_resources': {'num_cpus': 1}})


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
          'rounds', Setting.rounds, 'T, the rounds (>= 1).'),
      'num_canaries': flags.DEFINE_integer(
          'num_canaries', Setting.num_canaries, 'k seen (and k unseen) '
          'canaries (>= 2).'),
      'data_dir': flags.DEFINE_string(
          'data_dir', DEFAULT_DATA_DIR, "Fashion-MNIST's files (Debian's "
          'dataset-fashion-mnist); a directory without them exits 2.'),
      'use_synthetic_data': flags.DEFINE_bool(
          'use_synthetic_data', False, 'Train on the synthetic stand-in '
          'instead of --data_dir.'),
      'runtime': flags.DEFINE_enum(
          'runtime', 'simulation', ['simulation', 'local'],
          "Flower's simulation runtime (Ray), or the clients called "
          'in-process.'),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()


def _checked_plan() -> tuple[Setting, list[audit_lib.CanaryAudit],
                             list[Strategy], Task]:
  """The flags' setting, audits, audited strategies and data, all checked.

  Returns:
    (setting, one audit and one audited strategy per noise multiplier,
    task).

  Raises:
    ValueError: naming the flag, for any bad flag, an output directory that
      cannot be written or a data directory without Fashion-MNIST.
  """
  setting = Setting(rounds=_FLAGS.rounds.value,
                    num_canaries=_FLAGS.num_canaries.value,
                    data_dir=_FLAGS.data_dir.value,
                    use_synthetic_data=_FLAGS.use_synthetic_data.value)
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
  try:
    audits = [make_audit(setting, os.path.join(output_dir, f'noise_{z:g}'))
              for z in noises]
    # 2. Wrap (the canaries' share of a round is checked here).
    wrapped = [audit.wrap(dp_strategy(setting, z))
               for audit, z in zip(audits, noises)]
  except ValueError as error:  # The audit names its argument: our flag's.
    raise ValueError(f'--{error}') from None
  try:
    task = load_task(setting)
  except ValueError as error:
    raise ValueError(f'--data_dir: {error} Install Debian\'s '
                     'dataset-fashion-mnist, point --data_dir at the files, '
                     'or pass --use_synthetic_data.') from None
  return setting, audits, wrapped, task


def main(argv: Sequence[str]) -> None:
  """Runs the demo at each noise multiplier and prints the reports.

  Every flag, the output directory and the data are checked before the
  first round (a bad one: one line, exit 2); Ctrl-C or SIGTERM stops with
  one line and exit 130, and a rerun resumes.

  Args:
    argv: absl's leftover arguments (none expected).

  Raises:
    SystemExit: with status 2 for a bad flag (an interrupt ends the process
      with status 130, `interrupts.exit_interrupted`).
  """
  command_line.refuse_positional_arguments(argv)
  try:
    setting, audits, wrapped, task = _checked_plan()
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  current = []

  def run_all(grid: Grid) -> None:
    for audit, strategy in zip(audits, wrapped):
      current[:] = [audit]
      audited_run(grid, task, setting, strategy)  # 3. Run; audit.report.

  try:
    with interrupts.stop_on_signals():
      if _FLAGS.runtime.value == 'local':
        run_all(local_grid.LocalGrid(
            setting.num_clients, lambda node, message: train_reply(
                task, setting, node - 1, message.content['config'][
                    'server-round'], message)))
      else:
        simulate(setting, run_all)
  except KeyboardInterrupt as error:
    if current:
      error = interrupts.Interrupted(interrupts.resume_line(
          current[0].last_round, setting.rounds, current[0].run_dir))
    interrupts.exit_interrupted(
        error, 'interrupted before the first round; rerun the same command')
  print(f'Data: {task.source}; {setting.num_clients} clients, '
        f'{setting.clients_per_round} per round, {setting.rounds} rounds.')
  # One table: the reports' headline rows (report.md has the rest).
  rows = [audit.report.to_markdown().split('\n')[:3] for audit in audits]
  print('\n'.join(rows[0][:2] + [row[2] for row in rows]))
  print(f'Run directories (report.md, CSVs, plot): {_FLAGS.output_dir.value}/')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  absl_app.run(main, flags_parser=command_line.parse_flags_or_exit)
