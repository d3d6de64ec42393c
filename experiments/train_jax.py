"""`experiments.train --backend=jax`: the same run on the JAX engine.

Same flags (`experiments.train_config`), same run directory layout and
report (`experiments.run_outputs`), same participation and canary schedule
(`train_config.participation_plan`), the same resume contract (rerunning the
command resumes from the newest checkpoint and gives the results of an
uninterrupted run), and the same run lock; nothing on this path imports
TensorFlow or TFF, so it runs on machines with only jax (GPU, TPU, or CPU).
Training is `one_shot_epe.jax_engine.training`: clients of a round vmapped and
sharded over `jax.devices()`, canaries regenerated on the device every round.

Differences from --backend=tff, all named in the run's config.json and
report: the canary directions are drawn by `jax.random` (same law, other
vectors; see `jax_engine.canaries`), the DP noise by `jax.random` keyed by
(--seed, round), and the maxima are exact after every round (no cosine
buffer, so --canary_buffer_rounds is unused). checkpoints/ holds one .npz per
checkpoint; metrics.csv and canary_cosines.csv have one row per round.

Data: --use_synthetic_data (numpy stand-ins with the real structure,
`jax_engine.data`), or --data_dir holding client arrays written by
`jax_engine.data.ClientArrays.save` as <data_dir>/<task>/train and
<data_dir>/<task>/test. --task=fashion_mnist reads Fashion-MNIST's own files
from --data_dir (or its synthetic stand-in) and splits them into the same
clients as the TFF path (`jax_engine.data.fashion_mnist_arrays`), for the
10-class CNN.
"""

import csv
import io
import json
import os
import sys
from collections.abc import Sequence

from absl import app
from absl import flags
import numpy as np

from experiments import run_outputs
from experiments import train_config
from one_shot_epe import atomic_io
from one_shot_epe import cli
from one_shot_epe import run_lock
from one_shot_epe import write_failures
from one_shot_epe.baselines import fashion_mnist
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import fedavg
from one_shot_epe.jax_engine import models
from one_shot_epe.jax_engine import optimizers
from one_shot_epe.jax_engine import training

# Task -> the engine's data kind.
KINDS = {'emnist_character': 'emnist', 'stackoverflow_word': 'stackoverflow',
         'fashion_mnist': 'emnist'}
# Synthetic data stands in for a fixed data set (as experiments.train's).
SYNTHETIC_DATA_SEED = 0
_METRIC_FIELDS = ('round', 'clip', 'aggregate_norm', 'canaries_inserted',
                  'num_clients', 'training_time_in_seconds')
_COSINE_FIELDS = ('round', 'seen_mean', 'seen_max', 'unseen_mean',
                  'unseen_max')


def _check_supported(config: train_config.TrainConfig) -> None:
  """Flags of --backend=tff that the JAX engine does not take."""
  if config.task not in KINDS:
    raise train_config.ConfigError(
        f'--task={config.task} with --backend=jax: the JAX engine runs '
        f'{sorted(KINDS)}; use --backend=tff.')
  if config.num_canaries == 0:
    raise train_config.ConfigError(
        '--num_canaries=0 with --backend=jax: the JAX engine audits runs '
        'with canaries; use --backend=tff for a run without.')
  for name, default in (('tff_workers', 1), ('tff_worker_addresses', ''),
                        ('accelerator', 'cpu'), ('seeded_noise', True)):
    if getattr(config, name) != default:
      raise train_config.ConfigError(
          f'--{name}={getattr(config, name)!r} applies to --backend=tff only '
          '(the JAX engine uses jax.devices() and noise keyed by --seed).')


