"""The audit of Flower's client-side fixed clipping, clients behind its mod.

`DifferentialPrivacyClientSideFixedClipping` sends the clip to the
clients, whose `fixedclipping_mod` clips their updates, and noises the mean
on the server; a canary replying at the clip norm meets what a clipped
client meets. The server-side wrappers' tests (flower_engine_audit_test.py)
against the same independent truths, every client here behind Flower's own
mod: the exact null of a never-inserted canary's cosine, the noise std
z S / N_t with clients the mod clipped (known updates subtracted), a
noiseless release that is exactly the mean of the clipped updates and the
canaries at the clip, the inserted canaries' closed-form cosine,
dp_accounting's PLD epsilon, a killed run resumed against one never
interrupted, unequal weights refused; and a client without the mod, whose
update exceeds the clip, refused. Skipped where Flower (`flwr`) is not
installed (`make test-flower` has it).
"""

import math

import numpy as np
import pytest
from scipy import stats

flwr = pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord
from flwr.app import RecordDict
from flwr.clientapp.mod import fixedclipping_mod
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping, FedAvg)

from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid
from one_shot_epe.stats import null_distribution

DIM = 2000
NODES, COHORT = 30, 5


def _arrays() -> ArrayRecord:
  return ArrayRecord({'w': Array(np.zeros((DIM // 4, 4), np.float32)),
                      'b': Array(np.zeros(DIM - DIM // 4 * 4, np.float32))})


def _direction(node: int) -> np.ndarray:
  """Client `node`'s unit update direction, float64 [DIM]."""
  g = np.random.default_rng(1000 + node).standard_normal(DIM)
  return g / np.linalg.norm(g)


def _moving(norm: float, weight=lambda node: 1, seen=None):
  """A client moving `norm` along its direction (0: 1e-4 in one coordinate).

  `seen` collects the sampled nodes per round.
  """

  def client(node, message):
    round_num = message.content['config']['server-round']
    if seen is not None:
      seen.setdefault(round_num, []).append(node)
    arrays = message.content['arrays']
    flat = np.concatenate([a.ravel() for a in arrays.to_numpy_ndarrays()])
    if norm:
      flat = flat + norm * _direction(node)
    else:
      flat[0] += 1e-4
    w, b = flat[:DIM // 4 * 4], flat[DIM // 4 * 4:]
    return RecordDict({
        'arrays': ArrayRecord({
            'w': Array(w.reshape(DIM // 4, 4).astype(np.float32)),
            'b': Array(b.astype(np.float32))}),
        'metrics': MetricRecord({'num-examples': weight(node)})})

  return client


def _clipped(client):
  """`client` behind Flower's fixedclipping_mod, as in a ClientApp's mods."""
  context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                    run_config={})

  def behind_mod(node, message):
    reply = fixedclipping_mod(message, context, lambda msg, ctxt: Message(
        content=client(node, msg), reply_to=msg))
    assert not reply.has_error(), reply.error
    return reply.content

  return behind_mod


def _wrapper(z: float, clip: float = 1.0):
  fedavg = FedAvg(fraction_train=COHORT / NODES, fraction_evaluate=0.0,
                  min_train_nodes=COHORT)
  return DifferentialPrivacyClientSideFixedClipping(fedavg, z, clip, COHORT)


def _run(run_dir, dp, *, rounds=8, k=40, m=40, client=None, seed=3):
  audit = audit_lib.CanaryAudit(
      run_dir=str(run_dir), num_canaries=k, num_unseen_canaries=m,
      rounds=rounds, delta=1e-5, seed=seed, rounds_per_checkpoint=2)
  client = _clipped(_moving(0.0)) if client is None else client
  result = audit.wrap(dp).start(local_grid.LocalGrid(NODES, client),
                                _arrays(), num_rounds=rounds)
  return audit, result


def _rows(path):
  with open(path) as stream:
    lines = stream.read().splitlines()
  names = lines[0].split(',')
  return [dict(zip(names, map(float, line.split(',')))) for line in lines[1:]]


def test_unseen_canaries_follow_the_exact_null(tmp_path):
  audit, _ = _run(tmp_path / 'run', _wrapper(0.2), k=40, m=600)
  assert audit.report.setting['dp_wrapper'] == (
      'DifferentialPrivacyClientSideFixedClipping')
  unseen = audit.outcome.final_unseen_cosines
  result = stats.kstest(unseen, lambda x: null_distribution.null_cdf(x, DIM))
  assert result.pvalue > 1e-3
  seen = audit.outcome.final_cosines
  assert stats.kstest(seen, lambda x: null_distribution.null_cdf(
      x, DIM)).pvalue < 1e-4


def test_noise_std_is_z_clip_over_records_with_clients_clipped_by_the_mod(
    tmp_path):
  # Every client moves 10 along its own direction; the mod clips it to S,
  # so a round's release is (S / N_t) (its clients' directions + its
  # canaries) plus noise of std z S / N_t.
  z, clip = 0.3, 0.5
  vectors, seen = [], {}
  real_on_round = audit_lib.CanaryAudit.on_round

  def spy(self, round_num, vector, *args):
    vectors.append(vector.copy())
    return real_on_round(self, round_num, vector, *args)

  audit_lib.CanaryAudit.on_round = spy
  try:
    audit, _ = _run(tmp_path / 'run', _wrapper(z, clip), rounds=6, k=30,
                    m=10, client=_clipped(_moving(10.0, seen=seen)))
  finally:
    audit_lib.CanaryAudit.on_round = real_on_round
  metrics = _rows(tmp_path / 'run' / 'metrics.csv')
  for t, (vector, row) in enumerate(zip(vectors, metrics)):
    ids = audit.spec.schedule[t]
    records = COHORT + len(ids)
    assert (row['num_clients'], row['canaries_inserted']) == (COHORT,
                                                              len(ids))
    signal = clip / records * (
        audit.bank.seen(ids).astype(np.float64).sum(0) +
        sum(_direction(node) for node in seen[t + 1]))
    expected = z * clip / records
    assert row['noise_std'] == pytest.approx(expected)
    residual = vector - signal
    assert np.std(residual) == pytest.approx(expected, rel=5 / math.sqrt(
        2 * DIM))
    assert abs(np.mean(residual)) < 5 * expected / math.sqrt(DIM)


def test_a_canary_adds_what_a_client_the_mod_clipped_adds(tmp_path):
  # Without noise a round's release is exactly the mean of its clients'
  # clipped updates S u_i and its canaries' S c_j: one norm S for both.
  clip, vectors, seen = 0.5, [], {}
  real_on_round = audit_lib.CanaryAudit.on_round

  def spy(self, round_num, vector, *args):
    vectors.append(vector.copy())
    return real_on_round(self, round_num, vector, *args)

  audit_lib.CanaryAudit.on_round = spy
  try:
    audit, _ = _run(tmp_path / 'run', _wrapper(0.0, clip), rounds=4, k=12,
                    m=4, client=_clipped(_moving(10.0, seen=seen)))
  finally:
    audit_lib.CanaryAudit.on_round = real_on_round
  for t, vector in enumerate(vectors):
    ids = audit.spec.schedule[t]
    assert len(ids)
    updates = [clip * _direction(node) for node in seen[t + 1]]
    updates += list(clip * audit.bank.seen(ids).astype(np.float64))
    np.testing.assert_allclose(vector, np.mean(updates, axis=0), rtol=0,
                               atol=1e-6 * clip)


def test_inserted_canaries_mean_cosine_matches_its_closed_form(tmp_path):
  z, clip, rounds = 0.1, 1.0, 10
  audit, _ = _run(tmp_path / 'run', _wrapper(z, clip), rounds=rounds, k=40,
                  m=2)
  schedule = audit.spec.schedule
  records = [COHORT + len(ids) for ids in schedule]
  energy = sum(len(ids) * (clip / n)**2 + DIM * (z * clip / n)**2
               for ids, n in zip(schedule, records))
  expected = np.mean([clip / records[t] for t, ids in enumerate(schedule)
                      for _ in ids]) / math.sqrt(energy)
  got = audit.outcome.final_cosines
  assert got.mean() == pytest.approx(expected,
                                     abs=4 / math.sqrt(DIM * got.size))
  assert expected > 10 / math.sqrt(DIM * got.size)


def test_accounted_epsilon_is_dp_accountings(tmp_path):
  z, rounds = 1.5, 8
  audit, _ = _run(tmp_path / 'run', _wrapper(z), rounds=rounds, k=10, m=10)
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(z), rounds))
  assert audit.report.accounted_epsilon == pytest.approx(
      accountant.get_epsilon(1e-5), rel=2e-3)
  assert audit.report.noise_multiplier == z


class _Killed(Exception):
  pass


def test_a_killed_run_resumes_to_the_same_report(tmp_path):
  clipped = _clipped(_moving(3.0))

  def dying(node, message):
    if message.content['config']['server-round'] == 5:
      raise _Killed()
    return clipped(node, message)

  with pytest.raises(_Killed):
    _run(tmp_path / 'resumed', _wrapper(0.7), client=dying)
  audit, _ = _run(tmp_path / 'resumed', _wrapper(0.7), client=clipped)
  assert audit.resumed_from == 4
  _run(tmp_path / 'whole', _wrapper(0.7), client=clipped)
  for name in ('report.json', 'final_cosines.csv', 'max_cosines.csv',
               'canary_cosines.csv'):
    assert (tmp_path / 'resumed' / name).read_text() == (
        tmp_path / 'whole' / name).read_text(), name


def test_unequal_client_weights_are_refused_by_name(tmp_path):
  with pytest.raises(audit_lib.AuditRefused,
                     match="weighted_by_key 'num-examples' gives the replies "
                     'unequal weights'):
    _run(tmp_path / 'run', _wrapper(1.0), rounds=2, k=4, m=4,
         client=_clipped(_moving(0.0, weight=lambda node: node)))


def test_a_client_without_the_mod_is_refused_its_update_beyond_the_clip(
    tmp_path):
  with pytest.raises(audit_lib.AuditRefused,
                     match=r'a reply\'s update has norm 1\.5 > the clip 1: '
                     'with DifferentialPrivacyClientSideFixedClipping the '
                     'clients clip.*fixedclipping_mod'):
    _run(tmp_path / 'run', _wrapper(1.0), rounds=2, k=4, m=4,
         client=_moving(1.5))
  # Behind the mod, the same clients are audited.
  audit, _ = _run(tmp_path / 'ok', _wrapper(1.0), rounds=2, k=4, m=4,
                  client=_clipped(_moving(1.5)))
  assert audit.report is not None
