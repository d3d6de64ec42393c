"""From a launcher config to the run's plan, checked whole before any work.

`plan_run` turns a validated `train_config.TrainConfig` into the
engine-neutral `one_shot_epe.design.run_plan.RunPlan`: who takes part in each
round (`participation_plan`), the run's size checked against the machine
(`one_shot_epe.design.run_size`: memory and work, before anything grows with
the rounds), the canaries' share of a round checked
(`canary_schedules.check_canary_share`), then the schedule, the canary spec,
the DP aggregation and the mechanism, and the engine's `supports(plan)`.
`check_plan` runs it where the task's clients are known without reading
data (synthetic data), and otherwise checks the run's size and engine,
after checking that the run directory can be written: it imports no
framework (the engines' `supports` are framework-free), so the launcher
refuses a bad plan in about a second,
before TensorFlow or JAX is imported (`train_flags.check_flags_or_exit`)
and before any data is loaded (`train.prepare`, which plans again on the
loaded clients' ids). Every refusal is a `train_config.ConfigError` naming
the flag to change.
"""

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from experiments import engine
from experiments import train_config
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.design import audit_checks
from one_shot_epe.data import canary_examples
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_options
from one_shot_epe.design import run_plan
from one_shot_epe.design import run_size
from one_shot_epe.design import tasks
from one_shot_epe.jax_engine import support as jax_support
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import run_directory
from one_shot_epe.tff_engine import support as tff_support

__all__ = ['SUPPORTS', 'check_plan', 'checkpoint_limit', 'participation_plan',
           'participation_sizes', 'plan_run']

# Each --backend's `supports(plan)` (framework-free; `engine.Backend.supports`
# is the same function).
SUPPORTS: dict[str, Callable[[run_plan.Supportable], run_plan.Support]] = {
    'tff': tff_support.supports, 'jax': jax_support.supports}
# Evaluation examples assumed for --max_eval_examples=-1 (all of the test
# set), where the set's size is not known before it is read.
_ALL_EVAL_EXAMPLES = 10_000


def participation_sizes(config: train_config.TrainConfig,
                        num_clients: int) -> tuple[int, float]:
  """T and the expected real clients per round, in arithmetic only.

  What `participation_plan`'s sampler will have, known before it is built
  (a sampler of m clients allocates in proportion to m): with shuffled
  epochs, R = ceil(m / n) rounds an epoch of m / R clients each; with
  sampling, --clients_per_round expected clients and ceil(m / n) rounds an
  epoch.

  Args:
    config: The validated config (--sampling, --clients_per_round,
      --total_rounds or --train_epochs).
    num_clients: m, the task's training clients (>= --clients_per_round).

  Returns:
    (T, the expected real clients per round).
  """
  rounds_per_epoch = math.ceil(num_clients / config.clients_per_round)
  expected = (num_clients / rounds_per_epoch if config.sampling == 'shuffle'
              else float(config.clients_per_round))
  total_rounds = (config.total_rounds if config.total_rounds is not None else
                  config.train_epochs * rounds_per_epoch)
  return total_rounds, expected


def participation_plan(
    config: train_config.TrainConfig, clients: int | Sequence[str]
) -> tuple[participation.ClientSampler, int]:
  """The real clients' sampler and T, the run's rounds.

  T is --total_rounds, or --train_epochs epochs of rounds (an epoch of
  shuffled epochs is the sampler's; of sampling, ceil(m / clients per
  round) rounds).

  Args:
    config: The validated config (--sampling, --clients_per_round,
      --total_rounds or --train_epochs, --seed).
    clients: The task's training client ids, or their number m (the
      sampler's draws depend only on m and the seed).

  Returns:
    (sampler, T).
  """
  if config.sampling == 'shuffle':
    sampler = participation.ShuffledEpochs(clients, config.clients_per_round,
                                           config.seed)
  else:
    sampler_class = (participation.BernoulliSampling if config.sampling ==
                     'bernoulli' else participation.PoissonSampling)
    sampler = sampler_class(clients, config.clients_per_round, config.seed)
  return sampler, participation_sizes(config, sampler.num_clients)[0]


def _rounds_flag(config: train_config.TrainConfig, total_rounds: int) -> str:
  """The flag that sets T, with its value (and T if it is epochs)."""
  if config.total_rounds is not None:
    return f'--total_rounds={config.total_rounds}'
  return f'--train_epochs={config.train_epochs} ({total_rounds} rounds)'


