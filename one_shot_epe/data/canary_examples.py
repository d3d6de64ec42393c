"""Data canaries' examples: what a canary client holds, pinned by (seed, id).

A data canary is a client whose examples nobody else holds and no task
would produce: it trains through the engine's real client path (local
training, the clip, the noise), so it can audit a deployment whose
aggregation cannot be touched, and its score is a black-box one, the final
model's loss on its examples (`reporting.privacy_report.data_canary_report`).
Canary j of canary seed s holds `examples_per_canary` examples drawn from
`numpy.random.default_rng([s, _TAG, j])`, the same arrays on every engine
and in every process:

* kind 'emnist' (images): images of the task's test split (`images`,
  drawn without replacement from the pool) or, without a pool, images of
  uniform random pixels in [0, 1); every label uniform over the task's
  classes, so nothing in an image predicts its label and only memorization
  lowers the loss (random-label canaries, Zhang et al. 2017);
* kind 'stackoverflow' (text): sentences of `client_arrays.SEQUENCE_LENGTH`
  words drawn uniformly from the vocabulary's ids (1..vocab_size), encoded
  as the task's sentences are (`client_arrays.encode_sentence`: [bos],
  the words, no [eos] at full length): a canary is inspectable (its words
  are the vocabulary's) and as unlikely to occur naturally as
  vocab_size^-20.

Canaries are returned as `client_arrays.ClientArrays` of the task's kind,
one client per canary named 'canary-<id>', ready to be appended to the
training clients (`append_clients`). numpy only.
"""

import numpy as np

from one_shot_epe import validation
from one_shot_epe.data import client_arrays

__all__ = ['CANARY_CLIENT_PREFIX', 'append_clients', 'canary_arrays',
           'canary_client_ids', 'select_clients']

# The prefix of a canary client's id: 'canary-<canary id>'.
CANARY_CLIENT_PREFIX = 'canary-'
# The spawn tag of data canaries' draws (distinct from the samplers' tags).
_TAG = 11
_EXAMPLES = validation.Int(1, 4096)


def canary_client_ids(ids: np.ndarray) -> np.ndarray:
  """The client ids of data canaries `ids`: 'canary-<id>'.

  Args:
    ids: The canaries' ids (seen 0..k-1, unseen from
      `canary_spec.UNSEEN_ID_OFFSET`).

  Returns:
    str [len(ids)].
  """
  return np.asarray([f'{CANARY_CLIENT_PREFIX}{int(i)}' for i in ids])


@validation.arguments(seed=validation.Int(0, 2**32 - 1),
                      kind=validation.Choice(client_arrays.KINDS),
                      examples_per_canary=_EXAMPLES,
                      num_labels=validation.Optional(validation.Int(2)),
                      vocab_size=validation.Optional(validation.Int(1)))
