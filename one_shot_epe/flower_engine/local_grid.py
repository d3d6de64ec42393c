"""An in-process Flower Grid: clients are functions, called in turn.

Flower's simulation runtime (`flwr.simulation.run_simulation`) runs each
ClientApp through Ray; `LocalGrid` calls a plain function per node instead,
in this process, which is what the engine's tests and benchmarks need (no
actors to start, deterministic, a round's cost that of its clients' work).
It implements the part of `flwr.serverapp.Grid` that strategies use:
`get_node_ids` and `send_and_receive`.
"""

from collections.abc import Callable, Iterable

from flwr.app import Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from one_shot_epe import validation

__all__ = ['LocalGrid']

# The run's and the server task's ids (Flower's messages carry them).
_RUN_ID = 1
_TASK_ID = 1


class LocalGrid(Grid):
  """Nodes 1..num_nodes answered by `client(node_id, message)` in turn.

  Attributes:
    num_nodes: The nodes' count.
  """

  def __init__(self, num_nodes: int,
               client: Callable[[int, Message], RecordDict]):
    """Sets the run, node and task ids of Flower's messages (if unset).

    Args:
      num_nodes: How many nodes (ids 1..num_nodes), >= 1.
      client: Returns node `node_id`'s reply content to `message`.

    Raises:
      ValueError: if `num_nodes` is not an integer >= 1.
    """
    self.num_nodes = validation.check_int('num_nodes', num_nodes, 1)
    self._client = client
    # pylint: disable=protected-access
    if TaskIdentity._run_id is None:
      TaskIdentity.run_id = _RUN_ID
    if TaskIdentity._node_id is None:
      TaskIdentity.node_id = SUPERLINK_NODE_ID
    if TaskIdentity._task_id is None:
      TaskIdentity.task_id = _TASK_ID

  def set_run(self, run: object) -> None:
    """Unused: the grid's run is the in-process one.

    Args:
      run: Ignored.
    """

  @property
  def run(self) -> None:
    """None: no Flower runtime behind this grid."""
    return None

  def create_message(self, *args: object, **kwargs: object) -> Message:
    """Not offered (strategies build their messages themselves).

    Args:
      *args: Ignored.
      **kwargs: Ignored.

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError('LocalGrid does not create messages.')

  def get_node_ids(self) -> list[int]:
    """The node ids.

    Returns:
      [1, ..., num_nodes].
    """
    return list(range(1, self.num_nodes + 1))

  def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
    """Not offered (`send_and_receive` answers at once).

    Args:
      messages: Ignored.

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError('LocalGrid answers in send_and_receive only.')

  def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
    """Not offered (`send_and_receive` answers at once).

    Args:
      message_ids: Ignored.

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError('LocalGrid answers in send_and_receive only.')

  def send_and_receive(self, messages: Iterable[Message], *,
                       timeout: float | None = None) -> list[Message]:
    """Every message's reply, from its node's function.

    Args:
      messages: Messages to nodes of this grid.
      timeout: Ignored (the replies come at once).

    Returns:
      The replies, in the messages' order.
    """
    del timeout
    return [Message(content=self._client(message.metadata.dst_node_id,
                                         message), reply_to=message)
            for message in messages]
