"""Fashion-MNIST from local files, or a synthetic stand-in of the same shape.

Section 5.4 of Andrew et al. (ICLR 2024) trains on Fashion-MNIST (Xiao et al.
2017): 60 000 training and 10 000 test images, 28 x 28 grey levels (uint8),
10 classes. Nothing is ever downloaded. `load` reads a local directory holding
either

* the four standard IDX files, gzipped or not (the layout of the original
  distribution, of Keras's cache `~/.keras/datasets/fashion-mnist/`, and of
  Debian's `dataset-fashion-mnist` package in
  `/usr/share/datasets/fashion-mnist`):
    train-images-idx3-ubyte[.gz]  train-labels-idx1-ubyte[.gz]
    t10k-images-idx3-ubyte[.gz]   t10k-labels-idx1-ubyte[.gz]
* or one `fashion_mnist.npz` with uint8 arrays x_train [N, 28, 28],
  y_train [N], x_test [M, 28, 28], y_test [M] (what `np.savez` of Keras's
  `load_data()` output gives).

IDX format (LeCun et al.): a big-endian header of two zero bytes, a type byte
(0x08 = unsigned byte), the number of dimensions n, then n uint32 sizes,
followed by the data in row-major order.

`synthetic` makes a learnable stand-in with the same shapes and dtypes: each
class has a fixed pattern, a shared random 7 x 7 background blended with a
class-specific one and upsampled to 28 x 28; an example is its class pattern
at a random brightness plus strong pixel noise, so that classes overlap.

Federated clients (the demo, `tasks.fashion_mnist`, and the JAX engine):
`partition_by_label_shards` splits the training images into non-IID clients
by McMahan et al.'s (2017, Sec. 3) label shards; `synthetic_clients` sizes the
synthetic stand-in for a number of clients; `client_arrays_of` gives the
split as client arrays, and `task_arrays` is the task's loader
(`design.tasks`: the JAX engine's data of --task=fashion_mnist).
"""

import dataclasses
import math
import os
import struct

import numpy as np

from one_shot_epe import validation
from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.runtime import bounded_reads

__all__ = ['DEFAULT_DIRECTORY', 'Dataset', 'IDX_NAMES', 'IMAGE_SHAPE',
           'NPZ_NAME', 'NUM_CLASSES', 'NUM_CLIENTS', 'PARTITION_SEED',
           'PIXEL_MEAN', 'PIXEL_STD', 'SHARDS_PER_CLIENT', 'available',
           'client_arrays_of', 'load', 'partition_by_label_shards', 'read_idx',
           'standardise', 'synthetic', 'synthetic_clients', 'task_arrays']

IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
# Per-pixel mean and standard deviation of the Fashion-MNIST training images
# (in [0, 1]), the usual standardisation constants.
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530
DEFAULT_DIRECTORY = '/usr/share/datasets/fashion-mnist'
NPZ_NAME = 'fashion_mnist.npz'
IDX_NAMES = {
    'train_images': 'train-images-idx3-ubyte',
    'train_labels': 'train-labels-idx1-ubyte',
    'test_images': 't10k-images-idx3-ubyte',
    'test_labels': 't10k-labels-idx1-ubyte',
}
_UNSIGNED_BYTE = 0x08
# The demo's split: 1,200 clients of 50 images, 5 label shards each.
NUM_CLIENTS = 1200
SHARDS_PER_CLIENT = 5
PARTITION_SEED = 0


@dataclasses.dataclass(frozen=True)
class Dataset:
  """Images (uint8 [n, 28, 28]) and labels (uint8 [n]) of both splits."""
  train_images: np.ndarray
  train_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray
  source: str

  def __post_init__(self):
    for split in ('train', 'test'):
      images = getattr(self, f'{split}_images')
      labels = getattr(self, f'{split}_labels')
      if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f'{split} images must have shape [n, 28, 28]; got '
                         f'{images.shape}.')
      if labels.shape != (images.shape[0],):
        raise ValueError(f'{split} labels must have shape [{images.shape[0]}]; '
                         f'got {labels.shape}.')
      if labels.size and labels.max() >= NUM_CLASSES:
        raise ValueError(f'{split} labels must lie in [0, {NUM_CLASSES}).')


