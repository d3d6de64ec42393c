"""Tests of one_shot_epe.data.client_arrays: synthetic clients' sizes and layout.

Independent truths: the published statistics the laws are built from (the
mean and maximum of EMNIST-62's writers, the mean of StackOverflow's users,
the lognormal's median), checked on large samples with tolerances of several
standard errors, and the offsets recounted from the arrays.
"""

import math

import numpy as np
import pytest

from one_shot_epe.data import client_arrays


def test_equal_sizes_are_exact():
  sizes = client_arrays.client_sizes('emnist', 7, 30)
  assert sizes.tolist() == [30] * 7


def test_realistic_emnist_sizes_have_the_writers_mean_and_maximum():
  law = client_arrays.EMNIST_WRITER_SIZES
  sizes = client_arrays.client_sizes('emnist', 20_000, 198, 'realistic',
                                     seed=3)
  # Clipping at [10, 418] moves the mean by well under 1 example.
  assert sizes.mean() == pytest.approx(198, abs=2.0)
  assert sizes.max() <= round(law['high'] * 198 / law['mean']) + 1
  assert sizes.min() >= 1 and sizes.std() > 50  # Not equal sizes.


def test_realistic_stackoverflow_sizes_are_heavy_tailed():
  law = client_arrays.STACKOVERFLOW_USER_SIZES
  sizes = client_arrays.client_sizes('stackoverflow', 200_000, 397,
                                     'realistic', seed=4)
  sigma = math.sqrt(2 * math.log(law['mean'] / law['median']))
  # The lognormal's mean has a standard error of sd / sqrt(n).
  sd = law['mean'] * math.sqrt(math.exp(sigma**2) - 1)
  assert sizes.mean() == pytest.approx(397, abs=5 * sd / math.sqrt(2e5))
  assert np.median(sizes) == pytest.approx(law['median'] * 397 / law['mean'],
                                           rel=0.05)
  # Runs cap a client at 256 sentences: P(size >= 256) of the lognormal.
  scale = 397 / law['mean']
  z = (math.log(256 / scale) - math.log(law['median'])) / sigma
  assert np.mean(sizes >= 256) == pytest.approx(
      0.5 * math.erfc(z / math.sqrt(2)), abs=0.01)


@pytest.mark.parametrize('make', [client_arrays.synthetic_emnist,
                                  client_arrays.synthetic_stackoverflow])
def test_synthetic_clients_follow_their_sizes(make):
  arrays = make(9, 20, seed=1, sizes='realistic')
  kind = arrays.kind
  assert arrays.client_sizes().tolist() == client_arrays.client_sizes(
      kind, 9, 20, 'realistic', seed=1).tolist()
  assert all(len(a) == arrays.offsets[-1] for a in arrays.features.values())
  assert np.unique(arrays.client_sizes()).size > 1


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match='law'):
    client_arrays.client_sizes('emnist', 3, 5, 'zipf')
  with pytest.raises(ValueError, match='kind'):
    client_arrays.client_sizes('mnist', 3, 5)
  with pytest.raises(ValueError, match='examples_per_client'):
    client_arrays.client_sizes('emnist', 3, 0)
