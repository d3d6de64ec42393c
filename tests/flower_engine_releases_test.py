"""Audits that survive lost nodes and short rounds, each accounted as released.

A grid that answers half of one round's cohort with error replies (lost
nodes: Flower's DP wrapper skips the round, as plain Flower does), and one
that drops them (a Grid whose timeout passed: the wrapper aggregates what
came, its noise calibrated to the sample). Both audits finish; checked
against independent truths: dp_accounting's PLD of the Gaussian events of
the rounds actually released, composed here (the skipped round left out, the
short round at z (N_t + k_t) / (n + k_t)), the realised noise of the short
round's release, the skipped round's canaries counted as never inserted,
and Flower's own accountant, which composes only what it released. Skipped
where Flower (`flwr`) is not installed.
"""

import math

import numpy as np
import pytest

flwr = pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
from flwr.app import Array, ArrayRecord, Error, Message, MetricRecord, RecordDict
from flwr.serverapp import (NeighboringRelation, PrivacyConfig, RdpAccountant,
                            SamplingMethod)
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg)

from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid

DIM = 2000
NODES, COHORT, ROUNDS, LOST_ROUND = 12, 6, 6, 3
Z, DELTA = 0.8, 1e-5


def _arrays() -> ArrayRecord:
  return ArrayRecord({'w': Array(np.zeros((DIM // 4, 4), np.float32))})


def _still(node, message) -> RecordDict:
  """A client whose update is 1e-4 in one coordinate, weight 1."""
  del node
  w = message.content['arrays']['w'].numpy().copy()
  w[0, 0] += 1e-4
  return RecordDict({'arrays': ArrayRecord({'w': Array(w)}),
                     'metrics': MetricRecord({'num-examples': 1})})


class _LosingGrid(local_grid.LocalGrid):
  """Half of round LOST_ROUND's cohort lost: error replies, or none at all."""

  def __init__(self, mode: str):
    super().__init__(NODES, _still)
    self._mode = mode
    self._round = 0

  def send_and_receive(self, messages, *, timeout=None):
    messages = list(messages)
    replies = super().send_and_receive(messages, timeout=timeout)
    if not messages or messages[0].metadata.message_type != 'train':
      return replies
    self._round += 1
    if self._round != LOST_ROUND:
      return replies
    half = len(replies) // 2
    if self._mode == 'drop':
      return replies[half:]
    return [Message(Error(code=0, reason='node lost'), reply_to=message)
            for message in messages[:half]] + replies[half:]


def _fedavg() -> FedAvg:
  return FedAvg(fraction_train=COHORT / NODES, fraction_evaluate=0.0,
                min_train_nodes=COHORT)


def _wrapper(kind: str, accountant=None):
  if kind == 'adaptive':
    return DifferentialPrivacyServerSideAdaptiveClipping(
        _fedavg(), Z, COHORT, initial_clipping_norm=0.5,
        clipped_count_stddev=2.0)
  if kind == 'client-side':
    return DifferentialPrivacyClientSideFixedClipping(_fedavg(), Z, 0.5,
                                                       COHORT)
  return DifferentialPrivacyServerSideFixedClipping(
      _fedavg(), Z, 0.5, COHORT, accountant=accountant)


def _run(run_dir, dp, grid, *, k=12, m=12):
  audit = audit_lib.CanaryAudit(
      run_dir=str(run_dir), num_canaries=k, num_unseen_canaries=m,
      rounds=ROUNDS, delta=DELTA, seed=5, rounds_per_checkpoint=2)
  vectors = []
  real_on_round = audit.on_round

  def spy(round_num, vector, *args):
    vectors.append((round_num, vector.copy()))
    return real_on_round(round_num, vector, *args)

  audit.on_round = spy
  audit.wrap(dp).start(grid, _arrays(), num_rounds=ROUNDS)
  return audit, dict(vectors)


def _pld_epsilon(events):
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.ComposedDpEvent(events))
  return accountant.get_epsilon(DELTA)


def _rows(run_dir):
  lines = (run_dir / 'metrics.csv').read_text().splitlines()
  names = lines[0].split(',')
  return [dict(zip(names, line.split(','))) for line in lines[1:]]


def _round_event(kind, z_update):
  if kind == 'adaptive':
    return dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(z_update),
        dp_accounting.GaussianDpEvent(2.0)])
  return dp_accounting.GaussianDpEvent(z_update)


@pytest.mark.slow
def test_a_round_with_lost_nodes_releases_nothing_and_the_audit_goes_on(
    tmp_path):
  full, _ = _run(tmp_path / 'full', _wrapper('fixed'),
                 local_grid.LocalGrid(NODES, _still))
  lost, vectors = _run(tmp_path / 'lost', _wrapper('fixed'),
                       _LosingGrid('errors'))
  assert sorted(vectors) == [t for t in range(1, ROUNDS + 1)
                             if t != LOST_ROUND]
  rows = _rows(tmp_path / 'lost')
  assert [row['released'] for row in rows] == [
      '0' if t == LOST_ROUND else '1' for t in range(1, ROUNDS + 1)]
  assert rows[LOST_ROUND - 1]['failures'] == str(COHORT // 2)
  # The accountant composes the 5 released rounds, below the full run's 6.
  want = _pld_epsilon([dp_accounting.GaussianDpEvent(Z)] * (ROUNDS - 1))
  assert lost.report.accounted_epsilon == pytest.approx(want, rel=2e-3)
  assert lost.report.accounted_epsilon < full.report.accounted_epsilon
  assert full.report.accounted_epsilon == pytest.approx(
      _pld_epsilon([dp_accounting.GaussianDpEvent(Z)] * ROUNDS), rel=2e-3)
  # The lost round's canaries stay seen, never inserted there.
  scheduled = set(lost.spec.schedule[LOST_ROUND - 1])
  assert scheduled and lost.report.final.num_seen == 12
  assert lost.report.setting['skipped_rounds'] == [LOST_ROUND]
  assert lost.report.setting['rounds_released'] == ROUNDS - 1
  note = lost.report.notes[0]
  assert note.startswith(f'Round {LOST_ROUND} released nothing')
  assert f'{len(scheduled)} of 12 seen canaries were never inserted' in note
  # Skipping the round moved no canary: each seen canary's final cosine is
  # its cosine with the sum of the releases (theta_T - theta_0).
  total = sum(vectors.values())
  np.testing.assert_allclose(
      lost.outcome.final_cosines,
      lost.bank.cosines(total[None])[:12, 0], atol=1e-5)


@pytest.mark.parametrize('kind', ['fixed', 'adaptive', 'client-side'])
def test_a_short_round_is_accounted_at_its_effective_noise_multiplier(
    tmp_path, kind):
  dp = _wrapper(kind)
  z_update = float(dp.noise_multiplier)
  audit, vectors = _run(tmp_path / 'short', dp, _LosingGrid('drop'))
  rows = _rows(tmp_path / 'short')
  row = rows[LOST_ROUND - 1]
  canaries = len(audit.spec.schedule[LOST_ROUND - 1])
  got, planned = COHORT - COHORT // 2 + canaries, COHORT + canaries
  assert int(row['num_clients']) == COHORT - COHORT // 2
  effective = z_update * got / planned
  assert float(row['effective_noise_multiplier']) == pytest.approx(effective)
  clip = float(row['clip'])
  # The release: the canaries' mean over the records that came, and noise
  # of std z S / (n + k_t), calibrated to the sample.
  ids = audit.spec.schedule[LOST_ROUND - 1]
  signal = clip / got * audit.bank.seen(ids).astype(np.float64).sum(0)
  residual = vectors[LOST_ROUND] - signal
  assert float(row['noise_std']) == pytest.approx(z_update * clip / planned)
  assert np.std(residual) == pytest.approx(z_update * clip / planned,
                                           rel=5 / math.sqrt(2 * DIM))
  events = [_round_event(kind, effective if t == LOST_ROUND else z_update)
            for t in range(1, ROUNDS + 1)]
  assert audit.report.accounted_epsilon == pytest.approx(
      _pld_epsilon(events), rel=2e-3)
  full = _pld_epsilon([_round_event(kind, z_update)] * ROUNDS)
  assert audit.report.accounted_epsilon > full * 1.01
  assert audit.report.setting['effective_noise_multipliers'] == {
      str(LOST_ROUND): pytest.approx(effective)}
  assert f'round {LOST_ROUND}: {got} of {planned} records' in (
      audit.report.notes[0])


def test_flowers_accountant_composes_only_the_rounds_it_released(tmp_path):
  # With an accountant Flower's wrapper refuses a short round (strict): it
  # is skipped, and both accountants count the 5 released rounds.
  accountant = RdpAccountant(PrivacyConfig(
      target_delta=DELTA, population_size=NODES,
      neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
      sampling_method=SamplingMethod.NO_AMPLIFICATION))
  audit, _ = _run(tmp_path / 'run', _wrapper('fixed', accountant),
                  _LosingGrid('drop'))
  assert accountant.num_releases == ROUNDS - 1
  assert audit.report.setting['skipped_rounds'] == [LOST_ROUND]
  assert audit.report.accounted_epsilon == pytest.approx(_pld_epsilon(
      [dp_accounting.GaussianDpEvent(Z)] * (ROUNDS - 1)), rel=2e-3)
  assert 'fewer replies than sampled' in audit.report.notes[0]
