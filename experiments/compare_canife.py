r"""Section 5.4: CANIFE and the one-shot estimate on the same training run.

Andrew et al. (ICLR 2024), Sec. 5.4, compare their estimator with CANIFE
(Maddock et al. 2022) "in the limited setting where CANIFE's assumptions do
hold": a two-layer feed-forward network on Fashion-MNIST, every example its
own client, clip norm 1.0, noise multiplier 0.2, one epoch at batch size 128
(DP-SGD with per-example clipping, sampling rate q = 128/N), a CANIFE audit
every 100 rounds (design pool 512, 2 500 Adam steps on pixels and soft label,
100 attack scores), and the one-shot estimate from 1 000 seen and 1 000 unseen
canaries inserted into the same run. The paper reports an analytical eps of
34.5, CANIFE eps_hat 0.879 +- 0.124 and one-shot eps_est 6.76 +- 1.06 (with
unseen canaries, hence the all-iterates threat model).

The analytical 34.5 is one unamplified Gaussian mechanism (sigma = 0.2,
delta = 1/60 000) as the RDP accountant bounds it: a canary presented exactly
once, in a round the adversary knows. Its exact eps (Balle and Wang, equal
to dp_accounting's PLD) is 32.5; the report prints both. So by default (--canary_insertion=once) each seen canary is inserted
exactly once, at a uniformly drawn round (`dpsgd.canary_schedule`); with
--canary_insertion=poisson a canary joins each round with probability q like
a Poisson-sampled client (about 37% of them are then never inserted in one
epoch and "seen" is a mixture), with 'shuffle' once per epoch. Real clients
are always sampled by --sampling.

Why the paper's numbers are lower than this setting's: a once-inserted
canary at noise 0.2 has per-round signal-to-noise 1/z = 5, so seen and unseen
maxima separate almost perfectly, and most CANIFE audits of 100 scores
separate perfectly (eps_hat_r = inf). The paper's values need a weaker
effective signal; --server_momentum with --all_iterates_statistic=model_delta
(cosines with the model's step, which momentum mixes with earlier rounds) and
--canife_threshold=max_accuracy (CANIFE's reference code) are the options
that bracket them (README, CANIFE section).

Each run trains once (`experiments.baselines.dpsgd`); before the update of
rounds 0, s, 2s, ... the frozen model is audited by CANIFE
(`experiments.baselines.canife`), whose per-round estimates are composed
over training with the RDP accountant (`canife_accounting`). The one-shot
estimates come from the same run's canary cosines (`one_shot_epe.stats.estimation`
reports: all iterates, Algorithm 3, and final model, Algorithm 2), each with
eps_est (Sec. 3.2), its 95% bootstrap interval (of the estimate), the
Gaussian-DP estimate, the attack's AUROC and TPR at FPR 1e-2 and 1e-3, and
eps_lo (Sec. 5.1). The
program prints a Markdown table of the means +- sample std over --num_runs
runs beside the paper's numbers, with the wall time each method added to
training, and a table per run. With --output_dir, each run's one-shot
report is also written as a training run's (`one_shot_epe.reporting.run_files`:
run_i/report.json, report.md, the cosine CSVs and the density plot).

  python -m experiments.compare_canife                 # CPU default (below)
  python -m experiments.compare_canife --flagfile=configs/compare_canife.cfg
  python -m experiments.compare_canife \
      --flagfile=configs/compare_canife_quick.cfg

Data: real Fashion-MNIST from --data_dir (the four IDX files, gzipped or not,
or fashion_mnist.npz; see `one_shot_epe.data.fashion_mnist`; Debian's
`dataset-fashion-mnist` package installs them in the default directory),
else (--data=auto) a synthetic stand-in of the same shape. Nothing is
downloaded.

The default is the paper's setting except --design_steps=500 (instead of
2 500; canary health is already >= 0.97 by then) and --num_runs=3; it took
15 minutes on a 2-core CPU shared with other jobs (load ~8; per run: 37 s of
training, 200 s of CANIFE, 24 s of one-shot tracking and reports). The
paper-scale config (2 500 steps, 5 runs) takes about 4 times as long. Not stated in the
paper, chosen here: 100 hidden units, learning rate 0.5, Poisson sampling of
clients (--sampling=shuffle is the alternative), delta = 1/N.

The program's parts: `canife_runs` (a setting's runs), `canife_tables`
(their report) and this module (the flags, `run`, `main`).

The flags take the launcher's names (`experiments.train`) for the same
concepts: --clipping_norm, --num_canaries, --num_unseen_canaries,
--canary_buffer_rounds and --all_iterates_statistic (aggregate or
model_delta). The former names --clip, --num_seen, --num_unseen,
--buffer_rounds and --canary_statistic (update or model_delta) still work,
each printing one line that names its replacement (`DEPRECATED_FLAGS`).
Bad flags exit with status 2 and a message naming the flag.
"""

