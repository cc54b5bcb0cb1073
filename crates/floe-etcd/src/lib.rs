//! A small etcd v3 client: just what floe's etcd registry and store need.
//!
//! - [`Client::connect`] to `host:port` endpoints (plain HTTP/2), or
//!   [`Client::connect_secure`] with TLS, a client certificate and an etcd user ([`Security`],
//!   read from an `etcds://` URL): calls go to one endpoint at a time, the next one taking over
//!   when it cannot be connected to; every call bounded by a timeout;
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

mod probe;
mod security;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use security::Login;
pub use security::{Security, OPTIONS};

/// The generated code: etcd's `etcdserverpb` and `mvccpb` packages (the subset in `proto/`).
#[allow(missing_docs, clippy::all, missing_debug_implementations)]
pub mod pb {
    /// etcd's `mvccpb` package: the key-value pair.
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    /// etcd's `etcdserverpb` package: the KV, Lease and Auth services and their messages.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

use pb::etcdserverpb::auth_client::AuthClient;
use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::{
    compare, request_op, response_op, AuthenticateRequest, DeleteRangeRequest, LeaseGrantRequest,
    LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest,
    RequestOp, TxnRequest,
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
    /// A bad setting, e.g. a certificate or password file that cannot be read or is not PEM:
    /// the message names the URL option.
    Config(String),
    /// TLS set up wrong: a certificate or key file that cannot be read or is not PEM, a server
    /// certificate the CA does not vouch for, a client certificate etcd refuses, plain text to
    /// a TLS port. Says which.
    Tls(String),
    /// etcd refused the user: a wrong user or password, none given where etcd asks for one,
    /// authentication off in etcd while a user is given, or a role without the permission.
    Auth(String),
}

impl Error {
    /// Whether the error is the caller's configuration (a bad endpoint or argument, TLS or
    /// credentials etcd refuses) rather than an unreachable or failing cluster: retrying the
    /// same call will not help.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgs(_)
                | Error::InvalidUri(_)
                | Error::Config(_)
                | Error::Tls(_)
                | Error::Auth(_)
        )
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
            Error::Config(e) => f.write_str(e),
            Error::Tls(e) => write!(f, "TLS: {e}"),
            Error::Auth(e) => write!(f, "authentication: {e}"),
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
    /// TLS and user, as the URL asked.
    security: Security,
    /// The TLS configuration of the last connection made: the certificate files as last read
    /// well, used again when they cannot be read now.
    tls: Mutex<Option<ClientTlsConfig>>,
    /// Why the certificate files could not be read the last time a connection was made, if so.
    reload_error: Mutex<Option<String>>,
    /// The etcd user and its password, if any.
    login: Option<Login>,
    /// The token of the last `Authenticate`, sent as the `token` metadata of every call.
    token: Mutex<Option<Token>>,
    /// One `Authenticate` at a time.
    authenticating: tokio::sync::Mutex<()>,
    /// The number of tokens obtained so far.
    tokens: AtomicU64,
    /// A node whose new connection broke at its first call: [`probe`] may say why.
    suspect: Mutex<Option<usize>>,
}

impl Inner {
    /// The endpoint of node `index` with TLS: the certificate files read again, or the last
    /// ones read well when they cannot be (logged, and kept for [`Client::reload_error`]).
    /// Blocking file I/O.
    fn tls_endpoint(&self, index: usize) -> Result<Endpoint, Error> {
        let endpoint = &self.nodes[index].endpoint;
        let fresh = self.security.tls_config().and_then(|config| {
            let config = config.unwrap_or_default();
            endpoint
                .clone()
                .tls_config(config.clone())
                .map(|e| (e, config))
                .map_err(|e| format!("the certificate files: {}", Error::Transport(e)))
        });
        match fresh {
            Ok((endpoint, config)) => {
                *locked(&self.tls) = Some(config);
                *locked(&self.reload_error) = None;
                Ok(endpoint)
            }
            Err(why) => {
                let last = locked(&self.tls).clone();
                match last.map(|c| endpoint.clone().tls_config(c)) {
                    Some(Ok(endpoint)) => {
                        tracing::warn!(
                            error = %why,
                            "etcd: the certificate files cannot be read again: connecting with the last ones read"
                        );
                        *locked(&self.reload_error) = Some(why);
                        Ok(endpoint)
                    }
                    Some(Err(e)) => Err(Error::Tls(format!(
                        "{why}; the last ones read: {}",
                        Error::Transport(e)
                    ))),
                    None => Err(Error::Config(why)),
                }
            }
        }
    }
}

