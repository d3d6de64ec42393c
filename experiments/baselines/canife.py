"""One CANIFE audit of a frozen model, end to end (Maddock et al. 2022).

Algorithm 1 with the measurement of Sec. 3.4, for clients that hold one
example each (CANIFE's Sec. 4.1 setting, and Sec. 5.4 of Andrew et al.):

1. Mock clients: the clipped updates u_i of the design-pool examples at the
   frozen model (default pool: 512 held-out examples).
2. Canary design: Adam on pixels and soft label minimising Eq. (1)
   (`canife_design`).
3. Attack: n mock rounds (default 100) with fresh real cohorts, the canary
   inserted with probability 1/2, scores <u~, u_c> on the noised aggregate,
   and eps_hat_r with delta = 1/n at the best threshold or, as CANIFE's
   reference code, at the threshold of best accuracy (`canife_attack`).

The cumulative estimate over training (Algorithm 2) composes the audits'
eps_hat_r with `canife_accounting.canife_epsilon`.
"""

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from experiments.baselines import canife_attack
from experiments.baselines import canife_design
from experiments.baselines import per_example
from one_shot_epe import validation

__all__ = ['AuditResult', 'CanifeAuditor', 'CanifeConfig', 'CohortSampler',
           'DEFAULT_DESIGN_LEARNING_RATE', 'DEFAULT_DESIGN_POOL_SIZE',
           'DEFAULT_DESIGN_STEPS', 'DEFAULT_NUM_MOCK_ROUNDS']

DEFAULT_DESIGN_POOL_SIZE = 512
DEFAULT_DESIGN_STEPS = 2500
DEFAULT_DESIGN_LEARNING_RATE = 1.0
DEFAULT_NUM_MOCK_ROUNDS = 100

# sample_cohort(rng) -> (inputs [n, *input_shape], label distributions [n, K]).
CohortSampler = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


@validation.fields(
    design_steps=validation.Int(0), num_mock_rounds=validation.Int(2),
    design_learning_rate=validation.Real(0.0, low_open=True),
    insertion_probability=validation.Probability(),
    attack_delta=validation.Optional(validation.Probability()),
    norm_target=validation.Optional(validation.Real(0.0, low_open=True)),
    epsilon_threshold=validation.Choice(canife_attack.THRESHOLDS))
@dataclasses.dataclass(frozen=True)
class CanifeConfig:
  """Parameters of one audit (defaults: CANIFE's, as used in Sec. 5.4).

  Attributes:
    design_steps: Adam steps T of canary design.
    design_learning_rate: Adam's learning rate beta.
    num_mock_rounds: Mock rounds n, i.e. attack scores per audit.
    insertion_probability: Probability the canary joins a mock round.
    attack_delta: delta of eps_hat_r; None means 1/n (Sec. 3.4).
    norm_target: C of Eq. (1); None means the clip norm.
    epsilon_threshold: How eps_hat_r picks its threshold:
      `canife_attack.THRESHOLDS` ('best' as the paper's text, 'max_accuracy'
      as CANIFE's reference code).
  """
  design_steps: int = DEFAULT_DESIGN_STEPS
  design_learning_rate: float = DEFAULT_DESIGN_LEARNING_RATE
  num_mock_rounds: int = DEFAULT_NUM_MOCK_ROUNDS
  insertion_probability: float = 0.5
  attack_delta: float | None = None
  norm_target: float | None = None
  epsilon_threshold: str = 'best'


  def delta(self) -> float:
    """The delta of eps_hat_r: attack_delta, or 1/num_mock_rounds.

    Returns:
      The delta each audit's eps_hat_r is measured at.
    """
    if self.attack_delta is not None:
      return float(self.attack_delta)
    return 1.0 / self.num_mock_rounds


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """What one audit measured.

  Attributes:
    epsilon: eps_hat_r (may be inf).
    capped_epsilon: eps_hat_r with perfect separation capped at the largest
      finite value of n scores (`canife_attack.epsilon_from_scores`).
    attack_accuracy: Best balanced accuracy over thresholds.
    canary_health: Relative reduction of the design loss (Sec. 4.2).
    canary_gradient_norm: ||g(z_T)||.
    design_pool_cosine: Mean |cos(g(z_T), u_i)| over the design pool.
    heldout_cosine: Mean |cos(g(z_T), u_i)| over the clients of the first
      mock round (real clients the design never saw).
    scores: The n attack scores.
    inserted: Whether the canary was in each mock round.
    design_seconds: Wall time of mock-client updates and design.
    attack_seconds: Wall time of the mock rounds and eps_hat_r.
  """
  epsilon: float
  capped_epsilon: float
  attack_accuracy: float
  canary_health: float
  canary_gradient_norm: float
  design_pool_cosine: float
  heldout_cosine: float
  scores: np.ndarray
  inserted: np.ndarray
  design_seconds: float
  attack_seconds: float


