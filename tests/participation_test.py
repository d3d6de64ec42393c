"""Tests for one_shot_epe.design.participation.

Truths used: brute-force counting of participations per epoch and per period
(period boundaries recomputed here from the documented rule), exact sets of
rounds for the worst case, closed-form Binomial/Poisson moments and binomial /
chi-square tests for the samplers (each at significance level ALPHA = 0.001,
fixed seeds), and TFF's own `run_training_process` for the round numbering.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from one_shot_epe.design import canary_schedules
from one_shot_epe.design import participation as pt

ALPHA = 0.001
Z_CRIT = stats.norm.ppf(1 - ALPHA / 2)  # Two-sided, about 3.29.
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


def _boundaries(num_rounds, repetitions):
  """Period starts by the documented rule: first T % r periods are longer."""
  base, extra = divmod(num_rounds, repetitions)
  return [i * base + min(i, extra) for i in range(repetitions + 1)]


def _cohorts(sampler, rounds):
  return [sampler.indices(t).tolist() for t in rounds]


def _assert_once_per_epoch(sampler, num_epochs):
  m, big_r = sampler.num_clients, sampler.rounds_per_epoch
  for epoch in range(num_epochs):
    seen = np.concatenate(
        [sampler.indices(t) for t in range(epoch * big_r, (epoch + 1) * big_r)])
    assert np.array_equal(np.sort(seen), np.arange(m)), epoch


def _assert_once_per_period(schedule, starts):
  """Each canary once in every [starts[i], starts[i+1]), counts balanced."""
  k = schedule.num_canaries
  for lo, hi in zip(starts[:-1], starts[1:]):
    period = [schedule.canaries(t) for t in range(lo, hi)]
    assert np.array_equal(np.sort(np.concatenate(period)), np.arange(k))
    sizes = [len(ids) for ids in period]
    assert max(sizes) - min(sizes) <= 1


def _z_scores(samples, mean, var, fourth_central_moment):
  """z of the sample mean and of the sample variance against known moments."""
  n = len(samples)
  z_mean = (np.mean(samples) - mean) / math.sqrt(var / n)
  var_of_s2 = (fourth_central_moment - var**2 * (n - 3) / (n - 1)) / n
  z_var = (np.var(samples, ddof=1) - var) / math.sqrt(var_of_s2)
  return z_mean, z_var


# ---------------------------------------------------------------- shuffling


@pytest.mark.parametrize('m,n,expected_sizes', [
    (12, 4, [4, 4, 4]),
    (10, 3, [3, 3, 2, 2]),
    (7, 7, [7]),
    (7, 1, [1] * 7),
    (5, 4, [3, 2]),
    (3383, 101, [100] * 17 + [99] * 17),  # EMNIST users, paper Sec. 5.3.
])
def test_shuffled_epochs_spread_each_client_once_per_epoch(
    m, n, expected_sizes):
  sampler = pt.ShuffledEpochs(m, n, seed=3)
  assert sampler.rounds_per_epoch == len(expected_sizes)
  assert list(sampler.cohort_sizes) == expected_sizes
  assert sampler.expected_clients_per_round == pytest.approx(
      m / len(expected_sizes))
  _assert_once_per_epoch(sampler, num_epochs=3)
  sizes = [len(sampler.indices(t)) for t in range(3 * len(expected_sizes))]
  assert sizes == expected_sizes * 3


@pytest.mark.parametrize('m,n,expected_sizes', [
    (10, 3, [3, 3, 3, 1]),
    (5, 4, [4, 1]),
    (12, 4, [4, 4, 4]),
])
def test_shuffled_epochs_partial_last_round(m, n, expected_sizes):
  sampler = pt.ShuffledEpochs(m, n, seed=3, remainder='partial')
  assert list(sampler.cohort_sizes) == expected_sizes
  _assert_once_per_epoch(sampler, num_epochs=3)
  sizes = [len(sampler.indices(t)) for t in range(2 * len(expected_sizes))]
  assert sizes == expected_sizes * 2


def test_shuffled_epochs_with_ids_return_each_id_once_per_epoch():
  ids = [f'client_{i:03d}' for i in range(23)]
  sampler = pt.ShuffledEpochs(ids, 5, seed=0)
  for epoch in range(2):
    rounds = range(epoch * 5, epoch * 5 + 5)
    seen = [cid for t in rounds for cid in sampler.ids(t)]
    assert sorted(seen) == ids


def test_shuffled_epochs_reshuffle_between_epochs():
  sampler = pt.ShuffledEpochs(50, 10, seed=0)
  first_rounds = [tuple(sampler.indices(e * 5)) for e in range(4)]
  assert len(set(first_rounds)) == 4


@PROPERTY_SETTINGS
@given(m=st.integers(1, 40), data=st.data(), seed=st.integers(0, 2**32),
       remainder=st.sampled_from(['spread', 'partial']))
def test_shuffled_epochs_property(m, data, seed, remainder):
  n = data.draw(st.integers(1, m), label='n')
  sampler = pt.ShuffledEpochs(m, n, seed, remainder=remainder)
  assert sampler.rounds_per_epoch == -(-m // n)
  _assert_once_per_epoch(sampler, num_epochs=3)
  sizes = sampler.cohort_sizes
  assert max(sizes) <= n and sum(sizes) == m
  if remainder == 'spread':
    assert max(sizes) - min(sizes) <= 1
  else:
    assert all(s == n for s in sizes[:-1])


# --------------------------------------------------- determinism and seeds


def _all_samplers(seed):
  return [
      pt.ShuffledEpochs(37, 5, seed),
      pt.BernoulliSampling(37, 5.0, seed),
      pt.PoissonSampling(37, 5.0, seed),
  ]


@pytest.mark.parametrize('index', range(3))
def test_direct_access_equals_replay(index):
  replayed = _cohorts(_all_samplers(11)[index], range(40))
  order = np.random.default_rng(0).permutation(40)
  fresh = _all_samplers(11)[index]
  direct = {int(t): fresh.indices(int(t)).tolist() for t in order}
  assert [direct[t] for t in range(40)] == replayed


@pytest.mark.parametrize('index', range(3))
def test_far_round_is_computed_directly_and_stably(index):
  sampler = _all_samplers(5)[index]
  far = 10**12 + 3
  first = sampler.indices(far).tolist()
  sampler.indices(0)  # Touch another epoch in between.
  assert sampler.indices(far).tolist() == first
  assert _all_samplers(5)[index].indices(far).tolist() == first
  assert all(0 <= i < 37 for i in first) and len(set(first)) == len(first)


@pytest.mark.parametrize('index', range(3))
def test_different_seeds_differ(index):
  assert (_cohorts(_all_samplers(0)[index], range(10)) !=
          _cohorts(_all_samplers(1)[index], range(10)))


@pytest.mark.parametrize('index', range(3))
def test_canary_stream_independent_of_real_stream_with_same_seed(index):
  sampler = _all_samplers(7)[index]
  canaries = sampler.canary_schedule(37, 40, seed=7)
  assert [c.tolist() for c in canaries.rounds] != _cohorts(sampler, range(40))


def test_periodic_canaries_depend_on_seed_only():
  a = canary_schedules.periodic_canary_schedule(30, 20, 4, seed=2).as_round_lists()
  assert canary_schedules.periodic_canary_schedule(30, 20, 4, seed=2).as_round_lists() == a
  assert canary_schedules.periodic_canary_schedule(30, 20, 4, seed=3).as_round_lists() != a


# ------------------------------------------------------- canary schedules


@pytest.mark.parametrize('k,num_rounds,r', [
    (20, 16, 4),
    (7, 10, 3),
    (1000, 500, 8),
    (5, 3, 3),
    (3, 10, 1),
    (10, 10, 10),
    (4, 11, 2),
])
def test_periodic_canaries_once_per_period(k, num_rounds, r):
  schedule = canary_schedules.periodic_canary_schedule(k, num_rounds, r, seed=1)
  assert schedule.num_rounds == num_rounds
  assert np.array_equal(schedule.appearance_counts(), np.full(k, r))
  starts = _boundaries(num_rounds, r)
  assert list(canary_schedules.period_lengths(num_rounds, r)) == list(np.diff(starts))
  _assert_once_per_period(schedule, starts)
  assert schedule.round_counts().sum() == k * r


def test_period_lengths_put_longer_periods_first():
  assert list(canary_schedules.period_lengths(10, 4)) == [3, 3, 2, 2]
  assert list(canary_schedules.period_lengths(16, 4)) == [4, 4, 4, 4]
  assert list(canary_schedules.period_lengths(5, 5)) == [1] * 5


def test_periodic_canary_round_is_uniform_within_period():
  # Over seeds, canary 0's round (r = 1, k = 3 < T = 10) must be uniform on
  # [0, 10): chi-square goodness of fit at ALPHA.
  num_seeds = 2000
  rounds = [
      next(t for t, ids in enumerate(
          canary_schedules.periodic_canary_schedule(3, 10, 1, seed).rounds) if 0 in ids)
      for seed in range(num_seeds)
  ]
  observed = np.bincount(rounds, minlength=10)
  assert stats.chisquare(observed).pvalue > ALPHA


@PROPERTY_SETTINGS
@given(k=st.integers(1, 30), num_rounds=st.integers(1, 40), data=st.data(),
       seed=st.integers(0, 2**32))
def test_periodic_canaries_property(k, num_rounds, data, seed):
  r = data.draw(st.integers(1, num_rounds), label='r')
  schedule = canary_schedules.periodic_canary_schedule(k, num_rounds, r, seed)
  assert schedule.num_rounds == num_rounds
  assert np.array_equal(schedule.appearance_counts(), np.full(k, r))
  _assert_once_per_period(schedule, _boundaries(num_rounds, r))


@pytest.mark.parametrize('k,num_rounds,r', [(5, 10, 2), (1, 1, 1), (8, 9, 9)])
def test_last_rounds_uncapped_uses_exactly_last_r_rounds(k, num_rounds, r):
  schedule = canary_schedules.last_rounds_canary_schedule(k, num_rounds, r)
  used = {t for t in range(num_rounds) if schedule.canaries(t).size}
  assert used == set(range(num_rounds - r, num_rounds))
  for t in used:
    assert schedule.canaries(t).tolist() == list(range(k))


@pytest.mark.parametrize('k,num_rounds,r,cap,used_rounds', [
    (10, 20, 3, 4, 8),  # ceil(30 / 4)
    (10, 20, 3, 10, 3),
    (10, 20, 3, 50, 3),  # A cap above k cannot be used.
    (7, 7, 1, 1, 7),
    (6, 12, 2, 4, 3),
])
def test_last_rounds_capped_uses_fewest_final_rounds(k, num_rounds, r, cap,
                                                      used_rounds):
  schedule = canary_schedules.last_rounds_canary_schedule(k, num_rounds, r, cap)
  used = {t for t in range(num_rounds) if schedule.canaries(t).size}
  assert used == set(range(num_rounds - used_rounds, num_rounds))
  assert np.array_equal(schedule.appearance_counts(), np.full(k, r))
  counts = schedule.round_counts()[num_rounds - used_rounds:]
  assert counts.max() <= min(cap, k) and counts.max() - counts.min() <= 1


@PROPERTY_SETTINGS
@given(k=st.integers(1, 20), r=st.integers(1, 5), cap=st.integers(1, 25),
       slack=st.integers(0, 10))
def test_last_rounds_property(k, r, cap, slack):
  fewest = max(r, -(-k * r // cap))  # Lower bound: r rounds, <= cap per round.
  num_rounds = fewest + slack
  schedule = canary_schedules.last_rounds_canary_schedule(k, num_rounds, r, cap)
  used = {t for t in range(num_rounds) if schedule.canaries(t).size}
  assert used == set(range(slack, num_rounds))
  assert np.array_equal(schedule.appearance_counts(), np.full(k, r))
  assert schedule.round_counts().max() <= min(cap, k)


def test_shuffled_epochs_canaries_once_per_epoch_and_truncated():
  sampler = pt.ShuffledEpochs(23, 5, seed=0)  # 5 rounds per epoch.
  schedule = sampler.canary_schedule(12, 13, seed=4)
  assert schedule.num_rounds == 13
  _assert_once_per_period(schedule, [0, 5, 10])
  last = np.concatenate([schedule.canaries(t) for t in (10, 11, 12)])
  assert len(set(last.tolist())) == len(last) <= 12
  assert 0 < len(last) < 12  # Per-round counts are 2 or 3 out of 12 / 5.


def test_as_round_lists_is_plain_python_ints():
  schedule = canary_schedules.periodic_canary_schedule(4, 6, 2, seed=0)
  lists = schedule.as_round_lists()
  assert len(lists) == 6
  assert all(type(i) is int for ids in lists for i in ids)
  assert [list(ids) for ids in lists] == [c.tolist() for c in schedule.rounds]
  assert sorted(i for ids in lists for i in ids) == sorted(list(range(4)) * 2)


def test_custom_schedule_counts():
  schedule = canary_schedules.CanarySchedule(3, ([0, 2], [], [2]))
  assert schedule.appearance_counts().tolist() == [1, 0, 2]
  assert schedule.round_counts().tolist() == [2, 0, 1]
  with pytest.raises(ValueError):
    schedule.rounds[0][0] = 1  # Read-only.


# ---------------------------------------------------- sampling statistics


def test_bernoulli_inclusion_frequency_and_cohort_moments():
  m, expected, num_rounds = 40, 10.0, 4000
  q = expected / m
  sampler = pt.BernoulliSampling(m, expected, seed=123)
  assert sampler.probability == q
  cohorts = [sampler.indices(t) for t in range(num_rounds)]
  inclusion = np.zeros((num_rounds, m), dtype=bool)
  for t, ids in enumerate(cohorts):
    inclusion[t, ids] = True
  # Overall inclusion rate, and each client's (Bonferroni over m clients).
  assert stats.binomtest(int(inclusion.sum()), m * num_rounds, q).pvalue > ALPHA
  for count in inclusion.sum(axis=0):
    assert stats.binomtest(int(count), num_rounds, q).pvalue > ALPHA / m
  # Independence: two given clients together with probability q^2.
  both = int(np.sum(inclusion[:, 0] & inclusion[:, 1]))
  assert stats.binomtest(both, num_rounds, q * q).pvalue > ALPHA
  # Cohort size ~ Binomial(m, q): mean mq, variance mq(1-q).
  sizes = inclusion.sum(axis=1)
  pq = q * (1 - q)
  fourth_moment = m * pq * (1 + 3 * (m - 2) * pq)
  z_mean, z_var = _z_scores(sizes, m * q, m * pq, fourth_moment)
  assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_bernoulli_canaries_have_the_real_inclusion_rate():
  sampler = pt.BernoulliSampling(200, 30.0, seed=0)  # q = 0.15.
  schedule = sampler.canary_schedule(50, 1000, seed=9)
  total = int(schedule.appearance_counts().sum())
  assert stats.binomtest(total, 50 * 1000, 0.15).pvalue > ALPHA


def test_poisson_cohort_moments_and_uniform_inclusion():
  m, lam, num_rounds = 100, 30.0, 4000
  sampler = pt.PoissonSampling(m, lam, seed=321)
  cohorts = [sampler.indices(t) for t in range(num_rounds)]
  sizes = np.array([len(ids) for ids in cohorts])
  # P(Poisson(30) > 100) is negligible, so the cap does not bias the moments.
  z_mean, z_var = _z_scores(sizes, lam, lam, lam + 3 * lam**2)
  assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT
  for ids in cohorts:
    assert len(set(ids.tolist())) == len(ids)
  per_client = np.bincount(np.concatenate(cohorts), minlength=m)
  assert stats.chisquare(per_client).pvalue > ALPHA


def test_poisson_canaries_have_the_real_rate():
  sampler = pt.PoissonSampling(400, 40.0, seed=0)  # 0.1 per client per round.
  schedule = sampler.canary_schedule(20, 4000, seed=2)  # Poisson(2) per round.
  z_mean, z_var = _z_scores(schedule.round_counts(), 2.0, 2.0, 2.0 + 3 * 4.0)
  assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_poisson_cohort_is_capped_at_population():
  sampler = pt.PoissonSampling(5, 5.0, seed=0)
  sizes = [len(sampler.indices(t)) for t in range(300)]
  assert max(sizes) == 5  # P(Poisson(5) >= 5) ~ 0.56 per round.


# --------------------------------------------------------------- TFF adapter


def test_selection_fn_maps_tff_round_numbers():
  ids = [f'c{i}' for i in range(9)]
  sampler = pt.ShuffledEpochs(ids, 4, seed=0)
  fn = pt.make_training_selection_fn(sampler, lambda cid: ('dataset', cid))
  for round_num in range(1, 8):
    assert fn(round_num) == [('dataset', c) for c in sampler.ids(round_num - 1)]


def test_selection_fn_inside_tff_training_loop_with_resume():
  tff = pytest.importorskip('tensorflow_federated')
  import asyncio  # pylint: disable=g-import-not-at-top

  ids = [f'c{i}' for i in range(11)]
  sampler = pt.ShuffledEpochs(ids, 3, seed=8)
  fn = pt.make_training_selection_fn(sampler, lambda cid: cid)

  class RecordingProcess:  # Duck-typed: run_training_process only calls these.

    def __init__(self):
      self.seen = []

    def initialize(self):
      return 0

    def next(self, state, data):
      self.seen.append(list(data))
      return state + 1, {}

  class MemoryStateManager(tff.program.ProgramStateManager):

    def __init__(self, saved):
      self.saved = dict(saved)

    async def get_versions(self):
      return sorted(self.saved) or None

    async def load(self, version, structure):
      return self.saved[version]

    async def save(self, program_state, version):
      self.saved[version] = program_state

  asyncio.set_event_loop(asyncio.new_event_loop())
  full = RecordingProcess()
  tff.simulation.run_training_process(full, fn, total_rounds=6)
  assert full.seen == [sampler.ids(t) for t in range(6)]
  # Resume after version 2 was saved: TFF restarts at round_num 3 = our round 2.
  resumed = RecordingProcess()
  tff.simulation.run_training_process(
      resumed, fn, total_rounds=6,
      program_state_manager=MemoryStateManager({2: 2}))
  assert resumed.seen == full.seen[2:]


# ---------------------------------------------------------------- validation


def _selection_fn_call(round_num):
  fn = pt.make_training_selection_fn(pt.ShuffledEpochs(['a', 'b'], 1, 0), str)
  return fn(round_num)


@pytest.mark.parametrize('call,match', [
    (lambda: pt.ShuffledEpochs(0, 1, 0),
     r'clients must be >= 1'),
    (lambda: pt.ShuffledEpochs(-3, 1, 0), r'clients must be >= 1'),
    (lambda: pt.ShuffledEpochs(2.5, 1, 0), r'clients must be a positive'),
    (lambda: pt.ShuffledEpochs([], 1, 0), r'clients must contain at least one'),
    (lambda: pt.ShuffledEpochs(['a', 'b', 'a'], 1, 0),
     r"clients must be distinct; 'a'"),
    (lambda: pt.ShuffledEpochs('abc', 1, 0), r'clients must be a positive'),
    (lambda: pt.ShuffledEpochs([1, 2], 1, 0),
     r'clients must be string client ids'),
    (lambda: pt.ShuffledEpochs(5, 6, 0),
     r'clients_per_round must be in \[1, 5\]'),
    (lambda: pt.ShuffledEpochs(5, 0, 0),
     r'clients_per_round must be in \[1, 5\]'),
    (lambda: pt.ShuffledEpochs(5, 2.0, 0),
     r'clients_per_round must be an int'),
    (lambda: pt.ShuffledEpochs(5, True, 0),
     r'clients_per_round must be an int'),
    (lambda: pt.ShuffledEpochs(5, 2, -1),
     r'seed must be >= 0'),
    (lambda: pt.ShuffledEpochs(5, 2, 1.5), r'seed must be an int'),
    (lambda: pt.ShuffledEpochs(5, 2, 0, remainder='drop'),
     r'remainder must be one of'),
    (lambda: pt.ShuffledEpochs(5, 2, 0).indices(-1),
     r'round_index must be >= 0'),
    (lambda: pt.ShuffledEpochs(5, 2, 0).indices(1.0),
     r'round_index must be an int'),
    (lambda: pt.ShuffledEpochs(5, 2, 0).ids(0),
     r'clients was given as a count'),
    (lambda: pt.BernoulliSampling(10, 0, 0),
     r'expected_clients_per_round must be a number in \(0, num_clients=10\]'),
    (lambda: pt.BernoulliSampling(10, 11, 0),
     r'inclusion probability in \(0, 1\]'),
    (lambda: pt.BernoulliSampling(10, float('nan'), 0),
     r'expected_clients_per_round'),
    (lambda: pt.BernoulliSampling(10, '5', 0), r'expected_clients_per_round'),
    (lambda: pt.PoissonSampling(10, -1.0, 0),
     r'expected_clients_per_round must be a number in \(0, num_clients=10\]'),
    (lambda: pt.PoissonSampling(10, 10.5, 0), r'expected_clients_per_round'),
    (lambda: canary_schedules.periodic_canary_schedule(0, 10, 1, 0),
     r'num_canaries must be >= 1'),
    (lambda: canary_schedules.periodic_canary_schedule(5, 0, 1, 0),
     r'num_rounds must be >= 1'),
    (lambda: canary_schedules.periodic_canary_schedule(5, 10, 0, 0),
     r'repetitions must be in \[1, 10\]'),
    (lambda: canary_schedules.periodic_canary_schedule(5, 10, 11, 0),
     r'repetitions must be in \[1, 10\]'),
    (lambda: canary_schedules.periodic_canary_schedule(5, 10, 2, -2),
     r'seed must be >= 0'),
    (lambda: canary_schedules.last_rounds_canary_schedule(5, 10, 11),
     r'repetitions must be in \[1, 10\]'),
    (lambda: canary_schedules.last_rounds_canary_schedule(5, 10, 2, 0),
     r'max_canaries_per_round must be >= 1'),
    (lambda: canary_schedules.last_rounds_canary_schedule(10, 5, 2, 3),
     r'max_canaries_per_round=3 needs 7 rounds .* at least 4'),
    (lambda: pt.ShuffledEpochs(5, 2, 0).canary_schedule(0, 5, 0),
     r'num_canaries must be >= 1'),
    (lambda: pt.BernoulliSampling(5, 2, 0).canary_schedule(3, 0, 0),
     r'num_rounds must be >= 1'),
    (lambda: pt.PoissonSampling(5, 2, 0).canary_schedule(3, 4, -1),
     r'seed must be >= 0'),
    (lambda: canary_schedules.CanarySchedule(3, ([0, 3],)),
     r'rounds\[0\] must hold sorted distinct canary ids in \[0, 2\]'),
    (lambda: canary_schedules.CanarySchedule(3, ([], [1, 1])),
     r'rounds\[1\] must hold sorted distinct'),
    (lambda: canary_schedules.CanarySchedule(3, ([0.5],)),
     r'rounds\[0\] must hold sorted distinct'),
    (lambda: canary_schedules.CanarySchedule(3, ([[0, 1]],)),
     r'rounds\[0\] must hold sorted distinct'),
    (lambda: canary_schedules.CanarySchedule(3, ()), r'rounds must cover at least one round'),
    (lambda: canary_schedules.CanarySchedule(3, ([0],)).canaries(1),
     r'round_index must be in \[0, 0\]'),
    (lambda: pt.make_training_selection_fn(pt.ShuffledEpochs(5, 2, 0), str),
     r'sampler must be built from client ids'),
    (lambda: pt.make_training_selection_fn(pt.ShuffledEpochs(['a'], 1, 0), 3),
     r'create_tf_dataset_for_client must be callable'),
    (lambda: _selection_fn_call(0),
     r'round_num must be >= 1'),
])
def test_invalid_arguments_raise(call, match):
  with pytest.raises(ValueError, match=match):
    call()


@pytest.mark.parametrize('sampler', [
    pt.ShuffledEpochs(40, 8, seed=1),
    pt.PoissonSampling(40, 8.0, seed=1),
    pt.BernoulliSampling(40, 8.0, seed=1),
])
def test_canary_plan_cohort_counts_canaries_as_clients(sampler):
  # Truth by simulation of the schedule itself: the mean over rounds of
  # real clients plus scheduled canaries is the planned cohort (exactly for
  # shuffled epochs, within sampling error otherwise).
  rounds, k = 400, 30
  schedule, cohort = pt.canary_plan(sampler, k, rounds, 2, seed=3)
  canaries_per_round = schedule.round_counts().mean()
  clients_per_round = np.mean([len(sampler.indices(t)) for t in range(rounds)])
  if isinstance(sampler, pt.ShuffledEpochs):
    assert cohort == 8 + k * 2 / rounds
    assert canaries_per_round == k * 2 / rounds
  else:
    assert cohort == pytest.approx(8 + k * 8 / 40)
    assert canaries_per_round + clients_per_round == pytest.approx(
        cohort, rel=0.05)
  assert pt.canary_plan(sampler, 0, rounds, 1, seed=3)[0] is None


def test_canaries_as_a_large_share_of_each_round_are_warned_about():
  # 1,000 canaries over 10 rounds beside 100 clients: half of each round.
  cohort = canary_schedules.expected_cohort(100, 1000, 1, 10)
  assert cohort == 200
  line = canary_schedules.canary_share_warning(100, cohort)
  assert line.startswith('100 of the 200 expected participants per round '
                         '(50%) are canaries')
  # The demo's 50 canaries over 20 rounds beside 40 clients: 6%.
  demo = canary_schedules.expected_cohort(40, 50, 1, 20)
  assert canary_schedules.canary_share_warning(40, demo) is None
