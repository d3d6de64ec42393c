"""What a run of the JAX engine cost the device: compiles, padding, uploads.

`RunStats` gathers, round by round (`count_round`), the figures the
accelerator benchmarks report (`benchmarks/accelerator_round.py`,
`benchmarks/paper_scale.py`, `scripts/device_check.py`); `CompileClock`
reads XLA's compile seconds from JAX's monitoring events.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax

from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import packed_batches
from one_shot_epe.jax_engine import round_engine

__all__ = ['CompileClock', 'RunStats', 'count_round']

# JAX's monitoring event of one XLA compilation (jax 0.4.14 and 0.11).
_BACKEND_COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


@dataclasses.dataclass
class RunStats:
  """How the run used the device (`benchmarks/accelerator_round.py`).

  Attributes:
    compiles: the round's computations compiled (`RoundEngine.compiles`).
    compile_seconds: XLA's compile time over the run, every computation.
    real_examples, padded_examples: examples the rounds trained on, and the
      examples their computations processed (padding included).
    vmap_padded_examples: what 'vmap' local training processes for the same
      rounds (the clients packed into lanes, `packed_batches.packed_layout`).
    example_bytes: the bytes of the rounds' real examples (model inputs and
      labels).
    host_to_device_bytes: what the rounds sent to the device (their batches,
      or only their examples' rows with the split resident).
    resident_bytes: the split put on each device once (0: host-fed rounds).
    rounds: rounds trained (a round of a program's R runs counts once).
  """
  # What compiling cost.
  compiles: int = 0
  compile_seconds: float = 0.0
  # What the rounds processed and uploaded.
  rounds: int = 0
  real_examples: int = 0
  padded_examples: int = 0
  vmap_padded_examples: int = 0
  example_bytes: int = 0
  host_to_device_bytes: int = 0
  resident_bytes: int = 0

  @property
  def padding_ratio(self) -> float:
    """Processed over real examples (1 without padding)."""
    return self.padded_examples / max(self.real_examples, 1)

  @property
  def vmap_padding_ratio(self) -> float:
    """`padding_ratio` of 'vmap' local training on the same rounds."""
    return self.vmap_padded_examples / max(self.real_examples, 1)


class CompileClock:
  """Seconds XLA spends compiling, from JAX's monitoring events.

  `start()` registers the listener once per process and returns the seconds
  so far; `total` minus that is what compiled since.
  """

  total = 0.0
  _registered = False

  @classmethod
  def start(cls) -> float:
    """Listens from now on (once per process); the seconds counted so far.

    Returns:
      `CompileClock.total`, the compile seconds counted in this process so
      far (subtract it from a later `total` for what compiled since).
    """
    if not cls._registered:
      jax.monitoring.register_event_duration_secs_listener(cls._listen)
      cls._registered = True
    return cls.total

  @classmethod
  def _listen(cls, event: str, duration: float, **unused_details: Any) -> None:
    # jax 0.11 also passes the function's name and other details.
    if event == _BACKEND_COMPILE_EVENT:
      cls.total += duration


def count_round(stats: RunStats, engine: round_engine.RoundEngine,
                runs: Sequence[data.RoundBatches | data.RoundRows],
                example_bytes: int) -> None:
  """Adds a round's examples, padding and uploads to `stats` (all its runs).

  The uploads are what the round's call sent to the device
  (`RoundEngine.upload_bytes`; the canaries are generated on the device).

  Args:
    stats: the run's figures, updated in place.
    engine: the engine that ran the round.
    runs: the round's batches of each run of the program (one: a run).
    example_bytes: one example's model inputs and labels.
  """
  real = sum(int(batches.example_mask.sum()) for batches in runs)
  stats.real_examples += real
  stats.example_bytes += real * example_bytes
  padded = engine.program_padded_examples(runs)
  stats.padded_examples += padded
  if engine.local_training == 'vmap':
    stats.vmap_padded_examples += padded
  else:
    for batches in runs:
      lanes, lane_batches = packed_batches.packed_layout(batches)
      stats.vmap_padded_examples += (len(lanes) * lane_batches *
                                     batches.example_mask.shape[2])
  stats.host_to_device_bytes += engine.upload_bytes
  stats.rounds += 1
