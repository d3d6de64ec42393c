"""TFF's client and server optimizers (sgd, sgdm, adam) as pure pytree updates.

The TFF path builds both optimizers with `tff.learning.optimizers.build_sgdm`
(sgd: no momentum; sgdm: with momentum) and `build_adam` (experiments/train.py,
`_optimizer`). Their update rules, reproduced exactly (optax is not available
in this project's .venv, and its adam differs in where epsilon enters):

* sgd:  w <- w - lr g
* sgdm: a <- m a + g;  w <- w - lr a            (a starts at 0)
* adam: t <- t + 1;  a <- a + (g - a)(1 - b1);  p <- p + (g^2 - p)(1 - b2);
        w <- w - lr sqrt(1 - b2^t) / (1 - b1^t) a / (sqrt(p) + eps)
  with TFF's defaults b1 = 0.9, b2 = 0.999, eps = 1e-7.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from one_shot_epe.design import run_options
from one_shot_epe import validation

__all__ = ['NAMES', 'Optimizer']

NAMES = run_options.OPTIMIZERS
_tree_map = jax.tree_util.tree_map


@validation.fields('learning_rate', 'momentum')
@dataclasses.dataclass(frozen=True)
class Optimizer:
  """One of TFF's optimizers; `init` and `step` are pure and jit-able.

  Attributes:
    name: 'sgd', 'sgdm' or 'adam'.
    learning_rate: lr > 0.
    momentum: m in [0, 1) (sgdm only).
    beta_1, beta_2, epsilon: adam's constants (TFF's defaults).
  """
  name: str
  learning_rate: float
  momentum: float = 0.0
  beta_1: float = 0.9
  beta_2: float = 0.999
  epsilon: float = 1e-7

  def __post_init__(self):
    if self.name not in NAMES:
      raise ValueError(f'optimizer name must be one of {list(NAMES)}; got '
                       f'{self.name!r}.')
    validation.check_real('beta_1', self.beta_1, 0.0, 1.0)
    validation.check_real('beta_2', self.beta_2, 0.0, 1.0)
    validation.check_real('epsilon', self.epsilon, 0.0)

  def init(self, params: Any) -> Any:
    """The optimizer state for `params` (a pytree of float arrays).

    Args:
      params: The model parameters.

    Returns:
      () for sgd; zeros like `params` (the momentum accumulator) for sgdm;
      (step 0, first-moment zeros, second-moment zeros) for adam.
    """
    if self.name == 'sgd':
      return ()
    zeros = _tree_map(jnp.zeros_like, params)
    if self.name == 'sgdm':
      return zeros
    return (jnp.zeros((), jnp.int32), zeros, _tree_map(jnp.zeros_like, params))

  def step(self, state: Any, params: Any, grads: Any) -> tuple[Any, Any]:
    """One update with gradient `grads`; returns (new state, new params).

    Args:
      state: The state from `init` or the previous step.
      params: The parameters, a pytree.
      grads: Gradients, a pytree like `params`.

    Returns:
      (new state, new params).
    """
    lr = self.learning_rate
    if self.name == 'sgd':
      return state, _tree_map(lambda w, g: w - lr * g, params, grads)
    if self.name == 'sgdm':
      acc = _tree_map(lambda a, g: self.momentum * a + g, state, grads)
      return acc, _tree_map(lambda w, a: w - lr * a, params, acc)
    step, acc, precond = state
    step = step + 1
    t = step.astype(jnp.float32)
    normalized_lr = lr * jnp.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t)
    acc = _tree_map(lambda a, g: a + (g - a) * (1.0 - self.beta_1), acc, grads)
    precond = _tree_map(lambda p, g: p + (g * g - p) * (1.0 - self.beta_2),
                        precond, grads)
    params = _tree_map(
        lambda w, a, p: w - normalized_lr * a / (jnp.sqrt(p) + self.epsilon),
        params, acc, precond)
    return (step, acc, precond), params
