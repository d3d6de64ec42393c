"""Federated data as files both engines read, with no framework.

`client_arrays` (clients as numpy arrays: the format both engines load, and
the synthetic EMNIST and StackOverflow stand-ins both engines train on),
`task_data` (a task's splits from the launcher's data flags), `fashion_mnist`
(Fashion-MNIST from local IDX files, or a synthetic stand-in),
`shakespeare` (the plays by speaking role) and `canary_examples` (data
canaries' examples, pinned by canary seed and id).
"""
