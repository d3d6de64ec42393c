"""Tests of flower_engine.canary_nodes: canary clients as ordinary nodes.

A federation of N real nodes and k canary nodes, the clients called
in-process (`local_grid.LocalGrid`), training softmax regression in numpy
on 784-pixel images, under Flower's server-side and client-side fixed
clipping (`fixedclipping_mod` on every node, the canaries' too). Against
independent truths: the canaries' presentations the audit reports against
the training messages the grid delivered to the canary nodes (counted in
the client); a tagged reply that aggregates as an untagged one (the final
model identical); no claim under overwhelming noise (ε_lo = 0); a model
that learns without noise, every seen canary's loss below the unseen
canaries' median; the examples a canary node trains on and is scored on
against the digest every engine's test pins (`pinned_canaries`); and every
bad argument refused by name before anything is written. Skipped where
Flower (`flwr`) is not installed (`make test-flower` has it).
"""

import json
import os
import random

import numpy as np
import pytest

flwr = pytest.importorskip('flwr')

# pylint: disable=g-import-not-at-top,g-bad-import-order
from flwr.app import (Array, ArrayRecord, Context, Message, MetricRecord,
                      RecordDict)
from flwr.clientapp.mod import fixedclipping_mod
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping, FedAvg)

from one_shot_epe.data import canary_examples
from one_shot_epe.design import canary_spec
from one_shot_epe.flower_engine import canary_nodes
from one_shot_epe.flower_engine import local_grid
from one_shot_epe.flower_engine import strategies
import pinned_canaries

REAL, SEEN, UNSEEN = 10, 4, 6
CLASSES = 10


def _initial() -> ArrayRecord:
  """Softmax regression's weights [784, 10] and bias [10], zero."""
  return ArrayRecord({'w': Array(np.zeros((784, CLASSES), np.float32)),
                      'b': Array(np.zeros(CLASSES, np.float32))})


def _probabilities(arrays: ArrayRecord, inputs: np.ndarray) -> np.ndarray:
  x = np.asarray(inputs, np.float64).reshape(len(inputs), -1) - 0.5
  logits = x @ arrays['w'].numpy() + arrays['b'].numpy()
  logits -= logits.max(axis=1, keepdims=True)
  p = np.exp(logits)
  return p / p.sum(axis=1, keepdims=True)


def _losses(arrays: ArrayRecord, inputs: np.ndarray,
            labels: np.ndarray) -> np.ndarray:
  """Per-example softmax cross-entropy."""
  p = _probabilities(arrays, inputs)
  return -np.log(p[np.arange(len(labels)), labels] + 1e-12)


def _trained(arrays: ArrayRecord, inputs: np.ndarray, labels: np.ndarray,
             epochs: int, learning_rate: float) -> ArrayRecord:
  """Full-batch gradient descent on the cross-entropy, `epochs` steps."""
  x = np.asarray(inputs, np.float64).reshape(len(inputs), -1) - 0.5
  w, b = arrays['w'].numpy().astype(np.float64), arrays['b'].numpy().astype(
      np.float64)
  for _ in range(epochs):
    current = ArrayRecord({'w': Array(w.astype(np.float32)),
                           'b': Array(b.astype(np.float32))})
    p = _probabilities(current, inputs)
    p[np.arange(len(labels)), labels] -= 1.0
    p /= len(labels)
    w -= learning_rate * x.T @ p
    b -= learning_rate * p.sum(axis=0)
  return ArrayRecord({'w': Array(w.astype(np.float32)),
                      'b': Array(b.astype(np.float32))})


