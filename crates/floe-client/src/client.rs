//! The connection to a `floe serve` ([`Client`]), its calls, and the cached hand-outs built on
//! it ([`WeakSequence`], [`SnowflakeBuffer`]).

use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Uri};

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::cache::{Cache, CacheOptions, CacheStats, Fetch, Next, Source};
use crate::error::chain;
use crate::proto::floe_client::FloeClient;
use crate::proto::{Increment, Kind, NextIdsRequest, NextSequenceRequest};
use crate::Error;

/// The largest `count` of one call: the largest `max_batch` a server takes (a server answers
/// `INVALID_ARGUMENT` above its own, 10,000 by default).
pub const MAX_COUNT: u32 = 1_000_000;

/// The largest `count` of one `NextSequence` call, whatever the server's `max_batch`: the
/// sequencer's largest batch (docs/sequencer-batches.md), so the largest segment of a
/// [`WeakSequence`].
pub const MAX_SEQUENCE_COUNT: u32 = 10_000;

/// The largest message the client reads: a million IDs (at most 18 bytes each on the wire).
const MAX_MESSAGE: usize = 64 << 20;

/// Adds the bearer token, if any, to every request.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.write_str(if self.0.is_some() {
            "Bearer(..)"
        } else {
            "None"
        })
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

type Grpc = FloeClient<InterceptedService<Channel, Bearer>>;

/// How to reach a server: see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    ca_pem: Option<Vec<u8>>,
    token: Option<String>,
    connect_timeout: Duration,
    timeout: Duration,
}

impl ClientBuilder {
    /// Trusts this CA certificate (PEM) besides the system's roots, for an `https://` server.
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Sends `authorization: Bearer TOKEN` with every request (a server with
    /// `auth.token_file` refuses requests without one of its tokens: `UNAUTHENTICATED`).
    pub fn bearer_token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// How long connecting (TCP, TLS and the HTTP/2 handshake) may take: 5 s by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// How long one call may take: 10 s by default (then `DEADLINE_EXCEEDED`... as
    /// [`Error::Status`] or [`Error::Unavailable`]).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// The endpoint, checked: `http://HOST:PORT`, `https://HOST:PORT` or `HOST:PORT`.
    fn endpoint(&self) -> Result<Endpoint, Error> {
        let url = &self.url;
        let bad = |why: &str| {
            Error::invalid(format!(
                "server URL: {why}: expected http://HOST:PORT, https://HOST:PORT or HOST:PORT (the server's gRPC address), found {url:?}"
            ))
        };
        let lower = url.to_ascii_lowercase();
        let tls = lower.starts_with("https://");
        if self.ca_pem.is_some() && !tls {
            return Err(Error::invalid(format!(
                "a CA certificate was given for a server without TLS: use https://HOST:PORT, found {url:?}"
            )));
        }
        let full = match lower.find("://") {
            Some(_) if lower.starts_with("http://") || tls => url.clone(),
            Some(_) => return Err(bad("an unknown scheme")),
            None => format!("http://{url}"),
        };
        let uri: Uri = full.parse().map_err(|_| bad("not a URL"))?;
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("a user name"));
        }
        if authority.host().is_empty() {
            return Err(bad("no host"));
        }
        if authority.port_u16().is_none() {
            return Err(bad("no port"));
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(bad("a path"));
        }
        let endpoint = Endpoint::from_shared(full)
            .map_err(|_| bad("not a URL"))?
            .connect_timeout(self.connect_timeout)
            .timeout(self.timeout)
            .tcp_nodelay(true);
        if !tls {
            return Ok(endpoint);
        }
        // The system's roots only without a CA of the caller's: tonic refuses a configuration
        // whose native roots are missing, which would stop a client in a scratch image that
        // trusts its private CA alone.
        let mut config = ClientTlsConfig::new();
        if self.ca_pem.is_none() {
            config = config.with_native_roots();
        }
        if let Some(pem) = &self.ca_pem {
            if !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(Error::invalid(
                    "CA certificate: no PEM certificate in it (expected a \"CERTIFICATE\" block)",
                ));
            }
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint
            .tls_config(config)
            .map_err(|e| Error::invalid(format!("TLS: {}", chain(&e))))
    }

    fn bearer(&self) -> Result<Bearer, Error> {
        let Some(token) = &self.token else {
            return Ok(Bearer(None));
        };
        if token.is_empty() {
            return Err(Error::invalid("bearer token: empty"));
        }
        let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::invalid("bearer token: holds characters a header cannot carry"))?;
        value.set_sensitive(true);
        Ok(Bearer(Some(value)))
    }

    /// Connects, within the connect timeout. Must be called within a tokio runtime, which the
    /// client's background fetches then run on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL, CA certificate or token;
    /// [`Error::Unavailable`] when the server cannot be reached (or its certificate is not
    /// trusted).
    pub async fn connect(self) -> Result<Client, Error> {
        let endpoint = self.endpoint()?;
        let bearer = self.bearer()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("connect: not within a tokio runtime"))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Error::Unavailable(format!("cannot reach {}: {}", self.url, chain(&e))))?;
        let grpc =
            FloeClient::with_interceptor(channel, bearer).max_decoding_message_size(MAX_MESSAGE);
        Ok(Client { grpc, runtime })
    }
}

