"""Tests that the figures render to valid PNG files of the expected layout."""

import matplotlib.image
import numpy as np
import pytest

from one_shot_epe import plots


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


def test_bad_shapes_and_empty_panels(tmp_path):
  with pytest.raises(ValueError, match='shape'):
    plots.plot_epsilon_bars([0.0], [1, 2], [[1.0]], [[0.5]],
                            str(tmp_path / 'x.png'))
  with pytest.raises(ValueError, match='panels'):
    plots.plot_cosine_densities({}, 100, str(tmp_path / 'y.png'))
