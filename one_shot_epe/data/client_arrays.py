"""Federated data as numpy arrays: the on-disk format both engines read.

TFF's SQLite files are converted to this format where TFF is installed
(`one_shot_epe.tff_engine.tasks.export_arrays`); the JAX engine reads it
(`one_shot_epe.jax_engine.data` batches a round's clients from it), and the
synthetic stand-ins of EMNIST and StackOverflow are generated in it here, for
both engines (the TFF engine's clients read them:
`one_shot_epe.tff_engine.tasks.synthetic`).

Format (`ClientArrays.save` / `load`): a directory per split holding one .npy
file per array, so `load` can memory-map the 2 GB of EMNIST or the ~6 GB of
StackOverflow instead of reading them: `offsets.npy` (int64 [clients + 1];
client i owns examples offsets[i]:offsets[i+1]), `client_ids.npy` (str), one
file per feature, and `arrays.json` naming the kind and the features.

* kind 'emnist': features `pixels` float32 [n, 28, 28] and `label` int32 [n]
  (TFF's EMNIST elements; also Fashion-MNIST's, as the TFF path's task maps
  them: `fashion_mnist.client_arrays_of`).
* kind 'stackoverflow': feature `tokens` [n, sequence_length + 1], each
  sentence as TFF's `word_prediction_preprocessing` maps it before batching:
  [bos] + word ids of the first `sequence_length` words (+ [eos] if shorter),
  padded with 0. Model inputs are tokens[:, :-1], targets tokens[:, 1:].
"""

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.runtime import bounded_reads

__all__ = ['CLIENT_SIZE_LAWS', 'ClientArrays', 'EMNIST_CLASSES',
           'EMNIST_WRITER_SIZES', 'FEATURES', 'IMAGE_SIZE', 'KINDS',
           'SEQUENCE_LENGTH', 'SPLITS', 'STACKOVERFLOW_USER_SIZES',
           'SYNTHETIC_CLIENT_BYTES', 'SYNTHETIC_EXAMPLE_BYTES', 'SpecialTokens',
           'client_sizes', 'emnist_templates', 'encode_sentence', 'model_inputs',
           'numbered_client_ids', 'special_tokens', 'synthetic_bytes',
           'synthetic_emnist', 'synthetic_stackoverflow']

KINDS = ('emnist', 'stackoverflow')
FEATURES = {'emnist': ('pixels', 'label'), 'stackoverflow': ('tokens',)}
EMNIST_CLASSES = 62
IMAGE_SIZE = 28
SEQUENCE_LENGTH = 20
_MANIFEST = 'arrays.json'
_FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """Token ids TFF adds to a vocabulary (`get_special_tokens`).

  Word of rank r (0-based) has id r + 1; 0 pads; out-of-vocabulary words hash
  to vocab_size + 1 + bucket; then beginning and end of sentence.
  """
  pad: int
  oov: tuple[int, ...]
  bos: int
  eos: int


@validation.arguments('vocab_size', num_oov_buckets=validation.Int(1))
def special_tokens(vocab_size: int, num_oov_buckets: int = 1) -> SpecialTokens:
  """TFF's special token ids for a vocabulary of `vocab_size` words.

  Args:
    vocab_size: The number of words in the vocabulary.
    num_oov_buckets: The out-of-vocabulary buckets.

  Returns:
    The pad, oov, bos and eos ids.
  """
  return SpecialTokens(
      pad=0, oov=tuple(vocab_size + 1 + n for n in range(num_oov_buckets)),
      bos=vocab_size + num_oov_buckets + 1,
      eos=vocab_size + num_oov_buckets + 2)


