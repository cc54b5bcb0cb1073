//! Worker IDs from real ZooKeeper and etcd servers (started by scripts/test.sh, addresses in
//! FLOE_TEST_ZOOKEEPER and FLOE_TEST_ETCD), across real `floe` processes. The same tests run
//! against each.

use crate::common;
use std::collections::HashSet;

use common::{cmd as floe, ok};

/// A registry URL of `scheme` on the server in `var`, with a root of its own for each test.
fn url(scheme: &str, var: &str, test: &str) -> String {
    format!(
        "{scheme}://{}/{}",
        floe_testkit::env(var),
        floe_testkit::unique(&format!("floe-cli-{test}"))
    )
}

fn processes_sharing_a_server_issue_no_duplicate_and_a_restart_keeps_its_id(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_string();
    let run = |port: u16, n: &str| {
        floe()
            .args([
                "gen",
                "snowflake",
                "-n",
                n,
                "--registry",
                url,
                "--state-dir",
                &state,
                "--service",
                "orders",
                "--host",
                "h1",
                "--port",
                &port.to_string(),
            ])
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = (0..4u16).map(|i| run(9000 + i, "500000")).collect();
    let mut all = HashSet::new();
    let mut workers = Vec::new();
    for child in children {
        let out = ok(child.wait_with_output().unwrap());
        let mut mine = HashSet::new();
        for line in out.lines() {
            let id: u64 = line.parse().unwrap();
            assert!(all.insert(id), "duplicate ID {id}");
            mine.insert((id >> 12) & 0x3ff);
        }
        assert_eq!(mine.len(), 1);
        workers.extend(mine);
    }
    assert_eq!(all.len(), 2_000_000);
    assert_eq!(workers.iter().collect::<HashSet<_>>().len(), 4);
    // A restart of the first identity gets its ID back, and its IDs follow the last time the
    // registry recorded for it.
    // The earlier run exited cleanly and ended its hold: no wait for its session to lapse.
    let started = std::time::Instant::now();
    let first = ok(run(9000, "1").wait_with_output().unwrap());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let id: u64 = first.trim().parse().unwrap();
    let before_max = all
        .iter()
        .filter(|i| (*i >> 12) & 0x3ff == (id >> 12) & 0x3ff)
        .max()
        .unwrap();
    assert!(id > *before_max);
    let list = common::worker_list(url, "orders");
    for line in list.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            v["last_time_ms"].as_u64().unwrap() > 0,
            "a heartbeat was recorded: {v}"
        );
    }
}

fn server_unreachable_at_start_up_refuses_the_cache_unless_told(scheme: &str, server: &str) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap().to_string();
    let gen_with = |registry: &str, extra: &[&str]| {
        floe()
            .args([
                "gen",
                "snowflake",
                "-o",
                "json",
                "--registry",
                registry,
                "--state-dir",
                &state,
                "--service",
                "orders",
                "--host",
                "h1",
                "--port",
                "8080",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let gen = |registry: &str| gen_with(registry, &["--start-from-cache"]);
    // The registry through a proxy: the same URL, reachable, then not.
    let proxy = floe_testkit::Proxy::start(server);
    let root = floe_testkit::unique("floe-cli-down");
    let url = format!("{scheme}://{}/{root}", proxy.addr);
    let first: serde_json::Value = serde_json::from_str(ok(gen(&url)).trim()).unwrap();
    let proxy_addr = proxy.addr.clone();
    drop(proxy);
    // By default a start from the cache is refused: it would issue with no lease, and a
    // replacement may be given the ID meanwhile. EX_UNAVAILABLE (69), naming the switch.
    let out = gen_with(&url, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("refusing to start from the local cache")
            && err.contains("--start-from-cache"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // With the switch (Leaf's behaviour): the cached ID, and a note saying so.
    let out = gen(&url);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let again: serde_json::Value = serde_json::from_str(ok(out).trim()).unwrap();
    assert_eq!(again["worker"], first["worker"]);
    assert!(err.contains("started from the local cache"), "{err}");
    // The cache is this registry's: another registry (or root) down finds none (a
    // file registry's worker 0 once started "from the local cache" of ZooKeeper).
    for other in [
        format!("{scheme}://127.0.0.1:1/{root}"),
        format!("{scheme}://{proxy_addr}/{root}-other"),
    ] {
        let out = gen(&other);
        // EX_UNAVAILABLE: no registry and no cache for this root.
        assert_eq!(out.status.code(), Some(69), "{other}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refusing to start"), "{other}: {err}");
    }
    // Without a cache: refused, EX_UNAVAILABLE (69).
    let empty = tempfile::tempdir().unwrap();
    let out = floe()
        .args([
            "gen",
            "snowflake",
            "--registry",
            "zk://127.0.0.1:1/floe",
            "--state-dir",
            empty.path().to_str().unwrap(),
            "--service",
            "orders",
            "--port",
            "8080",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to start"));
}

macro_rules! server_tests {
    ($name:ident, $scheme:literal, $var:literal) => {
        mod $name {
            #[test]
            fn ten_processes_registering_at_once_get_ten_ids() {
                super::common::ten_processes_registering_at_once_get_ten_ids(&super::url(
                    $scheme, $var, "ten",
                ));
            }
            #[test]
            fn processes_sharing_a_server_issue_no_duplicate_and_a_restart_keeps_its_id() {
                super::processes_sharing_a_server_issue_no_duplicate_and_a_restart_keeps_its_id(
                    &super::url($scheme, $var, "gen"),
                );
            }
            #[test]
            fn server_unreachable_at_start_up_refuses_the_cache_unless_told() {
                super::server_unreachable_at_start_up_refuses_the_cache_unless_told(
                    $scheme,
                    &floe_testkit::env($var),
                );
            }
        }
    };
}

server_tests!(zookeeper, "zk", "FLOE_TEST_ZOOKEEPER");
#[cfg(feature = "etcd")]
server_tests!(etcd, "etcd", "FLOE_TEST_ETCD");
