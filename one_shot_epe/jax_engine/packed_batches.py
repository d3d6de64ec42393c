"""A round's batches laid out in the lanes of the 'vmap' round (numpy).

`packing` chooses the lanes: which clients (slots of a round's
`data.RoundBatches` or `data.RoundRows`) each lane carries back to back, and
how many batches a lane holds. This module lays a round's arrays out that
way for `fedavg.packed_round`: `pack_batches` gathers the batches
(`PackedBatches`), `pack_rows` only their rows in the split for a split
resident on the device (`PackedRows`), each with every packed batch's slot,
index within its client and first/last-batch flags; `slot_batch_counts` and
`packed_layout` give `packing` a round's counts and its layout.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from one_shot_epe import validation
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import packing

__all__ = ['PackedBatches', 'PackedRows', 'pack_batches', 'pack_rows',
           'packed_layout', 'slot_batch_counts']


@dataclasses.dataclass(frozen=True)
class PackedBatches:
  """A round's clients packed back to back into lanes (`packing`).

  Attributes:
    inputs, labels, example_mask: as `data.RoundBatches`, [lanes,
      lane_batches, batch_size, ...]: each lane's clients' batches in turn,
      then empty ones.
    slot: int32 [lanes, lane_batches], the `data.RoundBatches` slot of the
      batch's client (0 on empty batches).
    batch_index: int32 [lanes, lane_batches], the batch's index within its
      client (its dropout key, `client_training.batch_key`).
    start: float32 [lanes, lane_batches], 1 on a client's first batch (the
      model and client optimizer restart from the server's).
    end: float32 [lanes, lane_batches], 1 on a client's last batch (its
      clipped update joins the sum).
  """
  inputs: np.ndarray
  labels: np.ndarray
  example_mask: np.ndarray
  slot: np.ndarray
  batch_index: np.ndarray
  start: np.ndarray
  end: np.ndarray


def slot_batch_counts(batches: data.RoundBatches | data.RoundRows
                      ) -> np.ndarray:
  """int64 [clients]: local batches of each present slot (>= 1), slot order.

  A client's batches are a prefix of its slot; a client without examples
  takes one empty batch, so that its (zero) update is still counted.

  Args:
    batches: A round's batches or rows (`data.client_batches`,
      `data.client_rows`).

  Returns:
    The counts of the slots with client_mask > 0.
  """
  present = np.flatnonzero(batches.client_mask > 0)
  counts = (batches.example_mask[present].sum(axis=2) > 0).sum(axis=1)
  return np.maximum(counts, 1).astype(np.int64)


def packed_layout(batches: data.RoundBatches | data.RoundRows,
                  lane_multiple: int = 1) -> tuple[list[list[int]], int]:
  """(slots of each lane, lane length) of `packing.lane_layout` for a round.

  Args:
    batches: A round's batches or rows.
    lane_multiple: The number of lanes is a multiple of this (e.g. the device
      count), >= 1.

  Returns:
    (lanes, length): each lane's slots in `batches`, and the batches per lane.

  Raises:
    ValueError: `lane_multiple` < 1.
  """
  present = np.flatnonzero(batches.client_mask > 0)
  lanes, length = packing.lane_layout(slot_batch_counts(batches),
                                      lane_multiple=lane_multiple)
  return [[int(present[i]) for i in lane] for lane in lanes], length


def _lane_sources(example_mask: np.ndarray, lanes: Sequence[Sequence[int]],
                  lane_batches: int) -> tuple[np.ndarray, ...]:
  """(slot, batch_index, start, end, empty) of every packed batch."""
  lane_batches = validation.check_int('lane_batches', lane_batches, low=1)
  num_lanes = len(lanes)
  counts = np.maximum((example_mask.sum(axis=2) > 0).sum(axis=1), 1)
  # Source (slot, batch) of every packed batch; -1 marks an empty batch.
  source_slot = np.full((num_lanes, lane_batches), -1, np.int64)
  batch_index = np.zeros((num_lanes, lane_batches), np.int32)
  start = np.zeros((num_lanes, lane_batches), np.float32)
  end = np.zeros((num_lanes, lane_batches), np.float32)
  for lane, slots in enumerate(lanes):
    position = 0
    for slot in slots:
      count = int(counts[slot])
      if position + count > lane_batches:
        raise ValueError(f'lane_batches must hold lane {lane}\'s clients '
                         f'({position + count} batches); got {lane_batches}.')
      source_slot[lane, position:position + count] = slot
      batch_index[lane, position:position + count] = np.arange(count)
      start[lane, position] = 1.0
      end[lane, position + count - 1] = 1.0
      position += count
  empty = source_slot < 0
  slot = np.where(empty, 0, source_slot).astype(np.int32)
  return slot, batch_index, start, end, empty


def pack_batches(batches: data.RoundBatches, lanes: Sequence[Sequence[int]],
                 lane_batches: int) -> PackedBatches:
  """The clients of `batches` laid out in `lanes` of `lane_batches` each.

  lanes: the slots of each lane's clients, in order (`packed_layout`).

  Args:
    batches: The round's batches (`data.client_batches`).
    lanes: The slots of each lane's clients, in order (`packed_layout`).
    lane_batches: Batches per lane, >= 1.

  Returns:
    The packed batches, [len(lanes), lane_batches, batch_size, ...].

  Raises:
    ValueError: a lane's clients need more than `lane_batches` batches.
  """
  slot, batch_index, start, end, empty = _lane_sources(
      batches.example_mask, lanes, lane_batches)
  example_mask = batches.example_mask[slot, batch_index] * ~empty[..., None]
  return PackedBatches(
      inputs=batches.inputs[slot, batch_index],
      labels=batches.labels[slot, batch_index],
      example_mask=example_mask.astype(np.float32),
      slot=slot, batch_index=batch_index, start=start, end=end)


@dataclasses.dataclass(frozen=True)
class PackedRows:
  """`PackedBatches` as rows of a split resident on the device.

  Attributes:
    rows: int32 [lanes, lane_batches, batch_size], each example's row in the
      split (-1: none; `data.RoundRows.rows` laid out as `pack_batches` lays
      out the batches).
    slot, batch_index, start, end: as `PackedBatches`.
  """
  rows: np.ndarray
  slot: np.ndarray
  batch_index: np.ndarray
  start: np.ndarray
  end: np.ndarray


def pack_rows(rows: data.RoundRows, lanes: Sequence[Sequence[int]],
              lane_batches: int) -> PackedRows:
  """`pack_batches` of the round's rows (what a resident round uploads).

  Args:
    rows: The round's rows (`data.client_rows`).
    lanes: The slots of each lane's clients, in order (`packed_layout`).
    lane_batches: Batches per lane, >= 1.

  Returns:
    The packed rows, [len(lanes), lane_batches, batch_size].

  Raises:
    ValueError: a lane's clients need more than `lane_batches` batches.
  """
  slot, batch_index, start, end, empty = _lane_sources(
      rows.example_mask, lanes, lane_batches)
  packed = np.where(empty[..., None], -1, rows.rows[slot, batch_index])
  return PackedRows(rows=packed.astype(np.int32), slot=slot,
                    batch_index=batch_index, start=start, end=end)
