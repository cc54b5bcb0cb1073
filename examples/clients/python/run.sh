#!/usr/bin/env bash
# Generates floe.v1's Python code into a temporary directory and runs client.py with it.
# Usage: examples/clients/python/run.sh [ADDRESS]   (PYTHON: a python with requirements.txt)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$python" -m grpc_tools.protoc -I "$here/../../../crates/floe-server/proto" \
    --python_out="$gen" --grpc_python_out="$gen" floe/v1/floe.proto
PYTHONPATH="$gen" "$python" "$here/client.py" "$@"