def read_idx(path: str) -> np.ndarray:
  """Reads an unsigned-byte IDX file (gzipped if its name ends in .gz).

  Args:
    path: The file.

  Returns:
    Its array, uint8, of the header's shape.

  Raises:
    bounded_reads.InputRefused: the file is not a regular file, or it (or
      its gzip contents) holds more than `bounded_reads.FASHION_MNIST_FILE`.
    ValueError: the file is not unsigned-byte IDX, or is truncated.
  """
  limit = bounded_reads.FASHION_MNIST_FILE
  data = bounded_reads.read_bytes(path, limit, '--data_dir')
  if path.endswith('.gz'):
    data = bounded_reads.decompress_gzip(data, path, limit, '--data_dir')
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise ValueError(f'{path} is not an IDX file (bad magic number).')
  if data[2] != _UNSIGNED_BYTE:
    raise ValueError(f'{path}: only unsigned-byte IDX data is supported; got '
                     f'type 0x{data[2]:02x}.')
  ndim = data[3]
  header = 4 + 4 * ndim
  if len(data) < header:
    raise ValueError(f'{path}: truncated IDX header.')
  shape = struct.unpack(f'>{ndim}I', data[4:header])
  if len(data) - header != math.prod(shape):
    raise ValueError(f'{path}: expected {math.prod(shape)} data bytes for '
                     f'shape {shape}; got {len(data) - header}.')
  return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def _idx_path(directory: str, name: str) -> str | None:
  for candidate in (name + '.gz', name):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def available(directory: str) -> bool:
  """Whether `directory` holds the four IDX files or fashion_mnist.npz.

  Args:
    directory: Where to look.

  Returns:
    True if `load` would find a format there.
  """
  if not directory or not os.path.isdir(directory):
    return False
  if os.path.isfile(os.path.join(directory, NPZ_NAME)):
    return True
  return all(_idx_path(directory, name) for name in IDX_NAMES.values())


def load(directory: str) -> Dataset:
  """Fashion-MNIST from `directory` (see the module docstring for the formats).

  Args:
    directory: Holds the four IDX files (gzipped or not) or fashion_mnist.npz.

  Returns:
    The training and test images and labels.

  Raises:
    ValueError: if the directory holds neither format, or a file is malformed.
  """
  if not available(directory):
    raise ValueError(
        f'{directory!r} holds neither the four Fashion-MNIST IDX files '
        f'({", ".join(IDX_NAMES.values())}, optionally .gz) nor {NPZ_NAME}.')
  npz = os.path.join(directory, NPZ_NAME)
  if os.path.isfile(npz):
    bounded_reads.check_npz(npz, bounded_reads.FASHION_MNIST_FILE, '--data_dir')
    with np.load(npz) as arrays:
      missing = {'x_train', 'y_train', 'x_test', 'y_test'} - set(arrays.files)
      if missing:
        raise ValueError(f'{npz} lacks arrays {sorted(missing)}.')
      parts = {key: np.asarray(arrays[key]) for key in
               ('x_train', 'y_train', 'x_test', 'y_test')}
    for key, value in parts.items():
      if value.dtype != np.uint8:
        raise ValueError(f'{npz}: {key} must be uint8; got {value.dtype}.')
    return Dataset(parts['x_train'], parts['y_train'], parts['x_test'],
                   parts['y_test'], source=npz)
  arrays = {key: read_idx(_idx_path(directory, name))
            for key, name in IDX_NAMES.items()}
  return Dataset(**arrays, source=directory)


