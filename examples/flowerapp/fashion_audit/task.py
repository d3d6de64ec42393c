"""The federated task: Fashion-MNIST clients training softmax regression.

200 clients (Flower nodes) hold label shards of Fashion-MNIST
(`one_shot_epe.data.fashion_mnist`: Debian's files in
/usr/share/datasets/fashion-mnist, or the synthetic stand-in) and train
softmax regression in numpy (hand-written gradients); the server runs FedAvg
under Flower's server-side DP wrapper. Shared by the app's ServerApp and
ClientApp and by examples/flower_fashion_mnist.py, which imports it as
`examples.flowerapp.fashion_audit.task`; it imports nothing of the app.

On the deployment engine a SuperNode starts a process per message, so the
data is read once per machine, not per message: the images and labels are
cached as .npy files (`cache_directory`, keyed by the data files' names,
sizes and modification times, or by the synthetic stand-in's size) and
memory-mapped, a client standardising only its own shard
(`Task.client_data`). A process that lives (a simulation's Ray actor) keeps
its task (`load_task`).

With data canaries (examples/flower_fashion_mnist.py --canary_kind=data)
the federation has k more nodes after the N clients: node N + j is seen data
canary j (`one_shot_epe.flower_engine.canary_nodes`), which trains on its
8 test images with random labels (`Task.client_data`) and tags its reply
(`train_reply`).
"""

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy)

from one_shot_epe.data import fashion_mnist
from one_shot_epe.flower_engine import canary_nodes

FEATURES, CLASSES = 28 * 28, fashion_mnist.NUM_CLASSES
DEFAULT_DATA_DIR = fashion_mnist.DEFAULT_DIRECTORY


@dataclasses.dataclass(frozen=True)
class Setting:
  """The federated task and its DP-FedAvg run.

  Attributes:
    num_clients: Clients (Flower nodes), each a label-shard partition.
    clients_per_round: The cohort FedAvg samples each round.
    rounds: T.
    local_epochs, batch_size, learning_rate: A client's SGD.
    clip: The server-side fixed clip S (0: adaptive clipping).
    num_canaries: k seen canaries (and k unseen).
    data_dir: Fashion-MNIST's files (Debian's dataset-fashion-mnist).
    use_synthetic_data: Train on the synthetic stand-in instead of
      `data_dir`'s files.
  """
  num_clients: int = 200
  clients_per_round: int = 20
  rounds: int = 50
  local_epochs: int = 1
  batch_size: int = 32
  learning_rate: float = 0.1
  clip: float = 1.0
  num_canaries: int = 500
  data_dir: str = DEFAULT_DATA_DIR
  use_synthetic_data: bool = False


def setting_from_config(run_config: Mapping[str, Any],
                        num_clients: int | None = None) -> Setting:
  """The setting a run config (`[tool.flwr.app.config]`) describes.

  Args:
    run_config: Flower's run config (the app's pyproject.toml keys, with the
      `--run-config` overrides).
    num_clients: The clients' number when the node knows it (its
      'num-partitions'); None: the run config's 'num-clients'.

  Returns:
    The setting.
  """
  return Setting(
      num_clients=int(run_config['num-clients'] if num_clients is None
                      else num_clients),
      clients_per_round=int(run_config['clients-per-round']),
      rounds=int(run_config['num-server-rounds']),
      local_epochs=int(run_config['local-epochs']),
      batch_size=int(run_config['batch-size']),
      learning_rate=float(run_config['learning-rate']),
      clip=float(run_config['clipping-norm']),
      num_canaries=int(run_config['num-canaries']),
      data_dir=str(run_config['data-dir']),
      use_synthetic_data=bool(run_config['use-synthetic-data']))


# The synthetic stand-in's images per client.
_SYNTHETIC_EXAMPLES = 60
# The cached arrays, each `<name>.npy`, and the data's description.
_ARRAYS = ('train_images', 'train_labels', 'test_images', 'test_labels')
_SOURCE_FILE = 'source.txt'


def cache_directory() -> str:
  """Where the data's arrays are cached: $XDG_CACHE_HOME or ~/.cache.

  Returns:
    The cache home's one-shot-epe/fashion-mnist.
  """
  home = (os.environ.get('XDG_CACHE_HOME') or
          os.path.join(os.path.expanduser('~'), '.cache'))
  return os.path.join(home, 'one-shot-epe', 'fashion-mnist')


