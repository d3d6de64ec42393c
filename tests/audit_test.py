"""Tests of one_shot_epe.audit: the one-object route from factory to report.

Independent truths: TFF's stock DP factory (the cohort arithmetic), canaries
regenerated and cosines taken by brute force in numpy (the tracking), an
uninterrupted run (resumption), and the example file run as a user would.
"""

import asyncio
import os
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import linear_model
from one_shot_epe import audit
from one_shot_epe import canaries
from one_shot_epe import estimation
from one_shot_epe import runtime

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
FEATURES, CLASSES, CLIENTS, ROUNDS = 6, 3, 4, 6
DIM = FEATURES * CLASSES + CLASSES


def _data(round_num: int) -> list[tf.data.Dataset]:
  return linear_model.client_datasets(CLIENTS, FEATURES, CLASSES, 8, 4,
                                      seed=round_num)


def _process(aggregator) -> tff.learning.templates.LearningProcess:
  return tff.learning.algorithms.build_unweighted_fed_avg(
      linear_model.model_fn_for(FEATURES, CLASSES),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=aggregator)


def _audit(**overrides) -> audit.CanaryAudit:
  settings = dict(num_canaries=12, num_unseen_canaries=10, rounds=ROUNDS,
                  repetitions=2, clients_per_round=CLIENTS, delta=1e-3,
                  canary_seed=3, noise_seed=5)
  settings.update(overrides)
  return audit.CanaryAudit(**settings)


def _flat(state) -> np.ndarray:
  return np.concatenate([np.asarray(w).ravel() for w in tf.nest.flatten(
      state.global_model_weights.trainable)])


def _unit_canaries(seed: int, ids) -> np.ndarray:
  return np.stack([canaries.canary(seed, int(i), DIM).numpy() for i in ids])


@pytest.fixture(autouse=True)
def _context():
  with runtime.local_cpp_context():
    yield


def test_cohort_counts_expected_canaries_as_tffs_stock_factory_would():
  # 12 canaries x 2 presentations over 6 rounds: 4 expected per round, so the
  # DP mean divides by 4 + 4 = 8. Against TFF's own factory with that
  # denominator (noise 0, a clip no update reaches), one round differs by
  # exactly the round's canaries, each scaled to the clip, over 8.
  clip = 1e3
  canary_audit = _audit()
  assert canary_audit.expected_cohort == CLIENTS + 12 * 2 / ROUNDS
  with_canaries = _process(canary_audit.gaussian_fixed(noise_multiplier=0.0,
                                                       clip=clip))
  stock = _process(tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=0.0, clients_per_round=8.0, clip=clip))
  after = [_flat(p.next(p.initialize(), _data(0)).state)
           for p in (with_canaries, stock)]
  inserted = canary_audit.canary_config.schedule[0]
  assert len(inserted) > 0
  expected = -clip * _unit_canaries(3, inserted).sum(axis=0) / 8.0
  np.testing.assert_allclose(after[0] - after[1], expected, rtol=1e-4,
                             atol=1e-4)


def test_tree_aggregation_adds_canaries_to_tffs_stock_tree_factory():
  # As above, against TFF's own DP-FTRL factory (noise 0): the canaries over
  # the cohort 8 are the whole difference, and the audit's dp_event is the
  # tree query's (UnsupportedDpEvent: correlated noise).
  clip = 1e3
  specs = [tf.TensorSpec([FEATURES, CLASSES], tf.float32),
           tf.TensorSpec([CLASSES], tf.float32)]
  canary_audit = _audit()
  with_canaries = _process(canary_audit.tree_aggregation(
      noise_multiplier=0.0, l2_norm_clip=clip, record_specs=specs))
  stock = _process(
      tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
          noise_multiplier=0.0, clients_per_round=8.0, l2_norm_clip=clip,
          record_specs=specs))
  states = [p.next(p.initialize(), _data(0)).state
            for p in (with_canaries, stock)]
  inserted = canary_audit.canary_config.schedule[0]
  expected = -clip * _unit_canaries(3, inserted).sum(axis=0) / 8.0
  np.testing.assert_allclose(_flat(states[0]) - _flat(states[1]), expected,
                             rtol=1e-4, atol=1e-4)
  assert canary_audit.dp_event(states[0]) == dp_accounting.UnsupportedDpEvent()