def synthetic(seed: int, num_train: int = 60000,
              num_test: int = 10000) -> Dataset:
  """A learnable Fashion-MNIST-shaped stand-in, a pure function of its inputs.

  Class c has a fixed pattern P_c = 0.7 B + 0.3 S_c, with B and S_c 7 x 7
  uniform values upsampled 4x (B shared by all classes). An example of class
  c is clip(b P_c + N(0, 0.4^2), 0, 1) at brightness b ~ U(0.5, 1), quantised
  to uint8. Labels are uniform over the 10 classes.

  Args:
    seed: Seed of every draw.
    num_train: Training images.
    num_test: Test images.

  Returns:
    The stand-in dataset.

  Raises:
    ValueError: a count is not an integer >= 1.
  """
  for name, value in (('num_train', num_train), ('num_test', num_test)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f'{name} must be an integer >= 1; got {value!r}.')
  rng = np.random.default_rng(seed)
  coarse = 0.7 * rng.uniform(size=(1, 7, 7)) + 0.3 * rng.uniform(
      size=(NUM_CLASSES, 7, 7))
  patterns = np.kron(coarse, np.ones((1, 4, 4)))

  def split(size: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, NUM_CLASSES, size=size)
    brightness = rng.uniform(0.5, 1.0, size=(size, 1, 1))
    images = brightness * patterns[labels] + 0.4 * rng.standard_normal(
        (size, *IMAGE_SHAPE))
    pixels = np.round(np.clip(images, 0.0, 1.0) * 255.0).astype(np.uint8)
    return pixels, labels.astype(np.uint8)

  train_images, train_labels = split(num_train)
  test_images, test_labels = split(num_test)
  return Dataset(train_images, train_labels, test_images, test_labels,
                 source=f'synthetic(seed={seed})')


def standardise(images: np.ndarray) -> np.ndarray:
  """uint8 images to float32 (x / 255 - PIXEL_MEAN) / PIXEL_STD.

  Args:
    images: uint8 images.

  Returns:
    The standardised images, float32, of the same shape.
  """
  return ((np.asarray(images, np.float32) / 255.0 - PIXEL_MEAN) /
          PIXEL_STD).astype(np.float32)


@validation.arguments('num_clients', shards_per_client=validation.Int(1))
def partition_by_label_shards(labels: np.ndarray, num_clients: int,
                              shards_per_client: int,
                              seed: int) -> list[np.ndarray]:
  """Splits example indices into non-IID clients (McMahan et al. 2017, Sec. 3).

  The indices are sorted by label, ties in a random order drawn from `seed`,
  cut into num_clients * shards_per_client contiguous shards of equal size (up
  to one example), and each client gets `shards_per_client` shards chosen by a
  seeded permutation.

  Args:
    labels: int labels, shape [n], n >= num_clients * shards_per_client.
    num_clients: number of clients, >= 1.
    shards_per_client: shards per client (classes a client mostly sees), >= 1.
    seed: seeds the tie order and the shard assignment; any non-negative int.

  Returns:
    One sorted int64 index array per client; together they hold every index
    in [0, n) exactly once.

  Raises:
    TypeError: `labels` is not an integer array.
    ValueError: a count is not a positive integer, `labels` is not 1-D, or
      there are fewer examples than shards.
  """
  labels = np.asarray(labels)
  if not np.issubdtype(labels.dtype, np.integer):
    raise TypeError(f'labels must be integers; got dtype {labels.dtype}.')
  if labels.ndim != 1:
    raise ValueError(f'labels must be 1-D; got shape {labels.shape}.')
  num_shards = num_clients * shards_per_client
  if labels.size < num_shards:
    raise ValueError(
        f'labels must hold at least num_clients * shards_per_client = '
        f'{num_shards} examples; got {labels.size}.')
  rng = np.random.default_rng(seed)
  shuffled = rng.permutation(labels.size)
  by_label = shuffled[np.argsort(labels[shuffled], kind='stable')]
  shards = np.array_split(by_label, num_shards)
  owners = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
  return [np.sort(np.concatenate([shards[s] for s in row])) for row in owners]


