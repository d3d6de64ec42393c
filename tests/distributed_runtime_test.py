"""Tests for one_shot_epe.tff_engine.distributed_runtime (TFF over several C++ workers).

The truth is the single-process runtime, `runtime.local_cpp_context()`: the
same computations on the same arguments there and over two loopback workers.
Every result must agree bit for bit, for
any number of workers: the workers return one aggregate record per client and
the launcher folds them in client order, the order of one process.
"""

import socket

import numpy as np
import pytest
import tensorflow as tf

from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import canary_aggregator as ca
from one_shot_epe.tff_engine import distributed_runtime as dr
from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import runtime
from one_shot_epe.tff_engine import tff_workers

import linear_model
from tff_workers_test import assert_stopped
from tff_workers_test import port_of

tff = pytest.importorskip('tensorflow_federated')

_NUM_CLIENTS = 8
_FEATURES = 6
_CLASSES = 3


# ----------------------------------------------------------------------------
# Pure helpers.


def test_split_clients_cuts_contiguous_blocks_and_repeats_the_rest():
  type_spec = tff.StructType([
      ('state', tff.FederatedType(np.int32, tff.SERVER)),
      ('data', tff.FederatedType(np.int32, tff.CLIENTS)),
      ('weights', tff.FederatedType(np.float32, tff.CLIENTS)),
  ])
  value = {'state': 7, 'data': list(range(8)), 'weights': [0.5] * 8}
  slices = dr.split_clients(value, type_spec, 3)
  assert [list(s.data) for s in slices] == [[0, 1, 2], [3, 4, 5], [6, 7]]
  assert [s.state for s in slices] == [7, 7, 7]
  assert [len(s.weights) for s in slices] == [3, 3, 2]
  # More workers than clients: one client per slice; none: one slice.
  assert len(dr.split_clients(value, type_spec, 20)) == 8
  no_clients = tff.FederatedType(np.int32, tff.SERVER)
  assert dr.split_clients(3, no_clients, 4) == [3]
  with pytest.raises(ValueError, match='arg'):
    dr.split_clients({'state': 1, 'data': [1, 2], 'weights': [1.0]},
                     type_spec, 2)


# ----------------------------------------------------------------------------
# Federated sum and per-client results.


@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS),
                           tff.FederatedType(np.int32, tff.CLIENTS))
def _sum_and_double(floats, ints):
  doubled = tff.federated_map(
      tff.tensorflow.computation(lambda x: 2 * x, np.int32), ints)
  return tff.federated_sum(floats), tff.federated_sum(ints), doubled


@tff.federated_computation
def _count_default_clients():
  return tff.federated_sum(tff.federated_value(1, tff.CLIENTS))


def test_sum_matches_one_process_and_clients_are_spread(monkeypatch):
  floats = [np.float32(v) for v in (0.125, 3.5, -2.25, 100.0, 7.875, 0.5,
                                    -64.0, 1.0)]
  ints = list(range(10, 10 + _NUM_CLIENTS))
  with runtime.local_cpp_context(default_num_clients=3):
    expected = _sum_and_double(floats, ints)
    expected_count = _count_default_clients()

  calls = []
  invoke = tff.framework.SyncExecutionContext.invoke

  def recording_invoke(self, comp, arg):
    calls.append((self, arg))
    return invoke(self, comp, arg)

  monkeypatch.setattr(tff.framework.SyncExecutionContext, 'invoke',
                      recording_invoke)
  with tff_workers.local_workers(2) as addresses:
    pids = [worker.pid for worker in runtime.worker_processes()]
    assert len(pids) == 2
    with dr.remote_cpp_context(addresses, default_num_clients=3) as context:
      assert context.num_workers == 2
      calls.clear()
      total_float, total_int, doubled = _sum_and_double(floats, ints)
      first_calls = list(calls)
      count = _count_default_clients()
  assert_stopped(pids, addresses)

  assert total_float == expected[0] == np.float32(46.75)
  assert total_int == expected[1] == sum(ints)
  assert doubled == expected[2] == [2 * v for v in ints]
  # A computation whose argument fixes no client count runs once, with the
  # default count, as in one process (not once per worker).
  assert count == expected_count == 3
  # The calls taking client lists (up_to_merge): one per client, clients
  # 0-3 on one worker context and 4-7 on the other.
  with_clients = [(worker, list(arg[1])) for worker, arg in first_calls
                  if isinstance(arg, tff.structure.Struct) and
                  isinstance(arg[0], list)]
  assert sorted(clients for _, clients in with_clients) == [[v] for v in ints]
  worker_of = {clients[0]: worker for worker, clients in with_clients}
  assert len({worker_of[v] for v in ints[:4]}) == 1
  assert len({worker_of[v] for v in ints[4:]}) == 1
  assert worker_of[ints[0]] is not worker_of[ints[4]]