/// A connection to a `floe serve` (one HTTP/2 connection; clones share it).
#[derive(Debug, Clone)]
pub struct Client {
    grpc: Grpc,
    runtime: tokio::runtime::Handle,
}

fn check_count(count: u32) -> Result<(), Error> {
    if count == 0 || count > MAX_COUNT {
        return Err(Error::invalid(format!(
            "count: expected 1 to {MAX_COUNT}, found {count}"
        )));
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), Error> {
    floe_core::sequence::Key::check(key).map_err(|e| Error::invalid(format!("key: {e}")))
}

/// Whether the answer holds the `count` IDs asked for.
fn whole<T>(ids: Vec<T>, count: u32) -> Result<Vec<T>, Error> {
    if ids.len() == count as usize {
        Ok(ids)
    } else {
        Err(Error::Protocol(format!(
            "answered {} IDs of the {count} asked for",
            ids.len()
        )))
    }
}

impl Client {
    /// A client of the server at `url` (`http://HOST:PORT`, `https://HOST:PORT` or
    /// `HOST:PORT`: its gRPC address), to set up and [`connect`](ClientBuilder::connect).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            ca_pem: None,
            token: None,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
        }
    }

    /// Connects to `url` without TLS options or token: [`Client::builder`]`(url).connect()`.
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<Client, Error> {
        Client::builder(url).connect().await
    }

    /// The generated gRPC client (`floe.v1.Floe`), for the calls this crate does not wrap
    /// (streams, templates, other kinds' text).
    pub fn grpc(&self) -> FloeClient<InterceptedService<Channel, Bearer>> {
        self.grpc.clone()
    }

    /// `count` Snowflake IDs (1 to [`MAX_COUNT`], and at most the server's `max_batch`) of the
    /// server's generator `layout` (`""`: its default one), ascending: one call, uncached.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a count out of range; the server's errors.
    pub async fn snowflakes(&self, layout: &str, count: u32) -> Result<Vec<u64>, Error> {
        check_count(count)?;
        let answer = self
            .grpc
            .clone()
            .next_ids(NextIdsRequest {
                kind: Kind::Snowflake as i32,
                count,
                layout: layout.to_string(),
                meta: None,
                with_text: false,
            })
            .await?
            .into_inner();
        whole(answer.numbers, count)
    }

    /// `count` IDs of another kind (sno, LexicalUUID, UUIDv7, ULID), each as its big-endian
    /// bytes (sno 10, the others 16): one call, uncached.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a count out of range or for [`Kind::Snowflake`] (use
    /// [`snowflakes`](Self::snowflakes)) or `KIND_UNSPECIFIED`; the server's errors.
    pub async fn binary_ids(&self, kind: Kind, count: u32) -> Result<Vec<Vec<u8>>, Error> {
        check_count(count)?;
        if matches!(kind, Kind::Snowflake | Kind::Unspecified) {
            return Err(Error::invalid(format!(
                "kind: {}: expected one of sno, lexical, uuid7, ulid",
                kind.as_str_name()
            )));
        }
        let answer = self
            .grpc
            .clone()
            .next_ids(NextIdsRequest {
                kind: kind as i32,
                count,
                layout: String::new(),
                meta: None,
                with_text: false,
            })
            .await?
            .into_inner();
        whole(answer.binary, count)
    }

    /// `count` IDs (1 to [`MAX_SEQUENCE_COUNT`]) of the sequence `key` in the server's store
    /// `store` (`""`: its only one): one call, uncached. WEAK: unique, trend-increasing (from the server's buffer of the
    /// key, possibly several runs). STRONG: one run of `count` consecutive IDs, every one above
    /// every ID of every call that returned before this one was made, across servers: STRONG is
    /// never cached by this crate, as its order needs the server on every call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty, too long or NUL-holding key or a count out of
    /// range; the server's errors (`FAILED_PRECONDITION` for STRONG on a store that cannot,
    /// `OUT_OF_RANGE` past `i64::MAX`, `UNAVAILABLE` while its store is down).
    pub async fn next_sequence(
        &self,
        store: &str,
        key: &str,
        increment: Increment,
        count: u32,
    ) -> Result<Vec<i64>, Error> {
        check_key(key)?;
        if count == 0 || count > MAX_SEQUENCE_COUNT {
            return Err(Error::invalid(format!(
                "count: expected 1 to {MAX_SEQUENCE_COUNT} (the sequencer's largest batch), found {count}"
            )));
        }
        let answer = self
            .grpc
            .clone()
            .next_sequence(NextSequenceRequest {
                store: store.to_string(),
                key: key.to_string(),
                increment: increment as i32,
                count,
                template: String::new(),
                scramble: false,
            })
            .await?
            .into_inner();
        whole(answer.ids, count)
    }

    /// The next STRONG ID of `key`: one call (see [`next_sequence`](Self::next_sequence)).
    ///
    /// # Errors
    /// As [`next_sequence`](Self::next_sequence).
    pub async fn next_strong(&self, store: &str, key: &str) -> Result<i64, Error> {
        let ids = self.next_sequence(store, key, Increment::Strong, 1).await?;
        Ok(ids[0])
    }

    /// A local cache of the WEAK sequence `key` in `store`: segments of `options.segment` IDs
    /// (at most [`MAX_SEQUENCE_COUNT`]) fetched ahead (see [`WeakSequence`]). Nothing is
    /// fetched until the first call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key or options.
    pub fn weak_sequence(
        &self,
        store: &str,
        key: &str,
        options: CacheOptions,
    ) -> Result<WeakSequence, Error> {
        check_key(key)?;
        if options.segment > MAX_SEQUENCE_COUNT {
            return Err(Error::invalid(format!(
                "segment: expected 1 to {MAX_SEQUENCE_COUNT} for a sequence (the sequencer's largest batch), found {}",
                options.segment
            )));
        }
        let source = SequenceSource {
            grpc: self.grpc.clone(),
            store: store.to_string(),
            key: key.to_string(),
        };
        let cache = Cache::new(Box::new(source), options, self.runtime.clone())?;
        Ok(WeakSequence { cache })
    }

    /// A local buffer of Snowflake IDs of the server's generator `layout` (`""`: its default
    /// one), fetched `options.segment` at a time, ahead (see [`SnowflakeBuffer`]). Nothing is
    /// fetched until the first call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad options.
    pub fn snowflake_buffer(
        &self,
        layout: &str,
        options: CacheOptions,
    ) -> Result<SnowflakeBuffer, Error> {
        let source = SnowflakeSource {
            grpc: self.grpc.clone(),
            layout: layout.to_string(),
        };
        let cache = Cache::new(Box::new(source), options, self.runtime.clone())?;
        Ok(SnowflakeBuffer { cache })
    }
}

