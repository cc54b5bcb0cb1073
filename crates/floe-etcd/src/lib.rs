//! A small etcd v3 client: just what floe's etcd registry and store need.
//!
//! - [`Client::connect`] to `host:port` endpoints (plain HTTP/2): calls go to one endpoint at
//!   a time, the next one taking over when it cannot be connected to; every call bounded by a
//!   timeout;
//! - key-value calls: [`Client::get`], [`Client::get_prefix`], [`Client::get_page`],
//!   [`Client::put`], [`Client::delete`];
//! - transactions, e.g. a compare-and-swap on a key's revision: [`Txn`] with [`Compare`] and
//!   [`TxnOp`];
//! - leases: [`Client::lease_grant`], [`Client::lease_revoke`],
//!   [`Client::lease_keep_alive_once`], [`Client::lease_time_to_live`].
//!
//! The message types and gRPC clients are generated at build time from a subset of etcd's own
//! API definitions (`proto/`, Apache-2.0, from etcd's `api/etcdserverpb/rpc.proto` and
//! `api/mvccpb/kv.proto`) with protox and tonic-prost-build: building this crate needs no
//! `protoc`. Replies are the generated messages as they are ([`RangeResponse`],
//! [`TxnResponse`], ...), with their fields public.
#![warn(unreachable_pub)]

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// The generated code: etcd's `etcdserverpb` and `mvccpb` packages (the subset in `proto/`).
#[allow(missing_docs, clippy::all, missing_debug_implementations)]
pub mod pb {
    /// etcd's `mvccpb` package: the key-value pair.
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    /// etcd's `etcdserverpb` package: the KV and Lease services and their messages.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::{
    compare, request_op, response_op, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
pub use pb::etcdserverpb::{
    DeleteRangeResponse, LeaseGrantResponse, LeaseKeepAliveResponse, LeaseRevokeResponse,
    LeaseTimeToLiveResponse, PutResponse, RangeResponse, ResponseHeader, TxnResponse,
};
pub use pb::mvccpb::KeyValue;

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    /// Bad arguments, e.g. no endpoint.
    InvalidArgs(String),
    /// An endpoint that is not a valid address.
    InvalidUri(String),
    /// The connection failed.
    Transport(tonic::transport::Error),
    /// etcd (or the gRPC layer) answered with an error status, e.g. `UNAVAILABLE` when no
    /// endpoint can be reached.
    Status(tonic::Status),
    /// No answer within the client's time limit.
    Timeout(Duration),
}

impl Error {
    /// Whether the error is the caller's configuration (a bad endpoint or argument) rather than
    /// an unreachable or failing cluster.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::InvalidArgs(_) | Error::InvalidUri(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgs(e) => write!(f, "invalid arguments: {e}"),
            Error::InvalidUri(e) => write!(f, "invalid uri: {e}"),
            Error::Transport(e) => {
                // tonic's own text is just "transport error": what happened is in its causes.
                f.write_str("transport error")?;
                let mut said = vec!["transport error".to_string()];
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    let text = c.to_string();
                    if !said.iter().any(|s| s.contains(&text)) {
                        write!(f, ": {text}")?;
                        said.push(text);
                    }
                    cause = c.source();
                }
                Ok(())
            }
            Error::Status(e) => write!(f, "grpc request error: {e}"),
            Error::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Transport(e) => Some(e),
            Error::Status(e) => Some(e),
            _ => None,
        }
    }
}

impl From<tonic::Status> for Error {
    fn from(e: tonic::Status) -> Self {
        Error::Status(e)
    }
}

/// How long to wait: for a connection to an endpoint, and for the answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The limit on making one TCP/HTTP/2 connection (default 3 s).
    pub connect_timeout: Duration,
    /// The limit on one request's answer once sent (default 3 s).
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(3),
        }
    }
}

impl ConnectOptions {
    /// Both limits the same.
    pub fn both(limit: Duration) -> Self {
        ConnectOptions {
            connect_timeout: limit,
            timeout: limit,
        }
    }
}

/// A client of an etcd cluster. Cheap to clone: clones share the connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    /// The node calls go to first: the last one a connection was made to.
    current: AtomicUsize,
    /// The bound on a whole call: connections, then the answer.
    deadline: Duration,
}

