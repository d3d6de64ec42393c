r"""DP-FedAvg with canaries on EMNIST or StackOverflow, then a privacy report.

The experiment launcher of Section 5 of Andrew et al., "One-shot Empirical
Privacy Estimation for Federated Learning" (ICLR 2024). One run trains
DP-FedAvg (`tff.learning.algorithms.build_unweighted_fed_avg`) with k seen
canary clients inserted by the canary aggregator
(`one_shot_epe.canary_aggregator`, Algorithms 2 and 3) and m unseen canaries
tracked alongside, driven by `tff.simulation.run_training_process`, and ends
with the privacy report of both threat models (final model: Algorithm 2; all
iterates: Algorithm 3) and the cosine density plot.

  python -m experiments.train --flagfile=configs/demo.cfg --noise_multiplier=0.1
  python -m experiments.train --task=emnist_character --data_dir=~/tff_data \
      --clients_per_round=101 --train_epochs=15 --noise_multiplier=0.0487 ...

Outputs, under `--root_output_dir/--run_name/` (all result files written
atomically):

  config.json            the validated flags; a rerun must match them
  metrics.csv            per-round compact metrics (column `round`), via
                         `tff.program.CSVFileReleaseManager`
  canary_cosines.csv     per-round mean and max cosine of the seen and of the
                         unseen canaries with the round's noised aggregate
                         (written in blocks of --canary_buffer_rounds)
  tensorboard/           both, `tff.program.TensorBoardReleaseManager`
  checkpoints/           `tff.program.FileProgramStateManager` versions:
                         learning state and canary tracker state
  final_cosines.csv      column `cosine`: seen canaries vs the final model
  max_cosines.csv        columns `seen`, `unseen`: max-over-rounds cosines
  report.json, report.md the privacy report (`one_shot_epe.run_report`)
  cosine_densities.png   this run's cosine sets against the null N(0, 1/d)

The cosine CSVs are in the format of `python -m one_shot_epe.estimate`; row i
is canary i (seen ids 0..k-1; unseen canary i has id UNSEEN_ID_OFFSET + i).

Resume: checkpoints are taken at round 0, every --rounds_per_checkpoint rounds
and after the last round. Rerunning the same command (same flags) loads the
latest complete checkpoint and continues from there; a finished run does no
training and rewrites the same results. A checkpoint is complete or absent
(TFF writes it to a temporary directory and renames it); a rerun deletes the
temporary leftovers of a killed run, and refuses with exit status 2 to resume
from a checkpoint whose files fail to read back (`one_shot_epe.checkpoints`).
Per-round metrics after the resumed checkpoint are re-released, replacing
their earlier rows.

Reproducibility: on a given machine and TensorFlow build, a run with canaries
is a pure function of its flags (--num_canaries=0 runs use TFF's own DP
factory, whose noise is unseeded). Each round's client
selection and shuffles depend on (--seed, round) only; the DP noise of round t
is drawn from (noise seed, t) (`one_shot_epe.seeded_queries`, the noise seed
derived from --seed; --noseeded_noise turns this off, as a deployment must);
the EMNIST model's dropout masks are keyed by the layer's input and its
batches kept in order (`one_shot_epe.tasks.determinism`). So a resumed run
(even one killed with SIGKILL mid-round or mid-checkpoint), a second run with
the same flags, and a run spread over --tff_workers processes all write the
same final cosines, maxima and report, byte for byte
(tests/train_resume_test.py); only the wall-clock columns of metrics.csv
differ.

Every flag is checked before anything is written; a bad flag (or a data
directory that does not exist or holds the wrong files, or a run directory
holding a run with other flags) exits with status 2 and a message naming it.
The flags are defined only when this module runs as a program (or by
`define_flags`), so the launcher is also a library:

  run_training(TrainConfig(...)) -> RunResult   train or resume, write outputs
  prepare(TrainConfig(...)) -> PreparedRun      validate only, write nothing
  define_flags(flag_values); config_from_flags(flag_values) -> TrainConfig
                                                the same flags (and flagfiles)
                                                on any absl FlagValues
"""

import os

if __name__ == '__main__':
  # Run as a program: quiet TensorFlow's C++ INFO logs (also in TFF's worker
  # process, which inherits the environment) unless the user chose a level.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

# pylint: disable=g-import-not-at-top,g-bad-import-order
import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import numbers
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

from one_shot_epe import accelerators
from one_shot_epe import atomic_io
from one_shot_epe import cli
from one_shot_epe import canaries
from one_shot_epe import canary_aggregator
from one_shot_epe import checkpoints
from one_shot_epe import cosine_tracking
from one_shot_epe import distributed_runtime
from one_shot_epe import final_model
from one_shot_epe import participation
from one_shot_epe import plots
from one_shot_epe import run_report
from one_shot_epe import runtime
from one_shot_epe import tasks

OPTIMIZERS = ('sgd', 'sgdm', 'adam')
FINAL_MODEL_STATISTICS = ('delta', 'final')
SAMPLINGS = ('shuffle', 'bernoulli', 'poisson')

# The accuracy put in the report, per task. StackOverflow excludes padding,
# out-of-vocabulary and end-of-sentence tokens from the accuracy, as Reddi et
# al. (2020) report it.
ACCURACY_METRICS = {
    'emnist_character': 'sparse_categorical_accuracy',
    'stackoverflow_word': 'accuracy_without_out_of_vocab_or_end_of_sentence',
}

# Flags that may differ between a run and its resumption: they name the run's
# location or only affect how it is displayed or how often it is saved.
# The TFF workers are among them: a run's results do not depend on how many
# workers train its clients (`distributed_runtime`).
_RESUMABLE_DIFFERENCES = ('root_output_dir', 'run_name', 'progress_bar',
                          'rounds_per_checkpoint', 'canary_buffer_rounds',
                          'tff_workers', 'tff_worker_addresses')
_MAX_SEED = 2**31 - 1
_MAX_LOCAL_WORKERS = 64
_CHECKPOINTS_KEPT = 3  # Round 0 (it holds the initial model) and the last two.