def _real_examples(partition: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng([99, partition])
  return (rng.random((8, 28, 28), dtype=np.float32),
          rng.integers(0, CLASSES, 8))


def _audit(run_dir, **changes) -> canary_nodes.DataCanaryAudit:
  plan = dict(run_dir=str(run_dir), num_canaries=SEEN,
              num_unseen_canaries=UNSEEN, rounds=6, delta=1e-5,
              num_real_nodes=REAL, kind='emnist', examples_per_canary=4,
              num_labels=CLASSES)
  return canary_nodes.DataCanaryAudit(**{**plan, **changes})


def _client(audit, sent, *, epochs=1, learning_rate=0.1, tag=True):
  """Node `node` (partition node - 1): a real client or a canary node.

  `sent` counts the training messages each canary node received.
  """

  def client(node: int, message: Message) -> RecordDict:
    partition = node - 1
    canary = canary_nodes.canary_id(partition, REAL, SEEN)
    examples = audit.canary_examples(partition)
    if canary is not None:
      sent[canary] = sent.get(canary, 0) + 1
    inputs, labels = _real_examples(partition) if examples is None else (
        examples)
    content = RecordDict({
        'arrays': _trained(message.content['arrays'], inputs, labels, epochs,
                           learning_rate),
        'metrics': MetricRecord({'num-examples': 1})})
    if canary is None or not tag:
      return content
    return canary_nodes.tag_reply(content, canary)

  return client


def _behind_mod(client):
  """`client` behind Flower's fixedclipping_mod, as in a ClientApp's mods."""
  context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                    run_config={})

  def clipped(node, message):
    reply = fixedclipping_mod(message, context, lambda msg, ctxt: Message(
        content=client(node, msg), reply_to=msg))
    assert not reply.has_error(), reply.error
    return reply.content

  return clipped


def _fedavg(fraction: float) -> FedAvg:
  return FedAvg(fraction_train=fraction, fraction_evaluate=0.0)


def _cohort(fraction: float) -> int:
  return int((REAL + SEEN) * fraction)


def _run(audit, dp, client, *, seed=0, losses_fn=None):
  """Trains on the audit's observed grid, seeded; the final arrays."""
  random.seed(seed)
  np.random.seed(seed)
  grid = local_grid.LocalGrid(REAL + SEEN, client)
  result = dp.start(audit.observe(grid, losses_fn), _initial(),
                    num_rounds=audit.rounds)
  return result.arrays


@pytest.mark.parametrize('client_side', [False, True])
def test_a_run_reports_the_presentations_the_grid_delivered(tmp_path,
                                                            client_side):
  audit, sent = _audit(tmp_path / 'run'), {}
  fraction = 0.5
  if client_side:
    dp = DifferentialPrivacyClientSideFixedClipping(
        _fedavg(fraction), 1.0, 0.5, _cohort(fraction))
    client = _behind_mod(_client(audit, sent))
  else:
    dp = DifferentialPrivacyServerSideFixedClipping(
        _fedavg(fraction), 1.0, 0.5, _cohort(fraction))
    client = _client(audit, sent)
  final = _run(audit, dp, client)
  report = audit.finish(final, _losses, dp=dp, accuracy=0.5)
  expected = [sent.get(j, 0) for j in range(SEEN)]
  assert sum(expected) > 0 and len(set(expected)) > 1  # Sampled unevenly.
  assert report.setting['canary_presentations_observed'] == expected
  assert sum(len(ids) for ids in audit.observed.values()) == sum(expected)
  assert report.canary_presentations == max(expected)
  with open(tmp_path / 'run' / 'report.json', encoding='utf-8') as stream:
    saved = json.load(stream)
  assert saved['canary_kind'] == 'data'
  assert saved['setting']['dp_wrapper'] == type(dp).__name__
  assert saved['setting']['canary_presentations_observed'] == expected
  final_report = saved['final']
  assert final_report['canary_kind'] == 'data'
  for key in ('epsilon_est', 'epsilon_lo'):
    assert final_report[key] is not None and final_report[key] >= 0
  assert saved['epsilon_lo_final'] <= saved['epsilon_est_final'] + 1e-12
  files = set(os.listdir(tmp_path / 'run'))
  assert {'config.json', 'report.json', 'report.md',
          'data_canary_losses.csv'} <= files
  assert not files & {'final_cosines.csv', 'max_cosines.csv',
                      'cosine_densities.png'}
  with open(tmp_path / 'run' / 'config.json', encoding='utf-8') as stream:
    config = json.load(stream)
  assert (config['canary_kind'], config['dp_wrapper']) == (
      'data', type(dp).__name__)