import sys

if __name__ == '__main__':
  # Before the baselines import TensorFlow: a quiet start.
  from one_shot_epe.runtime import command_line as _cli
  _cli.check_flagfiles_or_exit(sys.argv)  # Before absl opens them.
  from one_shot_epe.tff_engine import quiet
  quiet.quiet_startup(sys.argv, import_tensorflow=True)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from absl import app
from absl import flags

from experiments import canife_runs
from experiments import canife_tables
from experiments.baselines import canife
from experiments.baselines import canife_attack
from experiments.baselines import dpsgd
from experiments.baselines import feedforward
from one_shot_epe.data import fashion_mnist
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import command_line

__all__ = ['DEPRECATED_FLAGS', 'check_sizes', 'define_flags', 'main', 'run',
           'setting_from_flags']

# The program's former flag names -> the launcher's (`experiments.train`)
# names of the same concepts; a former name still works and prints one line.
DEPRECATED_FLAGS = {'clip': 'clipping_norm', 'num_seen': 'num_canaries',
                    'num_unseen': 'num_unseen_canaries',
                    'buffer_rounds': 'canary_buffer_rounds',
                    'canary_statistic': 'all_iterates_statistic'}
# `dpsgd`'s statistics -> the launcher's names (`canary_spec`).
_STATISTIC_NAMES = {'update': 'aggregate', 'model_delta': 'model_delta'}
# `dpsgd.TrainingConfig` fields -> the flags that set them, where they differ.
_FIELD_FLAGS = {'clip': 'clipping_norm', 'num_seen': 'num_canaries',
                'num_unseen': 'num_unseen_canaries',
                'buffer_rounds': 'canary_buffer_rounds',
                'statistic': 'all_iterates_statistic'}


def run(setting: canife_runs.Setting, data: fashion_mnist.Dataset,
        output_dir: str | None = None) -> tuple[str, str]:
  """Runs the comparison; returns the Markdown report and the JSON details.

  Trains `setting.num_runs` runs, each audited by CANIFE and by the one-shot
  estimate (Sec. 5.4).

  Args:
    setting: the validated setting (`setting_from_flags`).
    data: the Fashion-MNIST data, its sizes checked (`check_sizes`).
    output_dir: where run i's result files go, in `output_dir`/run_i
      (`canife_runs.run_once`); None writes none.

  Returns:
    (Markdown report, JSON details), as `canife_tables.format_report` and
    `canife_tables.results_json` write them.

  Raises:
    OSError: a run's result file cannot be written.
  """
  start = time.perf_counter()
  model = feedforward.FeedForward(fashion_mnist.IMAGE_SHAPE,
                                  setting.hidden_units,
                                  fashion_mnist.NUM_CLASSES)
  auditor = canife.CanifeAuditor(model, setting.canife_config)
  results = [canife_runs.run_once(
      setting, data, auditor, i,
      None if output_dir is None else os.path.join(output_dir, f'run_{i}'))
             for i in range(setting.num_runs)]
  num_clients = (setting.num_train_examples if setting.num_train_examples > 0
                 else len(data.train_images))
  return (canife_tables.format_report(setting, data, num_clients, results,
                        time.perf_counter() - start),
          canife_tables.results_json(setting, num_clients, results))


