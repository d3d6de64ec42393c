"""A Flower App: audited DP-FedAvg on Fashion-MNIST, started with `flwr run`.

This folder is the app (`pyproject.toml` names its `ServerApp` and
`ClientApp`); `flwr run examples/flowerapp <connection>` bundles it into a
Flower App Bundle, whose root Flower puts on `sys.path`, so its modules import
each other as `fashion_audit.task`. The repository's own programs import the
parts they share with it by their full names
(`examples.flowerapp.fashion_audit.task`). docs/flower.md walks through it.
"""
