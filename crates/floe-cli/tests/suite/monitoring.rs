//! What monitoring reads from a real `floe serve`: `/metrics` follows Prometheus's conventions
//! (process metrics, the commit in `floe_build_info`, no space in a label value, a unit at the
//! end of every histogram's name, HTTP and gRPC statuses under labels of their own, a stream
//! timed to its end), and the Grafana dashboard (deploy/grafana/floe.json) and the alert rules
//! (deploy/prometheus/floe-alerts.yml, with their promtool unit tests) name only metrics the
//! server exposes, and cover every family it does.

use crate::common;
use crate::serving;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floe_server::proto_floe::floe_client::FloeClient;
use floe_server::proto_floe::{Kind, NextIdsRequest, StreamIdsRequest};
use serving::{http, Serve};

/// How long the client holds a stream without reading it: the stream's recorded time must
/// cover it.
const PAUSE: Duration = Duration::from_millis(500);

/// ULIDs in the paused stream: 100,000 of 16 bytes (1.6 MB), far beyond what the client's
/// 64 KiB stream window and the server's send buffer (400 KiB) hold, so the server's answer
/// cannot end before the client reads again.
const STREAMED: u64 = 100_000;

/// gRPC's status names.
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Families a server exposes only in some set-ups, which the ones started here (embedded
/// store, file or etcd registry, TLS on and off, no store failing) do not show: each is still
/// checked to be named by floe's sources and listed in the metrics table of docs/operate.md.
const CONDITIONAL: [(&str, &str); 1] =
    [("floe_store_call_errors_total", "once a store call failed")];

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One sample line of the exposition: its name, labels and value.
#[derive(Debug, Clone)]
struct Line {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape: its text, its families (`# TYPE` name and type) and its samples.
struct Scrape {
    text: String,
    families: BTreeMap<String, String>,
    lines: Vec<Line>,
}

impl Scrape {
    fn of(server: &Serve) -> Scrape {
        let (code, text) = http(&server.http, "GET", "/metrics").unwrap();
        assert_eq!(code, 200, "{text}");
        Scrape::parse(text)
    }

    /// `text`, checked by promtool and parsed.
    fn parse(text: String) -> Scrape {
        crate::operate::promtool_check_metrics(&text);
        let mut families = BTreeMap::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
                families.insert(name.to_string(), kind.to_string());
            }
        }
        let lines = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("the exposition parses")
            .samples
            .into_iter()
            // A histogram's `_sum` and `_count` lines are samples of their own.
            .filter_map(|s| {
                let value = match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => {
                        return None
                    }
                };
                Some(Line {
                    name: s.metric,
                    labels: s
                        .labels
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    value,
                })
            })
            .collect();
        Scrape {
            text,
            families,
            lines,
        }
    }

    /// The value of the sample `name` whose labels include `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.lines
            .iter()
            .filter(|l| l.name == name)
            .find(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|l| l.value)
    }

    /// Every name a sample line of the text carries (`x_bucket`, `x_sum`, `x_count` for a
    /// histogram).
    fn sample_names(&self) -> BTreeSet<String> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
            .collect()
    }
}