def _model_flag(config: train_config.TrainConfig) -> str:
  """The flag that sets the model's d: --vocab_size, else --task."""
  entry = tasks.task_entry(config.task)
  return (f'--vocab_size={config.vocab_size}' if entry.vocabulary else
          f'--task={config.task}')


def _refused(config: train_config.TrainConfig, total_rounds: int,
             error: run_size.PlanRefused) -> train_config.ConfigError:
  """The launcher's one line for a refused plan: its flag, then why."""
  if error.parameter == 'total_rounds':
    flag = _rounds_flag(config, total_rounds)
  elif error.parameter == 'dim':
    flag = _model_flag(config)
  elif error.parameter == 'synthetic_num_clients':
    flag = (f'--synthetic_num_clients={config.synthetic_num_clients} with '
            '--synthetic_examples_per_client='
            f'{config.synthetic_examples_per_client}')
  else:
    flag = f'--{error.parameter}={getattr(config, error.parameter)}'
  return train_config.ConfigError(f'{flag}: {error}.')


def _model_dim(config: train_config.TrainConfig) -> int:
  """The task model's d at the flags' vocabulary and widths."""
  return tasks.task_entry(config.task).dim(
      config.vocab_size, config.embedding_size, config.lstm_size)


def _check_dim(config: train_config.TrainConfig) -> int:
  """The task model's d, refused below the final-model null's 3."""
  dim = _model_dim(config)
  try:
    audit_checks.check_dim(dim)
  except ValueError as error:
    raise train_config.ConfigError(f'{_model_flag(config)}: {error}') from None
  return dim


def _shape(config: train_config.TrainConfig, num_clients: int,
           expected_clients: float, total_rounds: int) -> run_size.RunShape:
  """The run's sizes, from the flags and the task's entry."""
  entry = tasks.task_entry(config.task)
  dim = _model_dim(config)
  # Each seen canary r times (shuffled epochs), or at the clients' rate.
  presentations = config.num_canaries * (
      config.canary_repeats if config.sampling == 'shuffle' else
      expected_clients / num_clients * total_rounds)
  data_bytes = 0.0
  if config.use_synthetic_data:
    data_bytes = client_arrays.synthetic_bytes(
        entry.kind, num_clients, config.synthetic_examples_per_client,
        config.vocab_size)
  examples = (config.synthetic_examples_per_client if
              config.use_synthetic_data else entry.examples_per_client)
  examples *= config.client_epochs_per_round
  if config.max_examples_per_client != -1:
    examples = min(examples, config.max_examples_per_client)
  slots = sum(run_options.OPTIMIZER_SLOTS[name] for name in (
      config.client_optimizer, config.server_optimizer))
  buffer_rounds = canary_spec.block_rounds(
      config.canary_buffer_rounds, dim, cap=config.rounds_per_checkpoint)
  return run_size.RunShape(
      total_rounds=total_rounds, num_seen=config.num_canaries,
      num_unseen=config.num_unseen_canaries, dim=dim,
      clients_per_round=expected_clients,
      examples_per_client=examples,
      flops_per_example=entry.flops_per_example(
          config.vocab_size, config.embedding_size, config.lstm_size),
      state_vectors=3 + slots, buffer_rounds=buffer_rounds,
      evaluations=total_rounds // config.rounds_per_evaluation + 1,
      eval_examples=(_ALL_EVAL_EXAMPLES if config.max_eval_examples == -1 else
                     config.max_eval_examples),
      canary_presentations=presentations, data_bytes=data_bytes)


def checkpoint_limit(
    config: train_config.TrainConfig) -> bounded_reads.Limit | None:
  """The most a checkpoint of the run may hold, from its flags alone.

  The state a checkpoint holds, counted generously (4 bytes a float32): the
  model's d (the task's entry) times the model, theta_0, the last aggregate
  and both optimizers' slots, and under tree aggregation the tree's levels;
  each tracked canary's maximum, and under matrix-factorization noise its
  projection on every round. `bounded_reads.checkpoint` adds its margin.

  Args:
    config: The validated config.

  Returns:
    The limit; None where it depends on a T that the flags do not fix
    (--train_epochs under matrix-factorization noise, with real data of
    unknown size).
  """
  entry = tasks.task_entry(config.task)
  dim = _model_dim(config)
  num_clients = (config.synthetic_num_clients if config.use_synthetic_data
                 else entry.num_clients)
  total_rounds = config.total_rounds
  if total_rounds is None and num_clients is not None:
    total_rounds = participation_sizes(
        config, max(num_clients, config.clients_per_round))[0]
  mechanism = config.the_mechanism()
  kept_rounds = 0
  if mechanism.projects_canaries_every_round:
    if total_rounds is None:
      return None
    kept_rounds = total_rounds
  vectors = 4 + sum(run_options.OPTIMIZER_SLOTS[name] for name in (
      config.client_optimizer, config.server_optimizer))
  vectors += mechanism.state_vectors(total_rounds)
  tracked = config.num_canaries + config.num_unseen_canaries
  return bounded_reads.checkpoint(4 * (vectors * dim +
                                       tracked * (1 + kept_rounds)))