# Synthetic data stands in for a fixed data set: it does not vary with --seed.
SYNTHETIC_DATA_SEED = 0

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'
CANARY_COSINES_FILE = 'canary_cosines.csv'
TENSORBOARD_DIR = 'tensorboard'
CHECKPOINT_DIR = 'checkpoints'
FINAL_COSINES_FILE = 'final_cosines.csv'
MAX_COSINES_FILE = 'max_cosines.csv'
REPORT_JSON_FILE = 'report.json'
REPORT_MARKDOWN_FILE = 'report.md'
DENSITY_PLOT_FILE = 'cosine_densities.png'


class ConfigError(ValueError):
  """A flag (or a `TrainConfig` field) is invalid; the message names it."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything one training run depends on; field names are the flag names.

  `validate` checks every field; `run_training` validates before it writes.
  The help text of each flag is in `_FLAG_HELP`.
  """
  task: str = 'emnist_character'
  data_dir: str | None = None
  use_synthetic_data: bool = False
  synthetic_num_clients: int = 100
  synthetic_examples_per_client: int = 32
  vocab_size: int = 10_000
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 0.1
  client_momentum: float = 0.9
  server_optimizer: str = 'sgd'
  server_learning_rate: float = 1.0
  server_momentum: float = 0.9
  client_batch_size: int = 16
  client_epochs_per_round: int = 1
  max_examples_per_client: int = -1
  sampling: str = 'shuffle'
  clients_per_round: int = 10
  train_epochs: int | None = None
  total_rounds: int | None = None
  noise_multiplier: float = 0.0
  clipping_norm: float = 0.0
  target_unclipped_quantile: float = 0.5
  initial_clip: float = 0.1
  clip_learning_rate: float = 0.2
  num_canaries: int = 1000
  num_unseen_canaries: int = 1000
  canary_repeats: int = 1
  canary_seed: int = 0
  canary_buffer_rounds: int | None = None
  final_model_statistic: str = 'delta'
  delta: float | None = None
  alpha: float = 0.05
  rounds_per_evaluation: int = 10
  max_eval_examples: int = 10_000
  rounds_per_checkpoint: int = 50
  root_output_dir: str = '/tmp/one_shot_epe'
  run_name: str | None = None
  seed: int = 0
  seeded_noise: bool = True
  tff_workers: int = 1
  tff_worker_addresses: str = ''
  accelerator: str = 'cpu'
  progress_bar: bool = True

  def validate(self) -> 'TrainConfig':
    """Checks every field on its own; returns the config with names resolved.

    Checks that need the task's data (clients per round against the number
    of clients) are done by `prepare`.

    Raises:
      ConfigError: naming the first invalid flag and its allowed range.
    """
    _check_choice('task', self.task, tasks.TASK_NAMES)
    _check_choice('client_optimizer', self.client_optimizer, OPTIMIZERS)
    _check_choice('server_optimizer', self.server_optimizer, OPTIMIZERS)
    _check_choice('sampling', self.sampling, SAMPLINGS)
    _check_choice('final_model_statistic', self.final_model_statistic,
                  FINAL_MODEL_STATISTICS)
    _check_choice('accelerator', self.accelerator, accelerators.ACCELERATORS)
    for name in ('use_synthetic_data', 'seeded_noise', 'progress_bar'):
      if not isinstance(getattr(self, name), (bool, np.bool_)):
        raise ConfigError(f'--{name} must be true or false; got '
                          f'{getattr(self, name)!r}.')
    for name in ('synthetic_num_clients', 'synthetic_examples_per_client',
                 'vocab_size', 'client_batch_size', 'client_epochs_per_round',
                 'clients_per_round', 'canary_repeats', 'rounds_per_evaluation',
                 'rounds_per_checkpoint'):
      _check_int(name, getattr(self, name), 1)
    if self.canary_buffer_rounds is not None:
      _check_int('canary_buffer_rounds', self.canary_buffer_rounds, 1)
    _check_int('tff_workers', self.tff_workers, 1, _MAX_LOCAL_WORKERS)
    if not isinstance(self.tff_worker_addresses, str):
      raise ConfigError('--tff_worker_addresses must be a comma-separated '
                        f'list of host:port; got {self.tff_worker_addresses!r}.')
    if self.tff_worker_addresses:
      if self.tff_workers != 1:
        raise ConfigError('set at most one of --tff_workers and '
                          f'--tff_worker_addresses; got --tff_workers='
                          f'{self.tff_workers}.')
      try:
        distributed_runtime.parse_addresses(self.tff_worker_addresses)
      except ValueError as error:
        raise ConfigError(f'--tff_worker_addresses: {error}') from None
    for name in ('max_examples_per_client', 'max_eval_examples'):
      value = getattr(self, name)
      if value != -1 or isinstance(value, bool):
        _check_int(name, value, 1, note=' or -1 for all examples')
    for name in ('seed', 'canary_seed'):
      _check_int(name, getattr(self, name), 0, _MAX_SEED)
    for name in ('client_learning_rate', 'server_learning_rate',
                 'initial_clip'):
      _check_float(name, getattr(self, name), 0.0, math.inf, low_open=True)
    for name in ('client_momentum', 'server_momentum'):
      _check_float(name, getattr(self, name), 0.0, 1.0, high_open=True)
    for name in ('noise_multiplier', 'clipping_norm', 'clip_learning_rate'):
      _check_float(name, getattr(self, name), 0.0, math.inf)
    _check_float('target_unclipped_quantile', self.target_unclipped_quantile,
                 0.0, 1.0, low_open=True, high_open=True)
    _check_float('alpha', self.alpha, 0.0, 0.5, low_open=True, high_open=True)
    if self.delta is not None:
      _check_float('delta', self.delta, 0.0, 1.0, low_open=True,
                   high_open=True)
    if (self.train_epochs is None) == (self.total_rounds is None):
      raise ConfigError('set exactly one of --train_epochs and --total_rounds; '
                        f'got --train_epochs={self.train_epochs} and '
                        f'--total_rounds={self.total_rounds}.')
    if self.train_epochs is not None:
      _check_int('train_epochs', self.train_epochs, 1)
    else:
      _check_int('total_rounds', self.total_rounds, 1)
    for name in ('num_canaries', 'num_unseen_canaries'):
      value = getattr(self, name)
      if value != 0 or isinstance(value, bool):
        _check_int(name, value, 2, note=' (2 or more to fit a Gaussian), or 0')
    if self.num_unseen_canaries and not self.num_canaries:
      raise ConfigError('--num_unseen_canaries needs seen canaries '
                        '(--num_canaries >= 2); got --num_canaries=0.')
    if self.sampling != 'shuffle' and self.canary_repeats != 1:
      raise ConfigError(
          f'--canary_repeats applies to --sampling=shuffle only (with '
          f'--sampling={self.sampling} canaries are sampled like real '
          f'clients); got --canary_repeats={self.canary_repeats}.')
    if self.use_synthetic_data == bool(self.data_dir):
      raise ConfigError('pass exactly one of --data_dir and '
                        '--use_synthetic_data; got --data_dir='
                        f'{self.data_dir!r}, --use_synthetic_data='
                        f'{self.use_synthetic_data}.')
    if not isinstance(self.root_output_dir, str) or not self.root_output_dir:
      raise ConfigError('--root_output_dir must be a non-empty path; got '
                        f'{self.root_output_dir!r}.')
    run_name = self.run_name or self.default_run_name()
    if (not isinstance(run_name, str) or run_name in ('.', '..') or
        os.sep in run_name or (os.altsep and os.altsep in run_name)):
      raise ConfigError('--run_name must be a plain directory name (no path '
                        f'separators); got {self.run_name!r}.')
    data_dir = self.data_dir and os.path.abspath(
        os.path.expanduser(self.data_dir))
    return dataclasses.replace(self, run_name=run_name, data_dir=data_dir)

  def default_run_name(self) -> str:
    """The run directory name when --run_name is not given."""
    return (f'{self.task}_noise{self.noise_multiplier:g}_'
            f'rep{self.canary_repeats}_seed{self.seed}')

  @property
  def run_dir(self) -> str:
    return os.path.join(self.root_output_dir,
                        self.run_name or self.default_run_name())

  def to_json_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
  if value not in choices:
    raise ConfigError(f'--{name} must be one of {list(choices)}; got '
                      f'{value!r}.')


