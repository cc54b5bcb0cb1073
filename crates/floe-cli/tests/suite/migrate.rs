//! Moving a Leaf or Layotto fleet to floe: Leaf's own layout, a floor under every Snowflake ID
//! (`--snowflake-above`), and the answers Leaf's clients read.

use crate::common;
use crate::serving::{http, start};

/// Now, in Unix milliseconds (the wall clock as the time Leaf would have issued at).
#[allow(clippy::disallowed_methods)]
fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// An ID as Meituan Leaf writes it: `((ms - 1288834974657) << 22) | (worker << 12) | sequence`.
fn leaf_id(ms: u64, worker: u64, sequence: u64) -> u64 {
    ((ms - 1_288_834_974_657) << 22) | (worker << 12) | sequence
}

/// On floe's default layout (the Go Leaf-Snowflake's 2023 epoch) a Leaf fleet's IDs would go
/// back: with the last Leaf ID as the floor, `floe serve` refuses to start, exit 2, naming
/// both numbers and the layout Leaf needs; nothing is leased or written.
#[test]
fn a_floor_above_the_first_id_refuses_to_start_naming_both_numbers() {
    let floor = leaf_id(now_ms() - 86_400_000, 5, 7).to_string();
    for args in [
        vec!["--snowflake-above", floor.as_str()],
        vec![
            "--layout",
            "twitter",
            "--snowflake-above",
            "18446744073709551615",
        ],
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("snowflake-above") || err.contains("snowflake.above"),
            "{err}"
        );
        assert!(err.contains(args[args.len() - 1]), "{args:?}: {err}");
        assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0, "{err}");
    }
    let state = tempfile::tempdir().unwrap();
    let out = common::serve_output(state.path(), &["--snowflake-above", &floor]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("meituan-leaf"), "{err}");
    let first = err
        .split("at least ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the first ID is named: {err}"));
    assert!(first <= floor.parse::<u64>().unwrap(), "{err}");
}

/// With Meituan Leaf's own layout, floe goes on above the IDs Leaf issued a moment ago, and
/// Leaf's `/decodeSnowflakeId` reads Leaf's IDs with Leaf's fields.
#[test]
fn meituan_leaf_continues_above_leafs_last_id_and_decodes_its_ids() {
    let leaf_last = leaf_id(now_ms() - 1_000, 1023, 4095);
    let server = start(&[
        "--layout",
        "meituan-leaf",
        "--snowflake-above",
        &leaf_last.to_string(),
    ]);
    for _ in 0..100 {
        let (status, body) = http(&server.http, "GET", "/api/snowflake/get/k").unwrap();
        assert_eq!(status, 200, "{body}");
        let id: u64 = body.trim().parse().unwrap();
        assert!(id > leaf_last, "{id} must be above Leaf's {leaf_last}");
    }
    let ms = now_ms() - 3_600_000;
    let theirs = leaf_id(ms, 5, 7);
    let (status, body) = http(
        &server.http,
        "GET",
        &format!("/decodeSnowflakeId?snowflakeId={theirs}"),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["workerId"], "5", "{body}");
    assert_eq!(v["sequenceId"], "7", "{body}");
    assert!(
        v["timestamp"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{ms}(")),
        "{body}"
    );
}
