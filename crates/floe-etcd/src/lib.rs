//! A small etcd v3 client: just what floe's etcd registry and store need.
//!
//! - [`Client::connect`] to `host:port` endpoints (plain HTTP/2; requests balanced over them),
//!   every call bounded by a timeout;
//! - key-value calls: [`Client::get`], [`Client::get_prefix`], [`Client::put`],
//!   [`Client::delete`];
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

use std::fmt;
use std::future::Future;
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
            Error::Transport(e) => write!(f, "transport error: {e}"),
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
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    /// The bound on a whole call: a connection, then the answer.
    deadline: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("deadline", &self.deadline)
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
    /// A client of the cluster at `endpoints` (`host:port`, or `http://host:port`). Connections
    /// are made when first needed (so an unreachable cluster shows at the first call) and
    /// made again after a failure. Must be called within a Tokio runtime.
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
        let channel = Channel::balance_list(list.into_iter());
        Ok(Client {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
            deadline: options.connect_timeout.saturating_add(options.timeout),
        })
    }

    /// Runs `call` within the client's deadline.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.deadline, call).await {
            Ok(answer) => Ok(answer?.into_inner()),
            Err(_) => Err(Error::Timeout(self.deadline)),
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
        self.bounded(self.kv.clone().range(request)).await
    }

    /// Every key that starts with `prefix`.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn get_prefix(&self, prefix: impl Into<Vec<u8>>) -> Result<RangeResponse, Error> {
        let key = prefix.into();
        let request = RangeRequest {
            range_end: prefix_end(&key),
            key,
            ..Default::default()
        };
        self.bounded(self.kv.clone().range(request)).await
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
        self.bounded(self.kv.clone().put(request)).await
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
        self.bounded(self.kv.clone().delete_range(request)).await
    }

    /// Runs a transaction: `succeeded` says whether its comparisons held.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        self.bounded(self.kv.clone().txn(txn.0)).await
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
        self.bounded(self.lease.clone().lease_grant(request)).await
    }

    /// Ends lease `id` now: the keys attached to it are deleted.
    ///
    /// # Errors
    /// The cluster's (e.g. `NOT_FOUND` for a lease already gone) or the connection's.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Error> {
        self.bounded(self.lease.clone().lease_revoke(LeaseRevokeRequest { id }))
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
            let mut answers = self
                .lease
                .clone()
                .lease_keep_alive(requests)
                .await?
                .into_inner();
            answers.message().await
        };
        match tokio::time::timeout(self.deadline, round).await {
            Ok(answer) => Ok(answer?),
            Err(_) => Err(Error::Timeout(self.deadline)),
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
        self.bounded(self.lease.clone().lease_time_to_live(request))
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