def canary_arrays(seed: int, ids: np.ndarray, kind: str,
                  examples_per_canary: int, *, num_labels: int | None = None,
                  vocab_size: int | None = None,
                  images: np.ndarray | None = None
                  ) -> client_arrays.ClientArrays:
  """The examples of data canaries `ids`, one client each.

  Args:
    seed: The canary seed (--canary_seed), in [0, 2^32).
    ids: The canaries' ids, non-negative integers.
    kind: The task's data kind, 'emnist' or 'stackoverflow'.
    examples_per_canary: Examples each canary holds, in [1, 4096].
    num_labels: The task's classes (kind 'emnist'), >= 2.
    vocab_size: The task's vocabulary size (kind 'stackoverflow'), >= 1.
    images: Kind 'emnist': the pool of images canaries take theirs from
      (the task's test split, float [n, 28, 28] with n >= examples_per_canary:
      each canary draws its own without replacement); None for images of
      random pixels.

  Returns:
    The canaries as client arrays of `kind`, in the order of `ids`.

  Raises:
    ValueError: an id is negative, the kind's `num_labels` or
      `vocab_size` is missing, or the pool holds too few images.
  """
  ids = np.asarray(ids, np.int64).reshape(-1)
  if ids.size and ids.min() < 0:
    raise ValueError(f'ids must be non-negative; got {int(ids.min())}.')
  size = client_arrays.IMAGE_SIZE
  if images is not None and (np.ndim(images) != 3 or
                             tuple(np.shape(images)[1:]) != (size, size) or
                             len(images) < examples_per_canary):
    raise ValueError(f'images must be at least {examples_per_canary} '
                     f'{size} x {size} images; got shape {np.shape(images)}.')
  rows = []
  for canary in ids:
    rng = np.random.default_rng([seed, _TAG, int(canary)])
    if kind == 'emnist':
      if num_labels is None:
        raise ValueError("num_labels is needed for kind 'emnist'.")
      if images is None:
        pixels = rng.random((examples_per_canary, size, size),
                            dtype=np.float32)
      else:
        chosen = rng.choice(len(images), examples_per_canary, replace=False)
        pixels = np.asarray(images[np.sort(chosen)], np.float32)
      rows.append({
          'pixels': pixels,
          'label': rng.integers(0, num_labels, examples_per_canary,
                                dtype=np.int32)})
    else:
      if vocab_size is None:
        raise ValueError("vocab_size is needed for kind 'stackoverflow'.")
      tokens = client_arrays.special_tokens.unchecked(vocab_size)
      words = rng.integers(1, vocab_size + 1, (
          examples_per_canary, client_arrays.SEQUENCE_LENGTH))
      rows.append({'tokens': np.stack([
          client_arrays.encode_sentence(sentence, tokens)
          for sentence in words]).astype(np.int32)})
  names = client_arrays.FEATURES[kind]
  features = {name: (np.concatenate([row[name] for row in rows]) if rows else
                     _empty(kind, name)) for name in names}
  return client_arrays.ClientArrays(
      kind=kind, client_ids=canary_client_ids(ids),
      offsets=np.arange(ids.size + 1, dtype=np.int64) * examples_per_canary,
      features=features)


def _empty(kind: str, name: str) -> np.ndarray:
  """A feature with no rows."""
  if kind == 'emnist':
    size = client_arrays.IMAGE_SIZE
    return (np.zeros((0, size, size), np.float32) if name == 'pixels' else
            np.zeros(0, np.int32))
  return np.zeros((0, client_arrays.SEQUENCE_LENGTH + 1), np.int32)


def append_clients(arrays: client_arrays.ClientArrays,
                   extra: client_arrays.ClientArrays
                   ) -> client_arrays.ClientArrays:
  """`arrays` with the clients of `extra` after its own (same kind).

  Client i < arrays.num_clients keeps its index; extra's client j becomes
  client arrays.num_clients + j.

  Args:
    arrays: The training clients.
    extra: The clients to append (e.g. `canary_arrays`).

  Returns:
    New client arrays (the features copied once).

  Raises:
    ValueError: the kinds differ.
  """
  if arrays.kind != extra.kind:
    raise ValueError(f'cannot append clients of kind {extra.kind!r} to '
                     f'{arrays.kind!r}.')
  total = int(arrays.offsets[-1])
  return client_arrays.ClientArrays(
      kind=arrays.kind,
      client_ids=np.concatenate([np.asarray(arrays.client_ids),
                                 np.asarray(extra.client_ids)]),
      offsets=np.concatenate([np.asarray(arrays.offsets, np.int64),
                              total + np.asarray(extra.offsets[1:],
                                                 np.int64)]),
      features={name: np.concatenate([np.asarray(arrays.features[name]),
                                      np.asarray(extra.features[name]).astype(
                                          np.asarray(arrays.features[name])
                                          .dtype)])
                for name in arrays.features})


def select_clients(arrays: client_arrays.ClientArrays,
                   count: int) -> client_arrays.ClientArrays:
  """The first `count` clients of `arrays` (e.g. the seen canaries).

  Args:
    arrays: The clients.
    count: How many to keep, in [0, arrays.num_clients].

  Returns:
    New client arrays of those clients.
  """
  count = validation.check_int('count', count, 0, arrays.num_clients)
  end = int(arrays.offsets[count])
  return client_arrays.ClientArrays(
      kind=arrays.kind, client_ids=np.asarray(arrays.client_ids)[:count],
      offsets=np.asarray(arrays.offsets[:count + 1], np.int64),
      features={name: np.asarray(array[:end])
                for name, array in arrays.features.items()})