/// Sequence IDs onto `u64`s, keeping order and adjacency: the sign bit flipped.
#[inline]
fn seq_to_u64(id: i64) -> u64 {
    (id as u64) ^ (1 << 63)
}

#[inline]
fn u64_to_seq(v: u64) -> i64 {
    (v ^ (1 << 63)) as i64
}

struct SequenceSource {
    grpc: Grpc,
    store: String,
    key: String,
}

impl Source for SequenceSource {
    fn fetch(&self, n: u32) -> Fetch {
        let mut grpc = self.grpc.clone();
        let request = NextSequenceRequest {
            store: self.store.clone(),
            key: self.key.clone(),
            increment: Increment::Weak as i32,
            count: n,
            template: String::new(),
            scramble: false,
        };
        Box::pin(async move {
            let ids = grpc.next_sequence(request).await?.into_inner().ids;
            Ok(ids.into_iter().map(seq_to_u64).collect())
        })
    }
}

struct SnowflakeSource {
    grpc: Grpc,
    layout: String,
}

impl Source for SnowflakeSource {
    fn fetch(&self, n: u32) -> Fetch {
        let mut grpc = self.grpc.clone();
        let request = NextIdsRequest {
            kind: Kind::Snowflake as i32,
            count: n,
            layout: self.layout.clone(),
            meta: None,
            with_text: false,
        };
        Box::pin(async move { Ok(grpc.next_ids(request).await?.into_inner().numbers) })
    }
}

