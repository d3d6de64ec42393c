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

Each run trains once (`one_shot_epe.baselines.dpsgd`); before the update of
rounds 0, s, 2s, ... the frozen model is audited by CANIFE
(`one_shot_epe.baselines.canife`), whose per-round estimates are composed
over training with the RDP accountant (`canife_accounting`). The one-shot
estimates come from the same run's canary cosines (`one_shot_epe.stats.estimation`
reports: all iterates, Algorithm 3, and final model, Algorithm 2), each with
eps_est (Sec. 3.2), its bootstrap 95% interval, the Gaussian-DP estimate, the
attack's AUROC and TPR at FPR 1e-2 and 1e-3, and eps_lo (Sec. 5.1). The
program prints a Markdown table of the means +- sample std over --num_runs
runs beside the paper's numbers, with the wall time each method added to
training, and a table per run.

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
  from one_shot_epe.tff_engine import quiet
  quiet.quiet_startup(sys.argv, import_tensorflow=True)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dataclasses
import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from absl import app
from absl import flags
import numpy as np

from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import command_line
from one_shot_epe.report import privacy_report
from one_shot_epe.baselines import canife
from one_shot_epe.baselines import canife_accounting
from one_shot_epe.baselines import canife_attack
from one_shot_epe.baselines import dpsgd
from one_shot_epe.data import fashion_mnist
from one_shot_epe.baselines import feedforward
from one_shot_epe.baselines import per_example

__all__ = ['DEPRECATED_FLAGS', 'PAPER_ANALYTICAL_EPSILON', 'PAPER_CANIFE',
           'PAPER_ONE_SHOT', 'RunResult', 'Setting', 'analytical_epsilons',
           'check_sizes', 'define_flags', 'format_report', 'load_data',
           'main', 'results_json', 'run', 'run_once', 'setting_from_flags']

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
    setting: The comparison's setting (--data_dir, sizes, seed).

  Returns:
    The training and test data.
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
             auditor: canife.CanifeAuditor, run_index: int) -> RunResult:
  """Trains once with canaries and CANIFE audits; returns both estimates.

  Args:
    setting: The comparison's setting.
    data: The training and test data.
    auditor: The CANIFE auditor (its canaries designed per audit).
    run_index: The run's index, which seeds it.

  Returns:
    The run's accuracy, CANIFE's audits and estimate, both threat models'
    one-shot reports and each method's wall time.
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
  start = time.perf_counter()
  report = privacy_report.all_iterates_report(trained.seen_maxima,
                                              trained.unseen_maxima, delta,
                                              seed=bootstrap_seed)
  final = privacy_report.final_model_report(
      trained.final_cosines, model.dim, delta,
      unseen=trained.final_unseen_cosines, seed=bootstrap_seed)
  one_shot_seconds = trained.one_shot_seconds + time.perf_counter() - start
  accuracy = auditor.oracle.accuracy(trained.final_params, test_inputs,
                                     test_labels)
  return RunResult(
      seed=run_seed, test_accuracy=accuracy, canife_epsilon=estimate.epsilon,
      canife_capped_epsilon=capped.epsilon, canife_estimate=estimate,
      audits=audits, one_shot_all=report, one_shot_final=final,
      canary_presentations=np.bincount(trained.appearances).tolist(),
      train_seconds=trained.train_seconds,
      canife_seconds=canife_seconds, one_shot_seconds=one_shot_seconds)


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
    setting: The comparison's setting (noise, batch size, rounds).
    num_clients: N, the training examples (each its own client).

  Returns:
    The three epsilons, in that order.
  """
  config = setting.training
  delta = setting.delta if setting.delta is not None else 1.0 / num_clients
  single = canife_accounting.per_round_epsilon(config.noise_multiplier, delta)
  exact = dp_fedavg.canary_epsilon(config.noise_multiplier, delta, 1).epsilon
  composed = canife_accounting.cumulative_epsilon(
      [config.noise_multiplier], [config.num_rounds(num_clients)],
      config.sampling_rate(num_clients), delta)
  return single, exact, composed


def _mean_std(values: Sequence[float]) -> str:
  """'mean ± std' (ddof = 1); infinite runs are counted and left out."""
  values = np.asarray(values, np.float64)
  finite = values[np.isfinite(values)]
  infinite = values.size - finite.size
  if finite.size == 0:
    return f'∞ (all {values.size} runs)'
  text = (f'{finite.mean():.3g}' if finite.size < 2 else
          f'{finite.mean():.3g} ± {finite.std(ddof=1):.3g}')
  if infinite:
    text += f' (finite runs; ∞ in {infinite} of {values.size})'
  return text


