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

/// The first sequence of each millisecond, by millisecond, of Snowflake IDs taken one at a
/// time from `server` (Leaf's layout).
fn first_sequences(server: &crate::serving::Serve, n: usize) -> Vec<u64> {
    let mut first = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (status, body) = http(&server.http, "GET", "/api/snowflake/get/k").unwrap();
        assert_eq!(status, 200, "{body}");
        let id: u64 = body.trim().parse().unwrap();
        let (ms, seq) = (id >> 22, id & 4095);
        let e = first.entry(ms).or_insert(seq);
        *e = (*e).min(seq);
    }
    first.into_values().collect()
}

/// At low traffic, each millisecond's first ID starts at a random sequence below 100 (Leaf's
/// rule), so `id % N` spreads them; `--random-start 0` gives Twitter's 0 every time.
#[test]
fn low_traffic_ids_start_each_millisecond_at_a_random_sequence() {
    let server = start(&[]);
    let firsts = first_sequences(&server, 300);
    assert!(
        firsts.len() > 3,
        "the requests spanned milliseconds: {firsts:?}"
    );
    assert!(firsts.iter().all(|&s| s < 100), "{firsts:?}");
    let shards: std::collections::BTreeSet<u64> = firsts.iter().map(|s| s % 4).collect();
    assert!(
        shards.len() > 1,
        "id % 4 of each millisecond's first ID: {firsts:?}"
    );
    let server = start(&["--random-start", "0"]);
    let firsts = first_sequences(&server, 100);
    assert!(firsts.iter().all(|&s| s == 0), "{firsts:?}");
}

/// `(status, head)` of a GET of `path` with `Host: host`.
fn with_host(server: &crate::serving::Serve, host: &str, path: &str) -> (u16, String) {
    let a = floe_testkit::http::request(&server.http, host, "GET", path, &[]).unwrap();
    (a.status, a.head)
}

/// DNS rebinding needs a browser on the server's own machine: on a loopback listener a
/// foreign `Host` is refused (Leaf's ID routes in Leaf's shape), but never on `/healthz`,
/// `/readyz` or `/metrics`; names pass by wildcard (`*.svc.cluster.local`); a listener bound
/// beyond loopback answers any name unless the check is turned on; `--host-check off` turns
/// it off.
#[test]
fn the_host_check_protects_loopback_and_never_probes() {
    let cluster = "floe.default.svc.cluster.local:34903";
    let server = start(&[]);
    assert_eq!(with_host(&server, cluster, "/v1/ids/snowflake").0, 403);
    let (status, head) = with_host(&server, cluster, "/api/segment/get/k");
    assert_eq!(status, 500, "Leaf's shape: {head}");
    assert!(
        head.contains("x-floe-error: forbidden") && head.contains("text/plain"),
        "{head}"
    );
    for probe in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(with_host(&server, cluster, probe).0, 200, "{probe}");
    }
    let server = start(&["--allow-host", "*.svc.cluster.local"]);
    assert_eq!(with_host(&server, cluster, "/v1/ids/snowflake").0, 200);
    assert_eq!(
        with_host(&server, "svc.cluster.local.evil", "/v1/ids/snowflake").0,
        403
    );
    let server = start(&["--host-check", "off"]);
    assert_eq!(
        with_host(&server, "anything.example", "/v1/ids/snowflake").0,
        200
    );
    // Cross-site requests stay refused whatever the host check.
    let a = floe_testkit::http::request(
        &server.http,
        "anything.example",
        "GET",
        "/v1/ids/snowflake",
        &["Origin: https://evil.example"],
    )
    .unwrap();
    assert_eq!(a.status, 403, "{}", a.body);
    let wide = crate::serving::start_on("127.0.0.1:0", "0.0.0.0:0", &[]);
    assert_eq!(with_host(&wide, cluster, "/v1/ids/snowflake").0, 200);
    let wide = crate::serving::start_on("127.0.0.1:0", "0.0.0.0:0", &["--host-check", "on"]);
    assert_eq!(with_host(&wide, cluster, "/v1/ids/snowflake").0, 403);
    assert_eq!(with_host(&wide, cluster, "/healthz").0, 200);
}

/// A host pattern or check that means nothing is a configuration error naming its key.
#[test]
fn a_bad_host_pattern_or_check_is_refused_at_start() {
    for (args, key) in [
        (&["--allow-host", "a b"][..], "listen.allow_hosts"),
        (&["--allow-host", "*x.y"][..], "listen.allow_hosts"),
        (&["--host-check", "sometimes"][..], "host-check"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(key), "{args:?}: {err}");
    }
}

