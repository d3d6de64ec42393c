"""The paper's figures as PNG files (matplotlib, no display needed).

* `plot_cosine_densities`: Figures 1 and 3 -- kernel density estimates of canary
  cosine sets, one panel per noise multiplier and one curve per number of canary
  repetitions, against the null N(0, 1/d). Cosines are small (about 1/sqrt(d)),
  so the x axis writes a common power of ten once (an offset such as
  "1e-2") and takes as many ticks as fit without overlapping labels.
* `plot_epsilon_bars`: Figures 2 and 4 -- eps_est as bars (labelled with the
  canary repetitions r they are for) and the 95% lower bound eps_lo as red
  ticks, grouped by noise multiplier, one bar per repetition count,
  with the references a reader compares them against (analytical, accounted,
  last-iterate eps) as markers.
"""

import io
import math
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import ticker  # pylint: disable=g-import-not-at-top
import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from one_shot_epe import validation
from one_shot_epe.runtime import atomic_io

__all__ = ['cosine_density_figure', 'plot_cosine_densities',
           'plot_epsilon_bars', 'x_tick_label_gaps']


def _save(figure: plt.Figure, path: str) -> None:
  """Renders to memory, then writes the PNG atomically."""
  buffer = io.BytesIO()
  figure.savefig(buffer, format='png', dpi=110, bbox_inches='tight')
  plt.close(figure)
  atomic_io.write_bytes(path, buffer.getvalue())


# Most x ticks of a density panel, and the least gap between their labels.
_MAX_X_TICKS = 7
_MIN_TICK_LABEL_GAP_PX = 4.0


def x_tick_label_gaps(figure: plt.Figure, axis: plt.Axes) -> list[float]:
  """Pixel gaps between consecutive x tick labels of `axis` (negative: overlap).

  Measured on the renderer's bounding boxes of the drawn labels.

  Args:
    figure: the figure holding `axis`; it is drawn to place the labels.
    axis: the axes whose visible, non-empty x tick labels are measured.

  Returns:
    One gap per pair of neighbouring labels, left to right, in pixels.
  """
  figure.canvas.draw()
  renderer = figure.canvas.get_renderer()
  boxes = sorted((label.get_window_extent(renderer)
                  for label in axis.get_xticklabels()
                  if label.get_visible() and label.get_text()),
                 key=lambda box: box.x0)
  return [right.x0 - left.x1 for left, right in zip(boxes, boxes[1:])]


def _fit_x_ticks(figure: plt.Figure, axis: plt.Axes) -> None:
  """Scientific offset below 0.1; then the most ticks whose labels fit."""
  axis.ticklabel_format(axis='x', style='sci', scilimits=(-1, 3),
                        useMathText=True)
  for bins in range(_MAX_X_TICKS, 1, -1):
    axis.xaxis.set_major_locator(ticker.MaxNLocator(nbins=bins))
    if min(x_tick_label_gaps(figure, axis),
           default=_MIN_TICK_LABEL_GAP_PX) >= _MIN_TICK_LABEL_GAP_PX:
      return


def _kde_reach(sample: np.ndarray) -> float:
  """How far beyond its extreme points a set's density curve is visible.

  Four bandwidths of scipy's Gaussian KDE (Scott's rule): there the curve has
  fallen below e^-8 of an extreme point's kernel height, so the range does
  not cut it off.
  """
  if sample.size < 2 or np.std(sample) == 0:
    return 0.0
  kde = stats.gaussian_kde(sample)
  return 4.0 * float(np.sqrt(kde.covariance[0, 0]))


def _x_range(curves: Mapping[str, ArrayLike],
             null_std: float) -> tuple[float, float]:
  """The panel's x range: every density curve whole, and the null's +-4 sd."""
  values = [np.asarray(v, dtype=np.float64) for v in curves.values()]
  lo = min([-4 * null_std] + [float(v.min()) - _kde_reach(v)
                              for v in values if v.size])
  hi = max([4 * null_std] + [float(v.max()) + _kde_reach(v)
                             for v in values if v.size])
  pad = 0.02 * (hi - lo)
  return lo - pad, hi + pad


@validation.arguments(dim=validation.Int(3))
def cosine_density_figure(panels: Mapping[str, Mapping[str, ArrayLike]],
                          dim: int, title: str = '',
                          shared_x: bool = False) -> plt.Figure:
  """The figure of `plot_cosine_densities` (the caller closes it).

  Args:
    panels: panel title -> (curve label -> its cosines); at most 4 panels a
      row. A curve with fewer than 2 values or no spread is not drawn.
    dim: the model dimension d (>= 3); the null's standard deviation is
      1 / sqrt(d).
    title: the figure's title; '' for none.
    shared_x: whether every panel takes the union of the panels' x ranges.

  Returns:
    The matplotlib figure, not yet saved nor closed.

  Raises:
    ValueError: `panels` is empty or `dim` < 3.
  """
  if not panels:
    raise ValueError('panels must name at least one panel.')
  columns = min(len(panels), 4)
  rows = math.ceil(len(panels) / columns)
  figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows),
                              squeeze=False)
  figure.subplots_adjust(wspace=0.35, hspace=0.45)  # Room for the y labels.
  null_std = 1.0 / math.sqrt(dim)
  ranges = [_x_range(curves, null_std) for curves in panels.values()]
  if shared_x:
    common = (min(lo for lo, _ in ranges), max(hi for _, hi in ranges))
    ranges = [common] * len(ranges)
  for axis, (panel_title, curves), (lo, hi) in zip(axes.flat, panels.items(),
                                                   ranges):
    values = [np.asarray(v, dtype=np.float64) for v in curves.values()]
    grid = np.linspace(lo, hi, 400)
    axis.plot(grid, stats.norm.pdf(grid, scale=null_std), 'k--',
              label='null N(0, 1/d)')
    for label, sample in zip(curves, values):
      if sample.size >= 2 and np.std(sample) > 0:
        axis.plot(grid, stats.gaussian_kde(sample)(grid), label=label)
    axis.set_title(panel_title)
    axis.set_xlabel('cosine')
    axis.set_ylabel('density')
    axis.legend(fontsize='small')
  for axis in list(axes.flat)[len(panels):]:
    axis.set_visible(False)
  if title:
    figure.suptitle(title, y=1.03)
  for axis in list(axes.flat)[:len(panels)]:
    _fit_x_ticks(figure, axis)
  return figure


