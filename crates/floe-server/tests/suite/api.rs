//! The server in-process on 127.0.0.1:0: Layotto's gRPC method (through the generated client
//! and through a hand-written message on the raw method path), HTTP, and every error status.

use std::collections::HashMap;
use std::sync::Arc;

use floe_sequencer::stores::memory::MemoryStore;
use floe_sequencer::{Key, Store};
use floe_server::proto::sequencer_options::AutoIncrement;
use floe_server::proto::{GetNextIdRequest, SequencerOptions};
use tonic::Code;

use crate::common::{http, start, Down};

fn req(store: &str, key: &str, increment: Option<i32>) -> GetNextIdRequest {
    GetNextIdRequest {
        store_name: store.into(),
        key: key.into(),
        options: increment.map(|increment| SequencerOptions { increment }),
        metadata: HashMap::from([("ignored".to_string(), "yes".to_string())]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_next_id_serves_strong_and_weak() {
    let server = start(vec![("mem", Arc::new(MemoryStore::new()))]).await;
    let mut c = server.client().await;
    let strong = Some(AutoIncrement::Strong as i32);
    for want in 1..=3 {
        let got = c.get_next_id(req("mem", "orders", strong)).await.unwrap();
        assert_eq!(got.into_inner().next_id, want);
    }
    // WEAK (explicit, or options absent: the wire's zero value) comes from a fresh segment.
    let weak = c
        .get_next_id(req("mem", "orders", Some(0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(weak.next_id, 4);
    let absent = c
        .get_next_id(req("mem", "orders", None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(absent.next_id, 5);
    // An empty store name picks the only store.
    let only = c
        .get_next_id(req("", "orders", strong))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(only.next_id, 1004, "STRONG after a WEAK segment of 1000");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_layotto_statuses() {
    let server = start(vec![
        ("mem", Arc::new(MemoryStore::new())),
        ("down", Arc::new(Down)),
    ])
    .await;
    let mut c = server.client().await;
    let cases = [
        (
            req("mem", "", None),
            Code::InvalidArgument,
            "Key is empty in sequencer store mem",
        ),
        (
            req("nope", "k", None),
            Code::InvalidArgument,
            "Sequencer store nope not found",
        ),
        (
            req("", "k", None),
            Code::InvalidArgument,
            "Sequencer store  not found",
        ),
        (
            req("mem", "k", Some(7)),
            Code::InvalidArgument,
            "options.increment is illegal",
        ),
        (
            req("mem", &"x".repeat(256), None),
            Code::InvalidArgument,
            "at most 255 bytes",
        ),
        (
            req("down", "k", Some(1)),
            Code::Unavailable,
            "store down (down) is unavailable",
        ),
        (
            req("down", "k", Some(0)),
            Code::Unavailable,
            "store down (down) is unavailable",
        ),
    ];
    for (request, code, text) in cases {
        let what = format!("{request:?}");
        let status = c.get_next_id(request).await.unwrap_err();
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(status.message().contains(text), "{what}: {status:?}");
    }
    server.stop().await;

    let empty = start(vec![]).await;
    let status = empty
        .client()
        .await
        .get_next_id(req("mem", "k", None))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "Sequencer store is not configured");
    empty.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhaustion_is_out_of_range() {
    let store = Arc::new(MemoryStore::new());
    store
        .raise(&Key::new("k").unwrap(), i64::MAX)
        .await
        .unwrap();
    let server = start(vec![("mem", store)]).await;
    let status = server
        .client()
        .await
        .get_next_id(req("mem", "k", Some(1)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("i64::MAX"));
    server.stop().await;
}

/// Layotto's messages written by hand (field numbers and types from the vectors) on the raw
/// method path: what a Layotto client sends, with no floe-generated code on the client side.
mod layotto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetNextIdRequest {
        #[prost(string, tag = "1")]
        pub store_name: String,
        #[prost(string, tag = "2")]
        pub key: String,
        #[prost(message, optional, tag = "3")]
        pub options: Option<SequencerOptions>,
        #[prost(map = "string, string", tag = "4")]
        pub metadata: std::collections::HashMap<String, String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SequencerOptions {
        #[prost(int32, tag = "1")]
        pub increment: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetNextIdResponse {
        #[prost(int64, tag = "1")]
        pub next_id: i64,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_is_layotto_s() {
    let server = start(vec![("redis", Arc::new(MemoryStore::new()))]).await;
    let channel = tonic::transport::Endpoint::from_shared(server.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    for want in 1..=2 {
        grpc.ready().await.unwrap();
        let request = layotto::GetNextIdRequest {
            store_name: "redis".into(),
            key: "order_table".into(),
            options: Some(layotto::SequencerOptions { increment: 1 }),
            metadata: Default::default(),
        };
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(
            "/spec.proto.runtime.v1.Runtime/GetNextId",
        );
        let codec = tonic_prost::ProstCodec::<layotto::GetNextIdRequest, layotto::GetNextIdResponse>::default();
        let response = grpc
            .unary(tonic::Request::new(request), path, codec)
            .await
            .unwrap();
        assert_eq!(response.into_inner().next_id, want);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_ids_segments_and_errors() {
    let server = start(vec![
        ("mem", Arc::new(MemoryStore::new())),
        ("down", Arc::new(Down)),
    ])
    .await;
    let a = server.http.as_str();
    assert_eq!(http(a, "GET", "/healthz").await, (200, "ok".into()));
    for want in 1..=2 {
        let (code, body) = http(a, "POST", "/v1/sequencer/mem/a%2Fb?increment=strong").await;
        assert_eq!(
            (code, body["next_id"].as_str()),
            (200, Some(want.to_string().as_str()))
        );
    }
    let (code, body) = http(a, "GET", "/v1/sequencer/mem/a%2Fb/segment?size=10").await;
    assert_eq!(code, 200);
    assert_eq!(
        (body["start"].as_str(), body["end"].as_str()),
        (Some("3"), Some("12"))
    );
    let (code, body) = http(a, "GET", "/v1/sequencer/mem/a%2Fb").await;
    assert_eq!((code, body["next_id"].as_str()), (200, Some("13")));
    let (code, body) = http(a, "GET", "/v1/stores").await;
    assert_eq!(code, 200);
    assert_eq!(body["stores"][0]["name"], "down");
    assert_eq!(body["stores"][1]["kind"], "memory");

    for (path, want, kind) in [
        ("/v1/sequencer/nope/k", 404, "unknown_store"),
        (
            "/v1/sequencer/mem/k?increment=sometimes",
            400,
            "invalid_argument",
        ),
        (
            "/v1/sequencer/mem/k/segment?size=0",
            400,
            "invalid_argument",
        ),
        (
            "/v1/sequencer/mem/k/segment?size=-3",
            400,
            "invalid_argument",
        ),
        ("/v1/sequencer/down/k?increment=strong", 503, "unavailable"),
    ] {
        let (code, body) = http(a, "GET", path).await;
        assert_eq!(
            (code, body["error"].as_str()),
            (want, Some(kind)),
            "{path}: {body}"
        );
        assert!(!body["message"].as_str().unwrap().is_empty());
    }
    server.stop().await;
}
