//! A request that is not gRPC at the gRPC port (a `curl` at the wrong port) is answered with one
//! line naming the HTTP listener: HTTP/1 with 426, HTTP/2 without gRPC's content type with 415;
//! gRPC goes on being served on the same port, the same connection too. (Over TLS:
//! security.rs.)

use std::time::Duration;

use crate::common::{full_config, start_server, Node};
use axum::http;
use floe_server::proto_floe::{Kind, NextIdsRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `request` written to `addr` as it is; the whole answer, up to the server's close.
pub(crate) async fn raw(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("the server closes the connection after its answer")
        .unwrap();
    String::from_utf8(got).unwrap()
}

/// The body of an HTTP/1 answer, after its header block.
fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

async fn three_ulids(node: &Node) {
    let ids = node
        .client()
        .await
        .next_ids(NextIdsRequest {
            kind: Kind::Ulid as i32,
            count: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids.binary.len().max(ids.numbers.len()), 3, "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_at_the_grpc_port_is_told_where_the_http_api_is() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&full_config(dir.path())).await;
    let hint = format!(
        "this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on http://{}/\n",
        node.http
    );
    for request in [
        "GET /v1/ids/ulid HTTP/1.1\r\nHost: floe\r\n\r\n",
        "POST /v1/sequencer/main/k HTTP/1.1\r\nHost: floe\r\nContent-Length: 0\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
    ] {
        let answer = raw(&node.grpc, request).await;
        // Answered in the request's version (HTTP/1.0 or 1.1).
        assert!(answer.starts_with("HTTP/1."), "{answer}");
        assert!(
            answer[8..].starts_with(" 426 Upgrade Required\r\n"),
            "{answer}"
        );
        let head = answer.to_ascii_lowercase();
        assert!(head.contains("\r\nupgrade: h2c\r\n"), "{answer}");
        assert!(
            head.contains("\r\ncontent-type: text/plain; charset=utf-8\r\n"),
            "{answer}"
        );
        assert_eq!(body(&answer), hint, "{request}");
    }
    // Nothing was issued: the sequence starts at 1.
    let (status, json) = crate::common::http(&node.http, "GET", "/v1/sequencer/main/k").await;
    assert_eq!((status, json["next_id"].as_str()), (200, Some("1")));
    // gRPC on the same port, as before.
    three_ulids(&node).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_without_grpc_content_type_is_told_too_and_grpc_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&full_config(dir.path())).await;
    let (mut send, conn) = crate::limits::h2_connect(&node.grpc).await;
    // curl --http2-prior-knowledge http://GRPC/v1/ids/ulid
    let request = http::Request::get(format!("http://{}/v1/ids/ulid", node.grpc))
        .body(())
        .unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 415);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(
        String::from_utf8(text).unwrap(),
        format!(
            "this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on http://{}/\n",
            node.http
        )
    );
    // HEAD (curl -I --http2-prior-knowledge): the 415's headers, no body, a stream that ends
    // cleanly (a body once broke it: PROTOCOL_ERROR; found by hand on the release binary).
    let request = http::Request::head(format!("http://{}/v1/ids/ulid", node.grpc))
        .body(())
        .unwrap();
    let (response, _) = send.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 415);
    let mut body = response.into_body();
    assert!(body.data().await.is_none(), "HEAD: no body");
    drop(send);
    conn.abort();
    three_ulids(&node).await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_http_listener_the_hint_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = full_config(dir.path());
    config.listen.http = "off".into();
    let server = start_server(&config).await.unwrap();
    assert!(server.http_addr().is_none());
    let grpc = server.grpc_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let answer = raw(&grpc, "GET / HTTP/1.1\r\nHost: floe\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 426 "), "{answer}");
    assert_eq!(
        body(&answer),
        "this is floe's gRPC port (gRPC over HTTP/2); this server has no HTTP listener\n"
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
