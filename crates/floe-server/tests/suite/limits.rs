//! Connections that never finish, never start or never end: the server closes them on its own
//! clock (header, idle and request timeouts), caps how many it holds, and always returns from
//! `serve` by the shutdown deadline. These wait on real sockets, with timeouts of a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, next_strong, start_within};
use axum::http;
use floe_sequencer::stores::memory::MemoryStore;
use floe_server::Limits;
use prost::bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECOND: Duration = Duration::from_secs(1);

fn limits() -> Limits {
    Limits {
        header_timeout: SECOND,
        idle_timeout: SECOND,
        request_timeout: SECOND,
        shutdown_timeout: SECOND,
        ..Limits::default()
    }
}

fn mem() -> Vec<(&'static str, Arc<dyn floe_sequencer::Store>)> {
    vec![("mem", Arc::new(MemoryStore::new()))]
}

/// Waits until the server closes `s` (end of file or reset), at most `within`; returns when.
async fn closed_by_server(s: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {} // an answer (a 408, a GOAWAY): read on to the end
            }
        }
    })
    .await
    .expect("the server closed the connection in time");
    started.elapsed()
}

/// An HTTP/2 connection (the client side of h2) whose connection task ends when the server
/// closes it.
pub(crate) async fn h2_connect(
    addr: &str,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    (send, tokio::spawn(conn))
}

