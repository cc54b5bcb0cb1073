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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run: the sum of every test binary's results.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "\nall tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
