"""DP-FedAvg's Gaussian DP queries with noise that is a pure function of a seed.

tensorflow_privacy's `GaussianSumQuery` draws its noise with an unseeded,
stateful TensorFlow op, so two runs with the same flags (or a run resumed from
a checkpoint) add different noise and end with different models and cosines.
The queries here are the same mechanisms — the Gaussian sum query, and the
adaptive clip of Andrew et al. 2021 whose quantile estimate is itself a
Gaussian sum query — with the noise drawn by `tf.random.stateless_normal`
from a round seed instead. The distribution of every released value is
unchanged (the noise is still i.i.d. N(0, stddev^2) per coordinate and
independent across rounds and across the two noised quantities), so the DP
guarantee and the estimation of Andrew et al. (ICLR 2024) are unaffected.

The `DPQuery` interface has no argument for a seed, so the caller sets the
round's seed around the trace of `get_noised_result`:

  with seeded_queries.noise_seed_scope(round_seed):
    result, state, event = query.get_noised_result(sample_state, global_state)

Each seeded Gaussian sum query carries a `stream` number and draws from
`fold_in(round_seed, stream)`; leaf i of its sample state draws from
`fold_in(that, i)`. Streams 0 and 1 are the update sum and the adaptive clip's
count of unclipped records, so no two noised quantities share random bits.
"""

import contextlib
from collections.abc import Iterator

import dp_accounting
import tensorflow as tf
import tensorflow_privacy as tfp

__all__ = ['COUNT_STREAM', 'SeededGaussianSumQuery',
           'SeededQuantileAdaptiveClipSumQuery', 'SeededQuantileEstimatorQuery',
           'UPDATE_STREAM', 'noise_seed_scope', 'round_seed']

UPDATE_STREAM = 0
COUNT_STREAM = 1

_scopes: list[tf.Tensor] = []


@contextlib.contextmanager
def noise_seed_scope(seed: tf.Tensor) -> Iterator[None]:
  """Makes `seed` (int64 [2]) the seed of seeded queries traced inside.

  Args:
    seed: int64 tensor of shape [2], e.g. `round_seed(...)`.

  Yields:
    None; the scopes nest, the innermost seed applies.

  Raises:
    ValueError: `seed` does not have shape [2].
  """
  seed = tf.convert_to_tensor(seed, tf.int64)
  if seed.shape != (2,):
    raise ValueError(f'seed must be an int64 tensor of shape [2]; got shape '
                     f'{seed.shape}.')
  _scopes.append(seed)
  try:
    yield
  finally:
    _scopes.pop()


def round_seed(noise_seed: int, round_num: tf.Tensor) -> tf.Tensor:
  """The seed of round `round_num` for a run with noise seed `noise_seed`.

  Args:
    noise_seed: The run's noise seed.
    round_num: The round number, a scalar tensor or int.

  Returns:
    int64 [2] tensor (noise_seed, round_num).
  """
  return tf.stack([tf.constant(noise_seed, tf.int64),
                   tf.cast(round_num, tf.int64)])


def _current_seed() -> tf.Tensor:
  if not _scopes:
    raise RuntimeError(
        'A seeded DP query was asked for noise outside noise_seed_scope(); '
        'trace get_noised_result inside `with noise_seed_scope(seed):`.')
  return _scopes[-1]


