"""Tests of one_shot_epe.data.fashion_mnist (local files, synthetic data).

Truth: IDX and npz files written here byte by byte from known arrays.
"""

import gzip
import struct

import numpy as np
import pytest

from one_shot_epe.data import fashion_mnist


def _idx_bytes(array: np.ndarray) -> bytes:
  header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(
      f'>{array.ndim}I', *array.shape)
  return header + array.astype(np.uint8).tobytes()


def _arrays(seed: int):
  rng = np.random.default_rng(seed)
  return {
      'train_images': rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
      'train_labels': rng.integers(0, 10, 5, dtype=np.uint8),
      'test_images': rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
      'test_labels': rng.integers(0, 10, 3, dtype=np.uint8),
  }


@pytest.mark.parametrize('compressed', [True, False])
def test_loads_idx_files(tmp_path, compressed):
  arrays = _arrays(0)
  for key, name in fashion_mnist.IDX_NAMES.items():
    data = _idx_bytes(arrays[key])
    if compressed:
      with gzip.open(tmp_path / (name + '.gz'), 'wb') as stream:
        stream.write(data)
    else:
      (tmp_path / name).write_bytes(data)
  assert fashion_mnist.available(str(tmp_path))
  dataset = fashion_mnist.load(str(tmp_path))
  for key, value in arrays.items():
    np.testing.assert_array_equal(getattr(dataset, key), value)


def test_loads_npz(tmp_path):
  arrays = _arrays(1)
  np.savez(tmp_path / fashion_mnist.NPZ_NAME, x_train=arrays['train_images'],
           y_train=arrays['train_labels'], x_test=arrays['test_images'],
           y_test=arrays['test_labels'])
  dataset = fashion_mnist.load(str(tmp_path))
  np.testing.assert_array_equal(dataset.test_images, arrays['test_images'])
  np.testing.assert_array_equal(dataset.train_labels, arrays['train_labels'])


def test_missing_or_malformed_files_are_rejected(tmp_path):
  assert not fashion_mnist.available(str(tmp_path))
  assert not fashion_mnist.available(str(tmp_path / 'absent'))
  with pytest.raises(ValueError, match='neither'):
    fashion_mnist.load(str(tmp_path))
  bad = tmp_path / 'bad'
  bad.write_bytes(b'\x01\x02\x08\x01\x00\x00\x00\x01\x00')
  with pytest.raises(ValueError, match='magic'):
    fashion_mnist.read_idx(str(bad))
  short = tmp_path / 'short'
  short.write_bytes(_idx_bytes(np.zeros((2, 3), np.uint8))[:-1])
  with pytest.raises(ValueError, match='data bytes'):
    fashion_mnist.read_idx(str(short))
  arrays = _arrays(2)
  arrays['test_labels'] = arrays['test_labels'][:2]
  for key, name in fashion_mnist.IDX_NAMES.items():
    (tmp_path / name).write_bytes(_idx_bytes(arrays[key]))
  with pytest.raises(ValueError, match='labels'):
    fashion_mnist.load(str(tmp_path))


def test_synthetic_data_shape_determinism_and_learnability():
  first = fashion_mnist.synthetic(0, 2000, 500)
  again = fashion_mnist.synthetic(0, 2000, 500)
  np.testing.assert_array_equal(first.train_images, again.train_images)
  assert first.train_images.shape == (2000, 28, 28)
  assert first.train_images.dtype == np.uint8
  assert set(np.unique(first.test_labels)) == set(range(10))
  # A nearest-class-mean classifier (fit on train, scored on test) beats
  # chance (0.1) by far, and is not perfect: the classes overlap.
  x = first.train_images.reshape(2000, -1).astype(np.float64)
  means = np.stack([x[first.train_labels == c].mean(0) for c in range(10)])
  test = first.test_images.reshape(500, -1).astype(np.float64)
  predicted = np.argmin(((test[:, None, :] - means[None])**2).sum(-1), axis=1)
  accuracy = np.mean(predicted == first.test_labels)
  assert 0.5 < accuracy < 1.0


def test_standardise():
  images = np.array([[[0, 255]]], np.uint8)
  np.testing.assert_allclose(
      fashion_mnist.standardise(images),
      [[[-0.2860 / 0.3530, (1 - 0.2860) / 0.3530]]], rtol=1e-6)


@pytest.mark.skipif(
    not fashion_mnist.available(fashion_mnist.DEFAULT_DIRECTORY),
    reason='Fashion-MNIST is not installed locally.')
def test_real_fashion_mnist_when_installed():
  dataset = fashion_mnist.load(fashion_mnist.DEFAULT_DIRECTORY)
  assert dataset.train_images.shape == (60000, 28, 28)
  assert dataset.test_images.shape == (10000, 28, 28)
  np.testing.assert_array_equal(np.bincount(dataset.train_labels), [6000] * 10)
  # The standardisation constants are the training set's.
  pixels = dataset.train_images.astype(np.float64) / 255
  assert pixels.mean() == pytest.approx(fashion_mnist.PIXEL_MEAN, abs=5e-4)
  assert pixels.std() == pytest.approx(fashion_mnist.PIXEL_STD, abs=5e-4)
