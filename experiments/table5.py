"""Table 5: one run with K canaries versus R runs with K / R canaries each.

Section 5.3 of Andrew et al. (ICLR 2024) checks that putting many canaries in
one run does not bias eps_est-final: for each noise multiplier it repeats an
experiment E times (E = 50 in the paper), where one experiment is either one
run with K = 1000 canaries or R = 10 independent runs with 100 canaries each
whose final-model cosines are pooled, and it reports the 0.1, 0.3, 0.5, 0.7
and 0.9 quantiles of eps_est-final over the E experiments.

Every run here is an ordinary `experiments.train` run (no unseen canaries:
only the final-model estimate is needed) with its own --seed and
--canary_seed, so that runs are independent: run j of the grid (numbered over
all experiments and both arms of one noise level) uses seed base + j for both
(modulo 2^32, `canary_spec.MAX_SEED`).
The pooled estimate is `estimation.epsilon_from_final_cosines` of the
concatenated cosines, the estimator of every run's report.
"""

import dataclasses
import os
from collections.abc import Mapping, Sequence

import numpy as np

from experiments import train_config
from one_shot_epe.design import canary_spec
from one_shot_epe.stats import estimation

__all__ = ['Experiment', 'QUANTILES', 'SUBDIR', 'experiments', 'pooled_epsilon',
           'table']

QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
SUBDIR = 'table5'


@dataclasses.dataclass(frozen=True)
class Experiment:
  """One experiment of Table 5: its runs, whose final cosines are pooled."""
  noise_multiplier: float
  arm: str  # '1/K' (one run) or 'R/(K/R)' (R runs).
  index: int  # 0..E-1 within its noise level and arm.
  configs: tuple[train_config.TrainConfig, ...]


def experiments(base: train_config.TrainConfig,
                noise_multipliers: Sequence[float],
                num_experiments: int, num_runs: int,
                output_dir: str) -> list[Experiment]:
  """The E experiments of both arms at every noise level.

  Args:
    base: The run config; its --num_canaries is K.
    noise_multipliers: The noise levels (rows of the table).
    num_experiments: E >= 1, experiments per noise level and arm.
    num_runs: R >= 2, runs of the split arm; it must divide K and leave at
      least 2 canaries per run.
    output_dir: Runs go to output_dir/table5/noise<N>_<arm>_e<i>_r<j>/.

  Returns:
    Per noise level, E experiments of each arm, each with its runs' configs.

  Raises:
    train_config.ConfigError: naming the flag, for E, R or K out of range.
  """
  if isinstance(num_experiments, bool) or not isinstance(
      num_experiments, int) or num_experiments < 1:
    raise train_config.ConfigError('--table5_experiments must be an integer '
                                   f'>= 1; got {num_experiments!r}.')
  num_canaries = base.num_canaries
  if (isinstance(num_runs, bool) or not isinstance(num_runs, int) or
      num_runs < 2 or num_canaries % num_runs or
      num_canaries // num_runs < 2):
    raise train_config.ConfigError(
        f'--table5_runs must be an integer >= 2 dividing --num_canaries='
        f'{num_canaries} into parts of at least 2; got {num_runs!r}.')
  root = os.path.join(output_dir, SUBDIR)
  found = []
  for noise in noise_multipliers:
    run_index = 0
    for arm, runs, canaries_per_run in (
        (f'1/{num_canaries}', 1, num_canaries),
        (f'{num_runs}/{num_canaries // num_runs}', num_runs,
         num_canaries // num_runs)):
      for index in range(num_experiments):
        configs = []
        for run in range(runs):
          seed = (base.seed + run_index) % (canary_spec.MAX_SEED + 1)
          canary_seed = ((base.canary_seed + run_index) %
                         (canary_spec.MAX_SEED + 1))
          run_index += 1
          configs.append(dataclasses.replace(
              base, noise_multiplier=noise, num_canaries=canaries_per_run,
              num_unseen_canaries=0, canary_repeats=1, seed=seed,
              canary_seed=canary_seed, root_output_dir=root,
              run_name=(f'noise{noise:g}_{"single" if runs == 1 else "split"}'
                        f'_e{index}_r{run}')))
        found.append(Experiment(noise, arm, index, tuple(configs)))
  return found


def pooled_epsilon(final_cosines: Sequence[np.ndarray], dim: int,
                   delta: float) -> float:
  """eps_est-final of the runs' final-model cosines pooled (Algorithm 2).

  Args:
    final_cosines: Each run's seen canaries' final-model cosines.
    dim: The model's dimension d.
    delta: The runs' delta.

  Returns:
    The headline estimate of the pooled cosines.
  """
  return estimation.epsilon_from_final_cosines(
      np.concatenate([np.asarray(c, np.float64) for c in final_cosines]),
      dim, delta)


def table(estimates: Mapping[tuple[float, str], Sequence[float]]) -> str:
  """Markdown Table 5: quantiles of eps_est-final per noise level and arm.

  Args:
    estimates: (noise multiplier, arm) -> the experiments' eps_est-final.

  Returns:
    The Markdown of table5.md.
  """
  lines = ['| noise | runs/canaries | ' + ' | '.join(
      f'q{q:g}' for q in QUANTILES) + ' | experiments |',
           '|---|---|' + '---|' * len(QUANTILES) + '---|']
  for (noise, arm), values in estimates.items():
    quantiles = np.quantile(np.asarray(values, np.float64), QUANTILES)
    lines.append(f'| {noise:g} | {arm} | ' + ' | '.join(
        f'{q:.3g}' for q in quantiles) + f' | {len(values)} |')
  return '\n'.join(lines) + '\n'
