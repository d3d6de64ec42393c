"""Federated Fashion-MNIST: real images split into non-IID clients, 10-class CNN.

The real-data demo (`make demo`) audits DP-FedAvg with canaries (Andrew et al.,
ICLR 2024, Algorithms 2 and 3) on Fashion-MNIST (Xiao et al. 2017; 60 000 train
and 10 000 test images, 28 x 28 grey levels, 10 classes), read offline by
`one_shot_epe.data.fashion_mnist.load` from Debian's `dataset-fashion-mnist`
(`/usr/share/datasets/fashion-mnist`) or any directory in that layout.

**Clients.** Fashion-MNIST has no natural users, so the training images are
split into `NUM_CLIENTS` = 1,200 clients of 50 images by the label-shard scheme
(`one_shot_epe.data.fashion_mnist.partition_by_label_shards`, framework-free)
of McMahan et al. (2017, Section 3): sort the images by label (ties in a
seeded random order), cut them into 5 x 1,200 shards of 10 and give each
client five shards drawn by a seeded permutation. Every shard holds a single
class (6,000 images per class), so a client sees at most 5 of the 10 classes,
in multiples of 10: a non-IID split, as federated data are, of a few dominant
classes per client. McMahan et al.'s pathological 2 shards per client learns
too slowly for the demo's 25 rounds (measured: 77% test accuracy against 79%
with 5 shards, and unsteady), and an IID split would not be federated data.
50 images per client keep a round of 40 clients cheap on 2 CPU cores, and
m = 1,200 clients give the default delta = m^-1.1 = 4.1e-4.
`partition_by_label_shards` is deterministic in its seed and uses every
example exactly once; shard sizes differ by at most one when they do not divide
the examples evenly.

**Model and elements.** Elements have TFF's EMNIST structure,
OrderedDict(label=int32 [], pixels=float32 [28, 28] in [0, 1]), so TFF's
EMNIST preprocessing and its `cnn_dropout` model run unchanged; the model is
that CNN with a 10-class head (`emnist.create_task(num_classes=10)`):
320 + 18,496 + 1,179,776 + 1,290 = 1,199,882 trainable parameters. Evaluation
uses all 10 000 test images (as one client, in file order).

`--use_synthetic_data` uses the loader's learnable stand-in of the same shape
(`fashion_mnist.synthetic`), split the same way into `synthetic_num_clients`
clients. `build_task` is the task's entry point (`design.tasks`).
"""

import collections
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from one_shot_epe.data import fashion_mnist
from one_shot_epe.data import task_data
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import emnist

__all__ = ['ArrayClientData', 'DEFAULT_DATA_DIR', 'INSTALL_HINT', 'NUM_CLASSES',
           'NUM_CLIENTS', 'PARTITION_SEED', 'SHARDS_PER_CLIENT', 'TASK_NAME',
           'build_task', 'client_data', 'create_task', 'load',
           'partition_by_label_shards', 'synthetic_data']

TASK_NAME = 'fashion_mnist'
NUM_CLASSES = fashion_mnist.NUM_CLASSES
# The split into clients is framework-free (the JAX engine uses it too).
NUM_CLIENTS = fashion_mnist.NUM_CLIENTS
SHARDS_PER_CLIENT = fashion_mnist.SHARDS_PER_CLIENT
PARTITION_SEED = fashion_mnist.PARTITION_SEED
partition_by_label_shards = fashion_mnist.partition_by_label_shards
synthetic_data = fashion_mnist.synthetic_clients
DEFAULT_DATA_DIR = fashion_mnist.DEFAULT_DIRECTORY
INSTALL_HINT = ('install it with `sudo apt-get install dataset-fashion-mnist` '
                '(Debian/Ubuntu), which puts it in '
                f'{fashion_mnist.DEFAULT_DIRECTORY}')


