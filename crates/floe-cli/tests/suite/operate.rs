//! Operating `floe serve`: Prometheus metrics (read back with Prometheus's own parser,
//! `promtool`, and counted here), readiness that follows the stores, gRPC health per service,
//! logs as JSON with one start-up line and per-request lines at debug level.

use crate::common;
use crate::serving;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serving::{http, Serve, NOT_SERVING, SERVING};

/// One sample: metric name, its labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: HashMap<String, String>,
    value: f64,
}

/// `promtool check metrics` on `text`: Prometheus's own parser and linter (it fails on
/// anything Prometheus could not scrape).
pub(crate) fn promtool_check_metrics(text: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian: prometheus) is installed by scripts/test.sh");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks `text` with [`promtool_check_metrics`], then reads its samples.
fn parse(text: &str) -> Vec<Sample> {
    promtool_check_metrics(text);
    let samples: Vec<Sample> =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("the exposition parses")
            .samples
            .into_iter()
            .map(|s| Sample {
                name: s.metric,
                labels: s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                value: match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
                    prometheus_parse::Value::Summary(_) => f64::NAN,
                },
            })
            .collect();
    samples
}

fn metrics(server: &Serve) -> (String, Vec<Sample>) {
    let (code, text) = http(&server.http, "GET", "/metrics").unwrap();
    assert_eq!(code, 200, "{text}");
    let samples = parse(&text);
    (text, samples)
}

/// The value of the sample `name` whose labels include `labels` (0 when there is none).
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .find(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map_or(0.0, |s| s.value)
}

#[test]
fn metrics_count_what_is_issued_and_prometheus_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start(&["--state-dir", &state, "--store", "main=embedded"]);
    let (_, before) = metrics(&server);
    // The layout's horizon: Leaf's 41-bit ms field from 2023 lasts until about 2092.
    let horizon = value(
        &before,
        "floe_layout_horizon_seconds",
        &[("kind", "snowflake"), ("generator", "default")],
    );
    let years = horizon / (365.25 * 86_400.0);
    assert!((60.0..70.0).contains(&years), "{years} years");
    let sno_years = value(
        &before,
        "floe_layout_horizon_seconds",
        &[("kind", "sno"), ("generator", "default")],
    ) / (365.25 * 86_400.0);
    assert!(
        (50.0..54.0).contains(&sno_years),
        "sno ends in 2079: {sno_years}"
    );
    assert_eq!(
        value(
            &before,
            "floe_lease_held",
            &[("kind", "snowflake"), ("generator", "default")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &before,
            "floe_fence_raised",
            &[("kind", "sno"), ("generator", "default")]
        ),
        0.0
    );
    assert_eq!(
        value(&before, "floe_store_ready", &[("store", "main")]),
        1.0
    );
    assert_eq!(value(&before, "floe_build_info", &[]), 1.0);

    for (path, code) in [
        ("/v1/ids/snowflake?count=5", 200),
        ("/v1/ids/sno?count=3", 200),
        ("/v1/ids/ulid", 200),
        ("/v1/sequencer/main/secret-key-1?count=2", 200),
        (
            "/v1/sequencer/main/secret-key-1?increment=strong&count=4",
            200,
        ),
        ("/api/segment/get/secret-key-2", 200),
        ("/no/such/route-xyz", 404),
        ("/v1/sequencer/nostore-xyz/k", 404),
    ] {
        let (got, body) = http(&server.http, "GET", path).unwrap();
        assert_eq!(got, code, "{path}: {body}");
    }
    let (text, after) = metrics(&server);
    let delta = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    assert_eq!(
        delta("floe_ids_issued_total", &[("kind", "snowflake")]),
        5.0
    );
    assert_eq!(delta("floe_ids_issued_total", &[("kind", "sno")]), 3.0);
    assert_eq!(delta("floe_ids_issued_total", &[("kind", "ulid")]), 1.0);
    assert_eq!(
        delta(
            "floe_sequence_ids_issued_total",
            &[("store", "main"), ("mode", "weak")]
        ),
        3.0,
        "two by floe's route, one by Leaf's"
    );
    assert_eq!(
        delta(
            "floe_sequence_ids_issued_total",
            &[("store", "main"), ("mode", "strong")]
        ),
        4.0
    );
    assert_eq!(
        delta(
            "floe_request_duration_seconds_count",
            &[
                ("listener", "http"),
                ("route", "/v1/ids/:kind"),
                ("method", "GET"),
                ("status", "200")
            ]
        ),
        3.0
    );
    assert_eq!(
        delta(
            "floe_request_duration_seconds_count",
            &[("route", "unmatched"), ("status", "404")]
        ),
        1.0
    );
    assert!(delta("floe_weak_segment_fetches_total", &[("store", "main")]) >= 2.0);
    assert_eq!(
        delta("floe_store_increment_size_ids_count", &[("store", "main")]),
        1.0,
        "one STRONG increment of 4"
    );
    assert_eq!(
        delta("floe_store_increment_size_ids_sum", &[("store", "main")]),
        4.0
    );
    assert!(
        value(
            &after,
            "floe_store_call_duration_seconds_count",
            &[("store", "main"), ("call", "segment")]
        ) >= 2.0
    );
    assert!(value(&after, "floe_weak_buffered_ids", &[("store", "main")]) > 0.0);
    assert!(value(&after, "floe_weak_step", &[("store", "main")]) >= 1.0);
    // Keys, unknown routes and unknown stores never become labels.
    for secret in ["secret-key", "route-xyz", "nostore-xyz"] {
        assert!(!text.contains(secret), "{secret} is a label:\n{text}");
    }
    server.term();
    server.wait(Duration::from_secs(30));
}

