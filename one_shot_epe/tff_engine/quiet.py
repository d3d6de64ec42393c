"""Quiet program start: no TensorFlow/CUDA start-up noise unless asked for.

Importing TensorFlow 2.14 prints a screen of C++ log lines before a program
does anything: INFO (oneDNN custom operations, CPU instructions, missing CUDA
drivers), WARNING (TF-TRT) and three ERROR lines that are not errors ("Unable
to register cuDNN/cuFFT/cuBLAS factory", the pip wheel registering its CUDA
plugins twice). `quiet_startup` runs first thing in every program and

* sets TF_CPP_MIN_LOG_LEVEL=2 (C++ WARNING and below off), so real C++
  errors still show; the TFF workers this library starts get the same level
  in their own environment (`worker_environment`);
* imports TensorFlow (if the program uses it) with the process's stderr
  (file descriptor 2, where the C++ logs go) captured, and writes back every
  captured line except the three registration lines;
* ignores Python DeprecationWarnings and FutureWarnings of libraries and sets
  TensorFlow's Python logger to ERROR.

Progress bars, the program's own output and absl's own warnings stay. Any of
these asks for everything instead: ONE_SHOT_EPE_VERBOSE=1, the user's own
TF_CPP_MIN_LOG_LEVEL, or absl's --verbosity / -v on the command line.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence

__all__ = ['QUIET_TF_LOG_LEVEL', 'REGISTRATION_NOISE', 'TF_LOG_LEVEL_ENV',
           'VERBOSE_ENV', 'quiet_startup', 'quiet_tensorflow_import',
           'stderr_without', 'verbose_requested', 'worker_environment']

VERBOSE_ENV = 'ONE_SHOT_EPE_VERBOSE'
TF_LOG_LEVEL_ENV = 'TF_CPP_MIN_LOG_LEVEL'
QUIET_TF_LOG_LEVEL = '2'
# C++ ERROR lines of TensorFlow's import that report no error.
REGISTRATION_NOISE = ('Unable to register cuDNN factory',
                      'Unable to register cuFFT factory',
                      'Unable to register cuBLAS factory')
_VERBOSITY_FLAG = re.compile(r'--?(v|verbosity)(=.*)?')


def verbose_requested(argv: Sequence[str]) -> bool:
  """True if the user asked for TensorFlow's start-up output (module doc).

  Args:
    argv: The command line, program name first; -v/--v/--verbosity (with or
      without a value) asks for the output.

  Returns:
    True if ONE_SHOT_EPE_VERBOSE is set to other than '' or '0', if
    TF_CPP_MIN_LOG_LEVEL is set, or if `argv` has a verbosity flag.
  """
  if os.environ.get(VERBOSE_ENV, '').strip() not in ('', '0'):
    return True
  if TF_LOG_LEVEL_ENV in os.environ:
    return True
  return any(_VERBOSITY_FLAG.fullmatch(arg) for arg in argv[1:])


@contextlib.contextmanager
def stderr_without(patterns: Sequence[str]) -> Iterator[None]:
  """Captures file descriptor 2; on exit writes back lines without `patterns`.

  Catches what C++ code writes, which `sys.stderr` redirection would not.

  Args:
    patterns: Substrings; a captured line containing any of them is dropped.

  Yields:
    None, with file descriptor 2 redirected to a temporary file.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with tempfile.TemporaryFile() as capture:
      os.dup2(capture.fileno(), 2)
      try:
        yield
      finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        capture.seek(0)
        kept = [line for line in capture.read().splitlines(keepends=True)
                if not any(p.encode() in line for p in patterns)]
        os.write(2, b''.join(kept))
  finally:
    os.close(saved)


def quiet_tensorflow_import() -> None:
  """Imports TensorFlow without its start-up noise, for the library's entry points.

  `one_shot_epe.tff_engine.audit` and `runtime.local_cpp_context` call it, so a user's
  script that reaches TensorFlow through them first prints no start-up
  lines (C++ INFO and WARNING off while TensorFlow is imported, which fixes
  its C++ log level for the process; the three registration lines dropped;
  real C++ errors kept). The environment is left as it was (the workers get
  their level from `worker_environment`), and so are the Python warning
  filters. Does nothing when TensorFlow is already imported or the user asked
  for its output (`verbose_requested`).
  """
  if 'tensorflow' in sys.modules or verbose_requested(sys.argv):
    return
  os.environ[TF_LOG_LEVEL_ENV] = QUIET_TF_LOG_LEVEL
  try:
    with stderr_without(REGISTRATION_NOISE):
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    del os.environ[TF_LOG_LEVEL_ENV]
  logging.getLogger('tensorflow').setLevel(logging.ERROR)


def worker_environment() -> dict[str, str]:
  """The environment for a TFF worker process started by this library.

  This process's environment, plus TF_CPP_MIN_LOG_LEVEL=2 (the worker's C++
  INFO and WARNING lines off) unless the user asked for TensorFlow's output
  (`verbose_requested`).

  Returns:
    A copy of `os.environ`, possibly with TF_CPP_MIN_LOG_LEVEL added.
  """
  env = dict(os.environ)
  if not verbose_requested(sys.argv):
    env[TF_LOG_LEVEL_ENV] = QUIET_TF_LOG_LEVEL
  return env


def quiet_startup(argv: Sequence[str], import_tensorflow: bool) -> None:
  """Makes the program quiet unless `verbose_requested(argv)` (module doc).

  Call before anything imports TensorFlow; `import_tensorflow` for programs
  that use it.

  Quiet means TF_CPP_MIN_LOG_LEVEL=2 in this process's environment, Python's
  DeprecationWarning and FutureWarning ignored, and (with `import_tensorflow`)
  TensorFlow imported with its registration lines dropped and its Python
  logger at ERROR.

  Args:
    argv: The command line, program name first.
    import_tensorflow: Whether to import TensorFlow now.
  """
  if verbose_requested(argv):
    if import_tensorflow:
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    return
  os.environ[TF_LOG_LEVEL_ENV] = QUIET_TF_LOG_LEVEL
  warnings.filterwarnings('ignore', category=DeprecationWarning)
  warnings.filterwarnings('ignore', category=FutureWarning)
  if import_tensorflow:
    with stderr_without(REGISTRATION_NOISE):
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    logging.getLogger('tensorflow').setLevel(logging.ERROR)
