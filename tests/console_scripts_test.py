"""Tests of experiments.console_scripts: each script is its `python -m` module.

Truth: the same module run with `python -m` in a fresh interpreter. The scripts
run here in subprocesses, as an installed console script runs them (a fresh
process calling the function with the command line in sys.argv).
"""

import json
import os
import subprocess
import sys

import pytest

from experiments import console_scripts

# The directory holding the packages (the runfiles root under `bazel test`).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code_or_module: list[str], *args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *code_or_module, *args], cwd=REPO,
                        capture_output=True, text=True, timeout=120,
                        check=False)


def _script(function: str) -> list[str]:
  """argv prefix running console_scripts.`function` with the rest as argv."""
  assert callable(getattr(console_scripts, function))
  return ['-c', 'import sys; from experiments import console_scripts; '
          f'sys.argv = ["one-shot-epe"] + sys.argv[1:]; '
          f'console_scripts.{function}()']


@pytest.fixture(name='cosines_csv')
def fixture_cosines_csv(tmp_path):
  path = tmp_path / 'cosines.csv'
  path.write_text('cosine\n' + '\n'.join(
      str(0.01 * (i % 7) - 0.02) for i in range(50)) + '\n')
  return str(path)


@pytest.mark.parametrize('args', [
    ('--dim=1000', '--delta=1e-6', '--format=json'),
    ('--dim=1000', '--delta=1e-6'),
    ('--dim=1000', '--delta=2'),  # Bad input: exit status 2 and a message.
])
def test_estimate_script_behaves_as_python_dash_m(cosines_csv, args):
  script = _run(_script('estimate'), f'--cosines={cosines_csv}', *args)
  module = _run(['-m', 'one_shot_epe.reporting.epsilon_cli'], f'--cosines={cosines_csv}',
                *args)
  assert (script.returncode, script.stdout, script.stderr) == (
      module.returncode, module.stdout, module.stderr)
  assert script.returncode == (2 if '--delta=2' in args else 0)
  if '--format=json' in args:
    assert json.loads(script.stdout)['delta'] == 1e-6


@pytest.mark.parametrize('function,module_flag', [
    ('train', '--noise_multiplier'),
    ('reproduce', '--noise_multipliers'),
])
def test_launcher_scripts_define_their_flags_as_main(function, module_flag):
  # The flags exist only when the launcher runs as __main__ (its
  # `if __name__ == '__main__'` block defines them), so --helpshort listing
  # them shows the module ran as a program.
  done = _run(_script(function), '--helpshort')
  assert f'  {module_flag}:' in done.stdout, done.stdout + done.stderr
  bad = _run(_script(function), '--no_such_flag=1')
  assert bad.returncode == 2
  assert 'no_such_flag' in bad.stderr
