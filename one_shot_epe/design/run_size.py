"""What a planned run will need, estimated before any of it is spent.

A run is refused at its door, before any data is loaded, any computation
compiled or any file written, when it cannot run on the machine: when its
memory (the model's state, the canaries' tracking block, and what grows
with the rounds: the canary schedule and the per-round records a run keeps)
exceeds the memory available (with synthetic data, also the clients'
examples drawn in memory), or when its work (training the clients,
scoring every tracked canary against every round, evaluating) exceeds
`MAX_WORK_FLOPS`. Every door (the launcher, `experiments.reproduce`, both
`CanaryAudit`s) asks `check` with the run's `RunShape`; the error names the
parameter to lower and the estimate, and each door names its own flag or
argument. Nothing here allocates in proportion to the run's size.

The per-round and per-canary costs are measured orders of magnitude, not
bounds: `ROUND_RECORD_BYTES` covers a round's entry of the canary schedule
(a tuple per round) and its rows of metrics.csv and canary_cosines.csv held
in memory (Python dicts of about ten floats each); `ROUND_CSV_BYTES` the
same rows on disk. Framework-free.
"""

import dataclasses
import math
import os

__all__ = ['MAX_WORK_FLOPS', 'PRESENTATION_BYTES', 'PlanRefused',
           'ROUND_CSV_BYTES', 'ROUND_RECORD_BYTES', 'RunShape',
           'available_memory', 'check']

# Host memory a run keeps per round: the schedule's entry and the rows of the
# per-round CSVs (metrics, canary cosines) it holds until it ends.
ROUND_RECORD_BYTES = 2048
# The same rows on disk (metrics.csv and canary_cosines.csv).
ROUND_CSV_BYTES = 400
# Host memory of one canary presentation in the schedule (its id in the
# numpy schedule and in the aggregator's tuples of Python ints: 56 bytes
# measured, doubled).
PRESENTATION_BYTES = 128
# FLOPs of regenerating one canary coordinate (a Gaussian draw, counter-based
# generator included) when a block of rounds is scored.
_GAUSSIAN_DRAW_FLOPS = 30
# Canaries regenerated at once while a block is scored (both engines' chunk).
_CANARY_CHUNK = 128
# The most work a run may take: 100 times the paper's largest run
# (configs/stackoverflow.cfg, about 1.6e17 FLOPs by `RunShape.work`).
MAX_WORK_FLOPS = 1e19


class PlanRefused(ValueError):
  """A plan refused as a whole: too large for the machine, too many canaries.

  The message says why (with the estimate) without naming the parameter;
  each door prefixes its own flag or argument for `parameter`.

  Attributes:
    parameter: The run parameter to change ('total_rounds', 'num_canaries',
      'num_unseen_canaries', 'dim': the model's size, 'synthetic_num_clients':
      the synthetic data's).
  """

  def __init__(self, parameter: str, message: str):
    super().__init__(message)
    self.parameter = parameter


@dataclasses.dataclass(frozen=True)
class RunShape:
  """The sizes a run is made of.

  Attributes:
    total_rounds: T, the training rounds.
    num_seen: k, the seen canaries.
    num_unseen: m, the unseen canaries.
    dim: d, the model's parameters; None where it is not known yet (an audit
      before it sees the model), which leaves the d-sized terms out.
    clients_per_round: The expected real clients of a round.
    examples_per_client: The examples one real client trains on in a round
      (its local epochs and any cap included).
    flops_per_example: FLOPs of training on one example.
    state_vectors: d-sized float32 vectors the training state holds (the
      model, the optimizers' slots, theta_0, the last aggregate).
    buffer_rounds: B, the rounds buffered per canary block.
    evaluations: How many times the test set is evaluated.
    eval_examples: Test examples of one evaluation.
    canary_presentations: The seen canaries' presentations over the run
      (k r, or their expected number under sampling), each an entry of the
      schedule.
    data_bytes: Host memory of the data the run draws in memory (a
      synthetic stand-in: `data.client_arrays.synthetic_bytes`); 0 for data
      read from files.
  """
  total_rounds: int
  num_seen: int
  num_unseen: int
  dim: int | None = None
  clients_per_round: float = 0.0
  examples_per_client: float = 0.0
  flops_per_example: float = 0.0
  state_vectors: int = 3
  buffer_rounds: int = 1
  evaluations: int = 0
  eval_examples: float = 0.0
  canary_presentations: float = 0.0
  data_bytes: float = 0.0

  def memory(self) -> dict[str, float]:
    """The host memory the run needs, by part, in bytes.

    Returns:
      'per-round records' (the schedule and the per-round rows), 'model
      state', 'canary tracking' (the block of B buffered rounds and a chunk
      of regenerated canaries, and each canary's statistics), 'canary
      schedule' (each presentation) and 'data' (`data_bytes`).
    """
    dim = self.dim or 0
    tracked = self.num_seen + self.num_unseen
    return {
        'per-round records': float(ROUND_RECORD_BYTES) * self.total_rounds,
        'model state': 4.0 * dim * self.state_vectors,
        'canary tracking': (4.0 * dim * (self.buffer_rounds +
                                         min(tracked, _CANARY_CHUNK)) +
                            64.0 * tracked),
        'canary schedule': PRESENTATION_BYTES * float(
            self.canary_presentations),
        'data': float(self.data_bytes),
    }

  def work(self) -> dict[str, float]:
    """The floating-point operations of the run, by part.

    Returns:
      'training' (every client's local steps), 'canaries' (each tracked
      canary's projection on each round's vector, and its regeneration once
      per block of B rounds) and 'evaluation'.
    """
    dim = self.dim or 0
    rounds = float(self.total_rounds)
    tracked = float(self.num_seen + self.num_unseen)
    blocks = math.ceil(self.total_rounds / max(1, self.buffer_rounds))
    return {
        'training': (rounds * self.clients_per_round *
                     self.examples_per_client * self.flops_per_example),
        'canaries': (2.0 * rounds * tracked * dim +
                     blocks * tracked * dim * _GAUSSIAN_DRAW_FLOPS),
        'evaluation': (self.evaluations * self.eval_examples *
                       self.flops_per_example / 3.0),
    }

  def csv_bytes(self) -> float:
    """Bytes of the per-round CSVs on disk.

    Returns:
      T x `ROUND_CSV_BYTES`.
    """
    return float(ROUND_CSV_BYTES) * self.total_rounds


