//! Worker IDs across real `floe` processes sharing one file registry.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Output, Stdio};

use crate::common;

use common::{ok, run as floe};

fn url(dir: &Path) -> String {
    format!("file://{}", dir.join("registry").display())
}

fn register(dir: &Path, port: u16) -> Output {
    floe(&[
        "worker",
        "register",
        "--registry",
        &url(dir),
        "--service",
        "orders",
        "--host",
        "h1",
        "--port",
        &port.to_string(),
    ])
}

#[test]
fn distinct_identities_get_distinct_ids_and_a_restart_keeps_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let a = ok(register(dir.path(), 1));
    let b = ok(register(dir.path(), 2));
    assert_ne!(a, b);
    // The first process has exited: registering again is a restart, same ID.
    assert_eq!(ok(register(dir.path(), 1)), a);
}

#[test]
fn ten_processes_registering_at_once_get_ten_ids() {
    let dir = tempfile::tempdir().unwrap();
    common::ten_processes_registering_at_once_get_ten_ids(&url(dir.path()));
}

#[test]
fn processes_sharing_a_registry_issue_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let registry = url(dir.path());
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let children: Vec<_> = (0..4u16)
        .map(|i| {
            common::cmd()
                .args([
                    "gen",
                    "snowflake",
                    "-n",
                    "500000",
                    "--registry",
                    &registry,
                    "--state-dir",
                    state,
                    "--service",
                    "orders",
                    "--host",
                    "h1",
                    "--port",
                    &(9000 + i).to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut all = HashSet::new();
    let mut workers = HashSet::new();
    for child in children {
        let out = ok(child.wait_with_output().unwrap());
        let mut per_process_workers = HashSet::new();
        for line in out.lines() {
            let id: u64 = line.parse().unwrap();
            assert!(all.insert(id), "duplicate ID {id}");
            per_process_workers.insert((id >> 12) & 0x3ff);
        }
        assert_eq!(per_process_workers.len(), 1, "one worker ID per process");
        workers.extend(per_process_workers);
    }
    assert_eq!(all.len(), 2_000_000);
    assert_eq!(workers.len(), 4);
}

fn gen_with(dir: &Path, state: &str, extra: &[&str]) -> Output {
    let registry = url(dir);
    let state = dir.join(state);
    let mut args = vec![
        "gen",
        "snowflake",
        "-o",
        "json",
        "--registry",
        &registry,
        "--state-dir",
        state.to_str().unwrap(),
        "--service",
        "orders",
        "--host",
        "h1",
        "--port",
        "8080",
    ];
    args.extend_from_slice(extra);
    floe(&args)
}

fn worker_of(out: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    v["worker"].as_u64().unwrap()
}

#[test]
fn registry_down_uses_the_cache_then_refuses_without_one_unless_fallback() {
    let dir = tempfile::tempdir().unwrap();
    ok(register(dir.path(), 1)); // someone else holds ID 0
    let first = worker_of(&ok(gen_with(dir.path(), "state", &[])));
    assert_eq!(first, 1);
    // Break the registry: its lock file cannot be opened (a directory in its place).
    let lock = dir.path().join("registry").join("registry.lock");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let out = gen_with(dir.path(), "state", &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(worker_of(&ok(out)), first);
    assert!(err.contains("started from the local cache"), "{err}");
    // No cache either: refuse, exit 69 (EX_UNAVAILABLE), one line.
    let out = gen_with(dir.path(), "empty-state", &[]);
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to start"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // The operator's explicit fallback: port % 1024.
    let out = ok(gen_with(dir.path(), "empty-state", &["--port-fallback"]));
    assert_eq!(worker_of(&out), 8080 % 1024);
}

#[test]
fn a_clock_behind_the_cached_last_time_refuses_naming_both_times() {
    let dir = tempfile::tempdir().unwrap();
    ok(gen_with(dir.path(), "state", &[]));
    // The cache says this identity was alive an hour from now.
    let cache = cache_file(&dir.path().join("state"));
    let mut entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    let future = entry["last_time_ms"].as_u64().unwrap() + 3_600_000;
    entry["last_time_ms"] = future.into();
    std::fs::write(&cache, entry.to_string()).unwrap();
    let out = gen_with(dir.path(), "state", &[]);
    // EX_TEMPFAIL: the clock catches up.
    assert_eq!(out.status.code(), Some(75));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("behind the last recorded time"), "{err}");
    assert!(err.contains(&format!("local cache {future} ms")), "{err}");
    assert!(err.contains("registry"), "{err}");
}

#[test]
fn a_full_id_space_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    for port in 0..4 {
        ok(floe(&[
            "worker",
            "register",
            "--layout",
            "41/2/12",
            "--registry",
            &url(dir.path()),
            "--service",
            "orders",
            "--host",
            "h1",
            "--port",
            &port.to_string(),
        ]));
    }
    let out = gen_with(dir.path(), "state", &["--layout", "41/2/12"]);
    // Not temporary unless a holder leaves: 1.
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("all 4 IDs"), "{err}");
    let list = common::worker_list(&url(dir.path()), "orders");
    let ids: HashMap<u64, u64> = list
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| (v["id"].as_u64().unwrap(), v["port"].as_u64().unwrap()))
        .collect();
    assert_eq!(ids.len(), 4);
}