def _dp_aggregation(config: train_config.TrainConfig,
                    cohort: float) -> canary_spec.DPAggregation:
  """The flags' DP aggregation; a cohort too small for the noise is named."""
  try:
    return canary_spec.DPAggregation(
        noise_multiplier=config.noise_multiplier, clients_per_round=cohort,
        clip=None if config.clipping_norm == 0 else config.clipping_norm,
        initial_clip=config.initial_clip,
        target_unclipped_quantile=config.target_unclipped_quantile,
        clip_learning_rate=config.clip_learning_rate)
  except ValueError as error:
    raise train_config.ConfigError(
        f'--noise_multiplier={config.noise_multiplier} with '
        f'--clients_per_round={config.clients_per_round}: {error}') from None


def _spec(config: train_config.TrainConfig,
          schedule: object) -> canary_spec.CanarySpec | None:
  """The flags' canaries (None for --num_canaries=0)."""
  if schedule is None:
    return None
  return canary_spec.CanarySpec(
      seed=config.canary_seed, num_seen=config.num_canaries,
      num_unseen=config.num_unseen_canaries,
      schedule=schedule.as_round_lists(), canary_clip=config.canary_clip,
      repetitions=config.canary_repeats,
      all_iterates_statistic=config.all_iterates_statistic,
      final_model_statistic=config.final_model_statistic,
      buffer_rounds=config.canary_buffer_rounds)


def _data_canaries(config: train_config.TrainConfig, schedule: object,
                   num_clients: int) -> canary_kinds.DataCanaryPlan | None:
  """The flags' data canaries: the gradient canaries' schedule, as clients."""
  if schedule is None or not any(
      kind.joins_cohort for kind in canary_kinds.kinds_of(config.canary_kind)):
    return None
  return canary_kinds.DataCanaryPlan(
      seed=config.canary_seed, num_seen=config.num_canaries,
      num_unseen=config.num_unseen_canaries,
      examples_per_canary=config.data_canary_examples,
      schedule=schedule.as_round_lists(), num_real_clients=num_clients)


def data_request(config: train_config.TrainConfig) -> task_data.DataRequest:
  """What the flags ask of the task's data (its core loader's request).

  Args:
    config: The validated config (--task, --data_dir or the synthetic
      data's sizes, --vocab_size).

  Returns:
    The request.
  """
  return task_data.DataRequest(
      task=config.task, data_dir=config.data_dir,
      synthetic=config.use_synthetic_data,
      num_clients=config.synthetic_num_clients,
      examples_per_client=config.synthetic_examples_per_client,
      client_sizes=config.synthetic_client_sizes,
      seed=engine.SYNTHETIC_DATA_SEED, vocab_size=config.vocab_size)