def _check_int(name: str, value: Any, low: int, high: int | None = None,
               note: str = '') -> None:
  allowed = f'[{low}, {"inf" if high is None else high}]'
  if (isinstance(value, (bool, np.bool_)) or
      not isinstance(value, numbers.Integral) or value < low or
      (high is not None and value > high)):
    raise ConfigError(f'--{name} must be an integer in {allowed}{note}; got '
                      f'{value!r}.')


def _check_float(name: str, value: Any, low: float, high: float, *,
                 low_open: bool = False, high_open: bool = False) -> None:
  allowed = (f'{"(" if low_open else "["}{low:g}, {high:g}'
             f'{")" if high_open or math.isinf(high) else "]"}')
  if (isinstance(value, (bool, np.bool_)) or
      not isinstance(value, numbers.Real) or not math.isfinite(value) or
      value < low or value > high or (low_open and value == low) or
      (high_open and value == high)):
    raise ConfigError(f'--{name} must be a finite number in {allowed}; got '
                      f'{value!r}.')


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What a run produced.

  Attributes:
    config: The validated config (run name resolved).
    run_dir: Directory holding the outputs listed in the module docstring.
    total_rounds: T, the number of training rounds of the run.
    resumed_from_round: The checkpoint round this invocation started from (0
      for a fresh run; T when the run was already complete).
    rounds_trained: Training rounds this invocation ran.
    dim: d, the number of model parameters.
    delta: The delta of the report.
    accuracy: Final test accuracy (`ACCURACY_METRICS[task]`).
    final_cosines: Seen canaries' cosines with the final model (empty without
      canaries).
    seen_maxima, unseen_maxima: Max-over-rounds cosines (empty without).
    report: The privacy report; None without canaries.
  """
  config: TrainConfig
  run_dir: str
  total_rounds: int
  resumed_from_round: int
  rounds_trained: int
  dim: int
  delta: float
  accuracy: float
  final_cosines: np.ndarray
  seen_maxima: np.ndarray
  unseen_maxima: np.ndarray
  report: run_report.RunReport | None


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """A validated run: config, data, participation, aggregator, device."""
  config: TrainConfig
  task: tasks.Task
  sampler: participation.ClientSampler
  total_rounds: int
  delta: float
  canary_config: canary_aggregator.CanaryConfig | None
  aggregator: tff.aggregators.UnweightedAggregationFactory
  device: str  # TF device of the launcher's canary work.


def prepare(config: TrainConfig) -> PreparedRun:
  """Validates `config` against the data and builds what training needs.

  Reads the data directory (never downloads) and the run directory's
  `config.json` if there is one; writes nothing.

  Raises:
    ConfigError: a flag is invalid, the data directory is missing or
      malformed, the run directory holds a run with other flags, or the
      checkpoint a rerun would resume from is damaged.
  """
  config = config.validate()
  try:
    task = tasks.get_task(
        config.task, client_batch_size=config.client_batch_size,
        client_epochs_per_round=config.client_epochs_per_round,
        max_examples_per_client=config.max_examples_per_client,
        data_dir=config.data_dir, use_synthetic_data=config.use_synthetic_data,
        synthetic_num_clients=config.synthetic_num_clients,
        synthetic_examples_per_client=config.synthetic_examples_per_client,
        seed=SYNTHETIC_DATA_SEED, vocab_size=config.vocab_size)
  except (ValueError, FileNotFoundError) as error:
    raise ConfigError(f'--data_dir: {error}') from None
  num_clients = task.num_train_clients
  if config.clients_per_round > num_clients:
    raise ConfigError(f'--clients_per_round must be in [1, {num_clients}] '
                      f'(the task has {num_clients} training clients); got '
                      f'{config.clients_per_round}.')
  client_ids = task.preprocessed_train_data.client_ids
  if config.sampling == 'shuffle':
    sampler = participation.ShuffledEpochs(client_ids,
                                           config.clients_per_round,
                                           config.seed)
    rounds_per_epoch = sampler.rounds_per_epoch
  else:
    sampler_class = (participation.BernoulliSampling if config.sampling ==
                     'bernoulli' else participation.PoissonSampling)
    sampler = sampler_class(client_ids, config.clients_per_round, config.seed)
    rounds_per_epoch = math.ceil(num_clients / config.clients_per_round)
  total_rounds = (config.total_rounds if config.total_rounds is not None else
                  config.train_epochs * rounds_per_epoch)
  if config.canary_repeats > total_rounds:
    raise ConfigError(f'--canary_repeats must be in [1, {total_rounds}] (the '
                      f'number of training rounds); got '
                      f'{config.canary_repeats}.')
  delta = config.delta if config.delta is not None else num_clients**-1.1
  canary_config = None
  if config.num_canaries:
    if config.sampling == 'shuffle':
      schedule = participation.periodic_canary_schedule(
          config.num_canaries, total_rounds, config.canary_repeats,
          config.canary_seed)
    else:
      schedule = sampler.canary_schedule(config.num_canaries, total_rounds,
                                         config.canary_seed)
    canary_config = canary_aggregator.CanaryConfig(
        seed=config.canary_seed, num_seen=config.num_canaries,
        num_unseen=config.num_unseen_canaries,
        schedule=schedule.as_round_lists(), tracking='external',
        buffer_rounds=config.canary_buffer_rounds or min(
            cosine_tracking.default_tracker_rounds(task.num_parameters),
            config.rounds_per_checkpoint, total_rounds))
  # Canary clients participate as real clients do (Sec. 4), so the expected
  # cohort of the DP average counts them: k * repetitions presentations
  # spread over the rounds (or, for sampled participation, k at the real
  # clients' inclusion rate).
  expected_canaries = (config.num_canaries * config.canary_repeats /
                       total_rounds if config.sampling == 'shuffle' else
                       config.num_canaries *
                       sampler.expected_clients_per_round / num_clients)
  try:
    aggregator = build_aggregator(
        config, sampler.expected_clients_per_round + expected_canaries,
        canary_config)
  except ValueError as error:
    raise ConfigError(
        f'--noise_multiplier={config.noise_multiplier} with '
        f'--clients_per_round={config.clients_per_round}: {error}') from None
  try:
    device = accelerators.launcher_device(config.accelerator)
  except ValueError as error:
    raise ConfigError(str(error)) from None
  _check_run_dir(config)
  try:
    checkpoints.verify_latest(os.path.join(config.run_dir, CHECKPOINT_DIR))
  except checkpoints.CheckpointError as error:
    raise ConfigError(f'--run_name: {error}.') from None
  return PreparedRun(config=config, task=task, sampler=sampler,
                     total_rounds=total_rounds, delta=delta,
                     canary_config=canary_config, aggregator=aggregator,
                     device=device)


def build_aggregator(
    config: TrainConfig, clients_per_round: float,
    canary_config: canary_aggregator.CanaryConfig | None
) -> tff.aggregators.UnweightedAggregationFactory:
  """DP-FedAvg's Gaussian aggregation; fixed or adaptive clip (Andrew+ 2021).

  The noised sum of clipped updates is divided by `clients_per_round`, the
  expected number of participants per round (real clients and canaries), which
  also normalises the adaptive clip's count of unclipped updates. With
  canaries, the canary aggregator inserts and tracks them, drawing its noise
  from `noise_seed(config)`; without (--num_canaries=0, the accuracy
  baseline), TFF's own DP factory does the same clipping, noising and
  normalisation with unseeded noise.
  """
  if config.clipping_norm > 0:
    if canary_config is None:
      return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          noise_multiplier=config.noise_multiplier,
          clients_per_round=clients_per_round, clip=config.clipping_norm)
    return canary_aggregator.CanaryDPFactory.gaussian_fixed(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=clients_per_round, clip=config.clipping_norm,
        canary_config=canary_config, noise_seed=noise_seed(config))
  adaptive = dict(noise_multiplier=config.noise_multiplier,
                  clients_per_round=clients_per_round,
                  initial_l2_norm_clip=config.initial_clip,
                  target_unclipped_quantile=config.target_unclipped_quantile,
                  learning_rate=config.clip_learning_rate)
  if canary_config is None:
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        **adaptive)
  return canary_aggregator.CanaryDPFactory.gaussian_adaptive(
      canary_config=canary_config, noise_seed=noise_seed(config), **adaptive)


def _check_run_dir(config: TrainConfig) -> None:
  """The run directory must be new, empty, or hold a run with the same flags."""
  root, run_dir = config.root_output_dir, config.run_dir
  if os.path.exists(root) and not os.path.isdir(root):
    raise ConfigError(f'--root_output_dir {root!r} exists and is not a '
                      'directory.')
  if not os.path.exists(run_dir):
    return
  if not os.path.isdir(run_dir):
    raise ConfigError(f'--run_name: {run_dir!r} exists and is not a directory.')
  config_path = os.path.join(run_dir, CONFIG_FILE)
  if not os.path.exists(config_path):
    if os.listdir(run_dir):
      raise ConfigError(f'--run_name: {run_dir!r} is not empty and holds no '
                        f'{CONFIG_FILE}; choose another --run_name or '
                        '--root_output_dir.')
    return
  try:
    with open(config_path, encoding='utf-8') as stream:
      saved = json.load(stream)
  except (OSError, ValueError) as error:
    raise ConfigError(f'--run_name: cannot read {config_path!r}: {error}.'
                      ) from None
  current = config.to_json_dict()
  differing = sorted(
      name for name in set(saved) | set(current)
      if name not in _RESUMABLE_DIFFERENCES and
      saved.get(name) != current.get(name))
  if differing:
    changes = ', '.join(f'--{name}={saved.get(name)!r} (now '
                        f'{current.get(name)!r})' for name in differing)
    raise ConfigError(f'--run_name: {run_dir!r} holds a run with other flags: '
                      f'{changes}; rerun with the same flags to resume, or '
                      'choose another --run_name.')


def _optimizer(name: str, learning_rate: float,
               momentum: float) -> tff.learning.optimizers.Optimizer:
  if name == 'sgd':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate)
  if name == 'sgdm':
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def compact_metrics(metrics: Any) -> collections.OrderedDict[str, Any]:
  """Flattens nested round metrics to '/'-joined names of scalars only.

  Non-scalar values (none are expected; the aggregator reports summaries) are
  dropped so that no d-sized vector reaches the CSV or TensorBoard.
  """
  flat = collections.OrderedDict()

  def visit(prefix: str, value: Any) -> None:
    if isinstance(value, Mapping):
      items = value.items()
    elif hasattr(value, '_asdict'):
      items = value._asdict().items()
    elif isinstance(value, (list, tuple)):
      items = ((str(i), v) for i, v in enumerate(value))
    else:
      array = np.asarray(value)
      if array.ndim == 0 and array.dtype.kind in 'biuf':
        flat[prefix] = array.item()
      return
    for key, item in items:
      visit(f'{prefix}/{key}' if prefix else str(key), item)

  visit('', metrics)
  return flat


class _CompactReleaseManager(tff.program.ReleaseManager):
  """Releases `compact_metrics(value)` to every target release manager."""

  def __init__(self, targets: Sequence[tff.program.ReleaseManager]):
    self._targets = list(targets)

  async def release(self, value: Any, key: int) -> None:
    compact = compact_metrics(value)
    await asyncio.gather(*(t.release(compact, key) for t in self._targets))


# Where the clip norm is among the compact metrics: the canary aggregator's
# measurement, or that of TFF's DP factory (runs without canaries).
_CLIP_METRICS = ('aggregator/clip', 'aggregator/dp_query_metrics/clip')


class _ProgressReleaseManager(tff.program.ReleaseManager):
  """A tqdm bar over rounds (ETA, clip norm, loss); counts the rounds run."""

  def __init__(self, total_rounds: int, enabled: bool):
    self._total_rounds = total_rounds
    self._enabled = enabled
    self._bar = None
    self.rounds_trained = 0

  async def release(self, value: Any, key: int) -> None:
    if key < 1:
      return  # Round 0 is the initial evaluation, not a training round.
    self.rounds_trained += 1
    if self._bar is None:
      self._bar = tqdm.tqdm(total=self._total_rounds, initial=key - 1,
                            unit='round', disable=not self._enabled,
                            dynamic_ncols=True, file=sys.stderr)
    flat = compact_metrics(value)
    postfix = collections.OrderedDict()
    for name in _CLIP_METRICS:
      if name in flat:
        postfix['clip'] = f'{flat[name]:.4g}'
    if 'client_work/train/loss' in flat:
      postfix['loss'] = f'{flat["client_work/train/loss"]:.4g}'
    self._bar.set_postfix(postfix, refresh=False)
    self._bar.update(1)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()


class _CanaryTracking:
  """Exact max-over-rounds canary cosines, tracked outside TFF (Algorithm 3).

  The aggregator (tracking='external') keeps each round's noised aggregate in
  its state; a `cosine_tracking.CosineTracker` in this process buffers them
  and every B rounds (and at every checkpoint) computes their cosines with all
  canaries, releasing each round's cosine summaries (key: the round, 1-based
  as in metrics.csv) to `release_managers`.
  """

  def __init__(self, canary_config: canary_aggregator.CanaryConfig, dim: int,
               release_managers: Sequence[tff.program.ReleaseManager],
               loop: asyncio.AbstractEventLoop, device: str):
    self._config = canary_config
    self._dim = dim
    self._release_managers = list(release_managers)
    self._loop = loop
    self._device = device
    self.tracker = cosine_tracking.CosineTracker(canary_config, dim,
                                                 device=device)

  def observe(self, aggregator_state: Any) -> None:
    """Records a round; called between rounds, outside the event loop."""
    self._loop.run_until_complete(
        self._release(self.tracker.observe(aggregator_state)))

  async def flush(self) -> None:
    """Processes the buffered rounds (before a checkpoint)."""
    await self._release(self.tracker.flush())

  async def _release(
      self, summaries: Sequence[cosine_tracking.RoundSummary]) -> None:
    for summary in summaries:
      values = collections.OrderedDict(
          seen_cosine_mean=summary.seen_mean, seen_cosine_max=summary.seen_max,
          unseen_cosine_mean=summary.unseen_mean,
          unseen_cosine_max=summary.unseen_max)
      await asyncio.gather(*(m.release(values, summary.round_num + 1)
                             for m in self._release_managers))

  def empty_state(self) -> cosine_tracking.TrackerState:
    """A tracker state of the right structure (the template for loading)."""
    return cosine_tracking.TrackerState(
        rounds_observed=0,
        cosine_maxima=np.zeros([self._config.num_seen +
                                self._config.num_unseen], np.float32),
        pending=np.zeros([0, self._dim], np.float32))

  def restore(self, state: cosine_tracking.TrackerState) -> None:
    self.tracker = cosine_tracking.CosineTracker(self._config, self._dim,
                                                 state=state,
                                                 device=self._device)


class _ObservedProcess:
  """A learning process whose `next` also feeds the round to the tracking.

  `run_training_process` only calls `initialize` and `next`.
  """

  def __init__(self, process: tff.learning.templates.LearningProcess,
               tracking: _CanaryTracking):
    self._process = process
    self._tracking = tracking

  def initialize(self) -> Any:
    return self._process.initialize()

  def next(self, state: Any, client_data: Any) -> Any:
    output = self._process.next(state, client_data)
    self._tracking.observe(output.state.aggregator)
    return output


class _RunStateManager(tff.program.ProgramStateManager):
  """Checkpoints of a run: the learning state and the canary tracker's state.

  Saves at round 0, every `every` rounds and at `final_round` only:
  `run_training_process` offers to save after every round (it is given
  `rounds_per_saving_program_state=1`), and a multiple-of-k rule alone would
  miss the final round, which a finished run resumes from without training.
  The tracker is flushed before it is saved, so a checkpoint holds no
  buffered aggregates. Each checkpoint is a `FileProgramStateManager` version
  (written to a temporary directory, then renamed: a checkpoint is complete or
  absent), the first one kept for the initial model.
  """

  def __init__(self, directory: str, every: int, final_round: int,
               tracking: _CanaryTracking | None):
    self._files = tff.program.FileProgramStateManager(
        directory, keep_total=_CHECKPOINTS_KEPT, keep_first=True)
    self._every = every
    self._final_round = final_round
    self._tracking = tracking

  async def get_versions(self) -> list[int] | None:
    return await self._files.get_versions()

  def _structure(self, learning_structure: Any) -> dict[str, Any]:
    structure = {'learning': learning_structure}
    if self._tracking is not None:
      structure['tracker'] = self._tracking.empty_state()
    return structure

  async def load_learning_state(self, version: int, structure: Any) -> Any:
    """The learning state of `version`; the tracker is left as it is."""
    saved = await self._files.load(version, self._structure(structure))
    return saved['learning']

  async def load(self, version: int, structure: Any) -> Any:
    """The learning state of `version`; the tracker resumes from it too."""
    saved = await self._files.load(version, self._structure(structure))
    if self._tracking is not None:
      self._tracking.restore(cosine_tracking.TrackerState(*saved['tracker']))
    return saved['learning']

  async def save(self, program_state: Any, version: int) -> None:
    if version % self._every and version != self._final_round:
      return
    saved = {'learning': program_state}
    if self._tracking is not None:
      await self._tracking.flush()
      saved['tracker'] = self._tracking.tracker.state()
    await self._files.save(saved, version)


def noise_seed(config: TrainConfig) -> int | None:
  """Seed of the DP noise (`seeded_queries`), None for unseeded noise.

  A pure function of --seed, independent of the round seeds below. Noise
  that anyone holding the config can regenerate is fine for a simulated
  audit, never for a deployment (--noseeded_noise).
  """
  if not config.seeded_noise:
    return None
  return int(np.random.SeedSequence([config.seed, 1]).generate_state(1)[0])


def _round_seed(seed: int, round_num: int) -> int:
  """TF global seed for round `round_num`'s client datasets, pure in both."""
  return int(np.random.SeedSequence(seed, spawn_key=(round_num,))
             .generate_state(1)[0] & _MAX_SEED)


