//! The server in-process on 127.0.0.1:0, and clients that write what they send byte by byte.
#![allow(dead_code)] // each test binary uses a part of them

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_sequencer::{Key, SeqError, Sequencer, ServeOptions, Store, StoreHandle};
use floe_server::Limits;
use prost::bytes::{Buf, BufMut};
use tokio::net::TcpListener;

/// A store whose server is down, and says where it is.
#[derive(Debug)]
pub struct Down;

#[async_trait]
impl Store for Down {
    fn kind(&self) -> &'static str {
        "down"
    }
    async fn reserve(&self, _: &Key, _: u32) -> Result<i64, SeqError> {
        Err(SeqError::unavailable(
            "down: cannot write /var/lib/secret/sequences.redb: connection refused",
        ))
    }
    async fn raise(&self, _: &Key, _: i64) -> Result<(), SeqError> {
        Err(SeqError::unavailable("down: connection refused"))
    }
}

pub struct Running {
    pub grpc: String,
    pub http: String,
    pub sequencer: Arc<Sequencer>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

pub async fn start(stores: Vec<(&str, Arc<dyn Store>)>) -> Running {
    start_within(stores, Limits::default()).await
}

pub async fn start_within(stores: Vec<(&str, Arc<dyn Store>)>, limits: Limits) -> Running {
    let mut seq = Sequencer::new();
    for (name, store) in stores {
        seq.add(StoreHandle::new(name, store, ServeOptions::default()));
    }
    let sequencer = Arc::new(seq);
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (g, h) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = Arc::clone(&sequencer);
    let task = tokio::spawn(async move {
        // The requests below name the host "floe".
        let hosts = vec!["floe".to_string()];
        floe_server::serve(served, Some(grpc), Some(http), limits, hosts, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Running {
        grpc: g.to_string(),
        http: h.to_string(),
        sequencer,
        stop: Some(stop),
        task,
    }
}

impl Running {
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub async fn client(
        &self,
    ) -> floe_server::proto::runtime_client::RuntimeClient<tonic::transport::Channel> {
        floe_server::proto::runtime_client::RuntimeClient::connect(self.grpc_url())
            .await
            .unwrap()
    }

    /// Asks the server to stop and waits until `serve` returns, at most `within`.
    pub async fn stop_within(mut self, within: Duration) -> Arc<Sequencer> {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(within, self.task)
            .await
            .expect("serve returned in time")
            .unwrap();
        self.sequencer
    }

    pub async fn stop(self) {
        self.stop_within(Duration::from_secs(30)).await;
    }
}

/// One HTTP/1.1 request (`Connection: close`, with `headers`, each "Name: value"; `Host: floe`
/// unless they name the host), and its status, raw header block and body (JSON when it
/// parses). floe-testkit's client, on a blocking thread: the server runs on this runtime.
pub async fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[&str],
) -> (u16, String, serde_json::Value) {
    let (addr, method, path) = (addr.to_string(), method.to_string(), path.to_string());
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let answer = tokio::task::spawn_blocking(move || {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        floe_testkit::http::request(&addr, "floe", &method, &path, &headers)
    })
    .await
    .unwrap()
    .unwrap();
    let body = serde_json::from_str(&answer.body).unwrap_or(serde_json::Value::String(answer.body));
    (answer.status, answer.head, body)
}

pub async fn http(addr: &str, method: &str, path: &str) -> (u16, serde_json::Value) {
    let (code, _, body) = http_with(addr, method, path, &[]).await;
    (code, body)
}

/// The next STRONG ID of `key` in `store`, over HTTP (floe-testkit's, on a blocking thread:
/// a 200 with one, else the test fails with the status and body).
pub async fn next_strong(addr: &str, store: &str, key: &str) -> i64 {
    let (addr, store, key) = (addr.to_string(), store.to_string(), key.to_string());
    tokio::task::spawn_blocking(move || floe_testkit::http::next_strong(&addr, &store, &key))
        .await
        .unwrap()
        .unwrap()
}

/// A codec that sends bytes as they are and returns the reply's bytes: what a client with a
/// broken encoder (or an attacker) puts on the wire.
#[derive(Debug, Clone, Default)]
pub struct RawCodec;

#[derive(Debug, Clone, Default)]
pub struct RawCoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCoder;
    type Decoder = RawCoder;
    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }
    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

impl tonic::codec::Encoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
    }
}

/// `bytes` as a GetNextId request on Layotto's method path, with `metadata` (name, value).
pub async fn raw_call(
    grpc_url: &str,
    bytes: Vec<u8>,
    metadata: &[(&'static str, &str)],
) -> Result<Vec<u8>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(grpc_url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(bytes);
    for (name, value) in metadata {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/spec.proto.runtime.v1.Runtime/GetNextId",
    );
    grpc.unary(request, path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// The configuration of a whole server serving every ID kind: an embedded store `main` (also
/// Leaf's), a Snowflake store `ids`, a named Twitter layout `tw`, on 127.0.0.1:0.
pub fn full_config(state: &std::path::Path) -> floe_server::ServerConfig {
    let mut c = floe_server::ServerConfig {
        state_dir: state.to_path_buf(),
        ..floe_server::ServerConfig::default()
    };
    c.listen.grpc = "127.0.0.1:0".into();
    c.listen.http = "127.0.0.1:0".into();
    // The requests of this module name the host "floe".
    c.listen.allow_hosts = vec!["floe".into()];
    c.stores.insert("main".into(), "embedded".into());
    c.stores.insert("ids".into(), "snowflake".into());
    c.snowflake.named.insert(
        "tw".into(),
        floe_server::config::LayoutConfig {
            layout: "twitter".into(),
            ..Default::default()
        },
    );
    c.sequencer.leaf_store = Some("main".into());
    c
}

/// A server started from `config`, checked at this moment.
pub async fn start_server(
    config: &floe_server::ServerConfig,
) -> Result<floe_server::Server, floe_server::StartError> {
    start_on(config, Arc::new(floe_core::clock::SystemClock)).await
}

/// A server started from `config` on `clock`, checked at the clock's moment.
pub async fn start_on(
    config: &floe_server::ServerConfig,
    clock: floe_server::ServerClock,
) -> Result<floe_server::Server, floe_server::StartError> {
    let now_ms = clock.now_nanos() / 1_000_000;
    floe_server::Server::start(config.check(now_ms)?, clock).await
}

/// A whole server assembled from its configuration ([`floe_server::Server`]), running on this
/// runtime until [`Node::stop`].
pub struct Node {
    pub http: String,
    pub grpc: String,
    /// What SIGHUP calls in `floe serve`.
    pub reloader: floe_server::Reloader,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Node {
    pub async fn start(config: &floe_server::ServerConfig) -> Node {
        Node::start_on(config, Arc::new(floe_core::clock::SystemClock)).await
    }

    /// A node reading `clock`.
    pub async fn start_on(
        config: &floe_server::ServerConfig,
        clock: floe_server::ServerClock,
    ) -> Node {
        let server = start_on(config, clock).await.unwrap();
        let http = server.http_addr().unwrap().to_string();
        let grpc = server.grpc_addr().unwrap().to_string();
        let reloader = server.reloader();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Node {
            http,
            grpc,
            reloader,
            stop: Some(stop),
            task,
        }
    }

    pub async fn client(
        &self,
    ) -> floe_server::proto_floe::floe_client::FloeClient<tonic::transport::Channel> {
        floe_server::proto_floe::floe_client::FloeClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}
