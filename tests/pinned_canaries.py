"""The data canaries' bytes both engines' tests pin (not collected).

sha256 of canary 0's model inputs (as float64 bytes) then labels (as int64
bytes), canary seed 0: 4 EMNIST-62 images, and 3 sentences of a 100-word
vocabulary. `jax_engine_data_canaries_test.py` checks the JAX engine's
inputs against them and `tff_engine_data_canaries_test.py` the TFF
engine's, so both engines train and score the same examples.
"""

import hashlib

import numpy as np

EMNIST_DIGEST = '9dc150b1da78518d'
TEXT_DIGEST = '01ec56a9d2c3903b'


def digest(inputs: np.ndarray, labels: np.ndarray) -> str:
  """The first 16 hex digits of the examples' sha256, as the tests pin it."""
  return hashlib.sha256(np.asarray(inputs, np.float64).tobytes() +
                        np.asarray(labels, np.int64).tobytes()).hexdigest()[:16]
