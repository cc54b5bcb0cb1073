//! Connections: how many, how long, and how they end.
//!
//! Each listener runs its own accept loop on hyper (hyper-util's connection builder, one
//! protocol per port: HTTP/2 for gRPC, HTTP/1 for HTTP), so that the server, not the client,
//! decides when a connection ends. A port may also answer requests that are not its own with a
//! one-line hint: the gRPC port tells a mistaken `curl` (HTTP/1, or HTTP/2 that is not gRPC)
//! where the HTTP API is, instead of closing on it.
//!
//! - at most [`Limits::max_connections`] connections per listener: beyond that the listener
//!   stops accepting and new connections wait in the kernel's backlog, so idle sockets cannot
//!   use up file descriptors;
//! - a connection must send its first request within [`Limits::header_timeout`] (HTTP/1: every
//!   request's headers, hyper's header read timeout, which also runs between keep-alive
//!   requests), and one with no request under way for [`Limits::idle_timeout`] is closed;
//! - a request is answered within [`Limits::request_timeout`] (a body that never arrives
//!   included): `DEADLINE_EXCEEDED`, or HTTP 503;
//! - at most [`Limits::max_streams`] requests at once per HTTP/2 connection;
//! - on shutdown the listeners close at once, every connection is asked to end (HTTP/1 closes
//!   when its request is answered, HTTP/2 sends GOAWAY) and is dropped once it has had no
//!   request under way for [`LINGER`]; those with requests still under way after
//!   [`Limits::shutdown_timeout`] are dropped then, so [`crate::serve`] always returns and the
//!   caller can close its stores.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// The bounds every connection and request lives within (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, per listener (1,024).
    pub max_connections: usize,
    /// Requests under way at once on one HTTP/2 (gRPC) connection (100).
    pub max_streams: u32,
    /// How long a new connection may take to send its first request, and an HTTP/1 request its
    /// headers (10 s).
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request under way (60 s).
    pub idle_timeout: Duration,
    /// How long a request may take from its headers to its answer (10 s).
    pub request_timeout: Duration,
    /// How long shutdown waits for connections to end before it drops them (10 s).
    pub shutdown_timeout: Duration,
    /// How long the server goes on accepting and serving after a shutdown signal, not ready
    /// (`/readyz` 503, gRPC health NOT_SERVING), so that load balancers take it out first (0).
    pub shutdown_delay: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_streams: 100,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
        }
    }
}

/// The longest duration a limit may have (a day): deadlines are computed by adding it to now.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

impl Limits {
    /// Whether the limits can be served: counts at least 1, durations positive (the shutdown
    /// timeout may be zero: drop connections at once) and at most [`MAX_DURATION`].
    ///
    /// # Errors
    /// A one-line message naming the field.
    pub fn validate(&self) -> Result<(), floe_core::FieldError> {
        use floe_core::FieldError;
        if self.max_connections == 0 || self.max_connections > Semaphore::MAX_PERMITS {
            return Err(FieldError::new(
                "max_connections",
                format!(
                    "expected 1 to {}, found {}",
                    Semaphore::MAX_PERMITS,
                    self.max_connections
                ),
            ));
        }
        if self.max_streams == 0 {
            return Err(FieldError::new(
                "max_streams",
                "expected at least 1, found 0",
            ));
        }
        for (name, d, zero_ok) in [
            ("header_timeout", self.header_timeout, false),
            ("idle_timeout", self.idle_timeout, false),
            ("request_timeout", self.request_timeout, false),
            ("shutdown_timeout", self.shutdown_timeout, true),
            ("shutdown_delay", self.shutdown_delay, true),
        ] {
            if (d.is_zero() && !zero_ok) || d > MAX_DURATION {
                return Err(FieldError::new(
                    name,
                    format!(
                        "expected {} to {} s, found {d:?}",
                        if zero_ok { "0" } else { "more than 0" },
                        MAX_DURATION.as_secs()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The protocol of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1 only (the HTTP port).
    Http1,
    /// HTTP/2 only (the gRPC port).
    Http2,
}

/// What a listener serves: its protocol, its service, what a request that takes too long is
/// answered, and what is done to every answer.
pub(crate) struct Served<S, B> {
    pub(crate) protocol: Protocol,
    pub(crate) service: S,
    pub(crate) too_slow: fn() -> Response<B>,
    pub(crate) answer: fn(Response<B>) -> Response<B>,
    /// TLS, when configured ([`crate::tls`]): each connection's handshake first.
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    /// On an HTTP/2 port, the answer to a request that is not the port's (`None` for those
    /// that are); with it, the port reads a connection as either HTTP/2 or HTTP/1 by its first
    /// bytes (HTTP/2's preface or not), so that an HTTP/1 request is answered too. `None`:
    /// HTTP/2 only.
    pub(crate) hint: Option<Hint<B>>,
}

/// The answer to a request that is not a port's ([`Served::hint`]), or `None` for one that is.
pub(crate) type Hint<B> = Arc<dyn Fn(&Request<Incoming>) -> Option<Response<B>> + Send + Sync>;

/// Where hyper runs the requests of HTTP/2 connections (one task per stream): tracked, so
/// that at the shutdown deadline they are dropped with their connections and waited for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Streams {
    tracker: TaskTracker,
    dropped: CancellationToken,
}

impl<F> hyper::rt::Executor<F> for Streams
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        let dropped = self.dropped.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                // The stream first: one that ends at its first poll never registers with
                // `dropped` (a lock shared by every connection of the listener).
                biased;
                () = stream => {}
                () = dropped.cancelled() => {}
            }
        });
    }
}