/// `floe seq keys ARGS --server http://GRPC`: its standard output, or its exit code and error.
fn keys_at(server: &crate::serving::Serve, args: &[&str]) -> Result<String, (i32, String)> {
    let url = format!("http://{}", server.grpc);
    let out = common::cmd()
        .args(["seq", "keys"])
        .args(args)
        .args(["--server", &url])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// The admin API, as Leaf's `/db` and tag table are to a Leaf operator: a store's keys with
/// their values, a key read without taking an ID, a floor raised while serving, and a store
/// that serves registered keys only (a typo refused: 404 unknown_key), over HTTP and over gRPC
/// (`floe seq keys --server`).
#[test]
fn keys_are_seen_raised_and_registered_over_http_and_grpc() {
    let server = start(&[
        "--store",
        "open=memory",
        "--store",
        "tags=memory",
        "--registered-only",
        "tags",
    ]);
    let h = server.http.as_str();
    for want in 1..=3 {
        let (status, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
        assert_eq!((status, body), (200, format!("{{\"next_id\":\"{want}\"}}")));
    }
    let (status, body) = http(h, "GET", "/v1/admin/stores/open/keys/orders").unwrap();
    assert_eq!(status, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["next_weak"], "4", "{body}");
    assert_eq!(state["registered"], false, "{body}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
    assert_eq!(body, "{\"next_id\":\"4\"}", "reading took nothing");
    // A floor raised while serving: this server's buffer goes on above it.
    let (status, body) = http(
        h,
        "POST",
        "/v1/admin/stores/open/keys/orders/raise?above=500",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
    assert_eq!(body, "{\"next_id\":\"501\"}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders?increment=strong").unwrap();
    let strong: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(strong["next_id"].as_str().unwrap().parse::<i64>().unwrap() > 501);
    let (status, body) = http(h, "GET", "/v1/admin/stores/open/keys").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"key\":\"orders\""), "{body}");
    // Registered keys only: refused until registered, over HTTP and Leaf's route alike.
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/ordres").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("unknown_key") && body.contains("ordres"),
        "{body}"
    );
    assert_eq!(
        keys_at(&server, &["register", "invoices", "--store", "tags"]).unwrap(),
        "changed\n"
    );
    assert_eq!(
        keys_at(&server, &["register", "invoices", "--store", "tags"]).unwrap(),
        "unchanged\n"
    );
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!((status, body.as_str()), (200, "{\"next_id\":\"1\"}"));
    assert_eq!(
        keys_at(&server, &["registered", "--store", "tags"]).unwrap(),
        "invoices\n"
    );
    let shown = keys_at(&server, &["show", "invoices", "--store", "tags"]).unwrap();
    assert!(
        shown.starts_with("invoices\t") && shown.contains("\t2\t"),
        "{shown}"
    );
    let (status, _) = http(h, "DELETE", "/v1/admin/stores/tags/keys/invoices").unwrap();
    assert_eq!(status, 200);
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!(status, 404, "refused at once: {body}");
    // Registered again, it goes on: never a repeat.
    let (status, _) = http(h, "PUT", "/v1/admin/stores/tags/keys/invoices").unwrap();
    assert_eq!(status, 200);
    let (_, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!(body, "{\"next_id\":\"2\"}");
    // Errors name what is wrong.
    let (status, body) = http(h, "GET", "/v1/admin/stores/nope/keys/k").unwrap();
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(h, "POST", "/v1/admin/stores/open/keys/k/raise?above=%201").unwrap();
    assert_eq!(status, 400, "{body}");
    let (code, err) = keys_at(&server, &["show", "k", "--store", "nope"]).unwrap_err();
    assert_eq!(code, 2, "{err}");
}

/// A listener beyond loopback without tokens does not serve the admin API: 403 and
/// PERMISSION_DENIED, while IDs are served as ever.
#[test]
fn the_admin_api_needs_tokens_beyond_loopback() {
    let server = crate::serving::start_on("0.0.0.0:0", "0.0.0.0:0", &["--store", "s=memory"]);
    let (status, body) = http(&server.http, "GET", "/v1/admin/stores/s/keys/k").unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("token"), "{body}");
    let (status, _) = http(&server.http, "GET", "/v1/sequencer/s/k").unwrap();
    assert_eq!(status, 200);
    let (code, err) = keys_at(&server, &["show", "k", "--store", "s"]).unwrap_err();
    assert!(err.contains("PERMISSION_DENIED"), "{code}: {err}");
}
