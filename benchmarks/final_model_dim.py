"""Does the final-model Gaussian-pair bound hold at small d? Simulated truth.

The final-model report's `epsilon_lo_gauss_pair` treats the seen cosines as
Gaussian and the null as N(0, 1/d), the exact null's mean and variance. At
small d neither law is Gaussian. Here each of k seen canaries is released
on its own, rho = c + N(0, sigma^2 I_d) with sigma that of the Gaussian
mechanism at eps in --epsilons (`gaussian_scores.single_canary_scores`:
i.i.d. cosines, the bound's premise but for their shape), and the truth is
the exact eps of the seen cosine's law against the exact null
(`gaussian_scores.single_canary_epsilon`), below the mechanism's eps at
small d: the cosine forgets part of what the release shows.

For each d in --dims and eps it prints the cosines' eps, the bound at its
population value (the seen law's mean and std, by quadrature of its tails)
over that eps, and over --runs runs of --canaries canaries the share of
runs in which `gaussian_pair.epsilon_lo_known_null` (computed as the report
would without its minimum d, `gaussian_pair.MIN_FINAL_DIM`) exceeds the
cosines' eps and the mechanism's, and its mean over the cosines' eps.

  python -m benchmarks.final_model_dim                        # ~10 min
  python -m benchmarks.final_model_dim --dims=1000 --canaries=10000 --epsilons=1,10
"""

import math
import time
import types
from collections.abc import Sequence

import numpy as np
from absl import app
from absl import flags