class SeededGaussianSumQuery(tfp.GaussianSumQuery):
  """`tfp.GaussianSumQuery` whose noise comes from the scope's seed."""

  def __init__(self, l2_norm_clip: float, stddev: float, stream: int):
    """Builds the query; noise is drawn from stream `stream`.

    Args:
      l2_norm_clip: Clipping norm of each record, > 0.
      stddev: Standard deviation of the noise on each coordinate of the sum.
      stream: Which stream of the scope's seed the noise comes from
        (`UPDATE_STREAM` or `COUNT_STREAM`); seeds differ across streams.
    """
    super().__init__(l2_norm_clip=l2_norm_clip, stddev=stddev)
    self._stream = stream

  def get_noised_result(self, sample_state, global_state):
    """Adds N(0, stddev^2) noise to every coordinate of the summed records.

    Args:
      sample_state: The summed (clipped) records, a structure of tensors.
      global_state: The query's global state (`stddev`, `l2_norm_clip`).

    Returns:
      (noised sum, `global_state` unchanged, the round's
      `dp_accounting.GaussianDpEvent` with noise multiplier stddev / clip).

    Raises:
      RuntimeError: when traced outside `noise_seed_scope`.
    """
    seed = tf.random.experimental.stateless_fold_in(_current_seed(),
                                                    self._stream)
    leaves = tf.nest.flatten(sample_state)
    noised = [
        leaf + tf.random.stateless_normal(
            tf.shape(leaf), tf.random.experimental.stateless_fold_in(seed, i),
            stddev=tf.cast(global_state.stddev, leaf.dtype), dtype=leaf.dtype)
        for i, leaf in enumerate(leaves)
    ]
    event = dp_accounting.GaussianDpEvent(global_state.stddev /
                                          global_state.l2_norm_clip)
    return (tf.nest.pack_sequence_as(sample_state, noised), global_state,
            event)


class SeededQuantileEstimatorQuery(tfp.QuantileEstimatorQuery):
  """`tfp.QuantileEstimatorQuery` with a seeded noisy count (COUNT_STREAM)."""

  def _construct_below_estimate_query(self, below_estimate_stddev,
                                      expected_num_records):
    # The same centred count as tensorflow_privacy's: records contribute
    # +/-0.5, so the count's sensitivity (its "clip") is 0.5.
    return tfp.NormalizedQuery(
        SeededGaussianSumQuery(l2_norm_clip=0.5, stddev=below_estimate_stddev,
                               stream=COUNT_STREAM),
        denominator=expected_num_records)


class SeededQuantileAdaptiveClipSumQuery(tfp.QuantileAdaptiveClipSumQuery):
  """`tfp.QuantileAdaptiveClipSumQuery` with both noises seeded.

  The update sum draws from UPDATE_STREAM and the unclipped count from
  COUNT_STREAM; the clip update rule is tensorflow_privacy's, unchanged.
  """

  def __init__(self, initial_l2_norm_clip: float, noise_multiplier: float,
               target_unclipped_quantile: float, learning_rate: float,
               clipped_count_stddev: float, expected_num_records: float,
               geometric_update: bool = True):
    """Builds tensorflow_privacy's query, then swaps in the seeded sub-queries.

    Args:
      initial_l2_norm_clip: Clipping norm of round 1, > 0.
      noise_multiplier: Noise std of the sum divided by the current clip.
      target_unclipped_quantile: Fraction of records the clip should leave
        unclipped, in [0, 1] (Andrew et al., 2021).
      learning_rate: Step size of the clip update.
      clipped_count_stddev: Noise std of the count of unclipped records.
      expected_num_records: Expected records per round (the count's
        denominator).
      geometric_update: Whether the clip is updated geometrically (else
        arithmetically).
    """
    super().__init__(
        initial_l2_norm_clip=initial_l2_norm_clip,
        noise_multiplier=noise_multiplier,
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=learning_rate,
        clipped_count_stddev=clipped_count_stddev,
        expected_num_records=expected_num_records,
        geometric_update=geometric_update)
    # tensorflow_privacy builds its two sub-queries in __init__ with no hook
    # to choose their classes; replace them with the seeded equivalents.
    self._sum_query = SeededGaussianSumQuery(
        initial_l2_norm_clip, noise_multiplier * initial_l2_norm_clip,
        stream=UPDATE_STREAM)
    self._quantile_estimator_query = SeededQuantileEstimatorQuery(
        initial_l2_norm_clip, target_unclipped_quantile, learning_rate,
        clipped_count_stddev, expected_num_records, geometric_update)
