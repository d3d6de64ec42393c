"""The privacy report that ends every training run (Sections 4 and 5).

Bundles, for one DP-FedAvg run with canaries: two upper bounds, each with the
mechanism it assumes (`accounting`): the analytical epsilon of a canary
presented r times (an r-fold Gaussian mechanism, no amplification; r = 1 is
the paper's Tables 3 and 4, footnote 5) and the accounted epsilon of a real
client under the run's sampling; the final-model report (Algorithm 2) and the
all-iterates report (Algorithm 3) with eps_est, eps_lo and the robust
summaries (Gaussian-DP eps, bootstrap interval, AUROC, TPR at FPR); and the
run's accuracy and setting. Written as JSON (machine-readable) and Markdown
(for people), atomically.
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from numpy.typing import ArrayLike

from one_shot_epe import accounting
from one_shot_epe import atomic_io
from one_shot_epe import privacy_report


def _finite_or_none(value: float | None) -> float | None:
  return None if value is None or math.isinf(value) else value


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Privacy estimates of one run under both threat models.

  analytical_epsilon is the canary's bound at canary_presentations = r
  (math.inf without noise); accounted_epsilon is the real clients' bound
  under the run's sampling, None when the sampling was not given.
  """
  noise_multiplier: float
  delta: float
  alpha: float
  dim: int
  analytical_epsilon: float  # math.inf without noise.
  final: privacy_report.PrivacyReport
  all_iterates: privacy_report.PrivacyReport | None
  accuracy: float | None = None
  setting: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  canary_presentations: int = 1
  analytical_mechanism: str = ''
  accounted_epsilon: float | None = None  # math.inf without noise.
  accounted_mechanism: str | None = None

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; an infinite analytical/accounted epsilon becomes None.

    Per threat model, the robust summaries are repeated at the top level
    with the suffix _final or _all (None without unseen canaries).
    """
    all_it = self.all_iterates
    result = {
        'noise_multiplier': self.noise_multiplier,
        'delta': self.delta,
        'alpha': self.alpha,
        'dim': self.dim,
        'canary_presentations': self.canary_presentations,
        'analytical_epsilon': _finite_or_none(self.analytical_epsilon),
        'analytical_epsilon_mechanism': self.analytical_mechanism,
        'accounted_epsilon': _finite_or_none(self.accounted_epsilon),
        'accounted_epsilon_mechanism': self.accounted_mechanism,
        'epsilon_est_final': self.final.epsilon_est,
        'epsilon_lo_final': self.final.epsilon_lo,
        'epsilon_est_all': None if all_it is None else all_it.epsilon_est,
        'epsilon_lo_all': None if all_it is None else all_it.epsilon_lo,
        'accuracy': self.accuracy,
        'final': self.final.to_dict(),
        'all_iterates': None if all_it is None else all_it.to_dict(),
        'setting': dict(self.setting),
    }
    for suffix, report in (('final', self.final), ('all', all_it)):
      fields = None if report is None else report.to_dict()
      for key in _ROBUST_KEYS:
        result[f'{key}_{suffix}'] = None if fields is None else fields[key]
    return result

  def to_json(self) -> str:
    """`to_dict` as indented JSON; a NaN or infinity raises ValueError."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True,
                      allow_nan=False)

  def to_markdown(self) -> str:
    """The Table 3/4 row, the bounds' mechanisms, robust summaries, fits."""
    all_it = self.all_iterates
    lines = [
        '| noise | analytical ε | ε_lo-all | ε_est-all | ε_lo-final | '
        'ε_est-final | accuracy |',
        '|---|---|---|---|---|---|---|',
        f'| {self.noise_multiplier:g} | {_num(self.analytical_epsilon)} | '
        f'{_num(all_it and all_it.epsilon_lo)} | '
        f'{_num(all_it and all_it.epsilon_est)} | '
        f'{_num(self.final.epsilon_lo)} | {_num(self.final.epsilon_est)} | '
        f'{_num(self.accuracy)} |',
        '',
        f'd = {self.dim}, δ = {self.delta:.3g}, ε_lo at {1 - self.alpha:.0%} '
        'confidence.',
        '',
        '| upper bound | ε | mechanism it assumes |',
        '|---|---|---|',
        f'| analytical ε (canary, r = {self.canary_presentations}) | '
        f'{_num(self.analytical_epsilon)} | {self.analytical_mechanism} |',
    ]
    if self.accounted_mechanism is not None:
      lines.append(f'| accounted ε (real client) | '
                   f'{_num(self.accounted_epsilon)} | '
                   f'{self.accounted_mechanism} |')
    lines += [
        '',
        '| threat model | ε_est | ε_est 95% bootstrap interval | ε_gdp | '
        'GDP μ | AUROC | TPR at FPR 1e-2 | TPR at FPR 1e-3 |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for name, report in (('all iterates', all_it), ('final model', self.final)):
      if report is not None:
        low, high = report.epsilon_est_interval
        lines.append(
            f'| {name} | {_num(report.epsilon_est)} | [{_num(low)}, '
            f'{_num(high)}] | {_num(report.epsilon_gdp)} | '
            f'{_num(report.gdp_mu)} | {_num(report.auroc)} | '
            f'{_num(report.tpr_at_fpr["0.01"])} | '
            f'{_num(report.tpr_at_fpr["0.001"])} |')
    lines += [
        '',
        '| cosine set | count | mean | std | null mean | null std | '
        'Anderson A² |',
        '|---|---|---|---|---|---|---|',
        f'| final model, seen | {self.final.num_seen} | '
        f'{self.final.seen_mean:.4g} | {self.final.seen_std:.4g} | 0 | '
        f'{self.final.null_std:.4g} | {_num(self.final.anderson_seen)} |',
    ]
    if all_it is not None:
      lines.append(
          f'| max over rounds, seen vs unseen | {all_it.num_seen} / '
          f'{all_it.num_unseen} | {all_it.seen_mean:.4g} | '
          f'{all_it.seen_std:.4g} | {all_it.null_mean:.4g} | '
          f'{all_it.null_std:.4g} | {_num(all_it.anderson_seen)} / '
          f'{_num(all_it.anderson_unseen)} |')
    if self.setting:
      lines += ['', '| setting | value |', '|---|---|']
      lines += [f'| {key} | {value} |' for key, value in self.setting.items()]
    return '\n'.join(lines) + '\n'

  def write(self, json_path: str, markdown_path: str) -> None:
    """Writes `to_json` and `to_markdown`, each atomically (`atomic_io`)."""
    atomic_io.write_text(json_path, self.to_json() + '\n')
    atomic_io.write_text(markdown_path, self.to_markdown())


# Robust summaries repeated at the top level of `RunReport.to_dict`.
_ROBUST_KEYS = ('epsilon_gdp', 'gdp_mu', 'epsilon_est_interval', 'auroc',
                'tpr_at_fpr')


def _num(value: float | None) -> str:
  """A table cell: 4 significant digits, n/a for None, ∞ for infinity."""
  if value is None:
    return 'n/a'
  return '∞' if math.isinf(value) else f'{value:.4g}'


def build_run_report(*, final_cosines: ArrayLike, dim: int, delta: float,
                     noise_multiplier: float, alpha: float = 0.05,
                     seen_maxima: ArrayLike | None = None,
                     unseen_maxima: ArrayLike | None = None,
                     accuracy: float | None = None,
                     setting: Mapping[str, Any] | None = None,
                     canary_presentations: int = 1,
                     participation: accounting.Participation | None = None
                     ) -> RunReport:
  """Computes both threat models' reports and both upper bounds.

  canary_presentations: r, how many times each seen canary was inserted
    (the run's canary repetitions); the analytical eps is at r.
  participation: the real clients' sampling; without it there is no
    accounted eps.
  """
  if (seen_maxima is None) != (unseen_maxima is None):
    raise ValueError('give both seen_maxima and unseen_maxima, or neither.')
  analytical = accounting.canary_epsilon(noise_multiplier, delta,
                                         canary_presentations)
  accounted = (None if participation is None else accounting.client_epsilon(
      noise_multiplier, delta, participation))
  final = privacy_report.final_model_report(final_cosines, dim, delta, alpha)
  all_iterates = None
  if seen_maxima is not None:
    all_iterates = privacy_report.all_iterates_report(seen_maxima,
                                                      unseen_maxima, delta,
                                                      alpha, dim=dim)
  return RunReport(
      noise_multiplier=float(noise_multiplier), delta=delta, alpha=alpha,
      dim=dim, analytical_epsilon=analytical.epsilon, final=final,
      all_iterates=all_iterates, accuracy=accuracy,
      setting=dict(setting or {}), canary_presentations=canary_presentations,
      analytical_mechanism=analytical.mechanism,
      accounted_epsilon=None if accounted is None else accounted.epsilon,
      accounted_mechanism=None if accounted is None else accounted.mechanism)
