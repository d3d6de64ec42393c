"""Suite-wide guard: no test may leave a TFF worker process behind."""

import pytest

from one_shot_epe import runtime


@pytest.fixture(autouse=True, scope='session')
def _no_leftover_tff_workers():
  yield
  leftover = runtime.worker_processes()
  runtime.shutdown_workers()
  assert not leftover, f'TFF worker processes left running: {leftover}'
