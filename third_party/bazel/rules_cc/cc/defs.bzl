"""Offline @rules_cc for Bazel 4: forwards to the native rules (../../README.md)."""

def cc_binary(**attrs):
    """Bazel's native cc_binary."""
    native.cc_binary(**attrs)


def cc_import(**attrs):
    """Bazel's native cc_import."""
    native.cc_import(**attrs)


def cc_library(**attrs):
    """Bazel's native cc_library."""
    native.cc_library(**attrs)


def cc_proto_library(**attrs):
    """Bazel's native cc_proto_library."""
    native.cc_proto_library(**attrs)


def cc_test(**attrs):
    """Bazel's native cc_test."""
    native.cc_test(**attrs)


def cc_toolchain(**attrs):
    """Bazel's native cc_toolchain."""
    native.cc_toolchain(**attrs)


def cc_toolchain_suite(**attrs):
    """Bazel's native cc_toolchain_suite."""
    native.cc_toolchain_suite(**attrs)


def objc_import(**attrs):
    """Bazel's native objc_import."""
    native.objc_import(**attrs)


def objc_library(**attrs):
    """Bazel's native objc_library."""
    native.objc_library(**attrs)
