"""The ClientApp: a Fashion-MNIST client's local training.

Each Flower node is one client: its node config's 'partition-id' picks its
label shard among 'num-partitions' (the simulation sets both; a SuperNode is
given them with --node-config), and it replies to a training message with
its locally trained model and an equal weight (`task.train_reply`).
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fashion_audit import task

app = ClientApp()


@app.train()
def train(message: Message, context: Context) -> Message:
  """Trains on this node's shard from the message's model.

  Args:
    message: The server's training message (the global model, the round).
    context: The node's context (its partition, the run config).

  Returns:
    The reply: the trained model, num-examples = 1 and the training loss.
  """
  setting = task.setting_from_config(
      context.run_config, int(context.node_config['num-partitions']))
  return Message(content=task.train_reply(
      task.load_task(setting), setting,
      int(context.node_config['partition-id']),
      int(message.content['config']['server-round']), message),
                 reply_to=message)
