"""The launcher's configuration: `TrainConfig` and its checks.

One `TrainConfig` field per flag of `experiments.train` (same name, default
and help; the flags themselves are `experiments.train_flags`'s), so a run is
equally described by a command line, a flagfile
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
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.accounting import mechanisms
from one_shot_epe.design import run_options
from one_shot_epe.design import run_plan
from one_shot_epe.design import tasks
from one_shot_epe import validation

__all__ = ['ConfigError', 'ENUMS', 'PROGRAM_DIFFERENCES', 'SAMPLINGS',
           'TrainConfig', 'check_program', 'check_resumable',
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
  writes. The help text of each flag is in `train_flags`.
  """
  backend: str = 'tff'
  task: str = 'emnist_character'
  data_dir: str | None = None
  use_synthetic_data: bool = False
  synthetic_num_clients: int = 100
  synthetic_examples_per_client: int = 32
  synthetic_client_sizes: str = 'equal'
  vocab_size: int = 10_000
  embedding_size: int = 96
  lstm_size: int = 670
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
  compression: str | None = None
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
  canary_kind: str = 'gradient'
  data_canary_examples: int = canary_kinds.DATA_CANARY_EXAMPLES
  data_canary_images: str = 'test'
  data_canary_text: str = 'model'
  data_canary_temperature: float = 1.0
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

    Returns:
      A copy with the run name resolved (--run_name or the default), the
      data directory made absolute (with ~ expanded) and --compression set
      to the mechanism's own when not given.

    Raises:
      ConfigError: naming the first invalid flag and its allowed range.
    """
    for name, choices in ENUMS.items():
      if getattr(self, name) is not None or name not in _OPTIONAL_ENUMS:
        _check_choice(name, getattr(self, name), choices)
    for name in ('use_synthetic_data', 'seeded_noise', 'resident_data',
                 'progress_bar'):
      if not isinstance(getattr(self, name), (bool, np.bool_)):
        raise ConfigError(f'--{name} must be true or false; got '
                          f'{getattr(self, name)!r}.')
    for name in ('client_batch_size', 'client_epochs_per_round'):
      _check_int(name, getattr(self, name), 1)
    for name, rule in _CORE_RULES.items():
      _check_flag(rule, name, getattr(self, name))
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
    if self.clipping_norm != 0 or isinstance(self.clipping_norm, bool):
      _check_flag(_FIXED_CLIP, 'clipping_norm', self.clipping_norm,
                  note=' or 0 for adaptive clipping')
    mechanism = self.the_mechanism()
    compression = self.compression
    if compression is None:
      compression = getattr(mechanism, 'compression', 'none')
    if compression != getattr(mechanism, 'compression', 'none'):
      raise ConfigError(
          f'--compression={compression} does not apply to --mechanism='
          f'{self.mechanism}: distributed_dp always rotates and discretizes '
          '(rotation_discretization, its default) and the other mechanisms '
          'send updates as they are (none, their default).')
    try:
      mechanisms.check_clip(mechanism, adaptive=self.clipping_norm == 0)
    except ValueError:
      raise ConfigError(f'--mechanism={self.mechanism} needs a fixed clip '
                        f'(--clipping_norm > 0): '
                        f'{mechanism.fixed_clip_reason}.') from None
    if (self.train_epochs is None) == (self.total_rounds is None):
      raise ConfigError('set exactly one of --train_epochs and --total_rounds; '
                        f'got --train_epochs={self.train_epochs} and '
                        f'--total_rounds={self.total_rounds}.')
    if self.train_epochs is not None:
      _check_int('train_epochs', self.train_epochs, 1)
    for name, rule in _CANARY_COUNTS.items():
      _check_flag(rule, name, getattr(self, name))
    _check_int('data_canary_examples', self.data_canary_examples, 1, 4096)
    _check_flag(validation.Real(canary_examples.MIN_TEMPERATURE, 100.0),
                'data_canary_temperature', self.data_canary_temperature)
    if self.canary_kind != 'gradient' and (
        self.num_canaries < 2 or self.num_unseen_canaries < 2):
      raise ConfigError(
          f'--canary_kind={self.canary_kind} needs --num_canaries >= 2 and '
          '--num_unseen_canaries >= 2 (data canaries are scored against '
          f'unseen ones); got --num_canaries={self.num_canaries}, '
          f'--num_unseen_canaries={self.num_unseen_canaries}.')
    if self.num_unseen_canaries and not self.num_canaries:
      raise ConfigError('--num_unseen_canaries needs seen canaries '
                        '(--num_canaries >= 2); got --num_canaries=0.')
    if self.sampling != 'shuffle' and self.canary_repeats != 1:
      raise ConfigError(
          f'--canary_repeats applies to --sampling=shuffle only (with '
          f'--sampling={self.sampling} canaries are sampled like real '
          f'clients); got --canary_repeats={self.canary_repeats}.')
    entry = tasks.task_entry(self.task)
    _check_word_model(self, entry)
    if self.synthetic_client_sizes != 'equal' and (
        self.synthetic_client_sizes not in entry.synthetic_sizes or
        not self.use_synthetic_data):
      laws = ' and '.join(name for name, other in tasks.TASKS.items()
                          if self.synthetic_client_sizes in
                          other.synthetic_sizes)
      raise ConfigError(
          f'--synthetic_client_sizes={self.synthetic_client_sizes} applies to '
          f'the synthetic {laws} stand-ins (with '
          f'--use_synthetic_data); got --task={self.task}, '
          f'--use_synthetic_data={self.use_synthetic_data}.')
    if self.use_synthetic_data and not entry.synthetic:
      raise ConfigError(f'--use_synthetic_data does not apply to --task='
                        f'{self.task}: it has no synthetic stand-in (--data_dir'
                        f' holds {entry.data_help}).')
    if (self.use_synthetic_data and self.data_dir) or not (
        self.use_synthetic_data or self.data_dir or entry.data_dir_optional):
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
    return dataclasses.replace(self, run_name=run_name, data_dir=data_dir,
                               compression=compression)

  def the_mechanism(self) -> mechanisms.Mechanism:
    """The mechanism that --mechanism and its parameters' flags name.

    Returns:
      The typed mechanism (`mechanisms.from_name`).

    Raises:
      ConfigError: naming the flag of a parameter that is out of range or
        does not apply to the mechanism.
    """
    try:
      return mechanisms.from_name(self.mechanism, num_bands=self.num_bands,
                                  ddp_bits=self.ddp_bits,
                                  ddp_noise=self.ddp_noise)
    except ValueError as error:
      message = str(error)
      for argument, flag in _MECHANISM_FLAGS.items():
        if message.startswith((argument + ' ', argument + '=')):
          raise ConfigError(f'--{flag}{message[len(argument):]}') from None
      raise ConfigError(f'--mechanism={self.mechanism}: {message}') from None

  def default_run_name(self) -> str:
    """The run directory name when --run_name is not given.

    Returns:
      '<task>_noise<z>_rep<r>_seed<seed>', e.g. 'emnist_character_noise1_
      rep1_seed0' without the break.
    """
    return (f'{self.task}_noise{self.noise_multiplier:g}_'
            f'rep{self.canary_repeats}_seed{self.seed}')

  @property
  def run_dir(self) -> str:
    """The run's output directory, root_output_dir/run_name."""
    return os.path.join(self.root_output_dir,
                        self.run_name or self.default_run_name())

  def to_json_dict(self) -> dict[str, Any]:
    """The fields as a JSON-serialisable dict (config.json).

    Returns:
      Every field by name (the flag names), values as set.
    """
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


