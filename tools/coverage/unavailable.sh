#!/bin/sh
# Stands in for Bazel's coverage report generator (see BUILD): offline there is
# none, so `bazel coverage` fails with this message.
echo 'bazel coverage is not supported offline (no @remote_coverage_tools).' >&2
exit 1
