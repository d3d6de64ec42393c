"""Each argument is checked once on a call path; no module uses others' _names.

The package is read with `ast` by `rechecks` (its docstring says what a
re-check and a private name of another module are), not imported. The
checker is held to hand-written sources with known answers, among them
excerpts of the package as it was before each function checked its
arguments once.
"""

from rechecks import Checker
from rechecks import read_sources


# -- The checker on sources whose answers are known. ---------------------------

_HELPERS = '''
from one_shot_epe import validation


@validation.arguments('delta')
def g(x, delta):
  return x


def h(dim):
  return k(dim)


@validation.arguments(dim=validation.Int(3))
def k(dim):
  return dim


@validation.arguments(x=validation.Real())
def s(x, delta):
  return g(x, delta)
'''

_CALLERS = '''
from one_shot_epe import validation
from one_shot_epe.stats import helpers as helpers_lib
from one_shot_epe.stats import reexport
from one_shot_epe.stats.helpers import g

_DIM = validation.Int(3)


@validation.arguments('delta', dim=_DIM)
def f(x, dim, delta):
  helpers_lib.g(x, delta)
  g(x, delta=delta)
  reexport.k(dim)
  helpers_lib.h(dim)
  _DIM('dim', dim)
  validation.PARAMETERS['delta']('delta', delta)
  validation.Optional(_DIM)('dim', value=dim)
  (lambda t: helpers_lib.k(dim))(0)
  helpers_lib.g.unchecked(x, delta)
  helpers_lib.h(x)
  helpers_lib.g(dim, 0.5)
  validation.check_int('n', x, 0, dim)
  helpers_lib.s.unchecked(delta, 0.5)
  return helpers_lib.s.unchecked(x, delta)


@validation.arguments('delta')
def rebinds(delta):
  delta = min(delta, 0.5)
  return g(0, delta)


@validation.arguments('seed')
def checks_in_body(seed, n):
  validation.check_int('n', n, 0, seed)
  return validation.check_int('seed', seed, 0)
'''

_CLASSES = '''
import dataclasses

from one_shot_epe import validation


@validation.arguments('num_seen')
def seen_ids(num_seen):
  return num_seen


@validation.fields('num_seen')
@dataclasses.dataclass(frozen=True)
class Spec:
  num_seen: int
  other: int = 0

  def ids(self):
    seen_ids(self.other)
    seen_ids.unchecked(self.num_seen)
    return seen_ids(self.num_seen)


class Sampler:

  @validation.arguments('seed')
  def schedule(self, seed):
    return seed

  @validation.arguments('seed')
  def plan(self, seed):
    return self.schedule(seed)


@validation.arguments('seed')
def outer(sampler, seed):
  Sampler.schedule(sampler, seed)
  return Sampler.schedule.unchecked(sampler, seed)
'''

_KNOWN = {
    'one_shot_epe.stats.helpers': _HELPERS,
    'one_shot_epe.stats.reexport':
        'from one_shot_epe.stats.helpers import k  # A re-export.\n',
    'one_shot_epe.stats.callers': _CALLERS,
    'one_shot_epe.design.classes': _CLASSES,
}
_KNOWN_RECHECKS = {
    'one_shot_epe.stats.callers.f: delta -> '
    'one_shot_epe.stats.helpers.g(delta)',
    'one_shot_epe.stats.callers.f: dim -> one_shot_epe.stats.helpers.k(dim)',
    'one_shot_epe.stats.callers.f: dim -> one_shot_epe.stats.helpers.h(dim)',
    'one_shot_epe.stats.callers.f: dim -> a check(value)',
    'one_shot_epe.stats.callers.f: delta -> a check(value)',
    'one_shot_epe.stats.callers.f: delta -> '
    'one_shot_epe.stats.helpers.s(delta)',
    'one_shot_epe.stats.callers.checks_in_body: seed -> a check(value)',
    'one_shot_epe.design.classes.Spec.ids: self.num_seen -> '
    'one_shot_epe.design.classes.seen_ids(num_seen)',
    'one_shot_epe.design.classes.Sampler.plan: seed -> '
    'one_shot_epe.design.classes.Sampler.schedule(seed)',
    'one_shot_epe.design.classes.outer: seed -> '
    'one_shot_epe.design.classes.Sampler.schedule(seed)',
}


def test_the_checker_finds_exactly_the_known_rechecks():
  found = {str(finding) for finding in Checker(_KNOWN).findings()}
  assert found == _KNOWN_RECHECKS