_THREAT_MODELS = (
    ('one_shot_all', 'all iterates (Alg. 3; seen vs unseen max-cosines)'),
    ('one_shot_final', 'final model (Alg. 2; cosines with theta_T - theta_0 '
     'vs the exact null)'),
)
_PAPER_ONE_SHOT_TEXT = f'{PAPER_ONE_SHOT[0]} ± {PAPER_ONE_SHOT[1]}'


def _insertion_text(insertion: str) -> str:
  """How the seen canaries were inserted, in words for the report."""
  return {
      'once': 'each seen canary inserted exactly once, at a uniformly random '
              'round',
      'poisson': 'each canary joins each round w.p. q (Poisson); some are '
                 'never inserted',
      'shuffle': 'each canary once per epoch (shuffled)',
  }[insertion]


def _one_shot_rows(results: Sequence[RunResult], field: str,
                   title: str) -> list[str]:
  """Summary rows of one threat model's `privacy_report.PrivacyReport`s."""
  reports = [getattr(r, field) for r in results]

  def column(name: str) -> str:
    return _mean_std([getattr(report, name) for report in reports])

  interval = [report.epsilon_est_interval for report in reports]
  paper = (f'{_PAPER_ONE_SHOT_TEXT} (Sec. 5.4)' if field == 'one_shot_all'
           else '—')
  rows = [
      f'| **one-shot, {title}**: paper\'s eps_est (Sec. 3.2, fitted '
      f'variances) | {column("epsilon_est_fitted")} | {paper} |',
      f'| — headline eps_est ({reports[0].epsilon_est_method}) | '
      f'{column("epsilon_est")} | — |',
      f'| — headline eps_est, bootstrap 95% interval [lo, hi] | '
      f'[{_mean_std([lo for lo, _ in interval])}, '
      f'{_mean_std([hi for _, hi in interval])}] | — |',
      f'| — eps_gdp (mu-Gaussian DP, mu = mean shift / null std) | '
      f'{column("epsilon_gdp")} | — |',
      f'| — GDP mu | {column("gdp_mu")} | — |',
      f'| — attack AUROC | {column("auroc")} | — |',
  ]
  for fpr in privacy_report.TPR_FPRS:
    key = f'{fpr:g}'
    rows.append(f'| — attack TPR at FPR {key} | '
                f'{_mean_std([report.tpr_at_fpr[key] for report in reports])} '
                '| — |')
  rows += [
      f'| — eps_lo (95% lower bound, threshold paid for) | '
      f'{column("epsilon_lo")} | — |',
      f'| — one-run eps (95%; Steinke et al. 2023) / f-DP (Mahloujifar et '
      f'al. 2024) | {column("epsilon_one_run")} / '
      f'{column("epsilon_one_run_fdp")} | — |',
      f'| — paper\'s eps_lo (Sec. 5.1; nominal only) | '
      f'{column("epsilon_lo_paper")} | — |',
  ]
  return rows


