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
  words, encoded as the task's sentences are (`client_arrays.encode_sentence`:
  [bos], the words, no [eos] at full length), sampled from a bigram model
  of the task's training sentences at a temperature >= 0.8 (`BigramText`:
  each word drawn from the words that followed the previous one, weighted
  by count^(1/temperature)), or without a model uniformly from the
  vocabulary's ids (1..vocab_size): either way a canary is inspectable (its
  words are the vocabulary's, in orders the text uses) and unlikely to
  occur naturally (the chance that a sampled sentence of 20 words is one
  of the training sentences is small; uniform words: vocab_size^-20).

Canaries are returned as `client_arrays.ClientArrays` of the task's kind,
one client per canary named 'canary-<id>', ready to be appended to the
training clients (`append_clients`). numpy only.
"""

import dataclasses

import numpy as np

from one_shot_epe import validation
from one_shot_epe.data import client_arrays

__all__ = ['BigramText', 'CANARY_CLIENT_PREFIX', 'MIN_TEMPERATURE',
           'append_clients', 'canary_arrays', 'canary_client_ids',
           'examples_per_canary', 'select_clients']

# The lowest temperature text canaries are sampled at: cooler samples
# approach the training text's most common sentences.
MIN_TEMPERATURE = 0.8

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


@dataclasses.dataclass(frozen=True, eq=False)
class BigramText:
  """A bigram model of a task's training sentences, for text canaries.

  Counts, over the encoded training sentences, each in-vocabulary word
  (ids 1..vocab_size) after the sentence's start ([bos]) or after another
  in-vocabulary word; out-of-vocabulary words, [eos] and padding are not
  counted. Successors are kept as compressed rows: state 0 is the start,
  state w the word w.

  Attributes:
    vocab_size: The vocabulary's size.
    starts: int64 [vocab_size + 2]: state s's successors are
      `successors[starts[s]:starts[s + 1]]`.
    successors: int64, the successor words, ascending within a state.
    counts: int64, how often each followed its state.
    unigram: int64 [vocab_size + 1], each word's count (index 0 unused):
      the fallback after a word nothing in-vocabulary followed.
  """
  vocab_size: int
  starts: np.ndarray
  successors: np.ndarray
  counts: np.ndarray
  unigram: np.ndarray

  @classmethod
  @validation.arguments('vocab_size')
  def fit(cls, tokens: np.ndarray, vocab_size: int) -> 'BigramText':
    """Counts the bigrams of encoded sentences.

    Args:
      tokens: int [n, sequence length + 1], the task's encoded training
        sentences ([bos], word ids, [eos], padding).
      vocab_size: The vocabulary's size (ids 1..vocab_size are words).

    Returns:
      The model.

    Raises:
      ValueError: `tokens` is not 2-D or holds no in-vocabulary word.
    """
    tokens = np.asarray(tokens, np.int64)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
      raise ValueError('tokens must be encoded sentences [n, length + 1]; got '
                       f'shape {tokens.shape}.')
    bos = client_arrays.special_tokens.unchecked(vocab_size).bos
    previous, following = tokens[:, :-1].ravel(), tokens[:, 1:].ravel()
    is_word = (following >= 1) & (following <= vocab_size)
    state = np.where(previous == bos, 0, previous)
    keep = is_word & ((previous == bos) | (
        (previous >= 1) & (previous <= vocab_size)))
    if not keep.any():
      raise ValueError('tokens hold no in-vocabulary word to model.')
    pairs, counts = np.unique(state[keep] * (vocab_size + 1) +
                              following[keep], return_counts=True)
    states, successors = np.divmod(pairs, vocab_size + 1)
    return cls(vocab_size=vocab_size,
               starts=np.searchsorted(states, np.arange(vocab_size + 2)),
               successors=successors, counts=counts.astype(np.int64),
               unigram=np.bincount(following[is_word],
                                   minlength=vocab_size + 1).astype(np.int64))

  def sample(self, rng: np.random.Generator, sentences: int, length: int,
             temperature: float) -> np.ndarray:
    """Sentences of `length` words, each drawn after the previous one.

    Word i + 1 is drawn from the words that followed word i (the first from
    those that began a sentence), with probability proportional to
    count^(1 / temperature); after a word nothing followed, from every
    word's count^(1 / temperature).

    Args:
      rng: The canary's generator.
      sentences: How many sentences.
      length: Words per sentence.
      temperature: >= MIN_TEMPERATURE.

    Returns:
      int64 [sentences, length] word ids in 1..vocab_size.
    """
    power = 1.0 / temperature
    fallback = np.cumsum(self.unigram[1:].astype(np.float64)**power)
    words = np.zeros((sentences, length), np.int64)
    for row in words:
      state = 0
      for i in range(length):
        low, high = self.starts[state], self.starts[state + 1]
        if high > low:
          cdf = np.cumsum(self.counts[low:high].astype(np.float64)**power)
          state = int(self.successors[low + np.searchsorted(
              cdf, rng.random() * cdf[-1], side='right')])
        else:
          state = 1 + int(np.searchsorted(
              fallback, rng.random() * fallback[-1], side='right'))
        row[i] = state
    return words


@validation.arguments(seed=validation.Int(0, 2**32 - 1),
                      kind=validation.Choice(client_arrays.KINDS),
                      examples_per_canary=_EXAMPLES,
                      num_labels=validation.Optional(validation.Int(2)),
                      vocab_size=validation.Optional(validation.Int(1)),
                      temperature=validation.Real(MIN_TEMPERATURE, 100.0))
def canary_arrays(seed: int, ids: np.ndarray, kind: str,
                  examples_per_canary: int, *, num_labels: int | None = None,
                  vocab_size: int | None = None,
                  images: np.ndarray | None = None,
                  text: BigramText | None = None,
                  temperature: float = 1.0) -> client_arrays.ClientArrays:
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
    text: Kind 'stackoverflow': the model the sentences are sampled from
      (`BigramText.fit` of the task's training sentences, its vocab_size
      the task's); None for words drawn uniformly.
    temperature: The text model's temperature, in [MIN_TEMPERATURE, 100].

  Returns:
    The canaries as client arrays of `kind`, in the order of `ids`.

  Raises:
    ValueError: an id is negative, the kind's `num_labels` or
      `vocab_size` is missing, the pool holds too few images, or the text
      model's vocabulary is not `vocab_size`.
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
  if text is not None and text.vocab_size != vocab_size:
    raise ValueError(f'text: a model of {text.vocab_size} words; the '
                     f'vocabulary has {vocab_size}.')
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
      shape = (examples_per_canary, client_arrays.SEQUENCE_LENGTH)
      words = (rng.integers(1, vocab_size + 1, shape) if text is None else
               text.sample(rng, *shape, temperature))
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


def examples_per_canary(canaries: client_arrays.ClientArrays) -> int:
  """How many examples each canary holds, the same for all (engines stack them).

  Args:
    canaries: Data canaries, one client each (`canary_arrays`).

  Returns:
    The examples of each (0 without canaries).

  Raises:
    ValueError: the canaries hold different numbers of examples.
  """
  sizes = np.diff(np.asarray(canaries.offsets, np.int64))
  if sizes.size and np.any(sizes != sizes[0]):
    raise ValueError('data canaries must hold equal numbers of examples; '
                     f'got {sorted(set(sizes.tolist()))}.')
  return int(sizes[0]) if sizes.size else 0


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
