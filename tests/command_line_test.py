"""Tests of one_shot_epe.runtime.command_line: the early argv scan and the exit-2 flag parser."""

import os
import subprocess
import sys
import textwrap

from absl import app
from absl import flags
import pytest

from one_shot_epe.runtime import command_line

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_known_string_flags_reads_named_flags_and_skips_the_rest(tmp_path):
  flagfile = tmp_path / 'run.cfg'
  flagfile.write_text('--backend=jax\n--noise_multiplier=0.1\n')
  values = command_line.known_string_flags(
      ['prog', '--total_rounds=3', '--tff_worker_addresses=h:1'],
      ('tff_worker_addresses', 'backend'))
  assert values.tff_worker_addresses == 'h:1'
  assert values.backend is None
  assert command_line.known_string_flags(['prog', f'--flagfile={flagfile}'],
                                ('backend',)).backend == 'jax'
  with pytest.raises(flags.Error):
    command_line.known_string_flags(['prog', '--flagfile=/nonexistent.cfg'],
                           ('backend',))


def test_requested_backend_reads_flags_flagfiles_and_defaults_to_tff(
    tmp_path):
  flagfile = tmp_path / 'run.cfg'
  flagfile.write_text('--backend=jax\n')
  assert command_line.requested_backend(['prog']) == 'tff'
  assert command_line.requested_backend(['prog', '--backend=jax']) == 'jax'
  assert command_line.requested_backend(['prog', '--backend', 'jax', '--x=1']) == 'jax'
  assert command_line.requested_backend(['prog', f'--flagfile={flagfile}']) == 'jax'
  assert command_line.requested_backend(
      ['prog', f'--flagfile={flagfile}', '--backend=tff']) == 'tff'
  # Unparsable: the TFF path's full parse reports it.
  assert command_line.requested_backend(['prog', '--flagfile=/nonexistent.cfg']) == 'tff'


def test_the_early_scan_starts_no_thread():
  # What a launcher runs to pick its engine, before it imports numpy or
  # TensorFlow, must not import them nor start a thread (as numpy's would).
  script = textwrap.dedent("""
      import os, sys
      from one_shot_epe.runtime import command_line
      command_line.requested_backend(['prog', '--backend=tff'])
      command_line.known_string_flags(['prog'], ('tff_worker_addresses',))
      assert 'numpy' not in sys.modules, 'numpy imported'
      print('THREADS', len(os.listdir('/proc/self/task')))
  """)
  done = subprocess.run([sys.executable, '-c', script], cwd=_REPO,
                        capture_output=True, text=True, timeout=60,
                        check=False)
  assert done.returncode == 0, done.stderr
  assert 'THREADS 1' in done.stdout, done.stdout


def test_parse_flags_or_exit_exits_2_naming_the_flag():
  script = textwrap.dedent("""
      from absl import app, flags
      from one_shot_epe.runtime import command_line
      flags.DEFINE_integer('rounds', 1, 'rounds')
      app.run(lambda argv: None, flags_parser=command_line.parse_flags_or_exit)
  """)
  done = subprocess.run([sys.executable, '-c', script, '--rounds=x'],
                        cwd=_REPO, capture_output=True, text=True, timeout=60,
                        check=False)
  assert done.returncode == 2
  assert '--rounds' in done.stderr and 'Traceback' not in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_refuse_positional_arguments_takes_the_program_name_alone():
  assert command_line.refuse_positional_arguments(['prog']) is None
  for extra in (['extra'], ['extra', '--x']):
    with pytest.raises(app.UsageError) as raised:
      command_line.refuse_positional_arguments(['prog', *extra])
    assert str(raised.value) == f'unexpected arguments: {extra}'
    assert raised.value.exitcode == 2


@pytest.mark.parametrize('where', ['missing.cfg', 'outer.cfg', 'a_directory'])
def test_an_unreadable_flagfile_is_one_clean_line_naming_it(tmp_path, where):
  (tmp_path / 'outer.cfg').write_text(f'--flagfile={tmp_path / "inner.cfg"}\n')
  (tmp_path / 'a_directory').mkdir()
  script = textwrap.dedent("""
      from absl import app
      from one_shot_epe.runtime import command_line
      app.run(lambda argv: None, flags_parser=command_line.parse_flags_or_exit)
  """)
  done = subprocess.run(
      [sys.executable, '-c', script, f'--flagfile={tmp_path / where}'],
      cwd=_REPO, capture_output=True, text=True, timeout=60, check=False)
  unreadable = tmp_path / ('inner.cfg' if where == 'outer.cfg' else where)
  flag = (f"--flagfile (in '{tmp_path / 'outer.cfg'}')"
          if where == 'outer.cfg' else '--flagfile')
  reason = ('is a directory, not a regular file.' if where == 'a_directory'
            else 'cannot be read: No such file or directory.')
  assert done.returncode == 2
  assert done.stderr == f"error: {flag} '{unreadable}' {reason}\n"


def test_flagfile_flags_are_followed_and_the_command_line_wins(tmp_path):
  config = tmp_path / 'grid.cfg'
  config.write_text('# grid: --noise_multiplier=0,0.1\n--backend=jax\n')
  assert command_line.requested_backend(['prog', f'--config={config}'],
                               flagfile_flags=('config',)) == 'jax'
  assert command_line.requested_backend(['prog', f'--config={config}']) == 'tff'
  assert command_line.requested_backend(
      ['prog', f'--config={config}', '--backend=tff'],
      flagfile_flags=('config',)) == 'tff'
  assert command_line.requested_backend(['prog', '--config=/nonexistent.cfg'],
                               flagfile_flags=('config',)) == 'tff'
