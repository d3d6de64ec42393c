"""Distributed DP aggregation that inserts canaries as client records.

The clients add the noise themselves, as discrete Gaussian (or Skellam)
shares, and a secure sum adds their rotated, discretized records modulo 2^b
(TFF's `tff.aggregators.DistributedDpSumFactory`); the canaries of Andrew
et al. (ICLR 2024, Sec. 4, Algorithm 2) are encoded by the same function as
the clients' records and join the modular sum, so they meet the same
rotation, scaling, rounding, noise shares and modulus, and their cosines
(Algorithm 3) are taken with the decoded mean.
`one_shot_epe.accounting.distributed_dp` has the calibration and the
accounting; the process's state is
`aggregator_state.CanaryAggregatorState` and its measurements are
`aggregator_state.CANARY_MEASUREMENTS`, as for
`canary_aggregator.CanaryDPFactory`.

The noise is calibrated to, and accounted as, n = round(expected cohort)
shares (z_eff, `distributed_dp.calibrate`). With Bernoulli or Poisson
sampling, or clients dropping out, a round may have m < n records (clients
and canaries) and so only m shares: less noise than accounted. Here the
server adds the n - m missing shares (each drawn as a client's) to the
secure sum before decoding, so every round's aggregate carries at least the
accounted noise, and a full round (m >= n) is unchanged. The released
aggregate, every iterate and the final model, all the one-shot audit sees,
then have at least z_eff's noise; against the server itself, which sees
the secure sum before its own shares, a short round protects by the m
shares that arrived (calibrating every share to the smallest cohort would
cover that too, at the price of more noise in every round).
"""

import collections
import math
from typing import Any

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_privacy.privacy.dp_query import discrete_gaussian_utils

from one_shot_epe import validation
from one_shot_epe.accounting import distributed_dp
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canaries
from one_shot_epe.tff_engine import aggregator_state

__all__ = ['CanaryDistributedDPFactory']


