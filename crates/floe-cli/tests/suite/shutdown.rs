//! `floe serve` ends on SIGTERM by its shutdown deadline whatever clients hold open, releases
//! its state directory (the embedded store's lock, the snowflake store's worker lease) so that
//! a restart succeeds at once, and never reissues an ID across the restart, even under load.
//! Also the options that cannot be served.

use crate::serving;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serving::{closed_within, grpc_headers_without_body, next_strong, H2_PREFACE};

#[test]
fn sigterm_ends_serve_by_the_deadline_whatever_clients_hold_and_a_restart_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let args = [
        "--state-dir",
        &state,
        "--store",
        "main=embedded",
        "--store",
        "ids=snowflake",
        // Only the shutdown deadline can end what the clients below hold.
        "--shutdown-timeout-secs",
        "1",
        "--header-timeout-secs",
        "600",
        "--idle-timeout-secs",
        "600",
        "--request-timeout-secs",
        "600",
    ];
    let server = serving::start(&args);
    assert_eq!(next_strong(&server.http, "main", "orders").unwrap(), 1);

    // A half-sent HTTP request.
    let mut half = TcpStream::connect(&server.http).unwrap();
    half.write_all(
        b"POST /v1/sequencer/main/orders?increment=strong HTTP/1.1\r\nHost: localhost\r\n",
    )
    .unwrap();
    // An idle TCP connection to the gRPC port.
    let mut idle = TcpStream::connect(&server.grpc).unwrap();
    // An HTTP/2 connection that never sends a request (the server's SETTINGS came back).
    let mut quiet = TcpStream::connect(&server.grpc).unwrap();
    quiet.write_all(H2_PREFACE).unwrap();
    let mut settings = [0u8; 9];
    quiet.read_exact(&mut settings).unwrap();
    assert_eq!(settings[3], 4, "a SETTINGS frame: {settings:?}");
    // A gRPC request whose body never comes: under way until the deadline.
    let mut stalled = TcpStream::connect(&server.grpc).unwrap();
    stalled.write_all(H2_PREFACE).unwrap();
    stalled
        .write_all(&grpc_headers_without_body(&server.grpc))
        .unwrap();
    // And load: STRONG requests one after the other until the server is gone.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (addr, stop) = (server.http.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match next_strong(&addr, "main", "orders") {
                    Ok(id) => ids.push(id),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            ids
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    server.term();
    let (status, err, took) = server.wait(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        took < Duration::from_secs(4),
        "took {took:?} with a 1 s deadline: {err}"
    );
    assert!(
        took >= Duration::from_millis(900),
        "the stalled request was waited for until the deadline: {took:?}"
    );
    assert!(err.contains("dropping 1 connection"), "{err}");
    for (what, s) in [
        ("half", &mut half),
        ("idle", &mut idle),
        ("quiet", &mut quiet),
        ("stalled", &mut stalled),
    ] {
        assert!(
            closed_within(s, Duration::from_secs(2)),
            "{what} still open"
        );
    }

    // The same state directory serves again at once: the file lock and the lease are free.
    let again = serving::start(&args);
    stop.store(true, Ordering::Relaxed);
    let before = load.join().unwrap();
    assert!(before.len() > 1, "the load was served: {before:?}");
    assert!(before.windows(2).all(|w| w[0] < w[1]), "STRONG increases");
    let next = next_strong(&again.http, "main", "orders").unwrap();
    let last = *before.iter().max().unwrap();
    assert!(
        next > last,
        "after the restart {next}, before it up to {last}: never reissued"
    );
    let (code, body) = serving::http(&again.http, "GET", "/v1/sequencer/ids/any").unwrap();
    assert_eq!(
        code, 200,
        "the snowflake store leased its worker again: {body}"
    );
    again.term();
    let (status, err, _) = again.wait(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {err}");
}

#[test]
fn sigterm_with_nothing_held_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start(&["--state-dir", &state, "--shutdown-timeout-secs", "600"]);
    assert_eq!(next_strong(&server.http, "default", "k").unwrap(), 1);
    server.term();
    let (status, err, took) = server.wait(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {err}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn options_that_cannot_be_served_are_refused() {
    for (args, text) in [
        (
            vec!["--grpc", "off", "--http", "off"],
            "grpc and http are both off",
        ),
        (
            vec!["--request-timeout-secs", "2", "--timeout-ms", "2000"],
            "request_timeout_secs: must be longer than sequencer.timeout_ms",
        ),
        (vec!["--max-connections", "0"], "--max-connections"),
        (vec!["--max-streams", "0"], "--max-streams"),
        (vec!["--header-timeout-secs", "0"], "--header-timeout-secs"),
        (vec!["--idle-timeout-secs", "86401"], "--idle-timeout-secs"),
        (
            vec!["--shutdown-timeout-secs", "86401"],
            "--shutdown-timeout-secs",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("floe"))
            .arg("serve")
            .args(["--state-dir", dir.path().to_str().unwrap()])
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing served");
        if text.starts_with("grpc and") || text.starts_with("request") {
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        }
    }
}

/// SIGTERM the moment the start-up line is out is a graceful stop (exit 0, the tails lock and
/// the lease released), never the default action's death: the handlers are installed before
/// the server starts.
#[test]
fn sigterm_right_after_the_start_up_line_is_a_graceful_stop() {
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().display().to_string();
        let server = serving::start(&["--state-dir", &state]);
        server.term();
        let (status, err, _) = server.wait(std::time::Duration::from_secs(30));
        assert!(status.success(), "{status}: {err}");
        assert!(err.contains("shutting down"), "{err}");
    }
}