impl Streams {
    /// Drops the streams still running and waits until they are gone.
    async fn drop_all(&self) {
        self.dropped.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// The connection builder of a port: its protocol only, or on an HTTP/2 port that answers
/// HTTP/1 with a hint, either (hyper-util reads the first bytes: HTTP/2's preface, or HTTP/1).
fn builder(
    protocol: Protocol,
    hint: bool,
    limits: &Limits,
    streams: Streams,
) -> auto::Builder<Streams> {
    let mut builder = auto::Builder::new(streams);
    let (http1, http2) = match protocol {
        Protocol::Http2 if hint => (true, true),
        Protocol::Http2 => {
            builder = builder.http2_only();
            (false, true)
        }
        Protocol::Http1 => {
            builder = builder.http1_only();
            (true, false)
        }
    };
    if http2 {
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.max_streams);
    }
    if http1 {
        let mut http1 = builder.http1();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            // Headers and the buffered request: a key is at most 255 bytes.
            .max_buf_size(64 * 1024);
        if protocol == Protocol::Http2 {
            // The hint is the only answer: the connection closes after it.
            http1.keep_alive(false);
        }
    }
    builder
}

/// Accepts connections on `listener` and serves them until `stop` turns true, then ends them
/// (see the module docs). Returns once every connection is closed or dropped.
pub(crate) async fn run<S, B>(
    listener: TcpListener,
    served: Served<S, B>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let streams = Streams::default();
    let builder = Arc::new(builder(
        served.protocol,
        served.hint.is_some(),
        &limits,
        streams.clone(),
    ));
    let served = Arc::new(served);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    loop {
        // A free place first, then a connection: beyond the cap, clients wait in the backlog.
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next() => continue,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
            Some(_) = conns.join_next() => continue,
        };
        let _ = stream.set_nodelay(true);
        let (served, builder) = (Arc::clone(&served), Arc::clone(&builder));
        let stop = stop.clone();
        conns.spawn(async move {
            let opened = Instant::now();
            match &served.tls {
                None => connection(stream, &builder, &served, limits, stop, opened).await,
                Some(tls) => {
                    let mut stop_handshake = stop.clone();
                    // The handshake counts against the header timeout: a client that opens a
                    // socket and never finishes it is dropped then; a failed one ends this
                    // connection alone.
                    let shaken = tokio::select! {
                        r = tokio::time::timeout(limits.header_timeout, tls.accept(stream)) => r,
                        () = stopped(&mut stop_handshake) => return,
                    };
                    match shaken {
                        Ok(Ok(stream)) => {
                            connection(stream, &builder, &served, limits, stop, opened).await;
                        }
                        Ok(Err(e)) => {
                            // A connection closed before its hello (a TCP health probe, a
                            // port scan) is told from a handshake that failed.
                            let reason = match e.kind() {
                                std::io::ErrorKind::UnexpectedEof
                                | std::io::ErrorKind::ConnectionReset => "eof",
                                _ => "error",
                            };
                            handshake_failed(served.protocol, reason);
                            tracing::debug!("TLS handshake failed: {e}");
                        }
                        Err(_) => {
                            handshake_failed(served.protocol, "timeout");
                            tracing::debug!("TLS handshake not done within the header timeout");
                        }
                    }
                }
            }
            drop(permit);
        });
    }
    // Stopped: free the port at once, then give connections until the deadline.
    drop(listener);
    let drained = tokio::time::timeout(limits.shutdown_timeout, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "dropping {} connection(s) still open after the shutdown timeout ({} s)",
            conns.len(),
            limits.shutdown_timeout.as_secs()
        );
    }
    conns.shutdown().await;
    streams.drop_all().await;
}

