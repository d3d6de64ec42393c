"""Do the report's bounds hold, and do its estimates run away? Simulated truth.

Simulated Gaussian mechanisms with a known eps (sigma calibrated by Balle and
Wang) at eps in --epsilons, --runs runs per cell, d = --dim, k = --canaries
seen and as many unseen canaries, delta = --delta:

* final model (Algorithm 2): the seen canaries' cosines with one release
  rho = sum_j c_j + N(0, sigma^2 I_d), sampled exactly
  (`gaussian_scores.final_model_scores`); the unseen canaries' cosines with
  that release are independent of it, hence draws of the exact null
  (Theorem 3.1: (1 + tau)/2 ~ Beta((d - 1)/2, (d - 1)/2)).
* all iterates (Algorithm 3): --rounds rounds, each seen canary inserted
  once, in one round; the per-round cosine of a canary with a round's update,
  in the null's standard deviations, is N(0, 1) when it is absent and
  N(1/sigma, 1) in its round (the d -> infinity law of a noise-dominated
  update), so every canary is exactly a Gaussian mechanism at sigma; the
  statistic is each canary's maximum over rounds.

For every lower bound of the report at 1 - alpha (`coverage_cells.BOUNDS`:
those for any (eps, delta)-DP mechanism, then those that hold only for a
Gaussian one, marked) it prints the share of runs in which it exceeds the
true eps, with its binomial standard error, whether that share is within
alpha + 2 standard errors, and the mean bound and its ratio to the truth;
the paper's nominal epsilon_lo_paper is printed beside them. For every estimate (epsilon_est,
epsilon_est_fitted, epsilon_gdp) it prints the mean and 95th percentile of
estimate / eps. For all iterates the true eps is that of an adversary who
knows each canary's round; the maximum over rounds is a weaker attack, so
estimates below 1 are expected there and estimates above it overshoot.

With --mechanism=blt or banded (jax-privacy's strategy C for --rounds
rounds, one participation; needs .venv-jax), DP-FTRL's correlated noise:
the rounds' noisy updates are y = x + C^{-1} Z, Z with i.i.d. N(0, s^2)
entries, every seen canary inserted in round 0 (C's longest column, the
worst canary for these Toeplitz strategies). The full release is one
Gaussian mechanism at mu = ||C[:, 0]|| / s, and s is calibrated so that its
eps is the cell's; the truths of the threat models are:

* final model: the final model is the sum of the noisy updates, so the
  canary meets noise of std s ||C^{-T} 1||: a Gaussian mechanism at
  1 / (s ||C^{-T} 1||), simulated exactly as above; its eps is the truth.
* all iterates ('all'): each canary's max over rounds of its per-round
  cosine in null standard deviations, g_t = (e_0 + s C^{-1} w)_t /
  (s ||C^{-1}[t]||) with w ~ N(0, I_T): the noise correlated across rounds.
  The truth is the full release's eps (the max is a weaker attack).
* all iterates, decorrelated ('all_decorrelated'): the updates multiplied by
  the encoder C first, C y = C x + Z, independent noise; the statistic is the
  canary's matched filter sum_t C[t, 0] (C g)_t / (s ||C[:, 0]||), exactly
  N(mu, 1) when inserted, so its estimates should meet the truth.

With --mechanism=discrete_gaussian, TFF's distributed discrete Gaussian
(`benchmarks.discrete_gaussian`): canaries scaled by --dg_scale * sqrt(d)
and stochastically rounded to integers, summed, discrete Gaussian noise
N_Z(0, sigma^2) added, in one release (final model) and in --rounds releases
(all iterates, each seen canary in one round, the same cosine statistics as
the engine's). sigma is calibrated so that the rounded canary is about a
Gaussian mechanism of the cell's eps; the truth of both threat models is the
exact eps of the seen canary with the largest rounded norm, from the
discrete Gaussian's privacy loss distribution (dp_accounting).

With --mechanism=laplace, mixture, student_t or contaminated, out of the
Gaussian family: a canary's score is 1 + noise when inserted and noise when
not (one release), the noise Laplace, a half-half mixture of N(0, s^2) and
N(0, (3 s)^2), s times a Student t with 30 degrees of freedom, or N(0, s^2)
with 2% of its draws from N(0, (2 s)^2), scaled so that the mechanism is
exactly (eps, delta)-DP (`heavy_tailed.laplace_scale`,
`heavy_tailed.noise_scale`); the all-iterates report (empirical null)
scores them. The bounds that hold only for a Gaussian mechanism (the
GAUSSIAN family of `report_fields`) may fail there; the others must hold.
The last two are the scores a normality test on 1,000 of them often passes
(the table's last column).

  python -m benchmarks.coverage                   # 200 runs per cell, ~10 min
  python -m benchmarks.coverage --runs=20 --json=/tmp/coverage.json
  .venv-jax/bin/python -m benchmarks.coverage --mechanism=blt --runs=50
  python -m benchmarks.coverage --mechanism=discrete_gaussian --dim=20000 \
      --canaries=250 --runs=100
  python -m benchmarks.coverage --mechanism=laplace --epsilons=1,3,10 --runs=100
  python -m benchmarks.coverage --mechanism=student_t --epsilons=1,3,10
"""

