"""What each round of an audited Flower run released, and how it is accounted.

Flower's DP wrappers (`flwr.serverapp.strategy`, 1.42) release a round only
when every reply they got is free of errors (`validate_replies`: a lost node's
error reply skips the round, as does, with an accountant, a reply count other
than `num_sampled_clients`), and noise the mean of the replies they got at
std z S / `num_sampled_clients`, calibrated to the sample: a round that got
N_t < n replies is released at the effective noise multiplier z N_t / n. The
audit keeps Flower's calibration, the canaries counted in the sample
(`strategies.CanaryStrategy`: z (N_t + k_t) / (n + k_t)), and records each
round in metrics.csv: `released` (0: skipped), `num_clients` and `failures`
(the replies aggregated and the error replies), `canaries_inserted` and
`effective_noise_multiplier`.

`Releases.of_rounds` reads those rows back into what the report needs: the
rounds skipped, the rounds released at another noise than z, each seen
canary's actual presentations (a canary scheduled in a skipped round was
never inserted there: it stays a seen canary, presented fewer times, since
the seen/unseen split is the design's random draw, made before the run and
independent of its outcome), each round's DpEvent for the accountant
(`accounting.dp_fedavg.client_epsilon_of_rounds`), and a sentence for the
report naming each such round.
"""

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import dp_accounting
import numpy as np

__all__ = ['Releases', 'round_event']


def round_event(noise_multiplier: float,
                count_stddev: float | None) -> dp_accounting.DpEvent:
  """One round's DpEvent: the update's Gaussian (and the clipped count's).

  Args:
    noise_multiplier: The update's (effective) noise multiplier.
    count_stddev: The adaptive wrapper's clipped-count noise std sigma_b
      (Flower counts clipped replies, a query of sensitivity 1: a Gaussian
      at multiplier sigma_b); None for a fixed clip.

  Returns:
    A Gaussian at `noise_multiplier`, composed with one at `count_stddev`
    under adaptive clipping.
  """
  update = dp_accounting.GaussianDpEvent(noise_multiplier)
  if count_stddev is None:
    return update
  return dp_accounting.ComposedDpEvent(
      [update, dp_accounting.GaussianDpEvent(count_stddev)])


def _number(row: Mapping[str, Any], key: str, default: float) -> float:
  """A metrics row's number (rows read back from CSV hold strings)."""
  value = row.get(key, '')
  return default if value in ('', None) else float(value)


def _rounds(numbers: Sequence[int]) -> str:
  """'Round 3' or 'Rounds 3, 7 and 9'."""
  if len(numbers) == 1:
    return f'Round {numbers[0]}'
  return (f'Rounds {", ".join(map(str, numbers[:-1]))} and {numbers[-1]}')