def _selection_fn(
    setup: PreparedRun) -> Callable[[int], list[tf.data.Dataset]]:
  """Round `round_num`'s client datasets, with their shuffles seeded per round.

  The client preprocessing shuffles with TF's global seed; resetting it before
  each round makes the shuffle order depend on (seed, round) only, not on how
  many rounds this process has run (which differs after a resume).
  """
  select = participation.make_training_selection_fn(
      setup.sampler, setup.task.preprocessed_train_data
      .create_tf_dataset_for_client)

  def selection_fn(round_num: int) -> list[tf.data.Dataset]:
    tf.random.set_seed(_round_seed(setup.config.seed, round_num))
    return select(round_num)

  return selection_fn


def _evaluation_fn(
    task: tasks.Task, process: tff.learning.templates.LearningProcess
) -> Callable[[Any, Any], collections.OrderedDict[str, Any]]:
  """Test-set metrics of a training state, through TFF's `build_fed_eval`.

  The (bounded) test set is evaluated as one client; only this evaluation's
  metrics (`current_round_metrics`) are returned.
  """
  evaluation = tff.learning.algorithms.build_fed_eval(task.model_fn)
  initial_state = evaluation.initialize()

  def evaluation_fn(state: Any, test_data: Any):
    eval_state = evaluation.set_model_weights(initial_state,
                                              process.get_model_weights(state))
    output = evaluation.next(eval_state, test_data)
    return collections.OrderedDict(
        output.metrics['client_work']['eval']['current_round_metrics'])

  return evaluation_fn