import json
import time
import types
from collections.abc import Sequence

import numpy as np
from absl import app
from absl import flags

from benchmarks import coverage_cells
from benchmarks import discrete_gaussian
from benchmarks import gaussian_scores
from benchmarks import heavy_tailed
from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import estimation
from one_shot_epe.reporting import privacy_report


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'epsilons': flags.DEFINE_list(
          'epsilons', ['0.5', '1', '3', '10'], 'True epsilons of the simulated '
          'mechanisms.', flag_values=flag_values),
      'runs': flags.DEFINE_integer(
          'runs', 200, 'Simulated runs per cell.', lower_bound=1,
          flag_values=flag_values),
      'dim': flags.DEFINE_integer(
          'dim', 10 ** 5, 'Model dimension d.', lower_bound=3,
          flag_values=flag_values),
      'canaries': flags.DEFINE_integer(
          'canaries', 1000, 'Seen canaries k (and as many unseen).',
          lower_bound=8, flag_values=flag_values),
      'rounds': flags.DEFINE_integer(
          'rounds', 20, 'Rounds T of the all-iterates simulation.',
          lower_bound=1, flag_values=flag_values),
      'delta': flags.DEFINE_float(
          'delta', 1e-06, 'delta of every epsilon.', lower_bound=0.0,
          upper_bound=1.0, flag_values=flag_values),
      'alpha': flags.DEFINE_float(
          'alpha', 0.05, 'Bounds hold at 1 - alpha.', lower_bound=0.0,
          upper_bound=0.5, flag_values=flag_values),
      'seed': flags.DEFINE_integer(
          'seed', 0, 'Seed of the simulations.', lower_bound=0,
          flag_values=flag_values),
      'json': flags.DEFINE_string(
          'json', None, 'Also write the table as JSON here.',
          flag_values=flag_values),
      'mechanism': flags.DEFINE_enum(
          'mechanism', 'gaussian',
          ['gaussian', 'blt', 'banded', 'discrete_gaussian',
           *heavy_tailed.NOISES],
          'Independent noise, or correlated noise with a BLT or a 4-band '
          'banded strategy for --rounds rounds (needs jax-privacy), or the '
          'distributed discrete Gaussian (canaries rounded to integers, '
          "--dg_scale), or a canary's score with heavier-tailed noise than "
          'Gaussian: Laplace, a half-half mixture of two Gaussians of '
          'scales 1 and 3, a Student t with 30 degrees of freedom, or a '
          'Gaussian with 2% of its draws at twice its scale.',
          flag_values=flag_values),
      'dg_scale': flags.DEFINE_float(
          'dg_scale', 4.0, 'With --mechanism=discrete_gaussian: a unit canary '
          'is scaled by dg_scale * sqrt(d) before rounding, so its '
          'coordinates have std dg_scale integer units.', lower_bound=0.0,
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): one cell (eps 3) of 2 runs at d = 100, 8 + 8
# canaries, 2 rounds.
_TINY = dict(epsilons=['3'], runs=2, dim=100, canaries=8, rounds=2)


