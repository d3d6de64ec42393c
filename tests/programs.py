"""Runs a program under test in its own process group (not collected).

`subprocess.run(..., timeout=...)` kills only the child when the timeout
expires; a launcher's TFF worker (a grandchild) would survive it, orphaned and
invisible to the suite's leak check. Here the whole group goes.
"""

import os
import signal
import subprocess
from collections.abc import Sequence


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