class CanifeAuditor:
  """Runs CANIFE audits of one model architecture (functions compiled once)."""

  def __init__(self, model: Any, config: CanifeConfig = CanifeConfig()):
    if not isinstance(config, CanifeConfig):
      raise ValueError(f'config must be a CanifeConfig; got {config!r}.')
    self.model = model
    self.config = config
    self.oracle = per_example.GradientOracle(model)
    self.designer = canife_design.CanaryDesigner(model)

  @validation.arguments('clip', 'noise_multiplier')
  def audit(self, params: Any, *, design_inputs: Any, design_labels: Any,
            sample_cohort: CohortSampler, clip: float,
            noise_multiplier: float, seed: int) -> AuditResult:
    """Designs a canary at `params` and measures eps_hat_r.

    Args:
      params: The frozen model theta, float32 [d].
      design_inputs: Design-pool inputs [m, *input_shape].
      design_labels: Design-pool label distributions [m, K] (one-hot rows).
      sample_cohort: Draws one mock round's cohort of real clients.
      clip: Clip norm C of training.
      noise_multiplier: sigma of training (noise std sigma C per coordinate).
      seed: Seeds the canary initialisation, insertions, noise and cohorts.

    Returns:
      The audit's eps_hat_r (and capped), attack accuracy and the canary's
      design figures.
    """
    config = self.config
    design_seed, attack_seed = np.random.SeedSequence(seed).generate_state(2)
    params = tf.constant(np.asarray(params, np.float32))

    start = time.perf_counter()
    mock_updates = self.oracle.clipped(
        params, tf.constant(design_inputs, tf.float32),
        tf.constant(design_labels, tf.float32), clip).numpy()
    canary = self.designer.design(
        params, mock_updates,
        norm_target=clip if config.norm_target is None else config.norm_target,
        steps=config.design_steps, learning_rate=config.design_learning_rate,
        seed=int(design_seed))
    design_seconds = time.perf_counter() - start

    start = time.perf_counter()
    rng = np.random.default_rng(attack_seed)
    first_cohort = []

    def clipped_sum(r: int) -> np.ndarray:
      inputs, labels = sample_cohort(rng)
      if len(inputs) == 0:
        return np.zeros(self.model.dim, np.float32)
      updates = self.oracle.clipped(params, tf.constant(inputs, tf.float32),
                                    tf.constant(labels, tf.float32), clip)
      if r == 0:
        first_cohort.append(updates.numpy())
      return tf.reduce_sum(updates, axis=0).numpy()

    attack = canife_attack.mock_round_scores(
        clipped_sum, canary.update, noise_std=noise_multiplier * clip,
        num_rounds=config.num_mock_rounds, rng=rng,
        insertion_probability=config.insertion_probability)
    epsilon = canife_attack.epsilon_from_scores(
        attack.scores, attack.inserted, config.delta(),
        threshold=config.epsilon_threshold)
    capped = canife_attack.epsilon_from_scores(
        attack.scores, attack.inserted, config.delta(), perfect='cap',
        threshold=config.epsilon_threshold)
    accuracy = canife_attack.attack_accuracy(attack.scores, attack.inserted)
    attack_seconds = time.perf_counter() - start
    heldout = (canife_design.mean_abs_cosine(canary.gradient, first_cohort[0])
               if first_cohort else math.nan)
    return AuditResult(
        epsilon=epsilon, capped_epsilon=capped, attack_accuracy=accuracy,
        canary_health=canary.health,
        canary_gradient_norm=canary.gradient_norm,
        design_pool_cosine=canife_design.mean_abs_cosine(canary.gradient,
                                                         mock_updates),
        heldout_cosine=heldout, scores=attack.scores, inserted=attack.inserted,
        design_seconds=design_seconds, attack_seconds=attack_seconds)