def plot_cosine_densities(panels: Mapping[str, Mapping[str, ArrayLike]],
                          dim: int, path: str, title: str = '',
                          shared_x: bool = False) -> None:
  """One panel per key of `panels`; each maps a curve label to its cosines.

  Each panel also draws the null density N(0, 1/d) (the exact null of
  Theorem 3.1 is indistinguishable at the paper's d). The x range covers
  every density curve whole (each set's extremes and four KDE bandwidths
  beyond) and the null's +-4 standard deviations; with `shared_x` every panel
  takes the union of the ranges, so panels of different noise levels show
  how the separation shrinks. Writes a PNG to `path`.

  Args:
    panels: panel title -> (curve label -> its cosines), as
      `cosine_density_figure` takes them.
    dim: the model dimension d (>= 3).
    path: the PNG file, written atomically.
    title: the figure's title; '' for none.
    shared_x: whether every panel takes the union of the panels' x ranges.

  Raises:
    ValueError: `panels` is empty or `dim` < 3.
    OSError: the PNG cannot be written.
  """
  _save(cosine_density_figure(panels, dim, title, shared_x), path)


_REFERENCE_MARKERS = ('D', 'o', 's')


def plot_epsilon_bars(noise_multipliers: Sequence[float],
                      repetitions: Sequence[int],
                      epsilon_est: ArrayLike, epsilon_lo: ArrayLike, path: str,
                      title: str = '',
                      references: Mapping[str, ArrayLike] | None = None
                      ) -> None:
  """Grouped bars: eps_est[i][j] for noise i and repetitions j, eps_lo as ticks.

  `references` maps a label (e.g. 'analytical ε') to an array of the same
  shape, drawn as black markers over each bar; infinite or NaN entries (no
  noise) are left out. The y axis is logarithmic when the values drawn span
  more than a factor of 20, as they do between noise 0 and the largest
  noise, so that the small estimates stay readable beside the references.

  Args:
    noise_multipliers: the noise multipliers z, one bar group each.
    repetitions: the canary repetitions r, one bar per group each.
    epsilon_est: the estimates eps_est, shape (noise, repetitions).
    epsilon_lo: the lower bounds eps_lo (drawn as red ticks), same shape.
    path: the PNG file, written atomically.
    title: the axes' title; '' for none.
    references: label -> reference epsilons of the same shape (at most 3,
      e.g. the analytical epsilon), or None for none.

  Raises:
    ValueError: an array's shape is not (noise, repetitions) or more than 3
      references are given.
    OSError: the PNG cannot be written.
  """
  est = np.asarray(epsilon_est, dtype=np.float64)
  low = np.asarray(epsilon_lo, dtype=np.float64)
  shape = (len(noise_multipliers), len(repetitions))
  references = {label: np.asarray(values, dtype=np.float64)
                for label, values in (references or {}).items()}
  if est.shape != shape or low.shape != shape or any(
      values.shape != shape for values in references.values()):
    raise ValueError(f'epsilon_est, epsilon_lo and references must have shape '
                     f'{shape} (noise multipliers x repetitions).')
  if len(references) > len(_REFERENCE_MARKERS):
    raise ValueError(f'at most {len(_REFERENCE_MARKERS)} references; got '
                     f'{len(references)}.')
  figure, axis = plt.subplots(figsize=(1.6 + 1.5 * shape[0], 3.6))
  width = 0.8 / shape[1]
  centres = np.arange(shape[0])
  for j, repeats in enumerate(repetitions):
    x = centres - 0.4 + width * (j + 0.5)
    axis.bar(x, est[:, j], width=width * 0.92,
             label=f'ε_est, r = {repeats} canary repetition'
             f'{"s" if repeats != 1 else ""}')
    axis.plot(x, low[:, j], linestyle='none', marker='_', markersize=14,
              markeredgewidth=2.5, color='red',
              label='ε_lo (95%)' if j == 0 else None)
    for marker, (label, values) in zip(_REFERENCE_MARKERS, references.items()):
      axis.plot(x, np.where(np.isfinite(values[:, j]), values[:, j], np.nan),
                linestyle='none', marker=marker, markersize=6,
                markerfacecolor='none', color='black',
                label=label if j == 0 else None)
  drawn = np.concatenate([est.ravel()] + [
      values[np.isfinite(values)] for values in references.values()])
  positive = drawn[drawn > 0]
  if positive.size and positive.max() / max(positive.min(), 1e-12) > 20:
    axis.set_yscale('log')
  axis.set_xticks(centres, [f'{noise:g}' for noise in noise_multipliers])
  axis.set_xlabel('noise multiplier')
  axis.set_ylabel('ε')
  axis.legend(fontsize='small', loc='upper left', bbox_to_anchor=(1.0, 1.0))
  if title:
    axis.set_title(title)
  _save(figure, path)
