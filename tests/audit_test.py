"""Tests of one_shot_epe.tff_engine.audit: the one-object route from factory to report.

Independent truths: TFF's stock DP factory (the cohort arithmetic), canaries
regenerated and cosines taken by brute force in numpy (the tracking), an
uninterrupted run (resumption, also after Ctrl-C in the user's loop), and
the example file run as a user would.
"""

import asyncio
import os
import signal
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import linear_model
from one_shot_epe.design import canary_spec
from one_shot_epe.tff_engine import audit
from one_shot_epe.tff_engine import canaries
from one_shot_epe.stats import estimation
from one_shot_epe.tff_engine import runtime

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


@pytest.mark.slow
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
  inserted = canary_audit.spec.schedule[0]
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
  inserted = canary_audit.spec.schedule[0]
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


@pytest.mark.slow
def test_maxima_and_final_cosines_equal_brute_force():
  canary_audit = _audit()
  initial, state, aggregates = _run_observed(canary_audit)
  final = _flat(state)
  spec = canary_audit.spec
  ids = np.concatenate([canary_spec.seen_ids(spec.num_seen),
                        canary_spec.unseen_ids(spec.num_unseen)])
  units = _unit_canaries(spec.seed, ids)
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


def _csv_columns(path) -> dict[str, np.ndarray]:
  """A CSV's columns; a shorter column's trailing cells are empty."""
  with open(path, encoding='utf-8') as stream:
    header, *rows = (line.split(',') for line in stream.read().splitlines())
  return {name: np.array([float(row[i]) for row in rows if row[i]])
          for i, name in enumerate(header)}


@pytest.mark.slow
@pytest.mark.parametrize('num_unseen', [10, 0])
def test_write_results_writes_a_launchers_result_files(tmp_path, num_unseen):
  canary_audit = _audit(num_unseen_canaries=num_unseen)
  _run_observed(canary_audit)
  run_dir = tmp_path / 'run'
  report = canary_audit.write_results(str(run_dir), accuracy=0.5)
  assert report == canary_audit.report(accuracy=0.5)
  assert report.accuracy == 0.5
  files = {'final_cosines.csv', 'report.json', 'report.md',
           'cosine_densities.png'}
  if num_unseen:
    files.add('max_cosines.csv')
  assert set(os.listdir(run_dir)) == files
  assert (run_dir / 'report.json').read_text() == report.to_json() + '\n'
  assert (run_dir / 'report.md').read_text(encoding='utf-8') == (
      report.to_markdown())
  final = _csv_columns(run_dir / 'final_cosines.csv')
  np.testing.assert_array_equal(final['cosine'], canary_audit.final_cosines())
  maxima = canary_audit.cosine_maxima()
  if num_unseen:
    np.testing.assert_array_equal(final['unseen'],
                                  canary_audit.final_cosines(unseen=True))
    columns = _csv_columns(run_dir / 'max_cosines.csv')
    np.testing.assert_array_equal(columns['seen'], maxima.seen)
    np.testing.assert_array_equal(columns['unseen'], maxima.unseen)
  else:
    # Without unseen canaries: the final model's report alone.
    assert list(final) == ['cosine']
    assert report.all_iterates is None


@pytest.mark.slow
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


