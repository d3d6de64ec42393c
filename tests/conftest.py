"""Suite-wide fixtures: no leaked TFF workers; a network-call recorder."""

import urllib.request

import pytest

from one_shot_epe import runtime


@pytest.fixture(autouse=True, scope='session')
def _no_leftover_tff_workers():
  yield
  leftover = runtime.worker_processes()
  runtime.shutdown_workers()
  assert not leftover, f'TFF worker processes left running: {leftover}'


@pytest.fixture(name='network_calls')
def fixture_network_calls(monkeypatch):
  """Records (and refuses) every call into TFF's download path or urlopen."""
  from tensorflow_federated.python.simulation.datasets import download  # pylint: disable=g-import-not-at-top
  calls = []

  def refuse(*args, **kwargs):
    calls.append((args, kwargs))
    raise AssertionError('network access attempted')

  monkeypatch.setattr(urllib.request, 'urlopen', refuse)
  monkeypatch.setattr(download, '_fetch_lzma_file', refuse)
  return calls