def _fwht(x: tf.Tensor) -> tf.Tensor:
  """The normalised Walsh-Hadamard transform of each row of x [m, n].

  n is a power of two; H / sqrt(n) is symmetric and orthogonal, hence its
  own inverse.
  """
  size = int(x.shape[1])
  half = 1
  y = x
  while half < size:
    pairs = tf.reshape(y, [-1, size // (2 * half), 2, half])
    first, second = pairs[:, :, 0, :], pairs[:, :, 1, :]
    y = tf.reshape(tf.stack([first + second, first - second], axis=2),
                   [-1, size])
    half *= 2
  return y / math.sqrt(size)


def _discrete_gaussian(sigma: int, shape: tf.Tensor) -> tf.Tensor:
  """Samples of the discrete Gaussian N_Z(0, sigma^2), int64 of `shape`.

  tensorflow_privacy's sampler, which `DistributedDiscreteGaussianSumQuery`
  uses (Canonne et al. 2020: rejection from a discrete Laplace; its cost
  does not grow with sigma).
  """
  if sigma == 0:
    return tf.zeros(shape, tf.int64)
  return discrete_gaussian_utils.sample_discrete_gaussian(
      tf.constant(int(sigma), tf.int64), shape, dtype=tf.int64)


def _skellam(stddev: float, shape: tf.Tensor) -> tf.Tensor:
  """Samples of the symmetric Skellam of variance stddev^2, int64 of `shape`.

  As tensorflow_privacy's `DistributedSkellamSumQuery`: the difference of
  two Poisson(stddev^2 / 2) draws (Agarwal, Kairouz and Liu 2021).
  """
  if stddev == 0:
    return tf.zeros(shape, tf.int64)
  rate = 0.5 * float(stddev) ** 2
  draws = tf.random.poisson(tf.concat([[2], shape], axis=0), rate,
                            dtype=tf.float64)
  return tf.cast(draws[0] - draws[1], tf.int64)


def _random_signs(seed: tf.Tensor, size: int) -> tf.Tensor:
  """Rademacher signs of the round's rotation, a pure function of `seed`."""
  uniform = tf.random.stateless_uniform([size], seed=seed)
  return tf.where(uniform < 0.5, -1.0, 1.0)


class CanaryDistributedDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """Distributed discrete Gaussian aggregation, canaries as client records.

  The distributed DP of TFF's `tff.aggregators.DistributedDpSumFactory(
  mechanism='distributed_dgauss', rotation_type='hd')` at a fixed clip (with
  `ddp.noise='skellam'`, `mechanism='distributed_skellam'`: Skellam shares,
  and the L1 check of tensorflow_privacy's `DistributedSkellamSumQuery`),
  with the parameters of `distributed_dp.calibrate`: every record is
  encoded by one function (`_encode`): rotated by the round's randomized
  Walsh-Hadamard transform (random signs, then H / sqrt(d_pad)), clipped to
  S, scaled by s, stochastically rounded, noised with a local discrete
  Gaussian (tensorflow_privacy's `DistributedDiscreteGaussianSumQuery`,
  which also checks the record's norm against the inflated bound) and
  reduced modulo 2^b. The clients' encodings are summed (the simulated
  secure sum: `tff.federated_sum` of residues, reduced modulo 2^b); at the
  server, the round's canaries are encoded by the same function (each with
  its own rounding and noise share, as a client) and added modulo 2^b. The
  sum is centred to [-2^(b-1), 2^(b-1)), divided by s, rotated back,
  truncated to d and divided by the expected cohort (the DP-FedAvg mean of
  Algorithm 3, line 9). Canaries are `Proj(c_j; S)` (or 1e4 S c_j / ||c_j||
  for `canary_clip='clip'`, clipped to S by the encoding). A round of fewer
  records than the n shares of the calibration gets the missing shares
  from the server (`_server_shares`; the module docstring says why).

  The state is an `aggregator_state.CanaryAggregatorState`: `query_state`
  holds the rotation seed, `dp_event` the Gaussian event of z_eff
  (`distributed_dp`), which `aggregator_state.extract_dp_event_from_state`
  returns as for `canary_aggregator.CanaryDPFactory`.
  """

  @validation.arguments(
      rotation_seed=validation.Optional(canary_spec.SEED))
  def __init__(self, dp: canary_spec.DPAggregation,
               ddp: distributed_dp.DistributedDP,
               spec: canary_spec.CanarySpec,
               rotation_seed: int | None = None):
    """Checks the arguments.

    Args:
      dp: The DP aggregation: a fixed clip S, z and the expected cohort
        (`distributed_dp.calibrate` splits the noise into its rounded value
        of shares).
      ddp: The modulus and wrap-around probability.
      spec: Canaries, schedule and tracking parameters.
      rotation_seed: Seed of the rounds' rotations; None for one drawn by
        `initialize`.

    Raises:
      TypeError: for an argument of the wrong type.
      ValueError: for adaptive clipping (distributed DP here has a fixed
        clip), or a `rotation_seed` out of [0, canary_spec.MAX_SEED].
    """
    if not isinstance(dp, canary_spec.DPAggregation):
      raise TypeError(f'dp must be a canary_spec.DPAggregation; got {dp!r}.')
    if not isinstance(ddp, distributed_dp.DistributedDP):
      raise TypeError(f'ddp must be a distributed_dp.DistributedDP; got '
                      f'{ddp!r}.')
    if not isinstance(spec, canary_spec.CanarySpec):
      raise TypeError(f'spec must be a canary_spec.CanarySpec; got {spec!r}.')
    if dp.adaptive:
      raise ValueError('distributed DP needs a fixed clip; got adaptive '
                       'clipping (clip=None).')
    self._dp = dp
    self._ddp = ddp
    self._spec = spec
    self._rotation_seed = rotation_seed

  @property
  def dp(self) -> canary_spec.DPAggregation:
    """The DP aggregation (clip, z, expected cohort)."""
    return self._dp

  @property
  def ddp(self) -> distributed_dp.DistributedDP:
    """The secure aggregation's modulus and wrap-around probability."""
    return self._ddp

  @property
  def spec(self) -> canary_spec.CanarySpec:
    """The canaries, schedule and tracking this factory was built with."""
    return self._spec

  def calibration(self, dim: int) -> distributed_dp.DdpCalibration:
    """The mechanism's parameters for records of dimension `dim`.

    Args:
      dim: d >= 1, the records' dimension (that of the aggregated value).

    Returns:
      `distributed_dp.calibrate` of this factory's DP aggregation and
      secure-aggregation parameters at `dim`.

    Raises:
      ValueError: as `distributed_dp.calibrate` (a `dim` < 1, or a modulus
        too small for the cohort or the scale).
    """
    return distributed_dp.calibrate(
        self._dp.noise_multiplier, self._dp.clip, self._dp.clients_per_round,
        dim, self._ddp)

  def _encode(self, records: tf.Tensor, seed: tf.Tensor,
              cal: distributed_dp.DdpCalibration) -> tf.Tensor:
    """Records' residues mod 2^b: rotate, clip, scale, round, noise.

    `records` is float32 [m, d], one record a row, each encoded on its own
    (its own rounding and noise share); returns int64 [m, d_pad].
    """
    dim = int(records.shape[1])
    padded = tf.pad(records, [[0, 0], [0, cal.padded_dim - dim]])
    rotated = _fwht(padded * _random_signs(seed, cal.padded_dim))
    norms = tf.norm(rotated, axis=1, keepdims=True)
    clipped = rotated * tf.minimum(
        1.0, self._dp.clip / tf.maximum(norms, 1e-30))
    scaled = clipped * cal.scale
    floor = tf.floor(scaled)
    rounded = floor + tf.cast(
        tf.random.uniform(tf.shape(scaled)) < scaled - floor, tf.float32)
    # As tensorflow_privacy's DistributedDiscreteGaussianSumQuery: the norm
    # check against the inflated bound, then a local discrete Gaussian share
    # per record.
    checks = [tf.debugging.assert_less_equal(
        tf.norm(rounded, axis=1), tf.cast(cal.scaled_l2_bound, tf.float32),
        message='a rounded record exceeds the inflated norm bound')]
    if cal.noise == 'skellam':
      checks.append(tf.debugging.assert_less_equal(
          tf.reduce_sum(tf.abs(rounded), axis=1),
          tf.cast(cal.scaled_l1_bound, tf.float32),
          message='a rounded record exceeds the L1 bound'))
    with tf.control_dependencies(checks):
      noise = (_skellam(cal.local_stddev, tf.shape(rounded))
               if cal.noise == 'skellam' else
               _discrete_gaussian(cal.local_stddev, tf.shape(rounded)))
    return tf.math.floormod(tf.cast(rounded, tf.int64) + noise,
                            2 ** cal.bits)

  def _decode(self, residues: tf.Tensor, seed: tf.Tensor, dim: int,
              cal: distributed_dp.DdpCalibration) -> tf.Tensor:
    """The mean of the records from their summed residues (float32 [d])."""
    modulus = 2 ** cal.bits
    residues = tf.math.floormod(residues, modulus)
    centred = tf.where(residues >= modulus // 2, residues - modulus, residues)
    unscaled = tf.cast(centred, tf.float32)[tf.newaxis] / cal.scale
    total = (_fwht(unscaled) * _random_signs(seed, cal.padded_dim))[0, :dim]
    return total / float(self._dp.clients_per_round)

  def _canary_residues(self, round_num: tf.Tensor, seed: tf.Tensor,
                       cal: distributed_dp.DdpCalibration,
                       dim: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Summed residues of the round's canaries (int64 [d_pad]), their count.

    The round's canaries are encoded as one batch of the schedule's largest
    round; the rows past the round's count are dropped.
    """
    ids_table, offsets = self._spec.schedule_table()
    num_scheduled = len(offsets) - 1
    most = max(int(np.max(np.diff(offsets))), 1) if num_scheduled else 1
    start = tf.gather(offsets, tf.minimum(round_num, num_scheduled))
    end = tf.gather(offsets, tf.minimum(round_num + 1, num_scheduled))
    count = end - start
    table = tf.constant(np.append(np.asarray(ids_table, np.int64),
                                  np.zeros(most, np.int64)), tf.int64)
    ids = table[start:start + most]
    directions = tf.map_fn(
        lambda i: canaries.gaussian(self._spec.seed, i, dim), ids,
        fn_output_signature=tf.float32)
    norm_scale = (1.0 if self._spec.canary_clip == 'project' else
                  canary_spec.CLIPPED_CANARY_SCALE) * self._dp.clip
    records = directions * (
        norm_scale / tf.norm(directions, axis=1, keepdims=True))
    residues = self._encode(records, seed, cal)
    inserted = tf.cast(tf.range(most) < count, tf.int64)[:, tf.newaxis]
    return tf.reduce_sum(residues * inserted, axis=0), count

  def _server_shares(self, count: tf.Tensor,
                     cal: distributed_dp.DdpCalibration) -> tf.Tensor:
    """The sum of `count` local noise shares, each drawn as a record's.

    int64 [d_pad]; zeros for `count` <= 0 (a round of at least n records).
    """
    shape = tf.constant([cal.padded_dim])

    def add_share(i, total):
      share = (_skellam(cal.local_stddev, shape) if cal.noise == 'skellam'
               else _discrete_gaussian(cal.local_stddev, shape))
      return i + 1, total + share

    _, total = tf.while_loop(
        lambda i, _: i < count, add_share,
        (tf.constant(0, count.dtype), tf.zeros([cal.padded_dim], tf.int64)))
    return total

  def create(self, value_type: Any) -> tff.templates.AggregationProcess:
    """Builds the `tff.templates.AggregationProcess` for `value_type`.

    Clients encode their values (`_encode`) and count themselves; the
    server adds the round's canaries and, when the records (clients and
    canaries) number fewer than the calibration's n, the missing noise
    shares, then decodes the modular sum.

    Args:
      value_type: The aggregated value's `tff.TensorType` or
        `tff.StructType` (float32 tensors of fully defined shapes).

    Returns:
      The process.

    Raises:
      ValueError: for another value type, a model the audit cannot audit
        (`canaries.check_model`), or one whose dimension the modulus cannot
        hold (`distributed_dp.calibrate`).
    """
    specs = aggregator_state.check_value_type(value_type)
    dim = canaries.flat_size(specs)
    canaries.check_model(dim, self._spec)
    cal = self.calibration(dim)
    event = dp_accounting.GaussianDpEvent(cal.noise_multiplier)
    fixed_seed = self._rotation_seed

    @tff.tensorflow.computation
    def initial_state():
      if fixed_seed is None:
        base = tf.random.uniform([], 0, canary_spec.MAX_SEED + 1, tf.int64)
      else:
        base = tf.constant(fixed_seed, tf.int64)
      # The simulated secure sum keeps no state: agg_state is a constant 0.
      return aggregator_state.CanaryAggregatorState(
          query_state=base, agg_state=tf.constant(0, tf.int32),
          dp_event=event.to_named_tuple(), is_init_state=tf.constant(True),
          round_num=tf.constant(0, tf.int32),
          aggregate=tf.zeros([dim], tf.float32))

    state_type = initial_state.type_signature.result

    @tff.tensorflow.computation(state_type)
    def round_seed(state):
      return tf.stack([state.query_state, tf.cast(state.round_num, tf.int64)])

    @tff.tensorflow.computation(round_seed.type_signature.result, value_type)
    def client_encode(seed, value):
      return self._encode(canaries.flatten(value)[tf.newaxis], seed, cal)[0]

    @tff.tensorflow.computation(value_type)
    def client_share(value):
      del value  # Each reporting client adds one noise share.
      return tf.constant(1, tf.int32)

    @tff.tensorflow.computation(client_encode.type_signature.result,
                                client_share.type_signature.result,
                                state_type)
    def server_update(client_sum, client_shares, state):
      seed = tf.stack([state.query_state, tf.cast(state.round_num, tf.int64)])
      canary_sum, inserted = self._canary_residues(state.round_num, seed,
                                                   cal, dim)
      missing = cal.records - client_shares - inserted
      flat = self._decode(
          client_sum + canary_sum + self._server_shares(missing, cal), seed,
          dim, cal)
      new_state = aggregator_state.CanaryAggregatorState(
          query_state=state.query_state, agg_state=state.agg_state,
          dp_event=state.dp_event, is_init_state=tf.constant(False),
          round_num=state.round_num + 1, aggregate=flat)
      measurements = collections.OrderedDict(
          clip=tf.constant(self._dp.clip, tf.float32),
          canaries_inserted=inserted, aggregate_norm=tf.norm(flat))
      return new_state, canaries.unflatten(flat, specs), measurements

    @tff.federated_computation
    def init_fn():
      return tff.federated_eval(initial_state, tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      seed = tff.federated_broadcast(tff.federated_map(round_seed, state))
      residues = tff.federated_map(client_encode, (seed, value))
      shares = tff.federated_sum(tff.federated_map(client_share, value))
      new_state, result, measurements = tff.federated_map(
          server_update, (tff.federated_sum(residues), shares, state))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=result, measurements=measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
