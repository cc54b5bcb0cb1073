//! Readiness that an orchestrator can act on: a kind whose generator refuses (a clock stepped
//! forward and back) makes `/readyz` fail, and readiness per kind (`?kind=`) keeps the kinds
//! that still serve in service; `/healthz` stays `ok`, since the process recovers by itself
//! when the clock catches up.

use std::sync::Arc;

use floe_core::clock::OffsetClock;

use crate::common::{full_config, http, Node};

const HOUR_MS: i64 = 3_600_000;

fn text(body: &serde_json::Value) -> &str {
    body.as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_kind_that_refuses_is_not_ready_and_the_others_are() {
    let dir = tempfile::tempdir().unwrap();
    let clock = OffsetClock::default();
    let node = Node::start_on(&full_config(dir.path()), Arc::new(clock.clone())).await;
    let a = &node.http;
    assert_eq!(http(a, "GET", "/readyz").await, (200, "ready\n".into()));
    assert_eq!(
        http(a, "GET", "/readyz?kind=snowflake").await,
        (200, "ready\n".into())
    );

    // An hour ahead, an ID issued, and the clock back: the Snowflake generator refuses for
    // the hour (an ID an hour in the past could repeat one), and says so before any request.
    clock.set_offset_ms(HOUR_MS);
    let (code, body) = http(a, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 200, "{body}");
    clock.set_offset_ms(0);
    let (code, body) = http(a, "GET", "/readyz").await;
    assert_eq!(code, 503, "{body}");
    let why = text(&body);
    assert!(
        why.starts_with("not ready\n")
            && why.contains("snowflake default: clock moved backwards by")
            && why.contains("refusing"),
        "{why}"
    );
    let (code, body) = http(a, "GET", "/readyz?kind=snowflake").await;
    assert_eq!(code, 503, "{body}");
    assert!(text(&body).contains("snowflake default"), "{body}");
    for kind in ["sno", "uuid7", "ulid"] {
        assert_eq!(
            http(a, "GET", &format!("/readyz?kind={kind}")).await,
            (200, "ready\n".into()),
            "{kind} still issues"
        );
        let (code, body) = http(a, "GET", &format!("/v1/ids/{kind}")).await;
        assert_eq!(code, 200, "{kind}: {body}");
    }
    let (code, _) = http(a, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 503, "readiness said it would refuse");
    // Alive: nothing a restart would mend sooner than the clock does.
    assert_eq!(http(a, "GET", "/healthz").await, (200, "ok".into()));

    // A kind, or a parameter, that is no such thing: 400 naming what was expected.
    let (code, body) = http(a, "GET", "/readyz?kind=snowflak").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("snowflake"), "{body}");
    let (code, body) = http(a, "GET", "/readyz?kinds=sno").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.to_string().contains("expected kind"), "{body}");

    // The clock caught up: ready again once the durable time bounds' writers have written
    // past the step (a bound that trails by a write is no refusal while its writer keeps
    // writing; a disk slowed by a busy machine can hold a write for seconds, and then
    // readiness rightly waits for it), and IDs above the one issued an hour ahead.
    clock.set_offset_ms(HOUR_MS + 1_000);
    let asked = std::time::Instant::now();
    loop {
        let answer = http(a, "GET", "/readyz").await;
        if answer == (200, "ready\n".into()) {
            break;
        }
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(20),
            "still not ready: {answer:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (code, body) = http(a, "GET", "/v1/ids/snowflake").await;
    assert_eq!(code, 200, "{body}");
    node.stop().await;
}