def _run_observed(canary_audit, rounds=ROUNDS):
  process = _process(canary_audit.gaussian_adaptive(noise_multiplier=0.3,
                                                    initial_l2_norm_clip=0.5))
  state = process.initialize()
  canary_audit.observe(state)
  initial, aggregates = _flat(state), []
  for t in range(rounds):
    state = process.next(state, _data(t)).state
    aggregates.append(np.asarray(state.aggregator.aggregate))
    canary_audit.observe(state)
  return initial, state, np.stack(aggregates)


def test_maxima_and_final_cosines_equal_brute_force():
  canary_audit = _audit()
  initial, state, aggregates = _run_observed(canary_audit)
  final = _flat(state)
  config = canary_audit.canary_config
  ids = np.concatenate([canaries.seen_ids(config.num_seen),
                        canaries.unseen_ids(config.num_unseen)])
  units = _unit_canaries(config.seed, ids)
  cosines = units @ aggregates.T / np.linalg.norm(aggregates, axis=1)
  maxima = canary_audit.cosine_maxima()
  np.testing.assert_allclose(maxima.seen, cosines.max(axis=1)[:12], atol=1e-5)
  np.testing.assert_allclose(maxima.unseen, cosines.max(axis=1)[12:],
                             atol=1e-5)
  delta = initial - final
  np.testing.assert_allclose(
      canary_audit.final_cosines(),
      units[:12] @ delta / np.linalg.norm(delta), atol=1e-5)
  np.testing.assert_allclose(
      canary_audit.final_cosines(unseen=True),
      units[12:] @ delta / np.linalg.norm(delta), atol=1e-5)
  report = canary_audit.report()
  assert report.canary_presentations == 2
  assert report.all_iterates is not None
  assert report.final.num_unseen == 10
  assert report.final.epsilon_one_run is not None
  # Whole-run accounting from the aggregator's own DpEvent (value and count
  # noise of the adaptive clip), a client in every one of the 6 rounds.
  round_event = canary_audit.dp_event(state)
  assert isinstance(round_event, dp_accounting.ComposedDpEvent)
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.SelfComposedDpEvent(round_event, ROUNDS))
  assert report.accounted_epsilon == pytest.approx(
      accountant.get_epsilon(1e-3), rel=2e-3)
  # Each canary twice in 6 rounds: one Gaussian at 0.3 sqrt(6) / 2.
  assert report.last_iterate_epsilon == pytest.approx(
      estimation.gaussian_epsilon(0.3 * np.sqrt(ROUNDS) / 2, 1e-3),
      rel=1e-12)


def test_run_training_process_with_checkpoints_resumes_exactly(tmp_path):
  uninterrupted = _audit()
  _run_observed(uninterrupted)

  def train(total_rounds):
    canary_audit = _audit()
    process = _process(canary_audit.gaussian_adaptive(
        noise_multiplier=0.3, initial_l2_norm_clip=0.5))
    files = tff.program.FileProgramStateManager(str(tmp_path))
    tff.simulation.run_training_process(
        process, lambda round_num: _data(round_num - 1), total_rounds,
        program_state_manager=canary_audit.program_state_manager(
            files, rounds_per_checkpoint=2))
    return canary_audit

  train(4)  # Checkpoints at rounds 0, 2 and 4.
  resumed = train(ROUNDS)
  for got, want in zip(resumed.cosine_maxima(), uninterrupted.cosine_maxima()):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(resumed.final_cosines(),
                             uninterrupted.final_cosines(), rtol=1e-5)