def data_canary_arrays(config: train_config.TrainConfig,
                       plan: run_plan.RunPlan) -> client_arrays.ClientArrays | None:
  """Every tracked data canary's examples, seen first; None without any.

  Made by the 'data' kind's entry (`canary_kinds.CANARY_KINDS`, its
  `maker`) from the canary seed and ids, for the task's data kind, classes
  or vocabulary, for image tasks under --data_canary_images=test from the
  task's test split and for text tasks under --data_canary_text=model from
  a bigram model of its training sentences, each as the task's
  framework-free loader reads it (the task entry's `jax.data`): the same
  arrays on every engine.

  Args:
    config: The validated config (--task, --vocab_size, the data flags).
    plan: The run's plan.

  Returns:
    The canaries as client arrays, or None for a run without data canaries.

  Raises:
    train_config.ConfigError: naming --data_canary_images, if the test
      images cannot be read or are too few, or --data_canary_text, if the
      training sentences cannot be read.
  """
  canaries = plan.data_canaries
  if canaries is None:
    return None
  entry = tasks.task_entry(config.task)
  images = None
  if entry.kind == 'emnist' and config.data_canary_images == 'test':
    load = tasks.entry_point(entry.jax.data)
    try:
      images = load(data_request(config)).test.features['pixels']
    except (OSError, ValueError, ImportError) as error:
      raise train_config.ConfigError(
          f'--data_canary_images=test: the task\'s test images cannot be '
          f'read ({error}); use --data_canary_images=random, or --data_dir '
          'holding the arrays the JAX engine reads '
          '(experiments.export_arrays).') from None
    if len(images) < canaries.examples_per_canary:
      raise train_config.ConfigError(
          f'--data_canary_images=test: the test split has {len(images)} '
          f'images, fewer than --data_canary_examples='
          f'{canaries.examples_per_canary}.')
  text = None
  if entry.kind == 'stackoverflow' and config.data_canary_text == 'model':
    load = tasks.entry_point(entry.jax.data)
    try:
      text = canary_examples.BigramText.fit(
          load(data_request(config)).train.features['tokens'],
          config.vocab_size)
    except (OSError, ValueError, ImportError) as error:
      raise train_config.ConfigError(
          f'--data_canary_text=model: the task\'s training sentences cannot '
          f'be read ({error}); use --data_canary_text=uniform, or --data_dir '
          'holding the arrays the JAX engine reads '
          '(experiments.export_arrays).') from None
  make = tasks.entry_point(canary_kinds.canary_kind('data').maker)
  return make(canaries.seed, canaries.tracked_ids(), entry.kind,
              canaries.examples_per_canary, num_labels=entry.num_labels,
              vocab_size=config.vocab_size if entry.vocabulary else None,
              images=images, text=text,
              temperature=config.data_canary_temperature)


def _optimizer(name: str, learning_rate: float,
               momentum: float) -> run_plan.OptimizerSpec:
  """An optimizer of the flags; the momentum flag counts for sgdm only."""
  return run_plan.OptimizerSpec(name, learning_rate,
                                momentum if name == 'sgdm' else 0.0)


def _noise_seed(config: train_config.TrainConfig) -> int | None:
  """Seed of the DP noise (`seeded_queries`), None for unseeded noise.

  A pure function of --seed, independent of the round seeds
  (`tff_engine.training.selection_fn`). Noise that anyone holding the config
  can regenerate is fine for a simulated audit, never for a deployment
  (--noseeded_noise). The JAX engine keys its noise by --seed itself.
  """
  if not config.seeded_noise:
    return None
  return int(np.random.SeedSequence([config.seed, 1]).generate_state(1)[0])


def _check_mechanism(config: train_config.TrainConfig, plan: run_plan.RunPlan,
                     dim: int) -> None:
  """The mechanism's own checks that need the run's rounds, clip and d."""
  mechanism = plan.mechanism
  if config.num_bands is not None and config.num_bands > plan.total_rounds:
    raise train_config.ConfigError(
        f'--num_bands must be in [1, {plan.total_rounds}] (the run\'s '
        f'rounds); got {config.num_bands}.')
  try:
    mechanism.check_run(references.RunFacts(
        noise_multiplier=plan.dp.noise_multiplier, delta=plan.delta,
        dim=dim, clip=plan.dp.clip, cohort=plan.dp.clients_per_round))
  except ValueError as error:  # '<option>: <why>' (`Mechanism.check_run`).
    raise train_config.ConfigError(f'--{error}') from None