def _data(config: train_config.TrainConfig
          ) -> tuple[data.ClientArrays, data.ClientArrays, str]:
  if config.task == 'fashion_mnist':
    return _fashion_mnist(config)
  kind = KINDS[config.task]
  if config.use_synthetic_data:
    make = (data.synthetic_emnist if kind == 'emnist' else
            lambda n, e, seed: data.synthetic_stackoverflow(
                n, e, vocab_size=config.vocab_size, seed=seed))
    train = make(config.synthetic_num_clients,
                 config.synthetic_examples_per_client, SYNTHETIC_DATA_SEED)
    test = make(max(1, config.synthetic_num_clients // 10),
                config.synthetic_examples_per_client, SYNTHETIC_DATA_SEED + 1)
    return train, test, 'synthetic'
  directory = os.path.join(config.data_dir or '', config.task)
  try:
    train = data.ClientArrays.load(os.path.join(directory, 'train'))
    test = _first_examples(data.ClientArrays.load(
        os.path.join(directory, 'test')), config.max_eval_examples)
  except (OSError, ValueError) as error:
    raise train_config.ConfigError(
        f'--data_dir with --backend=jax must hold {directory}/train and '
        f'{directory}/test written by jax_engine.data.ClientArrays.save (or '
        f'use --use_synthetic_data): {error}') from None
  return train, test, directory


def _fashion_mnist(config: train_config.TrainConfig
                   ) -> tuple[data.ClientArrays, data.ClientArrays, str]:
  """Fashion-MNIST split as `experiments.train` splits it (tasks.fashion_mnist)."""
  try:
    if config.use_synthetic_data:
      num_clients = config.synthetic_num_clients
      dataset = fashion_mnist.synthetic_clients(
          num_clients, config.synthetic_examples_per_client,
          SYNTHETIC_DATA_SEED)
      source = 'synthetic'
    else:
      num_clients = fashion_mnist.NUM_CLIENTS
      dataset = fashion_mnist.load(config.data_dir)
      source = os.path.abspath(config.data_dir)
  except (OSError, ValueError) as error:
    flag = ('--synthetic_examples_per_client' if config.use_synthetic_data
            else '--data_dir')
    raise train_config.ConfigError(f'{flag}: {error}') from None
  train, test = data.fashion_mnist_arrays(dataset, num_clients)
  return train, _first_examples(test, config.max_eval_examples), source


def _first_examples(arrays: data.ClientArrays,
                    count: int) -> data.ClientArrays:
  """The split's first `count` examples (all for -1): --max_eval_examples."""
  if count == -1 or count >= arrays.offsets[-1]:
    return arrays
  return data.ClientArrays(
      kind=arrays.kind, client_ids=arrays.client_ids,
      offsets=np.minimum(arrays.offsets, count),
      features={name: array[:count] for name, array in arrays.features.items()})


def _model(config: train_config.TrainConfig):
  if config.task == 'fashion_mnist':
    return models.EmnistCnn(num_classes=fashion_mnist.NUM_CLASSES)
  if KINDS[config.task] == 'emnist':
    return models.EmnistCnn()
  return models.WordLstm(vocab_size=config.vocab_size)


def _optimizer(name: str, learning_rate: float,
               momentum: float) -> optimizers.Optimizer:
  return optimizers.Optimizer(name, learning_rate,
                              momentum=momentum if name == 'sgdm' else 0.0)


def prepare(config: train_config.TrainConfig
            ) -> tuple[training.Plan, float, str]:
  """Validates `config` and builds the plan; returns (plan, delta, data).

  Raises:
    train_config.ConfigError: an invalid flag, one the JAX engine does not
      take, missing data, or a run directory holding other flags.
  """
  config = config.validate()
  _check_supported(config)
  train, test, source = _data(config)
  if config.clients_per_round > train.num_clients:
    raise train_config.ConfigError(
        f'--clients_per_round must be in [1, {train.num_clients}] (the task '
        f'has {train.num_clients} training clients); got '
        f'{config.clients_per_round}.')
  sampler, total_rounds, schedule, cohort = train_config.participation_plan(
      config, [str(i) for i in train.client_ids])
  delta = (config.delta if config.delta is not None else
           train.num_clients**-1.1)
  adaptive = config.clipping_norm == 0
  try:
    dp = fedavg.DPConfig(
        noise_multiplier=config.noise_multiplier, clients_per_round=cohort,
        clip=None if adaptive else config.clipping_norm,
        initial_clip=config.initial_clip,
        target_unclipped_quantile=config.target_unclipped_quantile,
        clip_learning_rate=config.clip_learning_rate,
        canary_clip=config.canary_clip)
  except ValueError as error:
    raise train_config.ConfigError(
        f'--noise_multiplier={config.noise_multiplier} with '
        f'--clients_per_round={config.clients_per_round}: {error}') from None
  plan = training.Plan(
      model=_model(config), train=train, test=test, sampler=sampler,
      schedule=schedule.as_round_lists(), num_seen=config.num_canaries,
      num_unseen=config.num_unseen_canaries, canary_seed=config.canary_seed,
      dp=dp,
      client_optimizer=_optimizer(config.client_optimizer,
                                  config.client_learning_rate,
                                  config.client_momentum),
      server_optimizer=_optimizer(config.server_optimizer,
                                  config.server_learning_rate,
                                  config.server_momentum),
      batch_size=config.client_batch_size,
      epochs=config.client_epochs_per_round,
      max_examples=(None if config.max_examples_per_client == -1 else
                    config.max_examples_per_client),
      total_rounds=total_rounds, seed=config.seed,
      all_iterates_statistic=config.all_iterates_statistic,
      final_model_statistic=config.final_model_statistic)
  _check_run_dir(config)
  return plan, delta, source


def _check_run_dir(config: train_config.TrainConfig) -> None:
  """New, empty (but for the lock), or a run with the same flags."""
  run_dir = config.run_dir
  if not os.path.isdir(run_dir):
    if os.path.exists(run_dir):
      raise train_config.ConfigError(f'--run_name: {run_dir!r} exists and '
                                     'is not a directory.')
    return
  config_path = os.path.join(run_dir, run_outputs.CONFIG_FILE)
  if not os.path.exists(config_path):
    if set(os.listdir(run_dir)) - {run_lock.LOCK_FILE}:
      raise train_config.ConfigError(
          f'--run_name: {run_dir!r} is not empty and holds no '
          f'{run_outputs.CONFIG_FILE}; choose another --run_name.')
    return
  with open(config_path, encoding='utf-8') as stream:
    saved = json.load(stream)
  train_config.check_resumable(config, saved, run_dir)


def _rows_up_to(path: str, last_round: int) -> list[dict[str, str]]:
  """The rows of a per-round CSV up to `last_round` (earlier invocations)."""
  if not os.path.exists(path):
    return []
  with open(path, newline='') as stream:
    return [row for row in csv.DictReader(stream)
            if int(row['round']) <= last_round]


def _write_rows(path: str, fields: Sequence[str],
                rows: Sequence[dict[str, object]]) -> None:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator='\n')
  writer.writeheader()
  writer.writerows(rows)
  atomic_io.write_text(path, buffer.getvalue())


