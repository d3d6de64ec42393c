"""Tests of one_shot_epe.jax_engine.optimizers against closed forms.

With a constant gradient g the TFF update rules have closed forms:
sgd moves by lr g per step; sgdm's accumulator after k steps is
g (1 - m^k) / (1 - m); adam's step t is lr g / (|g| + eps / sqrt(1 - b2^t)),
since its bias corrections cancel (a_t = g (1 - b1^t), p_t = g^2 (1 - b2^t)).
"""

import numpy as np
import pytest
import jax.numpy as jnp

from one_shot_epe.jax_engine import optimizers

STEPS = 4


def _run(optimizer, w0, g):
  params = (jnp.asarray(w0, jnp.float32),)
  state = optimizer.init(params)
  for _ in range(STEPS):
    state, params = optimizer.step(state, params, (jnp.asarray(g, jnp.float32),))
  return np.asarray(params[0], np.float64)


def test_sgd_and_sgdm_closed_forms():
  w0, g, lr, m = np.asarray([1.0, -2.0]), np.asarray([0.5, -3.0]), 0.1, 0.7
  np.testing.assert_allclose(_run(optimizers.Optimizer('sgd', lr), w0, g),
                             w0 - STEPS * lr * g, rtol=1e-6)
  moved = sum((1 - m**k) / (1 - m) for k in range(1, STEPS + 1))
  np.testing.assert_allclose(
      _run(optimizers.Optimizer('sgdm', lr, momentum=m), w0, g),
      w0 - lr * g * moved, rtol=1e-6)


def test_adam_closed_form_with_tff_defaults():
  w0, g, lr = np.asarray([1.0, -2.0, 0.0]), np.asarray([1e-6, -3.0, 0.2]), 0.05
  eps, b2 = 1e-7, 0.999
  moved = sum(g / (np.abs(g) + eps / np.sqrt(1 - b2**t))
              for t in range(1, STEPS + 1))
  np.testing.assert_allclose(_run(optimizers.Optimizer('adam', lr), w0, g),
                             w0 - lr * moved, rtol=1e-5)


def test_arguments_are_checked():
  with pytest.raises(ValueError, match="optimizer name must be one of"):
    optimizers.Optimizer('rmsprop', 0.1)
  with pytest.raises(ValueError, match='momentum must be a finite number in'):
    optimizers.Optimizer('sgdm', 0.1, momentum=1.5)
  with pytest.raises(TypeError, match='learning_rate must be a real'):
    optimizers.Optimizer('sgd', '0.1')
