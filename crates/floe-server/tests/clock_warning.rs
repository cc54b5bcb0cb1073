//! A warning the server logs, read back in-process: the one test of this binary. It installs a
//! subscriber on its own thread (`tracing::subscriber::set_default`), so it runs alone:
//! tracing caches whether a log line is wanted the first time any thread reaches it, and while
//! this test's subscriber is the only one, a test on another thread that reached the server's
//! warning first (a store's error, a refused token: the same line) would have it cached as
//! unwanted for the whole process, and this test would find no warning.

#[path = "suite/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{full_config as config, http, Node};

/// Log lines written on this thread, kept for the test to read.
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The clock stepped back under a running server (in-process: the server reads an
/// [`OffsetClock`](floe_core::clock::OffsetClock), as libfaketime with a timestamp file would
/// move a whole process's): Snowflake IDs are refused (503) and never repeated, the refusal is
/// a warning in the log and a count in the metrics, and IDs come again once the clock is back.
#[tokio::test]
async fn a_clock_stepped_back_while_serving_is_refused_warned_and_counted() {
    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // The test's runtime runs on this thread alone: the server's tasks log here.
    let _logging = tracing::subscriber::set_default(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let clock = floe_core::clock::OffsetClock::default();
    let node = Node::start_on(&config(dir.path()), Arc::new(clock.clone())).await;
    let id = |body: &serde_json::Value| -> u64 { body["id"].as_str().unwrap().parse().unwrap() };
    let refused = |metrics: &serde_json::Value| -> f64 {
        let text = metrics.as_str().unwrap();
        [
            "floe_clock_rollback_refusals_total",
            "floe_clock_rollback_waits_total",
        ]
        .iter()
        .map(|name| {
            text.lines()
                .find(|l| {
                    l.starts_with(name) && l.contains(r#"{kind="snowflake",generator="default"}"#)
                })
                .and_then(|l| l.rsplit(' ').next())
                .map_or(0.0, |v| v.parse().unwrap())
        })
        .sum()
    };
    let (code, first) = http(&node.http, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 200, "{first}");
    let (_, before) = http(&node.http, "GET", "/metrics").await;
    clock.set_offset_ms(-30_000);
    let (code, body) = http(&node.http, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 503, "an ID 30 s in the past would be refused: {body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("clock") || message.contains("behind"),
        "{body}"
    );
    let (_, after) = http(&node.http, "GET", "/metrics").await;
    assert!(
        refused(&after) > refused(&before),
        "the step back is counted"
    );
    clock.set_offset_ms(0);
    let (code, again) = http(&node.http, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 200, "{again}");
    assert!(id(&again) > id(&first));
    node.stop().await;
    let log = String::from_utf8(logged.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("clock refused")),
        "{log}"
    );
}
