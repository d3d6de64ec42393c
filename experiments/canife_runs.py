"""Section 5.4's runs: one DP-SGD training, CANIFE and the canaries on it.

A `Setting` (what `experiments.compare_canife`'s flags say) and the data
make one `run_once`: DP-SGD on Fashion-MNIST (`baselines.dpsgd`, every
example its own client) with seen and unseen canaries, a CANIFE audit of
the frozen model every few rounds (`baselines.canife`), CANIFE's estimates
composed over training (`baselines.canife_accounting`) and the one-shot
reports of both threat models (`reporting.run_report.build_run_report`, the
builder of every engine), each method timed; given a run directory, the
run's result files (`reporting.run_files`: cosine CSVs, report.json/.md,
density plot). `analytical_epsilons` are the references both are held
against.
"""

import dataclasses
import os
import time

import numpy as np

from experiments.baselines import canife
from experiments.baselines import canife_accounting
from experiments.baselines import dpsgd
from experiments.baselines import per_example
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.data import fashion_mnist
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import run_files
from one_shot_epe.reporting import run_report

__all__ = ['PAPER_ANALYTICAL_EPSILON', 'PAPER_CANIFE', 'PAPER_ONE_SHOT',
           'RunResult', 'Setting', 'analytical_epsilons', 'load_data',
           'run_once']

# Sec. 5.4 of the paper, for reference in the report.
PAPER_ANALYTICAL_EPSILON = 34.5
PAPER_CANIFE = (0.879, 0.124)
PAPER_ONE_SHOT = (6.76, 1.06)


@dataclasses.dataclass(frozen=True)
class Setting:
  """Everything a comparison run depends on (validated by the flags)."""
  data: str = 'auto'
  data_dir: str = fashion_mnist.DEFAULT_DIRECTORY
  num_train_examples: int = -1
  synthetic_num_train: int = 60000
  synthetic_num_test: int = 10000
  hidden_units: int = 100
  training: dpsgd.TrainingConfig = dpsgd.TrainingConfig()
  audit_every: int = 100
  design_pool_size: int = canife.DEFAULT_DESIGN_POOL_SIZE
  canife_config: canife.CanifeConfig = canife.CanifeConfig()
  delta: float | None = None
  canife_noise_delta: str = 'training'
  num_runs: int = 3
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class RunResult:
  """One training run with both estimates."""
  seed: int
  test_accuracy: float
  canife_epsilon: float
  canife_capped_epsilon: float
  canife_estimate: canife_accounting.CanifeEstimate
  audits: list[canife.AuditResult]
  one_shot_all: privacy_report.PrivacyReport
  one_shot_final: privacy_report.PrivacyReport
  canary_presentations: list[int]
  train_seconds: float
  canife_seconds: float
  one_shot_seconds: float


def load_data(setting: Setting) -> fashion_mnist.Dataset:
  """Real Fashion-MNIST if requested/available, else the synthetic stand-in.

  Args:
    setting: the comparison's setting: its data choice ('real', 'auto' or
      synthetic), data directory, seed and synthetic sizes.

  Returns:
    The training and test images and labels.

  Raises:
    OSError: 'real' data was asked for and cannot be read.
    ValueError: the data files are malformed.
  """
  if setting.data == 'real' or (setting.data == 'auto' and
                                fashion_mnist.available(setting.data_dir)):
    return fashion_mnist.load(setting.data_dir)
  return fashion_mnist.synthetic(setting.seed, setting.synthetic_num_train,
                                 setting.synthetic_num_test)