def run_training(config: train_config.TrainConfig) -> run_outputs.RunResult:
  """Trains (or resumes) the run on the JAX engine and writes its outputs.

  Raises:
    train_config.ConfigError: before anything is written, for an invalid
      config.
    run_lock.RunLockedError: another process is running in the run
      directory.
    write_failures.WriteFailure: a write failed (e.g. the disk is full); the
      outputs written before are intact and a rerun resumes.
  """
  plan, delta, source = prepare(config)
  config = config.validate()
  run_dir = config.run_dir
  with write_failures.reported(config.root_output_dir), run_lock.acquire(
      run_dir):
    _check_run_dir(config)
    atomic_io.remove_temporaries(run_dir)
    atomic_io.write_text(os.path.join(run_dir, run_outputs.CONFIG_FILE),
                         json.dumps(config.to_json_dict(), indent=2,
                                    sort_keys=True) + '\n')
    checkpoint_dir = os.path.join(run_dir, run_outputs.CHECKPOINT_DIR)
    done = training.checkpoint_rounds(checkpoint_dir)
    last = done[-1] if done else 0
    metrics_path = os.path.join(run_dir, run_outputs.METRICS_FILE)
    cosines_path = os.path.join(run_dir, run_outputs.CANARY_COSINES_FILE)
    metrics = _rows_up_to(metrics_path, last)
    cosine_rows = _rows_up_to(cosines_path, last)

    def on_round(record: training.RoundRecord) -> None:
      metrics.append(dict(
          round=record.round_num, clip=record.clip,
          aggregate_norm=record.aggregate_norm,
          canaries_inserted=record.canaries_inserted,
          num_clients=record.num_clients,
          training_time_in_seconds=record.seconds))
      cosine_rows.append(dict(
          round=record.round_num, seen_mean=record.seen_mean,
          seen_max=record.seen_max, unseen_mean=record.unseen_mean,
          unseen_max=record.unseen_max))
      if (record.round_num % config.rounds_per_checkpoint == 0 or
          record.round_num == plan.total_rounds):
        _write_rows(metrics_path, _METRIC_FIELDS, metrics)
        _write_rows(cosines_path, _COSINE_FIELDS, cosine_rows)

    outcome = training.train(plan, checkpoint_dir,
                             config.rounds_per_checkpoint, on_round)
    report = run_outputs.write_results(
        config, dim=outcome.dim, delta=delta,
        num_train_clients=plan.train.num_clients,
        total_rounds=plan.total_rounds, data_source=source,
        accuracy=outcome.accuracy, final_cosines=outcome.final_cosines,
        final_unseen_cosines=outcome.final_unseen_cosines,
        seen_maxima=outcome.seen_maxima, unseen_maxima=outcome.unseen_maxima,
        schedule=plan.schedule)
  return run_outputs.RunResult(
      config=config, run_dir=run_dir, total_rounds=plan.total_rounds,
      resumed_from_round=outcome.resumed_from_round,
      rounds_trained=outcome.rounds_trained, dim=outcome.dim, delta=delta,
      accuracy=outcome.accuracy, final_cosines=outcome.final_cosines,
      final_unseen_cosines=outcome.final_unseen_cosines,
      seen_maxima=outcome.seen_maxima, unseen_maxima=outcome.unseen_maxima,
      report=report)


def main(argv: Sequence[str]) -> None:
  """Trains (or resumes) the run of the flags and prints its report."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  try:
    result = run_training(train_config.config_from_flags())
  except run_outputs.REPORTED_ERRORS as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  print(f'Run directory: {result.run_dir}')
  print(run_outputs.rounds_line(result))
  print(result.report.to_markdown(), end='')


def run_as_program() -> None:
  """`python -m experiments.train --backend=jax ...` lands here."""
  if 'task' not in flags.FLAGS:
    train_config.define_flags()
  app.run(main, flags_parser=cli.parse_flags_or_exit)


if __name__ == '__main__':
  run_as_program()
