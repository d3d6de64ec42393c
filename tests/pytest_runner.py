"""Entry point of the Bazel py_test targets: runs pytest on one test file.

Every `pytest_test` target (tests/pytest_test.bzl) runs this script with the
path of its test file relative to the runfiles root, which is the working
directory Bazel gives a test. pytest then reads pytest.ini and tests/conftest.py
from the runfiles exactly as it does in the source tree. Under `bazel test` the
JUnit report goes where Bazel collects it ($XML_OUTPUT_FILE), and pytest's and
hypothesis's scratch directories go to the test's private $TEST_TMPDIR instead
of the runfiles tree or a /tmp shared by concurrent tests. As `make test`,
a target deselects the tests marked slow (pytest.ini); `bazel test
--test_arg='-mslow or not slow'` runs them too (pytest takes the last -m).
"""

import os
import sys

from hypothesis import configuration
import pytest


def main(argv: list[str]) -> int:
  """Runs pytest on `argv[1:]` (test files, pytest flags); its exit status.

  A file whose every test is marked slow passes with all of them deselected
  (pytest's status 5, no test run, becomes 0).
  """
  args = ['-q', '-m', 'not slow', *argv[1:]]
  scratch = os.environ.get('TEST_TMPDIR')
  if scratch:
    args.append(f'--basetemp={os.path.join(scratch, "pytest")}')
    configuration.set_hypothesis_home_dir(os.path.join(scratch, '.hypothesis'))
  report = os.environ.get('XML_OUTPUT_FILE')
  if report:
    args.append(f'--junitxml={report}')
  status = pytest.main(args)
  return 0 if status == pytest.ExitCode.NO_TESTS_COLLECTED else int(status)


if __name__ == '__main__':
  sys.exit(main(sys.argv))
