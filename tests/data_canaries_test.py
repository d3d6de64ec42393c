"""Tests of data canaries in the core: their examples, plan and report.

Independent truths: numpy's generator re-seeded by hand for a canary's
examples; brute-force cohorts; simulation where the truth is known (seen and
unseen losses from one law, so no bound may claim anything more often than
alpha); the report's invariance to a common scale of the losses; JSON round
trips.
"""

import numpy as np
import pytest

from one_shot_epe.accounting import mechanisms
from one_shot_epe.accounting import references
from one_shot_epe.data import canary_examples
from one_shot_epe.data import client_arrays
from one_shot_epe.design import canary_kinds
from one_shot_epe.design import canary_spec
from one_shot_epe.design import participation
from one_shot_epe.design import run_plan
from one_shot_epe.reporting import privacy_report
from one_shot_epe.reporting import report_fields
from one_shot_epe.reporting import run_report
from one_shot_epe.runtime import loss_drops


def test_a_canarys_examples_depend_only_on_the_seed_and_its_id():
  both = canary_examples.canary_arrays(3, [4, 9], 'emnist', 5, num_labels=10)
  alone = canary_examples.canary_arrays(3, [9], 'emnist', 5, num_labels=10)
  np.testing.assert_array_equal(both.features['pixels'][5:],
                                alone.features['pixels'])
  np.testing.assert_array_equal(both.features['label'][5:],
                                alone.features['label'])
  # The documented draw: default_rng([seed, 11, id]), pixels then labels.
  rng = np.random.default_rng([3, 11, 9])
  np.testing.assert_array_equal(
      alone.features['pixels'], rng.random((5, 28, 28), dtype=np.float32))
  np.testing.assert_array_equal(
      alone.features['label'], rng.integers(0, 10, 5, dtype=np.int32))
  assert list(both.client_ids) == ['canary-4', 'canary-9']
  assert both.offsets.tolist() == [0, 5, 10]
  other = canary_examples.canary_arrays(4, [9], 'emnist', 5, num_labels=10)
  assert not np.array_equal(other.features['pixels'],
                            alone.features['pixels'])


def test_text_canaries_are_full_sentences_of_vocabulary_words():
  vocab = 30
  arrays = canary_examples.canary_arrays(0, np.arange(4), 'stackoverflow', 6,
                                         vocab_size=vocab)
  tokens = arrays.features['tokens']
  special = client_arrays.special_tokens(vocab)
  assert tokens.shape == (24, client_arrays.SEQUENCE_LENGTH + 1)
  assert (tokens[:, 0] == special.bos).all()
  words = tokens[:, 1:]
  assert words.min() >= 1 and words.max() <= vocab
  # Uniform over the vocabulary: every word appears in 480 draws of 30.
  assert len(np.unique(words)) == vocab


def test_append_and_select_keep_every_clients_examples():
  real = client_arrays.synthetic_emnist(3, 4, seed=0)
  canaries = canary_examples.canary_arrays(0, np.arange(3), 'emnist', 2,
                                           num_labels=62)
  seen = canary_examples.select_clients(canaries, 2)
  joined = canary_examples.append_clients(real, seen)
  assert joined.num_clients == real.num_clients + 2
  assert joined.client_sizes().tolist() == (
      real.client_sizes().tolist() + [2, 2])
  start = int(real.offsets[-1])
  np.testing.assert_array_equal(joined.features['pixels'][start:],
                                canaries.features['pixels'][:4])
  with pytest.raises(ValueError, match='kind'):
    canary_examples.append_clients(real, canary_examples.canary_arrays(
        0, [0], 'stackoverflow', 1, vocab_size=5))


def _encoded(sentences, vocab):
  special = client_arrays.special_tokens(vocab)
  return np.stack([client_arrays.encode_sentence(words, special)
                   for words in sentences])


def test_the_bigram_model_counts_the_training_sentences_bigrams():
  vocab = 6
  special = client_arrays.special_tokens(vocab)
  sentences = [[1, 2, 3], [1, 2, 4, 2, 3], [5, special.oov[0], 2], [2]]
  model = canary_examples.BigramText.fit(_encoded(sentences, vocab), vocab)
  # Brute force: (state, next) over every sentence, 0 the start; an
  # out-of-vocabulary word is neither counted nor followed.
  expected = {}
  for words in sentences:
    for previous, word in zip([0] + words[:-1], words):
      if 1 <= word <= vocab and (previous == 0 or 1 <= previous <= vocab):
        expected[previous, word] = expected.get((previous, word), 0) + 1
  counted = {(state, int(model.successors[i])): int(model.counts[i])
             for state in range(vocab + 1)
             for i in range(model.starts[state], model.starts[state + 1])}
  assert counted == expected
  assert model.unigram.tolist() == [0, 2, 5, 2, 1, 1, 0]