def _check_word_model(config: TrainConfig, entry: tasks.TaskEntry) -> None:
  """Refuses word-model widths other than TFF's on the TFF engine.

  The TFF engine trains TFF's own baseline LSTM, whose widths are fixed; the
  JAX engine's model takes them as arguments. The tasks without a
  vocabulary ignore the widths, as they do --vocab_size.
  """
  if config.backend != 'tff' or not entry.vocabulary:
    return
  for name in ('embedding_size', 'lstm_size'):
    if getattr(config, name) != _DEFAULTS[name]:
      raise ConfigError(
          f'--{name}={getattr(config, name)} applies to --backend=jax only: '
          f"the TFF engine trains TFF's baseline LSTM (--{name}="
          f'{_DEFAULTS[name]}); got --backend=tff.')


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
  _check_flag(validation.check_choice, name, value, choices)


def _check_int(name: str, value: Any, low: int, high: int | None = None,
               note: str = '') -> None:
  _check_flag(validation.check_int, name, value, low, high, note=note)


# The flags that are parameters of the core, each checked by the core's own
# rule (`validation.PARAMETERS`, or the `rules` of the object that takes the
# value), so that the launcher allows exactly what the library does; an
# integer flag of a real parameter by the integers the rule allows.
_CORE_RULES: dict[str, validation.Rule] = {
    'synthetic_num_clients': validation.PARAMETERS['num_clients'],
    'synthetic_examples_per_client':
        validation.PARAMETERS['examples_per_client'],
    'vocab_size': validation.PARAMETERS['vocab_size'],
    'embedding_size': validation.PARAMETERS['embedding_size'],
    'lstm_size': validation.PARAMETERS['lstm_size'],
    'client_learning_rate': run_plan.OptimizerSpec.rules['learning_rate'],
    'client_momentum': run_plan.OptimizerSpec.rules['momentum'],
    'server_learning_rate': run_plan.OptimizerSpec.rules['learning_rate'],
    'server_momentum': run_plan.OptimizerSpec.rules['momentum'],
    'clients_per_round':
        validation.PARAMETERS['clients_per_round'].integers(),
    'total_rounds': validation.Optional(run_plan.RunPlan.rules['total_rounds']),
    'rounds_per_evaluation': run_plan.RunPlan.rules['rounds_per_evaluation'],
    'rounds_per_checkpoint': run_plan.RunPlan.rules['rounds_per_checkpoint'],
    'noise_multiplier': canary_spec.DPAggregation.rules['noise_multiplier'],
    'initial_clip': canary_spec.DPAggregation.rules['initial_clip'],
    'target_unclipped_quantile':
        canary_spec.DPAggregation.rules['target_unclipped_quantile'],
    'clip_learning_rate': canary_spec.DPAggregation.rules['clip_learning_rate'],
    'canary_repeats': canary_spec.CanarySpec.rules['repetitions'],
    'canary_seed': canary_spec.CanarySpec.rules['seed'],
    # Every seed of a run lies in [0, MAX_SEED] (`canary_spec.MAX_SEED`).
    'seed': canary_spec.SEED,
    'canary_buffer_rounds': canary_spec.CanarySpec.rules['buffer_rounds'],
    'delta': validation.Optional(validation.PARAMETERS['delta']),
    # The reports' alpha (their lower bounds hold at 1 - alpha).
    'alpha': validation.PARAMETERS['alpha'],
}
# --clipping_norm: a fixed clip (`DPAggregation.clip`), or 0 for adaptive.
_FIXED_CLIP = validation.PARAMETERS['clip']


