"""Flower's own accountant beside the audit's (`flower_accountant`).

A DP wrapper built with `accountant=` is audited, its accountant left in
place. Against independent truths: dp_accounting's RDP accountant of T
Gaussians at z (what Flower's RdpAccountant must hold after the run),
dp_accounting's PLD (the report's accounted ε, which Flower's must never
undercut), the run's own facts (z, the sampled clients, the rounds) for
the events Flower composed, and the unaudited wrapper's own stop at
`max_epsilon`. Skipped where Flower (`flwr`) is not installed (`make
test-flower` has it).
"""

import json

import numpy as np
import pytest

flwr = pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,g-bad-import-order
import dp_accounting
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp import (GaussianPrivacyEvent, NeighboringRelation,
                            PrivacyConfig, RdpAccountant, SamplingMethod)
from flwr.serverapp.exception import PrivacyBudgetExhausted
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg)

from one_shot_epe.flower_engine import audit as audit_lib
from one_shot_epe.flower_engine import local_grid
from one_shot_epe.reporting import run_report

DIM = 400
# The report's delta; Flower's accountant reports at its own target_delta.
DELTA, TARGET_DELTA = 1e-5, 1e-3


def _arrays() -> ArrayRecord:
  return ArrayRecord({'w': Array(np.zeros(DIM, np.float32))})


def _client(asked: dict[int, int] | None = None, dies_in: int | None = None):
  """A client moving 1e-4 in one coordinate, weight 1; notes the rounds."""

  def client(node, message):
    del node
    round_num = message.content['config']['server-round']
    if round_num == dies_in:
      raise _Killed()
    if asked is not None:
      asked[round_num] = asked.get(round_num, 0) + 1
    w = message.content['arrays']['w'].numpy().copy()
    w[0] += 1e-4
    return RecordDict({'arrays': ArrayRecord({'w': Array(w)}),
                       'metrics': MetricRecord({'num-examples': 1})})

  return client


class _Killed(Exception):
  pass


def _accountant(nodes: int, max_epsilon: float | None = None
                ) -> RdpAccountant:
  return RdpAccountant(PrivacyConfig(
      target_delta=TARGET_DELTA, population_size=nodes,
      neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
      sampling_method=SamplingMethod.NO_AMPLIFICATION,
      max_epsilon=max_epsilon))


def _wrapper(wrapper, z, cohort, nodes, accountant):
  fedavg = FedAvg(fraction_train=cohort / nodes, fraction_evaluate=0.0,
                  min_train_nodes=cohort)
  return wrapper(fedavg, z, 1.0, cohort, accountant=accountant)


def _audit(run_dir, rounds, k=4):
  return audit_lib.CanaryAudit(run_dir=str(run_dir), num_canaries=k,
                               num_unseen_canaries=k, rounds=rounds,
                               delta=DELTA, seed=5, rounds_per_checkpoint=2)


def _rdp_epsilon(z: float, releases: int, delta: float) -> float:
  """dp_accounting's RDP epsilon of `releases` Gaussians at z."""
  accountant = dp_accounting.rdp.RdpAccountant()
  accountant.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(z), releases))
  return accountant.get_epsilon(delta)


def _events(accountant: RdpAccountant) -> list[tuple[float, int, int]]:
  """(z, sample size, population) of every release Flower composed."""
  return [(c['event']['noise_multiplier'], c['event']['sample_size'],
           c['event']['population_size'])
          for c in accountant.state_dict()['compositions']
          for _ in range(c['count'])]


@pytest.mark.parametrize('wrapper, z, cohort, nodes, rounds', [
    (DifferentialPrivacyServerSideFixedClipping, 0.6, 5, 30, 3),
    (DifferentialPrivacyServerSideFixedClipping, 1.5, 5, 30, 8),
    (DifferentialPrivacyServerSideFixedClipping, 0.9, 12, 40, 12),
    (DifferentialPrivacyClientSideFixedClipping, 3.0, 3, 12, 20),
])
def test_flowers_epsilon_is_never_below_ours_for_the_same_releases(
    tmp_path, wrapper, z, cohort, nodes, rounds):
  accountant = _accountant(nodes)
  audit = _audit(tmp_path / 'run', rounds)
  audit.wrap(_wrapper(wrapper, z, cohort, nodes, accountant)).start(
      local_grid.LocalGrid(nodes, _client()), _arrays(), num_rounds=rounds)
  report = audit.report
  # One mechanism: the run's z, its sampled clients, one release a round,
  # no amplification on either side.
  setting = report.setting
  assert _events(accountant) == [(report.noise_multiplier,
                                  setting['num_sampled_clients'], nodes)
                                 ] * setting['rounds']
  assert (setting['rounds'], setting['num_sampled_clients']) == (rounds,
                                                                 cohort)
  assert accountant.config.sampling_method is SamplingMethod.NO_AMPLIFICATION
  assert report.accounted_mechanism.startswith(
      f'a real client in every one of {rounds} rounds')
  # Flower's epsilon at the report's delta (not its own target_delta) is
  # dp_accounting's RDP for those releases, and never below our PLD.
  assert report.framework_epsilon == pytest.approx(
      _rdp_epsilon(z, rounds, DELTA), rel=1e-9)
  assert report.framework_epsilon != pytest.approx(
      _rdp_epsilon(z, rounds, TARGET_DELTA), rel=1e-3)
  assert report.framework_epsilon >= report.accounted_epsilon
  assert f'{rounds} releases, each a Gaussian at z = {z:g} on {cohort} of ' \
      f'{nodes} clients' in report.framework_mechanism
  # Both in report.json and report.md, side by side.
  path = tmp_path / 'run' / 'report.json'
  assert json.loads(path.read_text())['framework_epsilon'] == (
      report.framework_epsilon)
  assert run_report.RunReport.read(str(path)) == report
  lines = (tmp_path / 'run' / 'report.md').read_text().splitlines()
  at = next(i for i, line in enumerate(lines)
            if line.startswith('| accounted ε (real client) |'))
  assert lines[at + 1].startswith("| framework's own accounted ε (real "
                                  f'client) | {report.framework_epsilon:.4g}')