@pytest.mark.parametrize('temperature', [1.0, 2.0])
def test_text_canaries_follow_the_bigrams_at_their_temperature(temperature):
  # After the start: word 1 three times, word 2 once; each word then ends.
  vocab = 4
  sentences = [[1, 3], [1, 3], [1, 3], [2, 4]]
  model = canary_examples.BigramText.fit(_encoded(sentences, vocab), vocab)
  words = model.sample(np.random.default_rng(0), 4000, 3, temperature)
  # P(first = 1) = 3^(1/T) / (3^(1/T) + 1): 0.75 at T = 1, 0.634 at T = 2.
  p = 3**(1 / temperature) / (3**(1 / temperature) + 1)
  share = np.mean(words[:, 0] == 1)
  assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / 4000), (share, p)
  # Then only what followed: 1 -> 3 and 2 -> 4; after 3 or 4 (nothing
  # followed them) the unigram counts: 3 three times, 4 once, 1 3x, 2 1x.
  np.testing.assert_array_equal(words[:, 1], np.where(words[:, 0] == 1, 3, 4))
  assert set(np.unique(words[:, 2])) <= {1, 2, 3, 4}


def test_text_canaries_from_the_model_are_training_bigrams_pinned_by_seed():
  vocab = 50
  train = client_arrays.synthetic_stackoverflow(8, 20, vocab_size=vocab,
                                                seed=3)
  model = canary_examples.BigramText.fit(train.features['tokens'], vocab)
  sampled = canary_examples.canary_arrays(
      0, np.arange(3), 'stackoverflow', 4, vocab_size=vocab, text=model)
  again = canary_examples.canary_arrays(
      0, np.arange(3), 'stackoverflow', 4, vocab_size=vocab, text=model)
  np.testing.assert_array_equal(sampled.features['tokens'],
                                again.features['tokens'])
  seen_pairs = {(int(a), int(b)) for row in train.features['tokens']
                for a, b in zip(row[1:-1], row[2:]) if 1 <= b <= vocab}
  words = sampled.features['tokens'][:, 1:]
  sampled_pairs = {(int(a), int(b)) for row in words
                   for a, b in zip(row[:-1], row[1:])}
  # Every pair but those after a word nothing followed is a training pair.
  followed = {a for a, _ in seen_pairs}
  assert {p for p in sampled_pairs if p[0] in followed} <= seen_pairs
  with pytest.raises(ValueError, match='temperature'):
    canary_examples.canary_arrays(0, [0], 'stackoverflow', 1, vocab_size=vocab,
                                  text=model, temperature=0.5)
  with pytest.raises(ValueError, match='vocabulary has 60'):
    canary_examples.canary_arrays(0, [0], 'stackoverflow', 1, vocab_size=60,
                                  text=model)