class ArrayClientData(tff.simulation.datasets.ClientData):
  """In-memory `ClientData` over uint8 images, one index array per client.

  Client ids are zero-padded decimal numbers '000', '001', ... A client's
  dataset yields OrderedDict(label=int32 [], pixels=float32 [28, 28]) with
  pixels / 255. `create_tf_dataset_for_client` embeds only that client's
  images in the dataset's graph, so TFF serialises 50 images per client per
  round rather than the whole split; `serializable_dataset_fn` (a traceable
  function of the id, used for whole-split iteration) embeds all of them.
  """

  def __init__(self, images: np.ndarray, labels: np.ndarray,
               client_indices: list[np.ndarray]):
    """Stores each client's examples, in `client_indices` order, contiguously.

    Args:
      images: uint8 [n, 28, 28].
      labels: integer labels [n].
      client_indices: per client, the indices of its examples (non-empty).
    """
    if not client_indices or any(len(i) == 0 for i in client_indices):
      raise ValueError('client_indices must be a non-empty list of non-empty '
                       'index arrays.')
    order = np.concatenate(client_indices)
    self._images = np.ascontiguousarray(images[order], dtype=np.uint8)
    self._labels = np.asarray(labels[order], dtype=np.int32)
    sizes = [len(i) for i in client_indices]
    self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    width = len(str(len(client_indices) - 1))
    self._client_ids = [f'{i:0{width}d}' for i in range(len(client_indices))]
    self._element_spec = collections.OrderedDict(
        label=tf.TensorSpec([], tf.int32),
        pixels=tf.TensorSpec(fashion_mnist.IMAGE_SHAPE, tf.float32))

  @property
  def client_ids(self) -> list[str]:
    """'000', '001', ...: one id per client, in partition order."""
    return list(self._client_ids)

  def client_arrays(self, client_id: str) -> tuple[np.ndarray, np.ndarray]:
    """The client's (uint8 images [k, 28, 28], int32 labels [k]).

    Args:
      client_id: One of `client_ids`.

    Returns:
      The client's images and labels, in index order.

    Raises:
      ValueError: `client_id` is not a client of this data.
    """
    if client_id not in self._client_ids:
      raise ValueError(f'client_id must be one of the {len(self._client_ids)} '
                       f'client ids; got {client_id!r}.')
    index = int(client_id)
    start, end = self._offsets[index], self._offsets[index + 1]
    return self._images[start:end], self._labels[start:end]

  def create_tf_dataset_for_client(self, client_id: str) -> tf.data.Dataset:
    """The client's examples as a dataset holding only its own images.

    Args:
      client_id: One of `client_ids`.

    Returns:
      Elements {'label', 'pixels': float32 [28, 28] in [0, 1]}, EMNIST's
      structure.
    """
    images, labels = self.client_arrays(client_id)
    return _examples(tf.data.Dataset.from_tensor_slices((labels, images)))

  @property
  def serializable_dataset_fn(self):
    """Traceable client id -> dataset over the split's images held as constants."""
    images, labels, offsets = self._images, self._labels, self._offsets

    def dataset_fn(client_id) -> tf.data.Dataset:
      index = tf.strings.to_number(client_id, out_type=tf.int64)
      bounds = tf.constant(offsets)
      start, end = bounds[index], bounds[index + 1]
      return _examples(tf.data.Dataset.from_tensor_slices(
          (tf.constant(labels)[start:end], tf.constant(images)[start:end])))

    return dataset_fn

  @property
  def element_type_structure(self):
    """OrderedDict(label=int32 [], pixels=float32 [28, 28]) TensorSpecs."""
    return self._element_spec


def _examples(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """(label, uint8 image) pairs to EMNIST-structured elements in [0, 1]."""
  return dataset.map(lambda label, image: collections.OrderedDict(
      label=label, pixels=tf.cast(image, tf.float32) / 255.0))


def client_data(
    data: fashion_mnist.Dataset, num_clients: int,
    shards_per_client: int = SHARDS_PER_CLIENT, seed: int = PARTITION_SEED
) -> tuple[ArrayClientData, ArrayClientData]:
  """Federated (train, test) data: non-IID train clients, test as one client.

  Args:
    data: the images and labels of both splits.
    num_clients: train clients (`partition_by_label_shards`).
    shards_per_client: label shards per train client.
    seed: partition seed.

  Returns:
    (the train clients, the test split as one client).
  """
  train = ArrayClientData(
      data.train_images, data.train_labels,
      partition_by_label_shards(data.train_labels, num_clients,
                                shards_per_client, seed))
  test = ArrayClientData(data.test_images, data.test_labels,
                         [np.arange(data.test_labels.size)])
  return train, test


def load(data_dir: str | None) -> fashion_mnist.Dataset:
  """Reads Fashion-MNIST from `data_dir` (never downloads).

  Args:
    data_dir: The directory of the four IDX files or fashion_mnist.npz.

  Returns:
    The images and labels of both splits.

  Raises:
    FileNotFoundError: `data_dir` is not a directory (with how to install it).
    ValueError: the directory lacks the files or a file is malformed.
  """
  if not data_dir or not os.path.isdir(data_dir):
    raise FileNotFoundError(
        f'Fashion-MNIST directory {data_dir!r} does not exist; '
        f'{INSTALL_HINT}.')
  return fashion_mnist.load(data_dir)


def create_task(train_client_spec: tff.simulation.baselines.ClientSpec,
                data: fashion_mnist.Dataset, num_clients: int,
                data_source: str) -> base.Task:
  """The task: `data` split into `num_clients` clients, EMNIST CNN, 10 classes.

  Args:
    train_client_spec: client epochs, batch size and example cap.
    data: Fashion-MNIST (real or synthetic).
    num_clients: train clients; each gets SHARDS_PER_CLIENT label shards.
    data_source: recorded in the task ('synthetic' or the data directory).

  Returns:
    The task: EMNIST's CNN with a 10-class head, the clients, d.
  """
  train, test = client_data(data, num_clients)
  return emnist.create_task(train_client_spec, train, test, data_source,
                            task_name=TASK_NAME, num_classes=NUM_CLASSES)


def build_task(train_client_spec: tff.simulation.baselines.ClientSpec,
               request: task_data.DataRequest) -> base.Task:
  """The task on the data `request` asks for (its entry point).

  Args:
    train_client_spec: client epochs, batch size and example cap.
    request: the data flags: the directory of the files (`load`, in
      `NUM_CLIENTS` clients), or the stand-in's sizes and seed
      (`synthetic_data`, in `request.num_clients` clients).

  Returns:
    The task (`create_task`).

  Raises:
    FileNotFoundError / ValueError: see `load`; ValueError for sizes out of
      range.
  """
  if request.synthetic:
    return create_task(
        train_client_spec, synthetic_data(
            request.num_clients, request.examples_per_client, request.seed),
        request.num_clients, 'synthetic')
  return create_task(train_client_spec, load(request.data_dir), NUM_CLIENTS,
                     os.path.abspath(request.data_dir))