def _poisson_cohorts(inputs: np.ndarray, labels: np.ndarray, rate: float):
  """A CANIFE cohort sampler: every training client joins w.p. `rate`."""

  def sample(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    chosen = np.flatnonzero(rng.random(len(inputs)) < rate)
    return inputs[chosen], labels[chosen]

  return sample


def run_once(setting: Setting, data: fashion_mnist.Dataset,
             auditor: canife.CanifeAuditor, run_index: int,
             run_dir: str | None = None) -> RunResult:
  """Trains once with canaries and CANIFE audits; returns both estimates.

  The run's seeds derive from (setting seed, `run_index`): training, the
  design pool, the audits and the one-shot bootstrap each get their own.

  Args:
    setting: the comparison's setting (training config, audit period,
      delta, design pool size, training subset size).
    data: the Fashion-MNIST images and labels.
    auditor: the CANIFE auditor, whose model is trained.
    run_index: which repetition this is (0-based).
    run_dir: where the run's result files go (`run_files.write_results`;
      created if missing); None writes none.

  Returns:
    The run's CANIFE and one-shot estimates, accuracy and timings.

  Raises:
    OSError: a result file cannot be written.
  """
  run_seed = int(np.random.SeedSequence([setting.seed, run_index])
                 .generate_state(1)[0])
  train_seed, pool_seed, audit_seed, bootstrap_seed = (
      int(s) for s in np.random.SeedSequence(run_seed).generate_state(4))
  model = auditor.model
  train_images, train_labels = data.train_images, data.train_labels
  if setting.num_train_examples > 0:
    keep = np.random.default_rng(train_seed).choice(
        len(train_images), setting.num_train_examples, replace=False)
    train_images, train_labels = train_images[keep], train_labels[keep]
  inputs = fashion_mnist.standardise(train_images)
  labels = per_example.one_hot(train_labels.astype(np.int64), model.num_classes)
  test_inputs = fashion_mnist.standardise(data.test_images)
  test_labels = per_example.one_hot(data.test_labels.astype(np.int64),
                                    model.num_classes)
  pool = np.random.default_rng(pool_seed).choice(
      len(test_inputs), setting.design_pool_size, replace=False)
  config = dataclasses.replace(setting.training, seed=train_seed)
  num_clients = len(inputs)
  num_rounds = config.num_rounds(num_clients)
  rate = config.sampling_rate(num_clients)
  delta = setting.delta if setting.delta is not None else 1.0 / num_clients
  rounds = canife_accounting.audit_rounds(num_rounds, setting.audit_every)
  sample_cohort = _poisson_cohorts(inputs, labels, rate)
  audits = []

  def audit(round_index: int, params: np.ndarray) -> None:
    audits.append(auditor.audit(
        params, design_inputs=test_inputs[pool],
        design_labels=test_labels[pool],
        sample_cohort=sample_cohort, clip=config.clip,
        noise_multiplier=config.noise_multiplier,
        seed=audit_seed + round_index))

  trained = dpsgd.train(model, inputs, labels, config, hook=audit,
                        hook_rounds=rounds, oracle=auditor.oracle)
  start = time.perf_counter()
  noise_delta = (None if setting.canife_noise_delta == 'training' else
                 setting.canife_config.delta())
  estimate = canife_accounting.canife_epsilon(
      [a.epsilon for a in audits], rounds, num_rounds, rate, delta,
      noise_delta=noise_delta)
  capped = canife_accounting.canife_epsilon(
      [a.capped_epsilon for a in audits], rounds, num_rounds, rate, delta,
      noise_delta=noise_delta)
  canife_seconds = time.perf_counter() - start + sum(
      a.design_seconds + a.attack_seconds for a in audits)
  accuracy = auditor.oracle.accuracy(trained.final_params, test_inputs,
                                     test_labels)
  outcome = canary_spec.CanaryOutcome(
      final_cosines=trained.final_cosines,
      final_unseen_cosines=trained.final_unseen_cosines,
      seen_maxima=trained.seen_maxima, unseen_maxima=trained.unseen_maxima,
      accuracy=accuracy, dim=model.dim, resumed_from_round=0,
      rounds_trained=num_rounds)
  # The reference: a canary presented as often as the most presented one
  # (once each with --canary_insertion=once); the comparison's own table
  # holds the accounted references (`analytical_epsilons`).
  facts = references.RunFacts(
      noise_multiplier=config.noise_multiplier, delta=delta, dim=model.dim,
      canary_presentations=max(1, int(trained.appearances.max(initial=0))))
  start = time.perf_counter()
  report = run_report.build_run_report(
      outcome, facts, mechanisms.Gaussian(), seed=bootstrap_seed,
      setting=_report_setting(config, run_index, data.source, num_clients))
  one_shot_seconds = trained.one_shot_seconds + time.perf_counter() - start
  if run_dir is not None:
    os.makedirs(run_dir, exist_ok=True)
    run_files.write_results(
        run_dir, outcome, report,
        title=f'CANIFE comparison, run {run_index}, noise '
        f'{config.noise_multiplier:g}')
  return RunResult(
      seed=run_seed, test_accuracy=accuracy, canife_epsilon=estimate.epsilon,
      canife_capped_epsilon=capped.epsilon, canife_estimate=estimate,
      audits=audits, one_shot_all=report.all_iterates,
      one_shot_final=report.final,
      canary_presentations=np.bincount(trained.appearances).tolist(),
      train_seconds=trained.train_seconds,
      canife_seconds=canife_seconds, one_shot_seconds=one_shot_seconds)


def _report_setting(config: dpsgd.TrainingConfig, run_index: int,
                    source: str, num_clients: int) -> dict[str, object]:
  """The setting a run's report.md shows."""
  return {'comparison': 'CANIFE, Sec. 5.4', 'run': run_index,
          'data': source, 'num_clients': num_clients,
          'batch_size': config.batch_size, 'epochs': config.epochs,
          'sampling': config.sampling, 'clipping': config.clip,
          'canary_insertion': config.canary_insertion,
          'num_canaries': config.num_seen,
          'num_unseen_canaries': config.num_unseen,
          'all_iterates_statistic': config.statistic, 'seed': config.seed}


def analytical_epsilons(setting: Setting,
                        num_clients: int) -> tuple[float, float, float]:
  """(one release by RDP, one release exactly, all rounds by RDP) at delta.

  The first is the paper's "analytical eps" (34.5 at sigma = 0.2, delta =
  1/60 000): the RDP accountant's epsilon of one unamplified Gaussian
  mechanism, a client seen once by an adversary who knows its round. The
  second is the same mechanism's exact eps (Balle and Wang, equal to
  dp_accounting's PLD; 32.5 there): RDP's conversion to (eps, delta) is
  loose. The third is the RDP accountant's bound for T Poisson-subsampled
  rounds at rate q, CANIFE's theoretical eps (valid for 'poisson' sampling).

  Args:
    setting: the comparison's setting (noise multiplier, rounds, rate and
      delta; delta 1 / num_clients when unset).
    num_clients: the number of training clients (examples) n.

  Returns:
    The three epsilons, in the order above.
  """
  config = setting.training
  delta = setting.delta if setting.delta is not None else 1.0 / num_clients
  single = canife_accounting.per_round_epsilon(config.noise_multiplier, delta)
  exact = dp_fedavg.canary_epsilon(config.noise_multiplier, delta, 1).epsilon
  composed = canife_accounting.cumulative_epsilon(
      [config.noise_multiplier], [config.num_rounds(num_clients)],
      config.sampling_rate(num_clients), delta)
  return single, exact, composed