# The canary flags: the audits' counts (`canary_spec.AUDITED_CANARIES`);
# --num_canaries=0 is a run without canaries.
_CANARY_COUNTS = {
    'num_canaries': dataclasses.replace(
        canary_spec.AUDITED_CANARIES['num_seen'], allow_zero=True),
    'num_unseen_canaries': canary_spec.AUDITED_CANARIES['num_unseen'],
}


# Choice flags whose default, None, the chosen mechanism resolves.
_OPTIONAL_ENUMS = ('compression',)
# The mechanisms' constructor arguments (`mechanisms`) -> their flags.
_MECHANISM_FLAGS = {'num_bands': 'num_bands', 'bits': 'ddp_bits',
                    'ddp_bits': 'ddp_bits', 'ddp_noise': 'ddp_noise'}

_DEFAULTS = {field.name: field.default
             for field in dataclasses.fields(TrainConfig)}
# What a flag absent from a saved config.json was where its default is not
# what runs did before it came (text data canaries were uniform words
# before --data_canary_text).
_BEFORE_FLAG = {'data_canary_text': 'uniform'}


def check_resumable(config: TrainConfig, saved: Mapping[str, Any],
                    run_dir: str) -> None:
  """Checks that a run saved with flags `saved` may resume with `config`.

  `saved` is the run directory's config.json. Only the flags that name the
  run's location or affect how it is shown or saved may differ. A flag absent
  from `saved` was added after that run started; it counts as what the run
  did before the flag existed (its default, e.g. --all_iterates_statistic
  and --canary_clip; --data_canary_text: uniform), so such runs still
  resume with the same flags' behaviour.

  Args:
    config: this invocation's validated config.
    saved: the flags of the run directory's config.json, by name.
    run_dir: the run directory, for the message.

  Raises:
    ConfigError: naming every other flag that differs, for the run directory
      `run_dir`.
  """
  current = config.to_json_dict()
  saved = {**_DEFAULTS, **_BEFORE_FLAG, **saved}
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
  """The flags a run shares with the runs of its program: (name, value).

  Args:
    config: a run's config.

  Returns:
    The (name, value) pairs of every flag not in `PROGRAM_DIFFERENCES`,
    sorted by name; runs of one program have equal keys.
  """
  return tuple(sorted((name, value)
                      for name, value in config.to_json_dict().items()
                      if name not in PROGRAM_DIFFERENCES))


