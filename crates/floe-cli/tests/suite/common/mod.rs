//! Helpers shared by the tests that run the real `floe` binary.
#![allow(dead_code)] // each test binary uses a part of them

pub mod below;
pub mod faults;
pub mod floors;

use std::process::{Command, Output, Stdio};

/// The `floe` binary, with no standard input and its output captured, run in a working
/// directory of its own (floe keeps its state in `.floe` there by default: each command gets
/// a fresh one unless it names `--state-dir`).
pub fn cmd() -> Command {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cwd = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cwd-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    // FLOE_BIN: another build of floe (scripts/faults.sh runs the release binary).
    let mut c = Command::new(floe_testkit::process::floe_bin(
        assert_cmd::cargo::cargo_bin("floe"),
    ));
    c.current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `floe args...` to the end.
pub fn run(args: &[&str]) -> Output {
    cmd().args(args).output().unwrap()
}

/// `floe serve` on ports of its own (`127.0.0.1:0`) in `state`, with `args`, not started yet
/// (to add an environment, or to spawn it).
pub fn serve_command(state: &std::path::Path, args: &[&str]) -> Command {
    let mut c = cmd();
    c.args([
        "serve",
        "--grpc",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--state-dir",
    ])
    .arg(state)
    .args(args);
    c
}

/// [`serve_command`] run until it exits (for the ways it refuses to start).
pub fn serve_output(state: &std::path::Path, args: &[&str]) -> Output {
    serve_command(state, args).output().unwrap()
}

/// The standard output of a run that must have succeeded.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The first record `floe worker list --json` gives for `service` in `registry`.
pub fn first_worker_record(registry: &str, service: &str) -> serde_json::Value {
    let list = ok(run(&[
        "worker",
        "list",
        "--registry",
        registry,
        "--service",
        service,
        "--json",
    ]));
    serde_json::from_str(list.lines().next().unwrap()).unwrap()
}

/// Nanoseconds since the Unix epoch, to name things no other run uses.
#[allow(clippy::disallowed_methods)] // a name, not a time
pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `floe worker list --json` of `service` in the registry at `url`: one JSON object a line.
pub fn worker_list(url: &str, service: &str) -> String {
    ok(run(&[
        "worker",
        "list",
        "--json",
        "--registry",
        url,
        "--service",
        service,
    ]))
}

/// Ten `floe worker register` processes at once on one registry get ten IDs, and the registry
/// lists ten (run against every registry: file, ZooKeeper, etcd).
pub fn ten_processes_registering_at_once_get_ten_ids(url: &str) {
    let children: Vec<_> = (0..10u16)
        .map(|port| {
            cmd()
                .args([
                    "worker",
                    "register",
                    "--registry",
                    url,
                    "--service",
                    "orders",
                    "--host",
                    "h1",
                    "--port",
                    &port.to_string(),
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    let ids: std::collections::HashSet<String> = children
        .into_iter()
        .map(|c| ok(c.wait_with_output().unwrap()))
        .collect();
    assert_eq!(ids.len(), 10, "{ids:?}");
    assert_eq!(worker_list(url, "orders").lines().count(), 10);
}

/// Removes `service`'s record of `host:port` from the file registry in `dir` by hand, as an
/// operator's edit would (`floe worker release` refuses while a live process holds the ID):
/// the holder's next heartbeat finds its ID gone.
pub fn remove_record(dir: &std::path::Path, service: &str, host: &str, port: u16) {
    let path = dir.join("registry.json");
    let mut table: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let records = table["services"][service].as_object_mut().unwrap();
    let before = records.len();
    records.retain(|_, r| !(r["identity"]["host"] == host && r["identity"]["port"] == port));
    assert_eq!(
        records.len() + 1,
        before,
        "{service}/{host}:{port} had no record"
    );
    std::fs::write(&path, serde_json::to_vec(&table).unwrap()).unwrap();
}

/// Meituan Leaf's `leaf_alloc` table, as Leaf's README creates it, named `table` in the
/// MariaDB at `mysql` (FLOE_TEST_MARIADB), with one row: `tag` at `max_id` 1 and `step`.
pub fn leaf_table(mysql: &str, table: &str, tag: &str, step: i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .connect(mysql)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) ENGINE=InnoDB"
        )))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (biz_tag, max_id, step) VALUES ('{tag}', 1, {step})"
        )))
        .execute(&pool)
        .await
        .unwrap();
    });
}