@contextlib.contextmanager
def _event_loop() -> Iterator[asyncio.AbstractEventLoop]:
  """A fresh current asyncio loop (`run_training_process` runs on it)."""
  loop = asyncio.new_event_loop()
  asyncio.set_event_loop(loop)
  try:
    yield loop
  finally:
    loop.close()
    asyncio.set_event_loop(None)


@contextlib.contextmanager
def tff_runtime(config: TrainConfig) -> Iterator[None]:
  """The run's TFF execution context; its local workers stop on exit.

  One local C++ worker by default; --tff_workers=N local workers, or the
  running workers at --tff_worker_addresses, through `distributed_runtime`
  (same results, clients spread over the workers).
  """
  if config.tff_worker_addresses:
    with distributed_runtime.remote_cpp_context(config.tff_worker_addresses):
      yield
  elif config.tff_workers > 1:
    with distributed_runtime.local_workers(config.tff_workers) as addresses:
      with distributed_runtime.remote_cpp_context(addresses):
        yield
  else:
    with runtime.local_cpp_context():
      yield


def run_training(config: TrainConfig) -> RunResult:
  """Trains (or resumes) a run and writes its outputs (see module docstring).

  Calls `tf.keras.utils.set_random_seed(config.seed)` (Python, numpy and TF
  global seeds) before building the model.

  Raises:
    ConfigError: before anything is written, for an invalid config.
  """
  setup = prepare(config)
  config = setup.config
  run_dir = config.run_dir
  os.makedirs(run_dir, exist_ok=True)
  # Leftovers of a run killed while writing: never complete, never read.
  atomic_io.remove_temporaries(run_dir)
  checkpoints.remove_partial(os.path.join(run_dir, CHECKPOINT_DIR))
  atomic_io.write_text(os.path.join(run_dir, CONFIG_FILE),
                       json.dumps(config.to_json_dict(), indent=2,
                                  sort_keys=True) + '\n')
  tf.keras.utils.set_random_seed(config.seed)
  task = setup.task
  max_eval = (None if config.max_eval_examples == -1 else
              config.max_eval_examples)
  progress = _ProgressReleaseManager(setup.total_rounds, config.progress_bar)
  with tff_runtime(config), _event_loop() as loop:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=_optimizer(config.client_optimizer,
                                       config.client_learning_rate,
                                       config.client_momentum),
        server_optimizer_fn=_optimizer(config.server_optimizer,
                                       config.server_learning_rate,
                                       config.server_momentum),
        model_aggregator=setup.aggregator)
    evaluation_fn = _evaluation_fn(task, process)
    test_data = [task.test_dataset(max_eval)]
    tensorboard = tff.program.TensorBoardReleaseManager(
        os.path.join(run_dir, TENSORBOARD_DIR))
    tracking = None
    if setup.canary_config is not None:
      tracking = _CanaryTracking(setup.canary_config, task.num_parameters, [
          tff.program.CSVFileReleaseManager(
              os.path.join(run_dir, CANARY_COSINES_FILE),
              save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname='round'),
          tensorboard,
      ], loop, setup.device)
    state_manager = _RunStateManager(
        os.path.join(run_dir, CHECKPOINT_DIR), config.rounds_per_checkpoint,
        setup.total_rounds, tracking)
    versions = loop.run_until_complete(state_manager.get_versions())
    resumed_from = max(versions) if versions else 0
    metrics_managers = [
        _CompactReleaseManager([
            tff.program.CSVFileReleaseManager(
                os.path.join(run_dir, METRICS_FILE),
                save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname='round'),
            tensorboard,
        ]),
        progress,
    ]
    try:
      state = tff.simulation.run_training_process(
          process if tracking is None else _ObservedProcess(process, tracking),
          _selection_fn(setup), setup.total_rounds,
          evaluation_fn=evaluation_fn,
          evaluation_selection_fn=lambda round_num: test_data,
          rounds_per_evaluation=config.rounds_per_evaluation,
          program_state_manager=state_manager,
          rounds_per_saving_program_state=1,
          metrics_managers=metrics_managers)
    finally:
      progress.close()
    final_metrics = evaluation_fn(state, test_data)
    accuracy = float(final_metrics[ACCURACY_METRICS[task.name]])
    final_cosines = seen_maxima = unseen_maxima = np.zeros(0)
    if tracking is not None:
      initial_state = loop.run_until_complete(
          state_manager.load_learning_state(0, process.initialize()))
      with tf.device(setup.device):
        final_cosines = final_model.final_model_cosines(
            process.get_model_weights(state).trainable,
            canary_seed=config.canary_seed,
            canary_ids=canaries.seen_ids(config.num_canaries),
            initial_weights=process.get_model_weights(initial_state).trainable,
            statistic=config.final_model_statistic)
      maxima = tracking.tracker.maxima()
      seen_maxima = maxima.seen.astype(np.float64)
      unseen_maxima = maxima.unseen.astype(np.float64)
  report = _write_results(setup, accuracy, final_cosines, seen_maxima,
                          unseen_maxima)
  return RunResult(config=config, run_dir=run_dir,
                   total_rounds=setup.total_rounds,
                   resumed_from_round=resumed_from,
                   rounds_trained=progress.rounds_trained,
                   dim=task.num_parameters, delta=setup.delta,
                   accuracy=accuracy, final_cosines=final_cosines,
                   seen_maxima=seen_maxima, unseen_maxima=unseen_maxima,
                   report=report)