def _identity(setting: Setting) -> str:
  """What identifies the setting's data: its files' names, sizes and times."""
  if setting.use_synthetic_data:
    return f'synthetic {setting.num_clients} x {_SYNTHETIC_EXAMPLES}, seed 0'
  directory = os.path.realpath(setting.data_dir)
  files = []
  for name in sorted(os.listdir(directory)):
    stat = os.stat(os.path.join(directory, name))
    files.append(f'{name} {stat.st_size} {stat.st_mtime_ns}')
  return '\n'.join([directory, *files])


def _read_cache(path: str) -> fashion_mnist.Dataset | None:
  """The cached dataset at `path`, memory-mapped; None if it is not there."""
  try:
    arrays = [np.load(os.path.join(path, f'{name}.npy'), mmap_mode='r')
              for name in _ARRAYS]
    with open(os.path.join(path, _SOURCE_FILE), encoding='utf-8') as stream:
      source = stream.read()
  except (OSError, ValueError):
    return None
  return fashion_mnist.Dataset(*arrays, source=source)


def _write_cache(path: str, data: fashion_mnist.Dataset) -> None:
  """Writes `data` to `path` whole, or not at all (another writer won)."""
  root = os.path.dirname(path)
  try:
    os.makedirs(root, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix='.partial-', dir=root)
  except OSError:
    return  # No cache here: every process reads the files.
  try:
    for name in _ARRAYS:
      np.save(os.path.join(temporary, f'{name}.npy'), getattr(data, name))
    with open(os.path.join(temporary, _SOURCE_FILE), 'w',
              encoding='utf-8') as stream:
      stream.write(data.source)
    os.replace(temporary, path)
  except OSError:
    pass
  finally:
    shutil.rmtree(temporary, ignore_errors=True)


def check_data(setting: Setting) -> None:
  """Whether the setting's data can be read, without reading it.

  Args:
    setting: The setting.

  Raises:
    ValueError: `setting.data_dir` holds no Fashion-MNIST files (and the
      setting does not ask for the synthetic stand-in).
  """
  if not setting.use_synthetic_data and not fashion_mnist.available(
      setting.data_dir):
    raise ValueError(
        f'{setting.data_dir!r} holds neither the four Fashion-MNIST IDX files '
        f'({", ".join(fashion_mnist.IDX_NAMES.values())}, optionally .gz) '
        f'nor {fashion_mnist.NPZ_NAME}.')


def _dataset(setting: Setting) -> fashion_mnist.Dataset:
  """The setting's images and labels, from the cache (written on a miss)."""
  check_data(setting)
  path = os.path.join(cache_directory(), hashlib.sha256(
      _identity(setting).encode()).hexdigest()[:16])
  cached = _read_cache(path)
  if cached is not None:
    return cached
  if setting.use_synthetic_data:
    data = fashion_mnist.synthetic_clients(setting.num_clients,
                                           _SYNTHETIC_EXAMPLES, seed=0)
  else:
    data = fashion_mnist.load(setting.data_dir)
  _write_cache(path, data)
  return data