#[test]
fn readiness_follows_the_store_and_grpc_health_says_which_service() {
    let url = floe_testkit::env("FLOE_TEST_REDIS");
    let redis = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let proxy = floe_testkit::Proxy::start(&redis);
    let addr = proxy.addr.clone();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let prefix = floe_testkit::unique("ready");
    let store = format!("cache=redis://{addr}/?prefix={prefix}");
    let server = serving::start(&["--state-dir", &state, "--store", &store]);
    let health = |service: &str| serving::health(&server, service);
    let wait_for = |want: u16| {
        let started = Instant::now();
        loop {
            let (code, body) = http(&server.http, "GET", "/readyz").unwrap();
            if code == want {
                return body;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "/readyz stayed {code}: {body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(200);
    // The health service follows readiness a moment later: waited for, as a client would.
    serving::wait_health(&server, "spec.proto.runtime.v1.Runtime", SERVING);
    drop(proxy);
    let body = wait_for(503);
    assert!(body.contains("store cache: not answering"), "{body}");
    let (code, _) = http(&server.http, "GET", "/healthz").unwrap();
    assert_eq!(code, 200, "alive, though not ready");
    serving::wait_health(&server, "spec.proto.runtime.v1.Runtime", NOT_SERVING);
    assert_eq!(health("floe.v1.Floe"), NOT_SERVING);
    assert_eq!(health(""), NOT_SERVING);
    let (_, samples) = metrics(&server);
    assert_eq!(
        value(&samples, "floe_store_ready", &[("store", "cache")]),
        0.0
    );
    // The store comes back at the same address: ready again, without a restart.
    let proxy = floe_testkit::Proxy::start_at(&addr, &redis);
    wait_for(200);
    serving::wait_health(&server, "spec.proto.runtime.v1.Runtime", SERVING);
    assert_eq!(health(""), SERVING);
    server.term();
    let (_, err, _) = server.wait(Duration::from_secs(30));
    assert!(
        err.contains("not ready: store cache: not answering"),
        "{err}"
    );
    drop(proxy);
}

#[test]
fn json_logs_have_one_start_up_line_and_a_line_per_request_at_debug() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start_with_env(
        "127.0.0.1:0",
        "127.0.0.1:0",
        &["--state-dir", &state, "--log-format", "json"],
        &[("RUST_LOG", "info,floe_server=debug")],
    );
    let (code, _) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200);
    let http_addr = server.http.clone();
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    let started: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("floe started"))
        })
        .collect();
    assert_eq!(started.len(), 1, "{err}");
    let s = started[0];
    assert_eq!(s["level"], "INFO");
    for field in ["grpc", "http", "registry", "stores", "version"] {
        assert!(s[field].is_string(), "{field} in {s}");
    }
    assert_eq!(s["http"].as_str(), Some(http_addr.as_str()));
    let message = s["message"].as_str().unwrap();
    for part in [
        "snowflake default: worker ",
        "timestamp field ends",
        "sno: partition ",
        "lexical: worker ",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert!(
        lines.iter().any(|l| l["message"] == "request"
            && l["route"] == "/v1/ids/:kind"
            && l["status"] == "200"),
        "a debug line per request: {err}"
    );
    assert!(lines.iter().any(|l| l["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("shutting down"))));
}

#[test]
fn text_logs_by_default_and_rust_log_filters_them() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let server = serving::start_with_env(
        "127.0.0.1:0",
        "127.0.0.1:0",
        &["--state-dir", &state],
        &[("RUST_LOG", "warn")],
    );
    let (code, _) = http(&server.http, "GET", "/v1/ids/snowflake").unwrap();
    assert_eq!(code, 200);
    server.term();
    let (status, err, _) = server.wait(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    assert!(
        !err.contains("floe started"),
        "info is filtered out at warn: {err}"
    );
    let bad = common::cmd()
        .args(["serve", "--state-dir", &state])
        .env("RUST_LOG", "floe_server=bogus")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RUST_LOG"));
}