def _write_results(setup: PreparedRun, accuracy: float,
                   final_cosines: np.ndarray, seen_maxima: np.ndarray,
                   unseen_maxima: np.ndarray) -> run_report.RunReport | None:
  """Writes the cosine CSVs, the privacy report and the density plot."""
  config, dim = setup.config, setup.task.num_parameters
  if setup.canary_config is None:
    return None
  run_dir = config.run_dir
  atomic_io.write_columns_csv(os.path.join(run_dir, FINAL_COSINES_FILE),
                              {'cosine': final_cosines})
  has_unseen = unseen_maxima.size > 0
  if has_unseen:
    atomic_io.write_columns_csv(os.path.join(run_dir, MAX_COSINES_FILE),
                                {'seen': seen_maxima, 'unseen': unseen_maxima})
  setting = collections.OrderedDict(
      task=config.task, data=setup.task.data_source,
      total_rounds=setup.total_rounds,
      clients_per_round=config.clients_per_round, sampling=config.sampling,
      clipping=('adaptive' if config.clipping_norm == 0 else
                config.clipping_norm),
      num_canaries=config.num_canaries,
      num_unseen_canaries=config.num_unseen_canaries,
      canary_repeats=config.canary_repeats, seed=config.seed,
      canary_seed=config.canary_seed)
  report = run_report.build_run_report(
      final_cosines=final_cosines, dim=dim, delta=setup.delta,
      noise_multiplier=config.noise_multiplier, alpha=config.alpha,
      seen_maxima=seen_maxima if has_unseen else None,
      unseen_maxima=unseen_maxima if has_unseen else None,
      accuracy=accuracy, setting=setting)
  report.write(os.path.join(run_dir, REPORT_JSON_FILE),
               os.path.join(run_dir, REPORT_MARKDOWN_FILE))
  panels = {'final model': {'seen canaries': final_cosines}}
  if has_unseen:
    panels['max over rounds'] = {'seen canaries': seen_maxima,
                                 'unseen canaries': unseen_maxima}
  plots.plot_cosine_densities(
      panels, dim, os.path.join(run_dir, DENSITY_PLOT_FILE),
      title=f'{config.task}, noise {config.noise_multiplier:g}, '
      f'{config.canary_repeats} repetition(s)')
  return report