def model_inputs(kind: str, features: Mapping[str, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
  """(inputs, labels) of the model from a kind's features (any leading axes).

  EMNIST: (pixels, label). StackOverflow: (tokens[..., :-1], tokens[..., 1:]),
  TFF's `split_input_target`. Every engine feeds its model these.

  Args:
    kind: 'emnist' or 'stackoverflow' (`KINDS`).
    features: The kind's feature arrays: 'pixels' and 'label' (EMNIST) or
      'tokens' (StackOverflow, [..., sequence length + 1]).

  Returns:
    (inputs, labels), views of `features`' arrays.

  Raises:
    ValueError: `kind` is not one of `KINDS`.
  """
  if validation.check_choice('kind', kind, KINDS) == 'emnist':
    return features['pixels'], features['label']
  tokens = features['tokens']
  return tokens[..., :-1], tokens[..., 1:]


def encode_sentence(word_ids: Sequence[int], tokens: SpecialTokens,
                    sequence_length: int = SEQUENCE_LENGTH) -> np.ndarray:
  """One sentence as TFF's `to_ids` + padding: int32 [sequence_length + 1].

  `word_ids` are the words' ids (rank + 1, or an oov id); the first
  `sequence_length` are kept, and [eos] follows when fewer.

  Args:
    word_ids: The sentence's word ids.
    tokens: The vocabulary's special tokens.
    sequence_length: The model's sequence length.

  Returns:
    [bos], the words, [eos] if room, padding: sequence_length + 1 ids.
  """
  kept = list(word_ids[:sequence_length])
  if len(kept) < sequence_length:
    kept.append(tokens.eos)
  row = np.zeros(sequence_length + 1, np.int32)
  row[0] = tokens.bos
  row[1:1 + len(kept)] = kept
  return row


@validation.fields(kind=validation.Choice(KINDS))
@dataclasses.dataclass(frozen=True, eq=False)
class ClientArrays:
  """One split of federated data: every client's examples, contiguous.

  Attributes:
    kind: 'emnist' or 'stackoverflow' (which features, see the module doc).
    client_ids: str [clients].
    offsets: int64 [clients + 1], non-decreasing from 0 to n.
    features: name -> array with n rows.
  """
  kind: str
  client_ids: np.ndarray
  offsets: np.ndarray
  features: Mapping[str, np.ndarray]

  def __post_init__(self):
    offsets = np.asarray(self.offsets)
    if (offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or
        np.any(np.diff(offsets) < 0)):
      raise ValueError('offsets must be a non-decreasing 1-D array starting '
                       'at 0.')
    if len(self.client_ids) != offsets.size - 1:
      raise ValueError(f'client_ids must have {offsets.size - 1} entries (one '
                       f'per client); got {len(self.client_ids)}.')
    if set(self.features) != set(FEATURES[self.kind]):
      raise ValueError(f'features of kind {self.kind!r} must be '
                       f'{FEATURES[self.kind]}; got {tuple(self.features)}.')
    for name, array in self.features.items():
      if len(array) != offsets[-1]:
        raise ValueError(f'feature {name!r} must have {offsets[-1]} rows; got '
                         f'{len(array)}.')

  @property
  def num_clients(self) -> int:
    """Number of clients."""
    return len(self.client_ids)

  def client_sizes(self) -> np.ndarray:
    """Number of examples of every client, int64 [clients].

    Returns:
      The differences of consecutive offsets.
    """
    return np.diff(self.offsets)

  def save(self, directory: str) -> None:
    """Writes the split as .npy files plus a manifest into `directory`.

    Args:
      directory: Created if missing.
    """
    os.makedirs(directory, exist_ok=True)
    np.save(os.path.join(directory, 'offsets.npy'),
            np.asarray(self.offsets, np.int64))
    np.save(os.path.join(directory, 'client_ids.npy'),
            np.asarray(self.client_ids, str))
    for name, array in self.features.items():
      np.save(os.path.join(directory, f'{name}.npy'), np.asarray(array))
    with open(os.path.join(directory, _MANIFEST), 'w') as f:
      json.dump({'format': _FORMAT_VERSION, 'kind': self.kind,
                 'features': list(self.features)}, f)

  @classmethod
  def load(cls, directory: str, mmap: bool = True) -> 'ClientArrays':
    """Reads a split written by `save`; features memory-mapped if `mmap`.

    Args:
      directory: The directory `save` wrote.
      mmap: Whether to memory-map the features instead of reading them.

    Returns:
      The split.

    Each file is checked against its limit before it is read or mapped
    (`bounded_reads.CLIENT_ARRAYS_MANIFEST`, `CLIENT_ARRAYS_INDEX`,
    `CLIENT_ARRAYS_FEATURE`; a .npy's header must fit its file).

    Raises:
      FileNotFoundError: the directory is missing.
      bounded_reads.InputRefused: a file is missing, not a regular file, past
        its limit or not of its format.
      ValueError: the manifest is not this format's.
    """
    if not os.path.isdir(directory):
      raise FileNotFoundError(f'{directory!r} is not a directory of client '
                              'arrays.')
    manifest_path = os.path.join(directory, _MANIFEST)
    try:
      manifest = json.loads(bounded_reads.read_text(
          manifest_path, bounded_reads.CLIENT_ARRAYS_MANIFEST, '--data_dir'))
    except json.JSONDecodeError as error:
      raise ValueError(f'{manifest_path} is not JSON: {error}') from None
    if not isinstance(manifest, dict) or manifest.get(
        'format') != _FORMAT_VERSION:
      raise ValueError(f'{manifest_path} is not a client-array manifest of '
                       f'format {_FORMAT_VERSION}.')

    def read(name: str, limit: bounded_reads.Limit,
             mode: str | None = None) -> np.ndarray:
      path = os.path.join(directory, f'{name}.npy')
      bounded_reads.check_npy(path, limit, '--data_dir')
      return np.load(path, mmap_mode=mode)

    return cls(
        kind=manifest['kind'],
        client_ids=read('client_ids', bounded_reads.CLIENT_ARRAYS_INDEX),
        offsets=read('offsets', bounded_reads.CLIENT_ARRAYS_INDEX),
        features={name: read(name, bounded_reads.CLIENT_ARRAYS_FEATURE,
                             'r' if mmap else None)
                  for name in manifest['features']})


# Client sizes of the real training splits (TFF's simulation datasets), for
# synthetic stand-ins whose padding is the real data's:
# * EMNIST-62 by writer: 3,400 writers, 671,585 examples (mean 197.5), at most
#   418 per writer (TFF's emnist_preprocessing.MAX_CLIENT_DATASET_SIZE). The
#   stand-in draws N(mean, 75^2) clipped to [10, 418]; the spread is an
#   assumption (no published figure), the mean and maximum are the data's.
# * StackOverflow by user: 342,477 users, 135,818,730 sentences (mean 396.6),
#   heavy-tailed. The stand-in draws a lognormal with that mean and a median
#   of 60 sentences (sigma = sqrt(2 ln(396.6 / 60)) = 1.94; the median is an
#   assumption); runs cap a client's examples (--max_examples_per_client;
#   256 in Reddi et al. 2020's setup).
EMNIST_WRITER_SIZES = dict(mean=197.5, std=75.0, low=10, high=418)
STACKOVERFLOW_USER_SIZES = dict(mean=396.6, median=60.0)
CLIENT_SIZE_LAWS = ('equal', 'realistic')
# The splits of a synthetic stand-in: one task structure (EMNIST's class
# templates, StackOverflow's vocabulary law), other examples per split.
SPLITS = ('train', 'test', 'heldout')


@validation.arguments('num_clients', 'examples_per_client',
                      kind=validation.Choice(KINDS),
                      law=validation.Choice(CLIENT_SIZE_LAWS))
def client_sizes(kind: str, num_clients: int, examples_per_client: int,
                 law: str = 'equal', seed: int = 0) -> np.ndarray:
  """int64 [num_clients] examples per client of a synthetic stand-in.

  'equal': `examples_per_client` each; 'realistic': the kind's real law (see
  EMNIST_WRITER_SIZES and STACKOVERFLOW_USER_SIZES above), rescaled to a mean
  of `examples_per_client`.

  Args:
    kind: 'emnist' or 'stackoverflow' (whose real law 'realistic' follows).
    num_clients: The number of clients.
    examples_per_client: The mean client size.
    law: 'equal' or 'realistic'.
    seed: Seed of the 'realistic' draw.

  Returns:
    Each client's number of examples.
  """
  if law == 'equal':
    return np.full(num_clients, examples_per_client, np.int64)
  rng = np.random.default_rng([seed, 2])
  if kind == 'emnist':
    law = EMNIST_WRITER_SIZES
    sizes = np.clip(rng.normal(law['mean'], law['std'], num_clients),
                    law['low'], law['high'])
  else:
    law = STACKOVERFLOW_USER_SIZES
    sigma = math.sqrt(2.0 * math.log(law['mean'] / law['median']))
    sizes = rng.lognormal(math.log(law['median']), sigma, num_clients)
  sizes = sizes * examples_per_client / law['mean']
  return np.maximum(1, np.rint(sizes)).astype(np.int64)


def _split_stream(seed: int, kind_code: int, split: str
                  ) -> np.random.Generator:
  """The draws of a stand-in's split: the kind's stream of `seed`; its own
  sub-stream (seed, kind, split) for every split but 'train'."""
  if split == 'train':
    return np.random.default_rng([seed, kind_code])
  return np.random.default_rng([seed, kind_code, SPLITS.index(split)])


def _draw_templates(rng: np.random.Generator) -> np.ndarray:
  """62 templates of three random pen strokes each, drawn from `rng`."""
  templates = np.zeros((EMNIST_CLASSES, IMAGE_SIZE, IMAGE_SIZE), np.float32)
  for label in range(EMNIST_CLASSES):
    for _ in range(3):
      position = rng.uniform(6, 21, size=2)
      angle = rng.uniform(0, 2 * math.pi)
      for _ in range(14):
        angle += rng.normal(0, 0.5)
        position = np.clip(position + [math.cos(angle), math.sin(angle)], 4,
                           22)
        row, col = int(position[0]), int(position[1])
        templates[label, row:row + 2, col:col + 2] = 1.0
  return templates


def emnist_templates(seed: int) -> np.ndarray:
  """The class templates of `synthetic_emnist`'s every split of `seed`.

  Args:
    seed: The stand-in's seed.

  Returns:
    float32 [62, 28, 28]: 1 where the class's three pen strokes put ink, 0
    elsewhere.
  """
  return _draw_templates(_split_stream(seed, 0, 'train'))


@validation.arguments(split=validation.Choice(SPLITS))
def synthetic_emnist(num_clients: int, examples_per_client: int,
                     seed: int = 0, sizes: str = 'equal',
                     split: str = 'train') -> ClientArrays:
  """Synthetic EMNIST-62 in numpy, with the structure of the real data.

  Both engines train on these arrays (the TFF engine reads them as its
  clients' datasets: `tff_engine.tasks.synthetic`). Every class has a
  template of three random pen strokes, drawn from `seed` alone, so that
  every split of a seed has the same classes (`emnist_templates`); an
  example is its class template shifted by up to one pixel, drawn with the
  writer's ink strength in [0.6, 1] plus N(0, 0.2^2) pixel noise on a white
  (1.0) background, clipped to [0, 1]; labels uniform over the 62 classes.
  The training split's examples continue the stream of the templates; every
  other split draws its own (`SPLITS`). `sizes`: the law of the clients'
  sizes (`client_sizes`), of mean `examples_per_client`.

  Args:
    num_clients: The number of clients.
    examples_per_client: The mean client size.
    seed: Seed of every draw.
    sizes: 'equal' or 'realistic'.
    split: One of `SPLITS`: which examples.

  Returns:
    The clients' 28 x 28 images and labels.
  """
  counts = client_sizes('emnist', num_clients, examples_per_client, sizes,
                        seed)
  stream = _split_stream(seed, 0, 'train')
  templates = _draw_templates(stream)
  rng = stream if split == 'train' else _split_stream(seed, 0, split)
  n = int(counts.sum())
  labels = rng.integers(0, EMNIST_CLASSES, n).astype(np.int32)
  shifts = rng.integers(-1, 2, (n, 2))
  ink = np.repeat(rng.uniform(0.6, 1.0, num_clients), counts)
  strokes = np.stack([
      np.roll(templates[label], tuple(shift), axis=(0, 1))
      for label, shift in zip(labels, shifts)
  ])
  noise = rng.normal(0.0, 0.2, (n, IMAGE_SIZE, IMAGE_SIZE))
  pixels = np.clip(1.0 - ink[:, None, None] * strokes + noise, 0.0, 1.0)
  return ClientArrays(
      kind='emnist', client_ids=numbered_client_ids(num_clients),
      offsets=np.concatenate([[0], np.cumsum(counts)]),
      features={'pixels': pixels.astype(np.float32), 'label': labels})


@validation.arguments(split=validation.Choice(SPLITS))
def synthetic_stackoverflow(num_clients: int, examples_per_client: int,
                            vocab_size: int = 10_000, seed: int = 0,
                            sequence_length: int = SEQUENCE_LENGTH,
                            sizes: str = 'equal',
                            split: str = 'train') -> ClientArrays:
  """Synthetic StackOverflow sentences in numpy, already as token ids.

  Both engines train on these arrays (the TFF engine reads them back as
  sentences of the words 'w0', 'w1', ...: `tff_engine.tasks.synthetic`).
  Every split follows one law of the vocabulary: sentences of 4 to 25
  words; the first word's rank is Zipf-distributed over the vocabulary,
  each next word 1 to 3 ranks further (mod vocab_size); rank r has id
  r + 1, and sentences are encoded as TFF does (`encode_sentence`, which
  keeps the first `sequence_length` words). Each split draws its own
  sentences (`SPLITS`). `sizes`: the law of the clients' sizes
  (`client_sizes`), of mean `examples_per_client`.

  Args:
    num_clients: The number of clients.
    examples_per_client: The mean number of sentences per client.
    vocab_size: The vocabulary's size.
    seed: Seed of every draw.
    sequence_length: The model's sequence length.
    sizes: 'equal' or 'realistic'.
    split: One of `SPLITS`: which sentences.

  Returns:
    The clients' encoded sentences.
  """
  counts = client_sizes('stackoverflow', num_clients, examples_per_client,
                        sizes, seed)
  tokens = special_tokens(vocab_size)
  rng = _split_stream(seed, 1, split)
  zipf = 1.0 / np.arange(1, vocab_size + 1)
  zipf /= zipf.sum()
  n = int(counts.sum())
  lengths = rng.integers(4, 26, n)
  firsts = rng.choice(vocab_size, n, p=zipf)
  rows = []
  for length, first in zip(lengths, firsts):
    steps = rng.integers(1, 4, length - 1)
    ranks = (first + np.concatenate([[0], np.cumsum(steps)])) % vocab_size
    rows.append(encode_sentence(list(ranks + 1), tokens, sequence_length))
  return ClientArrays(
      kind='stackoverflow', client_ids=numbered_client_ids(num_clients),
      offsets=np.concatenate([[0], np.cumsum(counts)]),
      features={'tokens': np.stack(rows)})


# Host memory of one synthetic example while its split is drawn (measured
# orders of magnitude): an EMNIST image's float64 strokes, noise and pixels
# before its float32 copy; a StackOverflow sentence's row of tokens and the
# Python list holding it.
SYNTHETIC_EXAMPLE_BYTES = {'emnist': 24 * 1024, 'stackoverflow': 512}
# Per synthetic client: its id, its offset and its place in a permutation.
SYNTHETIC_CLIENT_BYTES = 128


def synthetic_bytes(kind: str, num_clients: int,
                    examples_per_client: float, vocab_size: int) -> float:
  """Host memory of a synthetic stand-in's splits, before any is drawn.

  The training split and the test (and held-out) splits of an eighth of
  its examples each (`task_data.synthetic_split`), at
  `SYNTHETIC_EXAMPLE_BYTES` per example and `SYNTHETIC_CLIENT_BYTES` per
  client and split; StackOverflow's vocabulary law adds 8 bytes a word.
  An estimate for a run's size check (`design.run_size`), in arithmetic
  only: nothing is allocated.

  Args:
    kind: One of `KINDS`.
    num_clients: The stand-in's training clients.
    examples_per_client: Their mean examples.
    vocab_size: The vocabulary's size (StackOverflow).

  Returns:
    The estimate in bytes.
  """
  splits = 1.0 + len(SPLITS[1:]) / 8.0
  per_client = (examples_per_client * SYNTHETIC_EXAMPLE_BYTES[kind] +
                SYNTHETIC_CLIENT_BYTES)
  vocabulary = 8.0 * vocab_size if kind == 'stackoverflow' else 0.0
  return splits * num_clients * per_client + vocabulary


def numbered_client_ids(num_clients: int) -> np.ndarray:
  """Ids '0', '1', ... (zero-padded to one width), as TFF's client data's.

  Args:
    num_clients: The number of clients.

  Returns:
    str [num_clients].
  """
  width = len(str(num_clients - 1))
  return np.asarray([f'{i:0{width}d}' for i in range(num_clients)])
