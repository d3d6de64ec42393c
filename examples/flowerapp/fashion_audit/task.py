"""The federated task: Fashion-MNIST clients training softmax regression.

200 clients (Flower nodes) hold label shards of Fashion-MNIST
(`one_shot_epe.data.fashion_mnist`: Debian's files in
/usr/share/datasets/fashion-mnist, or the synthetic stand-in) and train
softmax regression in numpy (hand-written gradients); the server runs FedAvg
under Flower's server-side DP wrapper. Shared by the app's ServerApp and
ClientApp and by examples/flower_fashion_mnist.py, which imports it as
`examples.flowerapp.fashion_audit.task`; it imports nothing of the app.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg, Strategy)

from one_shot_epe.data import fashion_mnist

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


@dataclasses.dataclass(frozen=True)
class Task:
  """Standardised images [n, 784] and labels, per client and for testing."""
  client_x: list[np.ndarray]
  client_y: list[np.ndarray]
  test_x: np.ndarray
  test_y: np.ndarray
  source: str


@functools.lru_cache(maxsize=2)
def load_task(setting: Setting) -> Task:
  """The clients' shards and the test set.

  Cached: a process running many clients (a Ray actor) loads it once.

  Args:
    setting: The setting.

  Returns:
    The task.

  Raises:
    ValueError: `setting.data_dir` holds no Fashion-MNIST files (and the
      setting does not ask for the synthetic stand-in), or they are
      malformed.
  """
  if setting.use_synthetic_data:
    data = fashion_mnist.synthetic_clients(setting.num_clients, 60, seed=0)
  else:
    data = fashion_mnist.load(setting.data_dir)
  x = fashion_mnist.standardise(data.train_images).reshape(-1, FEATURES)
  parts = fashion_mnist.partition_by_label_shards(
      data.train_labels, setting.num_clients,
      fashion_mnist.SHARDS_PER_CLIENT, fashion_mnist.PARTITION_SEED)
  y = data.train_labels.astype(np.int64)
  return Task([x[p] for p in parts], [y[p] for p in parts],
              fashion_mnist.standardise(data.test_images).reshape(
                  -1, FEATURES), data.test_labels.astype(np.int64),
              data.source)


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
  return float(np.mean(_logits(w, b, task.test_x).argmax(axis=1) ==
                       task.test_y))


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
                message: Message) -> RecordDict:
  """A client's reply to a training message: its model and equal weight.

  Every client reports num-examples = 1: FedAvg's weights stay equal, as
  DP-FedAvg's sensitivity S / N assumes (the audit refuses unequal ones).

  Args:
    task: The task.
    setting: The run.
    client: The client's index (its shard).
    round_num: The server round (seeds its shuffles).
    message: The training message (the global model).

  Returns:
    The reply's content.
  """
  arrays = message.content['arrays']
  w, b, loss = local_sgd(arrays['w'].numpy(), arrays['b'].numpy(),
                         task.client_x[client], task.client_y[client],
                         setting, np.random.default_rng([client, round_num]))
  return RecordDict({'arrays': ArrayRecord({'w': Array(w), 'b': Array(b)}),
                     'metrics': MetricRecord({'num-examples': 1,
                                              'train_loss': loss})})


def dp_strategy(setting: Setting, noise_multiplier: float) -> Strategy:
  """FedAvg under Flower's server-side DP wrapper (fixed or adaptive clip).

  Args:
    setting: The run.
    noise_multiplier: z.

  Returns:
    The DP wrapper.
  """
  fedavg = FedAvg(fraction_train=setting.clients_per_round /
                  setting.num_clients, fraction_evaluate=0.0,
                  min_train_nodes=setting.clients_per_round,
                  min_available_nodes=setting.clients_per_round)
  if setting.clip:
    return DifferentialPrivacyServerSideFixedClipping(
        fedavg, noise_multiplier, setting.clip, setting.clients_per_round)
  return DifferentialPrivacyServerSideAdaptiveClipping(
      fedavg, noise_multiplier, setting.clients_per_round)