@pytest.mark.slow
def test_ctrl_c_in_the_loop_keeps_the_last_round_observed(tmp_path):
  # Checkpoints every 4 rounds; Ctrl-C while round 4 starts. The manager
  # saves round 3 (its 3 rounds unscored), and the run resumed from there
  # ends as the same run uninterrupted, bit for bit.
  def train(directory, interrupt_at=None):
    canary_audit = _audit()
    process = _process(canary_audit.gaussian_adaptive(
        noise_multiplier=0.3, initial_l2_norm_clip=0.5))
    manager = canary_audit.program_state_manager(
        tff.program.FileProgramStateManager(str(directory)),
        rounds_per_checkpoint=4)

    def select(round_num):
      if round_num == interrupt_at:
        os.kill(os.getpid(), signal.SIGINT)
      return _data(round_num - 1)

    try:
      tff.simulation.run_training_process(process, select, ROUNDS,
                                          program_state_manager=manager)
    except KeyboardInterrupt:
      return manager.save_last_observed()
    return canary_audit

  uninterrupted = train(tmp_path / 'whole')
  assert train(tmp_path / 'cut', interrupt_at=4) == 3  # The round saved.
  assert sorted(os.listdir(tmp_path / 'cut')) == ['program_state_0',
                                                  'program_state_3']
  resumed = train(tmp_path / 'cut')
  assert resumed.rounds_observed == ROUNDS
  for got, want in zip(resumed.cosine_maxima(), uninterrupted.cosine_maxima()):
    np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(resumed.final_cosines(),
                                uninterrupted.final_cosines())


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
  units = _unit_canaries(3, canary_spec.seen_ids(8))
  np.testing.assert_allclose(canary_audit.final_cosines(),
                             units @ delta / np.linalg.norm(delta), atol=1e-5)
  assert len(canary_audit.cosine_maxima().seen) == 8


@pytest.mark.slow
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


def test_a_model_too_small_for_the_null_is_refused_before_any_round():
  # Softmax regression from 1 feature to 1 class: d = 2 < 3, refused where
  # TFF creates the audit's aggregation on the model, naming its d.
  with pytest.raises(ValueError, match='the model has 2 parameters'):
    tff.learning.algorithms.build_unweighted_fed_avg(
        linear_model.model_fn_for(1, 1),
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
        model_aggregator=_audit().gaussian_adaptive(noise_multiplier=0.5))


# ----------------------------------------------------------------------------
# all_iterates_statistic='model_delta': the noised aggregate vs the model step.

_FEATURES = 8
_CLASSES = 5
_DIM = _FEATURES * _CLASSES + _CLASSES
_CANARY_SEED = 5
_SCHEDULE = [[0, 1], [2], [3]]
_ROUNDS = 4  # Round 3 inserts no canary.
_MOMENTUM = 0.9
_ROUNDING = 2.0**-24  # float32 unit roundoff.


def _tracked_run(server_momentum):
  """`_ROUNDS` rounds of DP-FedAvg on a linear model, tracking model steps.

  Server SGD at learning rate 1 (with `server_momentum`, or none); the noise
  is seeded. Returns (learning states 0.._ROUNDS, the audit's maxima).
  """
  spec = canary_spec.CanarySpec(
      seed=_CANARY_SEED, num_seen=4, num_unseen=6, schedule=_SCHEDULE,
      buffer_rounds=3, all_iterates_statistic='model_delta')
  canary_audit = audit.CanaryAudit.from_spec(
      spec, canary_spec.DPAggregation(noise_multiplier=0.2,
                                      clients_per_round=3.0, clip=0.5),
      delta=1e-3, noise_seed=11)
  factory = canary_audit.aggregator()
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      linear_model.model_fn_for(_FEATURES, _CLASSES),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=0.5),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=1.0, momentum=server_momentum),
      model_aggregator=factory)
  data = linear_model.client_datasets(3, _FEATURES, _CLASSES, examples=12,
                                      batch_size=4, seed=2)
  with runtime.local_cpp_context():
    states = [process.initialize()]
    canary_audit.observe(states[0])
    for _ in range(_ROUNDS):
      states.append(process.next(states[-1], data).state)
      canary_audit.observe(states[-1])
  return states, canary_audit.cosine_maxima()


@pytest.fixture(scope='module', name='sgd_run')
def fixture_sgd_run():
  return _tracked_run(server_momentum=None)


@pytest.fixture(scope='module', name='momentum_run')
def fixture_momentum_run():
  return _tracked_run(server_momentum=_MOMENTUM)


def _weights(state, dtype=np.float64):
  return np.concatenate([np.asarray(w, dtype).reshape(-1) for w in
                         state.global_model_weights.trainable])


