#!/usr/bin/env bash
# Generates floe.v1's Go package (protoc-gen-go, protoc-gen-go-grpc), builds main.go and runs
# it, offline: GOPATH mode on a temporary directory and Debian's Go sources (/usr/share/gocode:
# golang-google-grpc-dev, golang-google-protobuf-dev, golang-github-golang-protobuf-1-5-dev).
# Usage: examples/clients/go/run.sh [ADDRESS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/floe-client"
# The generated package lands at its go_package path under src/.
protoc -I "$here/../../../crates/floe-server/proto" \
    --go_out="$work/src" --go-grpc_out="$work/src" floe/v1/floe.proto
cp "$here/main.go" "$work/src/floe-client/"
(cd "$work/src/floe-client" &&
    GO111MODULE=off GOPATH="$work:${GOCODE:-/usr/share/gocode}" GOFLAGS= \
        "${GO:-go}" build -o "$work/floe-client" .)
"$work/floe-client" "$@"
