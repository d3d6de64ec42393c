"""The final-model references under correlated noise, with server momentum.

The matrix-factorization mechanism (`dp_fedavg.CorrelatedNoise`; the JAX
engine's --mechanism=blt|banded, `jax_engine.correlated_noise`) privatizes
the rounds' sums x_1..x_T of records clipped to S by releasing C x + Z: C is
the lower triangular Toeplitz strategy, Z has i.i.d. N(0, sigma^2) entries,
sigma = z S sens(C). The released prefix sums are A (x + C^-1 Z) = B (C x +
Z) of the factorization A = B C (A the lower triangular ones, B = A C^-1),
and the server trains on their differences, the rounds' updates
u = x + C^-1 Z. With a linear loss the final model moves by w^T u, w the
server optimizer's weights of the rounds (`last_iterate.momentum_weights`:
w = 1 for SGD, w_t = (1 - beta^(T-t+1)) / (1 - beta) for heavy-ball
momentum beta):

    w^T u = w^T x + (w^T C^-1) Z.

A canary of norm S inserted in rounds R adds S sum_(t in R) w_t in its unit
direction c (K S under SGD, K its presentations); the noise's component
along c is N(0, sigma^2 ||w^T C^-1||^2) (Z's entries are i.i.d. over rounds
and coordinates; `final_noise_norm`). So the canary meets one Gaussian
mechanism in the final model, at

    mu = sum_(t in R) w_t / (z sens(C) ||w^T C^-1||),

K / (z sens(C) ||1^T C^-1||) under SGD (B's last row 1^T C^-1): the noise of
independent rounds at z_T = z sens(C) ||w^T C^-1|| / ||w||, against which
`dp_fedavg.last_iterate_epsilon` computes the eps of the run's canaries
(their mixture, as for independent noise). With C = I (sens 1, one
participation) z_T = z: the last-iterate heuristic. Exact for a linear loss,
a heuristic otherwise.

Tree aggregation (`tree_aggregation`) releases noised prefix sums P_t whose
noise N_t = b_t^T n is a fixed combination of the tree's i.i.d. N(0, (z S)^2)
node noises n (the nodes of t's binary decomposition, plainly summed or by
Honaker's estimator); the rounds' updates are P_t - P_(t-1), so the final
model's noise is sum_t w_t (N_t - N_(t-1)) = sum_t (w_t - w_(t+1)) N_t
(w_(T+1) = 0; beta^(T-t) under momentum), of std z S ||sum_t (w_t -
w_(t+1)) b_t|| (`tree_final_noise_norm`): z S sqrt(v(T)) under SGD, the
prefix at T alone (`tree_aggregation.tree_prefix_variance`).
"""

import math

import numpy as np
from numpy.typing import ArrayLike

from one_shot_epe import validation
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import last_iterate

__all__ = ['final_model_epsilon', 'final_noise_norm', 'tree_final_noise_norm']


def _weights(weights: ArrayLike) -> np.ndarray:
  """w as a finite non-empty 1-D float64 array, checked."""
  values = np.asarray(weights, np.float64)
  if values.ndim != 1 or not values.size or not np.all(np.isfinite(values)):
    raise ValueError('weights must be a finite non-empty vector; got '
                     f'{weights!r}.')
  return values


def final_noise_norm(coefs: ArrayLike, weights: ArrayLike | None = None
                     ) -> float:
  """||w^T C^-1|| of the lower triangular Toeplitz C with first column coefs.

  C^-1 is lower triangular Toeplitz too; its first column d is the inverse
  power series of coefs (sum_l coefs[l] d[n - l] = [n = 0]), and entry j of
  w^T C^-1 is sum_n d[n] w[j + n] (d[0] + ... + d[T - 1 - j] for w = 1).

  Args:
    coefs: C's first column, coefs[0] > 0 (the strategy's
      `correlated_noise.Strategy.coefs`); its first T entries are C's for
      the T rounds of `weights`.
    weights: w [T], T <= len(coefs), the rounds' weights in the final model
      (`last_iterate.momentum_weights`); None: ones over all of coefs.

  Returns:
    The final model's noise std in units of Z's (||w|| for C = I).

  Raises:
    ValueError: if coefs is not a finite non-empty vector with coefs[0] > 0,
      or weights not a finite non-empty vector of at most len(coefs)
      entries.
  """
  values = np.asarray(coefs, np.float64)
  if (values.ndim != 1 or not values.size or
      not np.all(np.isfinite(values)) or values[0] <= 0):
    raise ValueError('coefs must be a finite non-empty vector with '
                     f'coefs[0] > 0; got {values.tolist()}.')
  weight = np.ones(values.size) if weights is None else _weights(weights)
  if weight.size > values.size:
    raise ValueError(f'weights has {weight.size} rounds, coefs only '
                     f'{values.size}.')
  values = values[:weight.size]
  inverse = np.zeros_like(values)
  inverse[0] = 1.0 / values[0]
  for n in range(1, values.size):
    inverse[n] = -np.dot(values[1:n + 1], inverse[n - 1::-1]) / values[0]
  row = np.convolve(inverse, weight[::-1])[:weight.size][::-1]
  return float(np.linalg.norm(row))