def simulate_heavy_tailed(mechanism: str, epsilons: Sequence[float],
                          runs: int, dim: int, canaries: int, delta: float,
                          alpha: float, seed: int) -> dict[str, dict[str, dict]]:
  """{mechanism: {eps: cell}}: the seen/unseen bounds on 1-D scores.

  The report is the all-iterates one (empirical null from the unseen
  scores); the mechanism is exactly (eps, delta)-DP (Laplace: b from
  `heavy_tailed.laplace_scale`, the truth from dp_accounting's privacy loss
  distribution; the others: `heavy_tailed.noise_scale`, the truth
  `heavy_tailed.noise_epsilon`), but not Gaussian, so the bounds of the
  GAUSSIAN family lose their premise. Every run's seen and unseen scores
  feed every bound of the report.

  Args:
    mechanism: One of `heavy_tailed.NOISES`.
    epsilons: The cells' true eps, each > 0.
    runs: Simulated runs per cell.
    dim: d.
    canaries: k seen and k unseen canaries.
    delta: delta of every eps.
    alpha: The bounds hold at 1 - alpha.
    seed: The simulation's seed.

  Returns:
    {mechanism: {f'{eps:g}': cell with a 'truth' entry (eps and scale)}}.
  """
  # Imported here: only these cells need it.
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {mechanism: {}}
  for epsilon in epsilons:
    if mechanism == 'laplace':
      scale = heavy_tailed.laplace_scale(epsilon, delta)
      truth = privacy_loss_distribution.from_laplace_mechanism(
          scale, sensitivity=1.0,
          value_discretization_interval=1e-5).get_epsilon_for_delta(delta)
    else:
      scale = heavy_tailed.noise_scale(mechanism, epsilon, delta)
      truth = heavy_tailed.noise_epsilon(mechanism, scale, delta)
    reports = []
    for _ in range(runs):
      seen, unseen = heavy_tailed.scores(rng, mechanism, canaries, scale, dim)
      reports.append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    table[mechanism][f'{epsilon:g}'] = dict(
        coverage_cells.cell(reports, truth, alpha),
        truth={'epsilon': truth, 'scale': scale})
  return table