/// A server with the embedded sequencer (and `args`), after HTTP and gRPC requests
/// (one refused, one stream read to its end after a pause, one cancelled): every family such a
/// server has, with samples of both listeners. Returns the scrape and how long the client saw
/// the paused stream last at least.
fn busy_server(dir: &Path, args: &[&str]) -> (Serve, Scrape, Duration) {
    let state = dir.display().to_string();
    let mut all = vec!["--state-dir", &state, "--store", "main=embedded"];
    all.extend_from_slice(args);
    let server = serving::start(&all);
    for (path, code) in [
        ("/v1/ids/snowflake?count=3", 200),
        ("/v1/ids/sno", 200),
        ("/v1/sequencer/main/k?count=2", 200),
        ("/v1/sequencer/main/k?increment=strong&count=4", 200),
        ("/v1/ids/snowflake?count=many", 400),
    ] {
        let (got, body) = http(&server.http, "GET", path).unwrap();
        assert_eq!(got, code, "{path}: {body}");
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let held = rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .unwrap()
            // The smallest window HTTP/2 starts with: the server cannot send far ahead.
            .initial_stream_window_size(Some(65_535))
            .initial_connection_window_size(Some(65_535))
            .connect()
            .await
            .unwrap();
        let mut client = FloeClient::new(channel);
        let ulid = |count| NextIdsRequest {
            kind: Kind::Ulid as i32,
            count,
            ..Default::default()
        };
        client.next_ids(ulid(2)).await.unwrap();
        let refused = client
            .next_ids(NextIdsRequest {
                kind: Kind::Unspecified as i32,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        let stream = |total| StreamIdsRequest {
            kind: Kind::Ulid as i32,
            total,
            ..Default::default()
        };
        // A stream held by the client for PAUSE after its first message, then read to its end.
        let mut ids = client
            .stream_ids(stream(STREAMED))
            .await
            .unwrap()
            .into_inner();
        let first = ids.message().await.unwrap().expect("a first message");
        let held_from = Instant::now();
        tokio::time::sleep(PAUSE).await;
        let mut got = first.binary.len() as u64;
        while let Some(m) = ids.message().await.unwrap() {
            got += m.binary.len() as u64;
        }
        let held = held_from.elapsed();
        assert_eq!(got, STREAMED);
        // A stream the client lets go after its first message.
        let mut cut = client
            .stream_ids(stream(1_000_000))
            .await
            .unwrap()
            .into_inner();
        cut.message().await.unwrap().expect("a first message");
        drop(cut);
        held
    });
    // The cancelled stream is recorded when the server drops its answer: waited for.
    let started = Instant::now();
    loop {
        let scrape = Scrape::of(&server);
        let cancelled = scrape.value(
            "floe_request_duration_seconds_count",
            &[
                ("route", "/floe.v1.Floe/StreamIds"),
                ("grpc_code", "CANCELLED"),
            ],
        );
        if cancelled == Some(1.0) {
            return (server, scrape, held);
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no CANCELLED stream after 10 s:\n{}",
            scrape.text
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /metrics` over TLS (trusting `ca`) from `addr`: the answer's body.
async fn https_metrics(addr: &str, ca: &Path) -> String {
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // The server closes after its answer (Connection: close); rustls may see no close_notify.
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("chunked"), "{head}");
    body.to_string()
}

/// A server with TLS on both listeners, after one handshake that failed (plain HTTP to its
/// HTTP port): its scrape, read over TLS.
fn tls_server(dir: &Path) -> Scrape {
    let certs = floe_testkit::test_ca(dir);
    let state = dir.join("state").display().to_string();
    let server = serving::start(&[
        "--state-dir",
        &state,
        "--tls-cert",
        &certs.cert.display().to_string(),
        "--tls-key",
        &certs.key.display().to_string(),
    ]);
    // Not TLS: the handshake fails, and the server closes the connection.
    let mut plain = std::net::TcpStream::connect(&server.http).unwrap();
    std::io::Write::write_all(&mut plain, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = std::io::Read::read_to_end(&mut plain, &mut Vec::new());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let text = rt.block_on(https_metrics(&server.http, &certs.ca));
    server.term();
    server.wait(Duration::from_secs(30));
    Scrape::parse(text)
}

#[test]
fn metrics_follow_prometheus_conventions() {
    let dir = tempfile::tempdir().unwrap();
    let (server, scrape, held) = busy_server(dir.path(), &[]);

    // Process metrics, plausible for this process.
    let v = |name: &str| {
        scrape
            .value(name, &[])
            .unwrap_or_else(|| panic!("{name} missing:\n{}", scrape.text))
    };
    let now = floe_core::clock::Clock::now_nanos(&floe_core::clock::SystemClock) as f64 / 1e9;
    let resident = v("process_resident_memory_bytes");
    assert!((1e6..1e10).contains(&resident), "resident {resident} bytes");
    assert!(v("process_virtual_memory_bytes") >= resident);
    let (open, max) = (v("process_open_fds"), v("process_max_fds"));
    assert!(open >= 3.0 && open <= max, "{open} fds open of {max}");
    assert!(v("process_threads") >= 1.0);
    assert!(v("process_cpu_seconds_total") >= 0.0);
    assert!(v("process_virtual_memory_max_bytes") >= 0.0);
    let started = v("process_start_time_seconds");
    assert!(
        started <= now + 1.0 && started > now - 600.0,
        "the process started at {started}, now is {now}"
    );
    assert!(
        (v("floe_start_time_seconds") - started).abs() < 60.0,
        "the server started with its process"
    );

    // The commit `floe --version` names.
    let out = common::run(&["--version"]);
    let version = String::from_utf8_lossy(&out.stdout).to_string();
    let commit = version
        .split_once("(commit ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(c, _)| c)
        .unwrap_or_else(|| panic!("no commit in {version}"));
    let info = scrape
        .lines
        .iter()
        .find(|l| l.name == "floe_build_info")
        .expect("floe_build_info");
    assert_eq!(info.labels.get("commit").map(String::as_str), Some(commit));
    assert_eq!(
        info.labels.get("version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );

    // No label value holds a space, in any family; a generator is `kind` and `generator`.
    for l in &scrape.lines {
        for (k, v) in &l.labels {
            assert!(
                !v.contains(char::is_whitespace),
                "{}{{{k}={v:?}}}: a space in a label value",
                l.name
            );
        }
    }
    assert_eq!(
        scrape.value(
            "floe_lease_held",
            &[("kind", "snowflake"), ("generator", "default")]
        ),
        Some(1.0)
    );
    assert_eq!(
        scrape.value(
            "floe_fence_raised",
            &[("kind", "sno"), ("generator", "default")]
        ),
        Some(0.0)
    );

    // Every histogram's name ends in its unit.
    let histograms: Vec<&String> = scrape
        .families
        .iter()
        .filter(|(_, kind)| *kind == "histogram")
        .map(|(name, _)| name)
        .collect();
    assert!(histograms.len() >= 3, "{histograms:?}");
    for name in histograms {
        assert!(
            ["_seconds", "_bytes", "_ids"]
                .iter()
                .any(|unit| name.ends_with(unit)),
            "histogram {name} has no unit at the end of its name"
        );
    }

    // `status` is an HTTP status everywhere; `grpc_code` a gRPC status, on gRPC requests only.
    let requests: Vec<&Line> = scrape
        .lines
        .iter()
        .filter(|l| l.name == "floe_request_duration_seconds_count")
        .collect();
    for l in &requests {
        let status = &l.labels["status"];
        assert!(
            status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()),
            "status {status:?} is not an HTTP status: {l:?}"
        );
        match l.labels["listener"].as_str() {
            "grpc" => {
                let code = l
                    .labels
                    .get("grpc_code")
                    .expect("a gRPC request's grpc_code");
                assert!(GRPC_CODES.contains(&code.as_str()), "{l:?}");
            }
            "http" => assert!(!l.labels.contains_key("grpc_code"), "{l:?}"),
            other => panic!("listener {other}"),
        }
    }
    let count = |labels: &[(&str, &str)]| {
        scrape
            .value("floe_request_duration_seconds_count", labels)
            .unwrap_or(0.0)
    };
    assert_eq!(
        count(&[
            ("listener", "http"),
            ("route", "/v1/ids/:kind"),
            ("status", "400")
        ]),
        1.0
    );
    assert_eq!(
        count(&[
            ("route", "/floe.v1.Floe/NextIds"),
            ("status", "200"),
            ("grpc_code", "INVALID_ARGUMENT")
        ]),
        1.0,
        "a gRPC error is HTTP 200 with its gRPC status"
    );
    assert_eq!(
        count(&[("route", "/floe.v1.Floe/NextIds"), ("grpc_code", "OK")]),
        1.0
    );

    // The stream read to its end is OK and timed whole: at least the client's pause.
    let ok = [("route", "/floe.v1.Floe/StreamIds"), ("grpc_code", "OK")];
    assert_eq!(count(&ok), 1.0);
    let seconds = scrape
        .value("floe_request_duration_seconds_sum", &ok)
        .expect("the stream's sum");
    assert!(
        seconds >= PAUSE.as_secs_f64() && seconds <= held.as_secs_f64() + 5.0,
        "the stream took {seconds} s by the server, the client held it {held:?} after its first message"
    );
    server.term();
    server.wait(Duration::from_secs(30));
}

/// The metric names a PromQL expression uses (quoted strings left out): floe's, the process
/// ones, and Prometheus's `up`.
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut unquoted = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => unquoted.push(c),
        }
    }
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("floe_") || w.starts_with("process_") || *w == "up")
        .map(str::to_string)
        .collect()
}

/// The expressions of the dashboard's panels (and of its variables' queries).
fn dashboard_exprs() -> Vec<String> {
    let path = root().join("deploy/grafana/floe.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(
        dash["__inputs"]
            .as_array()
            .is_some_and(|i| i.iter().any(|i| i["name"] == "DS_PROMETHEUS")),
        "the data source is an input, DS_PROMETHEUS"
    );
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "{}",
            panel["title"]
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().expect("an expr").to_string());
        }
    }
    exprs
}

/// The `expr` of each rule of deploy/prometheus/floe-alerts.yml (one line, or a `|` block),
/// and how many alerts it has.
fn rule_exprs() -> (Vec<String>, usize) {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/floe-alerts.yml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut exprs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((indent, rest)) = line.split_once("expr: ") else {
            continue;
        };
        if rest.trim() != "|" {
            exprs.push(rest.to_string());
            continue;
        }
        let block: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| l.len() > indent.len() + 2 && l.starts_with(&format!("{indent}  ")))
            .copied()
            .collect();
        exprs.push(block.join("\n"));
    }
    let alerts = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("- alert: "))
        .count();
    (exprs, alerts)
}

/// Whether the family `name` is named by floe's sources (outside their tests) and in the
/// metrics table of docs/operate.md.
fn documented_and_written(name: &str) -> bool {
    let docs = std::fs::read_to_string(root().join("docs/operate.md")).unwrap();
    let in_docs = docs.contains(&format!("`{name}`"));
    let mut written = false;
    let mut dirs = vec![root().join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("tests") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                written |= text.contains(&format!("\"{name}\""));
            }
        }
    }
    in_docs && written
}

#[test]
fn the_dashboard_and_the_alerts_name_what_the_server_exposes() {
    let dir = tempfile::tempdir().unwrap();
    // On etcd: a lease with a window (floe_lease_window_seconds, ..._remaining_seconds).
    let registry = format!(
        "etcd://{}/{}",
        floe_testkit::env("FLOE_TEST_ETCD"),
        floe_testkit::unique("floe-monitoring")
    );
    let (server, mut scrape, _) = busy_server(dir.path(), &["--registry", &registry]);
    // The survey of the service's worker IDs: its own service, so one of 1,024 is held.
    let snowflake = [("kind", "snowflake"), ("generator", "default")];
    assert_eq!(
        scrape.value("floe_worker_ids", &snowflake),
        Some(1024.0),
        "{}",
        scrape.text
    );
    assert_eq!(
        scrape.value("floe_worker_ids_free", &snowflake),
        Some(1023.0)
    );
    assert_eq!(
        scrape.value("floe_worker_ids_parked", &snowflake),
        Some(0.0)
    );
    // `floe worker list` says the same: live while the server runs, closed once it stopped.
    let state = || -> String {
        let record = common::first_worker_record(&registry, "floe");
        record["state"].as_str().unwrap().to_string()
    };
    assert_eq!(state(), "live");
    server.term();
    server.wait(Duration::from_secs(30));
    assert_eq!(state(), "closed");
    // And TLS's families, from a server with TLS on.
    let tls_dir = tempfile::tempdir().unwrap();
    let tls = tls_server(tls_dir.path());
    for family in [
        "floe_tls_certificate_expiry_seconds",
        "floe_tls_handshake_failures_total",
    ] {
        assert!(tls.families.contains_key(family), "{family}:\n{}", tls.text);
    }
    scrape.families.extend(tls.families.clone());
    scrape.text.push_str(&tls.text);
    let exposed = scrape.sample_names();
    let conditional: BTreeSet<&str> = CONDITIONAL.iter().map(|(n, _)| *n).collect();
    for (name, when) in CONDITIONAL {
        assert!(
            !scrape.families.contains_key(name),
            "{name} ({when}) is exposed here: take it out of CONDITIONAL"
        );
        assert!(
            documented_and_written(name),
            "{name} ({when}) is not both registered in crates/ and listed in docs/operate.md"
        );
    }
    let known = |name: &str| {
        name == "up"
            || exposed.contains(name)
            || conditional.contains(name)
            || conditional.iter().any(|c| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name == format!("{c}{s}"))
            })
    };

    // The dashboard: every name it uses exists; every family exposed has a panel.
    let exprs = dashboard_exprs();
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| names_in(e)).collect();
    for name in &used {
        assert!(
            known(name),
            "the dashboard uses {name}, which the server does not expose"
        );
    }
    let families = scrape.families.keys().map(String::as_str);
    for family in families.chain(conditional.iter().copied()) {
        let shown = used.contains(family)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| used.contains(&format!("{family}{s}")));
        assert!(shown, "no panel of the dashboard shows {family}");
    }

    // The alert rules: every name they use exists.
    let (rules, alerts) = rule_exprs();
    assert_eq!(rules.len(), alerts, "one expr per alert: {rules:?}");
    assert!(alerts >= 8, "{alerts} alerts");
    for expr in &rules {
        let names = names_in(expr);
        assert!(!names.is_empty(), "{expr}");
        for name in names {
            assert!(
                known(&name),
                "an alert uses {name}, which the server does not expose: {expr}"
            );
        }
    }
}

/// The alert rules are valid (`promtool check rules`) and their unit tests pass (`promtool
/// test rules`: each alert firing and not firing).
#[test]
fn the_alert_rules_are_valid_and_their_tests_pass() {
    let dir = root().join("deploy/prometheus");
    for args in [
        ["check", "rules", "floe-alerts.yml"],
        ["test", "rules", "floe-alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("promtool (Debian: prometheus) is installed by scripts/test.sh");
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each alert has a test that expects it to fire.
    let tests = std::fs::read_to_string(dir.join("floe-alerts.test.yml")).unwrap();
    let rules = std::fs::read_to_string(dir.join("floe-alerts.yml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- alert: "))
    {
        let tested = tests
            .split(&format!("alertname: {alert}\n"))
            .skip(1)
            .any(|after| {
                after
                    .lines()
                    .next()
                    .is_some_and(|l| l.trim() == "exp_alerts:")
            });
        assert!(
            tested,
            "no test of floe-alerts.test.yml expects {alert} to fire"
        );
    }
}