@pytest.mark.parametrize('kwargs, message', [
    (dict(seed=-1, ids=[0], kind='emnist', examples_per_canary=1,
          num_labels=2), 'seed'),
    (dict(seed=0, ids=[0], kind='emnist', examples_per_canary=0,
          num_labels=2), 'examples_per_canary'),
    (dict(seed=0, ids=[0], kind='emnist', examples_per_canary=1), 'num_labels'),
    (dict(seed=0, ids=[0], kind='stackoverflow', examples_per_canary=1),
     'vocab_size'),
    (dict(seed=0, ids=[-2], kind='emnist', examples_per_canary=1,
          num_labels=2), 'ids'),
    (dict(seed=0, ids=[0], kind='images', examples_per_canary=1), 'kind'),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
  with pytest.raises(ValueError, match=message):
    canary_examples.canary_arrays(**kwargs)


def _plan(kind: str) -> run_plan.RunPlan:
  sampler = participation.ShuffledEpochs(10, 5, seed=0)
  schedule = [[0], [1], [], [0, 1]]
  spec = canary_spec.CanarySpec(seed=0, num_seen=2, num_unseen=2,
                                schedule=schedule)
  data = None
  if kind != 'gradient':
    data = canary_kinds.DataCanaryPlan(
        seed=0, num_seen=2, num_unseen=2, examples_per_canary=3,
        schedule=schedule, num_real_clients=10)
  return run_plan.RunPlan(
      sampler=sampler, total_rounds=4, spec=spec,
      dp=canary_spec.DPAggregation(noise_multiplier=0.0,
                                   clients_per_round=6.0, clip=1.0),
      delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
      server_optimizer=run_plan.OptimizerSpec('sgd', 1.0), batch_size=2,
      epochs=1, max_examples=None, seed=0, noise_seed=1, canary_kind=kind,
      data_canaries=data)


def test_data_canaries_join_their_rounds_as_clients_after_the_real_ones():
  plan = _plan('data')
  for t, canaries in enumerate([[10], [11], [], [10, 11]]):
    cohort = plan.cohort(t)
    real = plan.sampler.indices(t)
    assert cohort.tolist() == list(real) + canaries
  # The server inserts nothing; with 'both' it inserts the gradient ones.
  assert all(not ids for ids in plan.inserted_spec.schedule)
  assert plan.inserted_spec.num_seen == 2
  both = _plan('both')
  assert [list(ids) for ids in both.inserted_spec.schedule] == [
      [0], [1], [], [0, 1]]
  gradient = _plan('gradient')
  assert gradient.cohort(3).tolist() == list(gradient.sampler.indices(3))
  with pytest.raises(ValueError, match='data_canaries'):
    _plan('gradient').__class__(**{**_plan('data').__dict__,
                                   'canary_kind': 'gradient'})


def test_each_kind_is_one_entry_and_both_runs_the_two():
  assert [kind.name for kind in canary_kinds.kinds_of('both')] == [
      'gradient', 'data']
  data = canary_kinds.canary_kind('data')
  assert data.joins_cohort and not data.server_inserts
  assert data.threat_models == ('final', 'all')
  with pytest.raises(ValueError, match='canary_kind'):
    canary_kinds.kinds_of('pixels')


@pytest.mark.parametrize('threat_model', ['final', 'all'])
def test_null_data_canaries_claim_nothing_more_often_than_alpha(threat_model):
  # Seen and unseen scores from one law: the truth is eps = 0, so epsilon_lo
  # and every bound for any mechanism must be 0 in at least 1 - alpha of
  # the runs (each run's chance of a false claim is at most alpha = 0.05;
  # 40 runs: P(more than 8 claims) < 1e-3 by the binomial tail). All
  # iterates: each canary's largest drop over 20 rounds of one law.
  rng = np.random.default_rng(7)
  claims = {'epsilon_lo': 0, 'epsilon_one_run': 0,
            'epsilon_lo_tight_any': 0}
  for _ in range(40):
    if threat_model == 'final':
      report = privacy_report.data_canary_report(
          rng.gamma(2.0, 1.5, 50), rng.gamma(2.0, 1.5, 50), delta=1e-3,
          bootstrap_resamples=20, seed=0)
    else:
      seen, unseen = (_drops(rng.normal(0.0, 0.3, (21, 50)).cumsum(axis=0))
                      for _ in range(2))
      report = privacy_report.data_canary_all_iterates_report(
          seen, unseen, delta=1e-3, bootstrap_resamples=20, seed=0)
    assert report.threat_model == threat_model
    for key in claims:
      claims[key] += getattr(report, key) > 0
  assert max(claims.values()) <= 8, claims


def _centred(drops):
  """Each round's drops less that round's median over every canary."""
  return drops - np.median(drops, axis=1, keepdims=True)


def _drops(losses):
  """Each column's largest excess one-round drop, as `loss_drops` tracks it."""
  tracker = loss_drops.LossDrops(losses[0])
  for row in losses[1:]:
    tracker.update(row)
  return tracker.maxima


def test_loss_drops_are_the_largest_one_round_drops_and_resume_exactly():
  rng = np.random.default_rng(3)
  losses = rng.gamma(2.0, 1.0, (9, 6))
  np.testing.assert_array_equal(
      _drops(losses), np.max(_centred(losses[:-1] - losses[1:]), axis=0))
  whole = loss_drops.LossDrops(losses[0])
  part = loss_drops.LossDrops(losses[0])
  for t, row in enumerate(losses[1:]):
    whole.update(row)
    part.update(row)
    if t == 3:  # Through a checkpoint's arrays.
      part = loss_drops.LossDrops.from_state(dict(part.state()))
  np.testing.assert_array_equal(part.maxima, whole.maxima)
  np.testing.assert_array_equal(part.last, whole.last)
  assert [a.size for a in whole.split(2)] == [2, 4]
  with pytest.raises(ValueError, match='no round'):
    loss_drops.LossDrops(losses[0]).split(2)
  with pytest.raises(ValueError, match='finite'):
    whole.update(np.full(6, np.nan))
  with pytest.raises(ValueError, match='expected 6'):
    whole.update(np.ones(5))


def test_a_canary_trained_in_one_round_shows_its_drop():
  # Every canary's loss falls by 3 in round 1 (the model learns the task)
  # and then drifts; a seen canary's also falls by 1 in its own round. The
  # round's median drop takes the shared fall out: the all-iterates bound
  # for any mechanism is positive, where the raw largest drop (round 1's
  # for every canary) shows nothing.
  rng = np.random.default_rng(4)
  rounds, k = 30, 100
  losses = rng.normal(0.0, 0.1, (rounds + 1, 2 * k)).cumsum(axis=0) + 5.0
  losses[1:] -= 3.0
  joined = rng.integers(2, rounds + 1, k)
  for j, t in enumerate(joined):
    losses[t:, j] -= 1.0
  drops = _drops(losses)
  report = privacy_report.data_canary_all_iterates_report(
      drops[:k], drops[k:], delta=1e-3, bootstrap_resamples=20)
  assert report.canary_kind == 'data' and report.threat_model == 'all'
  assert report.epsilon_lo > 1.0
  assert report.epsilon_lo_gauss_pair is None
  raw = np.max(losses[:-1] - losses[1:], axis=0)
  assert (np.argmax(losses[:-1] - losses[1:], axis=0) == 0).all()
  uncentred = privacy_report.data_canary_all_iterates_report(
      raw[:k], raw[k:], delta=1e-3, bootstrap_resamples=20)
  assert uncentred.epsilon_lo == 0.0


def test_memorized_canaries_give_a_positive_bound_and_no_gaussian_bound():
  rng = np.random.default_rng(0)
  report = privacy_report.data_canary_report(
      rng.normal(0.5, 0.2, 100), rng.normal(3.0, 0.2, 100), delta=1e-3,
      dim=1000, bootstrap_resamples=20)
  assert report.canary_kind == 'data' and report.threat_model == 'final'
  assert report.epsilon_lo > 1.0
  assert report.epsilon_est_method == privacy_report.ALL_ITERATES_ESTIMATE
  for field in report_fields.FIELDS:
    if field.assumes is report_fields.GAUSSIAN:
      assert getattr(report, field.key) is None, field.key
      assert field.why_missing(report) == report_fields.DATA_CANARY_GAUSSIAN


def test_the_report_does_not_depend_on_the_losses_scale():
  rng = np.random.default_rng(1)
  seen, unseen = rng.gamma(2.0, 1.0, 40), rng.gamma(3.0, 1.0, 40)
  one = privacy_report.data_canary_report(seen, unseen, 1e-3, seed=3,
                                          bootstrap_resamples=50)
  scaled = privacy_report.data_canary_report(seen * 7.0, unseen * 7.0, 1e-3,
                                             seed=3, bootstrap_resamples=50)
  for key in ('epsilon_lo', 'epsilon_est', 'auroc', 'epsilon_one_run',
              'epsilon_lo_tight_any', 'gdp_mu', 'epsilon_est_fitted'):
    assert getattr(scaled, key) == pytest.approx(getattr(one, key),
                                                 rel=1e-9), key
  with pytest.raises(ValueError, match='finite'):
    privacy_report.data_canary_report([1.0, np.inf], [1.0, 2.0], 1e-3)


@pytest.mark.parametrize('kind', ['data', 'both'])
def test_run_reports_with_data_canaries_round_trip_and_say_what_they_measured(
    kind):
  rng = np.random.default_rng(2)
  empty = np.zeros(0)
  outcome = canary_spec.CanaryOutcome(
      final_cosines=rng.normal(0.02, 0.01, 20),
      final_unseen_cosines=empty, seen_maxima=empty, unseen_maxima=empty,
      accuracy=0.5, dim=10_000, resumed_from_round=0, rounds_trained=3,
      data_seen_losses=rng.normal(1.0, 0.1, 20),
      data_unseen_losses=rng.normal(2.0, 0.1, 20),
      data_seen_drops=rng.normal(0.5, 0.1, 20),
      data_unseen_drops=rng.normal(0.1, 0.1, 20))
  facts = references.RunFacts(noise_multiplier=1.0, delta=1e-5, dim=10_000)
  report = run_report.build_run_report(outcome, facts, mechanisms.Gaussian(),
                                       canary_kind=kind)
  fields = report.to_dict()
  assert fields['canary_kind'] == kind
  assert run_report.RunReport.from_dict(fields) == report
  data = report.final if kind == 'data' else report.final_data
  assert data.canary_kind == 'data'
  data_all = (report.all_iterates if kind == 'data' else
              report.all_iterates_data)
  assert data_all.canary_kind == 'data' and data_all.threat_model == 'all'
  suffix = 'all' if kind == 'data' else 'all_data'
  assert fields[f'epsilon_lo_{suffix}'] == data_all.epsilon_lo > 0
  markdown = report.to_markdown()
  assert 'all iterates, data canaries' in markdown
  assert 'largest excess one-round loss drop' in markdown
  assert (report.final.canary_kind == 'gradient') == (kind == 'both')
  first = report.to_markdown().splitlines()[0]
  assert first.startswith('**Canaries:**')
  assert ('gradient canaries' in first) == (kind == 'both')
  assert 'data canaries' in first
  # A report written before canary kinds existed reads as gradient.
  old = {key: value for key, value in
         run_report.build_run_report(outcome, facts,
                                     mechanisms.Gaussian()).to_dict().items()
         if key != 'canary_kind'}
  del old['final']['canary_kind']
  assert run_report.RunReport.from_dict(old).canary_kind == 'gradient'
  with pytest.raises(ValueError, match='losses'):
    run_report.build_run_report(
        outcome._replace(data_seen_losses=None), facts,
        mechanisms.Gaussian(), canary_kind=kind)


def test_tied_losses_claim_nothing_and_say_why_no_gaussian_fits():
  # A model so noised that it gives every canary the same loss.
  report = privacy_report.data_canary_report(
      np.full(10, 16.118), np.full(30, 16.118), delta=1e-3,
      bootstrap_resamples=20)
  assert report.epsilon_lo == 0.0 and report.epsilon_lo_tight_any == 0.0
  assert report.auroc == 0.5 and report.epsilon_est == 0.0
  for key in ('epsilon_est_fitted', 'gdp_mu', 'epsilon_gdp',
              'anderson_seen', 'anderson_unseen'):
    assert getattr(report, key) is None, key
    assert report_fields.by_key(key).why_missing(report) == (
        report_fields.TIED_SCORES)
  markdown = run_report.RunReport(
      noise_multiplier=1000.0, delta=1e-3, alpha=0.05, dim=10,
      analytical_epsilon=0.001, final=report, all_iterates=None,
      canary_kind='data').to_markdown()
  assert report_fields.TIED_SCORES in markdown


def test_runs_with_data_canaries_are_refused_a_shared_program():
  from experiments import train  # pylint: disable=g-import-not-at-top
  from experiments import train_config  # pylint: disable=g-import-not-at-top
  with pytest.raises(train_config.ConfigError,
                     match=r'--runs_per_program=2 with --canary_kind=data'):
    train.check_runs_per_program('jax', 2, 'data')
  train.check_runs_per_program('jax', 1, 'both')


def test_image_canaries_take_test_images_without_replacement_per_canary():
  pool = np.random.default_rng(5).random((30, 28, 28), dtype=np.float32)
  arrays = canary_examples.canary_arrays(2, [0, 1], 'emnist', 6,
                                         num_labels=10, images=pool)
  flat = pool.reshape(30, -1)
  for canary in range(2):
    pixels = arrays.features['pixels'][6 * canary:6 * (canary + 1)]
    rows = [int(np.flatnonzero((flat == image.ravel()).all(axis=1))[0])
            for image in pixels]
    assert len(set(rows)) == 6  # Without replacement within a canary.
  # The documented draw: the rows of default_rng([seed, 11, id]).choice.
  rng = np.random.default_rng([2, 11, 1])
  chosen = np.sort(rng.choice(30, 6, replace=False))
  np.testing.assert_array_equal(arrays.features['pixels'][6:], pool[chosen])
  np.testing.assert_array_equal(arrays.features['label'][6:],
                                rng.integers(0, 10, 6, dtype=np.int32))
  with pytest.raises(ValueError, match='images'):
    canary_examples.canary_arrays(2, [0], 'emnist', 6, num_labels=10,
                                  images=pool[:5])