class _RoundData(tff.program.FederatedDataSourceIterator):
  """Round r's clients are `_data(r)`: a deep-copyable, serializable iterator.

  (TFF's DatasetDataSource holds tf.data datasets, which train_model's
  deepcopy of the iterator cannot copy.)
  """

  def __init__(self, round_num: int = 0):
    self._round = round_num

  @classmethod
  def from_bytes(cls, buffer: bytes) -> '_RoundData':
    return cls(int(buffer.decode()))

  def to_bytes(self) -> bytes:
    return str(self._round).encode()

  @property
  def federated_type(self) -> tff.FederatedType:
    return tff.FederatedType(tff.SequenceType(_data(0)[0].element_spec),
                             tff.CLIENTS)

  def select(self, k=None) -> list[tf.data.Dataset]:
    del k  # Always CLIENTS.
    self._round += 1
    return _data(self._round - 1)

  def __eq__(self, other) -> bool:
    return isinstance(other, _RoundData) and other._round == self._round


class _RoundSource(tff.program.FederatedDataSource):

  @property
  def federated_type(self) -> tff.FederatedType:
    return _RoundData().federated_type

  def iterator(self) -> _RoundData:
    return _RoundData()


def test_train_model_program_is_observed_every_round():
  # TFF's program-logic loop saves ProgramState(state, round, ...) for the
  # initial state and after every round; the audit reads the learning state
  # out of it. Truth: the final state train_model releases, canaries
  # regenerated in numpy.
  canary_audit = _audit(num_canaries=8, num_unseen_canaries=8, repetitions=1,
                        rounds=4)
  process = _process(canary_audit.gaussian_adaptive(noise_multiplier=0.3,
                                                    initial_l2_norm_clip=0.5))
  initial = _flat(process.initialize())
  released = tff.program.MemoryReleaseManager()
  # A private loop: asyncio.run would leave the thread without a current
  # loop, which later in-process TFF loops (run_training_process) need.
  loop = asyncio.new_event_loop()
  with runtime.local_cpp_context(federated_program=True):
    loop.run_until_complete(tff.learning.programs.train_model(
        train_process=process,
        train_data_source=_RoundSource(),
        train_per_round_clients=CLIENTS, train_total_rounds=4,
        program_state_manager=canary_audit.program_state_manager(),
        model_output_manager=released, evaluation_manager=None,
        evaluation_periodicity=1))
  loop.close()
  final = _flat(released.values()['training_checkpoint_round_4'])
  delta = initial - final
  units = _unit_canaries(3, canaries.seen_ids(8))
  np.testing.assert_allclose(canary_audit.final_cosines(),
                             units @ delta / np.linalg.norm(delta), atol=1e-5)
  assert len(canary_audit.cosine_maxima().seen) == 8


def test_example_runs_and_prints_both_threat_models():
  # The user's environment, less any TensorFlow log setting of ours.
  env = {key: value for key, value in os.environ.items()
         if key not in ('TF_CPP_MIN_LOG_LEVEL', 'ONE_SHOT_EPE_VERBOSE')}
  completed = subprocess.run(
      [sys.executable, '-m', 'examples.canaries_in_fedavg'], cwd=REPO,
      env=env, capture_output=True, text=True, timeout=600, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  for line in ('| all iterates |', '| final model |',
               '| analytical ε (canary, r = 1) |',
               '| accounted ε (real client) |'):
    assert line in completed.stdout
  # No TensorFlow/CUDA start-up lines: the audit imported TensorFlow quietly.
  for noise in ('Unable to register', 'Could not find cuda drivers',
                'oneDNN custom operations', 'Starting new session'):
    assert noise not in completed.stderr, completed.stderr[-3000:]


def test_misuse_is_named():
  canary_audit = _audit()
  with pytest.raises(ValueError, match='observed no training round'):
    canary_audit.report()
  with pytest.raises(ValueError, match='delta'):
    _audit(delta=1.5)
  with pytest.raises(TypeError, match='delta'):
    _audit(delta='0.1')
  with pytest.raises(ValueError, match='rounds_per_checkpoint'):
    canary_audit.program_state_manager(rounds_per_checkpoint=0)
  with pytest.raises(ValueError, match='repetitions'):
    _audit(repetitions=ROUNDS + 1)
