"""Tests that the figures render to valid PNG files of the expected layout."""

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from one_shot_epe.reporting import plots


def _read_png(path):
  assert path.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  return matplotlib.image.imread(str(path))


def test_density_grid(tmp_path):
  rng = np.random.default_rng(0)
  dim = 10**4
  panels = {
      f'noise {noise}': {f'{r} reps': rng.normal(r * 0.01, 0.01, 200)
                         for r in (1, 2, 4, 8)}
      for noise in (0.0, 0.1, 0.2, 0.3)
  }
  path = tmp_path / 'densities.png'
  plots.plot_cosine_densities(panels, dim, str(path), title='Figure 1')
  image = _read_png(path)
  assert image.shape[1] > 2.5 * image.shape[0]  # Four panels side by side.


def test_epsilon_bars(tmp_path):
  path = tmp_path / 'bars.png'
  est = np.array([[4.6, 9.0], [1.97, 3.5], [0.57, 1.0]])
  plots.plot_epsilon_bars([0.0, 0.05, 0.23], [1, 2], est, est / 2, str(path))
  image = _read_png(path)
  # The red eps_lo ticks are drawn: some pixels are pure-ish red.
  red = (image[..., 0] > 0.9) & (image[..., 1] < 0.2) & (image[..., 2] < 0.2)
  assert red.sum() > 20


def test_epsilon_bars_draw_references_and_skip_infinite(tmp_path):
  path = tmp_path / 'bars.png'
  est = np.array([[4.6, 9.0], [1.97, 3.5]])
  reference = np.array([[np.inf, np.inf], [30.0, 40.0]])
  plots.plot_epsilon_bars([0.0, 0.05], [1, 2], est, est / 2, str(path),
                          references={'analytical ε': reference})
  image = _read_png(path)
  without = tmp_path / 'plain.png'
  plots.plot_epsilon_bars([0.0, 0.05], [1, 2], est, est / 2, str(without))
  plain = _read_png(without)
  # The markers' black outlines: more near-black pixels than without them.
  def dark(picture):
    return int(np.sum(picture[..., :3].max(axis=-1) < 0.15))
  assert dark(image) > dark(plain) + 20


def test_shared_x_gives_every_panel_the_same_range():
  rng = np.random.default_rng(2)
  panels = {'noise 0': {'1 rep.': rng.normal(0.05, 0.01, 100)},
            'noise 0.2': {'1 rep.': rng.normal(0.005, 0.001, 100)}}
  figure = plots.cosine_density_figure(panels, 10**5, shared_x=True)
  try:
    limits = {axis.get_xlim() for axis in figure.axes if axis.get_visible()}
    assert len(limits) == 1
  finally:
    plt.close(figure)
  figure = plots.cosine_density_figure(panels, 10**5)
  try:
    assert len({axis.get_xlim() for axis in figure.axes}) == 2
  finally:
    plt.close(figure)


def test_bad_shapes_and_empty_panels(tmp_path):
  with pytest.raises(ValueError, match='shape'):
    plots.plot_epsilon_bars([0.0], [1, 2], [[1.0]], [[0.5]],
                            str(tmp_path / 'x.png'))
  with pytest.raises(ValueError, match='shape'):
    plots.plot_epsilon_bars([0.0], [1], [[1.0]], [[0.5]],
                            str(tmp_path / 'x.png'),
                            references={'r': [[1.0, 2.0]]})
  with pytest.raises(ValueError, match='panels'):
    plots.plot_cosine_densities({}, 100, str(tmp_path / 'y.png'))


# Cosine ranges: the demo's (d ~ 1.2e6, canaries at ~0.019), a smaller d, the
# paper's noise-0 runs (cosines near 1) and a large d with tiny cosines.
@pytest.mark.parametrize('dim, centre, spread', [
    (1_206_590, 0.0185, 0.0008), (10_000, 0.06, 0.01), (1_000, 0.9, 0.05),
    (10**9, 1.2e-4, 2e-5)])
def test_density_x_tick_labels_do_not_overlap(dim, centre, spread):
  rng = np.random.default_rng(1)
  panels = {'final model': {'seen': rng.normal(centre, spread, 50)},
            'max over rounds': {'seen': rng.normal(centre, spread, 50),
                                'unseen': rng.normal(0, spread, 50)},
            'three': {'seen': rng.normal(centre / 2, spread, 50)}}
  figure = plots.cosine_density_figure(panels, dim, title='t')
  try:
    for axis in figure.axes:
      gaps = plots.x_tick_label_gaps(figure, axis)
      assert len(gaps) >= 2  # At least three labels.
      assert min(gaps) > 0, [t.get_text() for t in axis.get_xticklabels()]
  finally:
    plt.close(figure)


def test_tick_gap_measure_sees_matplotlib_default_overlap():
  # Control: matplotlib's default ticks overlap on a small cosine range in a
  # panel of this layout (two of 4.2 inches), so the test above can fail.
  figure, axes = plt.subplots(1, 2, figsize=(8.4, 3.2))
  try:
    for axis in axes:
      axis.plot([-0.001, 0.0015], [0, 1])
    assert min(plots.x_tick_label_gaps(figure, axes[0])) < 0
  finally:
    plt.close(figure)


def test_density_panels_show_every_curve_whole_with_labelled_axes():
  # The demo's case: at noise 0 the cosines sit far from the null, and a
  # range ending at the extreme cosines cut their density curve off.
  rng = np.random.default_rng(3)
  dim = 10**6
  panels = {'noise 0': {'1 rep.': rng.normal(0.02, 0.004, 50)},
            'noise 0.2': {'1 rep.': rng.normal(0.002, 0.001, 50)}}
  for shared_x in (False, True):
    figure = plots.cosine_density_figure(panels, dim, shared_x=shared_x)
    try:
      for axis in figure.axes:
        assert axis.get_xlabel() == 'cosine'
        assert axis.get_ylabel() == 'density'
        for line in axis.get_lines():
          heights = np.asarray(line.get_ydata())
          assert max(heights[0], heights[-1]) < 1e-3 * heights.max(), (
              axis.get_title(), line.get_label())
    finally:
      plt.close(figure)


def test_epsilon_bars_say_what_they_show(tmp_path, monkeypatch):
  drawn = []
  monkeypatch.setattr(plots, '_save', lambda figure, path: drawn.append(figure))
  est = np.array([[4.6], [1.97]])
  plots.plot_epsilon_bars([0.0, 0.05], [1], est, est / 2,
                          str(tmp_path / 'bars.png'))
  try:
    labels = [text.get_text()
              for text in drawn[0].axes[0].get_legend().get_texts()]
  finally:
    plt.close(drawn[0])
  assert sorted(labels) == ['ε_est, r = 1 canary repetition', 'ε_lo (95%)']