def check_program(configs: Sequence[TrainConfig]) -> None:
  """Checks that `configs` may run as one program (`program_key`).

  Args:
    configs: the runs' configs (at least one); each is compared with the
      first.

  Raises:
    ConfigError: naming --runs_per_program and a flag in which two runs
      differ.
  """
  first = configs[0]
  shared = dict(program_key(first))
  for config in configs[1:]:
    for name, value in program_key(config):
      if shared.get(name) != value:
        raise ConfigError(
            f'--runs_per_program: the runs of one program may differ only in '
            f'{", ".join("--" + n for n in PROGRAM_DIFFERENCES)}; '
            f'{config.run_dir} has --{name}={value!r} and {first.run_dir} '
            f'--{name}={shared.get(name)!r}.')


# The choice flags and their choices (`validate`; `train_flags` defines them).
ENUMS = {'backend': run_options.BACKENDS, 'task': run_options.TASK_NAMES,
          'accelerator': run_options.ACCELERATORS,
          'client_optimizer': run_options.OPTIMIZERS,
          'server_optimizer': run_options.OPTIMIZERS, 'sampling': SAMPLINGS,
          'mechanism': mechanisms.MECHANISM_NAMES,
          'compression': run_options.COMPRESSIONS,
          'ddp_noise': distributed_dp.DDP_NOISES,
          'final_model_statistic': canary_spec.FINAL_MODEL_STATISTICS,
          'all_iterates_statistic': canary_spec.ALL_ITERATES_STATISTICS,
          'canary_clip': canary_spec.CANARY_CLIPS,
          'canary_kind': canary_kinds.CANARY_KIND_OPTIONS,
          'data_canary_images': canary_kinds.DATA_CANARY_IMAGES,
          'data_canary_text': canary_kinds.DATA_CANARY_TEXTS,
          'synthetic_client_sizes': client_arrays.CLIENT_SIZE_LAWS}