def _vectors(states, statistic):
  """The vector of each round, float64 [_ROUNDS, d]: rho_bar_t, or the step.

  The step is fl32(theta_{t-1} - theta_t), from the stored float32 models.
  """
  if statistic == 'aggregate':
    return np.stack([np.asarray(state.aggregator.aggregate, np.float64)
                     for state in states[1:]])
  return np.stack([
      (_weights(previous, np.float32) - _weights(state, np.float32)).astype(
          np.float64) for previous, state in zip(states[:-1], states[1:])])


def _max_cosines(vectors):
  """Max over rounds of each tracked canary's cosine, float64 brute force."""
  ids = np.concatenate([canary_spec.seen_ids(4), canary_spec.unseen_ids(6)])
  units = []
  for canary_id in ids:
    u = tf.random.stateless_normal([_DIM], seed=[_CANARY_SEED, canary_id],
                                   dtype=tf.float32, alg='philox').numpy()
    units.append(u.astype(np.float64) / np.linalg.norm(u.astype(np.float64)))
  norms = np.linalg.norm(vectors, axis=1, keepdims=True)
  return (np.stack(units) @ (vectors / norms).T).max(axis=1)


def test_model_step_is_the_aggregate_under_sgd_at_learning_rate_1(sgd_run):
  # theta_t = fl32(theta_{t-1} - rho_t), so the recovered step
  # fl32(theta_{t-1} - theta_t) differs from rho_t by at most
  # u (|theta_t| + |step|) per coordinate (u = 2^-24): equality up to float32
  # rounding of the stored model, not bit equality. The model starts at zero,
  # so round 0's step is exact.
  states, _ = sgd_run
  aggregates = _vectors(states, 'aggregate')
  steps = _vectors(states, 'model_delta')
  np.testing.assert_array_equal(steps[0], aggregates[0])
  for t in range(_ROUNDS):
    bound = 1.01 * _ROUNDING * (np.abs(_weights(states[t + 1])) +
                                np.abs(steps[t]))
    assert np.all(np.abs(steps[t] - aggregates[t]) <= bound), t
    assert np.linalg.norm(aggregates[t]) > 0.01
  # Hence the cosines, and their maxima over rounds, agree to float32
  # rounding: |cos(c, a) - cos(c, b)| <= 2 ||a - b|| / ||a|| (a ~ 1e-7 here).
  cosine_bound = max(
      2 * np.linalg.norm(steps[t] - aggregates[t]) /
      np.linalg.norm(aggregates[t]) for t in range(_ROUNDS))
  assert np.all(np.abs(_max_cosines(steps) - _max_cosines(aggregates)) <=
                cosine_bound + 1e-12)


def test_model_step_under_momentum_carries_earlier_aggregates(momentum_run):
  # TFF's SGD with momentum: m_t = mu m_{t-1} + rho_t, theta_t = theta_{t-1} -
  # m_t, so the step is sum_{s <= t} mu^(t-s) rho_s: the aggregate in round 0
  # only.
  states, _ = momentum_run
  aggregates = _vectors(states, 'aggregate')
  steps = _vectors(states, 'model_delta')
  for t in range(_ROUNDS):
    want = sum(_MOMENTUM**(t - s) * aggregates[s] for s in range(t + 1))
    np.testing.assert_allclose(steps[t], want, rtol=0, atol=1e-6)
  assert np.linalg.norm(steps[1] - aggregates[1]) > 0.5 * np.linalg.norm(
      aggregates[0])
  assert np.abs(_max_cosines(steps) - _max_cosines(aggregates)).max() > 0.05


@pytest.mark.parametrize('run_name', ['sgd_run', 'momentum_run'])
def test_tracker_is_fed_the_model_step(run_name, request):
  states, maxima = request.getfixturevalue(run_name)
  want = _max_cosines(_vectors(states, 'model_delta'))
  np.testing.assert_allclose(np.concatenate([maxima.seen, maxima.unseen]),
                             want, rtol=0, atol=1e-6)



def test_unknown_statistic_is_rejected():
  with pytest.raises(ValueError, match="all_iterates_statistic must be one "
                     "of.*'median'"):
    canary_spec.CanarySpec(seed=0, num_seen=1, num_unseen=0,
                           all_iterates_statistic='median')