@validation.arguments('num_clients', 'examples_per_client')
def synthetic_clients(num_clients: int, examples_per_client: int,
                      seed: int) -> Dataset:
  """The loader's synthetic stand-in sized for num_clients x examples_per_client.

  The test split has max(1, train size // 6) images (Fashion-MNIST's ratio).

  Args:
    num_clients: The number of clients.
    examples_per_client: Images per client.
    seed: Seed of every draw.

  Returns:
    The stand-in dataset with num_clients x examples_per_client training
    images.

  Raises:
    ValueError: a count is not an integer >= 1, or examples_per_client is
      below SHARDS_PER_CLIENT (each client needs one example per shard).
  """
  if examples_per_client < SHARDS_PER_CLIENT:
    raise ValueError(
        f'examples_per_client must be >= {SHARDS_PER_CLIENT} (one example per '
        f'label shard of a client); got {examples_per_client}.')
  num_train = num_clients * examples_per_client
  return synthetic(seed, num_train=num_train, num_test=max(1, num_train // 6))


def client_arrays_of(
    dataset: Dataset, num_clients: int,
    shards_per_client: int = SHARDS_PER_CLIENT, seed: int = PARTITION_SEED
) -> tuple[client_arrays.ClientArrays, client_arrays.ClientArrays]:
  """Fashion-MNIST as (train, test) client arrays, split as the TFF path's.

  Train clients are `partition_by_label_shards` of the training labels
  (each client's examples in index order, ids '000', '001', ... as
  `tasks.fashion_mnist.ArrayClientData`); the test split is one client of
  every test image in file order. Pixels are uint8 / 255 in float32 (kind
  'emnist', TFF's EMNIST elements).

  Args:
    dataset: Fashion-MNIST (`load` or a stand-in).
    num_clients: The number of training clients.
    shards_per_client: Label shards per client (at most that many classes).
    seed: Seed of the partition.

  Returns:
    (the training clients, the test split as one client).
  """
  partition = partition_by_label_shards(dataset.train_labels, num_clients,
                                        shards_per_client, seed)
  order = np.concatenate(partition)
  sizes = [len(indices) for indices in partition]

  def split(images: np.ndarray, labels: np.ndarray, ids: np.ndarray,
            offsets: np.ndarray) -> client_arrays.ClientArrays:
    return client_arrays.ClientArrays(
        kind='emnist', client_ids=ids,
        offsets=np.asarray(offsets, np.int64),
        features={'pixels': np.asarray(images, np.float32) / 255.0,
                  'label': np.asarray(labels, np.int32)})

  train = split(dataset.train_images[order], dataset.train_labels[order],
                client_arrays.numbered_client_ids(num_clients),
                np.concatenate([[0], np.cumsum(sizes)]))
  test = split(dataset.test_images, dataset.test_labels,
               client_arrays.numbered_client_ids(1),
               [0, dataset.test_labels.size])
  return train, test


def task_arrays(request: task_data.DataRequest) -> task_data.TaskArrays:
  """The task's client arrays (its loader, `design.tasks`).

  The files' images in `NUM_CLIENTS` clients, or the stand-in's
  (`synthetic_clients`) in `request.num_clients`, as `client_arrays_of`
  splits them.

  Args:
    request: The data flags (the directory, or the stand-in's sizes and seed).

  Returns:
    The training clients, the test split and where they came from.

  Raises:
    ValueError: the stand-in's sizes are out of range, or the directory's
      files are malformed.
    OSError: the directory or its files cannot be read.
  """
  if request.synthetic:
    num_clients = request.num_clients
    dataset = synthetic_clients(num_clients, request.examples_per_client,
                                request.seed)
    source = 'synthetic'
  else:
    num_clients = NUM_CLIENTS
    dataset = load(request.data_dir)
    source = os.path.abspath(request.data_dir)
  train, test = client_arrays_of(dataset, num_clients)
  return task_data.TaskArrays(train, test, source)
