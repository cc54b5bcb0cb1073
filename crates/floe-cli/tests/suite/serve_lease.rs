//! The server's worker lease: an idle server heartbeats as alive, and a server whose worker ID
//! was taken from under it (here its record removed by hand; `floe worker release` refuses
//! under a live holder) stops issuing that generator's IDs (fenced: 503): Snowflake, then
//! LexicalUUID, each on its own lease, while the other kinds go on.

use crate::common;
use crate::serving;

use std::time::{Duration, Instant};

use serving::{health, http, wait_health, Serve, NOT_SERVING, SERVING};

#[test]
fn a_lost_lease_fences_the_snowflake_generator() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let registry = format!("file://{state}");
    let server = serving::start(&["--state-dir", &state, "--host", "h1", "--port", "4242"]);
    let record = || common::first_worker_record(&registry, "floe");
    let first = record();
    assert_eq!(
        (first["host"].as_str(), first["port"].as_u64()),
        (Some("h1"), Some(4242)),
        "{first}"
    );
    // No Snowflake ID issued yet: the heartbeats still move the record's time on.
    let started = Instant::now();
    while record()["last_time_ms"].as_u64() <= first["last_time_ms"].as_u64() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "an idle server's heartbeats record no time: {first}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, body) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    // The next heartbeat (every 3 s) finds the ID released and raises the fence.
    release_and_wait_for_the_fence(&server, &registry, "floe", "/v1/ids/snowflake");
    // Not ready (a load balancer sends requests elsewhere), and not healthy either: the ID
    // went to someone else for good, and only a restart leases another (an orchestrator's
    // liveness probe restarts it).
    let (code, body) = http(&server.http, "GET", "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("snowflake default: worker lease"), "{body}");
    let (code, body) = http(&server.http, "GET", "/healthz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("not healthy\n") && body.contains("snowflake default: worker lease"),
        "{body}"
    );
    // Readiness per kind: a deployment that routes kinds apart keeps sno in service.
    let (code, body) = http(&server.http, "GET", "/readyz?kind=snowflake").unwrap();
    assert_eq!(code, 503, "{body}");
    let (code, body) = http(&server.http, "GET", "/readyz?kind=sno").unwrap();
    assert_eq!((code, body.as_str()), (200, "ready\n"));
    // gRPC health per service: sequences (Layotto's Runtime) are still served, IDs are not.
    // (The health service follows readiness a moment later: waited for, as a client would.)
    wait_health(&server, "floe.v1.Floe", NOT_SERVING);
    wait_health(&server, "", NOT_SERVING);
    assert_eq!(health(&server, "spec.proto.runtime.v1.Runtime"), SERVING);
    let (code, _) = http(&server.http, "GET", "/api/snowflake/get/x").unwrap();
    assert_eq!(code, 500, "Leaf's route answers a failure as Leaf does");
    let (code, body) = http(&server.http, "GET", "/v1/ids/sno").unwrap();
    assert_eq!(code, 200, "sno holds a lease of its own: {body}");
    // LexicalUUID's worker ID is leased and fenced the same way (a replacement that took the
    // identity over would otherwise issue the same LexicalUUIDs).
    let (code, _) = http(&server.http, "GET", "/v1/ids/lexical").unwrap();
    assert_eq!(code, 200);
    release_and_wait_for_the_fence(&server, &registry, "floe-lexical", "/v1/ids/lexical");
    server.term();
    let (_, err, _) = server.wait(Duration::from_secs(30));
    assert!(
        err.contains("no longer"),
        "the stop says the ID was lost: {err}"
    );
    assert!(
        err.contains("WARN") && err.contains("worker lease lost"),
        "the loss is logged as a warning when it happens: {err}"
    );
}

/// Takes the identity `h1:4242` of `service` from under the running `server` (`floe worker
/// release` is refused, then the record is removed by hand), then waits (at most 15 s: a
/// heartbeat comes every 3 s) until `path` answers 503 "lease is lost".
fn release_and_wait_for_the_fence(server: &Serve, registry: &str, service: &str, path: &str) {
    let out = common::run(&[
        "worker",
        "release",
        "--registry",
        registry,
        "--service",
        service,
        "--host",
        "h1",
        "--port",
        "4242",
    ]);
    assert_eq!(out.status.code(), Some(75), "refused under a live holder");
    let dir = registry.strip_prefix("file://").unwrap();
    common::remove_record(std::path::Path::new(dir), service, "h1", 4242);
    let started = Instant::now();
    loop {
        let (code, body) = http(&server.http, "GET", path).unwrap();
        if code == 503 {
            assert!(body.contains("lease is lost"), "{path}: {body}");
            return;
        }
        assert_eq!(code, 200, "{path}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{path}: never fenced"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
