#!/usr/bin/env bash
# Python interpreter of every Bazel py_binary/py_test: the project's virtual
# environment, <repository>/.venv (created by `make setup`), so that numpy,
# tensorflow, tensorflow_federated ... resolve from the pinned requirements.txt.
# Bazel runs this script through a runfiles symlink; resolving the symlink finds
# the checkout, wherever it lives.
set -euo pipefail
repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
python="${repo}/.venv/bin/python"
if [[ ! -x "${python}" ]]; then
  echo "venv_python.sh: ${python} is missing; run 'make setup' first." >&2
  exit 1
fi
exec "${python}" "$@"
