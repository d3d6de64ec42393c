"""Federated data as files both engines read, with no framework.

`client_arrays` (clients as numpy arrays: the format both engines load) and
`fashion_mnist` (Fashion-MNIST from local IDX files, or a synthetic stand-in).
"""