/// Counts a TLS handshake that failed (`error`: refused or broken; `eof`: the connection closed
/// before or during it, as a TCP probe does; `timeout`: not done within the header timeout) on
/// a listener.
fn handshake_failed(protocol: Protocol, reason: &'static str) {
    let listener = match protocol {
        Protocol::Http1 => "http",
        Protocol::Http2 => "grpc",
    };
    metrics::counter!("floe_tls_handshake_failures_total", "listener" => listener, "reason" => reason)
        .increment(1);
}

/// Completes once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// An accept error: one of the connection's own (the client went away) is skipped; anything
/// else (out of file descriptors) is reported and waited out, so the loop does not spin.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return;
    }
    tracing::warn!("cannot accept a connection: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Once a connection is asked to end, how long it may stay with no request under way (for
/// HTTP/2's GOAWAY exchange) before it is dropped.
pub const LINGER: Duration = Duration::from_millis(250);

/// Serves one connection until it ends, is idle too long, or `stop` turns true. After the last
/// two it is asked to end (HTTP/1: closes once the request under way is answered; HTTP/2:
/// GOAWAY), and dropped once no request has been under way for [`LINGER`] (the listener drops
/// it sooner at the shutdown deadline).
async fn connection<I, S, B>(
    stream: I,
    builder: &auto::Builder<Streams>,
    served: &Served<S, B>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    opened: Instant,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let in_flight = Arc::new(InFlight::new());
    let service = Tracked {
        inner: served.service.clone(),
        in_flight: Arc::clone(&in_flight),
        timeout: limits.request_timeout,
        too_slow: served.too_slow,
        answer: served.answer,
        hint: served.hint.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let batching = served.protocol == Protocol::Http2;
    tokio::select! {
        _ = std::future::poll_fn(|cx| answers_together(conn.as_mut(), &in_flight, batching, cx)) => {
            return;
        }
        () = stopped(&mut stop) => {}
        () = idle(&in_flight, opened, limits.header_timeout, limits.idle_timeout) => {}
    }
    conn.as_mut().graceful_shutdown();
    let asked = Instant::now();
    tokio::select! {
        _ = conn.as_mut() => {}
        () = idle(&in_flight, asked, LINGER, LINGER) => {}
    }
}

/// Polls an HTTP/2 connection so that the answers of the requests one poll started are
/// written together: hyper runs each request in a task of its own ([`Streams`]) and the
/// connection's task writes their answers. Woken by each answer, the connection's task would
/// write them one by one (a `writev` per answer, and the client answers in kind); rescheduled
/// behind the requests it started (a task that wakes itself goes to the back of tokio's run
/// queue), it writes what they answered in one. Only after a poll that started more than one
/// request: for a single one, the extra round through the run queue costs more than it saves.
/// On loopback under h2load (16 connections, 8 streams each) that is about 6 answers per
/// `writev` instead of 1.2, and a quarter less CPU per request; with one stream per
/// connection nothing changes.
fn answers_together<F: Future + ?Sized>(
    conn: Pin<&mut F>,
    in_flight: &InFlight,
    batching: bool,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<F::Output> {
    let polled = conn.poll(cx);
    if polled.is_pending()
        && in_flight.started_since_poll.swap(0, Ordering::Relaxed) > 1
        && batching
    {
        cx.waker().wake_by_ref();
    }
    polled
}

/// The requests of one connection: how many are under way, and when the last one ended. What
/// the idle timeouts read; a request updates it with a few atomic operations and a clock read,
/// and wakes no task (the idle timer reads it when it fires).
#[derive(Debug)]
struct InFlight {
    /// Requests under way.
    under_way: AtomicUsize,
    /// Whether a request ever started.
    started: AtomicBool,
    /// Requests started since the connection was last polled.
    started_since_poll: AtomicUsize,
    /// When the last request ended: nanoseconds since `origin`.
    last_end: AtomicU64,
    origin: Instant,
}

/// What the idle timer reads: no request yet, one under way, or the end of the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quiet {
    NeverStarted,
    UnderWay,
    Since(Instant),
}

impl InFlight {
    fn new() -> InFlight {
        InFlight {
            under_way: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            started_since_poll: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    fn start(&self) {
        self.started.store(true, Ordering::Relaxed);
        self.started_since_poll.fetch_add(1, Ordering::Relaxed);
        self.under_way.fetch_add(1, Ordering::AcqRel);
    }

    fn end(&self) {
        let nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_end.fetch_max(nanos, Ordering::Relaxed);
        self.under_way.fetch_sub(1, Ordering::AcqRel);
    }

    fn quiet(&self) -> Quiet {
        if self.under_way.load(Ordering::Acquire) > 0 {
            Quiet::UnderWay
        } else if !self.started.load(Ordering::Relaxed) {
            Quiet::NeverStarted
        } else {
            let nanos = self.last_end.load(Ordering::Relaxed);
            Quiet::Since(self.origin + Duration::from_nanos(nanos))
        }
    }
}

/// Completes once no request has been under way for `first` since `since` when no request ever
/// started, or for `then` since the later of `since` and the end of the last request.
async fn idle(in_flight: &InFlight, since: Instant, first: Duration, then: Duration) {
    loop {
        let now = Instant::now();
        let deadline = match in_flight.quiet() {
            Quiet::NeverStarted => since + first,
            Quiet::Since(ended) => since.max(ended) + then,
            // Read again once `then` has passed: a request's end wakes no task.
            Quiet::UnderWay => now + then,
        };
        if deadline <= now {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// A connection's service: counts its requests under way and bounds each by the request
/// timeout.
struct Tracked<S, B> {
    inner: S,
    in_flight: Arc<InFlight>,
    timeout: Duration,
    too_slow: fn() -> Response<B>,
    answer: fn(Response<B>) -> Response<B>,
    /// The answer to a request that is not the port's ([`Served::hint`]).
    hint: Option<Hint<B>>,
}

/// One request under way, until dropped: with its answer's body, so that a stream (a gRPC
/// server stream) counts as under way until its last frame is sent, and its connection is
/// not closed as idle meanwhile.
struct UnderWay(Arc<InFlight>);

pin_project_lite::pin_project! {
    /// An answer's body, holding its request's [`UnderWay`] until the body ends or is dropped.
    pub(crate) struct Counted<B> {
        #[pin]
        body: B,
        under_way: Option<UnderWay>,
    }
}

impl<B: Body> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if let std::task::Poll::Ready(None | Some(Err(_))) = frame {
            this.under_way.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.end();
    }
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Tracked<S, B>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<Counted<B>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Counted<B>>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.in_flight.start();
        let under_way = UnderWay(Arc::clone(&self.in_flight));
        let (inner, timeout) = (self.inner.clone(), self.timeout);
        let (too_slow, answer) = (self.too_slow, self.answer);
        let hinted = self.hint.as_ref().and_then(|hint| hint(&request));
        Box::pin(async move {
            let response = if let Some(hinted) = hinted {
                hinted
            } else {
                match tokio::time::timeout(timeout, inner.oneshot(request)).await {
                    Ok(Ok(response)) => answer(response),
                    Ok(Err(never)) => match never {},
                    Err(_) => too_slow(),
                }
            };
            // The request is under way until its body is sent (or dropped with its stream).
            Ok(response.map(|body| Counted {
                body,
                under_way: Some(under_way),
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_secs(10);
    const THEN: Duration = Duration::from_secs(60);

    /// How long `idle` takes from now, on the paused clock.
    async fn idle_after(in_flight: &InFlight, since: Instant) -> Duration {
        let start = Instant::now();
        idle(in_flight, since, FIRST, THEN).await;
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_no_request_is_idle_after_the_first_limit() {
        let in_flight = InFlight::new();
        let opened = Instant::now();
        assert_eq!(idle_after(&in_flight, opened).await, FIRST);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_under_way_keeps_the_connection_and_its_end_restarts_the_limit() {
        let in_flight = Arc::new(InFlight::new());
        let opened = Instant::now();
        in_flight.start();
        let ends = {
            let in_flight = Arc::clone(&in_flight);
            tokio::spawn(async move {
                // Under way through several idle periods: a long request is not idleness.
                tokio::time::sleep(THEN * 3 + Duration::from_secs(7)).await;
                in_flight.end();
            })
        };
        let took = idle_after(&in_flight, opened).await;
        ends.await.unwrap();
        assert_eq!(took, THEN * 4 + Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_counts_from_the_last_end_of_overlapping_requests() {
        let in_flight = Arc::new(InFlight::new());
        let opened = Instant::now();
        in_flight.start();
        in_flight.start();
        let ends = {
            let in_flight = Arc::clone(&in_flight);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                in_flight.end();
                tokio::time::sleep(Duration::from_secs(30)).await;
                in_flight.end();
                // A request that starts and ends while the timer sleeps moves the limit too.
                tokio::time::sleep(Duration::from_secs(40)).await;
                in_flight.start();
                in_flight.end();
            })
        };
        let took = idle_after(&in_flight, opened).await;
        ends.await.unwrap();
        assert_eq!(took, Duration::from_secs(5 + 30 + 40) + THEN);
    }

    #[tokio::test(start_paused = true)]
    async fn once_asked_to_end_the_limit_counts_from_the_ask() {
        let in_flight = InFlight::new();
        in_flight.start();
        in_flight.end();
        tokio::time::sleep(Duration::from_secs(100)).await;
        // The last request ended long before: LINGER from the ask, not from that end.
        let asked = Instant::now();
        idle(&in_flight, asked, LINGER, LINGER).await;
        assert_eq!(asked.elapsed(), LINGER);
    }
}
