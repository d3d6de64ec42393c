"""Per-round cost of tracking canary cosines (Algorithm 3) during training.

Compares, at d = 1,206,590 (EMNIST CNN) and d = 4,050,000 (StackOverflow LSTM),
with 1 000 seen + 1 000 unseen canaries:

* baseline: regenerate every canary every round and take its cosine with the
  round's aggregate (`canaries.cosines` with one vector, plain TF in-process).
  It is timed on --baseline_canaries canaries and scaled linearly to all
  k + m: each canary is generated and scored independently, so the cost is
  linear in their number (--baseline_canaries=2000 times all of them);
* tracker: `CanaryDPFactory` inside TFF's C++ runtime exports the round's
  aggregate in its state, and `cosine_tracking.CosineTracker` buffers B
  aggregates in memory and processes them once every B rounds (one
  regeneration of the canaries per block). Per round it costs the export
  (the aggregator's round minus a plain
  `tff.aggregators.DifferentiallyPrivateFactory` round on the same value)
  plus the tracker's amortised ((B - 1) buffering + 1 block) / B.

Peak extra memory is the high-water resident set (VmHWM) of the benchmark
process plus its TFF worker, minus their resident set after three rounds of
the plain DP aggregator (for the baseline: minus the resident set before the
call). Each measurement runs in a fresh subprocess. The machine may be shared,
so the times are upper bounds.

The EMNIST CNN training round itself (~20 s on the 2-core machine, from the
issue) is not re-timed here: it needs the dataset and costs minutes.

  python -m benchmarks.canary_tracking [--buffer_rounds=B]
      [--dims=1206590,4050000] [--tiny]

--tiny (benchmarks/tiny.py): d = 1,000, 2 + 2 canaries, B = 2.
"""

import sys

