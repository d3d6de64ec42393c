"""Every engine's checkpoint store has the one protocol's signatures."""

import inspect

import pytest

from one_shot_epe.runtime import checkpoint_store

_METHODS = ('rounds', 'latest', 'verify', 'remove_partial', 'save', 'load')


def _stores():
  stores = []
  for module, name in (('one_shot_epe.tff_engine.checkpoints',
                        'ProgramStateCheckpoints'),
                       ('one_shot_epe.jax_engine.checkpoints',
                        'TrainingStateCheckpoints'),
                       ('one_shot_epe.runtime.npz_checkpoints',
                        'NpzCheckpoints')):
    stores.append(getattr(pytest.importorskip(module), name))
  return stores


@pytest.mark.parametrize('method', _METHODS)
def test_each_engines_store_has_the_protocols_signature(method):
  expected = list(inspect.signature(
      getattr(checkpoint_store.CheckpointStore, method)).parameters)
  assert expected[0] == 'self'
  for store in _stores():
    function = getattr(store, method)
    assert not inspect.iscoroutinefunction(function), (store, method)
    assert list(inspect.signature(function).parameters) == expected, (
        store, method)


def test_each_engines_store_says_how_many_it_keeps(tmp_path):
  for store in _stores():
    instance = store(str(tmp_path / store.__name__))
    assert instance.directory == str(tmp_path / store.__name__)
    assert instance.kept is None or instance.kept >= 1
    assert instance.rounds() == [] and instance.latest() is None
