"""Tests of flower_engine.audit: canaries in Flower's DP-FedAvg.

Against independent truths: the exact null of a never-inserted canary's
cosine (`stats.null_distribution`, a KS test), the closed form of an inserted
canary's cosine when the clients send nothing (the aggregate is the canaries
and the noise), the DP wrapper's realized noise std against z S_t / N_t,
dp_accounting's PLD epsilon of the wrapper's noise, a run killed and resumed
against one never interrupted, and the strategies the audit must refuse.
Skipped where Flower (`flwr`) is not installed (`make test-flower` has it).
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

flwr = pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAdam, FedAvg, FedAvgM,
    FedMedian, FedProx)

from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import canaries
from one_shot_epe.flower_engine import local_grid
from one_shot_epe.runtime import interrupts
from one_shot_epe.stats import null_distribution

DIM = 2000
NODES, COHORT = 30, 5


def _arrays(dim: int = DIM) -> ArrayRecord:
  """A two-array model of `dim` parameters, all zero."""
  return ArrayRecord({'w': Array(np.zeros((dim // 4, 4), np.float32)),
                      'b': Array(np.zeros(dim - dim // 4 * 4, np.float32))})


def _nudged(arrays: ArrayRecord) -> ArrayRecord:
  """`arrays` moved by 1e-4 in one coordinate.

  Flower's clip divides by the update's norm, so no update can be 0.
  """
  w = arrays['w'].numpy().copy()
  w[0, 0] += 1e-4
  return ArrayRecord({'w': Array(w), 'b': arrays['b']})


def _still(node: int, message) -> RecordDict:
  """A client whose update is negligible (1e-4 in one coordinate), weight 1."""
  del node
  return RecordDict({'arrays': _nudged(message.content['arrays']),
                     'metrics': MetricRecord({'num-examples': 1})})


def _fedavg() -> FedAvg:
  return FedAvg(fraction_train=COHORT / NODES, fraction_evaluate=0.0,
                min_train_nodes=COHORT)


def _fixed(z: float, clip: float = 1.0):
  return DifferentialPrivacyServerSideFixedClipping(_fedavg(), z, clip,
                                                     COHORT)


def _run(run_dir, dp, *, rounds=8, k=40, m=40, client=_still, seed=3,
         rounds_per_checkpoint=2, repetitions=1):
  audit = audit_lib.CanaryAudit(
      run_dir=str(run_dir), num_canaries=k, num_unseen_canaries=m,
      rounds=rounds, delta=1e-5, seed=seed, repetitions=repetitions,
      rounds_per_checkpoint=rounds_per_checkpoint)
  strategy = audit.wrap(dp)
  result = strategy.start(local_grid.LocalGrid(NODES, client), _arrays(),
                          num_rounds=rounds)
  return audit, result


def _rows(path):
  with open(path) as stream:
    lines = stream.read().splitlines()
  names = lines[0].split(',')
  return [dict(zip(names, map(float, line.split(',')))) for line in lines[1:]]


def test_unseen_canaries_follow_the_exact_null(tmp_path):
  # 40 seen canaries over 8 rounds: 5 of a round's 10 participants, the most
  # a run may have.
  audit, _ = _run(tmp_path / 'run', _fixed(0.2), k=40, m=600)
  unseen = audit.outcome.final_unseen_cosines
  assert unseen.size == 600
  result = stats.kstest(unseen, lambda x: null_distribution.null_cdf(x, DIM))
  assert result.pvalue > 1e-3
  # And the test can fail: the seen canaries are shifted away from it.
  seen = audit.outcome.final_cosines
  assert stats.kstest(seen, lambda x: null_distribution.null_cdf(
      x, DIM)).pvalue < 1e-4


@pytest.mark.parametrize('adaptive', [False, True])
def test_noise_std_is_z_clip_over_records(tmp_path, adaptive):
  # Clients send nothing: a round's release is (S_t / N_t) sum of its
  # canaries plus the noise, whose std must be z S_t / N_t.
  z = 0.3
  if adaptive:
    dp = DifferentialPrivacyServerSideAdaptiveClipping(
        _fedavg(), z, COHORT, initial_clipping_norm=0.5)
    z_update = (z**-2 - (2 * COHORT / 20)**-2)**-0.5
  else:
    dp, z_update = _fixed(z, clip=0.5), z
  vectors = []
  real_on_round = audit_lib.CanaryAudit.on_round

  def spy(self, round_num, vector, *args):
    vectors.append(vector.copy())
    return real_on_round(self, round_num, vector, *args)

  audit_lib.CanaryAudit.on_round = spy
  try:
    audit, _ = _run(tmp_path / 'run', dp, rounds=6, k=30, m=10)
  finally:
    audit_lib.CanaryAudit.on_round = real_on_round
  metrics = _rows(tmp_path / 'run' / 'metrics.csv')
  clips = [row['clip'] for row in metrics]
  if adaptive:
    assert len(set(clips)) > 1  # The clip moved, so the check is not trivial.
  bank = audit.bank
  for t, (vector, row) in enumerate(zip(vectors, metrics)):
    ids = audit.spec.schedule[t]
    records = COHORT + len(ids)
    assert row['canaries_inserted'] == len(ids)
    signal = row['clip'] / records * bank.seen(ids).astype(np.float64).sum(0)
    residual = vector - signal
    expected = z_update * row['clip'] / records
    assert row['noise_std'] == pytest.approx(expected)
    # The sample std of DIM normals: relative error ~ 1 / sqrt(2 DIM).
    assert np.std(residual) == pytest.approx(expected, rel=5 / math.sqrt(
        2 * DIM))


def test_inserted_canaries_mean_cosine_matches_its_closed_form(tmp_path):
  z, clip, rounds = 0.1, 1.0, 10
  audit, _ = _run(tmp_path / 'run', _fixed(z, clip), rounds=rounds, k=40,
                  m=2)
  schedule = audit.spec.schedule
  # theta_T - theta_0 = sum_t (S / N_t) sum_{j in t} c_j + xi_t, xi_t of
  # std z S / N_t per coordinate; the canaries are orthogonal up to
  # O(d^-1/2), so cos(c_j, .) ~ (S / N_{t_j}) / sqrt(E ||.||^2).
  records = [COHORT + len(ids) for ids in schedule]
  energy = sum(len(ids) * (clip / n)**2 + DIM * (z * clip / n)**2
               for ids, n in zip(schedule, records))
  expected = np.mean([clip / records[t] for t, ids in enumerate(schedule)
                      for _ in ids]) / math.sqrt(energy)
  got = audit.outcome.final_cosines
  # Each cosine carries null noise of std ~ d^-1/2 around its mean.
  assert got.mean() == pytest.approx(expected,
                                     abs=4 / math.sqrt(DIM * got.size))
  assert expected > 10 / math.sqrt(DIM * got.size)  # Far from 0.


def _pld_epsilon(event, delta):
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=1e-4)
  accountant.compose(event)
  return accountant.get_epsilon(delta)


def test_accounted_epsilon_is_dp_accountings_for_the_fixed_wrapper(tmp_path):
  z, rounds = 1.5, 8
  audit, _ = _run(tmp_path / 'run', _fixed(z), rounds=rounds, k=10, m=10)
  want = _pld_epsilon(dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(z), rounds), 1e-5)
  assert audit.report.accounted_epsilon == pytest.approx(want, rel=2e-3)
  assert audit.report.noise_multiplier == z


def test_accounted_epsilon_counts_the_adaptive_wrappers_clipped_count(
    tmp_path):
  z, rounds, sigma = 0.8, 8, 2.0
  dp = DifferentialPrivacyServerSideAdaptiveClipping(
      _fedavg(), z, COHORT, clipped_count_stddev=sigma)
  audit, _ = _run(tmp_path / 'run', dp, rounds=rounds, k=10, m=10)
  z_update = (z**-2 - (2 * sigma)**-2)**-0.5
  # The clipped count has sensitivity 1: a Gaussian at multiplier sigma.
  round_event = dp_accounting.GaussianDpEvent(
      (z_update**-2 + sigma**-2)**-0.5)
  want = _pld_epsilon(dp_accounting.SelfComposedDpEvent(round_event, rounds),
                      1e-5)
  assert audit.report.accounted_epsilon == pytest.approx(want, rel=2e-3)
  assert audit.report.noise_multiplier == pytest.approx(z_update)


class _Killed(Exception):
  pass


def test_a_killed_run_resumes_to_the_same_report(tmp_path):
  def dying(node, message):
    if message.content['config']['server-round'] == 5:
      raise _Killed()
    return _still(node, message)

  with pytest.raises(_Killed):
    _run(tmp_path / 'resumed', _fixed(0.7), client=dying)
  audit, _ = _run(tmp_path / 'resumed', _fixed(0.7))
  assert audit.resumed_from == 4
  whole, _ = _run(tmp_path / 'whole', _fixed(0.7))
  assert whole.resumed_from == 0
  for name in ('report.json', 'final_cosines.csv', 'max_cosines.csv',
               'canary_cosines.csv'):
    with open(tmp_path / 'resumed' / name) as a, open(
        tmp_path / 'whole' / name) as b:
      assert a.read() == b.read(), name
  # A finished run resumes without training, to the same report.
  again, result = _run(tmp_path / 'whole', _fixed(0.7))
  assert again.resumed_from == 8
  assert json.loads(again.report.to_json()) == json.loads(
      whole.report.to_json())
  assert len(result.arrays.to_numpy_ndarrays()) == 2


def test_an_interrupt_saves_the_last_round_and_the_rerun_matches(tmp_path):
  # Ctrl-C in round 5: round 4, not a checkpoint round (every 3), is saved
  # with its cosines still buffered; the rerun resumes from it.
  def interrupted(node, message):
    if message.content['config']['server-round'] == 5:
      raise KeyboardInterrupt
    return _still(node, message)

  with pytest.raises(interrupts.Interrupted) as stopped:
    _run(tmp_path / 'resumed', _fixed(0.7), client=interrupted,
         rounds_per_checkpoint=3)
  assert str(stopped.value) == (
      f'interrupted after round 4 of 8 ({tmp_path / "resumed"}); rerun the '
      'same command to resume')
  audit, _ = _run(tmp_path / 'resumed', _fixed(0.7), rounds_per_checkpoint=3)
  assert audit.resumed_from == 4
  assert audit.opening == f'resumed from round 4 in {tmp_path / "resumed"}'
  whole, _ = _run(tmp_path / 'whole', _fixed(0.7), rounds_per_checkpoint=3)
  for name in ('report.json', 'final_cosines.csv', 'max_cosines.csv',
               'canary_cosines.csv', 'metrics.csv'):
    resumed_text = (tmp_path / 'resumed' / name).read_text()
    whole_text = (tmp_path / 'whole' / name).read_text()
    if name == 'metrics.csv':  # The rounds' times differ, nothing else.
      resumed_text, whole_text = (
          [line.rsplit(',', 1)[0] for line in text.splitlines()]
          for text in (resumed_text, whole_text))
    assert resumed_text == whole_text, name


def test_without_unseen_canaries_the_final_models_report_is_written(
    tmp_path):
  audit, _ = _run(tmp_path / 'run', _fixed(0.7), rounds=2, k=4, m=0)
  assert audit.report.all_iterates is None
  assert audit.report.final.num_unseen == 0
  assert sorted(path.name for path in (tmp_path / 'run').iterdir()
                if path.is_file() and path.suffix != '.lock') == [
                    'canary_cosines.csv', 'config.json',
                    'cosine_densities.png', 'final_cosines.csv',
                    'metrics.csv', 'report.json', 'report.md']
  assert [row['cosine'] for row in _rows(
      tmp_path / 'run' / 'final_cosines.csv')] == (
          audit.outcome.final_cosines.tolist())
  with open(tmp_path / 'run' / 'report.json') as stream:
    assert stream.read() == audit.report.to_json() + '\n'


def test_a_run_directory_of_another_run_is_refused(tmp_path):
  _run(tmp_path / 'run', _fixed(0.7), rounds=2, k=4, m=4)
  with pytest.raises(ValueError, match='noise_multiplier'):
    _run(tmp_path / 'run', _fixed(0.9), rounds=2, k=4, m=4)


@pytest.mark.parametrize('build, named', [
    (lambda: DifferentialPrivacyClientSideAdaptiveClipping(_fedavg(), 0.3,
                                                           COHORT),
     'DifferentialPrivacyClientSideAdaptiveClipping: client-side adaptive '
     'clipping noises a round at the clip Flower sets'),
    (lambda: DifferentialPrivacyClientSideFixedClipping(FedAvgM(), 1.0, 1.0,
                                                        COHORT),
     'wraps FedAvgM'),
    (lambda: DifferentialPrivacyServerSideFixedClipping(
        FedAdam(), 1.0, 1.0, COHORT), 'wraps FedAdam'),
    (lambda: DifferentialPrivacyServerSideFixedClipping(
        FedAvgM(), 1.0, 1.0, COHORT), 'wraps FedAvgM'),
    (lambda: DifferentialPrivacyServerSideAdaptiveClipping(
        FedMedian(), 0.3, COHORT), 'wraps FedMedian'),
    (_fedavg, 'FedAvg: the audit needs one of Flower\'s DP wrappers'),
])
def test_strategies_it_cannot_audit_are_refused_by_name(tmp_path, build,
                                                         named):
  audit = audit_lib.CanaryAudit(run_dir=str(tmp_path / 'run'),
                                num_canaries=4, rounds=2, delta=1e-5)
  with pytest.raises(audit_lib.AuditRefused) as error:
    audit.wrap(build())
  assert named in str(error.value)


def test_fedprox_is_audited_its_aggregation_is_fedavgs(tmp_path):
  audit = audit_lib.CanaryAudit(run_dir=str(tmp_path / 'run'),
                                num_canaries=4, rounds=2, delta=1e-5)
  audit.wrap(DifferentialPrivacyServerSideFixedClipping(
      FedProx(proximal_mu=0.1), 1.0, 1.0, COHORT))


def test_unequal_client_weights_are_refused_by_name(tmp_path):
  def weighted(node, message):
    return RecordDict({'arrays': _nudged(message.content['arrays']),
                       'metrics': MetricRecord({'num-examples': node})})

  with pytest.raises(audit_lib.AuditRefused,
                     match="weighted_by_key 'num-examples' gives the replies "
                     'unequal weights'):
    _run(tmp_path / 'run', _fixed(1.0), rounds=2, k=4, m=4, client=weighted)


def test_canary_replies_leave_the_train_metrics_mean_unchanged(tmp_path):
  sampled = {}

  def reporting(node, message):
    sampled.setdefault(message.content['config']['server-round'],
                       []).append(node)
    return RecordDict({'arrays': _nudged(message.content['arrays']),
                       'metrics': MetricRecord({'num-examples': 1,
                                                'loss': float(node)})})

  audit, result = _run(tmp_path / 'run', _fixed(1.0), rounds=3, k=6, m=4,
                       client=reporting)
  assert all(len(ids) for ids in audit.spec.schedule)  # Canaries each round.
  for round_num, metrics in result.train_metrics_clientapp.items():
    assert metrics['loss'] == pytest.approx(np.mean(sampled[round_num]))


def test_flowers_reply_count_counts_the_clients_and_names_the_canaries(
    tmp_path, caplog):
  with caplog.at_level('INFO', logger='flwr'):
    audit, _ = _run(tmp_path / 'run', _fixed(1.0), rounds=2, k=6, m=4)
  counted = [record.getMessage() for record in caplog.records
             if 'Received' in record.getMessage()]
  canaries = [len(ids) for ids in audit.spec.schedule]
  # The DP wrapper's count, then FedAvg's, each round.
  assert counted == [
      line for k in canaries for line in (
          f'aggregate_train: Received {COHORT} results and 0 failures',
          f'aggregate_train: Received {COHORT} results and 0 failures, and '
          f'the round\'s {k} canaries as one reply')]


def test_canaries_are_the_banks_unit_directions():
  bank = canaries.CanaryBank(
      audit_lib.CanaryAudit(run_dir='unused', num_canaries=3, rounds=2,
                            delta=1e-5).spec, 50)
  rows = bank.seen([0, 2])
  np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(rows, canaries.directions(0, [0, 2], 50))


def test_a_runaway_clip_and_a_lost_loss_are_logged_once_and_noted(
    tmp_path, caplog):
  # At a clip learning rate of 5 Flower's adaptive wrapper moves the clip by
  # about e^2.5 a round (here it grows, as metrics.csv shows). The clients'
  # loss is NaN.

  def lost(node, message):
    del node
    return RecordDict({'arrays': _nudged(message.content['arrays']),
                       'metrics': MetricRecord({'num-examples': 1,
                                                'train_loss': math.nan})})

  dp = DifferentialPrivacyServerSideAdaptiveClipping(
      _fedavg(), 0.3, COHORT, initial_clipping_norm=0.5, clip_norm_lr=5.0)
  logger = 'one_shot_epe.runtime.training_health'
  with caplog.at_level('WARNING', logger=logger):
    _run(tmp_path / 'run', dp, rounds=6, k=30, m=10, client=lost)
  clips = [row['clip'] for row in _rows(tmp_path / 'run' / 'metrics.csv')]
  assert max(clips) / clips[0] > 100, clips
  warnings = [record.getMessage() for record in caplog.records
              if record.name == logger]
  assert len(warnings) == 2, warnings
  with open(tmp_path / 'run' / 'report.json') as stream:
    clip_note, loss_note = json.load(stream)['notes']
  assert clip_note.startswith(
      f'The adaptive clip grew from {clips[0]:.4g} (round 1) to '
      f'{max(clips):.4g} (round {clips.index(max(clips)) + 1})')
  assert loss_note.startswith('The training loss became nan in round 1')
  text = (tmp_path / 'run' / 'report.md').read_text()
  for note in (clip_note, loss_note):
    assert text.count(f'**Training health:** {note}') == 1
