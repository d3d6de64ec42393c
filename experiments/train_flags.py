"""The launcher's flags: one absl flag per `train_config.TrainConfig` field.

`define_flags` registers them (same name and default as the field, the help
text of `_FLAG_HELP`, the choices of `train_config`'s enums),
`config_from_flags` reads them back as a `train_config.TrainConfig`, and
`check_flags_or_exit` is the launcher's first step: parse and validate the
command line before TensorFlow or JAX is imported, answering a bad flag in
one line with exit status 2.
"""

import dataclasses
import sys
from collections.abc import Sequence

from absl import flags

from experiments import run_planning
from experiments import train_config
from one_shot_epe.design import tasks
from one_shot_epe.runtime import command_line

__all__ = ['check_flags_or_exit', 'config_from_flags', 'define_flags']

_FLAG_HELP = {
    'backend': 'Training engine: tff (TensorFlow Federated, CPU) or jax (the '
               'JAX engine, one_shot_epe/jax_engine: GPU, TPU or CPU; no '
               'TensorFlow needed).',
    'task': 'Task: ' + ', '.join(
        f'{entry.name} ({entry.model_help})'
        for entry in tasks.TASKS.values()) + '.',
    'data_dir': "Directory of the task's data, never downloaded: " + '; '.join(
        f'for {entry.name} {entry.data_help}'
        for entry in tasks.TASKS.values()) + '.',
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
    'embedding_size': 'Word LSTM of StackOverflow and Shakespeare: its '
                      'embedding and dense width (>= 1; the paper: 96; '
                      'another width needs --backend=jax).',
    'lstm_size': 'Word LSTM of StackOverflow and Shakespeare: its LSTM units '
                 '(>= 1; the paper: 670; another width needs --backend=jax).',
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
                 'aggregation (--backend=tff, fixed clip); or tree: DP-FTRL\'s '
                 'binary-tree noise, one tree over the run (--backend=tff, '
                 'fixed clip).',
    'num_bands': 'Bands b of --mechanism=banded, in [1, rounds].',
    'compression': 'Client updates before aggregation: none (the default '
                   'of every mechanism but distributed_dp), or '
                   'rotation_discretization (random Hadamard rotation, '
                   'scaling and stochastic rounding to integers mod '
                   '2^--ddp_bits; distributed_dp\'s default and only '
                   'choice).',
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
    'num_canaries': 'Seen canaries k (0, or in [2, 10^9]).',
    'num_unseen_canaries': 'Unseen canaries for the all-iterates estimate '
                           '(0, or in [2, 2^31 - 10^9]).',
    'canary_repeats': 'Presentations of each canary, once per equal period '
                      '(the paper: 1, 2, 4, 8); --sampling=shuffle only.',
    'canary_seed': 'Seed of the canaries and their schedule, in [0, 2^32).',
    'canary_buffer_rounds': 'Rounds between two canary cosine computations; '
                            'default: --rounds_per_checkpoint, capped for '
                            'memory (in [1, 2^16]). Speed only: the maxima '
                            'are exact whatever its value.',
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
    'canary_kind': 'Canaries of the audit: gradient (random directions the '
                   'server adds to the aggregate, the paper\'s), data '
                   '(clients holding random examples, trained as any '
                   'client, scored by the final model\'s loss: no server '
                   'change) or both in one run.',
    'data_canary_examples': 'Examples each data canary holds, in [1, 4096] '
                            '(--canary_kind=data or both).',
    'data_canary_images': 'Images of the image tasks\' data canaries, each '
                          'with a random label: drawn from the task\'s test '
                          'split (test) or of random pixels (random).',
    'data_canary_text': 'Sentences of the text tasks\' data canaries: '
                        'sampled from a bigram model of the task\'s training '
                        'sentences (model) or of words drawn uniformly from '
                        'the vocabulary (uniform).',
    'data_canary_temperature': 'Temperature of --data_canary_text=model\'s '
                               'sampling, in [0.8, 100].',
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


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers one flag per `train_config.TrainConfig` field (same name and default).

  absl files the flags under this module; a program lists them in its
  --helpshort by adopting them (`flags.adopt_module_key_flags`).

  Args:
    flag_values: the absl flag registry to define them in (the global
      FLAGS by default).

  Raises:
    absl.flags.DuplicateFlagError: a flag of that name is already defined
      in `flag_values`.
  """
  for field in dataclasses.fields(train_config.TrainConfig):
    kwargs = dict(name=field.name, default=field.default,
                  help=_FLAG_HELP[field.name], flag_values=flag_values)
    if field.name in train_config.ENUMS:
      flags.DEFINE_enum(enum_values=list(train_config.ENUMS[field.name]), **kwargs)
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
  is imported, so that a bad flag, an unwritable output directory or a plan
  this machine cannot run (`run_planning.check_plan`) is answered in about
  a second: one line naming the flag, exit status 2. Checks that need the
  task's data run later, in `prepare`. The flags stay defined for the
  program's own parse.

  Args:
    argv: the command line, program name first. With a help flag, nothing
      is parsed here (absl answers it).

  Raises:
    SystemExit: with status 2 and one line on stderr, for a flag absl cannot
      parse or a config that fails `train_config.TrainConfig.validate`.
  """
  if 'task' not in flags.FLAGS:
    define_flags()
  if any(arg.split('=')[0] in _HELP_FLAGS for arg in argv[1:]):
    return  # absl's own parse defines and answers the help flags.
  command_line.parse_flags_or_exit(list(argv))
  try:
    run_planning.check_plan(config_from_flags().validate())
  except train_config.ConfigError as error:
    sys.stderr.write(f'error: {error}\n')
    sys.exit(2)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS
                      ) -> train_config.TrainConfig:
  """The `train_config.TrainConfig` of parsed flags (not yet validated).

  Args:
    flag_values: parsed flags holding every `train_config.TrainConfig` field (the global
      FLAGS by default, as `define_flags` registers them).

  Returns:
    The config, one field per flag of the same name.
  """
  return train_config.TrainConfig(**{
      field.name: flag_values[field.name].value
      for field in dataclasses.fields(train_config.TrainConfig)
  })