def test_the_checker_explains_a_recheck_through_a_helper():
  (finding,) = [f for f in Checker(_KNOWN).findings()
                if f.callee.endswith('.h')]
  assert finding.path == (' -> one_shot_epe.stats.helpers.h(dim)'
                          ' -> one_shot_epe.stats.helpers.k(dim)')


# Excerpts of the package as it was before each function checked its
# arguments once (the bodies cut down to the calls that re-checked).
_BEFORE = {
    'one_shot_epe.stats.null_distribution': '''
from one_shot_epe import validation


@validation.arguments(dim=validation.Int(3))
def null_logsf(tau, dim):
  return tau


@validation.arguments(dim=validation.Int(3))
def null_pdf(tau, dim):
  return tau


def null_cdf(tau, dim):
  return null_logsf(-tau, dim)


@validation.arguments(dim=validation.Int(3))
def null_ppf(q, dim):
  density = null_pdf(q, dim)
  return null_cdf(q, dim) - density
''',
    'one_shot_epe.design.canary_schedules': '''
from one_shot_epe import validation


@validation.arguments('num_rounds')
def period_lengths(num_rounds, repetitions):
  return validation.check_int('repetitions', repetitions, 1, num_rounds)


@validation.arguments('num_canaries', 'seed')
def periodic_canary_schedule(num_canaries, num_rounds, repetitions, seed):
  return period_lengths(num_rounds, repetitions)


@validation.arguments('clients_per_round', 'num_rounds',
                      num_canaries=validation.Int(0))
def expected_cohort(clients_per_round, num_canaries, repetitions, num_rounds):
  return clients_per_round + num_canaries * repetitions / num_rounds
''',
    'one_shot_epe.design.participation': '''
from one_shot_epe import validation
from one_shot_epe.design import canary_schedules


@validation.arguments('num_rounds', num_canaries=validation.Int(0))
def canary_plan(sampler, num_canaries, num_rounds, repetitions, seed):
  cohort = canary_schedules.expected_cohort(
      sampler.clients, num_canaries, repetitions, num_rounds)
  return canary_schedules.periodic_canary_schedule(
      num_canaries, num_rounds, repetitions, seed), cohort
''',
    'one_shot_epe.stats.tight_audit': '''
from one_shot_epe import validation


@validation.arguments('delta', canaries=validation.Int(1),
                      guesses=validation.Int(1),
                      mistakes_made=validation.Int(0))
def tight_p_value(mistakes_made, guesses, canaries, family, theta, delta):
  validation.check_int('guesses', guesses, 1, canaries)
  validation.check_int('mistakes_made', mistakes_made, 0, guesses)
''',
    'one_shot_epe.data.client_arrays': '''
from one_shot_epe import validation


@validation.arguments('num_clients', 'examples_per_client')
def client_sizes(kind, num_clients, examples_per_client, law='equal',
                 seed=0):
  return num_clients
''',
    'one_shot_epe.tff_engine.tasks.synthetic': '''
from one_shot_epe.data import client_arrays
from one_shot_epe import validation


@validation.arguments('num_clients', 'examples_per_client')
def emnist(num_clients, examples_per_client, seed=0, sizes='equal'):
  return client_arrays.client_sizes(
      'emnist', num_clients, examples_per_client, sizes, seed)
''',
    'one_shot_epe.stats.estimation': '''
from one_shot_epe import validation


@validation.arguments('sigma', 'delta')
def gaussian_epsilon(sigma, delta):
  return sigma
''',
    'one_shot_epe.accounting.tree_aggregation': '''
from one_shot_epe import validation
from one_shot_epe.stats import estimation


def _gaussian(mu, delta):
  return estimation.gaussian_epsilon(1.0 / mu, delta)


def _tree_epsilon(noise_multiplier, shift, delta, description):
  return _gaussian(shift / noise_multiplier, delta)


@validation.arguments('noise_multiplier', 'delta')
def canary_epsilon(noise_multiplier, delta, schedule, rounds):
  return _tree_epsilon(noise_multiplier, 1.0, delta, '')
''',
    'one_shot_epe.design.canary_spec': '''
import dataclasses

from one_shot_epe import validation


@validation.arguments(num_seen=validation.Int(0, 10**9))
def seen_ids(num_seen):
  return num_seen


@validation.arguments(num_unseen=validation.Int(0, 2**31 - 1))
def unseen_ids(num_unseen):
  return num_unseen


def tracked_ids(num_seen, num_unseen):
  return seen_ids(num_seen), unseen_ids(num_unseen)


@validation.fields('repetitions', num_seen=validation.Int(1, 10**9),
                   num_unseen=validation.Int(0, 2**31 - 1))
@dataclasses.dataclass(frozen=True, eq=False)
class CanarySpec:
  seed: int
  num_seen: int
  num_unseen: int

  def tracked_ids(self):
    return tracked_ids(self.num_seen, self.num_unseen)
''',
}
_RECHECKS_BEFORE = {
    'one_shot_epe.stats.null_distribution.null_ppf: dim -> '
    'one_shot_epe.stats.null_distribution.null_pdf(dim)',
    'one_shot_epe.stats.null_distribution.null_ppf: dim -> '
    'one_shot_epe.stats.null_distribution.null_cdf(dim)',
    'one_shot_epe.design.participation.canary_plan: num_canaries -> '
    'one_shot_epe.design.canary_schedules.expected_cohort(num_canaries)',
    'one_shot_epe.design.participation.canary_plan: num_rounds -> '
    'one_shot_epe.design.canary_schedules.expected_cohort(num_rounds)',
    'one_shot_epe.design.participation.canary_plan: num_canaries -> '
    'one_shot_epe.design.canary_schedules.periodic_canary_schedule('
    'num_canaries)',
    'one_shot_epe.design.participation.canary_plan: num_rounds -> '
    'one_shot_epe.design.canary_schedules.periodic_canary_schedule('
    'num_rounds)',
    'one_shot_epe.stats.tight_audit.tight_p_value: guesses -> a check(value)',
    'one_shot_epe.stats.tight_audit.tight_p_value: mistakes_made -> '
    'a check(value)',
    'one_shot_epe.tff_engine.tasks.synthetic.emnist: num_clients -> '
    'one_shot_epe.data.client_arrays.client_sizes(num_clients)',
    'one_shot_epe.tff_engine.tasks.synthetic.emnist: examples_per_client -> '
    'one_shot_epe.data.client_arrays.client_sizes(examples_per_client)',
    'one_shot_epe.accounting.tree_aggregation.canary_epsilon: delta -> '
    'one_shot_epe.accounting.tree_aggregation._tree_epsilon(delta)',
    'one_shot_epe.design.canary_spec.CanarySpec.tracked_ids: self.num_seen '
    '-> one_shot_epe.design.canary_spec.tracked_ids(num_seen)',
    'one_shot_epe.design.canary_spec.CanarySpec.tracked_ids: '
    'self.num_unseen -> one_shot_epe.design.canary_spec.tracked_ids('
    'num_unseen)',
}


