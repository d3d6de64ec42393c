"""Tests of one_shot_epe.data.client_arrays: synthetic clients and splits.

Independent truths: the published statistics the laws are built from (the
mean and maximum of EMNIST-62's writers, the mean of StackOverflow's users,
the lognormal's median), checked on large samples with tolerances of several
standard errors, and the offsets recounted from the arrays; for the splits,
each image's best-fitting class template by brute force and the word chain
recounted from the token ids.
"""

import math

import numpy as np
import pytest

from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data


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


def _best_template(images: np.ndarray, templates: np.ndarray) -> np.ndarray:
  """Per image, the label whose template (any 1-pixel shift) fits its ink."""
  shifted = np.stack([np.roll(templates, (dr, dc), axis=(1, 2))
                      for dr in (-1, 0, 1) for dc in (-1, 0, 1)])
  scores = np.einsum('sklm,nlm->nsk', shifted, 1.0 - images)
  scores /= np.sqrt(np.einsum('sklm,sklm->sk', shifted, shifted))
  return np.argmax(scores.max(axis=1), axis=1)


def test_every_emnist_split_draws_other_images_of_the_seeds_templates():
  # Brute force over the 62 classes and 9 shifts: the test split's images
  # are the training split's classes (the seed's templates), not those of
  # another seed, and are other images than the training split's.
  request = task_data.DataRequest(
      task='emnist_character', data_dir=None, synthetic=True, num_clients=8,
      examples_per_client=40, client_sizes='equal', seed=5, vocab_size=0)
  splits = task_data.emnist(request)
  templates = client_arrays.emnist_templates(5)
  other = client_arrays.emnist_templates(6)
  for split in (splits.train, splits.test):
    images, labels = split.features['pixels'], split.features['label']
    assert np.mean(_best_template(images, templates) == labels) > 0.9
    assert np.mean(_best_template(images, other) == labels) < 0.2
  assert splits.test.client_ids.tolist() == splits.train.client_ids.tolist()
  assert splits.test.client_sizes().tolist() == [5] * 8
  first_test = splits.test.features['pixels'][0]
  assert not any(np.array_equal(first_test, image)
                 for image in splits.train.features['pixels'])


def test_every_stackoverflow_split_follows_one_vocabulary_law():
  vocab_size = 30
  tokens = client_arrays.special_tokens(vocab_size)
  for split in client_arrays.SPLITS:
    arrays = client_arrays.synthetic_stackoverflow(
        4, 25, vocab_size=vocab_size, seed=2, split=split)
    for row in arrays.features['tokens']:
      ids = row[1:][(row[1:] >= 1) & (row[1:] <= vocab_size)]
      assert row[0] == tokens.bos and 4 <= ids.size <= 20
      assert set(np.diff(ids - 1) % vocab_size) <= {1, 2, 3}
  train, test = (client_arrays.synthetic_stackoverflow(
      4, 25, vocab_size=vocab_size, seed=2, split=split)
                 for split in ('train', 'test'))
  assert not np.array_equal(train.features['tokens'],
                            test.features['tokens'])


def test_splits_are_named():
  with pytest.raises(ValueError, match='split'):
    client_arrays.synthetic_emnist(2, 3, split='validation')