def format_report(setting: Setting, data: fashion_mnist.Dataset,
                  num_clients: int, results: Sequence[RunResult],
                  total_seconds: float) -> str:
  """The Markdown report: summary table beside the paper, per-run table, notes.

  Args:
    setting: The comparison's setting.
    data: The data trained on (real or synthetic, named in the notes).
    num_clients: N, the training examples.
    results: Each run's results.
    total_seconds: The comparison's wall time.

  Returns:
    The report.
  """
  config = setting.training
  single, exact, composed = analytical_epsilons(setting, num_clients)
  delta = setting.delta if setting.delta is not None else 1.0 / num_clients
  num_rounds = config.num_rounds(num_clients)
  runs = len(results)
  audit = setting.canife_config
  dim = feedforward.FeedForward(fashion_mnist.IMAGE_SHAPE,
                                setting.hidden_units).dim

  def mean_time(name: str) -> str:
    return f'{np.mean([getattr(r, name) for r in results]):.1f}'

  lines = [
      f'Section 5.4: CANIFE vs one-shot on one training run ({runs} runs; '
      f'data: {data.source}, N = {num_clients} clients; two-layer network, '
      f'{setting.hidden_units} hidden units, d = {dim}; '
      f'clip {config.clip:g}, noise multiplier {config.noise_multiplier:g}, '
      f'batch {config.batch_size}, {config.epochs} epoch(s) = {num_rounds} '
      f'rounds, {config.sampling} sampling of clients, lr '
      f'{config.learning_rate:g}; {config.num_seen} seen / {config.num_unseen} '
      f'unseen canaries, canary insertion {config.canary_insertion!r}: '
      f'{_insertion_text(config.canary_insertion)}; delta = {delta:.3g})',
      '',
      '| quantity | this implementation (mean ± std over runs) | paper | '
      'wall time per run (s) |',
      '|---|---|---|---|',
      f'| analytical eps, one unamplified Gaussian release (RDP, as the '
      f'paper; a canary inserted once) | {single:.3g} | '
      f'{PAPER_ANALYTICAL_EPSILON} | — |',
      f'| — the same release, exact (Balle–Wang = dp_accounting PLD) | '
      f'{exact:.3g} | — | — |',
      f'| accounted eps of real clients: RDP of {num_rounds} Poisson-subsampled'
      f' rounds at q = {config.sampling_rate(num_clients):.3g} | '
      f'{composed:.3g} | — | — |',
      f'| CANIFE eps_hat (Alg. 2; audit every {setting.audit_every} rounds, '
      f'{audit.num_mock_rounds} scores, pool {setting.design_pool_size}, '
      f'{audit.design_steps} design steps, GetNoise at the '
      f'{setting.canife_noise_delta} delta; ∞ if an audit separates '
      f'perfectly) | {_mean_std([r.canife_epsilon for r in results])} | '
      f'{PAPER_CANIFE[0]} ± {PAPER_CANIFE[1]} | '
      f'{mean_time("canife_seconds")} |',
      f'| CANIFE eps_hat, perfect audits capped at the '
      f'{audit.num_mock_rounds}-score bound | '
      f'{_mean_std([r.canife_capped_epsilon for r in results])} | — | (same) |',
  ]
  for field, title in _THREAT_MODELS:
    rows = _one_shot_rows(results, field, title)
    rows[0] += f' {mean_time("one_shot_seconds")} |'
    lines += rows[:1] + [row + ' (same) |' for row in rows[1:]]
  lines += [
      f'| (training itself, shared) | — | — | {mean_time("train_seconds")} |',
      '',
      f'Paper (Sec. 5.4): analytical {PAPER_ANALYTICAL_EPSILON}, CANIFE '
      f'{PAPER_CANIFE[0]} ± {PAPER_CANIFE[1]}, one-shot '
      f'{_PAPER_ONE_SHOT_TEXT} (1 000 seen and 1 000 unseen canaries: the '
      'all-iterates estimate).',
      '',
      '| run | test acc. | canaries inserted 0/1/2/... times | '
      'CANIFE eps_hat_r per audit | canary health | attack acc. | '
      'mean abs cos (held-out) | CANIFE eps_hat (capped) | '
      'seen max-cos mean/std | unseen max-cos mean/std | '
      'eps_est all [95% interval] | eps_lo all | '
      'eps_est final [95% interval] | eps_lo final |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  for i, r in enumerate(results):
    per_round = ', '.join(f'{a.epsilon:.3g}' for a in r.audits)
    health = ', '.join(f'{a.canary_health:.3f}' for a in r.audits)
    accuracy = ', '.join(f'{a.attack_accuracy:.2f}' for a in r.audits)
    cosine = ', '.join(f'{a.heldout_cosine:.2g}' for a in r.audits)
    presentations = '/'.join(str(n) for n in r.canary_presentations)
    every, final = r.one_shot_all, r.one_shot_final
    lines.append(
        f'| {i} | {r.test_accuracy:.3f} | {presentations} | {per_round} | '
        f'{health} | {accuracy} | {cosine} | {r.canife_epsilon:.3g} '
        f'({r.canife_capped_epsilon:.3g}) | {every.seen_mean:.4g} / '
        f'{every.seen_std:.3g} | {every.null_mean:.4g} / '
        f'{every.null_std:.3g} | {_with_interval(every)} | '
        f'{every.epsilon_lo:.3g} | {_with_interval(final)} | '
        f'{final.epsilon_lo:.3g} |')
  lines += [
      '',
      f'Total wall time: {total_seconds:.1f} s. Estimates are mean ± sample '
      'std (ddof = 1) over runs; an interval row gives the mean ± std of its '
      'ends. Wall times are what each method adds to training: CANIFE = '
      'mock-client updates, canary design, mock rounds and accounting; '
      'one-shot = canary records, cosine tracking, final-model cosines and '
      'both reports (bootstrap included).',
  ]
  return '\n'.join(lines) + '\n'


def _with_interval(report: privacy_report.PrivacyReport) -> str:
  """'eps_est [lo, hi]' of one report."""
  low, high = report.epsilon_est_interval
  return f'{report.epsilon_est:.3g} [{low:.3g}, {high:.3g}]'


def results_json(setting: Setting, num_clients: int,
                 results: Sequence[RunResult]) -> str:
  """The setting (canary insertion included) and per-run numbers.

  Args:
    setting: The comparison's setting.
    num_clients: N, the training examples.
    results: Each run's results.

  Returns:
    The JSON text.
  """
  single, exact, composed = analytical_epsilons(setting, num_clients)

  def audit_dict(a: canife.AuditResult) -> dict[str, object]:
    return {key: value for key, value in dataclasses.asdict(a).items()
            if key not in ('scores', 'inserted')}

  return json.dumps({
      'setting': dataclasses.asdict(setting),
      'canary_insertion': setting.training.canary_insertion,
      'analytical_epsilon_single_release': single,
      'analytical_epsilon_single_release_exact': exact,
      'analytical_epsilon_poisson_rdp': composed,
      'paper': {
          'analytical_epsilon': PAPER_ANALYTICAL_EPSILON,
          'canife_epsilon_mean_std': list(PAPER_CANIFE),
          'one_shot_epsilon_mean_std': list(PAPER_ONE_SHOT),
      },
      'num_clients': num_clients,
      'runs': [{
          'seed': r.seed,
          'test_accuracy': r.test_accuracy,
          'canary_presentations': r.canary_presentations,
          'canife_epsilon': r.canife_epsilon,
          'canife_capped_epsilon': r.canife_capped_epsilon,
          'canife_estimate': dataclasses.asdict(r.canife_estimate),
          'audits': [audit_dict(a) for a in r.audits],
          'one_shot_all': r.one_shot_all.to_dict(),
          'one_shot_final': r.one_shot_final.to_dict(),
          'train_seconds': r.train_seconds,
          'canife_seconds': r.canife_seconds,
          'one_shot_seconds': r.one_shot_seconds,
      } for r in results],
  }, indent=2, default=float) + '\n'


def run(setting: Setting, data: fashion_mnist.Dataset) -> tuple[str, str]:
  """Runs the comparison; returns the Markdown report and the JSON details.

  Args:
    setting: The comparison's setting.
    data: The training and test data.

  Returns:
    (the Markdown report, the JSON details).
  """
  start = time.perf_counter()
  model = feedforward.FeedForward(fashion_mnist.IMAGE_SHAPE,
                                  setting.hidden_units,
                                  fashion_mnist.NUM_CLASSES)
  auditor = canife.CanifeAuditor(model, setting.canife_config)
  results = [run_once(setting, data, auditor, i)
             for i in range(setting.num_runs)]
  num_clients = (setting.num_train_examples if setting.num_train_examples > 0
                 else len(data.train_images))
  return (format_report(setting, data, num_clients, results,
                        time.perf_counter() - start),
          results_json(setting, num_clients, results))


# ----------------------------------------------------------------------------
# Command line.


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Registers the program's flags (on `flag_values`).

  Also the deprecated spellings of `DEPRECATED_FLAGS` (`setting_from_flags`
  reads them).

  Args:
    flag_values: The registry to define them in.
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
  for name in ('output', 'output_json'):
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


def setting_from_flags(values: flags.FlagValues) -> Setting:
  """The validated Setting; exits with status 2 naming a bad flag.

  Args:
    values: The parsed flags.

  Returns:
    The setting.
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
  return Setting(
      data=values.data, data_dir=values.data_dir,
      num_train_examples=values.num_train_examples,
      synthetic_num_train=values.synthetic_num_train,
      synthetic_num_test=values.synthetic_num_test,
      hidden_units=values.hidden_units, training=training,
      audit_every=values.audit_every, design_pool_size=values.design_pool_size,
      canife_config=config, delta=values.delta,
      canife_noise_delta=values.canife_noise_delta, num_runs=values.num_runs,
      seed=values.seed)


def check_sizes(setting: Setting, data: fashion_mnist.Dataset) -> None:
  """Exits with status 2 if a size flag does not fit the loaded data.

  Args:
    setting: The comparison's setting.
    data: The loaded data.
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

  Args:
    argv: The command line left after absl's flags (the program name only).
  """
  if len(argv) > 1:
    sys.stderr.write(f'FATAL unexpected positional arguments: {argv[1:]}\n')
    sys.exit(2)
  setting = setting_from_flags(flags.FLAGS)
  data = load_data(setting)
  check_sizes(setting, data)
  report, details = run(setting, data)
  print(report, end='')
  if flags.FLAGS.output is not None:
    atomic_io.write_text(flags.FLAGS.output, report)
  if flags.FLAGS.output_json is not None:
    atomic_io.write_text(flags.FLAGS.output_json, details)


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