def test_a_small_max_epsilon_stops_the_audited_run_where_it_stops_the_plain(
    tmp_path):
  z, cohort, nodes, rounds = 1.0, 5, 30, 8
  # A budget between the epsilons of 3 and 4 rounds: round 4 is refused.
  budget = (_rdp_epsilon(z, 3, TARGET_DELTA) +
            _rdp_epsilon(z, 4, TARGET_DELTA)) / 2
  stops = {}
  for audited in (False, True):
    accountant, asked = _accountant(nodes, budget), {}
    dp = _wrapper(DifferentialPrivacyServerSideFixedClipping, z, cohort,
                  nodes, accountant)
    grid = local_grid.LocalGrid(nodes, _client(asked))
    strategy = _audit(tmp_path / 'run', rounds).wrap(dp) if audited else dp
    with pytest.raises(PrivacyBudgetExhausted) as stopped:
      strategy.start(grid, _arrays(), num_rounds=rounds)
    stops[audited] = (str(stopped.value), accountant.num_releases, asked)
  assert stops[True] == stops[False]
  assert stops[False][1:] == (3, {1: cohort, 2: cohort, 3: cohort})
  assert not (tmp_path / 'run' / 'report.json').exists()


@pytest.mark.parametrize('restored', [False, True])
def test_a_resumed_run_accounts_the_rounds_before_its_checkpoint(tmp_path,
                                                                 restored):
  z, cohort, nodes, rounds = 0.8, 5, 30, 8

  def run(name, accountant, dies_in=None, asked=None):
    audit = _audit(tmp_path / name, rounds)
    dp = _wrapper(DifferentialPrivacyServerSideFixedClipping, z, cohort,
                  nodes, accountant)
    audit.wrap(dp).start(local_grid.LocalGrid(nodes, _client(asked, dies_in)),
                         _arrays(), num_rounds=rounds)
    return audit

  killed = _accountant(nodes)
  with pytest.raises(_Killed):
    run('resumed', killed, dies_in=5)
  assert killed.num_releases == 4
  # A fresh accountant (the audit composes rounds 1-4), or the killed run's
  # restored from its state_dict (kept as it is).
  again = _accountant(nodes)
  if restored:
    again.load_state_dict(killed.state_dict())
  resumed = run('resumed', again)
  assert resumed.resumed_from == 4
  whole = run('whole', _accountant(nodes))
  assert _events(again) == [(z, cohort, nodes)] * rounds
  assert resumed.report.framework_epsilon == whole.report.framework_epsilon
  # Its budget counts those rounds: a fresh accountant that allows 6 rounds
  # stops the resumed run after 2.
  budget = (_rdp_epsilon(z, 6, TARGET_DELTA) +
            _rdp_epsilon(z, 7, TARGET_DELTA)) / 2
  with pytest.raises(_Killed):
    run('budget', _accountant(nodes), dies_in=5)
  asked, limited = {}, _accountant(nodes, budget)
  with pytest.raises(PrivacyBudgetExhausted):
    run('budget', limited, asked=asked)
  assert (limited.num_releases, asked) == (6, {5: cohort, 6: cohort})


def test_an_accountant_holding_other_releases_is_refused(tmp_path):
  accountant = _accountant(30)
  accountant.compose(GaussianPrivacyEvent(1.0, 5, 30), 2)
  audit = _audit(tmp_path / 'run', 4)
  strategy = audit.wrap(_wrapper(DifferentialPrivacyServerSideFixedClipping,
                                 1.0, 5, 30, accountant))
  with pytest.raises(audit_lib.AuditRefused,
                     match='accountant holds 2 releases, but the run starts '
                     'at round 0'):
    strategy.start(local_grid.LocalGrid(30, _client()), _arrays(),
                   num_rounds=4)
  assert not (tmp_path / 'run' / 'config.json').exists()