def plan_run(
    config: train_config.TrainConfig, clients: int | Sequence[str],
    supports: Callable[[run_plan.Supportable], run_plan.Support]
) -> run_plan.RunPlan:
  """The run's plan, checked whole: size, canaries, mechanism, engine.

  In order, each before anything that depends on it is built: the cohort
  against the task's clients, the run's memory and work against the
  machine (`run_size.check`; before the schedule, which grows with T), the
  canaries' share of a round, the plan itself, the mechanism's own checks,
  and the engine's `supports(plan)`.

  Args:
    config: The validated config.
    clients: The task's training client ids, or their number where the ids
      are not read yet (the plan is the same but for the sampler's ids).
    supports: The engine's `supports(plan)` (`engine.Backend.supports`).

  Returns:
    The plan; its delta is --delta, else m^-1.1 for the task's m clients.

  Raises:
    train_config.ConfigError: naming the flag to change.
  """
  num_clients = clients if isinstance(clients, int) else len(clients)
  if config.clients_per_round > num_clients:
    raise train_config.ConfigError(
        f'--clients_per_round must be in [1, {num_clients}] (the task has '
        f'{num_clients} training clients); got {config.clients_per_round}.')
  dim = _check_dim(config)
  total_rounds, expected_clients = participation_sizes(config, num_clients)
  if config.canary_repeats > total_rounds:
    raise train_config.ConfigError(
        f'--canary_repeats must be in [1, {total_rounds}] (the number of '
        f'training rounds); got {config.canary_repeats}.')
  try:
    run_size.check(_shape(config, num_clients, expected_clients,
                          total_rounds))
    sampler, _ = participation_plan(config, clients)
    schedule, cohort = participation.canary_plan(
        sampler, config.num_canaries, total_rounds, config.canary_repeats,
        config.canary_seed)
  except run_size.PlanRefused as error:
    raise _refused(config, total_rounds, error) from None
  if config.canary_kind == 'both':
    # Each scheduled round has a gradient canary and a data canary client.
    cohort += cohort - sampler.expected_clients_per_round
  delta = config.delta if config.delta is not None else num_clients**-1.1
  plan = run_plan.RunPlan(
      sampler=sampler, total_rounds=total_rounds,
      spec=_spec(config, schedule), dp=_dp_aggregation(config, cohort),
      delta=delta,
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
      seed=config.seed, noise_seed=_noise_seed(config),
      rounds_per_checkpoint=config.rounds_per_checkpoint,
      rounds_per_evaluation=config.rounds_per_evaluation,
      max_eval_examples=(None if config.max_eval_examples == -1 else
                         config.max_eval_examples),
      mechanism=config.the_mechanism(), canary_kind=config.canary_kind,
      data_canaries=_data_canaries(config, schedule, num_clients))
  _check_mechanism(config, plan, dim)
  _check_supported(config, plan, supports)
  return plan


@dataclasses.dataclass(frozen=True)
class _Outline:
  """What `supports(plan)` reads, before the plan exists: its mechanism and
  canaries (their counts; no schedule yet)."""
  mechanism: mechanisms.Mechanism
  spec: canary_spec.CanarySpec | None


def _check_supported(config: train_config.TrainConfig,
                     plan: run_plan.Supportable,
                     supports: Callable[[run_plan.Supportable],
                                        run_plan.Support]) -> None:
  """The engine's `supports(plan)`, its refusal naming the flags."""
  support = supports(plan)
  if not support:
    without = ' with --num_canaries=0' if plan.spec is None else ''
    raise train_config.ConfigError(
        f'--backend={config.backend} does not run --mechanism='
        f'{config.mechanism}{without}: {support.reason}.')


def check_plan(config: train_config.TrainConfig) -> None:
  """Everything about a run checked without its data or its framework.

  The run directory writable (`run_directory.check_writable`); then, with
  synthetic data, whose clients the flags fix, the whole plan (`plan_run`
  with the engine's `SUPPORTS`); with real data, whose files may hold any
  subset of the task's clients, the run's size (`run_size.check`, T counted
  on the published data's clients, `design.tasks`) and the engine's
  `supports` of its mechanism and canaries, the rest once the data is
  loaded (`train.prepare`).

  Args:
    config: The validated config.

  Raises:
    train_config.ConfigError: naming the flag to change.
  """
  try:
    run_directory.check_writable(config.run_dir)
  except run_directory.RunDirectoryError as error:
    raise train_config.ConfigError(f'--{error.flag}: {error}') from None
  supports = SUPPORTS[config.backend]
  if config.use_synthetic_data:
    plan_run(config, config.synthetic_num_clients, supports)
    return
  _check_dim(config)
  published = tasks.task_entry(config.task).num_clients
  if published is not None and config.clients_per_round <= published:
    total_rounds, expected_clients = participation_sizes(config, published)
    try:
      run_size.check(_shape(config, published, expected_clients,
                            total_rounds))
    except run_size.PlanRefused as error:
      raise _refused(config, total_rounds, error) from None
  spec = None
  if config.num_canaries:
    spec = canary_spec.CanarySpec(seed=config.canary_seed,
                                  num_seen=config.num_canaries,
                                  num_unseen=config.num_unseen_canaries)
  _check_supported(config, _Outline(config.the_mechanism(), spec), supports)
