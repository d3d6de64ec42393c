"""The start of a benchmark that runs TensorFlow Federated, before TF loads.

Each TFF benchmark calls `start(sys.argv)` first thing in its `__main__`
block, before anything imports TensorFlow: the network isolation mode's
checks (`isolation.check_program`: a bad ONE_SHOT_EPE_NETWORK_ISOLATION, or
'require' where no private network namespace can be made, exits with status
2 before any work), then TensorFlow imported without its start-up noise
(`quiet.quiet_startup`).
"""

from collections.abc import Sequence

from one_shot_epe.tff_engine import isolation
from one_shot_epe.tff_engine import quiet


def start(argv: Sequence[str]) -> None:
  """The isolation mode's checks (exit 2), then a quiet TensorFlow import.

  Args:
    argv: The command line, program name first.
  """
  isolation.check_program(argv)
  quiet.quiet_startup(argv, import_tensorflow=True)