/// Waits (at most 20 s) until the server's standard error holds `line`.
fn wait_for_log(server: &serving::Serve, line: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let err = server.stderr();
        if err.contains(line) {
            return err;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {line:?} in: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGHUP reloads the token file (and TLS files) and the server goes on serving; a bad file is
/// refused, the tokens in use stay, and the server goes on. SIGTERM still stops it.
#[test]
fn sighup_reloads_the_token_file_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "first-token\n").unwrap();
    let server = serving::start(&[
        "--state-dir",
        &state,
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    let status = |token: &str| {
        let header = format!("Authorization: Bearer {token}");
        floe_testkit::http::request(
            &server.http,
            &server.http,
            "GET",
            "/v1/ids/ulid",
            &[&header],
        )
        .unwrap()
        .status
    };
    assert_eq!(status("first-token"), 200);
    std::fs::write(&tokens, "# rotated\nsecond-token\n").unwrap();
    server.signal("HUP");
    wait_for_log(&server, "SIGHUP: reloaded 1 token(s)");
    assert_eq!(status("second-token"), 200);
    assert_eq!(status("first-token"), 401);
    std::fs::write(&tokens, "# emptied by mistake\n").unwrap();
    server.signal("HUP");
    let err = wait_for_log(
        &server,
        "SIGHUP: reload failed, the old ones are kept: auth.token_file",
    );
    assert!(!err.contains("second-token"), "{err}");
    assert_eq!(status("second-token"), 200);
    assert!(server.try_wait().is_none(), "{err}");
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("shutting down (SIGTERM)"), "{err}");
}

/// SIGHUP with neither TLS nor tokens: nothing to reload, said, and the server serves on.
#[test]
fn sighup_without_tls_or_tokens_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start(&["--state-dir", &state]);
    server.signal("HUP");
    wait_for_log(&server, "SIGHUP: nothing to reload");
    let (code, _) = serving::http(&server.http, "GET", "/healthz").unwrap();
    assert_eq!(code, 200);
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{status}: {err}");
}

/// With a shutdown delay, SIGTERM turns the server not ready at once while it goes on
/// accepting and serving (a load balancer polling /readyz takes it out first), then it stops.
#[test]
fn a_shutdown_delay_keeps_serving_not_ready_then_stops() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start(&["--state-dir", &state, "--shutdown-delay-secs", "2"]);
    let (code, _) = serving::http(&server.http, "GET", "/readyz").unwrap();
    assert_eq!(code, 200);
    let signalled = std::time::Instant::now();
    server.term();
    let started = std::time::Instant::now();
    loop {
        let (code, body) = serving::http(&server.http, "GET", "/readyz").unwrap();
        if code == 503 {
            assert!(body.contains("stopping"), "{body}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "still ready: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // New connections are still served during the delay.
    let (code, body) = serving::http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200, "{body}");
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(2),
        "the listeners stayed open for the delay"
    );
    assert!(err.contains("shutdown delay"), "{err}");
}

/// SIGTERM while `floe serve` waits for its lease (here: its identity held by another live
/// process on the same registry, which it would wait 10 s for) ends the start at once, with a
/// line saying so: nothing was served.
#[test]
fn sigterm_while_waiting_for_a_lease_ends_the_start_at_once() {
    let (registry, a, b) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let url = format!("file://{}", registry.path().display());
    let args = |state: &tempfile::TempDir| -> Vec<String> {
        let state = state.path().display().to_string();
        ["--registry", &url, "--state-dir", &state, "--port", "7"]
            .map(String::from)
            .to_vec()
    };
    let first = serving::start(&args(&a).iter().map(String::as_str).collect::<Vec<_>>());
    let mut second = std::process::Command::new(assert_cmd::cargo::cargo_bin("floe"))
        .args(["serve", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(args(&b))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        second.try_wait().unwrap().is_none(),
        "still waiting for its lease"
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status();
    let asked = std::time::Instant::now();
    let out = second.wait_with_output().unwrap();
    let took = asked.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(took < Duration::from_secs(3), "{took:?}: {err}");
    assert!(out.status.success(), "{}: {err}", out.status);
    assert!(err.contains("stopped while starting"), "{err}");
    assert!(err.contains("waiting up to"), "the wait was said: {err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "it never served"
    );
    first.term();
    let (status, _, _) = first.wait(Duration::from_secs(20));
    assert!(status.success());
}
