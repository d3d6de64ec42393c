"""Section 5.4's report: CANIFE beside the one-shot estimates, and as JSON.

`format_report` turns the runs of `canife_runs` into the Markdown table the
program prints (analytical epsilons, both methods' estimates with mean and
standard deviation over the runs, the paper's numbers beside them, each
method's wall time); `results_json` keeps every run's numbers.
"""

import dataclasses
import json
from collections.abc import Sequence

import numpy as np

from experiments import canife_runs
from experiments.baselines import canife
from experiments.baselines import feedforward
from one_shot_epe.data import fashion_mnist
from one_shot_epe.reporting import privacy_report

__all__ = ['format_report', 'results_json']


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
_PAPER_ONE_SHOT_TEXT = f'{canife_runs.PAPER_ONE_SHOT[0]} ± {canife_runs.PAPER_ONE_SHOT[1]}'


def _insertion_text(insertion: str) -> str:
  """How the seen canaries were inserted, in words for the report."""
  return {
      'once': 'each seen canary inserted exactly once, at a uniformly random '
              'round',
      'poisson': 'each canary joins each round w.p. q (Poisson); some are '
                 'never inserted',
      'shuffle': 'each canary once per epoch (shuffled)',
  }[insertion]


def _one_shot_rows(results: Sequence[canife_runs.RunResult], field: str,
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
      f'| — headline eps_est, 95% bootstrap interval of the estimate '
      f'[lo, hi] | '
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
      f'al. 2024; only if the mechanism is Gaussian in the canary\'s '
      f'direction) | {column("epsilon_one_run")} / '
      f'{column("epsilon_one_run_fdp")} | — |',
      f'| — paper\'s eps_lo (Sec. 5.1; nominal only) | '
      f'{column("epsilon_lo_paper")} | — |',
  ]
  return rows


def format_report(setting: canife_runs.Setting, data: fashion_mnist.Dataset,
                  num_clients: int, results: Sequence[canife_runs.RunResult],
                  total_seconds: float) -> str:
  """The Markdown report: summary table beside the paper, per-run table, notes.

  Args:
    setting: the comparison's setting (Sec. 5.4).
    data: the data the runs trained on (its source is named).
    num_clients: the number of training clients N.
    results: the runs' results (at least one; the std needs two).
    total_seconds: the wall time of all runs, in seconds.

  Returns:
    The report as Markdown, ending with a newline.
  """
  config = setting.training
  single, exact, composed = canife_runs.analytical_epsilons(setting, num_clients)
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
      f'{canife_runs.PAPER_ANALYTICAL_EPSILON} | — |',
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
      f'{canife_runs.PAPER_CANIFE[0]} ± {canife_runs.PAPER_CANIFE[1]} | '
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
      f'Paper (Sec. 5.4): analytical {canife_runs.PAPER_ANALYTICAL_EPSILON}, CANIFE '
      f'{canife_runs.PAPER_CANIFE[0]} ± {canife_runs.PAPER_CANIFE[1]}, one-shot '
      f'{_PAPER_ONE_SHOT_TEXT} (1 000 seen and 1 000 unseen canaries: the '
      'all-iterates estimate).',
      '',
      '| run | test acc. | canaries inserted 0/1/2/... times | '
      'CANIFE eps_hat_r per audit | canary health | attack acc. | '
      'mean abs cos (held-out) | CANIFE eps_hat (capped) | '
      'seen max-cos mean/std | unseen max-cos mean/std | '
      'eps_est all [95% bootstrap interval of the estimate] | eps_lo all | '
      'eps_est final [95% bootstrap interval of the estimate] | '
      'eps_lo final |',
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


def results_json(setting: canife_runs.Setting, num_clients: int,
                 results: Sequence[canife_runs.RunResult]) -> str:
  """The setting (canary insertion included) and per-run numbers.

  Args:
    setting: the comparison's setting (Sec. 5.4).
    num_clients: the number of training clients N.
    results: the runs' results.

  Returns:
    The JSON text (indented, ending with a newline): the setting, the
    analytical epsilons, the paper's numbers and each run's numbers.
  """
  single, exact, composed = canife_runs.analytical_epsilons(setting, num_clients)

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
          'analytical_epsilon': canife_runs.PAPER_ANALYTICAL_EPSILON,
          'canife_epsilon_mean_std': list(canife_runs.PAPER_CANIFE),
          'one_shot_epsilon_mean_std': list(canife_runs.PAPER_ONE_SHOT),
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
