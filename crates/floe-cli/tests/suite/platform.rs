//! Running floe as a platform runs it: a worker ID from a Kubernetes StatefulSet's ordinal
//! (`--registry static:ordinal`), with the local cache's clock guard as for `static:N`.

use std::process::Command;
use std::time::Duration;

use crate::common::{self, faults};
use crate::serving::{self, http};

/// The worker of the Snowflake ID an HTTP answer (`{"id":"..."}`) holds, as `floe inspect`
/// reads it.
pub fn worker_of(body: &str) -> u64 {
    let answer: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    let id = answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {body}"));
    let out = common::ok(common::run(&["inspect", "--json", id]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["worker"]
        .as_u64()
        .unwrap_or_else(|| panic!("no worker in {v}"))
}

/// Three Snowflake IDs from a running server, and their workers.
fn workers_served(server: &serving::Serve) -> Vec<u64> {
    (0..3)
        .map(|_| {
            let (code, body) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
            assert_eq!(code, 200, "{body}");
            worker_of(&body)
        })
        .collect()
}

/// A pod `floe-3` given its name as the identity's host (the Kubernetes manifests pass it as
/// FLOE_HOST from the downward API) issues Snowflake IDs with worker 3; with an offset, 3 +
/// the offset.
#[test]
fn static_ordinal_takes_the_worker_id_from_the_pod_name() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start_with_env(
        "127.0.0.1:0",
        "127.0.0.1:0",
        &["--state-dir", &state, "--registry", "static:ordinal"],
        &[("FLOE_HOST", "floe-3")],
    );
    assert_eq!(workers_served(&server), [3, 3, 3]);
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    // The start-up line names the registry as configured.
    assert!(err.contains("static:ordinal"), "{err}");

    let out = common::ok(common::run(&[
        "gen",
        "snowflake",
        "-o",
        "json",
        "--registry",
        "static:ordinal+100",
        "--host",
        "floe-3",
    ]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["worker"], 103, "{v}");
}

/// With no `--host`, the ordinal is read from the machine's host name, which a StatefulSet
/// sets to the pod's name: here a UTS namespace of its own named `floe-5` (unshare, as root:
/// CI runs as root).
#[test]
fn static_ordinal_reads_the_machines_host_name_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let floe = common::cmd().get_program().to_owned();
    let mut command = Command::new("unshare");
    command
        .args(["--uts", "sh", "-c", "hostname floe-5 && exec \"$0\" \"$@\""])
        .arg(floe)
        .args(["serve", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--state-dir", &state, "--registry", "static:ordinal"])
        .env_remove("FLOE_HOST")
        .current_dir(dir.path());
    let server = serving::Serve::start(command);
    assert_eq!(workers_served(&server), [5, 5, 5]);
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
}

/// A host name without an ordinal, or an ordinal out of the layout's range, is refused at
/// start-up as a configuration error (exit 2) naming the field.
#[test]
fn static_ordinal_refuses_a_host_without_one_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (host, registry, words) in [
        (
            "floe",
            "static:ordinal",
            "registry.host: \"floe\" has no StatefulSet ordinal",
        ),
        (
            "floe-03",
            "static:ordinal",
            "registry.host: \"floe-03\" has no StatefulSet ordinal",
        ),
        (
            "floe-3",
            "static:ordinal+1021",
            "worker_id: 1024 (static:ordinal+1021 of registry.host \"floe-3\") is out of range",
        ),
        ("floe-3", "static:ordinal+4294967295", "overflows"),
        (
            "floe-3",
            "static:ordinal-1",
            "expected static:ID with a number, static:ordinal",
        ),
    ] {
        let out = common::serve_output(dir.path(), &["--registry", registry, "--host", host]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{host} {registry}: {err}");
        assert!(err.contains(words), "{host} {registry}: {err}");
    }
}

/// The time bound holds for an ordinal's worker ID as for `static:N`: a restart of pod
/// `floe-3` with its clock an hour behind the last time it recorded is refused (exit 75),
/// one with the real clock serves again on worker 3.
#[test]
fn static_ordinal_keeps_the_clock_guard() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let args = [
        "--registry",
        "static:ordinal",
        "--host",
        "floe-3",
        "--port",
        "1",
        "--state-dir",
        &state,
    ];
    let serve = |offset| {
        let port = floe_testkit::free_port();
        let server = faults::serve(&args, port, offset);
        (server, port)
    };
    let (server, port) = serve(None);
    faults::wait_listening(&server, port);
    let (code, body) = http(&format!("127.0.0.1:{port}"), "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(worker_of(&body), 3);
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");

    let (behind, _) = serve(Some("-3600s"));
    let (status, err, _) = behind.wait(floe_testkit::process::START_WITHIN);
    assert_eq!(status.code(), Some(75), "{err}");
    assert!(
        err.contains("refusing to start") && err.contains("time bound"),
        "{err}"
    );

    let (again, port) = serve(None);
    faults::wait_listening(&again, port);
    let (code, body) = http(&format!("127.0.0.1:{port}"), "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(worker_of(&body), 3);
    again.term();
    let (status, err, _) = again.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
}