def tree_final_noise_norm(weights: ArrayLike, efficient: bool) -> float:
  """||sum_t (w_t - w_(t+1)) b_t||, the tree's final-model noise over z S.

  b_p weighs the tree's node noises in the prefix of p rounds: 1 on each
  node (l, j) of p's binary decomposition (j = p // 2^l - 1 for each set bit
  l of p) for the plain sum; for Honaker's estimator 1 / (2 - 2^-l) on that
  node's buffer value v = n + (v_left + v_right) / 2, which puts
  2^-(l - l') / (2 - 2^-l) on each node below it at level l' (module doc).

  Args:
    weights: w [T], the rounds' weights in the final model
      (`last_iterate.momentum_weights`; ones under SGD).
    efficient: Honaker's estimator (TFF's default) or the plain sum.

  Returns:
    The std in units of z S: sqrt(`tree_aggregation.tree_prefix_variance`
    (T)) for w = 1.

  Raises:
    ValueError: if weights is not a finite non-empty vector.
  """
  weight = _weights(weights)
  rounds = weight.size
  change = weight - np.append(weight[1:], 0.0)  # Prefix p at index p - 1.
  nodes = [np.zeros(rounds >> level) for level in range(rounds.bit_length())]
  for prefix in range(1, rounds + 1):
    for level in range(prefix.bit_length()):
      if prefix >> level & 1:
        scale = 1.0 / (2.0 - 0.5**level) if efficient else 1.0
        nodes[level][(prefix >> level) - 1] += scale * change[prefix - 1]
  if efficient:  # Each buffer value's weight reaches the nodes below it.
    for level in range(len(nodes) - 2, -1, -1):
      parents = nodes[level + 1]
      nodes[level][:2 * parents.size] += 0.5 * np.repeat(parents, 2)
  return math.sqrt(math.fsum(float(np.dot(n, n)) for n in nodes))


@validation.arguments('noise_multiplier', 'delta', 'rounds', 'momentum')
def final_model_epsilon(noise_multiplier: float, delta: float,
                        correlated: dp_fedavg.CorrelatedNoise, rounds: int,
                        presentations: ArrayLike, momentum: float = 0.0
                        ) -> dp_fedavg.MechanismEpsilon:
  """The final-model eps of a canary under matrix-factorization noise.

  The module docstring's mu_i = s_i / (z sens(C) ||w^T C^-1||), s_i each
  seen canary's signal (K_i under SGD).

  Args:
    noise_multiplier: z >= 0.
    delta: The delta, in (0, 1).
    correlated: The strategy's numbers (its sensitivity and coefficients).
    rounds: T >= 1, the rounds of the final model (at most the strategy's).
    presentations: Each seen canary's signal, as
      `dp_fedavg.last_iterate_epsilon` takes it (its insertions under SGD).
    momentum: beta in [0, 1), the server's heavy-ball momentum (0: SGD).

  Returns:
    The eps (math.inf at z = 0) and a description of the mechanism.

  Raises:
    ValueError: if an argument is out of range.
  """
  weights = last_iterate.momentum_weights.unchecked(rounds, momentum)
  norm = final_noise_norm(correlated.coefs, weights)
  scale = noise_multiplier * correlated.sensitivity * norm
  per_round = scale / math.sqrt(float(np.dot(weights, weights)))
  independent = dp_fedavg.last_iterate_epsilon.unchecked(
      per_round, delta, rounds, presentations, momentum)
  row = '1^T C^-1' if momentum == 0 else 'w^T C^-1'
  return dp_fedavg.MechanismEpsilon(
      independent.epsilon,
      f'{correlated.mechanism} correlated noise: the final model\'s noise '
      f'{row} Z has std z sens(C) ||{row}|| S = {noise_multiplier:g} x '
      f'{correlated.sensitivity:.4g} x {norm:.4g} S, as the final model of '
      f'{rounds} independent rounds at noise multiplier z_T = {per_round:.4g};'
      f' {independent.mechanism}')