# ----------------------------------------------------------------------------
# Command line.

_FLAG_HELP = {
    'task': 'Task: emnist_character (CNN, 1,206,590 parameters) or '
            'stackoverflow_word (LSTM, 4,050,748 parameters).',
    'data_dir': "Directory with TFF's cached SQLite files (never downloads).",
    'use_synthetic_data': 'Train on synthetic data with the real structure.',
    'synthetic_num_clients': 'Synthetic training clients (>= 1).',
    'synthetic_examples_per_client': 'Synthetic examples per client (>= 1).',
    'vocab_size': 'StackOverflow vocabulary size (>= 1; the paper: 10000).',
    'client_optimizer': 'Client optimizer: sgd, sgdm (with --client_momentum) '
                        'or adam.',
    'client_learning_rate': 'Client learning rate (> 0).',
    'client_momentum': 'Client momentum of sgdm, in [0, 1).',
    'server_optimizer': 'Server optimizer: sgd, sgdm (with --server_momentum) '
                        'or adam.',
    'server_learning_rate': 'Server learning rate (> 0).',
    'server_momentum': 'Server momentum of sgdm, in [0, 1).',
    'client_batch_size': 'Local batch size (>= 1).',
    'client_epochs_per_round': 'Local epochs per round (>= 1).',
    'max_examples_per_client': 'Examples a client uses per round (>= 1), -1 '
                               'for all.',
    'sampling': 'Real-client participation: shuffle (each client once per '
                'epoch), bernoulli or poisson (expected --clients_per_round).',
    'clients_per_round': 'Clients per round (shuffle: at most; else '
                         'expected), >= 1.',
    'train_epochs': 'Training length in epochs over the real clients (>= 1); '
                    'set this or --total_rounds.',
    'total_rounds': 'Training length in rounds (>= 1); set this or '
                    '--train_epochs.',
    'noise_multiplier': 'Noise std / clip norm of DP-FedAvg (>= 0).',
    'clipping_norm': 'Fixed clip norm (> 0), or 0 for adaptive clipping.',
    'target_unclipped_quantile': 'Adaptive clipping: target quantile of '
                                 'unclipped updates, in (0, 1).',
    'initial_clip': 'Adaptive clipping: initial clip norm (> 0).',
    'clip_learning_rate': 'Adaptive clipping: learning rate of the clip '
                          '(>= 0).',
    'num_canaries': 'Seen canaries k (0, or >= 2).',
    'num_unseen_canaries': 'Unseen canaries for the all-iterates estimate '
                           '(0, or >= 2).',
    'canary_repeats': 'Presentations of each canary, once per equal period '
                      '(the paper: 1, 2, 4, 8); --sampling=shuffle only.',
    'canary_seed': 'Seed of the canaries and their schedule, in [0, 2^31).',
    'canary_buffer_rounds': 'Rounds between two canary cosine computations; '
                            'default: --rounds_per_checkpoint, capped for '
                            'memory (>= 1). Speed only: the maxima are exact '
                            'whatever its value.',
    'final_model_statistic': 'Final-model cosine of Algorithm 2: with the '
                             'model delta theta_T - theta_0 (delta) or with '
                             'theta_T (final, the paper\'s literal line 11).',
    'delta': 'delta of the estimates, in (0, 1); default m^-1.1 for m real '
             'clients.',
    'alpha': 'eps_lo holds with confidence 1 - alpha; alpha in (0, 0.5).',
    'rounds_per_evaluation': 'Rounds between test-set evaluations (>= 1).',
    'max_eval_examples': 'Test examples evaluated (>= 1), -1 for all.',
    'rounds_per_checkpoint': 'Rounds between checkpoints (>= 1).',
    'root_output_dir': 'Root directory of run directories.',
    'run_name': 'Run directory name; default from task, noise, repetitions, '
                'seed.',
    'seed': 'Seed of model initialisation and of client selection and '
            'shuffling, in [0, 2^31) (synthetic data is fixed).',
    'seeded_noise': 'Draw the DP noise from a seed derived from --seed, so '
                    'runs and resumes are reproducible (a simulation); '
                    '--noseeded_noise draws unpredictable noise, as a '
                    'deployment must.',
    'tff_workers': 'TFF C++ worker processes started on this machine '
                   '(>= 1); each round\'s clients are spread over them. '
                   'Results do not depend on it.',
    'tff_worker_addresses': 'Comma-separated host:port of running TFF '
                            'workers (one per host; see README), instead of '
                            'local ones.',
    'accelerator': 'Device of the launcher\'s canary cosine work: cpu or '
                   'gpu (TFF\'s pip worker trains on the CPU).',
    'progress_bar': 'Show a progress bar on stderr.',
}

