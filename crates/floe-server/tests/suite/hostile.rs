//! What a hostile client sends: bytes that are not a message, text far longer than any name,
//! HEAD, requests a browser is made to send from another site. The answer is a clear error in
//! the server's words, bounded in size, that names no file and lists no store; and the
//! sequence does not move.

/// The config fuzz target's body (fuzz/README.md), shared with `cargo fuzz`.
#[path = "../../../../fuzz/src/config.rs"]
mod fuzz_config;
#[path = "../../../../fuzz/src/replay.rs"]
mod fuzz_replay;

use std::sync::Arc;

use crate::common::{http, http_with, next_strong, raw_call, start, Down};
use async_trait::async_trait;
use floe_sequencer::stores::memory::MemoryStore;
use floe_sequencer::{ErrorKind, Key, SeqError, Store};
use floe_server::proto::{GetNextIdRequest, SequencerOptions};
use floe_server::MAX_ECHO;
use tonic::Code;

/// A store that fails each key its own way, saying where its file is.
#[derive(Debug)]
struct Broken;

#[async_trait]
impl Store for Broken {
    fn kind(&self) -> &'static str {
        "broken"
    }
    async fn reserve(&self, key: &Key, _: u32) -> Result<i64, SeqError> {
        let kind = match key.as_str() {
            "corrupt" => ErrorKind::Corrupt,
            "config" => ErrorKind::Config,
            _ => ErrorKind::Unavailable,
        };
        Err(SeqError::new(
            kind,
            format!("broken: /var/lib/secret/sequences.redb: key {key:?} went wrong"),
        ))
    }
    async fn raise(&self, _: &Key, _: i64) -> Result<(), SeqError> {
        Ok(())
    }
}

/// A message repeats at most MAX_ECHO characters of any one text of the request (plus the
/// server's own words), names no file and lists no other store.
fn assert_clean(message: &str, what: &str) {
    assert!(
        message.chars().count() <= MAX_ECHO + 120,
        "{what}: {} characters: {message}",
        message.chars().count()
    );
    for leak in ["/var/lib", "redb", "(configured", "hidden-store"] {
        assert!(
            !message.contains(leak),
            "{what}: {message:?} shows {leak:?}"
        );
    }
    assert!(!message.contains('\n'), "{what}: {message:?}");
}