/// The future of [`WeakSequence::next`] and [`SnowflakeBuffer::next`]: ready at its first
/// poll when the thread's block has an ID (no allocation, no state machine), else waiting for
/// the cache.
pub struct NextId<'a, T> {
    next: Next<'a>,
    map: fn(u64) -> T,
}

impl<T> std::fmt::Debug for NextId<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NextId")
    }
}

impl<T> Future for NextId<'_, T> {
    type Output = Result<T, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let map = self.map;
        Pin::new(&mut self.next).poll(cx).map(|r| r.map(map))
    }
}

/// A WEAK sequence key, cached in this process: IDs handed out locally from segments fetched
/// with `NextSequence` (WEAK, `count` = the segment), the next segment fetched in the
/// background once a share of the current one is used (Leaf's double buffer).
///
/// - [`try_next`](Self::try_next): no await, no lock and no atomic read-modify-write while the
///   calling thread's block has IDs (a thread takes a block of the segment at once, under a
///   short lock); `None` when nothing is cached (a fetch is then under way).
/// - [`next`](Self::next): the same, and waits for a fetch when nothing is cached.
///
/// IDs are unique across every client and server of the store, and increase per thread while
/// the client stays on one server (a reconnection to another server of a WEAK store may
/// start below: WEAK is trend-increasing); threads' IDs interleave (a thread's lag behind the others is at most one segment).
/// **Gaps**, as WEAK allows: a thread's unused block is dropped when the cache moves on to its
/// next segment; what the cache holds when it is dropped (the rest of its segments, threads'
/// blocks, a fetch under way) is never handed out by anyone. No ID is ever handed out twice.
/// Clones share the cache.
#[derive(Debug, Clone)]
pub struct WeakSequence {
    cache: Arc<Cache>,
}

impl WeakSequence {
    /// The next ID without waiting, `None` when nothing is cached: a fetch is then under way
    /// (its error, if it fails, comes from [`next`](Self::next)).
    #[inline]
    pub fn try_next(&self) -> Option<i64> {
        self.cache.try_next().map(u64_to_seq)
    }

