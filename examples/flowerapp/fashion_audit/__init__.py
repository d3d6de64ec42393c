"""The app's code: the task, the ServerApp, the ClientApp, the console.

Modules:
  task: Fashion-MNIST's clients, softmax regression, the DP strategy
  console: Flower's essential lines once, the reports' table
  server_app: the ServerApp, an audited DP-FedAvg run
  client_app: the ClientApp, a client's local training
"""
