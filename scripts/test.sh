#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace.
#
# Later issues add real servers (ZooKeeper, etcd, Redis, PostgreSQL, MariaDB): this script
# installs and starts them on throw-away directories and non-default loopback ports, and
# stops them when it exits. The core issue needs none.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (workspace)"
cargo test --workspace --locked
