"""JAX calls whose spelling differs between jax 0.4.14 and the newest jax.

The engine runs in this project's .venv (jax 0.4.14, pinned by TFF 0.87) and on
accelerator machines with the newest jax. Everything else it uses
(jax.numpy, jax.lax, jax.random's split/fold_in/normal, jax.tree_util,
jax.sharding) is spelled the same in both.
"""

import jax
import numpy as np

try:  # The newest jax.
  from jax.extend.random import threefry_2x32  # pylint: disable=g-import-not-at-top
except ImportError:  # jax 0.4.14.
  from jax.prng import threefry_2x32  # pylint: disable=g-import-not-at-top

__all__ = ['prng_key', 'threefry_2x32']


def prng_key(seed: int) -> jax.Array:
  """A PRNG key from an integer seed.

  `jax.random.key` (typed keys) appeared in jax 0.4.16; older versions only
  have `jax.random.PRNGKey`, which newer versions deprecate.

  Args:
    seed: The seed, a Python or numpy int.

  Returns:
    A typed key (`jax.random.key`) where available, else a uint32 [2] raw key.

  Raises:
    TypeError: `seed` is not an int (a bool included).
  """
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
    raise TypeError(f'seed must be an int; got {type(seed).__name__}.')
  make = getattr(jax.random, 'key', None) or jax.random.PRNGKey
  return make(int(seed))
