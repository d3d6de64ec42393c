"""Shared test data for the CANIFE baseline tests (imported, not collected)."""

import numpy as np

from experiments.baselines import per_example


def clusters(seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
  """Three Gaussian clusters in 36 dimensions, shaped as 6 x 6 images.

  The cluster centres are fixed (seed 123) so every call draws from the same
  3-class problem; `seed` only picks the examples.
  """
  rng = np.random.default_rng(seed)
  centres = np.random.default_rng(123).standard_normal((3, 36))
  labels = rng.integers(0, 3, size)
  inputs = centres[labels] + rng.standard_normal((size, 36))
  return (inputs.reshape(size, 6, 6).astype(np.float32),
          per_example.one_hot(labels, 3))