def test_the_tag_changes_no_aggregate(tmp_path):
  finals = []
  for tag in (True, False):
    audit = _audit(tmp_path / f'run_{tag}')
    dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(0.5), 0.5, 0.5,
                                                    _cohort(0.5))
    finals.append(strategies.flatten(_run(audit, dp, _client(
        audit, {}, tag=tag), seed=4)))
  np.testing.assert_array_equal(finals[0], finals[1])


def test_overwhelming_noise_claims_nothing(tmp_path):
  audit = _audit(tmp_path / 'run')
  dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(0.5), 1000.0, 0.5,
                                                  _cohort(0.5))
  report = audit.finish(_run(audit, dp, _client(audit, {}),
                              losses_fn=_losses), _losses, dp=dp)
  assert report.final.epsilon_lo == 0.0
  assert report.all_iterates.epsilon_lo == 0.0
  assert report.noise_multiplier == 1000.0


def test_every_rounds_model_is_scored_for_all_iterates(tmp_path):
  # The models the nodes received (theta_0 .. theta_{T-1}) and the final
  # one, each canary scored by the test's own loss: the largest excess one-round
  # drops are the report's all-iterates scores.
  audit, models = _audit(tmp_path / 'run'), {}
  inner = _client(audit, {}, epochs=5, learning_rate=0.5)

  def client(node, message):
    models.setdefault(message.content['config']['server-round'],
                      message.content['arrays'])
    return inner(node, message)

  dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(0.5), 0.3, 1.0,
                                                  _cohort(0.5))
  final = _run(audit, dp, client, losses_fn=_losses)
  report = audit.finish(final, _losses, dp=dp)
  ids = canary_spec.tracked_ids(SEEN, UNSEEN)
  examples = [canary_examples.canary_arrays(0, [i], 'emnist', 4,
                                            num_labels=CLASSES)
              for i in ids]
  losses = np.asarray([
      [_losses(arrays, e.features['pixels'], e.features['label']).mean()
       for e in examples]
      for arrays in [models[t] for t in range(1, 7)] + [final]])
  drops = losses[:-1] - losses[1:]
  # Beyond each round's median drop over every tracked canary.
  drops = (drops - np.median(drops, axis=1, keepdims=True)).max(axis=0)
  outcome = audit.outcome
  np.testing.assert_allclose(
      np.concatenate([outcome.data_seen_drops, outcome.data_unseen_drops]),
      drops, rtol=1e-12)
  assert report.all_iterates.canary_kind == 'data'
  assert report.all_iterates.threat_model == 'all'
  with open(tmp_path / 'run' / 'data_canary_drops.csv',
            encoding='utf-8') as stream:
    assert stream.readline().strip() == 'seen_drop,unseen_drop'


def test_a_model_without_noise_learns_its_canaries(tmp_path):
  # Every node in every round, no noise, a clip no update reaches.
  audit = _audit(tmp_path / 'run', rounds=8)
  dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(1.0), 0.0, 1e6,
                                                  _cohort(1.0))
  final = _run(audit, dp, _client(audit, {}, epochs=20, learning_rate=0.5))
  audit.finish(final, _losses, dp=dp)
  seen = audit.outcome.data_seen_losses
  unseen = audit.outcome.data_unseen_losses
  assert np.all(seen < np.median(unseen)), (seen, unseen)
  assert np.all(audit.report.setting['canary_presentations_observed'] ==
                np.full(SEEN, 8))


