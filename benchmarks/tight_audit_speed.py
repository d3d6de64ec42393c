"""How long the tight one-run bounds take beside the one-run certificate.

Simulated Gaussian-mechanism scores (seen N(mu, 1), unseen N(0, 1), mu of
eps = --epsilon at delta = 1e-6), --canaries per side; times
`tight_audit.epsilon_lo_tight` for both families and, as the baseline
measured in the same run on the same scores, `one_run.epsilon_one_run`
(Steinke, Nasr and Jagielski, the report's existing one-run certificate).
Each time is the best of --repeats; the ratio is tight / baseline.

  python -m benchmarks.tight_audit_speed                 # 10,000 per side
  python -m benchmarks.tight_audit_speed --canaries=1000
"""

import time
import types
from collections.abc import Callable, Sequence

import numpy as np
from absl import app
from absl import flags

from benchmarks import tiny
from one_shot_epe.runtime import command_line
from one_shot_epe.stats import estimation
from one_shot_epe.stats import one_run
from one_shot_epe.stats import tight_audit


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'canaries': flags.DEFINE_integer(
          'canaries', 10000, 'Seen canaries (and as many unseen).',
          lower_bound=10, flag_values=flag_values),
      'epsilon': flags.DEFINE_float(
          'epsilon', 3.0, 'True eps of the scores.', lower_bound=0.01,
          flag_values=flag_values),
      'repeats': flags.DEFINE_integer(
          'repeats', 3, 'Timings per method (best).', lower_bound=1,
          flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()
# --tiny (benchmarks/tiny.py): 10 + 10 canaries, one timing each.
_TINY = dict(canaries=10, repeats=1)
_DELTA = 1e-6


def best_time(function: Callable[[], float], repeats: int) -> tuple[float,
                                                                    float]:
  """(value, best wall time in s) of `repeats` calls.

  Args:
    function: the computation to time, called with no argument.
    repeats: how many times to call it, >= 1.

  Returns:
    (the last call's value, the shortest call's wall time in seconds).
  """
  times, value = [], 0.0
  for _ in range(repeats):
    start = time.perf_counter()
    value = function()
    times.append(time.perf_counter() - start)
  return value, min(times)


def main(argv: Sequence[str]) -> None:
  """Times the bounds and prints each with its ratio to the baseline.

  Args:
    argv: the program's name, then the arguments absl left after parsing
      the flags (none are accepted).

  Raises:
    app.UsageError: `argv` holds arguments besides the program's name
      (exit code 2).
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  rng = np.random.default_rng(0)
  mu = 1.0 / estimation.gaussian_sigma(_FLAGS.epsilon.value, _DELTA)
  seen = rng.normal(mu, 1.0, _FLAGS.canaries.value)
  unseen = rng.normal(0.0, 1.0, _FLAGS.canaries.value)
  baseline, baseline_time = best_time(
      lambda: one_run.epsilon_one_run(seen, unseen, delta=_DELTA),
      _FLAGS.repeats.value)
  print(
      f'{_FLAGS.canaries.value} seen + {_FLAGS.canaries.value} unseen '
      'canaries, true '
      f'eps {_FLAGS.epsilon.value:g}, delta {_DELTA:g}; best of '
      f'{_FLAGS.repeats.value}.')
  print(f'  one_run.epsilon_one_run (baseline): {baseline_time:.3f} s, '
        f'eps_lo {baseline:.3f}')
  for family in tight_audit.FAMILIES:
    value, seconds = best_time(
        lambda family=family: tight_audit.epsilon_lo_tight(
            seen, unseen, delta=_DELTA, family=family),
        _FLAGS.repeats.value)
    print(f'  tight_audit.epsilon_lo_tight({family}): {seconds:.3f} s '
          f'({seconds / baseline_time:.2f}x the baseline), eps_lo '
          f'{value:.3f}')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
