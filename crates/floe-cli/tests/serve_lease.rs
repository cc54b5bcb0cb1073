//! The server's worker lease: an idle server heartbeats as alive, and a server whose worker ID
//! was released under it (here by `floe worker release`, as an operator or a takeover would)
//! stops issuing Snowflake IDs (fenced: 503) while its other kinds go on.

mod common;
mod serving;

use std::time::{Duration, Instant};

use serving::{http, Serve};

#[test]
fn a_lost_lease_fences_the_snowflake_generator() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let registry = format!("file://{state}");
    let server = Serve::start(&["--state-dir", &state, "--host", "h1", "--port", "4242"]);
    let record = || -> serde_json::Value {
        let list = common::ok(common::run(&[
            "worker",
            "list",
            "--registry",
            &registry,
            "--service",
            "floe",
            "--json",
        ]));
        serde_json::from_str(list.lines().next().unwrap()).unwrap()
    };
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
    common::ok(common::run(&[
        "worker",
        "release",
        "--registry",
        &registry,
        "--service",
        "floe",
        "--host",
        "h1",
        "--port",
        "4242",
    ]));
    // The next heartbeat (every 3 s) finds the ID released and raises the fence.
    let started = Instant::now();
    loop {
        let (code, body) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
        if code == 503 {
            assert!(body.contains("lease is lost"), "{body}");
            break;
        }
        assert_eq!(code, 200, "{body}");
        assert!(started.elapsed() < Duration::from_secs(15), "never fenced");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _) = http(&server.http, "GET", "/api/snowflake/get/x").unwrap();
    assert_eq!(code, 500, "Leaf's route answers a failure as Leaf does");
    let (code, body) = http(&server.http, "GET", "/v1/ids/sno").unwrap();
    assert_eq!(code, 200, "sno holds a lease of its own: {body}");
    // LexicalUUID's worker ID is leased and fenced the same way (a replacement that took the
    // identity over would otherwise issue the same LexicalUUIDs).
    let (code, _) = http(&server.http, "GET", "/v1/ids/lexical").unwrap();
    assert_eq!(code, 200);
    common::ok(common::run(&[
        "worker",
        "release",
        "--registry",
        &registry,
        "--service",
        "floe-lexical",
        "--host",
        "h1",
        "--port",
        "4242",
    ]));
    let started = Instant::now();
    loop {
        let (code, body) = http(&server.http, "GET", "/v1/ids/lexical").unwrap();
        if code == 503 {
            assert!(body.contains("lease is lost"), "{body}");
            break;
        }
        assert_eq!(code, 200, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "lexical never fenced"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.term();
    let (_, err, _) = server.wait(Duration::from_secs(30));
    assert!(
        err.contains("no longer"),
        "the stop says the ID was lost: {err}"
    );
}
