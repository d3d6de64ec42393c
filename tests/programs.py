"""Runs a program under test in its own process group (not collected).

`subprocess.run(..., timeout=...)` kills only the child when the timeout
expires; a launcher's TFF worker (a grandchild) would survive it, orphaned and
invisible to the suite's leak check. Here the whole group goes.
"""

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

# Runs `python -m MODULE ARGS...` with TensorFlow and JAX unimportable.
_WITHOUT_FRAMEWORKS = """
import runpy, sys
for name in ('tensorflow', 'tensorflow_federated', 'tensorflow_privacy',
             'jax', 'jaxlib', 'flax', 'optax'):
  sys.modules[name] = None  # Importing any of them now fails.
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""


def run(command: Sequence[str], *, timeout: float,
        **kwargs) -> subprocess.CompletedProcess:
  """`command` to its end, output captured as text; on timeout kills its group.

  Raises:
    subprocess.TimeoutExpired: after killing every process of the group.
  """
  with subprocess.Popen(command, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True,
                        start_new_session=True, **kwargs) as process:
    try:
      stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      process.communicate()
      raise
  return subprocess.CompletedProcess(command, process.returncode, stdout,
                                     stderr)


def run_without_frameworks(module: str, args: Sequence[str], *, timeout: float,
                           **kwargs) -> subprocess.CompletedProcess:
  """`python -m module args` where importing TensorFlow or JAX fails.

  Shows what a program does before it imports either: a path that imports
  one ends in an ImportError.
  """
  return run([sys.executable, '-c', _WITHOUT_FRAMEWORKS, module, *args],
             timeout=timeout, **kwargs)