def simulate_correlated(epsilons: Sequence[float], runs: int, dim: int,
                        canaries: int, strategy: np.ndarray, delta: float,
                        alpha: float, seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} under correlated noise with strategy C.

  Each cell's eps is the full release's; every threat model is scored
  against its own truth (module docstring), which the cell also holds.

  Args:
    epsilons: The cells' eps of the full release, each > 0.
    runs: Simulated runs per cell.
    dim: d.
    canaries: k seen (inserted in round 0) and k unseen canaries.
    strategy: C, lower triangular [T, T] (`gaussian_scores.strategy_matrix`).
    delta: delta of every eps.
    alpha: The bounds hold at 1 - alpha.
    seed: The simulation's seed.

  Returns:
    {'final', 'all', 'all_decorrelated'}: {f'{eps:g}': cell with a 'truth'
    entry}.
  """
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {
      'final': {}, 'all': {}, 'all_decorrelated': {}}
  column_norm = float(np.linalg.norm(strategy[:, 0]))
  final_factor = column_norm * np.linalg.norm(
      np.linalg.inv(strategy).sum(axis=0))
  for epsilon in epsilons:
    sigma = estimation.gaussian_sigma(epsilon, delta)
    scale = column_norm * sigma
    truths = {'final': estimation.gaussian_epsilon(sigma * final_factor,
                                                   delta),
              'all': epsilon, 'all_decorrelated': epsilon}
    reports: dict[str, list[privacy_report.PrivacyReport]] = {
        name: [] for name in table}
    for _ in range(runs):
      scores = gaussian_scores.correlated_scores(rng, dim, canaries, scale,
                                                 strategy)
      seen, unseen = scores['final']
      reports['final'].append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      for name in ('all', 'all_decorrelated'):
        seen, unseen = scores[name]
        reports[name].append(privacy_report.all_iterates_report(
            seen, unseen, delta, alpha, bootstrap_resamples=20))
    for name in table:
      table[name][f'{epsilon:g}'] = dict(
          coverage_cells.cell(reports[name], truths[name], alpha),
          truth={'epsilon': truths[name]})
  return table


def simulate_discrete_gaussian(
    epsilons: Sequence[float], runs: int, dim: int, canaries: int,
    rounds: int, scale: float, delta: float, alpha: float,
    seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} under the distributed discrete Gaussian.

  Each cell's sigma makes the rounded canary about a Gaussian mechanism of
  its eps (`discrete_gaussian.calibrated_sigma`); both threat models
  (Sections 3.1 and 3.2 of the paper, Algorithms 2 and 3) are scored
  against the exact eps of the cell's seen canary (over all its runs) with
  the largest rounded norm (`discrete_gaussian.discrete_gaussian_epsilon`), which the cell holds
  with sigma, that norm and the continuous Gaussian's eps at the same
  noise-to-norm ratio.

  Args:
    epsilons: the cells' nominal eps, each > 0.
    runs: simulated runs per cell.
    dim: d >= 3.
    canaries: k seen and k unseen canaries.
    rounds: T of the all-iterates runs.
    scale: gamma / sqrt(d) > 0, integer units per canary coordinate std.
    delta: delta of every eps.
    alpha: the bounds hold at 1 - alpha.
    seed: the simulation's seed.

  Returns:
    {'final', 'all'}: {f'{eps:g}': cell with a 'truth' entry}.

  Raises:
    ValueError: naming --dg_scale if scale is not positive.
  """
  if not scale > 0:
    raise ValueError(f'--dg_scale must be positive; got {scale}.')
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {'final': {}, 'all': {}}
  for epsilon in epsilons:
    sigma = discrete_gaussian.calibrated_sigma(
        estimation.gaussian_sigma(epsilon, delta), scale, dim)
    reports: dict[str, list[privacy_report.PrivacyReport]] = {
        'final': [], 'all': []}
    worst = None
    for _ in range(runs):
      run = discrete_gaussian.scores(rng, dim, canaries, scale, sigma, rounds)
      if worst is None or run['worst'] @ run['worst'] > worst @ worst:
        worst = run['worst']
      seen, unseen = run['final']
      reports['final'].append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      seen, unseen = run['all']
      reports['all'].append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    norm = float(np.linalg.norm(worst))
    truth = {
        'epsilon': discrete_gaussian.discrete_gaussian_epsilon(
            worst, sigma, delta),
        'gaussian_epsilon': estimation.gaussian_epsilon(sigma / norm, delta),
        'sigma': sigma, 'sensitivity_norm': norm,
    }
    for name in table:
      table[name][f'{epsilon:g}'] = dict(
          coverage_cells.cell(reports[name], truth['epsilon'], alpha),
          truth=truth)
  return table


def simulate(epsilons: Sequence[float], runs: int, dim: int, canaries: int,
             rounds: int, delta: float, alpha: float,
             seed: int) -> dict[str, dict[str, dict]]:
  """{threat model: {eps: cell}} over `runs` simulations per cell.

  Args:
    epsilons: The cells' true eps, each > 0.
    runs: Simulated runs per cell.
    dim: d.
    canaries: k seen and k unseen canaries.
    rounds: T of the all-iterates runs.
    delta: delta of every eps.
    alpha: The bounds hold at 1 - alpha.
    seed: The simulation's seed.

  Returns:
    {'final', 'all'}: {f'{eps:g}': cell}.
  """
  rng = np.random.default_rng(seed)
  table: dict[str, dict[str, dict]] = {'final': {}, 'all': {}}
  for epsilon in epsilons:
    sigma = estimation.gaussian_sigma(epsilon, delta)
    final, every = [], []
    for _ in range(runs):
      seen, unseen = gaussian_scores.final_model_scores(rng, dim, canaries,
                                                        sigma)
      final.append(privacy_report.final_model_report(
          seen, dim, delta, alpha, unseen=unseen, bootstrap_resamples=20))
      seen, unseen = gaussian_scores.all_iterates_scores(rng, dim, canaries,
                                                         sigma, rounds)
      every.append(privacy_report.all_iterates_report(
          seen, unseen, delta, alpha, bootstrap_resamples=20))
    table['final'][f'{epsilon:g}'] = coverage_cells.cell(final, epsilon,
                                                         alpha)
    table['all'][f'{epsilon:g}'] = coverage_cells.cell(every, epsilon, alpha)
  return table


