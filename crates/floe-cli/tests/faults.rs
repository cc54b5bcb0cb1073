//! The fault matrix (issue 8): real `floe` processes and real servers, every durable store
//! killed in a loop, each store's server killed and restarted under load, clock steps after a
//! crash. In the test suite it runs short; `scripts/faults.sh` runs it long (FLOE_FAULTS=full)
//! with the release binary and prints the table that docs/reliability.md shows.
//! FLOE_FAULTS_TABLE names a file to append the rows to.

mod common;

use common::faults::{self, Row};
use floe_testkit::env;

fn print(rows: &[Row]) {
    let mut text = String::new();
    for row in rows {
        text.push_str(&row.markdown());
        text.push('\n');
    }
    println!("{}\n{text}", faults::HEADER);
    if let Ok(path) = std::env::var("FLOE_FAULTS_TABLE") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }
}

/// Every durable store: `floe seq` killed with SIGKILL at random moments, WEAK and STRONG.
#[test]
fn kill9_loops_on_every_durable_store() {
    let kills = if faults::full() { 20 } else { 1 };
    let stores = [
        "embedded".to_string(),
        env("FLOE_TEST_REDIS"),
        env("FLOE_TEST_POSTGRES"),
        env("FLOE_TEST_MARIADB"),
        format!("etcd://{}", env("FLOE_TEST_ETCD")),
        format!("zk://{}", env("FLOE_TEST_ZOOKEEPER")),
    ];
    let mut rows = Vec::new();
    for store in &stores {
        for increment in ["weak", "strong"] {
            rows.push(faults::seq_kill_loop(store, increment, kills));
        }
    }
    print(&rows);
    for row in &rows {
        row.assert_clean(true);
    }
}

/// Each server store's server killed with SIGKILL and started again while `floe serve` is
/// under load (the servers scripts/test.sh starts for this test alone).
#[test]
fn each_store_server_killed_and_restarted_under_load() {
    let down_ms = if faults::full() { 3000 } else { 1000 };
    let servers = [
        (
            "Redis",
            "FLOE_TEST_REDIS_FAULTS",
            env("FLOE_TEST_REDIS_FAULTS"),
        ),
        (
            "PostgreSQL",
            "FLOE_TEST_POSTGRES_FAULTS",
            env("FLOE_TEST_POSTGRES_FAULTS"),
        ),
        (
            "MariaDB",
            "FLOE_TEST_MARIADB_FAULTS",
            env("FLOE_TEST_MARIADB_FAULTS"),
        ),
        (
            "etcd",
            "FLOE_TEST_ETCD_FAULTS",
            format!("etcd://{}", env("FLOE_TEST_ETCD_FAULTS")),
        ),
        (
            "ZooKeeper",
            "FLOE_TEST_ZOOKEEPER_FAULTS",
            format!("zk://{}", env("FLOE_TEST_ZOOKEEPER_FAULTS")),
        ),
    ];
    let rows: Vec<Row> = servers
        .iter()
        .map(|(name, var, url)| faults::store_server_killed(name, var, url, down_ms))
        .collect();
    print(&rows);
    for row in &rows {
        row.assert_clean(true);
        assert!(!row.outcome.contains("FAILED"), "{}", row.markdown());
    }
}

/// Clock steps after a crash, for every time-based generator (the suite's short version of
/// these is tests/crash.rs: here they run only in the long matrix).
#[test]
fn clock_steps_after_kill9() {
    if !faults::full() {
        return;
    }
    let registry = [
        "--registry",
        "file://{dir}/registry",
        "--service",
        "s",
        "--port",
        "7",
    ];
    let rows = vec![
        faults::gen_clock_steps("snowflake", &registry, 3),
        faults::gen_clock_steps("snowflake", &["--registry", "static:5"], 3),
        faults::gen_clock_steps("snowflake", &["--worker", "9"], 3),
        faults::gen_clock_steps("sno", &registry, 3),
        faults::gen_clock_steps("sno", &["--partition", "0x0a0b"], 3),
        faults::gen_clock_steps("lexical", &["--worker-id", "77"], 3),
        faults::serve_snowflake_clock_steps(3),
    ];
    print(&rows);
    for row in &rows {
        row.assert_clean(false);
    }
}

/// The embedded store on a full disk, then space back; SIGTERM with idle connections.
#[test]
fn disk_full_and_sigterm_with_idle_connections() {
    let rows = vec![
        faults::disk_full_embedded(),
        faults::sigterm_with_idle_connections(),
    ];
    print(&rows);
    for row in &rows {
        row.assert_clean(false);
        assert!(!row.outcome.contains("FAILED"), "{}", row.markdown());
    }
}
