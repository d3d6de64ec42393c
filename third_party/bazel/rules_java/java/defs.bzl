"""Offline @rules_java for Bazel 4: forwards to the native rules (../../README.md)."""

def java_binary(**attrs):
    """Bazel's native java_binary."""
    native.java_binary(**attrs)


def java_import(**attrs):
    """Bazel's native java_import."""
    native.java_import(**attrs)


def java_library(**attrs):
    """Bazel's native java_library."""
    native.java_library(**attrs)


def java_plugin(**attrs):
    """Bazel's native java_plugin."""
    native.java_plugin(**attrs)


def java_runtime(**attrs):
    """Bazel's native java_runtime."""
    native.java_runtime(**attrs)


def java_test(**attrs):
    """Bazel's native java_test."""
    native.java_test(**attrs)


def java_toolchain(**attrs):
    """Bazel's native java_toolchain."""
    native.java_toolchain(**attrs)
