"""The tiny JAX engine setting shared by the jax_engine_*_test files.

A CNN small enough for 'vmap' local training on a CPU (8 x 8 images, 5
classes), 12 synthetic clients of realistic sizes for it, and an observer
that keeps every record it is told (not collected).
"""

from one_shot_epe.data import client_arrays
from one_shot_epe.runtime import round_record
from one_shot_epe.jax_engine import models

MODEL = models.EmnistCnn(conv1_filters=2, conv2_filters=2, dense_units=4,
                         num_classes=5, image_size=8)


def arrays() -> client_arrays.ClientArrays:
  """12 clients of realistic sizes (mean 9), 8 x 8 pixels, labels mod 5."""
  full = client_arrays.synthetic_emnist(12, 9, seed=2, sizes='realistic')
  return client_arrays.ClientArrays(
      kind='emnist', client_ids=full.client_ids, offsets=full.offsets,
      features={'pixels': full.features['pixels'][:, :8, :8],
                'label': full.features['label'] % 5})


class Recorder:
  """A `round_record.RoundObserver` keeping everything it is told, in order."""

  def __init__(self):
    self.events = []

  def on_round(self, record: round_record.RoundRecord) -> None:
    self.events.append(record)

  def on_cosines(self, cosines) -> None:
    self.events.extend(cosines)

  def on_checkpoint(self, round_num) -> None:
    del round_num  # The events are the rounds and their cosines.
