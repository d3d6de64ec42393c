"""The grid's figures, from its runs' typed reports (Section 5, Figures 1-4).

`cosine_densities` (Figures 1 and 3: final-model cosine densities per noise
multiplier against the null) and `epsilon_bars` (Figures 2 and 4: eps_est
bars and eps_lo ticks per threat model beside the references), drawn by
`one_shot_epe.reporting.plots`; framework-free.
"""

import math
from collections.abc import Callable, Sequence

import numpy as np

from experiments import grid
from one_shot_epe.reporting import plots
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import run_report

__all__ = ['cosine_densities', 'epsilon_bars', 'has_all_iterates']

_Value = Callable[[run_report.RunReport], float | None]


def _epsilon_grid(runs: Sequence[grid.GridRun], noises: Sequence[float],
                  repetitions: Sequence[int], value: _Value) -> np.ndarray:
  """value(report) of each (noise, repetitions) run; NaN where it is None or
  infinite (not drawn)."""
  by_point = {(run.noise_multiplier, run.canary_repeats): run for run in runs}
  values = np.full((len(noises), len(repetitions)), np.nan)
  for i, noise in enumerate(noises):
    for j, repeats in enumerate(repetitions):
      number = value(by_point[(noise, repeats)].report)
      if number is not None and not math.isinf(number):
        values[i, j] = number
  return values


def cosine_densities(runs: Sequence[grid.GridRun], noises: Sequence[float],
                     path: str, title: str) -> None:
  """Figures 1 and 3: a panel per noise, a curve per repetition count.

  Args:
    runs: The grid's runs.
    noises: The noise multipliers, one panel each, in this order.
    path: Where to write the PNG.
    title: The figure's title (the config's name).
  """
  panels = {}
  for noise in noises:
    panels[f'noise {noise:g}'] = {
        f'{run.canary_repeats} rep.': run.final_cosines
        for run in runs if run.noise_multiplier == noise}
  plots.plot_cosine_densities(panels, runs[0].report.dim, path,
                              title=f'{title}: final-model cosines',
                              shared_x=True)


def has_all_iterates(runs: Sequence[grid.GridRun]) -> bool:
  """Whether every run has the all-iterates estimate (unseen canaries).

  Args:
    runs: The grid's runs.

  Returns:
    True when every run's report has an all-iterates threat model.
  """
  return all(run.report.all_iterates is not None for run in runs)


def epsilon_bars(runs: Sequence[grid.GridRun], noises: Sequence[float],
                 repetitions: Sequence[int], model: str, path: str,
                 title: str) -> None:
  """Figures 2 and 4 for threat model 'final' or 'all' (`has_all_iterates`).

  Beside the analytical eps: the last-iterate heuristic (final model) or
  the accounted eps of a real client (all iterates).

  Args:
    runs: The grid's runs.
    noises: The noise multipliers, one group of bars each.
    repetitions: The canary repetitions, one bar per group each.
    model: 'final' or 'all'.
    path: Where to write the PNG.
    title: The figure's title (the config's name).

  Raises:
    ValueError: `model` is neither 'final' nor 'all'.
  """

  if model not in ('final', 'all'):
    raise ValueError(f"model must be 'final' or 'all'; got {model!r}.")

  def values(value: _Value) -> np.ndarray:
    return _epsilon_grid(runs, noises, repetitions, value)

  def threat(report: run_report.RunReport) -> privacy_report.PrivacyReport:
    return report.final if model == 'final' else report.all_iterates

  analytical = values(lambda report: report.analytical_epsilon)
  if model == 'final':
    name, references = 'final model', {
        'analytical ε (canary)': analytical,
        'last-iterate heuristic ε': values(
            lambda report: report.last_iterate_epsilon)}
  else:
    name, references = 'all iterates', {
        'analytical ε (canary)': analytical,
        'accounted ε (client)': values(
            lambda report: report.accounted_epsilon)}
  plots.plot_epsilon_bars(
      noises, repetitions,
      values(lambda report: threat(report).epsilon_est),
      values(lambda report: threat(report).epsilon_lo), path,
      title=f'{title}: {name}', references=references)