if __name__ == '__main__':
  # The isolation mode's checks (exit 2), then a quiet TensorFlow import.
  from benchmarks import tff_start
  tff_start.start(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import json
import os
import subprocess
import time
import types
from collections.abc import Sequence

from absl import app
from absl import flags

from benchmarks import tiny
from one_shot_epe.runtime import command_line


def define_flags(flag_values: flags.FlagValues = flags.FLAGS
                 ) -> dict[str, flags.FlagHolder]:
  """Registers the program's flags; called when it runs, not at import.

  Args:
    flag_values: where they are registered (default: absl's global flags).

  Returns:
    The flags' holders by name.
  """
  return {
      'dims': flags.DEFINE_list(
          'dims', ['1206590', '4050000'], 'Model dimensionalities d to time.',
          flag_values=flag_values),
      'buffer_rounds': flags.DEFINE_integer(
          'buffer_rounds', None, 'B; default: '
          'canary_spec.default_buffer_rounds(d).', lower_bound=1,
          flag_values=flag_values),
      'num_seen': flags.DEFINE_integer(
          'num_seen', 1000, 'Seen canaries.', lower_bound=1,
          flag_values=flag_values),
      'num_unseen': flags.DEFINE_integer(
          'num_unseen', 1000, 'Unseen canaries.', lower_bound=0,
          flag_values=flag_values),
      'baseline_canaries': flags.DEFINE_integer(
          'baseline_canaries', 500, 'Canaries the baseline is timed on (scaled '
          'linearly to all of them).', lower_bound=1, flag_values=flag_values),
      'child': flags.DEFINE_enum(
          'child', None, ['baseline', 'tracker'], 'Internal: run one '
          'measurement and print it.', flag_values=flag_values),
      'dim': flags.DEFINE_integer('dim', None, 'Internal: d of a child run.',
                                  flag_values=flag_values),
      'tiny': tiny.define_flag(flag_values),
  }


# The flags' holders once `define_flags` ran (the program's start).
_FLAGS = types.SimpleNamespace()

_SEED = 12345
_GOALS_S = {1206590: 2.0, 4050000: 4.0}  # From the issue.
_GIB = 2.0**30
_DP_ARGS = dict(noise_multiplier=0.5, clients_per_round=10.0, clip=1.0)
# --tiny: one small d, 2 + 2 canaries, blocks of 2 rounds.
_TINY = dict(dims=['1000'], num_seen=2, num_unseen=2, baseline_canaries=2,
             buffer_rounds=2)


def _rss_bytes(field: str) -> int:
  """Sum of a /proc status field (VmRSS or VmHWM) over us and our TFF worker."""
  import psutil  # pylint: disable=g-import-not-at-top
  total = 0
  for process in [psutil.Process()] + psutil.Process().children(recursive=True):
    try:
      with open(f'/proc/{process.pid}/status') as status:
        for line in status:
          if line.startswith(field + ':'):
            total += int(line.split()[1]) * 1024
    except FileNotFoundError:
      continue
  return total


def _timed(fn):
  start = time.perf_counter()
  result = fn()
  return time.perf_counter() - start, result


def _child_tracker(dim: int) -> dict[str, float]:
  """Times the aggregator and tracker against a plain DP aggregator at `dim`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from one_shot_epe.design import canary_spec  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import canary_aggregator as ca  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import cosine_tracking  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import runtime  # pylint: disable=g-import-not-at-top

  spec = canary_spec.CanarySpec(seed=_SEED,
                                num_seen=_FLAGS.num_seen.value,
                                num_unseen=_FLAGS.num_unseen.value,
                                schedule=[[0]],
                                buffer_rounds=_FLAGS.buffer_rounds.value)
  value_type = tff.StructWithPythonType([tff.TensorType(np.float32, [dim])],
                                        list)
  factory = ca.CanaryDPFactory.gaussian_fixed(spec=spec, **_DP_ARGS)
  ours = factory.create(value_type)
  plain = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      **_DP_ARGS).create(value_type)
  clients = [[np.full([dim], 1e-3, np.float32)] for _ in range(2)]

  def time_rounds(process, state, rounds):
    seconds = []
    for _ in range(rounds):
      elapsed, output = _timed(lambda: process.next(state, clients))  # pylint: disable=cell-var-from-loop
      state = output.state
      seconds.append(elapsed)
    return state, seconds

  with runtime.local_cpp_context():
    _, plain_s = time_rounds(plain, plain.initialize(), 3)
    plain_round = min(plain_s[1:])
    resident = _rss_bytes('VmRSS')
    # Round 0 inserts canary 0 and warms up; later rounds insert none.
    state, _ = time_rounds(ours, ours.initialize(), 1)
    state, ours_s = time_rounds(ours, state, 2)
    # Feed B - 1 rounds (the exported aggregate of the last round, with the
    # round counter the tracker expects), then time the block round.
    tracker = cosine_tracking.CosineTracker(spec, dim)
    buffer_rounds = tracker.buffer_rounds
    observe_s = [0.0]
    for t in range(1, buffer_rounds):
      elapsed, _ = _timed(lambda: tracker.observe(  # pylint: disable=cell-var-from-loop
          state._replace(round_num=np.int32(t))))  # pylint: disable=cell-var-from-loop
      observe_s.append(elapsed)
    observe_s = float(np.median(observe_s[1:] or observe_s))
    block_s, _ = _timed(lambda: tracker.observe(
        state._replace(round_num=np.int32(buffer_rounds))))
    result = dict(round_overhead_s=min(ours_s) - plain_round,
                  observe_s=observe_s, block_s=block_s)
    peak = _rss_bytes('VmHWM')
  result.update(
      buffer_rounds=buffer_rounds,
      plain_round_s=plain_round,
      extra_peak_bytes=peak - resident)
  # A negative round overhead is timing noise of a shared machine; count 0.
  overhead = max(result['round_overhead_s'], 0.0)
  result['amortised_s'] = overhead + (
      (buffer_rounds - 1) * result['observe_s'] +
      result['block_s']) / buffer_rounds
  return result


def _child_baseline(dim: int) -> dict[str, float]:
  """Times regenerating every canary for one aggregate (plain TF)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from one_shot_epe.design import canary_spec  # pylint: disable=g-import-not-at-top
  from one_shot_epe.tff_engine import canaries  # pylint: disable=g-import-not-at-top

  ids = np.concatenate([
      canary_spec.seen_ids(_FLAGS.num_seen.value),
      canary_spec.unseen_ids(_FLAGS.num_unseen.value)
  ])
  timed_ids = ids[:_FLAGS.baseline_canaries.value]
  chunk = canaries.default_chunk_size(dim)
  aggregate = tf.random.stateless_normal([1, dim], seed=[0, 1])

  def round_cosines(canary_ids):
    return tf.function(lambda v: canaries.cosines(_SEED, canary_ids, v, chunk))

  round_cosines(ids[:1])(aggregate)  # Warm-up: TF kernels and threads.
  every_round = round_cosines(timed_ids)
  every_round.get_concrete_function(aggregate)  # Trace outside the timing.
  resident = _rss_bytes('VmRSS')
  seconds, _ = _timed(lambda: every_round(aggregate).numpy())
  return dict(amortised_s=seconds * ids.size / timed_ids.size,
              timed_canaries=int(timed_ids.size),
              extra_peak_bytes=_rss_bytes('VmHWM') - resident)


def _run_child(kind: str, dim: int) -> dict[str, float]:
  args = [
      sys.executable, '-m', 'benchmarks.canary_tracking', f'--child={kind}',
      f'--dim={dim}', f'--num_seen={_FLAGS.num_seen.value}',
      f'--num_unseen={_FLAGS.num_unseen.value}',
      f'--baseline_canaries={_FLAGS.baseline_canaries.value}'
  ]
  if _FLAGS.buffer_rounds.value is not None:
    args.append(f'--buffer_rounds={_FLAGS.buffer_rounds.value}')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  done = subprocess.run(args, capture_output=True, text=True, check=False,
                        env=env, timeout=1800)
  for line in done.stdout.splitlines():
    if line.startswith('RESULT '):
      return json.loads(line[len('RESULT '):])
  raise RuntimeError(f'{kind} run at d={dim} failed:\n{done.stderr[-3000:]}')


def main(argv: Sequence[str]) -> None:
  """Prints per-round tracking cost and memory per d vs the baseline.

  With --child set, this process is one measurement (run by `_run_child` in
  a fresh subprocess) and prints a single `RESULT <json>` line instead.

  Args:
    argv: the program's name, then the arguments absl left after parsing
      the flags (none are accepted).

  Raises:
    app.UsageError: `argv` holds arguments besides the program's name
      (exit code 2).
  """
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}', exitcode=2)
  tiny.shrink(_FLAGS, _TINY)
  if _FLAGS.child.value is not None:
    if _FLAGS.child.value == 'baseline':
      result = _child_baseline(_FLAGS.dim.value)
    else:
      result = _child_tracker(_FLAGS.dim.value)
    print('RESULT ' + json.dumps(result), flush=True)
    return
  print(f'Canary cosine tracking, {_FLAGS.num_seen.value} seen + '
        f'{_FLAGS.num_unseen.value} unseen canaries, seconds per round:')
  for dim in (int(d) for d in _FLAGS.dims.value):
    baseline = _run_child('baseline', dim)
    print(f'd = {dim:,}')
    print(f'  baseline, regenerate all canaries every round: '
          f'{baseline["amortised_s"]:8.2f} s   peak extra '
          f'{baseline["extra_peak_bytes"] / _GIB:.2f} GiB')
    print(f'      (timed on {baseline["timed_canaries"]} canaries, scaled '
          'linearly)')
    ours = _run_child('tracker', dim)
    goal = _GOALS_S.get(dim)
    verdict = ''
    if goal is not None:
      met = (ours['amortised_s'] <= goal and
             ours['extra_peak_bytes'] <= 4 * _GIB)
      verdict = (f'   goal <= {goal:.0f} s, <= 4 GiB: '
                 f'{"met" if met else "NOT met"}')
    print(f'  tracker,  B = {ours["buffer_rounds"]:3d}, amortised:'
          '      '
          f'{ours["amortised_s"]:8.2f} s   peak extra '
          f'{ours["extra_peak_bytes"] / _GIB:.2f} GiB')
    print(f'      round {ours["round_overhead_s"]:+.2f} s over a plain DP '
          f'round of {ours["plain_round_s"]:.2f} s; buffering '
          f'{ours["observe_s"]:.3f} s; block of B rounds '
          f'{ours["block_s"]:.1f} s')
    print(f'      speed-up over baseline: '
          f'{baseline["amortised_s"] / ours["amortised_s"]:.1f}x{verdict}')


if __name__ == '__main__':
  vars(_FLAGS).update(define_flags())
  app.run(main, flags_parser=command_line.parse_flags_or_exit)
