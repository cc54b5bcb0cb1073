//! A whole server assembled from its configuration ([`floe_server::Server`]), in-process: every
//! ID kind over HTTP and gRPC (floe.v1), batches and streams, Leaf's routes, health and
//! reflection, and a graceful restart that keeps WEAK tails.

use std::collections::HashSet;
use std::sync::Arc;

use crate::common::{self, full_config as config, http, http_with, Node};
use floe_core::lexical::LexicalUuid;
use floe_core::sno::SnoId;
use floe_core::snowflake::Layout;
use floe_server::proto_floe::{
    Increment, Kind, NextIdsRequest, NextSequenceRequest, StreamIdsRequest, StreamSequenceRequest,
};
use tonic::Code;

fn texts(body: &serde_json::Value) -> Vec<String> {
    body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {body}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Each kind's text parses as that kind.
fn parses(kind: &str, text: &str) {
    let ok = match kind {
        "snowflake" => text.parse::<u64>().is_ok(),
        "sno" => SnoId::decode(text.as_bytes()).is_ok(),
        "lexical" => LexicalUuid::parse(text).is_ok(),
        "uuid7" => uuid::Uuid::parse_str(text).is_ok_and(|u| u.get_version_num() == 7),
        "ulid" => floe_core::ulid::parse(text).is_ok(),
        other => panic!("unknown kind {other}"),
    };
    assert!(ok, "{kind}: {text:?} does not parse");
}

const KINDS: [&str; 5] = ["snowflake", "sno", "lexical", "uuid7", "ulid"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_issues_every_kind_singly_and_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let mut seen = HashSet::new();
    for kind in KINDS {
        let (code, body) = http(&node.http, "GET", &format!("/v1/ids/{kind}")).await;
        assert_eq!(code, 200, "{kind}: {body}");
        let one = body["id"].as_str().unwrap().to_string();
        parses(kind, &one);
        assert!(seen.insert(one));
        let (code, body) = http(&node.http, "POST", &format!("/v1/ids/{kind}?count=500")).await;
        assert_eq!(code, 200, "{kind}: {body}");
        let batch = texts(&body);
        assert_eq!(batch.len(), 500, "{kind}");
        for id in batch {
            parses(kind, &id);
            assert!(seen.insert(id.clone()), "{kind}: {id} twice");
        }
    }
    // Time-ordered kinds come in the order issued.
    for kind in ["snowflake", "lexical"] {
        let (_, body) = http(&node.http, "GET", &format!("/v1/ids/{kind}?count=1000")).await;
        let ids = texts(&body);
        let sorted = {
            let mut s = ids.clone();
            if kind == "snowflake" {
                s.sort_by_key(|t| t.parse::<u64>().unwrap());
            } else {
                s.sort();
            }
            s
        };
        assert_eq!(ids, sorted, "{kind} batch out of order");
    }
    // sno's metabyte, and a named Snowflake generator's layout.
    let (_, body) = http(&node.http, "GET", "/v1/ids/sno?count=3&meta=200").await;
    for t in texts(&body) {
        assert_eq!(SnoId::decode(t.as_bytes()).unwrap().meta(), 200);
    }
    let (code, body) = http(&node.http, "GET", "/v1/ids/snowflake?layout=tw").await;
    assert_eq!(code, 200, "{body}");
    let id: u64 = body["id"].as_str().unwrap().parse().unwrap();
    let parts = Layout::TWITTER.try_decode(id).unwrap();
    #[allow(clippy::disallowed_methods)] // the time a real server issued at
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(parts.timestamp_ms.abs_diff(now) < 60_000, "{parts:?}");
    // Bad requests: 400, in the server's words.
    for (path, words) in [
        (
            "/v1/ids/snowflake?count=0",
            "count: expected 1 to 10000, found 0",
        ),
        (
            "/v1/ids/snowflake?count=10001",
            "count: expected 1 to 10000, found 10001",
        ),
        ("/v1/ids/snowflake?count=x", "count: expected 1 to 10000"),
        (
            "/v1/ids/guid",
            "kind: expected snowflake, sno, lexical, uuid7 or ulid",
        ),
        (
            "/v1/ids/snowflake?layout=nope",
            "no Snowflake generator is named \"nope\"",
        ),
        ("/v1/ids/sno?meta=256", "meta: expected 0 to 255"),
        ("/v1/ids/ulid?meta=1", "meta: applies to sno IDs only"),
        (
            "/v1/ids/uuid7?layout=tw",
            "layout: applies to snowflake IDs only",
        ),
        ("/v1/ids/ulid?cuont=2", "unknown parameter \"cuont\""),
        (
            "/v1/sequencer/main/k?count=10001",
            "count: expected 1 to 10000",
        ),
    ] {
        let (code, body) = http(&node.http, "GET", path).await;
        assert_eq!(code, 400, "{path}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains(words), "{path}: {message}");
    }
    let (code, _) = http(&node.http, "HEAD", "/v1/ids/snowflake").await;
    assert_eq!(code, 405, "HEAD issues nothing");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_batches_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let (code, body) = http(&node.http, "GET", "/v1/sequencer/main/k?count=5").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(texts(&body), ["1", "2", "3", "4", "5"]);
    let (_, body) = http(&node.http, "GET", "/v1/sequencer/main/k").await;
    assert_eq!(body["next_id"], "6", "a single ID keeps Layotto's JSON");
    // STRONG: one increment by N, a run of consecutive IDs.
    let (_, body) = http(
        &node.http,
        "POST",
        "/v1/sequencer/main/s?increment=strong&count=4",
    )
    .await;
    let first: Vec<i64> = texts(&body).iter().map(|t| t.parse().unwrap()).collect();
    let (_, body) = http(
        &node.http,
        "POST",
        "/v1/sequencer/main/s?increment=strong&count=3",
    )
    .await;
    let second: Vec<i64> = texts(&body).iter().map(|t| t.parse().unwrap()).collect();
    assert!(first.windows(2).all(|w| w[1] == w[0] + 1), "{first:?}");
    assert!(second.windows(2).all(|w| w[1] == w[0] + 1), "{second:?}");
    assert!(second[0] > first[3], "{first:?} then {second:?}");
    // The snowflake store serves WEAK batches from the server's generator.
    let (code, body) = http(&node.http, "GET", "/v1/sequencer/ids/x?count=100").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(texts(&body).iter().collect::<HashSet<_>>().len(), 100);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_routes_answer_as_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let (code, head, body) = http_with(&node.http, "GET", "/api/segment/get/orders", &[]).await;
    assert_eq!(code, 200);
    assert!(head.contains("text/plain"), "{head}");
    assert_eq!(body, 1, "a bare decimal number");
    let (code, _, body) = http_with(&node.http, "POST", "/api/segment/get/orders", &[]).await;
    assert_eq!((code, body), (200, serde_json::json!(2)));
    let (code, _, body) = http_with(&node.http, "GET", "/api/snowflake/get/anything", &[]).await;
    assert_eq!(code, 200);
    let id = body
        .as_u64()
        .unwrap_or_else(|| panic!("not a number: {body}"));
    // Leaf's 41/10/12 layout on the 2023 epoch, and the decode route reads it back.
    let parts = Layout::LEAF.try_decode(id).unwrap();
    let (code, decoded) = http(
        &node.http,
        "GET",
        &format!("/decodeSnowflakeId?snowflakeId={id}"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(decoded["workerId"], parts.worker.to_string());
    assert_eq!(decoded["sequenceId"], parts.sequence.to_string());
    let ts = decoded["timestamp"].as_str().unwrap();
    assert!(ts.starts_with(&format!("{}(", parts.timestamp_ms)), "{ts}");
    let (code, decoded) = http(&node.http, "GET", "/decodeSnowflakeId?snowflakeId=-1").await;
    assert_eq!(code, 400);
    assert!(decoded["errorMsg"]
        .as_str()
        .unwrap()
        .contains("snowflakeId"));
    // Numbers are read exactly, as Leaf's `Long.parseLong` reads them: no space trimmed,
    // and no sign (floe issues none), here and in every query number.
    for text in ["%201", "1%20", "+1", "1%0A", "0x1", ""] {
        let path = format!("/decodeSnowflakeId?snowflakeId={text}");
        let (code, decoded) = http(&node.http, "GET", &path).await;
        assert_eq!(code, 400, "{path}: {decoded}");
        assert!(decoded["errorMsg"]
            .as_str()
            .unwrap()
            .contains("snowflakeId"));
    }
    for path in [
        "/v1/sequencer/main/k?count=%202",
        "/v1/sequencer/main/k?count=+2",
        "/v1/sequencer/main/k/segment?size=+5",
        "/v1/ids/sno?meta=%201",
        "/cache?limit=+3",
    ] {
        let (code, body) = http(&node.http, "GET", path).await;
        assert_eq!(code, 400, "{path}: {body}");
    }
    // 2^63: a bit above Leaf's 63 bits, so no ID of the layout.
    let (code, decoded) = http(
        &node.http,
        "GET",
        "/decodeSnowflakeId?snowflakeId=9223372036854775808",
    )
    .await;
    assert_eq!(code, 400, "{decoded}");
    assert!(decoded["errorMsg"]
        .as_str()
        .unwrap()
        .contains("above the layout"));
    // Errors: 500 as Leaf answers them, the kind in a header.
    let long = "k".repeat(300);
    let (code, head, _) =
        http_with(&node.http, "GET", &format!("/api/segment/get/{long}"), &[]).await;
    assert_eq!(code, 500);
    assert!(head.contains("x-floe-error: invalid_argument"), "{head}");
    // /cache shows the key's buffer.
    let (code, cache) = http(&node.http, "GET", "/cache").await;
    assert_eq!(code, 200);
    let main = cache["stores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["store"] == "main")
        .unwrap();
    let key = main["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "orders")
        .unwrap();
    assert_eq!(key["initOk"], true);
    assert_eq!(key["current"]["nextId"], "3");
    assert_eq!(main["truncated"], false);
    // A bounded view: ?limit=N keys per store (1,000 by default).
    http(&node.http, "GET", "/api/segment/get/other").await;
    let (_, cache) = http(&node.http, "GET", "/cache?limit=1").await;
    let main = &cache["stores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["store"] == "main")
        .unwrap()
        .clone();
    assert_eq!(main["keys"].as_array().unwrap().len(), 1);
    assert_eq!(main["truncated"], true);
    let (code, body) = http(&node.http, "GET", "/cache?limit=0").await;
    assert_eq!(code, 400, "{body}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_floe_v1_batches_streams_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let mut client = node.client().await;
    let mut seen = HashSet::new();
    for (kind, width) in [
        (Kind::Snowflake, 8),
        (Kind::Sno, 10),
        (Kind::Lexical, 16),
        (Kind::Uuid7, 16),
        (Kind::Ulid, 16),
    ] {
        let r = client
            .next_ids(NextIdsRequest {
                kind: kind as i32,
                count: 300,
                with_text: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.text.len(), 300, "{kind:?}");
        if kind == Kind::Snowflake {
            assert_eq!(r.numbers.len(), 300);
            for (n, t) in r.numbers.iter().zip(&r.text) {
                assert_eq!(n.to_string(), *t);
            }
        } else {
            assert_eq!(r.binary.len(), 300);
            assert!(r.binary.iter().all(|b| b.len() == width), "{kind:?}");
        }
        for t in r.text {
            assert!(seen.insert(t.clone()), "{kind:?}: {t} twice");
        }
    }
    // A stream of 25,000 sno IDs in messages of 1,000.
    let mut stream = client
        .stream_ids(StreamIdsRequest {
            kind: Kind::Sno as i32,
            total: 25_000,
            batch: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut streamed = HashSet::new();
    let mut messages = 0;
    while let Some(m) = stream.message().await.unwrap() {
        messages += 1;
        assert!(m.binary.len() <= 1000);
        for b in m.binary {
            assert!(streamed.insert(b));
        }
    }
    assert_eq!((streamed.len(), messages), (25_000, 25));
    // Sequences: STRONG batches are consecutive runs; streams too.
    let r = client
        .next_sequence(NextSequenceRequest {
            store: "main".into(),
            key: "g".into(),
            increment: Increment::Strong as i32,
            count: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.ids, (1..=10).collect::<Vec<i64>>());
    let mut stream = client
        .stream_sequence(StreamSequenceRequest {
            store: "main".into(),
            key: "g".into(),
            increment: Increment::Strong as i32,
            total: 2500,
            batch: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        all.extend(m.ids);
    }
    assert_eq!(all, (11..=2510).collect::<Vec<i64>>());
    // Errors.
    let bad = [
        (
            client
                .next_ids(NextIdsRequest::default())
                .await
                .unwrap_err(),
            "kind: expected",
        ),
        (
            client
                .next_ids(NextIdsRequest {
                    kind: Kind::Ulid as i32,
                    count: 10_001,
                    ..Default::default()
                })
                .await
                .unwrap_err(),
            "count: expected 1 to 10000",
        ),
        (
            client
                .next_ids(NextIdsRequest {
                    kind: Kind::Sno as i32,
                    meta: Some(300),
                    ..Default::default()
                })
                .await
                .unwrap_err(),
            "meta: expected 0 to 255",
        ),
        (
            client
                .next_sequence(NextSequenceRequest {
                    store: "nope".into(),
                    key: "k".into(),
                    ..Default::default()
                })
                .await
                .unwrap_err(),
            "Sequencer store nope not found",
        ),
        (
            client
                .stream_ids(StreamIdsRequest {
                    kind: Kind::Snowflake as i32,
                    total: 0,
                    ..Default::default()
                })
                .await
                .unwrap_err(),
            "total: expected 1 to",
        ),
    ];
    for (status, words) in bad {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(words), "{status:?}");
    }
    let strong_on_snowflake = client
        .next_sequence(NextSequenceRequest {
            store: "ids".into(),
            key: "k".into(),
            increment: Increment::Strong as i32,
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(strong_on_snowflake.code(), Code::FailedPrecondition);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let url = format!("http://{}", node.grpc);
    let channel = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "floe.v1.Floe", "spec.proto.runtime.v1.Runtime"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, 1, "{service:?} is SERVING");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("{answer:?}");
    };
    let names: HashSet<String> = list.service.into_iter().map(|s| s.name).collect();
    let served = [
        "floe.v1.Floe",
        "floe.v1.Admin",
        "spec.proto.runtime.v1.Runtime",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ];
    for name in served {
        assert!(names.contains(name), "{names:?}");
    }
    // The health service's file is served too: a reflection client can call it.
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(
            "grpc.health.v1.Health".into(),
        )),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = answer.message_response else {
        panic!("{answer:?}");
    };
    // The fields of google.protobuf.FileDescriptorProto read here (prost skips the others).
    #[derive(Clone, PartialEq, prost::Message)]
    struct File {
        #[prost(string, tag = "2")]
        package: String,
        #[prost(message, repeated, tag = "6")]
        service: Vec<Service>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Service {
        #[prost(string, tag = "1")]
        name: String,
    }
    let file = <File as prost::Message>::decode(files.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!(file.package, "grpc.health.v1");
    assert!(file.service.iter().any(|s| s.name == "Health"), "{file:?}");
    // v1alpha (older grpcurl and grpc_cli) lists the same services.
    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        let mut reflection = ServerReflectionClient::new(channel);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = reflection
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let answer = answers.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("{answer:?}");
        };
        let names: HashSet<String> = list.service.into_iter().map(|s| s.name).collect();
        for name in served {
            assert!(names.contains(name), "{names:?}");
        }
    }
    node.stop().await;
}

/// Many callers over both protocols at once: no ID of any kind repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_never_get_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(Node::start(&config(dir.path())).await);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let node = Arc::clone(&node);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut client = node.client().await;
            for round in 0..20 {
                let kind = KINDS[(i + round) % KINDS.len()];
                if i % 2 == 0 {
                    let (code, body) =
                        http(&node.http, "GET", &format!("/v1/ids/{kind}?count=50")).await;
                    assert_eq!(code, 200, "{body}");
                    got.extend(texts(&body).into_iter().map(|t| format!("{kind}:{t}")));
                } else {
                    let k = match kind {
                        "snowflake" => Kind::Snowflake,
                        "sno" => Kind::Sno,
                        "lexical" => Kind::Lexical,
                        "uuid7" => Kind::Uuid7,
                        _ => Kind::Ulid,
                    };
                    let r = client
                        .next_ids(NextIdsRequest {
                            kind: k as i32,
                            count: 50,
                            with_text: true,
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    got.extend(r.text.into_iter().map(|t| format!("{kind}:{t}")));
                }
                let (_, body) = http(&node.http, "GET", "/v1/sequencer/main/c?count=25").await;
                got.extend(texts(&body).into_iter().map(|t| format!("seq:{t}")));
            }
            got
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id.clone()), "{id} twice");
        }
    }
    assert_eq!(seen.len(), 8 * 20 * (50 + 25));
    Arc::into_inner(node).unwrap().stop().await;
}

/// A graceful stop keeps the unused tail of a WEAK segment; the restart serves it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restart_skips_no_weak_id() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path())).await;
    let (_, body) = http(&node.http, "GET", "/v1/sequencer/main/t?count=7").await;
    assert_eq!(texts(&body).last().unwrap(), "7");
    node.stop().await;
    let node = Node::start(&config(dir.path())).await;
    let (_, body) = http(&node.http, "GET", "/v1/sequencer/main/t").await;
    assert_eq!(body["next_id"], "8", "the restart continues the segment");
    node.stop().await;
}

/// A stream read slowly for longer than the idle timeout is served to its end: a request is
/// under way until its answer's last frame, so its connection is not idle meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_idle_timeout_is_served_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.limits.idle_timeout_secs = 1;
    c.limits.header_timeout_secs = 1;
    let node = Node::start(&c).await;
    let mut client = node.client().await;
    let mut stream = client
        .stream_ids(StreamIdsRequest {
            // 7 MB in messages of 180 KB, more than the client's HTTP/2 windows (2 MB a
            // stream): the server cannot send far ahead of the reader.
            kind: Kind::Ulid as i32,
            total: 400_000,
            batch: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let started = std::time::Instant::now();
    let mut got = 0;
    while let Some(m) = stream.message().await.unwrap() {
        got += m.binary.len();
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    }
    assert_eq!(got, 400_000);
    assert!(started.elapsed() > std::time::Duration::from_secs(2));
    node.stop().await;
}

/// `ids.kinds` picks the kinds served: a kind left out answers 503 and leases nothing (UUIDv7,
/// served here, keeps its own time bound and no worker ID), and `kinds = []` is a sequencer
/// that keeps no worker ID and no time bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_left_out_are_not_served_and_lease_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.stores.remove("ids");
    c.snowflake.named.clear();
    c.ids.kinds = vec!["uuid7".into()];
    let node = Node::start(&c).await;
    let (code, _) = http(&node.http, "GET", "/v1/ids/uuid7").await;
    assert_eq!(code, 200);
    for kind in ["snowflake", "sno", "lexical", "ulid"] {
        let (code, body) = http(&node.http, "GET", &format!("/v1/ids/{kind}")).await;
        assert_eq!(code, 503, "{kind}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("not served here"),
            "{body}"
        );
    }
    let (code, _, _) = http_with(&node.http, "GET", "/api/snowflake/get/x", &[]).await;
    assert_eq!(code, 500, "Leaf's route answers a failure as Leaf does");
    let mut client = node.client().await;
    let status = client
        .next_ids(NextIdsRequest {
            kind: Kind::Sno as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let (code, body) = http(&node.http, "GET", "/v1/sequencer/main/k").await;
    assert_eq!((code, body["next_id"].as_str()), (200, Some("1")));
    node.stop().await;
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(
            |n| (n.starts_with("horizon-") && !n.starts_with("horizon-uuid7."))
                || n.starts_with("registry")
        ),
        "nothing leased, no time bound kept but UUIDv7's: {names:?}"
    );
    assert!(names.iter().any(|n| n == "horizon-uuid7.json"), "{names:?}");
}

/// A second server on a state directory in use is refused before it leases anything: the
/// directory's own lock (`serve.lock`) is its first step, and the error names the holder.
#[tokio::test]
async fn a_second_server_on_a_state_directory_in_use_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = Node::start(&config(dir.path())).await;
    let mut second = config(dir.path());
    // Another identity: it would lease worker IDs of its own.
    second.registry.port = Some(41_001);
    let e = common::start_server(&second)
        .await
        .map(|_| ())
        .expect_err("a second server on one state directory");
    assert_eq!(e.kind, floe_server::StartErrorKind::Refused, "{e}");
    assert!(
        e.message.contains("in use by another floe serve")
            && e.message.contains(&format!("(pid {})", std::process::id()))
            && e.message.contains("serve.lock"),
        "{e}"
    );
    let registry = floe_registry::open(&format!("file://{}", dir.path().display()))
        .await
        .unwrap();
    for service in ["floe", "floe-snowflake-tw", "floe-sno", "floe-lexical"] {
        let records = registry.list(service).await.unwrap();
        assert!(
            records.iter().all(|r| r.identity.port != 41_001),
            "{service}: the refused server leased {records:?}"
        );
    }
    first.stop().await;
    // Stopped, the directory serves again.
    let again = Node::start(&config(dir.path())).await;
    again.stop().await;
}

/// A start that fails after leasing (here its HTTP address is taken) releases what it took, as
/// a graceful stop does: the durable time bound of every worker ID it leased is brought back
/// to now, not left a second ahead (a restart then waits for nothing), and each ID's claim
/// ends.
#[tokio::test]
async fn a_start_that_fails_releases_the_worker_ids_it_leased() {
    use floe_core::clock::Clock;
    let (registry_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = format!("file://{}", registry_dir.path().display());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = config(dir.path());
    c.registry.url = Some(url.clone());
    c.registry.port = Some(41_001);
    c.listen.http = taken.local_addr().unwrap().to_string();
    let e = common::start_server(&c)
        .await
        .map(|_| ())
        .expect_err("an HTTP address in use");
    assert!(e.message.contains("listen.http"), "{e}");
    let now_ms = floe_core::clock::SystemClock.now_nanos() / 1_000_000;
    let registry = floe_registry::open(&url).await.unwrap();
    let mut leased = 0;
    for (service, slot) in [
        ("floe", "snowflake"),
        ("floe-snowflake-tw", "snowflake-tw"),
        ("floe-sno", "sno"),
        ("floe-lexical", "lexical"),
    ] {
        for record in registry.list(service).await.unwrap() {
            leased += 1;
            let file = floe_registry::horizon::HorizonFile::open(
                dir.path(),
                &format!("{slot}-{}", record.id),
            )
            .unwrap();
            let bound = file.load().unwrap().unwrap();
            assert!(
                bound <= now_ms,
                "{slot}: worker {}: the time bound was left {} ms ahead by a start that failed",
                record.id,
                bound - now_ms
            );
        }
    }
    assert_eq!(leased, 4, "snowflake default and tw, sno, lexical");
    // Its directory's lock went with it.
    c.listen.http = "127.0.0.1:0".into();
    Node::start(&c).await.stop().await;
}
