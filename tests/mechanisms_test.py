"""A mechanism's entry: its setting reaches its references by itself.

A mechanism computes its references (`_references`) and names its
parameters (`setting`); `Mechanism.references` joins the two, so a new
mechanism's report names it without its author attaching anything. Checked
with a mechanism defined here (a Laplace-like toy whose analytical eps is
known in closed form), through the references and through the report, and
for every mechanism of the module against its own setting (and distributed
DP's against its calibration's).
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from one_shot_epe.accounting import distributed_dp
from one_shot_epe.accounting import dp_fedavg
from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.design import canary_spec
from one_shot_epe.reporting import run_report


@dataclasses.dataclass(frozen=True)
class _Laplace(mechanisms.Mechanism):
  """Laplace noise of scale b clip norms per coordinate (a toy entry)."""
  scale: float
  name: ClassVar[str] = 'laplace'
  names: ClassVar[tuple[str, ...]] = ('laplace',)
  engines: ClassVar[Mapping[str, str | None]] = {
      engine: 'a toy of this test' for engine in mechanisms.ENGINES}

  def setting(self) -> dict[str, Any]:
    return {'mechanism': self.name, 'laplace_scale': self.scale}

  def _references(
      self, facts: references.RunFacts) -> references.References:
    # An L1 shift of one clip norm against scale b: eps = 1 / b per
    # presentation, r / b over r (pure DP, any delta). No setting here.
    epsilon = facts.canary_presentations / self.scale
    return references.References(
        facts.noise_multiplier,
        dp_fedavg.MechanismEpsilon(epsilon, 'the canary under Laplace noise'),
        None, None)


_FACTS = references.RunFacts(noise_multiplier=0.5, delta=1e-5, dim=1000,
                             canary_presentations=3)


def test_a_new_mechanisms_references_carry_its_setting():
  toy = _Laplace(scale=2.0)
  found = toy.references(_FACTS)
  assert found.analytical.epsilon == 3 / 2.0
  assert dict(found.setting) == {'mechanism': 'laplace', 'laplace_scale': 2.0}


def test_a_new_mechanisms_report_names_it():
  rng = np.random.default_rng(0)
  outcome = canary_spec.CanaryOutcome(
      final_cosines=rng.normal(0.0, 1.0, 50) / math.sqrt(_FACTS.dim),
      final_unseen_cosines=np.zeros(0), seen_maxima=np.zeros(0),
      unseen_maxima=np.zeros(0), accuracy=math.nan, dim=_FACTS.dim,
      resumed_from_round=0, rounds_trained=0)
  report = run_report.build_run_report(
      outcome, _FACTS, _Laplace(scale=4.0), setting={'task': 'toy'})
  assert report.analytical_epsilon == 3 / 4.0
  assert json.loads(report.to_json())['setting'] == {
      'task': 'toy', 'mechanism': 'laplace', 'laplace_scale': 4.0}


def test_every_mechanisms_references_carry_its_setting():
  facts = dataclasses.replace(
      _FACTS, rounds=8, clip=1.0, cohort=10.0,
      schedule=[np.array([0]), *[np.zeros(0, int)] * 7],
      correlated=dp_fedavg.CorrelatedNoise('banded', 1.0, 1.0,
                                           np.array([1.0] + [0.0] * 7)))
  for mechanism in (mechanisms.Gaussian(),
                    mechanisms.MatrixFactorization('banded', 1),
                    mechanisms.TreeAggregation(efficient=False)):
    assert dict(mechanism.references(facts).setting) == mechanism.setting()
  # Distributed DP's setting is its calibration's, in the calibration's
  # order, 'mechanism' first as the mechanism's own setting has it.
  ddp = mechanisms.DistributedDP()
  calibration = distributed_dp.calibrate(0.5, 1.0, 10.0, 1000, ddp.params)
  assert list(ddp.references(facts).setting.items()) == list(
      calibration.setting().items())


def test_each_entry_says_what_its_noise_keeps_in_a_checkpoint():
  # Gaussian noise keeps nothing between rounds; the tree keeps its path's
  # nodes (a leaf of a tree of 8 leaves sits under 3 levels, plus the
  # tree's two sums) and, with T unknown, a tree of 2^32 leaves' path; a
  # matrix factorization keeps each tracked canary's projection every round.
  assert mechanisms.Gaussian().state_vectors(7) == 0
  assert mechanisms.TreeAggregation().state_vectors(7) == 2 + 3
  assert mechanisms.TreeAggregation().state_vectors(None) == 2 + 33
  assert [kind.projects_canaries_every_round for kind in mechanisms.MECHANISMS
          ] == [kind is mechanisms.MatrixFactorization
                for kind in mechanisms.MECHANISMS]