@dataclasses.dataclass(frozen=True)
class Task:
  """The clients' label shards and the test set, standardised on demand.

  Attributes:
    data: The images (uint8, memory-mapped from the cache) and labels.
    parts: Client i's example indices in the training split.
  """
  data: fashion_mnist.Dataset
  parts: tuple[np.ndarray, ...]

  @property
  def source(self) -> str:
    """Where the data came from."""
    return self.data.source

  def client_data(self, client: int, num_canaries: int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Client `client`'s standardised images [n, 784] and labels [n].

    Args:
      client: The client's index: its shard, or past the N shards a data
        canary node (`canary_data`).
      num_canaries: k, the data canary nodes after the N clients.

    Returns:
      (images, labels).
    """
    canary = self.canary_data(client, num_canaries)
    if canary is not None:
      return canary
    part = self.parts[client]
    return (fashion_mnist.standardise(self.data.train_images[part]).reshape(
        -1, FEATURES), np.asarray(self.data.train_labels[part], np.int64))

  def canary_data(self, client: int, num_canaries: int
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """A data canary node's standardised images [8, 784] and random labels.

    Node N + j holds seen canary j's examples
    (`canary_nodes.canary_node_examples`, canary seed 0): test images with
    labels drawn uniformly over the classes.

    Args:
      client: The node's index, in [0, N + k).
      num_canaries: k.

    Returns:
      (images, labels), or None for one of the N clients.
    """
    examples = canary_nodes.canary_node_examples(
        client, len(self.parts), num_canaries, 0, 'emnist',
        num_labels=CLASSES, images=self.data.test_images)
    if examples is None:
      return None
    images, labels = examples
    return (fashion_mnist.standardise(images).reshape(-1, FEATURES),
            np.asarray(labels, np.int64))

  @functools.cached_property
  def test_set(self) -> tuple[np.ndarray, np.ndarray]:
    """The standardised test images [n, 784] and labels [n]."""
    return (fashion_mnist.standardise(self.data.test_images).reshape(
        -1, FEATURES), np.asarray(self.data.test_labels, np.int64))


@functools.lru_cache(maxsize=2)
def load_task(setting: Setting) -> Task:
  """The clients' shards and the test set.

  Read from the data cache (`cache_directory`), and kept: a process
  running many clients (a Ray actor) loads it once.

  Args:
    setting: The setting.

  Returns:
    The task.

  Raises:
    ValueError: `setting.data_dir` holds no Fashion-MNIST files (and the
      setting does not ask for the synthetic stand-in), or they are
      malformed.
  """
  data = _dataset(setting)
  parts = fashion_mnist.partition_by_label_shards(
      np.asarray(data.train_labels), setting.num_clients,
      fashion_mnist.SHARDS_PER_CLIENT, fashion_mnist.PARTITION_SEED)
  return Task(data, tuple(np.asarray(part) for part in parts))


def run_name(noise_multiplier: float, defining: Mapping[str, Any]) -> str:
  """A run directory's name: 'noise_<z>-<digest of what defines the run>'.

  Args:
    noise_multiplier: z.
    defining: The values that define the run (JSON-serialisable); runs
      whose values differ get different names, equal ones the same.

  Returns:
    e.g. 'noise_1-3fa2c9d81e'.
  """
  digest = hashlib.sha256(json.dumps(dict(defining), sort_keys=True).encode())
  return f'noise_{noise_multiplier:g}-{digest.hexdigest()[:10]}'


def initial_arrays() -> ArrayRecord:
  """Softmax regression's weights [784, 10] and bias [10], zero.

  Returns:
    theta_0 as Flower's arrays ('w', 'b').
  """
  return ArrayRecord({'w': Array(np.zeros((FEATURES, CLASSES), np.float32)),
                      'b': Array(np.zeros(CLASSES, np.float32))})


def _logits(w: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
  return x @ w + b


def local_sgd(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray,
              setting: Setting, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray, float]:
  """Minibatch SGD on the softmax cross-entropy; the new weights, mean loss.

  The gradient of the mean cross-entropy of a batch is x^T (p - onehot(y)) / n
  for w and the column sums of (p - onehot(y)) / n for b.

  Args:
    w: The starting weights [784, 10].
    b: The starting bias [10].
    x: The client's standardised images [n, 784].
    y: Their labels [n].
    setting: Its epochs, batch size and learning rate.
    rng: Shuffles the examples.

  Returns:
    (w, b, the mean batch loss).
  """
  w, b = w.copy(), b.copy()
  losses = []
  for _ in range(setting.local_epochs):
    order = rng.permutation(y.size)
    for start in range(0, y.size, setting.batch_size):
      batch = order[start:start + setting.batch_size]
      logits = _logits(w, b, x[batch])
      logits -= logits.max(axis=1, keepdims=True)
      p = np.exp(logits)
      p /= p.sum(axis=1, keepdims=True)
      losses.append(-np.mean(np.log(p[np.arange(batch.size), y[batch]] +
                                    1e-12)))
      p[np.arange(batch.size), y[batch]] -= 1.0
      p /= batch.size
      w -= setting.learning_rate * (x[batch].T @ p).astype(np.float32)
      b -= setting.learning_rate * p.sum(axis=0).astype(np.float32)
  return w, b, float(np.mean(losses))


def accuracy(arrays: ArrayRecord, task: Task) -> float:
  """The model's accuracy on the test set.

  Args:
    arrays: The model ('w', 'b').
    task: The task.

  Returns:
    The fraction of test images classified right.
  """
  w, b = (arrays[name].numpy() for name in ('w', 'b'))
  x, y = task.test_set
  return float(np.mean(_logits(w, b, x).argmax(axis=1) == y))


def canary_losses(arrays: ArrayRecord, images: np.ndarray,
                  labels: np.ndarray) -> np.ndarray:
  """The model's cross-entropy on each of a data canary's examples.

  Args:
    arrays: The model ('w', 'b').
    images: The canary's images [n, 28, 28], pixels in [0, 255]
      (`canary_nodes.canary_node_examples`).
    labels: Their labels [n].

  Returns:
    float64 [n].
  """
  w, b = (arrays[name].numpy() for name in ('w', 'b'))
  logits = _logits(w, b, fashion_mnist.standardise(images).reshape(
      -1, FEATURES)).astype(np.float64)
  logits -= logits.max(axis=1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  return -log_p[np.arange(len(labels)), np.asarray(labels, np.int64)]


def central_evaluation(task: Task
                       ) -> Callable[[int, ArrayRecord], MetricRecord]:
  """The server's evaluation of each round's model: its test accuracy.

  Args:
    task: The task (its test set).

  Returns:
    The `evaluate_fn` a Flower strategy's start takes; its 'accuracy' is
    the audit report's.
  """
  return lambda _, arrays: MetricRecord({'accuracy': accuracy(arrays, task)})


def train_reply(task: Task, setting: Setting, client: int, round_num: int,
                message: Message, num_canaries: int = 0) -> RecordDict:
  """A client's reply to a training message: its model and equal weight.

  Every client reports num-examples = 1: FedAvg's weights stay equal, as
  DP-FedAvg's sensitivity S / N assumes (the audit refuses unequal ones).
  A data canary node trains the same way on its canary's examples and tags
  its reply (`canary_nodes.tag_reply`).

  Args:
    task: The task.
    setting: The run.
    client: The client's index (its shard, or N + j: data canary j).
    round_num: The server round (seeds its shuffles).
    message: The training message (the global model).
    num_canaries: k, the data canary nodes after the N clients.

  Returns:
    The reply's content.
  """
  arrays = message.content['arrays']
  x, y = task.client_data(client, num_canaries)
  w, b, loss = local_sgd(arrays['w'].numpy(), arrays['b'].numpy(), x, y,
                         setting, np.random.default_rng([client, round_num]))
  content = RecordDict({'arrays': ArrayRecord({'w': Array(w), 'b': Array(b)}),
                        'metrics': MetricRecord({'num-examples': 1,
                                                 'train_loss': loss})})
  canary = canary_nodes.canary_id(client, len(task.parts), num_canaries)
  return content if canary is None else canary_nodes.tag_reply(content,
                                                               canary)


def dp_strategy(setting: Setting, noise_multiplier: float,
                num_nodes: int | None = None) -> Strategy:
  """FedAvg under Flower's server-side DP wrapper (fixed or adaptive clip).

  Args:
    setting: The run.
    noise_multiplier: z.
    num_nodes: The federation's nodes, if not the setting's clients (N + k
      with data canary nodes): FedAvg samples the cohort from them.

  Returns:
    The DP wrapper.
  """
  nodes = setting.num_clients if num_nodes is None else num_nodes
  fedavg = FedAvg(fraction_train=setting.clients_per_round / nodes,
                  fraction_evaluate=0.0,
                  min_train_nodes=setting.clients_per_round,
                  min_available_nodes=setting.clients_per_round)
  if setting.clip:
    return DifferentialPrivacyServerSideFixedClipping(
        fedavg, noise_multiplier, setting.clip, setting.clients_per_round)
  return DifferentialPrivacyServerSideAdaptiveClipping(
      fedavg, noise_multiplier, setting.clients_per_round)