_ENUMS = {'task': tasks.TASK_NAMES, 'accelerator': accelerators.ACCELERATORS,
          'client_optimizer': OPTIMIZERS,
          'server_optimizer': OPTIMIZERS, 'sampling': SAMPLINGS,
          'final_model_statistic': FINAL_MODEL_STATISTICS}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers one flag per `TrainConfig` field (same name and default)."""
  for field in dataclasses.fields(TrainConfig):
    kwargs = dict(name=field.name, default=field.default,
                  help=_FLAG_HELP[field.name], flag_values=flag_values)
    if field.name in _ENUMS:
      flags.DEFINE_enum(enum_values=list(_ENUMS[field.name]), **kwargs)
    elif field.type is bool:
      flags.DEFINE_bool(**kwargs)
    elif field.type in (int, int | None):
      flags.DEFINE_integer(**kwargs)
    elif field.type in (float, float | None):
      flags.DEFINE_float(**kwargs)
    else:
      flags.DEFINE_string(**kwargs)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS
                      ) -> TrainConfig:
  """The `TrainConfig` of parsed flags (not yet validated)."""
  return TrainConfig(**{
      field.name: flag_values[field.name].value
      for field in dataclasses.fields(TrainConfig)
  })


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # TFF logs every round at INFO.
  try:
    result = run_training(config_from_flags())
  except ConfigError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  print(f'Run directory: {result.run_dir}')
  print(f'Rounds: {result.total_rounds} (resumed from round '
        f'{result.resumed_from_round}, trained {result.rounds_trained} now); '
        f'test accuracy {result.accuracy:.4f}')
  if result.report is not None:
    print(result.report.to_markdown(), end='')
    print(f'Report: {os.path.join(result.run_dir, REPORT_MARKDOWN_FILE)}; '
          f'plot: {os.path.join(result.run_dir, DENSITY_PLOT_FILE)}')


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=cli.parse_flags_or_exit)
