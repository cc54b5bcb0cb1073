#!/usr/bin/env bash
# The whole test suite: formatting, lints, each crate's features, docs, and every test of the
# workspace.
#
# The tests that prove a backend talk to a real server: this script installs it (Debian
# packages), starts it on a throw-away directory and a non-default loopback port, and stops
# it when it exits (scripts/lib/services.sh): ZooKeeper, etcd, Redis, PostgreSQL and MariaDB, each
# once for the ordinary tests and once more for the tests that kill it with SIGKILL and start it
# again; PostgreSQL, MariaDB and Redis once more speaking TLS only; ZooKeeper and etcd once more
# as 3-member clusters in network namespaces (the fault suite kills and partitions their leader). Every feature is built and tested (no protoc needed: every .proto is compiled by protox).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh
source scripts/lib/platform.sh

# One build from clean, not an edit loop: incremental caches would double what the workspace's
# crates take on disk (CI ran out of disk once). A developer's own setting wins.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

step() { printf '\n==> %s\n' "$*"; }
# cargo check, any warning an error: --quiet prints only warnings and errors (RUSTFLAGS=-D
# warnings would check every dependency again).
check_quietly() {
    local out
    out=$(cargo check --locked --quiet "$@" 2>&1) && [[ -z $out ]] && return
    printf '%s\n' "$out"
    return 1
}

step "build tools"
df -h "$PWD" | tail -n 1 | awk '{ print "disk: " $4 " free of " $2 }'
# libfaketime: the crash tests restart floe with its clock behind (crates/floe-cli/tests/suite/crash.rs).
ensure_package faketime /usr/bin/faketime
# promtool, Prometheus's own parser of /metrics and checker of deploy/prometheus's alert rules
# (crates/floe-cli/tests/suite/operate.rs, monitoring.rs), and a headless browser for the status page (crates/floe-cli/tests/suite/status_page.rs).
ensure_package prometheus /usr/bin/promtool
ensure_package chromium /usr/bin/chromium
# Packaging tests (crates/floe-cli/tests/suite/packaging.rs): man pages rendered with man -l, the
# systemd unit checked by systemd-analyze verify.
ensure_package man-db /usr/bin/man
ensure_package systemd /usr/bin/systemd-analyze
# The example clients in Python, Node.js and Go (crates/floe-cli/tests/suite/clients.rs).
source scripts/lib/clients.sh && install_clients
# curl and openssl for the docs' examples (crates/floe-cli/tests/suite/docs_examples.rs).
source scripts/lib/docs.sh && ensure_docs_tools
# schemathesis (PyPI, in a venv under target/) and curl: the HTTP API against its OpenAPI
# description, and curl at the gRPC port (crates/floe-cli/tests/suite/openapi.rs).
source scripts/lib/openapi.sh && install_openapi_tools
# deploy/kubernetes (crates/floe-cli/tests/suite/kubernetes.rs) and the image (image.rs).
install_platform_tools

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

step "cargo check: each crate alone, its features off and on"
# Not the workspace's union of features: cfg(not(feature)) code compiles here for real.
check_quietly -p floe-core --no-default-features # its tests use the default formats
check_quietly -p floe-core --all-features --all-targets
for crate in floe-registry floe-sequencer; do
    check_quietly -p "$crate" --no-default-features --all-targets
    check_quietly -p "$crate" --all-features --all-targets
done
check_quietly -p floe-registry --no-default-features --features zookeeper --all-targets
check_quietly -p floe-registry --no-default-features --features etcd --all-targets
check_quietly -p floe-cli --no-default-features --all-targets # its one feature is on by default
check_quietly -p floe-server --all-targets # floe-sequencer with no store of its own

step "cargo doc (warnings are errors)"
# A broken or ambiguous intra-doc link, or one to a private item, fails here.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked

step "real servers"
log=$(mktemp)
trap 'stop_services; rm -f "$log"' EXIT
start_zookeeper FLOE_TEST_ZOOKEEPER
# A second one, for the tests that stop it with SIGKILL and start it again.
start_zookeeper FLOE_TEST_ZOOKEEPER_KILLABLE
# A third that refuses clients without digest credentials (floe's ZooKeeper ACL tests).
start_zookeeper_secure FLOE_TEST_ZOOKEEPER_SECURE
# And one whose clients speak TLS with a certificate (zks://: floe's feature zookeeper-tls).
start_zookeeper_tls FLOE_TEST_ZOOKEEPER_TLS
start_etcd FLOE_TEST_ETCD
start_etcd FLOE_TEST_ETCD_KILLABLE
# The sequencer's stores, and their killable twins (tests/outage.rs of floe-sequencer).
start_redis FLOE_TEST_REDIS
start_redis FLOE_TEST_REDIS_KILLABLE
start_postgres FLOE_TEST_POSTGRES
start_postgres FLOE_TEST_POSTGRES_KILLABLE
start_mariadb FLOE_TEST_MARIADB
start_mariadb FLOE_TEST_MARIADB_KILLABLE
start_zookeeper FLOE_TEST_ZOOKEEPER_STORE_KILLABLE
start_etcd FLOE_TEST_ETCD_STORE_KILLABLE
# The fault matrix's own servers (crates/floe-cli/tests/faults.rs kills each and restarts it).
start_redis FLOE_TEST_REDIS_FAULTS
start_postgres FLOE_TEST_POSTGRES_FAULTS
start_mariadb FLOE_TEST_MARIADB_FAULTS
start_etcd FLOE_TEST_ETCD_FAULTS
start_zookeeper FLOE_TEST_ZOOKEEPER_FAULTS
# The registries as 3-member clusters, each member in a network namespace of its own, so that
# crates/floe-cli/tests/faults.rs can kill and partition their leader under load.
start_zookeeper_ensemble FLOE_TEST_ZK_ENSEMBLE
start_etcd_cluster FLOE_TEST_ETCD_CLUSTER
# TLS-only twins of the SQL and Redis stores, each with a throw-away CA (floe-sequencer's
# tests/tls.rs).
start_postgres_tls FLOE_TEST_POSTGRES_TLS
start_mariadb_tls FLOE_TEST_MARIADB_TLS
start_redis_tls FLOE_TEST_REDIS_TLS
# etcd on https only, asking for client certificates, with RBAC (a user floe on /floe): the
# registry and store over etcds:// (floe-etcd's tests/secure.rs, floe-cli's etcd_secure.rs).
start_etcd_secure FLOE_TEST_ETCD_SECURE

step "cargo test (workspace)"
set +e
cargo test --workspace --all-features --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

# After the tests, so that it reuses what they built (the dependencies whose features agree).
step "cargo install (the README's install, into a throw-away root)"
if ! check_install; then
    echo "check_install failed"
    status=1
fi
# One closing line for the whole run: the sum of every test binary's results.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "\nall tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
