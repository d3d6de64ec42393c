"""A round's client batches for the JAX engine (numpy, TFF's preprocessing).

Turns the clients of a round, read from `one_shot_epe.data.client_arrays`, into
padded, masked arrays that one jit-compiled DP-FedAvg round consumes
(`fedavg.dp_fedavg_round`); `packed_batches` lays them out in lanes for
`fedavg.packed_round`. With the split resident on the device, a round is only
its examples' rows (`client_rows`): the device gathers the batches itself.

Round batches (`client_batches`) follow TFF's client preprocessing
(`emnist_preprocessing` / `word_prediction_preprocessing.create_preprocess_fn`):
shuffle with a buffer, re-shuffled every epoch; repeat for the epochs; take the
example cap; batch (last batch partial). Shuffles draw from a numpy Generator
with the distribution of tf.data's shuffle, not its random bits.
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from one_shot_epe.data import client_arrays
from one_shot_epe import validation

__all__ = ['DEFAULT_SHUFFLE_BUFFER', 'RoundBatches', 'RoundRows',
           'batches_needed', 'client_batches', 'client_example_order',
           'client_rows', 'examples_used', 'gather_rows', 'max_batches_for',
           'micro_batches', 'shuffled_order']

# tf.data shuffle buffers of TFF's preprocessing when ClientSpec leaves it
# unset: emnist_preprocessing.MAX_CLIENT_DATASET_SIZE and
# stackoverflow constants.DEFAULT_SHUFFLE_BUFFER_SIZE.
DEFAULT_SHUFFLE_BUFFER = {'emnist': 418, 'stackoverflow': 1000}


def shuffled_order(num_examples: int, buffer_size: int,
                   rng: np.random.Generator,
                   limit: int | None = None) -> np.ndarray:
  """The order in which tf.data's `shuffle(buffer_size)` emits 0..n-1.

  tf.data fills a buffer with the first `buffer_size` elements, then
  repeatedly emits a uniformly chosen buffered element and refills its slot
  with the next input. With buffer_size >= n this is a uniform permutation.
  Only the first `limit` outputs are produced (all if None).

  Args:
    num_examples: n, >= 0.
    buffer_size: tf.data's shuffle buffer, >= 1.
    rng: numpy Generator of the draws.
    limit: Outputs to produce; None for all n.

  Returns:
    int64 [min(limit, n)] indices.

  Raises:
    ValueError: `num_examples` < 0 or `buffer_size` < 1.
  """
  num_examples = validation.check_int('num_examples', num_examples, low=0)
  buffer_size = validation.check_int('buffer_size', buffer_size, low=1)
  count = num_examples if limit is None else min(limit, num_examples)
  if buffer_size >= num_examples:
    return rng.permutation(num_examples)[:count]
  buffer = list(range(buffer_size))
  next_input = buffer_size
  order = np.empty(count, np.int64)
  for position in range(count):
    slot = int(rng.integers(len(buffer)))
    order[position] = buffer[slot]
    if next_input < num_examples:
      buffer[slot] = next_input
      next_input += 1
    else:
      buffer[slot] = buffer[-1]
      buffer.pop()
  return order


def client_example_order(num_examples: int, *, epochs: int,
                         max_examples: int | None, shuffle_buffer: int,
                         rng: np.random.Generator) -> np.ndarray:
  """Indices of a client's examples in the order TFF's preprocessing uses.

  shuffle (re-drawn every epoch: tf.data's reshuffle_each_iteration), repeat
  `epochs` times, take `max_examples` (None: all).

  Args:
    num_examples: The client's number of examples n.
    epochs: Passes over the data, >= 1.
    max_examples: Examples kept, >= 1; None for all n * epochs.
    shuffle_buffer: tf.data's shuffle buffer, >= 1.
    rng: numpy Generator of the shuffles.

  Returns:
    int64 [min(max_examples, n * epochs)] indices in [0, n).

  Raises:
    ValueError: `epochs`, `max_examples` or `shuffle_buffer` is < 1.
  """
  epochs = validation.check_int('epochs', epochs, low=1)
  if max_examples is not None:
    max_examples = validation.check_int('max_examples', max_examples, low=1)
  orders = []
  remaining = num_examples * epochs if max_examples is None else max_examples
  for _ in range(epochs):
    if remaining <= 0:
      break
    order = shuffled_order(num_examples, shuffle_buffer, rng, remaining)
    orders.append(order)
    remaining -= order.size
  return np.concatenate(orders) if orders else np.zeros(0, np.int64)


@dataclasses.dataclass(frozen=True)
class RoundBatches:
  """The padded batches of one round's clients.

  Attributes:
    inputs: [slots, max_batches, batch_size, ...] model inputs.
    labels: [slots, max_batches, batch_size, ...] targets.
    example_mask: float32 [slots, max_batches, batch_size]; 1 for real
      examples. A batch without any is skipped (no local step).
    client_mask: float32 [slots]; 1 for the round's clients, 0 for padding
      slots (which contribute nothing to the round).
  """
  inputs: np.ndarray
  labels: np.ndarray
  example_mask: np.ndarray
  client_mask: np.ndarray


def max_batches_for(max_examples: int, batch_size: int) -> int:
  """Batches of a client that uses `max_examples` examples: ceil(n / b).

  Args:
    max_examples: Examples the client uses, n >= 0.
    batch_size: Examples per batch, b >= 1.

  Returns:
    ceil(n / b).
  """
  return math.ceil(max_examples / batch_size)


def examples_used(arrays: client_arrays.ClientArrays, *, epochs: int,
                  max_examples: int | None) -> np.ndarray:
  """Each client's examples in a round: its size x epochs, capped.

  Args:
    arrays: the clients.
    epochs: local epochs per round.
    max_examples: the per-client cap, or None.

  Returns:
    int64 [clients].
  """
  sizes = arrays.client_sizes() * epochs
  if max_examples is not None:
    sizes = np.minimum(sizes, max_examples)
  return sizes


def batches_needed(arrays: client_arrays.ClientArrays, clients: Sequence[int],
                   *, batch_size: int, epochs: int,
                   max_examples: int | None) -> int:
  """The most batches any of `clients` uses in a round (>= 1).

  Args:
    arrays: The split the clients come from.
    clients: Client indices into `arrays`.
    batch_size: Examples per batch, >= 1.
    epochs: Local passes over each client's data.
    max_examples: Cap on the examples a client uses; None for no cap.

  Returns:
    The number of batches, >= 1.
  """
  sizes = examples_used(arrays, epochs=epochs, max_examples=max_examples)[
      np.asarray(clients, np.int64)]
  return max_batches_for(int(sizes.max(initial=1)), batch_size)


@dataclasses.dataclass(frozen=True)
class RoundRows:
  """The rows of one round's client batches in the split (not yet gathered).

  What the device gathers a round's batches from when the split is resident
  on it (`round_engine.RoundEngine.upload`): `gather_rows` of these is the
  round's `RoundBatches`.

  Attributes:
    rows: int64 [slots, max_batches, batch_size], each example's row in the
      split's features; -1 where there is no example.
    example_mask: float32 [slots, max_batches, batch_size], rows >= 0.
    client_mask: float32 [slots], as `RoundBatches.client_mask`.
  """
  rows: np.ndarray
  example_mask: np.ndarray
  client_mask: np.ndarray


def client_rows(arrays: client_arrays.ClientArrays,
                clients: Sequence[int], *,
                batch_size: int, epochs: int, max_examples: int | None,
                rng: np.random.Generator,
                shuffle_buffer: int | None = None,
                num_slots: int | None = None,
                max_batches: int | None = None) -> RoundRows:
  """The rows of `client_batches`'s examples (same arguments, same draws).

  Args:
    arrays: The split the clients come from.
    clients: Client indices, one slot each, in order.
    batch_size: Examples per local step, >= 1.
    epochs: Local passes over each client's data, >= 1.
    max_examples: Cap on the examples a client uses, >= 1; None for no cap.
    rng: numpy Generator of the shuffles.
    shuffle_buffer: tf.data shuffle buffer, >= 1; None for the kind's default.
    num_slots: Client slots of the result (>= len(clients)); None for
      len(clients).
    max_batches: Batches per slot; None for the most any client needs.

  Returns:
    The rows, [num_slots, max_batches, batch_size].

  Raises:
    ValueError: as `client_batches`.
  """
  batch_size = validation.check_int('batch_size', batch_size, low=1)
  if shuffle_buffer is None:
    shuffle_buffer = DEFAULT_SHUFFLE_BUFFER[arrays.kind]
  clients = [validation.check_int('clients[i]', c, low=0) for c in clients]
  if any(c >= arrays.num_clients for c in clients):
    raise ValueError(f'clients must be indices in [0, {arrays.num_clients}); '
                     f'got {clients}.')
  num_slots = len(clients) if num_slots is None else validation.check_int(
      'num_slots', num_slots, low=len(clients))
  sizes = arrays.client_sizes()
  orders = [
      arrays.offsets[c] + client_example_order(
          int(sizes[c]), epochs=epochs, max_examples=max_examples,
          shuffle_buffer=shuffle_buffer, rng=rng) for c in clients
  ]
  needed = max([max_batches_for(o.size, batch_size) for o in orders] + [1])
  if max_batches is None:
    max_batches = needed
  elif validation.check_int('max_batches', max_batches, low=1) < needed:
    raise ValueError(f'max_batches must be >= {needed}, the batches a client '
                     f'of this round needs; got {max_batches}.')
  rows = np.full((num_slots, max_batches * batch_size), -1, np.int64)
  for slot, order in enumerate(orders):
    rows[slot, :order.size] = order
  rows = rows.reshape(num_slots, max_batches, batch_size)
  client_mask = np.zeros(num_slots, np.float32)
  client_mask[:len(clients)] = 1.0
  return RoundRows(rows=rows, example_mask=(rows >= 0).astype(np.float32),
                   client_mask=client_mask)


def gather_rows(arrays: client_arrays.ClientArrays,
                rows: RoundRows) -> RoundBatches:
  """The batches at `rows` (row 0's example where there is none, masked).

  Args:
    arrays: The split `rows` index into.
    rows: The round's rows (`client_rows`).

  Returns:
    The round's batches, inputs and labels from
    `client_arrays.model_inputs`.
  """
  index = np.maximum(rows.rows, 0)
  # Gather through the sorted distinct rows: one pass over memory-mapped data.
  unique, position = np.unique(index.reshape(-1), return_inverse=True)
  gathered = {
      name: np.asarray(array[unique])[position.reshape(-1)].reshape(
          index.shape + array.shape[1:])
      for name, array in arrays.features.items()
  }
  inputs, labels = client_arrays.model_inputs(arrays.kind, gathered)
  return RoundBatches(inputs=inputs, labels=labels,
                      example_mask=rows.example_mask,
                      client_mask=rows.client_mask)


def client_batches(arrays: client_arrays.ClientArrays,
                   clients: Sequence[int], *,
                   batch_size: int, epochs: int, max_examples: int | None,
                   rng: np.random.Generator,
                   shuffle_buffer: int | None = None,
                   num_slots: int | None = None,
                   max_batches: int | None = None) -> RoundBatches:
  """Batches of the clients `clients` (indices into `arrays`) for one round.

  Args:
    arrays: the split the clients come from.
    clients: client indices, one slot each, in order.
    batch_size: examples per local step (the last batch may be partial).
    epochs: local passes over each client's data.
    max_examples: cap on the examples a client uses, after repeating for the
      epochs (TFF's `ClientSpec.max_elements`); None for no cap.
    rng: numpy Generator of the shuffles.
    shuffle_buffer: tf.data shuffle buffer; None for the kind's default
      (DEFAULT_SHUFFLE_BUFFER); 1 keeps the stored order.
    num_slots: client slots of the result (>= len(clients)); the extra ones are
      masked out. Fixed slot and batch counts keep one compiled round for all
      rounds and let the client axis divide evenly over devices.
    max_batches: batches per slot; default the most any client needs.

  Returns:
    The round's batches, [num_slots, max_batches, batch_size, ...].

  Raises:
    ValueError: a count is out of range, or a client needs more than
      `max_batches` batches.
  """
  return gather_rows(arrays, client_rows(
      arrays, clients, batch_size=batch_size, epochs=epochs,
      max_examples=max_examples, rng=rng, shuffle_buffer=shuffle_buffer,
      num_slots=num_slots, max_batches=max_batches))


def micro_batches(batches: RoundBatches | RoundRows, micro_batch: int
                  ) -> RoundBatches | RoundRows:
  """`batches` with every batch cut into micro-batches of `micro_batch`.

  A batch of b examples becomes g = b / micro_batch micro-batches in turn
  (a reshape: [slots, batches, b, ...] to [slots, batches x g, micro_batch,
  ...]). A client's examples fill its batches in order, so its non-empty
  micro-batches are a prefix of its slot, and micro-batch i belongs to its
  batch i // g: `packing` and `packed_batches` lay micro-batches out as they
  lay batches out (`fedavg.packed_round`'s `micro_per_batch`).

  Args:
    batches: A round's batches or rows.
    micro_batch: Examples per micro-batch; divides the batch size.

  Returns:
    The same type, batch size `micro_batch`.

  Raises:
    ValueError: `micro_batch` does not divide the batch size.
  """
  slots, num_batches, batch_size = batches.example_mask.shape
  micro_batch = validation.check_int('micro_batch', micro_batch, low=1)
  if batch_size % micro_batch:
    raise ValueError(f'micro_batch must divide the batch size {batch_size};'
                     f' got {micro_batch}.')
  shape = (slots, num_batches * (batch_size // micro_batch), micro_batch)

  def cut(array: np.ndarray) -> np.ndarray:
    return array.reshape(shape + array.shape[3:])

  if isinstance(batches, RoundRows):
    return RoundRows(rows=cut(batches.rows),
                     example_mask=cut(batches.example_mask),
                     client_mask=batches.client_mask)
  return RoundBatches(inputs=cut(batches.inputs), labels=cut(batches.labels),
                      example_mask=cut(batches.example_mask),
                      client_mask=batches.client_mask)