# ----------------------------------------------------------------------------
# One constructor, one audited aggregation.


def _adaptive_dp(cohort: float) -> canary_spec.DPAggregation:
  return canary_spec.DPAggregation(noise_multiplier=0.3,
                                   clients_per_round=cohort, initial_clip=0.5)


@pytest.mark.slow
def test_constructor_paths_give_equal_reports():
  # The plan's arguments with gaussian_adaptive, from_spec with aggregator()
  # and the constructor given spec and dp (no factory method called at all)
  # audit the same seeded run: their reports are equal, field by field.
  planned = _audit()
  _, state, _ = _run_observed(planned)
  dp = _adaptive_dp(planned.expected_cohort)
  from_spec = audit.CanaryAudit.from_spec(planned.spec, dp, delta=1e-3,
                                          noise_seed=5)
  process = _process(from_spec.aggregator())
  states = [process.initialize()]
  for t in range(ROUNDS):
    states.append(process.next(states[-1], _data(t)).state)
  np.testing.assert_array_equal(_flat(states[-1]), _flat(state))
  constructed = audit.CanaryAudit(spec=planned.spec, dp=dp, delta=1e-3,
                                  noise_seed=5)
  for canary_audit in (from_spec, constructed):
    for learning_state in states:
      canary_audit.observe(learning_state)
  want = planned.report().to_dict()
  assert want['final']['epsilon_est'] > 0
  assert from_spec.report().to_dict() == want
  assert constructed.report().to_dict() == want


def test_one_audit_audits_one_aggregation():
  canary_audit = _audit()
  first = canary_audit.gaussian_fixed(noise_multiplier=0.5, clip=1.0)
  assert first.dp == canary_spec.DPAggregation(
      noise_multiplier=0.5, clients_per_round=canary_audit.expected_cohort,
      clip=1.0)
  # The same aggregation again (a second process) is the same audit.
  canary_audit.gaussian_fixed(noise_multiplier=0.5, clip=1.0)
  with pytest.raises(ValueError, match='one aggregation'):
    canary_audit.gaussian_fixed(noise_multiplier=0.7, clip=1.0)
  with pytest.raises(ValueError, match='one aggregation'):
    canary_audit.gaussian_adaptive(noise_multiplier=0.5)
  with pytest.raises(ValueError, match='one aggregation'):
    canary_audit.tree_aggregation(
        noise_multiplier=0.5, l2_norm_clip=1.0,
        record_specs=tf.TensorSpec([DIM], tf.float32))
  planned = audit.CanaryAudit.from_spec(
      canary_audit.spec, _adaptive_dp(canary_audit.expected_cohort),
      delta=1e-3)
  assert planned.aggregator().dp == _adaptive_dp(canary_audit.expected_cohort)
  planned.gaussian_adaptive(noise_multiplier=0.3, initial_l2_norm_clip=0.5)
  with pytest.raises(ValueError, match='one aggregation'):
    planned.gaussian_adaptive(noise_multiplier=0.3)


def test_constructor_takes_a_plan_or_spec_and_dp():
  spec = _audit().spec
  dp = _adaptive_dp(8.0)
  with pytest.raises(TypeError, match='num_canaries, rounds and '
                     'clients_per_round'):
    audit.CanaryAudit(delta=1e-3, num_canaries=4)
  with pytest.raises(TypeError, match='not both'):
    audit.CanaryAudit(spec=spec, dp=dp, delta=1e-3, repetitions=2)
  with pytest.raises(TypeError, match='spec must be'):
    audit.CanaryAudit.from_spec('spec', dp, delta=1e-3)
  with pytest.raises(TypeError, match='dp must be'):
    audit.CanaryAudit(spec=spec, delta=1e-3)
  with pytest.raises(ValueError, match='delta'):
    audit.CanaryAudit.from_spec(spec, dp, delta=0.0)
  with pytest.raises(ValueError, match='aggregator'):
    _audit().aggregator()