/// One endpoint, and its connection once made (dropped after a failure, made again on the
/// next call).
struct Node {
    endpoint: Endpoint,
    channel: Mutex<Option<Channel>>,
}

impl Node {
    fn cached(&self) -> Option<Channel> {
        self.channel
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, channel: Option<Channel>) {
        *self.channel.lock().unwrap_or_else(PoisonError::into_inner) = channel;
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoints: Vec<String> = self
            .inner
            .nodes
            .iter()
            .map(|n| n.endpoint.uri().to_string())
            .collect();
        f.debug_struct("Client")
            .field("endpoints", &endpoints)
            .field("deadline", &self.inner.deadline)
            .finish_non_exhaustive()
    }
}

/// The end of the range of keys starting with `prefix` (etcd's convention: the prefix with its
/// last byte below 0xff incremented; `\0` for every key).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Client {
    /// A client of the cluster at `endpoints` (`host:port`, or `http://host:port`). A
    /// connection is made when first needed (so an unreachable cluster shows at the first
    /// call), to the endpoint last used or else the next one that accepts it, and made again
    /// after a failure. A call is never sent twice: one that failed once sent is the caller's
    /// to retry.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`] for no endpoint, [`Error::InvalidUri`] for a bad one.
    pub fn connect<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: ConnectOptions,
    ) -> Result<Client, Error> {
        let mut list = Vec::new();
        for e in endpoints {
            let e = e.as_ref().trim();
            let url = if e.starts_with("http://") {
                e.to_string()
            } else {
                format!("http://{e}")
            };
            let endpoint = Endpoint::from_shared(url)
                .map_err(|err| Error::InvalidUri(format!("{e:?}: {err}")))?
                .connect_timeout(options.connect_timeout)
                .timeout(options.timeout);
            list.push(endpoint);
        }
        if list.is_empty() {
            return Err(Error::InvalidArgs("no endpoint".into()));
        }
        let nodes = list
            .into_iter()
            .map(|endpoint| Node {
                endpoint,
                channel: Mutex::new(None),
            })
            .collect();
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                current: AtomicUsize::new(0),
                deadline: options.connect_timeout.saturating_add(options.timeout),
            }),
        })
    }

    /// A connection: the current node's, or a new one to the first node from it on that
    /// accepts one. `Err`: none did (so nothing was sent).
    async fn channel(&self) -> Result<(usize, Channel), Error> {
        let nodes = &self.inner.nodes;
        let start = self.inner.current.load(Ordering::Relaxed);
        let mut failed = None;
        for i in 0..nodes.len() {
            let index = (start + i) % nodes.len();
            let node = &nodes[index];
            if let Some(channel) = node.cached() {
                return Ok((index, channel));
            }
            match node.endpoint.connect().await {
                Ok(channel) => {
                    node.set(Some(channel.clone()));
                    self.inner.current.store(index, Ordering::Relaxed);
                    return Ok((index, channel));
                }
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.map_or_else(
            || Error::InvalidArgs("no endpoint".into()),
            Error::Transport,
        ))
    }

    /// After a failed call on node `index`: a status made on this side (the connection broke)
    /// or etcd's UNAVAILABLE (e.g. no leader) drops its connection, so that the next call
    /// connects again, to another node if this one does not answer.
    fn failed(&self, index: usize, status: &tonic::Status) {
        let broken = std::error::Error::source(status).is_some();
        if broken || status.code() == tonic::Code::Unavailable {
            self.inner.nodes[index].set(None);
            if self.inner.nodes.len() > 1 {
                // Start from the next node, so a dead one is not always tried first.
                let next = (index + 1) % self.inner.nodes.len();
                let _ = self.inner.current.compare_exchange(
                    index,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Runs `call` on a connection, within the client's deadline.
    async fn bounded<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let work = async {
            let (index, channel) = self.channel().await?;
            call(channel).await.map_err(|status| {
                self.failed(index, &status);
                Error::Status(status)
            })
        };
        match tokio::time::timeout(self.inner.deadline, work).await {
            Ok(answer) => Ok(answer?.into_inner()),
            Err(_) => Err(Error::Timeout(self.inner.deadline)),
        }
    }

    /// The key `key`, if it exists (`kvs` empty otherwise).
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn get(&self, key: impl Into<Vec<u8>>) -> Result<RangeResponse, Error> {
        let request = RangeRequest {
            key: key.into(),
            ..Default::default()
        };
        self.bounded(|c| async move { KvClient::new(c).range(request).await })
            .await
    }

    /// Every key that starts with `prefix`.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn get_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse, Error> {
        self.get_page(prefix, None, 0, false).await
    }

    /// A page of the keys that start with `prefix`, in key order (by bytes): at most `limit`
    /// (etcd's 0: all), those after the key `after` when given; only their names with
    /// `keys_only`.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn get_page(
        &self,
        prefix: impl Into<Vec<u8>>,
        after: Option<&[u8]>,
        limit: i64,
        keys_only: bool,
    ) -> Result<RangeResponse, Error> {
        let prefix = prefix.into();
        let range_end = prefix_end(&prefix);
        let key = match after {
            // The smallest key above `after`: `after` and a NUL byte.
            Some(after) if after >= prefix.as_slice() => [after, &[0]].concat(),
            _ => prefix,
        };
        let request = RangeRequest {
            key,
            range_end,
            limit,
            keys_only,
            ..Default::default()
        };
        self.bounded(|c| async move { KvClient::new(c).range(request).await })
            .await
    }

    /// Writes `value` at `key`, attached to `lease` (0: none).
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<PutResponse, Error> {
        let request = TxnOp::put(key, value, lease).into_put();
        self.bounded(|c| async move { KvClient::new(c).put(request).await })
            .await
    }

    /// Deletes the key `key`.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn delete(&self, key: impl Into<Vec<u8>>) -> Result<DeleteRangeResponse, Error> {
        let request = DeleteRangeRequest {
            key: key.into(),
            ..Default::default()
        };
        self.bounded(|c| async move { KvClient::new(c).delete_range(request).await })
            .await
    }

    /// Runs a transaction: `succeeded` says whether its comparisons held.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        self.bounded(|c| async move { KvClient::new(c).txn(txn.0).await })
            .await
    }

    /// A new lease of `ttl_secs` seconds (its `id`).
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Error> {
        let request = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        self.bounded(|c| async move { LeaseClient::new(c).lease_grant(request).await })
            .await
    }

    /// Ends lease `id` now: the keys attached to it are deleted.
    ///
    /// # Errors
    /// The cluster's (e.g. `NOT_FOUND` for a lease already gone) or the connection's.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Error> {
        let request = LeaseRevokeRequest { id };
        self.bounded(|c| async move { LeaseClient::new(c).lease_revoke(request).await })
            .await
    }

    /// Keeps lease `id` alive once: its new TTL, 0 (or less) when the lease is gone. `None`
    /// when the stream ended with no answer.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn lease_keep_alive_once(
        &self,
        id: i64,
    ) -> Result<Option<LeaseKeepAliveResponse>, Error> {
        use tokio_stream::StreamExt;
        // The request side stays open until the answer is read (the stream is dropped then).
        let requests =
            tokio_stream::once(LeaseKeepAliveRequest { id }).chain(tokio_stream::pending());
        let round = async {
            let (index, channel) = self.channel().await?;
            let answer = async {
                let mut answers = LeaseClient::new(channel)
                    .lease_keep_alive(requests)
                    .await?
                    .into_inner();
                answers.message().await
            };
            answer.await.map_err(|status| {
                self.failed(index, &status);
                Error::Status(status)
            })
        };
        match tokio::time::timeout(self.inner.deadline, round).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout(self.inner.deadline)),
        }
    }

    /// Lease `id`'s remaining TTL (-1 when it is gone) and, with `keys`, the keys attached.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn lease_time_to_live(
        &self,
        id: i64,
        keys: bool,
    ) -> Result<LeaseTimeToLiveResponse, Error> {
        let request = LeaseTimeToLiveRequest { id, keys };
        self.bounded(|c| async move { LeaseClient::new(c).lease_time_to_live(request).await })
            .await
    }
}