    /// The next ID, waiting for a fetch when nothing is cached.
    ///
    /// # Errors
    /// The error of the fetch it waited for (the server's, or [`Error::Unavailable`]); the
    /// next call fetches again.
    #[inline]
    pub fn next(&self) -> NextId<'_, i64> {
        NextId {
            next: self.cache.next(),
            map: u64_to_seq,
        }
    }

    /// What the cache has done so far and holds now.
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}

/// Snowflake IDs of one server generator, buffered in this process: fetched a segment at a
/// time with `NextIds`, the next segment fetched in the background once a share of the
/// current one is used; handed out as [`WeakSequence`] hands out its IDs (same fast path,
/// same gaps). IDs are unique (the server's worker ID is leased) and increase per thread.
#[derive(Debug, Clone)]
pub struct SnowflakeBuffer {
    cache: Arc<Cache>,
}

impl SnowflakeBuffer {
    /// The next ID without waiting, `None` when nothing is buffered (a fetch is then under
    /// way).
    #[inline]
    pub fn try_next(&self) -> Option<u64> {
        self.cache.try_next()
    }

    /// The next ID, waiting for a fetch when nothing is buffered.
    ///
    /// # Errors
    /// The error of the fetch it waited for; the next call fetches again.
    #[inline]
    pub fn next(&self) -> NextId<'_, u64> {
        NextId {
            next: self.cache.next(),
            map: std::convert::identity,
        }
    }

    /// What the buffer has done so far and holds now.
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_ids_map_onto_u64_in_order() {
        let ids = [i64::MIN, i64::MIN + 1, -2, -1, 0, 1, i64::MAX - 1, i64::MAX];
        let mapped: Vec<u64> = ids.iter().map(|&i| seq_to_u64(i)).collect();
        assert!(mapped.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(mapped[3] + 1, mapped[4]); // -1, 0 stay adjacent
        assert_eq!(mapped[7], u64::MAX);
        for (&i, &m) in ids.iter().zip(&mapped) {
            assert_eq!(u64_to_seq(m), i);
        }
    }

    #[test]
    fn urls_are_checked() {
        for ok in [
            "http://127.0.0.1:34904",
            "127.0.0.1:34904",
            "HTTP://[::1]:1",
            "https://localhost:1",
        ] {
            assert!(Client::builder(ok).endpoint().is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("grpc://h:1", "unknown scheme"),
            ("http://h", "no port"),
            ("h:1/x", "a path"),
            ("http://u@h:1", "user name"),
            ("", "expected http://HOST:PORT"),
            ("h:99999", "expected http://HOST:PORT"),
        ] {
            let e = Client::builder(bad).endpoint().unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains(why)),
                "{bad}: {e}"
            );
        }
        let e = Client::builder("http://h:1")
            .ca_certificate_pem("x")
            .endpoint()
            .unwrap_err();
        assert!(e.to_string().contains("without TLS"), "{e}");
        let e = Client::builder("https://h:1")
            .ca_certificate_pem("not pem")
            .endpoint()
            .unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        for bad in ["", "a\nb"] {
            let e = Client::builder("h:1")
                .bearer_token(bad)
                .bearer()
                .unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
    }

    #[test]
    fn counts_and_keys_are_checked() {
        assert!(check_count(0).is_err());
        assert!(check_count(1).is_ok());
        assert!(check_count(MAX_COUNT).is_ok());
        let e = check_count(MAX_COUNT + 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid argument: count: expected 1 to 1000000, found 1000001"
        );
        assert!(check_key("").is_err());
        assert!(check_key("a\0b").is_err());
        assert!(check_key(&"k".repeat(256)).is_err());
        assert!(check_key("orders").is_ok());
        assert!(whole(vec![1, 2], 3).is_err());
    }
}