# ----------------------------------------------------------------------------
# DP-FedAvg rounds with the project's canary aggregator.


_model_fn = linear_model.model_fn_for(_FEATURES, _CLASSES)


def _client_datasets():
  return linear_model.client_datasets(_NUM_CLIENTS, _FEATURES, _CLASSES,
                                      examples=6, batch_size=3, seed=11)


def _flat(value):
  return np.concatenate([np.asarray(v, np.float64).reshape(-1)
                         for v in tf.nest.flatten(value)])


def _two_rounds(process, data):
  state = process.initialize()
  initial = _flat(process.get_model_weights(state).trainable)
  outputs = []
  for _ in range(2):
    output = process.next(state, data)
    state = output.state
    outputs.append(output)
  return initial, outputs


@pytest.mark.slow
def test_fed_avg_rounds_match_one_process():
  spec = canary_spec.CanarySpec(seed=5, num_seen=2, num_unseen=2,
                                schedule=[[0], []])
  # Seeded DP noise: the same round seeds in every runtime.
  factory = ca.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=0.1, clients_per_round=float(_NUM_CLIENTS), clip=0.5,
      spec=spec, noise_seed=7)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.3),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=1.0),
      model_aggregator=factory)
  data = _client_datasets()
  with runtime.local_cpp_context():
    expected_initial, expected = _two_rounds(process, data)
  # One worker: the same sums in the same order, so the same bits.
  with tff_workers.local_workers(1) as addresses, dr.remote_cpp_context(
      addresses):
    _, single = _two_rounds(process, data)
  for output, truth in zip(single, expected):
    np.testing.assert_array_equal(
        _flat(output.state.global_model_weights.trainable),
        _flat(truth.state.global_model_weights.trainable))
  # Three workers: blocks of 3, 3 and 2 clients.
  with tff_workers.local_workers(3) as addresses, dr.remote_cpp_context(
      addresses):
    initial, outputs = _two_rounds(process, data)

  np.testing.assert_array_equal(initial, expected_initial)
  for output, truth in zip(outputs, expected):
    weights = _flat(output.state.global_model_weights.trainable)
    np.testing.assert_array_equal(
        weights, _flat(truth.state.global_model_weights.trainable))
    assert np.any(weights != expected_initial)  # The round changed the model.
    np.testing.assert_array_equal(_flat(output.state.aggregator.aggregate),
                                  _flat(truth.state.aggregator.aggregate))
    aggregator = output.metrics['aggregator']
    assert aggregator['canaries_inserted'] == (
        truth.metrics['aggregator']['canaries_inserted'])
    train = output.metrics['client_work']['train']
    truth_train = truth.metrics['client_work']['train']
    assert train['num_examples'] == truth_train['num_examples'] == 48
    assert train['loss'] == truth_train['loss']
  assert [o.metrics['aggregator']['canaries_inserted'] for o in outputs] == [
      1, 0]


# ----------------------------------------------------------------------------
# Worker lifetime.


def test_workers_stop_on_exception_and_ports_are_released(monkeypatch):
  # Workers in this process's network (as where the host grants no
  # namespace), so that their ports are this process's to check.
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'off')
  with pytest.raises(RuntimeError, match='boom'):
    with tff_workers.local_workers(2) as addresses:
      pids = [c.pid for c in runtime.worker_processes()]
      assert len(pids) == 2 and len(set(addresses)) == 2
      assert all(a.startswith('127.0.0.1:') for a in addresses)
      with dr.remote_cpp_context(addresses):
        assert _sum_and_double([np.float32(1.0)], [4])[1] == 4
        raise RuntimeError('boom')
  assert_stopped(pids, addresses)
  # The released ports can be bound again.
  for address in addresses:
    with socket.socket() as probe:
      probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      probe.bind(('127.0.0.1', port_of(address)))


def test_unreachable_worker_times_out(monkeypatch):
  monkeypatch.setenv(isolation.ISOLATION_ENV, 'off')
  with tff_workers.local_workers(1) as addresses:
    free = port_of(addresses[0])
  with pytest.raises(TimeoutError, match=f'127.0.0.1:{free}'):
    with dr.remote_cpp_context([f'127.0.0.1:{free}'], connect_timeout_s=0.5):
      pass