/// An etcd auth token, and which one it is (so that calls refused with the same token
/// authenticate once).
#[derive(Clone)]
struct Token {
    generation: u64,
    value: MetadataValue<Ascii>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One endpoint, and its connection once made (dropped after a failure, made again on the
/// next call).
struct Node {
    endpoint: Endpoint,
    channel: Mutex<Option<Channel>>,
    /// Whether a call was answered on the connection (a new one is not yet).
    proven: AtomicBool,
}

impl Node {
    fn cached(&self) -> Option<Channel> {
        locked(&self.channel).clone()
    }

    fn set(&self, channel: Option<Channel>) {
        *locked(&self.channel) = channel;
        self.proven.store(false, Ordering::Relaxed);
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
            .field("security", &self.inner.security)
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

/// `message` as a request, with the auth token if any.
fn with_token<T>(message: T, token: Option<MetadataValue<Ascii>>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert("token", token);
    }
    request
}

/// Whether etcd refused a call for its token (expired, or issued before the auth store
/// changed): the call was not applied, and a new token may pass.
fn stale_token(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unauthenticated
        || status.message().contains("revision of auth store is old")
}

/// The TLS error under `error`, if any, as one line saying what to check.
fn tls_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(error);
    while let Some(c) = cause {
        let found = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|e| e.downcast_ref::<rustls::Error>())
        });
        if let Some(e) = found {
            return Some(match e {
                rustls::Error::InvalidCertificate(_) => format!(
                    "etcd's certificate is not trusted ({e}): check cacert= (the CA that signed etcd's --cert-file)"
                ),
                rustls::Error::AlertReceived(_) => format!(
                    "etcd refused the connection ({e}): check cert= and key= (a client certificate signed by a CA of etcd's --trusted-ca-file)"
                ),
                rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => format!(
                    "the server does not speak TLS ({e}): is it an http:// etcd? use etcd:// for plain text"
                ),
                other => format!("{other}"),
            });
        }
        cause = c.source();
    }
    None
}

/// etcd's refusal of the user (or of no user) in `status`, if it is one, as one line saying
/// what to change. Never holds the password.
fn auth_refusal(status: &tonic::Status, user: Option<&str>) -> Option<String> {
    let said = status.message();
    let user = user.map(floe_core::endpoint::quoted);
    Some(match (status.code(), user) {
        (tonic::Code::InvalidArgument, Some(user)) if said.contains("authentication failed") => {
            format!("etcd refused user {user}: wrong user name or password ({said})")
        }
        (_, _) if said.contains("user name is empty") => format!(
            "etcd asks for a user ({said}): give USER:PASSWORD@ (or USER@ with password_file=) in the URL"
        ),
        (tonic::Code::FailedPrecondition, Some(user))
            if said.contains("authentication is not enabled") =>
        {
            format!(
                "user {user} is given but etcd's authentication is off ({said}): remove the user from the URL, or enable authentication in etcd"
            )
        }
        (tonic::Code::PermissionDenied, Some(user)) => format!(
            "user {user} may not do this ({said}): grant its role readwrite on floe's keys (the prefix of the root)"
        ),
        (tonic::Code::PermissionDenied, None) => format!(
            "etcd refused the call ({said}): its authentication is on: give a user (USER:PASSWORD@ or password_file=), or a client certificate whose CN is a user allowed on floe's keys"
        ),
        (tonic::Code::Unauthenticated, _) => {
            format!("etcd refused the token it gave ({said})")
        }
        _ => return None,
    })
}