/// How a [`Compare`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    /// `==`
    Equal,
    /// `>`
    Greater,
    /// `<`
    Less,
    /// `!=`
    NotEqual,
}

impl CompareOp {
    fn result(self) -> compare::CompareResult {
        match self {
            CompareOp::Equal => compare::CompareResult::Equal,
            CompareOp::Greater => compare::CompareResult::Greater,
            CompareOp::Less => compare::CompareResult::Less,
            CompareOp::NotEqual => compare::CompareResult::NotEqual,
        }
    }
}

/// One condition of a [`Txn`].
#[derive(Debug, Clone, PartialEq)]
pub struct Compare(pb::etcdserverpb::Compare);

impl Compare {
    fn new(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        target: compare::CompareTarget,
        value: compare::TargetUnion,
    ) -> Compare {
        Compare(pb::etcdserverpb::Compare {
            result: op.result() as i32,
            target: target as i32,
            key: key.into(),
            target_union: Some(value),
            range_end: Vec::new(),
        })
    }

    /// The key's create revision `op` `revision` (0: the key does not exist).
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Compare {
        Compare::new(
            key,
            op,
            compare::CompareTarget::Create,
            compare::TargetUnion::CreateRevision(revision),
        )
    }

    /// The key's last modification revision `op` `revision` (0: the key does not exist).
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Compare {
        Compare::new(
            key,
            op,
            compare::CompareTarget::Mod,
            compare::TargetUnion::ModRevision(revision),
        )
    }