from benchmarks import gaussian_scores
from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import estimation
from one_shot_epe.stats import gaussian_pair


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'dims': flags.DEFINE_list(
          'dims', ['100', '1000', '10000'], 'Model dimensions d.',
          flag_values=flag_values),
      'epsilons': flags.DEFINE_list(
          'epsilons', ['1', '3', '10'], "The mechanism's eps at --delta.",
          flag_values=flag_values),
      'canaries': flags.DEFINE_integer(
          'canaries', 1000, 'Seen canaries k per run.', lower_bound=2,
          flag_values=flag_values),
      'runs': flags.DEFINE_integer(
          'runs', 200, 'Simulated runs per cell.', lower_bound=1,
          flag_values=flag_values),
      'delta': flags.DEFINE_float(
          'delta', 1e-6, 'delta of every epsilon.', lower_bound=0.0,
          upper_bound=1.0, flag_values=flag_values),
      'alpha': flags.DEFINE_float(
          'alpha', 0.05, 'The bound holds at 1 - alpha.', lower_bound=0.0,
          upper_bound=0.5, flag_values=flag_values),
      'seed': flags.DEFINE_integer(
          'seed', 0, 'Seed of the simulations.', lower_bound=0,
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one cell of 2 runs of 20 canaries.
_TINY = dict(dims=['100'], epsilons=['3'], canaries=20, runs=2)


def population_bound(dim: int, sigma: float, delta: float) -> float:
  """The bound's value with the seen law's mean and std known exactly.

  eps of mu-GDP at mu = mean / max(1/sqrt(d), std), the seen cosine's mean
  and std from E g = integral of P(g > t) - P(g < -t) over t > 0 and
  E g^2 = integral of 2 t (P(g > t) + P(g < -t)) (trapezoid rule on 4,001
  points of [0, (kappa + 14)/sqrt(d)]).

  Args:
    dim: d.
    sigma: The release's noise std.
    delta: delta.

  Returns:
    The population value of `gaussian_pair.epsilon_lo_known_null`.
  """
  top = min((1.0 / sigma + 14.0) / math.sqrt(dim), 1.0 - 1e-12)
  t = np.linspace(0.0, top, 4001)
  above, _ = gaussian_scores.single_canary_tails(t, dim, sigma)
  _, below = gaussian_scores.single_canary_tails(-t, dim, sigma)
  mean = float(np.trapz(above - below, t))
  second = float(np.trapz(2.0 * t * (above + below), t))
  std = math.sqrt(second - mean**2)
  return estimation.epsilon_of_gdp(mean / max(1.0 / math.sqrt(dim), std),
                                   delta)


def cell(rng: np.random.Generator, dim: int, epsilon: float, canaries: int,
         runs: int, delta: float, alpha: float) -> dict[str, float]:
  """One d and eps: the truths, the population bound and the runs' bounds.

  Args:
    rng: The simulation's generator.
    dim: d.
    epsilon: The mechanism's eps at delta.
    canaries: k per run.
    runs: Runs.
    delta: delta.
    alpha: 1 - the bound's confidence.

  Returns:
    'truth' (the cosines' eps), 'population' (the population bound over
    it), 'above_truth' and 'above_mechanism' (shares of runs), 'mean_ratio'
    (mean bound over the cosines' eps).
  """
  sigma = estimation.gaussian_sigma(epsilon, delta)
  truth = gaussian_scores.single_canary_epsilon(dim, sigma, delta)
  bounds = np.array([gaussian_pair.epsilon_lo_known_null(
      gaussian_scores.single_canary_scores(rng, dim, canaries, sigma)[0],
      null_std=1.0 / math.sqrt(dim), delta=delta, alpha=alpha)
                     for _ in range(runs)])
  return {'truth': truth,
          'population': population_bound(dim, sigma, delta) / truth,
          'above_truth': float(np.mean(bounds > truth)),
          'above_mechanism': float(np.mean(bounds > epsilon)),
          'mean_ratio': float(np.mean(bounds)) / truth}


def _numbers(values: Sequence[str], flag: str, kind: type) -> list:
  try:
    numbers = [kind(value) for value in values]
  except ValueError:
    raise app.UsageError(f'--{flag} must list numbers; got {values}.',
                         exitcode=2) from None
  if not numbers or min(numbers) <= 0:
    raise app.UsageError(f'--{flag} must list positive numbers; got '
                         f'{values}.', exitcode=2)
  return numbers


def main(argv: Sequence[str]) -> None:
  """Simulates every cell and prints the table and its wall time.

  Args:
    argv: The command line left after the flags (the program's name).

  Raises:
    app.UsageError: exit status 2, for extra arguments or --dims and
      --epsilons that are not positive numbers (d at least 3).
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  dims = _numbers(_FLAGS.dims.value, 'dims', int)
  if min(dims) < 3:
    raise app.UsageError(f'--dims must be at least 3; got {dims}.',
                         exitcode=2)
  epsilons = _numbers(_FLAGS.epsilons.value, 'epsilons', float)
  start = time.perf_counter()
  rng = np.random.default_rng(_FLAGS.seed.value)
  runs, alpha = _FLAGS.runs.value, _FLAGS.alpha.value
  print(f'k = {_FLAGS.canaries.value} seen canaries, each in a release of '
        f'its own, δ = {_FLAGS.delta.value:g}, {runs} runs per cell, seed '
        f'{_FLAGS.seed.value}; the report gives the bound from d = '
        f'{gaussian_pair.MIN_FINAL_DIM:,}.\n')
  error = math.sqrt(alpha * (1 - alpha) / runs)
  print(f'| d | mechanism ε | cosines\' ε | population bound / cosines\' ε '
        f'| P(bound > cosines\' ε) | P(bound > mechanism ε) | mean bound / '
        f'cosines\' ε |\n|---|---|---|---|---|---|---|')
  for dim in dims:
    for epsilon in epsilons:
      row = cell(rng, dim, epsilon, _FLAGS.canaries.value, runs,
                 _FLAGS.delta.value, alpha)
      mark = '' if row['above_truth'] <= alpha + 2 * error else ' ✗'
      print(f'| {dim} | {epsilon:g} | {row["truth"]:.4f} | '
            f'{row["population"]:.4f} | {row["above_truth"]:.3f}{mark} | '
            f'{row["above_mechanism"]:.3f} | {row["mean_ratio"]:.3f} |',
            flush=True)
  print(f'\n✗: above the cosines\' ε in more than {alpha:g} + 2 standard '
        f'errors of the runs.\nWall time: {time.perf_counter() - start:.0f} s.')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