# ----------------------------------------------------------------------------
# Command line.


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers the program's flags (on `flag_values`).

  Also the deprecated spellings of `DEPRECATED_FLAGS` (`setting_from_flags`
  reads them).

  Args:
    flag_values: the absl flag registry (the global FLAGS by default).

  Raises:
    absl.flags.DuplicateFlagError: a flag is already defined there.
  """
  defaults = dpsgd.TrainingConfig()
  flags.DEFINE_enum('data', 'auto', ['auto', 'real', 'synthetic'],
                    "'real': Fashion-MNIST from --data_dir (must exist); "
                    "'synthetic': the stand-in; 'auto': real if present.",
                    flag_values=flag_values)
  flags.DEFINE_string('data_dir', fashion_mnist.DEFAULT_DIRECTORY,
                      'Directory with the Fashion-MNIST IDX files or '
                      'fashion_mnist.npz.',
                      flag_values=flag_values)
  flags.DEFINE_integer('num_train_examples', -1,
                       'Train on a random subset of this many examples '
                       '(-1: all).',
                       flag_values=flag_values)
  flags.DEFINE_integer('synthetic_num_train', 60000,
                       'Training examples of the synthetic stand-in.',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('synthetic_num_test', 10000,
                       'Test examples of the synthetic stand-in.',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('hidden_units', 100, 'Hidden layer width.',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_float('clipping_norm', defaults.clip, 'Clip norm C (> 0).',
                     flag_values=flag_values)
  flags.register_validator(
      'clipping_norm', lambda v: math.isfinite(v) and v > 0,
      message='--clipping_norm must be a finite number > 0.',
      flag_values=flag_values)
  flags.DEFINE_float('noise_multiplier', defaults.noise_multiplier,
                     'Noise multiplier sigma (> 0).',
                     flag_values=flag_values)
  flags.register_validator('noise_multiplier',
                           lambda v: math.isfinite(v) and v > 0,
                           message='--noise_multiplier must be finite and > 0.',
                           flag_values=flag_values)
  flags.DEFINE_integer('batch_size', defaults.batch_size,
                       'Expected clients per round B.', lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('epochs', defaults.epochs, 'Epochs.', lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_float('learning_rate', defaults.learning_rate,
                     'DP-SGD learning rate (> 0).',
                     flag_values=flag_values)
  flags.register_validator('learning_rate',
                           lambda v: math.isfinite(v) and v > 0,
                           message='--learning_rate must be finite and > 0.',
                           flag_values=flag_values)
  flags.DEFINE_enum('sampling', defaults.sampling, list(dpsgd.SAMPLINGS),
                    "'poisson': each client and canary joins each round w.p. "
                    "q = B/N; 'shuffle': each exactly once per epoch "
                    '(real clients only; canaries follow '
                    '--canary_insertion).',
                    flag_values=flag_values)
  flags.DEFINE_enum('canary_insertion', defaults.canary_insertion,
                    list(dpsgd.CANARY_INSERTIONS),
                    "How seen canaries are inserted: 'once': each exactly "
                    'once at a uniformly random round (one Gaussian release, '
                    "the paper's analytical eps); 'poisson': each round w.p. "
                    "q = B/N (some never); 'shuffle': once per epoch.",
                    flag_values=flag_values)
  flags.DEFINE_float('server_momentum', defaults.server_momentum,
                     'Server (heavy-ball) momentum of the DP-SGD step, in '
                     '[0, 1); 0 is plain DP-SGD.',
                     flag_values=flag_values)
  flags.DEFINE_enum('all_iterates_statistic',
                    _STATISTIC_NAMES[defaults.statistic],
                    list(_STATISTIC_NAMES.values()),
                    "The vector of each round's canary cosines: the noised "
                    "aggregate ('aggregate', the paper's Algorithm 3) or the "
                    "model's step ('model_delta', which with momentum mixes "
                    'earlier rounds in).',
                    flag_values=flag_values)
  flags.DEFINE_enum('canife_threshold', 'max_accuracy',
                    list(canife_attack.THRESHOLDS),
                    "CANIFE's per-audit eps_hat_r: at the threshold of best "
                    "attack accuracy ('max_accuracy', CANIFE's reference "
                    "code) or the supremum over thresholds ('best').",
                    flag_values=flag_values)
  flags.DEFINE_integer('num_canaries', defaults.num_seen, 'Seen canaries.',
                       lower_bound=2,
                       flag_values=flag_values)
  flags.DEFINE_integer('num_unseen_canaries', defaults.num_unseen,
                       'Unseen canaries.', lower_bound=2,
                       flag_values=flag_values)
  flags.DEFINE_integer('canary_buffer_rounds', 160,
                       'Rounds of aggregates buffered per cosine computation.',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('audit_every', 100, 'CANIFE audit interval s (rounds).',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('num_mock_rounds', canife.DEFAULT_NUM_MOCK_ROUNDS,
                       'CANIFE attack scores per audit n.', lower_bound=2,
                       flag_values=flag_values)
  flags.DEFINE_integer('design_pool_size', canife.DEFAULT_DESIGN_POOL_SIZE,
                       'CANIFE design pool (test examples).', lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('design_steps', 500, 'CANIFE Adam steps.',
                       lower_bound=0,
                       flag_values=flag_values)
  flags.DEFINE_float('design_learning_rate',
                     canife.DEFAULT_DESIGN_LEARNING_RATE,
                     'CANIFE Adam learning rate (> 0).',
                     flag_values=flag_values)
  flags.register_validator('design_learning_rate',
                           lambda v: math.isfinite(v) and v > 0,
                           message='--design_learning_rate must be finite and '
                           '> 0.',
                           flag_values=flag_values)
  flags.DEFINE_float('delta', None, 'delta of all estimates (default 1/N).',
                     flag_values=flag_values)
  flags.DEFINE_enum('canife_noise_delta', 'training', ['training', 'attack'],
                    "delta of CANIFE's GetNoise: 'training' (Algorithm 2 as "
                    "written) or 'attack' (1/num_mock_rounds, the delta of "
                    'eps_hat_r).',
                    flag_values=flag_values)
  flags.register_validator('delta', lambda v: v is None or 0 < v < 1,
                           message='--delta must be in (0, 1).',
                           flag_values=flag_values)
  flags.DEFINE_integer('num_runs', 3, 'Training runs (>= 2 for a std).',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_integer('seed', 0, 'Seed (>= 0).', lower_bound=0,
                       flag_values=flag_values)
  flags.DEFINE_string('output', None, 'Optional Markdown file for the report '
                      '(written atomically; its directory must exist).',
                      flag_values=flag_values)
  flags.DEFINE_string('output_json', None, 'Optional JSON file for per-run '
                      'numbers (written atomically; its directory must exist).',
                      flag_values=flag_values)
  flags.DEFINE_string('output_dir', None, 'Optional directory for each '
                      "run's result files (run_0/, run_1/, ...: the cosine "
                      'CSVs, report.json, report.md and the density plot, '
                      'as a training run writes them; its parent must '
                      'exist).',
                      flag_values=flag_values)
  for name in ('output', 'output_json', 'output_dir'):
    flags.register_validator(
        name, lambda path: path is None or os.path.isdir(
            os.path.dirname(os.path.abspath(path))),
        message=f"--{name}'s directory must exist.",
        flag_values=flag_values)
  # The deprecated spellings, None unless given (`setting_from_flags`).
  flags.DEFINE_float('clip', None, 'Deprecated: use --clipping_norm.',
                     flag_values=flag_values)
  flags.register_validator(
      'clip', lambda v: v is None or (math.isfinite(v) and v > 0),
      message='--clip must be a finite number > 0.',
      flag_values=flag_values)
  flags.DEFINE_integer('num_seen', None, 'Deprecated: use --num_canaries.',
                       lower_bound=2,
                       flag_values=flag_values)
  flags.DEFINE_integer('num_unseen', None,
                       'Deprecated: use --num_unseen_canaries.', lower_bound=2,
                       flag_values=flag_values)
  flags.DEFINE_integer('buffer_rounds', None,
                       'Deprecated: use --canary_buffer_rounds.',
                       lower_bound=1,
                       flag_values=flag_values)
  flags.DEFINE_enum('canary_statistic', None, list(_STATISTIC_NAMES),
                    'Deprecated: use --all_iterates_statistic (update is '
                    'aggregate).',
                    flag_values=flag_values)


def _fail(flag: str, message: str) -> None:
  sys.stderr.write(f'FATAL Flags error: --{flag}: {message}\n')
  sys.exit(2)


def _renamed_flags(values: flags.FlagValues) -> dict[str, Any]:
  """The values of `DEPRECATED_FLAGS`' new names, a former name's if given.

  A former name prints one line to stderr naming the new one; giving both
  exits with status 2.
  """
  result = {}
  for old, new in DEPRECATED_FLAGS.items():
    result[new] = values[new].value
    if values[old].present:
      if values[new].present:
        _fail(old, f'is the deprecated name of --{new}; give only --{new}.')
      sys.stderr.write(f'--{old} is deprecated; use --{new}\n')
      result[new] = values[old].value
      if old == 'canary_statistic':
        result[new] = _STATISTIC_NAMES[result[new]]
  return result


def setting_from_flags(values: flags.FlagValues) -> canife_runs.Setting:
  """The validated canife_runs.Setting; exits with status 2 naming a bad flag.

  Args:
    values: the parsed flags of `define_flags` (deprecated spellings
      honoured, with a warning on stderr).

  Returns:
    The comparison's setting.

  Raises:
    SystemExit: with status 2 and one line naming the flag, for --data=real
      without Fashion-MNIST files or a value the training or CANIFE config
      refuses.
  """
  if values.data == 'real' and not fashion_mnist.available(values.data_dir):
    _fail('data_dir', f'{values.data_dir!r} holds no Fashion-MNIST files '
          '(needed by --data=real).')
  renamed = _renamed_flags(values)
  statistic = next(name for name, launcher in _STATISTIC_NAMES.items()
                   if launcher == renamed['all_iterates_statistic'])
  try:
    training = dpsgd.TrainingConfig(
        clip=renamed['clipping_norm'],
        noise_multiplier=values.noise_multiplier,
        batch_size=values.batch_size, epochs=values.epochs,
        learning_rate=values.learning_rate, sampling=values.sampling,
        canary_insertion=values.canary_insertion,
        num_seen=renamed['num_canaries'],
        num_unseen=renamed['num_unseen_canaries'],
        buffer_rounds=renamed['canary_buffer_rounds'],
        server_momentum=values.server_momentum, statistic=statistic)
    config = canife.CanifeConfig(
        design_steps=values.design_steps,
        design_learning_rate=values.design_learning_rate,
        num_mock_rounds=values.num_mock_rounds,
        epsilon_threshold=values.canife_threshold)
  except ValueError as error:
    field = str(error).split(' ')[0]
    _fail(_FIELD_FLAGS.get(field, field), str(error))
  return canife_runs.Setting(
      data=values.data, data_dir=values.data_dir,
      num_train_examples=values.num_train_examples,
      synthetic_num_train=values.synthetic_num_train,
      synthetic_num_test=values.synthetic_num_test,
      hidden_units=values.hidden_units, training=training,
      audit_every=values.audit_every, design_pool_size=values.design_pool_size,
      canife_config=config, delta=values.delta,
      canife_noise_delta=values.canife_noise_delta, num_runs=values.num_runs,
      seed=values.seed)


def check_sizes(setting: canife_runs.Setting, data: fashion_mnist.Dataset) -> None:
  """Exits with status 2 if a size flag does not fit the loaded data.

  Args:
    setting: the validated setting.
    data: the loaded data.

  Raises:
    SystemExit: with status 2 naming --num_train_examples, --batch_size or
      --design_pool_size when it exceeds the data.
  """
  num_train, num_test = len(data.train_images), len(data.test_images)
  if setting.num_train_examples != -1 and not (
      1 <= setting.num_train_examples <= num_train):
    _fail('num_train_examples', f'must be -1 or in [1, {num_train}] for '
          f'{data.source}; got {setting.num_train_examples}.')
  num_clients = (setting.num_train_examples
                 if setting.num_train_examples > 0 else num_train)
  if setting.training.batch_size > num_clients:
    _fail('batch_size', f'must be at most the {num_clients} training clients; '
          f'got {setting.training.batch_size}.')
  if setting.design_pool_size > num_test:
    _fail('design_pool_size', f'must be at most the {num_test} test examples '
          f'of {data.source}; got {setting.design_pool_size}.')


def main(argv: Sequence[str]) -> None:
  """Runs the comparison at the flags' setting and prints the report.

  The report is also written to --output, the details to --output_json
  and each run's result files under --output_dir when given.

  Args:
    argv: what absl leaves after parsing the flags: the program name only.

  Raises:
    SystemExit: with status 2 for positional arguments or a bad flag.
  """
  if len(argv) > 1:
    sys.stderr.write(f'FATAL unexpected positional arguments: {argv[1:]}\n')
    sys.exit(2)
  setting = setting_from_flags(flags.FLAGS)
  data = canife_runs.load_data(setting)
  check_sizes(setting, data)
  report, details = run(setting, data, flags.FLAGS.output_dir)
  print(report, end='')
  if flags.FLAGS.output is not None:
    atomic_io.write_text(flags.FLAGS.output, report)
  if flags.FLAGS.output_json is not None:
    atomic_io.write_text(flags.FLAGS.output_json, details)


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