@dataclasses.dataclass(frozen=True)
class Releases:
  """The run's rounds as released.

  Attributes:
    rounds: T, the rounds recorded.
    skipped: The rounds that released nothing, and why (one phrase each).
    other_noise: (round, replies aggregated, replies planned, effective
      noise multiplier) of each released round at another noise than z.
    presentation_counts: Each seen canary's insertions in released rounds.
    never_inserted: The seen canaries inserted in no round.
    noise_multiplier: z, the update's noise multiplier.
    count_stddev: sigma_b under adaptive clipping, else None.
  """
  rounds: int
  skipped: tuple[tuple[int, str], ...]
  other_noise: tuple[tuple[int, int, int, float], ...]
  presentation_counts: np.ndarray
  never_inserted: int
  noise_multiplier: float
  count_stddev: float | None

  @classmethod
  def of_rounds(cls, rows: Sequence[Mapping[str, Any]],
                schedule: Sequence[Sequence[int]], num_seen: int,
                noise_multiplier: float,
                count_stddev: float | None) -> 'Releases':
    """The releases the metrics rows record.

    Args:
      rows: metrics.csv's rows, one per round in order (numbers, or the
        strings a resumed run reads back; rows written before the columns
        existed count as released at z).
      schedule: The canary schedule (entry t: the seen ids of round t + 1).
      num_seen: k.
      noise_multiplier: z, the update's noise multiplier.
      count_stddev: sigma_b under adaptive clipping, else None.

    Returns:
      The releases.
    """
    z = float(noise_multiplier)
    skipped, other, inserted = [], [], []
    for row in rows:
      t = int(row['round'])
      if not _number(row, 'released', 1.0):
        failures = int(_number(row, 'failures', 0.0))
        skipped.append((t, f'{failures} error repl'
                           f'{"y" if failures == 1 else "ies"} (a lost node)'
                           if failures else 'fewer replies than sampled'))
        continue
      if t <= len(schedule):
        inserted.extend(schedule[t - 1])
      effective = _number(row, 'effective_noise_multiplier', z)
      if not math.isclose(effective, z, rel_tol=1e-9, abs_tol=0.0):
        records = int(_number(row, 'num_clients', 0.0) +
                      _number(row, 'canaries_inserted', 0.0))
        # z_eff = z N_t / (n + k_t): the records the noise was scaled to.
        other.append((t, records, round(records * z / effective), effective))
    counts = np.bincount(np.asarray(inserted, np.int64),
                         minlength=num_seen).astype(np.int64)
    return cls(len(rows), tuple(skipped), tuple(other), counts,
               int(np.sum(counts == 0)), z, count_stddev)

  @property
  def released(self) -> int:
    """The rounds that released a model."""
    return self.rounds - len(self.skipped)

  @property
  def uniform(self) -> bool:
    """Whether every round released at z (one event, T times)."""
    return not self.skipped and not self.other_noise

  def round_events(self) -> list[dp_accounting.DpEvent | None]:
    """Each round's DpEvent, None where it released nothing.

    Returns:
      T entries, for `dp_fedavg.client_epsilon_of_rounds`.
    """
    skipped = {t for t, _ in self.skipped}
    other = {t: z for t, _, _, z in self.other_noise}
    return [None if t in skipped else round_event(
        other.get(t, self.noise_multiplier), self.count_stddev)
            for t in range(1, self.rounds + 1)]

  def notes(self) -> list[str]:
    """The report's sentences on rounds skipped or noised otherwise.

    Returns:
      At most two sentences: the skipped rounds, the rounds released at
      another noise multiplier (each with its own); none when every round
      released at z.
    """
    notes = []
    if self.skipped:
      numbers = [t for t, _ in self.skipped]
      why = '; '.join(f'round {t}: {reason}' for t, reason in self.skipped)
      notes.append(
          f'{_rounds(numbers)} released nothing (Flower\'s DP wrapper skipped '
          f'the aggregation; {why}), as plain Flower does: the canaries '
          'scheduled there were never inserted there and stay seen canaries '
          f'with fewer presentations ({self.never_inserted} of '
          f'{self.presentation_counts.size} seen canaries were never '
          f'inserted), and the accounted ε counts the {self.released} '
          'released rounds.')
    if self.other_noise:
      cases = '; '.join(
          f'round {t}: {got} of {planned} records, effective z '
          f'{effective:.4g}' for t, got, planned, effective in self.other_noise)
      notes.append(
          f'{_rounds([t for t, *_ in self.other_noise])} aggregated another '
          'number of replies than Flower\'s DP wrapper sampled: it calibrates '
          'the noise to the sample (num_sampled_clients, the canaries counted '
          'here), so those rounds were noised at an effective noise '
          f'multiplier z N_t / (n + k_t), not z = {self.noise_multiplier:g} '
          f'({cases}); the accounted ε counts each at its own.')
    return notes

  def setting(self) -> dict[str, Any]:
    """The report setting's entries on the releases (none when uniform).

    Returns:
      'rounds_released', and 'skipped_rounds' and 'effective_noise_multipliers'
      where they apply.
    """
    if self.uniform:
      return {}
    entries: dict[str, Any] = {'rounds_released': self.released}
    if self.skipped:
      entries['skipped_rounds'] = [t for t, _ in self.skipped]
    if self.other_noise:
      entries['effective_noise_multipliers'] = {
          str(t): effective for t, _, _, effective in self.other_noise}
    return entries