/// GetNextId(store "mem", key "k", STRONG), written byte by byte.
const GOOD: &[u8] = &[
    0x0a, 3, b'm', b'e', b'm', // store_name = "mem"
    0x12, 1, b'k', // key = "k"
    0x1a, 2, 0x08, 1, // options = { increment: STRONG }
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_invalid_argument_and_issue_nothing() {
    let server = start(vec![("mem", Arc::new(MemoryStore::new()))]).await;
    let url = server.grpc_url();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("wire type 7", vec![0x0f]),
        (
            "a length past the end",
            vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        ("store_name not UTF-8", vec![0x0a, 2, 0xff, 0xfe]),
        ("a truncated key", vec![0x12, 5, b'k']),
        ("truncated options", vec![0x1a, 2, 0x08]),
        (
            "a varint of eleven bytes",
            vec![0x08; 1].into_iter().chain([0xff; 11]).collect(),
        ),
        ("a kilobyte of 0xff", vec![0xff; 1024]),
    ];
    for (what, bytes) in cases {
        let status = raw_call(&url, bytes, &[]).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert!(
            status.message().starts_with("malformed message"),
            "{what}: {status:?}"
        );
        assert_clean(status.message(), what);
    }
    // Nothing was issued: the first STRONG ID of the key is 1.
    let reply = raw_call(&url, GOOD.to_vec(), &[]).await.unwrap();
    assert_eq!(reply, vec![0x08, 1], "next_id = 1");
    server.stop().await;
}

fn req(store: &str, key: &str, increment: i32) -> GetNextIdRequest {
    GetNextIdRequest {
        store_name: store.into(),
        key: key.into(),
        options: Some(SequencerOptions { increment }),
        metadata: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_errors_echo_little_name_no_file_and_list_no_store() {
    let full = Arc::new(MemoryStore::new());
    let long_key = "k".repeat(255);
    full.raise(&Key::new(long_key.as_str()).unwrap(), i64::MAX)
        .await
        .unwrap();
    let server = start(vec![
        ("mem", Arc::new(MemoryStore::new())),
        ("hidden-store", Arc::new(MemoryStore::new())),
        ("down", Arc::new(Down)),
        ("broken", Arc::new(Broken)),
        ("full", full),
    ])
    .await;
    let mut c = server.client().await;
    let huge = "x".repeat(100_000);
    let cases = [
        ("a 100 KB store", req(&huge, "k", 0), Code::InvalidArgument),
        (
            "a 100 KB store, no key",
            req(&huge, "", 0),
            Code::InvalidArgument,
        ),
        ("a 100 KB key", req("mem", &huge, 0), Code::InvalidArgument),
        (
            "an unknown store",
            req("nope", "k", 0),
            Code::InvalidArgument,
        ),
        (
            "a store that is down",
            req("down", "k", 1),
            Code::Unavailable,
        ),
        (
            "WEAK on a store that is down",
            req("down", "k", 0),
            Code::Unavailable,
        ),
        (
            "a corrupt value",
            req("broken", "corrupt", 1),
            Code::Internal,
        ),
        (
            "a store error of config",
            req("broken", "config", 1),
            Code::FailedPrecondition,
        ),
        (
            "an exhausted 255-byte key",
            req("full", &long_key, 1),
            Code::OutOfRange,
        ),
    ];
    for (what, request, code) in cases {
        let status = c.get_next_id(request).await.unwrap_err();
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert_clean(status.message(), what);
    }
    let status = c.get_next_id(req(&huge, "k", 0)).await.unwrap_err();
    assert_eq!(
        status.message(),
        format!("Sequencer store {}… not found", "x".repeat(MAX_ECHO))
    );
    // tonic's own words repeat the grpc-encoding header: cut too.
    let status = raw_call(
        &server.grpc_url(),
        GOOD.to_vec(),
        &[("grpc-encoding", &"z".repeat(8000))],
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert_clean(status.message(), "an 8 KB grpc-encoding");
    // Metadata is accepted and not used, whatever its size.
    let mut big = req("mem", "k", 1);
    big.metadata.insert("m".into(), huge.clone());
    assert_eq!(c.get_next_id(big).await.unwrap().into_inner().next_id, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_echo_little_name_no_file_and_list_no_store() {
    let server = start(vec![
        ("mem", Arc::new(MemoryStore::new())),
        ("hidden-store", Arc::new(MemoryStore::new())),
        ("down", Arc::new(Down)),
        ("broken", Arc::new(Broken)),
    ])
    .await;
    let a = server.http.as_str();
    let long = "x".repeat(30_000);
    let cases = [
        (format!("/v1/sequencer/{long}/k"), 404, "unknown_store"),
        (format!("/v1/sequencer/mem/{long}"), 400, "invalid_argument"),
        (
            format!("/v1/sequencer/mem/k?increment={long}"),
            400,
            "invalid_argument",
        ),
        (
            format!("/v1/sequencer/mem/k/segment?size={long}"),
            400,
            "invalid_argument",
        ),
        (
            "/v1/sequencer/mem/k/segment?size=4000000000".to_string(),
            400,
            "invalid_argument",
        ),
        (
            "/v1/sequencer/mem/%ff%fe".to_string(),
            400,
            "invalid_argument",
        ),
        ("/v1/sequencer/nope/k".to_string(), 404, "unknown_store"),
        (
            "/v1/sequencer/down/k?increment=strong".to_string(),
            503,
            "unavailable",
        ),
        (
            "/v1/sequencer/broken/corrupt?increment=strong".to_string(),
            500,
            "internal",
        ),
        (format!("/{long}"), 404, "not_found"),
    ];
    for (path, want, kind) in cases {
        let what = &path[..path.len().min(60)];
        let (code, _, body) = http_with(a, "GET", &path, &[]).await;
        assert_eq!(
            (code, body["error"].as_str()),
            (want, Some(kind)),
            "{what}: {body}"
        );
        assert_clean(body["message"].as_str().unwrap(), what);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_issues_no_id() {
    let server = start(vec![("mem", Arc::new(MemoryStore::new()))]).await;
    let a = server.http.as_str();
    for path in [
        "/v1/sequencer/mem/k?increment=strong",
        "/v1/sequencer/mem/k",
        "/v1/sequencer/mem/k/segment?size=10",
    ] {
        let (code, head, _) = http_with(a, "HEAD", path, &[]).await;
        assert_eq!(code, 405, "{path}: {head}");
        assert!(
            head.to_ascii_lowercase().contains("allow: get,post"),
            "{head}"
        );
    }
    assert_eq!(next_strong(a, "mem", "k").await, 1);
    // HEAD of what issues nothing is served.
    assert_eq!(http_with(a, "HEAD", "/healthz", &[]).await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_browser_requests_are_refused() {
    let server = start(vec![("mem", Arc::new(MemoryStore::new()))]).await;
    let a = server.http.as_str();
    let refused: [&[&str]; 8] = [
        &["Origin: https://evil.example"],
        &["Origin: null"],
        &["Origin: http://floe.evil.example"],
        &["Origin: http://floe:8080"],
        &["Sec-Fetch-Site: cross-site"],
        &["Sec-Fetch-Site: same-site"],
        &["Origin: http://floe", "Origin: https://evil.example"],
        &["Origin: http://floe", "Sec-Fetch-Site: cross-site"],
    ];
    for headers in refused {
        for (method, path) in [
            ("POST", "/v1/sequencer/mem/k?increment=strong"),
            ("GET", "/v1/sequencer/mem/k"),
            ("GET", "/v1/sequencer/mem/k/segment?size=10"),
        ] {
            let (code, head, body) = http_with(a, method, path, headers).await;
            assert_eq!(code, 403, "{method} {path} {headers:?}: {head}");
            assert_eq!(body["error"], "forbidden", "{body}");
            assert_clean(body["message"].as_str().unwrap(), "403");
        }
    }
    let body = {
        let (_, _, body) = http_with(
            a,
            "POST",
            "/v1/sequencer/mem/k",
            &["Origin: https://evil.example"],
        )
        .await;
        body.to_string()
    };
    assert!(!body.contains('\n'), "one line: {body}");
    // Nothing was issued: the first STRONG ID is 1.
    assert_eq!(next_strong(a, "mem", "k").await, 1);
    // The server's own origin, and requests a browser marks as its own or as typed by the user,
    // are served.
    let served: [&[&str]; 5] = [
        &["Origin: http://floe"],
        &["Origin: HTTPS://FLOE"],
        &["Sec-Fetch-Site: same-origin"],
        &["Sec-Fetch-Site: none"],
        &["Origin: http://floe", "Sec-Fetch-Site: same-origin"],
    ];
    for (want, headers) in (2..).zip(served) {
        let (code, _, body) =
            http_with(a, "POST", "/v1/sequencer/mem/k?increment=strong", headers).await;
        assert_eq!(
            (code, body["next_id"].as_str()),
            (200, Some(want.to_string().as_str())),
            "{headers:?}"
        );
    }
    assert_eq!(http(a, "GET", "/healthz").await.0, 200);
    server.stop().await;
}

/// DNS rebinding: a page whose own name now points at 127.0.0.1 sends requests that look
/// same-origin (its Origin matches the Host it sends). Only IP addresses, localhost and the
/// names allowed (here "floe") are answered (found by a hostile probe).
#[tokio::test]
async fn a_host_name_that_is_not_ours_is_refused() {
    let server = start(vec![("mem", Arc::new(MemoryStore::new()))]).await;
    let a = server.http.as_str();
    for headers in [
        &["Host: evil.example", "Origin: http://evil.example"][..],
        &["Host: evil.example:80", "Origin: https://evil.example:80"],
        &["Host: evil.example"],
        &["Host: 127.0.0.1.evil.example"],
        &["Host: localhost.evil.example"],
    ] {
        let (code, _, body) =
            http_with(a, "POST", "/v1/sequencer/mem/k?increment=strong", headers).await;
        assert_eq!(code, 403, "{headers:?}: {body}");
        assert!(body["message"].as_str().unwrap().contains("Host"), "{body}");
    }
    assert_eq!(next_strong(a, "mem", "k").await, 1, "nothing was issued");
    let port = a.rsplit(':').next().unwrap();
    let v4 = format!("Host: 127.0.0.1:{port}");
    let named = format!("Host: LOCALHOST:{port}");
    for (want, host) in (2..).zip([v4.as_str(), named.as_str(), "Host: [::1]:80", "Host: floe"]) {
        let (code, _, body) =
            http_with(a, "POST", "/v1/sequencer/mem/k?increment=strong", &[host]).await;
        assert_eq!(
            (code, body["next_id"].as_str()),
            (200, Some(want.to_string().as_str())),
            "{host}: {body}"
        );
    }
    server.stop().await;
}

/// Every configuration kept under `fuzz/regressions/config/` (crashes the fuzz target found,
/// and seeds), through the same function `cargo fuzz run config` calls.
#[test]
fn fuzz_regressions_replay() {
    let regressions =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    fuzz_replay::replay(&regressions, fuzz_config::TARGETS);
}