def available_memory() -> int | None:
  """The host memory available to a new run, in bytes; None if unknown.

  Returns:
    /proc/meminfo's MemAvailable where there is one (Linux), else the free
    physical pages (`os.sysconf`), else None.
  """
  try:
    with open('/proc/meminfo', encoding='ascii') as stream:
      for line in stream:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  except (ValueError, OSError, AttributeError):
    return None


def _size(count: float) -> str:
  """Bytes in the largest unit that keeps the number >= 1 (GB are 1e9)."""
  for unit, scale in (('TB', 1e12), ('GB', 1e9), ('MB', 1e6)):
    if count >= scale:
      return f'{count / scale:.3g} {unit}'
  return f'{count / 1e3:.3g} kB'


def _parts(parts: dict[str, float], show) -> str:
  """'a 1 GB, b 2 MB': the nonzero parts, largest first."""
  return ', '.join(f'{name} {show(value)}' for name, value in
                   sorted(parts.items(), key=lambda item: -item[1]) if value)


def check(shape: RunShape, memory_limit: int | None = None) -> None:
  """Refuses a run that needs more memory or work than this machine gives.

  Args:
    shape: The run's sizes.
    memory_limit: The host memory the run may use, in bytes; None: what
      `available_memory` reports (no memory check where it is unknown).

  Raises:
    PlanRefused: the memory estimate exceeds the limit, or the work
      estimate exceeds `MAX_WORK_FLOPS`; naming the parameter to lower and
      both numbers.
  """
  limit = available_memory() if memory_limit is None else memory_limit
  memory = shape.memory()
  need = sum(memory.values())
  if limit is not None and need > limit:
    parameter = _memory_parameter(shape, memory)
    raise PlanRefused(
        parameter, f'the run needs about {_size(need)} of memory '
        f'({_parts(memory, _size)}) and this machine has {_size(limit)} '
        'available')
  work = shape.work()
  flops = sum(work.values())
  if flops > MAX_WORK_FLOPS:
    parameter = ('total_rounds' if work['training'] >= work['canaries'] else
                 _canary_parameter(shape))
    raise PlanRefused(
        parameter, f'the run is about {flops:.2g} floating-point operations '
        f'({_parts(work, lambda value: f"{value:.2g}")}), over the '
        f'{MAX_WORK_FLOPS:.0e} a run may take (100 times the paper\'s largest '
        'run)')


def _memory_parameter(shape: RunShape, memory: dict[str, float]) -> str:
  """The parameter behind the largest part of `memory`.

  The canaries' tracking is the model's d-sized block where that outweighs
  the canaries' own statistics (a model too large for its block of
  buffered rounds and regenerated canaries), else the canaries'.
  """
  largest = max(memory, key=memory.get)
  tracked = shape.num_seen + shape.num_unseen
  if largest == 'canary tracking' and (memory[largest] > 2 * 64.0 * tracked):
    return 'dim'
  return {'per-round records': 'total_rounds', 'model state': 'dim',
          'canary schedule': 'num_canaries',
          'data': 'synthetic_num_clients'}.get(largest,
                                               _canary_parameter(shape))


def _canary_parameter(shape: RunShape) -> str:
  """The canary count to lower: the larger of the seen and unseen ones."""
  return 'num_canaries' if shape.num_seen >= shape.num_unseen else (
      'num_unseen_canaries')
