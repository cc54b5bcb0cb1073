#!/usr/bin/env bash
# Every benchmark, with the real servers the sequencer benches need (Redis with AOF fsync
# always, PostgreSQL, MariaDB, etcd and ZooKeeper with their durable defaults), then the table
# of medians. Arguments go to Criterion (e.g. `scripts/bench.sh strong_redis`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh
trap stop_services EXIT
start_redis FLOE_TEST_REDIS
start_postgres FLOE_TEST_POSTGRES
start_mariadb FLOE_TEST_MARIADB
start_etcd FLOE_TEST_ETCD
start_zookeeper FLOE_TEST_ZOOKEEPER
cargo bench -p floe-bench -- "$@"
python3 scripts/bench-table.py
