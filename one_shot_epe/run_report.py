"""The privacy report that ends every training run (Sections 4 and 5).

Bundles, for one DP-FedAvg run with canaries, the analytical epsilon (the
unamplified Gaussian mechanism applied once at the run's noise multiplier, as in
the paper's Tables 3 and 4, footnote 5), the final-model report (Algorithm 2)
and the all-iterates report (Algorithm 3), with the run's accuracy and setting.
Written as JSON (machine-readable) and Markdown (for people), atomically.
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from numpy.typing import ArrayLike

from one_shot_epe import atomic_io
from one_shot_epe import estimation


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Privacy estimates of one run under both threat models."""
  noise_multiplier: float
  delta: float
  alpha: float
  dim: int
  analytical_epsilon: float  # math.inf without noise.
  final: estimation.PrivacyReport
  all_iterates: estimation.PrivacyReport | None
  accuracy: float | None = None
  setting: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; an infinite analytical epsilon becomes None."""
    return {
        'noise_multiplier': self.noise_multiplier,
        'delta': self.delta,
        'alpha': self.alpha,
        'dim': self.dim,
        'analytical_epsilon': (None if math.isinf(self.analytical_epsilon) else
                               self.analytical_epsilon),
        'epsilon_est_final': self.final.epsilon_est,
        'epsilon_lo_final': self.final.epsilon_lo,
        'epsilon_est_all': (None if self.all_iterates is None else
                            self.all_iterates.epsilon_est),
        'epsilon_lo_all': (None if self.all_iterates is None else
                           self.all_iterates.epsilon_lo),
        'accuracy': self.accuracy,
        'final': self.final.to_dict(),
        'all_iterates': (None if self.all_iterates is None else
                         self.all_iterates.to_dict()),
        'setting': dict(self.setting),
    }

  def to_json(self) -> str:
    """`to_dict` as indented JSON; a NaN or infinity raises ValueError."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True,
                      allow_nan=False)

  def to_markdown(self) -> str:
    """The Table 3/4 row of this run plus the fits behind it."""

    def num(value: float | None) -> str:
      if value is None:
        return 'n/a'
      return '∞' if math.isinf(value) else f'{value:.4g}'

    all_it = self.all_iterates
    lines = [
        '| noise | analytical ε | ε_lo-all | ε_est-all | ε_lo-final | '
        'ε_est-final | accuracy |',
        '|---|---|---|---|---|---|---|',
        f'| {self.noise_multiplier:g} | {num(self.analytical_epsilon)} | '
        f'{num(all_it and all_it.epsilon_lo)} | '
        f'{num(all_it and all_it.epsilon_est)} | {num(self.final.epsilon_lo)} '
        f'| {num(self.final.epsilon_est)} | {num(self.accuracy)} |',
        '',
        f'd = {self.dim}, δ = {self.delta:.3g}, ε_lo at {1 - self.alpha:.0%} '
        'confidence.',
        '',
        '| cosine set | count | mean | std | null mean | null std | '
        'Anderson A² |',
        '|---|---|---|---|---|---|---|',
        f'| final model, seen | {self.final.num_seen} | '
        f'{self.final.seen_mean:.4g} | {self.final.seen_std:.4g} | 0 | '
        f'{self.final.null_std:.4g} | {num(self.final.anderson_seen)} |',
    ]
    if all_it is not None:
      lines.append(
          f'| max over rounds, seen vs unseen | {all_it.num_seen} / '
          f'{all_it.num_unseen} | {all_it.seen_mean:.4g} | '
          f'{all_it.seen_std:.4g} | {all_it.null_mean:.4g} | '
          f'{all_it.null_std:.4g} | {num(all_it.anderson_seen)} / '
          f'{num(all_it.anderson_unseen)} |')
    if self.setting:
      lines += ['', '| setting | value |', '|---|---|']
      lines += [f'| {key} | {value} |' for key, value in self.setting.items()]
    return '\n'.join(lines) + '\n'

  def write(self, json_path: str, markdown_path: str) -> None:
    """Writes `to_json` and `to_markdown`, each atomically (`atomic_io`)."""
    atomic_io.write_text(json_path, self.to_json() + '\n')
    atomic_io.write_text(markdown_path, self.to_markdown())


def analytical_epsilon(noise_multiplier: float, delta: float) -> float:
  """eps of one unamplified Gaussian mechanism at this noise multiplier.

  A canary's update has norm equal to the clip S and the noise std is
  noise_multiplier * S, so the sensitivity-1 mechanism has sigma equal to the
  noise multiplier; with no noise the answer is infinite.
  """
  if not math.isfinite(noise_multiplier) or noise_multiplier < 0:
    raise ValueError('noise_multiplier must be a finite number >= 0; got '
                     f'{noise_multiplier!r}.')
  if noise_multiplier == 0:
    return math.inf
  return estimation.gaussian_epsilon(noise_multiplier, delta)


def build_run_report(*, final_cosines: ArrayLike, dim: int, delta: float,
                     noise_multiplier: float, alpha: float = 0.05,
                     seen_maxima: ArrayLike | None = None,
                     unseen_maxima: ArrayLike | None = None,
                     accuracy: float | None = None,
                     setting: Mapping[str, Any] | None = None) -> RunReport:
  """Computes both threat models' reports from a run's cosines."""
  if (seen_maxima is None) != (unseen_maxima is None):
    raise ValueError('give both seen_maxima and unseen_maxima, or neither.')
  final = estimation.final_model_report(final_cosines, dim, delta, alpha)
  all_iterates = None
  if seen_maxima is not None:
    all_iterates = estimation.all_iterates_report(seen_maxima, unseen_maxima,
                                                  delta, alpha, dim=dim)
  return RunReport(noise_multiplier=float(noise_multiplier), delta=delta,
                   alpha=alpha, dim=dim,
                   analytical_epsilon=analytical_epsilon(noise_multiplier,
                                                         delta),
                   final=final, all_iterates=all_iterates, accuracy=accuracy,
                   setting=dict(setting or {}))