def main(argv: Sequence[str]) -> None:
  """Simulates every cell, prints the table and its wall time.

  Args:
    argv: The command line left after the flags (the program's name).

  Raises:
    app.UsageError: exit status 2, for extra arguments, --epsilons that are
      not positive numbers or a --dg_scale that is not positive.
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  try:
    epsilons = [float(text) for text in _FLAGS.epsilons.value]
  except ValueError:
    raise app.UsageError(
        '--epsilons must list numbers; got '
        f'{_FLAGS.epsilons.value}.',
        exitcode=2) from None
  if not epsilons or min(epsilons) <= 0:
    raise app.UsageError(
        '--epsilons must list positive numbers; got '
        f'{_FLAGS.epsilons.value}.',
        exitcode=2)
  start = time.perf_counter()
  if _FLAGS.mechanism.value == 'gaussian':
    table = simulate(epsilons, _FLAGS.runs.value, _FLAGS.dim.value,
                     _FLAGS.canaries.value, _FLAGS.rounds.value,
                     _FLAGS.delta.value, _FLAGS.alpha.value, _FLAGS.seed.value)
  elif _FLAGS.mechanism.value in heavy_tailed.NOISES:
    table = simulate_heavy_tailed(_FLAGS.mechanism.value, epsilons,
                                  _FLAGS.runs.value, _FLAGS.dim.value,
                                  _FLAGS.canaries.value, _FLAGS.delta.value,
                                  _FLAGS.alpha.value, _FLAGS.seed.value)
  elif _FLAGS.mechanism.value == 'discrete_gaussian':
    if not _FLAGS.dg_scale.value > 0:
      raise app.UsageError(
          f'--dg_scale must be positive; got {_FLAGS.dg_scale.value}.',
          exitcode=2)
    table = simulate_discrete_gaussian(epsilons, _FLAGS.runs.value,
                                       _FLAGS.dim.value, _FLAGS.canaries.value,
                                       _FLAGS.rounds.value,
                                       _FLAGS.dg_scale.value,
                                       _FLAGS.delta.value, _FLAGS.alpha.value,
                                       _FLAGS.seed.value)
  else:
    table = simulate_correlated(
        epsilons, _FLAGS.runs.value, _FLAGS.dim.value, _FLAGS.canaries.value,
        gaussian_scores.strategy_matrix(_FLAGS.mechanism.value,
                                        _FLAGS.rounds.value),
        _FLAGS.delta.value, _FLAGS.alpha.value, _FLAGS.seed.value)
  print(
      f'd = {_FLAGS.dim.value}, k = {_FLAGS.canaries.value} seen + '
      f'{_FLAGS.canaries.value} unseen canaries, δ = {_FLAGS.delta.value:g}, '
      f'T = {_FLAGS.rounds.value} rounds (all iterates), seed '
      f'{_FLAGS.seed.value}.\n')
  print(coverage_cells.format_table(table, _FLAGS.runs.value,
                                    _FLAGS.alpha.value), end='')
  truths = {(threat, epsilon): row['truth'] for threat, rows in table.items()
            for epsilon, row in rows.items() if 'truth' in row}
  if truths:
    print('\nTrue ε of each cell:')
  for (threat, epsilon), truth in truths.items():
    print(f'  {threat}, ε = {epsilon}: ' + ', '.join(
        f'{key} {value:.6g}' for key, value in sorted(truth.items())))
  print(f'\nWall time: {time.perf_counter() - start:.0f} s.')
  if _FLAGS.json.value:
    with open(_FLAGS.json.value, 'w', encoding='utf-8') as handle:
      json.dump(table, handle, indent=2, sort_keys=True)


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