def test_the_checker_finds_the_rechecks_the_package_had():
  found = {str(finding) for finding in Checker(_BEFORE).findings()}
  assert found == _RECHECKS_BEFORE
  assert len(found) >= 10


def test_the_checker_finds_private_names_of_other_modules():
  sources = {
      'one_shot_epe.stats.kernels':
          'def _kernel(x):\n  return x\n\n\ndef _other():\n  return 0\n\n\n'
          'def public(x):\n  return _kernel(x)\n',
      'experiments.user': (
          'import numpy as np\n'
          'from one_shot_epe.stats import kernels\n'
          'from one_shot_epe.stats import kernels as _kernels_lib\n'
          'from one_shot_epe.stats.kernels import _other\n\n\n'
          'def f(x):\n'
          '  np._private(x)\n'
          '  kernels.public(kernels.__name__)\n'
          '  _kernels_lib.public(x)\n'
          '  return kernels._kernel(x) + _other() + _own(x)\n\n\n'
          'def _own(x):\n  return x\n'),
  }
  assert Checker(sources).private_uses() == [
      'experiments.user: one_shot_epe.stats.kernels._kernel',
      'experiments.user: one_shot_epe.stats.kernels._other',
  ]


# -- The package. -------------------------------------------------------------


def test_no_function_of_the_package_checks_an_argument_twice():
  findings = Checker(read_sources('one_shot_epe')).findings()
  assert not findings, ('re-checked (call .unchecked, or check once):\n' +
                        '\n'.join(str(finding) + finding.path
                                  for finding in findings))


def test_no_module_uses_a_private_name_of_another():
  uses = Checker(read_sources('one_shot_epe', 'experiments')).private_uses()
  assert not uses, ('private names of other modules (give them public names, '
                    'or call the public function\'s .unchecked):\n' +
                    '\n'.join(uses))