    /// The key's value `op` `value`.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Compare {
        Compare::new(
            key,
            op,
            compare::CompareTarget::Value,
            compare::TargetUnion::Value(value.into()),
        )
    }
}

/// One operation of a [`Txn`].
#[derive(Debug, Clone, PartialEq)]
pub struct TxnOp(request_op::Request);

impl TxnOp {
    /// Writes `value` at `key`, attached to `lease` (0: none).
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> TxnOp {
        TxnOp(request_op::Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            ..Default::default()
        }))
    }

    /// Reads `key` (its answer: [`TxnGet`]).
    pub fn get(key: impl Into<Vec<u8>>) -> TxnOp {
        TxnOp(request_op::Request::RequestRange(RangeRequest {
            key: key.into(),
            ..Default::default()
        }))
    }

    /// Deletes `key`.
    pub fn delete(key: impl Into<Vec<u8>>) -> TxnOp {
        TxnOp(request_op::Request::RequestDeleteRange(
            DeleteRangeRequest {
                key: key.into(),
                ..Default::default()
            },
        ))
    }

    fn into_put(self) -> PutRequest {
        match self.0 {
            request_op::Request::RequestPut(put) => put,
            _ => unreachable!("only TxnOp::put is turned into a PutRequest"),
        }
    }
}

/// A transaction: if every condition holds, the `and_then` operations, else the `or_else` ones,
/// atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Txn(TxnRequest);

impl Txn {
    /// An empty transaction.
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Adds conditions (all must hold).
    #[must_use]
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Txn {
        self.0.compare.extend(compares.into_iter().map(|c| c.0));
        self
    }

    /// Adds operations run when the conditions hold.
    #[must_use]
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.0
            .success
            .extend(ops.into_iter().map(|o| RequestOp { request: Some(o.0) }));
        self
    }

    /// Adds operations run when they do not.
    #[must_use]
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.0
            .failure
            .extend(ops.into_iter().map(|o| RequestOp { request: Some(o.0) }));
        self
    }
}

/// The answers of a transaction's reads ([`TxnOp::get`]), in order.
pub trait TxnGet {
    /// The key-value pairs read by the transaction's `get` operations, in order.
    fn gets(&self) -> Vec<&RangeResponse>;
}

impl TxnGet for TxnResponse {
    fn gets(&self) -> Vec<&RangeResponse> {
        self.responses
            .iter()
            .filter_map(|r| match &r.response {
                Some(response_op::Response::ResponseRange(range)) => Some(range),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_follow_etcds_convention() {
        assert_eq!(prefix_end(b"/floe/"), b"/floe0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[tokio::test]
    async fn bad_endpoints_are_configuration_errors() {
        let none: [&str; 0] = [];
        let e = Client::connect(none, ConnectOptions::default()).unwrap_err();
        assert!(e.is_config(), "{e}");
        let e = Client::connect(["host:port:bad"], ConnectOptions::default()).unwrap_err();
        assert!(e.is_config(), "{e}");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_fails_within_the_deadline() {
        // A port nobody listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = ConnectOptions::both(Duration::from_millis(300));
        let client = Client::connect([format!("127.0.0.1:{port}")], options).unwrap();
        let started = std::time::Instant::now();
        let e = client.get("/x").await.unwrap_err();
        assert!(!e.is_config(), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