/// A GetNextId request's headers on Layotto's path.
fn grpc_request(addr: &str) -> http::Request<()> {
    http::Request::post(format!(
        "http://{addr}/spec.proto.runtime.v1.Runtime/GetNextId"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap()
}

/// GetNextId(store "mem", key "k", STRONG) in gRPC's frame.
fn grpc_frame() -> Bytes {
    let msg = [0x0a, 3, b'm', b'e', b'm', 0x12, 1, b'k', 0x1a, 2, 0x08, 1];
    let mut frame = vec![0, 0, 0, 0, msg.len() as u8];
    frame.extend_from_slice(&msg);
    Bytes::from(frame)
}

/// The grpc-status of an answer: in its headers (trailers-only) or in its trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    let response = response.await.unwrap();
    if let Some(s) = response.headers().get("grpc-status") {
        return s.to_str().unwrap().to_string();
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().unwrap();
    trailers["grpc-status"].to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drops_connections_that_never_finish() {
    // Header and idle timeouts far away: only the shutdown deadline can end these.
    let server = start_within(
        vec![
            ("mem", Arc::new(MemoryStore::new())),
            ("hang", Arc::new(Hang)),
        ],
        Limits {
            header_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(600),
            shutdown_timeout: SECOND,
            ..Limits::default()
        },
    )
    .await;
    // A half-sent HTTP request.
    let mut half = TcpStream::connect(&server.http).await.unwrap();
    half.write_all(b"POST /v1/sequencer/mem/k HTTP/1.1\r\nHost: floe\r\n")
        .await
        .unwrap();
    // A TCP connection to the gRPC port that sends nothing.
    let mut idle = TcpStream::connect(&server.grpc).await.unwrap();
    // An HTTP/2 connection that never sends a request.
    let (_quiet, quiet_conn) = h2_connect(&server.grpc).await;
    // A gRPC request whose body never comes.
    let (mut send, stalled_conn) = h2_connect(&server.grpc).await;
    send = send.ready().await.unwrap();
    let (stalled, _body) = send
        .send_request(grpc_request(&server.grpc), false)
        .unwrap();
    // A gRPC request waiting on its store (whose calls are bounded at 2 s, after the deadline).
    let mut client = server.client().await;
    let waiting = tokio::spawn(async move {
        client
            .get_next_id(floe_server::proto::GetNextIdRequest {
                store_name: "hang".into(),
                key: "k".into(),
                options: None,
                metadata: Default::default(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let sequencer = server.stop_within(Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "waited for the deadline: {took:?}"
    );
    // Every connection was dropped: the server holds nothing of the sequencer any more, so
    // its stores can be closed.
    assert_eq!(Arc::strong_count(&sequencer), 1);
    closed_by_server(&mut half, SECOND).await;
    closed_by_server(&mut idle, SECOND).await;
    for conn in [quiet_conn, stalled_conn] {
        tokio::time::timeout(SECOND, conn)
            .await
            .unwrap()
            .unwrap()
            .ok();
    }
    assert!(tokio::time::timeout(SECOND, stalled)
        .await
        .unwrap()
        .is_err());
    // Dropped with its connection: the client sees the connection end, not an ID.
    assert!(waiting.await.unwrap().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_idle_connections_at_once() {
    let server = start_within(
        mem(),
        Limits {
            shutdown_timeout: Duration::from_secs(600),
            ..Limits::default()
        },
    )
    .await;
    // Keep-alive connections between requests, and an HTTP/2 connection after its request.
    let mut keep_alive = TcpStream::connect(&server.http).await.unwrap();
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: floe\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(keep_alive.read(&mut buf).await.unwrap() > 0);
    let (send, conn) = h2_connect(&server.grpc).await;
    let mut send = send.ready().await.unwrap();
    let (response, mut body) = send
        .send_request(grpc_request(&server.grpc), false)
        .unwrap();
    body.send_data(grpc_frame(), true).unwrap();
    assert_eq!(grpc_status(response).await, "0");

    let sequencer = server.stop_within(Duration::from_secs(5)).await;
    assert_eq!(Arc::strong_count(&sequencer), 1);
    closed_by_server(&mut keep_alive, SECOND).await;
    tokio::time::timeout(SECOND, conn)
        .await
        .unwrap()
        .unwrap()
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed() {
    let server = start_within(mem(), limits()).await;
    let bound = Duration::from_secs(4);
    // Connections that never send a byte, on both ports.
    let mut http_silent = TcpStream::connect(&server.http).await.unwrap();
    let mut grpc_silent = TcpStream::connect(&server.grpc).await.unwrap();
    // An HTTP/2 connection that never sends a request.
    let (_quiet, quiet) = h2_connect(&server.grpc).await;
    // Slowloris: a header line every 200 ms, never the end of the headers.
    let mut slow = TcpStream::connect(&server.http).await.unwrap();
    let slowloris = tokio::spawn(async move {
        slow.write_all(b"GET /v1/sequencer/mem/k HTTP/1.1\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        for i in 0.. {
            if slow
                .write_all(format!("X-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(started.elapsed() < Duration::from_secs(4), "still open");
        }
        started.elapsed()
    });
    // An HTTP/1 keep-alive connection after one request: hyper's header read timeout runs
    // between requests too.
    let mut keep_alive = TcpStream::connect(&server.http).await.unwrap();
    keep_alive
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: floe\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(keep_alive.read(&mut buf).await.unwrap() > 0);
    let answered = Instant::now();
    // An HTTP/2 connection after one request.
    let (send, after) = h2_connect(&server.grpc).await;
    let mut send = send.ready().await.unwrap();
    let (response, mut body) = send
        .send_request(grpc_request(&server.grpc), false)
        .unwrap();
    body.send_data(grpc_frame(), true).unwrap();
    assert_eq!(grpc_status(response).await, "0");

    let took = closed_by_server(&mut http_silent, bound).await;
    assert!(took >= Duration::from_millis(800), "{took:?}");
    closed_by_server(&mut grpc_silent, bound).await;
    closed_by_server(&mut keep_alive, bound).await;
    let took = answered.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    tokio::time::timeout(bound, quiet).await.unwrap().ok();
    tokio::time::timeout(bound, after).await.unwrap().ok();
    let took = slowloris.await.unwrap();
    assert!(took < Duration::from_secs(3), "{took:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_body_never_comes_is_answered_deadline_exceeded() {
    let server = start_within(mem(), limits()).await;
    let (send, _conn) = h2_connect(&server.grpc).await;
    let mut send = send.ready().await.unwrap();
    let started = Instant::now();
    let (response, _body) = send
        .send_request(grpc_request(&server.grpc), false)
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(4), grpc_status(response))
        .await
        .unwrap();
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(
        next_strong(&server.http, "mem", "k").await,
        1,
        "nothing issued"
    );
    server.stop().await;
}

/// A store whose calls never end.
#[derive(Debug)]
struct Hang;

#[async_trait::async_trait]
impl floe_sequencer::Store for Hang {
    fn kind(&self) -> &'static str {
        "hang"
    }
    async fn reserve(
        &self,
        _: &floe_sequencer::Key,
        _: u32,
    ) -> Result<i64, floe_sequencer::SeqError> {
        std::future::pending().await
    }
    async fn raise(&self, _: &floe_sequencer::Key, _: i64) -> Result<(), floe_sequencer::SeqError> {
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slower_than_the_request_timeout_is_answered_at_it() {
    // The store call's own bound is 2 s (ServeOptions::default()); the request's is 1 s.
    let server = start_within(vec![("hang", Arc::new(Hang))], limits()).await;
    let started = Instant::now();
    let (code, body) = common::http(
        &server.http,
        "POST",
        "/v1/sequencer/hang/k?increment=strong",
    )
    .await;
    assert_eq!(
        (code, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("request timeout"),
        "{body}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1900),
        "{took:?}"
    );
    let status = server
        .client()
        .await
        .get_next_id(floe_server::proto::GetNextIdRequest {
            store_name: "hang".into(),
            key: "k".into(),
            options: None,
            metadata: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_allow_max_streams_requests_at_once() {
    let server = start_within(
        mem(),
        Limits {
            max_streams: 3,
            ..Limits::default()
        },
    )
    .await;
    let (send, _conn) = h2_connect(&server.grpc).await;
    let mut send = send.ready().await.unwrap();
    // After one exchange the server's SETTINGS have arrived.
    let (response, mut body) = send
        .send_request(grpc_request(&server.grpc), false)
        .unwrap();
    body.send_data(grpc_frame(), true).unwrap();
    assert_eq!(grpc_status(response).await, "0");
    assert_eq!(send.current_max_send_streams(), 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_connection_cap_a_client_waits_for_a_place() {
    let server = start_within(
        mem(),
        Limits {
            max_connections: 2,
            ..limits()
        },
    )
    .await;
    // Six idle sockets: two are accepted and held until the header timeout, four wait.
    let mut idle = Vec::new();
    for _ in 0..6 {
        idle.push(TcpStream::connect(&server.http).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let id = tokio::time::timeout(
        Duration::from_secs(10),
        next_strong(&server.http, "mem", "k"),
    )
    .await
    .expect("served once idle connections timed out");
    assert_eq!(id, 1);
    let took = started.elapsed();
    // Served only when places were freed: three rounds of two idle connections first.
    assert!(took >= Duration::from_millis(2500), "{took:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_idle_connection_was_closed_reconnects() {
    let server = start_within(mem(), limits()).await;
    let mut client = server.client().await;
    let request = || floe_server::proto::GetNextIdRequest {
        store_name: "mem".into(),
        key: "k".into(),
        options: Some(floe_server::proto::SequencerOptions { increment: 1 }),
        metadata: Default::default(),
    };
    assert_eq!(
        client
            .get_next_id(request())
            .await
            .unwrap()
            .into_inner()
            .next_id,
        1
    );
    // Past the idle timeout the server has closed the connection (GOAWAY); the channel
    // connects again for the next request.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        client
            .get_next_id(request())
            .await
            .unwrap()
            .into_inner()
            .next_id,
        2
    );
    server.stop().await;
}