impl Client {
    /// A client of the cluster at `endpoints` (`host:port`, or `http://host:port`), in plain
    /// text and with no user. A connection is made when first needed (so an unreachable
    /// cluster shows at the first call), to the endpoint last used or else the next one that
    /// accepts it, and made again after a failure. A call is never sent twice, except once
    /// more after etcd refused its auth token (a refused call was not applied): one that failed
    /// once sent is the caller's to retry.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`] for no endpoint, [`Error::InvalidUri`] for a bad one.
    pub fn connect<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: ConnectOptions,
    ) -> Result<Client, Error> {
        Client::build(endpoints, options, Security::plain(), None, None)
    }

    /// As [`Client::connect`], with TLS, a client certificate and an etcd user as `security`
    /// asks ([`Security::from_url`]). The files are read now, so that a missing or bad one
    /// fails here, and again each time a connection is made: a renewed client certificate is
    /// used from the next connection on, the connections made before it are kept. When they
    /// cannot be read again, the last ones read are used (a warning is logged, and
    /// [`Client::reload_error`] says why). The user authenticates at the first call, and
    /// again when etcd refuses its token (expired), that call then sent once more.
    ///
    /// # Errors
    /// As [`Client::connect`]; [`Error::Config`] for a file that cannot be read or is not PEM,
    /// naming its option.
    pub async fn connect_secure<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: ConnectOptions,
        security: Security,
    ) -> Result<Client, Error> {
        let read = security.clone();
        let (tls, login) = tokio::task::spawn_blocking(move || {
            Ok::<_, String>((read.tls_config()?, read.login()?))
        })
        .await
        .map_err(|e| Error::Config(format!("reading the certificate files: {e}")))?
        .map_err(Error::Config)?;
        if let (Some(user), false) = (security.user(), security.is_tls()) {
            // Once a process: a server opens one client per generator.
            static WARNED: std::sync::Once = std::sync::Once::new();
            let user = user.to_string();
            WARNED.call_once(|| {
                tracing::warn!(
                    "etcd user {user:?} over plain etcd://: its password and token travel in clear text; use etcds:// (TLS)"
                );
            });
        }
        let client = Client::build(endpoints, options, security, tls, login)?;
        if client.inner.security.is_tls() {
            // tonic's own checks of the files (a key it cannot use): at start, not at the first call.
            let inner = client.inner.clone();
            tokio::task::spawn_blocking(move || inner.tls_endpoint(0))
                .await
                .map_err(|e| Error::Config(format!("reading the certificate files: {e}")))??;
        }
        Ok(client)
    }

    fn build<E: AsRef<str>>(
        endpoints: impl IntoIterator<Item = E>,
        options: ConnectOptions,
        security: Security,
        tls: Option<ClientTlsConfig>,
        login: Option<Login>,
    ) -> Result<Client, Error> {
        let scheme = if security.is_tls() { "https" } else { "http" };
        let mut list = Vec::new();
        for e in endpoints {
            let e = e.as_ref().trim();
            let url = if e.starts_with("http://") || e.starts_with("https://") {
                e.to_string()
            } else {
                format!("{scheme}://{e}")
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
                proven: AtomicBool::new(false),
            })
            .collect();
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                current: AtomicUsize::new(0),
                deadline: options.connect_timeout.saturating_add(options.timeout),
                security,
                tls: Mutex::new(tls),
                reload_error: Mutex::new(None),
                login,
                token: Mutex::new(None),
                authenticating: tokio::sync::Mutex::new(()),
                tokens: AtomicU64::new(0),
                suspect: Mutex::new(None),
            }),
        })
    }

    /// Why the certificate files could not be read again the last time a connection was made
    /// (the connection then used the last ones read well), or `None` when they were.
    pub fn reload_error(&self) -> Option<String> {
        locked(&self.inner.reload_error).clone()
    }

    /// How many tokens the client obtained so far (`Authenticate` calls that succeeded): one at
    /// the first call with a user, one more each time etcd refused the token.
    pub fn authentications(&self) -> u64 {
        self.inner.tokens.load(Ordering::Relaxed)
    }

    /// The endpoint of node `index`, with TLS from the certificate files read now.
    async fn endpoint(&self, index: usize) -> Result<Endpoint, Error> {
        if !self.inner.security.is_tls() {
            return Ok(self.inner.nodes[index].endpoint.clone());
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.tls_endpoint(index))
            .await
            .map_err(|e| Error::Config(format!("reading the certificate files: {e}")))?
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
            match self.endpoint(index).await?.connect().await {
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

    /// Sends `call` once, with `token`, within the client's deadline.
    async fn attempt<T, F, Fut>(
        &self,
        call: &F,
        token: Option<MetadataValue<Ascii>>,
    ) -> Result<T, Error>
    where
        F: Fn(Channel, Option<MetadataValue<Ascii>>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let work = async {
            let (index, channel) = self.channel().await?;
            match call(channel, token).await {
                Ok(answer) => {
                    self.inner.nodes[index]
                        .proven
                        .store(true, Ordering::Relaxed);
                    Ok(answer)
                }
                Err(status) => {
                    let broken = std::error::Error::source(&status).is_some();
                    if broken && !self.inner.nodes[index].proven.load(Ordering::Relaxed) {
                        *locked(&self.inner.suspect) = Some(index);
                    }
                    self.failed(index, &status);
                    Err(Error::Status(status))
                }
            }
        };
        match tokio::time::timeout(self.inner.deadline, work).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout(self.inner.deadline)),
        }
    }

    /// After a call failed: when a new connection broke at its first call, a bare TLS
    /// handshake with that node, to tell a refused client certificate or a TLS port spoken to
    /// in plain text (hyper only says "connection closed").
    async fn diagnose(&self, e: Error) -> Error {
        let Some(index) = locked(&self.inner.suspect).take() else {
            return e;
        };
        if !matches!(e, Error::Status(_) | Error::Transport(_)) {
            return e;
        }
        let uri = self.inner.nodes[index].endpoint.uri().clone();
        let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
            return e;
        };
        let security = self.inner.security.clone();
        let identity = if security.is_tls() {
            tokio::task::spawn_blocking(move || security.identity_der())
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        let within = self.inner.deadline.min(Duration::from_secs(3));
        match probe::probe(host, port, self.inner.security.is_tls(), identity, within).await {
            Some(why) => Error::Tls(why),
            None => e,
        }
    }

    /// Runs `call` with the user's token (authenticating first if there is none yet); once
    /// more with a new token when etcd refused that one. Errors told apart: TLS, auth.
    async fn run<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Channel, Option<MetadataValue<Ascii>>) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let answer = async {
            let token = self.token().await?;
            let first = self
                .attempt(&call, token.as_ref().map(|t| t.value.clone()))
                .await;
            match (first, token) {
                (Err(Error::Status(status)), Some(used)) if stale_token(&status) => {
                    let token = self.authenticate(used.generation).await?;
                    self.attempt(&call, Some(token.value)).await
                }
                (first, _) => first,
            }
        };
        match answer.await {
            Ok(answer) => Ok(answer),
            Err(e) => match self.refine(e) {
                e @ (Error::Status(_) | Error::Transport(_)) => Err(self.diagnose(e).await),
                e => {
                    locked(&self.inner.suspect).take();
                    Err(e)
                }
            },
        }
    }

    /// Runs a unary `call` (see [`Client::run`]).
    async fn bounded<T, F, Fut>(&self, call: F) -> Result<T, Error>
    where
        F: Fn(Channel, Option<MetadataValue<Ascii>>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.run(|channel, token| {
            let answer = call(channel, token);
            async move { answer.await.map(tonic::Response::into_inner) }
        })
        .await
    }

    /// The token to send: none without a user; the last one obtained; or a new one.
    async fn token(&self) -> Result<Option<Token>, Error> {
        if self.inner.login.is_none() {
            return Ok(None);
        }
        if let Some(token) = locked(&self.inner.token).clone() {
            return Ok(Some(token));
        }
        self.authenticate(0).await.map(Some)
    }

    /// A new token, unless another call got one since token `stale` was refused (then that
    /// one).
    async fn authenticate(&self, stale: u64) -> Result<Token, Error> {
        let Some(login) = &self.inner.login else {
            return Err(Error::InvalidArgs("no user to authenticate".into()));
        };
        let _one = self.inner.authenticating.lock().await;
        if let Some(token) = locked(&self.inner.token).clone() {
            if token.generation != stale {
                return Ok(token);
            }
        }
        let ask = AuthenticateRequest {
            name: login.user.clone(),
            password: login.password.clone(),
        };
        let answer = self
            .attempt(
                &|channel, _| {
                    let ask = ask.clone();
                    async move {
                        AuthClient::new(channel)
                            .authenticate(with_token(ask, None))
                            .await
                            .map(tonic::Response::into_inner)
                    }
                },
                None,
            )
            .await?;
        let mut value: MetadataValue<Ascii> = answer
            .token
            .parse()
            .map_err(|_| Error::Auth("etcd gave a token that is not header text".into()))?;
        value.set_sensitive(true);
        let generation = self
            .inner
            .tokens
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let token = Token { generation, value };
        *locked(&self.inner.token) = Some(token.clone());
        Ok(token)
    }

    /// `e`, as [`Error::Tls`] or [`Error::Auth`] when it is one (a configuration problem, not
    /// a cluster to wait for).
    fn refine(&self, e: Error) -> Error {
        match e {
            Error::Transport(t) => match tls_cause(&t) {
                Some(why) => Error::Tls(why),
                None => Error::Transport(t),
            },
            Error::Status(s) => {
                if let Some(why) = tls_cause(&s) {
                    return Error::Tls(why);
                }
                let user = self.inner.login.as_ref().map(|l| l.user.as_str());
                match auth_refusal(&s, user) {
                    Some(why) => Error::Auth(why),
                    None => Error::Status(s),
                }
            }
            other => other,
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
        self.bounded(move |c, t| {
            let request = with_token(request.clone(), t);
            async move { KvClient::new(c).range(request).await }
        })
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
        self.bounded(move |c, t| {
            let request = with_token(request.clone(), t);
            async move { KvClient::new(c).range(request).await }
        })
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
        self.bounded(move |c, t| {
            let request = with_token(request.clone(), t);
            async move { KvClient::new(c).put(request).await }
        })
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
        self.bounded(move |c, t| {
            let request = with_token(request.clone(), t);
            async move { KvClient::new(c).delete_range(request).await }
        })
        .await
    }

    /// Runs a transaction: `succeeded` says whether its comparisons held.
    ///
    /// # Errors
    /// The cluster's or the connection's.
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        self.bounded(move |c, t| {
            let request = with_token(txn.0.clone(), t);
            async move { KvClient::new(c).txn(request).await }
        })
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
        self.bounded(move |c, t| {
            let request = with_token(request, t);
            async move { LeaseClient::new(c).lease_grant(request).await }
        })
        .await
    }

    /// Ends lease `id` now: the keys attached to it are deleted.
    ///
    /// # Errors
    /// The cluster's (e.g. `NOT_FOUND` for a lease already gone) or the connection's.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, Error> {
        let request = LeaseRevokeRequest { id };
        self.bounded(move |c, t| {
            let request = with_token(request, t);
            async move { LeaseClient::new(c).lease_revoke(request).await }
        })
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
        self.run(move |channel, token| async move {
            // The request side stays open until the answer is read (the stream is dropped then).
            let requests =
                tokio_stream::once(LeaseKeepAliveRequest { id }).chain(tokio_stream::pending());
            let mut answers = LeaseClient::new(channel)
                .lease_keep_alive(with_token(requests, token))
                .await?
                .into_inner();
            answers.message().await
        })
        .await
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
        self.bounded(move |c, t| {
            let request = with_token(request, t);
            async move { LeaseClient::new(c).lease_time_to_live(request).await }
        })
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

    /// The request as it goes to etcd: what a stand-in for etcd (a simulation) evaluates.
    pub fn request(&self) -> &TxnRequest {
        &self.0
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