#[test]
fn bad_registry_configuration_names_the_field() {
    for (url, expect) in [
        ("bogus://x", "registry: unknown scheme"),
        ("static:abc", "registry: expected static:ID"),
        ("nourl", "registry: expected a URL"),
        // An option floe does not read (misspelled, or the other registry's) never becomes
        // part of the root: that node would have had a worker-ID namespace of its own.
        ("zk://127.0.0.1:1/fleet?ttl=3", "unknown option \"ttl=3\""),
        (
            "etcd://127.0.0.1:1/fleet?session_timeout=5",
            "unknown option",
        ),
        ("zk://127.0.0.1:1/fleet?sesion_timeout=5", "unknown option"),
        ("zk://127.0.0.1:1?x=1", "unknown option"),
        (
            "zk://127.0.0.1:1/f?session_timeout=5&session_timeout=9",
            "session_timeout is given twice",
        ),
        (
            "zk://127.0.0.1:1/f?session_timeout=1",
            "session_timeout must be 2 to 3600",
        ),
        (
            "zk://127.0.0.1:1/f?session_timeout=x",
            "session_timeout must be whole seconds",
        ),
    ] {
        let out = floe(&["gen", "snowflake", "--registry", url]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{url}: {err}");
    }
    for url in [
        "zk://localhost/floe",
        "zk://:2181/floe",
        "zk://h:99999",
        "zk://h:2181,h2/floe",
    ] {
        let out = floe(&["gen", "snowflake", "--registry", url]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("registry: bad ZooKeeper address"),
            "{url}: {err}"
        );
    }
    let out = floe(&["gen", "snowflake", "--registry", "static:1024"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("worker_id: 1024 is out of range"), "{err}");
}

#[test]
fn a_static_id_is_still_guarded_by_the_local_cache() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let gen = || {
        floe(&[
            "gen",
            "snowflake",
            "-o",
            "json",
            "--registry",
            "static:5",
            "--state-dir",
            state,
            "--service",
            "orders",
            "--host",
            "h1",
            "--port",
            "8080",
        ])
    };
    let first: serde_json::Value = serde_json::from_str(ok(gen()).trim()).unwrap();
    assert_eq!(first["worker"], 5);
    let cache = cache_file(dir.path());
    let mut entry: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    assert_eq!(entry["id"], 5);
    assert_eq!(entry["last_time_ms"], first["timestamp_ms"]);
    // The cache says the ID was in use an hour from now: this clock is behind it.
    entry["last_time_ms"] = (entry["last_time_ms"].as_u64().unwrap() + 3_600_000).into();
    std::fs::write(&cache, entry.to_string()).unwrap();
    let out = gen();
    // EX_TEMPFAIL: the clock catches up.
    assert_eq!(out.status.code(), Some(75));
    assert!(String::from_utf8_lossy(&out.stderr).contains("behind the last recorded time"));
}

#[test]
fn sno_partitions_come_from_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let registry = url(dir.path());
    let state = dir.path().join("state");
    let partitions: HashSet<u64> = (0..3u16)
        .map(|port| {
            let out = ok(floe(&[
                "gen",
                "sno",
                "-o",
                "json",
                "--registry",
                &registry,
                "--state-dir",
                state.to_str().unwrap(),
                "--service",
                "events",
                "--host",
                "h1",
                "--port",
                &port.to_string(),
            ]));
            let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            v["partition"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(partitions, HashSet::from([0, 1, 2]));
}

#[test]
fn a_long_run_heartbeats_while_it_generates() {
    let dir = tempfile::tempdir().unwrap();
    let registry = url(dir.path());
    let state = dir.path().join("state");
    // About 7 s at the cap of 4,096,000 IDs/s, so several 3 s beats happen during the run.
    let mut child = common::cmd()
        .args([
            "gen",
            "snowflake",
            "-n",
            "30000000",
            "--registry",
            &registry,
            "--state-dir",
            state.to_str().unwrap(),
            "--service",
            "orders",
            "--host",
            "h1",
            "--port",
            "8080",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = HashSet::new();
    while seen.len() < 2 && child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let list = common::worker_list(&registry, "orders");
        if let Some(line) = list.lines().next() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let last = v["last_time_ms"].as_u64().unwrap();
            if last > 0 {
                seen.insert(last);
            }
        }
    }
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        still_running,
        "the run ended before two heartbeats were seen: {seen:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// The one cache file of identity orders/h1:8080 in a state directory (its name ends with a
/// hash of the registry that granted the ID).
fn cache_file(state: &std::path::Path) -> std::path::PathBuf {
    let mut found: Vec<_> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("cache-orders-h1-8080-") && name.ends_with(".json")
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

/// Two layouts on one service issue the same IDs (worker 4 of 41/10/12 and worker 1 of
/// 41/8/14 share their bits): the layout is written in the service's records, and a `floe gen`
/// or `floe serve` of another layout stops with exit 2 naming both, before any ID.
#[test]
fn another_layout_on_the_service_stops_with_exit_2_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    ok(register(dir.path(), 1));
    let out = gen_with(dir.path(), "state", &["--layout", "41/8/14"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("layout:")
            && err.contains("snowflake 41/10/12 epoch=1672531200000ms")
            && err.contains("snowflake 41/8/14 epoch=0ms")
            && err.contains("orders/h1:1"),
        "{err}"
    );
    let state = dir.path().join("serve");
    let out = common::serve_output(
        &state,
        &[
            "--registry",
            &url(dir.path()),
            "--service",
            "orders",
            "--layout",
            "twitter",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("41/5/5/12 epoch=1288834974657ms"), "{err}");
    // The same layout is served.
    ok(gen_with(dir.path(), "state", &[]));
}
