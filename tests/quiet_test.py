"""Tests that programs start without TensorFlow's noise unless asked for it."""

import os
import sys

import pytest

from one_shot_epe.tff_engine import quiet
import programs

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What TensorFlow 2.14 prints at import (C++ logs of every level).
_NOISE = ('Unable to register', 'TF-TRT Warning', 'oneDNN custom operations',
          'cuda_dnn.cc', 'tensorflow/')


def _env(**changes: str) -> dict[str, str]:
  env = {key: value for key, value in os.environ.items()
         if key not in (quiet.VERBOSE_ENV, quiet.TF_LOG_LEVEL_ENV)}
  env.update(changes)
  return env


def test_verbose_requested_by_env_or_verbosity_flag(monkeypatch):
  monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
  monkeypatch.delenv(quiet.TF_LOG_LEVEL_ENV, raising=False)
  assert not quiet.verbose_requested(['prog', '--noise_multiplier=0.1'])
  assert not quiet.verbose_requested(['prog', '--verbose_canaries'])
  assert not quiet.verbose_requested(['--verbosity=1'])  # argv[0] is no flag.
  for flag in ('--verbosity=1', '-v=0', '--v=2', '--verbosity', '-v'):
    assert quiet.verbose_requested(['prog', flag])
  monkeypatch.setenv(quiet.VERBOSE_ENV, '0')
  assert not quiet.verbose_requested(['prog'])
  monkeypatch.setenv(quiet.VERBOSE_ENV, '1')
  assert quiet.verbose_requested(['prog'])
  monkeypatch.delenv(quiet.VERBOSE_ENV)
  monkeypatch.setenv(quiet.TF_LOG_LEVEL_ENV, '0')  # The user's own choice.
  assert quiet.verbose_requested(['prog'])


def test_stderr_without_drops_only_matching_lines_of_fd_2(capfd):
  with quiet.stderr_without(['noise']):
    # As C++ code writes: to the descriptor, below sys.stderr.
    os.write(2, b'E noise from C++\nkeep this\nmore noise\nkept too\n')
  assert capfd.readouterr().err == 'keep this\nkept too\n'


def test_stderr_is_restored_after_an_exception(capfd):
  with pytest.raises(ZeroDivisionError):
    with quiet.stderr_without(['noise']):
      os.write(2, b'before\n')
      _ = 1 / 0
  os.write(2, b'after\n')
  assert capfd.readouterr().err == 'before\nafter\n'


def _help(module: str, *flags: str, **env: str):
  return programs.run([sys.executable, '-m', module, '--helpshort', *flags],
                      cwd=_REPO, env=_env(**env), timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize('module', ['experiments.train', 'experiments.reproduce',
                                    'experiments.compare_canife'])
def test_programs_start_quietly(module):
  done = _help(module)
  assert '--helpfull' in done.stdout, done.stderr  # absl's help (status 1).
  assert not [noise for noise in _NOISE if noise in done.stderr], done.stderr


@pytest.mark.parametrize('opt_in', [('--verbosity=0',), ()])
def test_opt_in_brings_the_start_up_lines_back(opt_in):
  # Control: the same start prints TensorFlow's lines when asked to, so the
  # check above can fail.
  env = {} if opt_in else {quiet.VERBOSE_ENV: '1'}
  done = _help('experiments.train', *opt_in, **env)
  assert '--helpfull' in done.stdout, done.stderr
  assert 'Unable to register cuDNN factory' in done.stderr
  assert 'TF-TRT Warning' in done.stderr