def test_canary_nodes_hold_the_pinned_canaries(tmp_path):
  examples = canary_nodes.canary_node_examples(
      7, 7, 2, 0, 'emnist', 4, num_labels=62)
  assert pinned_canaries.digest(*examples) == pinned_canaries.EMNIST_DIGEST
  assert canary_nodes.canary_node_examples(
      6, 7, 2, 0, 'emnist', 4, num_labels=62) is None
  text = canary_nodes.canary_node_examples(
      1, 1, 2, 0, 'stackoverflow', 3, vocab_size=100)
  assert pinned_canaries.digest(*text) == pinned_canaries.TEXT_DIGEST
  # Canary node 0 trains on them, and the audit scores it on them.
  audit = _audit(tmp_path / 'run', num_labels=62, rounds=1)
  trained, scored = [], []

  def client(node, message):
    examples = audit.canary_examples(node - 1)
    if canary_nodes.canary_id(node - 1, REAL, SEEN) == 0:
      trained.append(examples)
    w = message.content['arrays']['w'].numpy().copy()
    w[0, 0] += 1e-4  # Flower's clip divides by the update's norm.
    return RecordDict({
        'arrays': ArrayRecord({'w': Array(w),
                               'b': message.content['arrays']['b']}),
        'metrics': MetricRecord({'num-examples': 1})})

  def losses(arrays, inputs, labels):
    del arrays
    scored.append((inputs, labels))
    return np.zeros(len(labels))

  dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(1.0), 1.0, 0.5,
                                                  _cohort(1.0))
  audit.finish(_run(audit, dp, client), losses, dp=dp)
  assert pinned_canaries.digest(*trained[0]) == pinned_canaries.EMNIST_DIGEST
  assert pinned_canaries.digest(*scored[0]) == pinned_canaries.EMNIST_DIGEST
  assert len(scored) == SEEN + UNSEEN


@pytest.mark.parametrize('changes, expected', [
    (dict(run_dir='/proc/sys/kernel/flower_runs/run'), 'run_dir: '),
    (dict(num_canaries=1), 'num_canaries must be in [2, '),
    (dict(num_canaries=11), 'num_canaries=11: 11 of the 21 nodes'),
    (dict(num_unseen_canaries=1), 'num_unseen_canaries must be in [2, '),
    (dict(rounds=0), 'rounds must be >= 1'),
    (dict(delta=1.5), 'delta must be a finite number in (0.0, 1.0)'),
    (dict(num_real_nodes=0), 'num_real_nodes must be >= 1'),
    (dict(kind='audio'), "kind must be one of ['emnist', 'stackoverflow']"),
    (dict(examples_per_canary=0), 'examples_per_canary must be in [1, 4096]'),
    (dict(num_labels=None), "num_labels is needed for kind 'emnist'"),
    (dict(num_labels=1), 'num_labels must be >= 2'),
    (dict(vocab_size=100), "vocab_size is for kind 'stackoverflow'"),
    (dict(images=np.zeros((3, 28, 28))), 'images must be at least 4'),
    (dict(canary_seed=-1), 'canary_seed must be in [0, '),
    (dict(alpha=0.5), 'alpha must be a finite number in (0.0, 0.5)'),
])
def test_a_bad_argument_is_refused_by_name_before_any_write(
    tmp_path, changes, expected):
  changes = dict(changes)
  with pytest.raises(ValueError) as refused:
    _audit(changes.pop('run_dir', tmp_path / 'run'), **changes)
  assert str(refused.value).startswith(expected), refused.value
  assert '\n' not in str(refused.value)
  assert not os.listdir(tmp_path)


def test_a_run_directory_of_another_run_is_refused(tmp_path):
  audit = _audit(tmp_path / 'run', rounds=1)
  dp = DifferentialPrivacyServerSideFixedClipping(_fedavg(0.5), 1.0, 0.5,
                                                  _cohort(0.5))
  audit.finish(_run(audit, dp, _client(audit, {})), _losses, dp=dp)
  _audit(tmp_path / 'run', rounds=1)  # The same run: accepted.
  with pytest.raises(ValueError, match=r"^run_dir: .* holds another run: "
                     r"its config.json differs in \['num_canaries'\]"):
    _audit(tmp_path / 'run', rounds=1, num_canaries=3)


def test_finish_refuses_what_it_cannot_account(tmp_path):
  audit = _audit(tmp_path / 'run', rounds=2)
  with pytest.raises(ValueError, match='^the grid observed 0 training'):
    audit.finish(_initial(), _losses)
  adaptive = DifferentialPrivacyServerSideAdaptiveClipping(
      _fedavg(0.5), 0.1, _cohort(0.5))
  with pytest.raises(strategies.AuditRefused, match='clip that moves'):
    audit.finish(_initial(), _losses, dp=adaptive)
  assert not (tmp_path / 'run').exists()
