//! floe's server: every ID kind and per-key sequences, over gRPC (floe.v1, and Layotto's
//! `spec.proto.runtime.v1.Runtime/GetNextId`, wire compatible) and HTTP (floe's routes and
//! Leaf's).
//!
//! A server is assembled from its configuration ([`config::ServerConfig`], what `floe serve
//! --config floe.toml` reads) by [`Server::start`]: listeners bound, Snowflake worker IDs and
//! the sno partition leased ([`lease`]), the generators built ([`ids`]), the stores opened;
//! [`Server::run`] serves until a shutdown future completes and closes everything in order.
//! [`serve_app`] takes listeners already bound and a shutdown future (as mini-redis does), so
//! tests bind `127.0.0.1:0` and drive it in-process; [`serve`] serves a sequencer alone. The
//! `floe serve` binary only fills the configuration. Connections live within [`Limits`]
//! ([`conn`]): a cap per listener, header, idle and request timeouts, and a shutdown deadline
//! after which open connections are dropped.
//!
//! **gRPC**: [`grpc`] (`floe.v1.Floe`: batches as packed repeated fields, server streams),
//! Layotto's `Runtime` (below), `grpc.health.v1.Health` and server reflection (v1, v1alpha).
//! **HTTP**: [`http`] (`/v1/ids/{kind}`, `/v1/sequencer/...`, `/v1/stores`, `/healthz`) and
//! [`leaf`] (Leaf's `/api/segment/get/{key}`, `/api/snowflake/get/{key}`,
//! `/decodeSnowflakeId`, `/cache`).
//!
//! **Layotto's GetNextId** (`proto/runtime.proto`, Layotto's messages): `store_name` picks a
//! configured store (an empty name picks the only one, when there is one), `key` is a sequence
//! key, an absent `options` or `increment = WEAK` asks for WEAK, `STRONG` for STRONG;
//! `metadata` is accepted and not used. Errors, checked in Layotto's order:
//!
//! | case | gRPC status | HTTP |
//! |---|---|---|
//! | no store configured | `FAILED_PRECONDITION` "Sequencer store is not configured" | 503 |
//! | empty key | `INVALID_ARGUMENT` "Key is empty in sequencer store S" | 400 |
//! | key too long or holding NUL | `INVALID_ARGUMENT` | 400 |
//! | increment not 0 or 1 | `INVALID_ARGUMENT` (Layotto: `UNKNOWN`) | 400 |
//! | unknown store | `INVALID_ARGUMENT` "Sequencer store S not found" | 404 |
//! | malformed message | `INVALID_ARGUMENT` (tonic: `INTERNAL`) | - |
//! | STRONG on a store that cannot | `FAILED_PRECONDITION` | 409 |
//! | sequence past `i64::MAX` | `OUT_OF_RANGE` | 409 |
//! | store unreachable or slow, a lease lost (fenced), a clock behind | `UNAVAILABLE` (retry) | 503 |
//! | request slower than the request timeout | `DEADLINE_EXCEEDED` | 503 |
//! | a `count` above the largest batch, an unknown kind or option | `INVALID_ARGUMENT` | 400 |
//! | cross-site browser request | - | 403 |
//!
//! Error messages are the server's own words: text from the request is echoed cut to
//! [`MAX_ECHO`] characters (with an ellipsis), the configured stores are not listed, and what a
//! store reports (file paths, server addresses) goes to standard error, not to the client.
#![deny(missing_docs)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_sequencer::{ErrorKind, Key, Mode, SeqError, Sequencer, StoreHandle};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

pub mod app;
pub mod auth;
pub mod codec;
pub mod config;
pub mod conn;
pub mod grpc;
pub mod http;
pub mod ids;
pub mod leaf;
pub mod lease;
pub mod observe;
pub mod present;
pub mod security;
pub mod status;
pub mod tls;

pub use app::{App, Server, StartError, StartErrorKind};
pub use config::ServerConfig;
pub use conn::Limits;
pub use security::Security;

/// The generated Layotto messages and service.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("spec.proto.runtime.v1");
}

/// The generated floe.v1 messages and service (`proto/floe/v1/floe.proto`).
#[allow(missing_docs, clippy::all)]
pub mod proto_floe {
    tonic::include_proto!("floe.v1");
}

/// The descriptor set of both protos, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

use proto::runtime_server::{Runtime, RuntimeServer};
use proto::{GetNextIdRequest, GetNextIdResponse};

/// The most characters of a request's own text (a store name, a key, a parameter) an error
/// message repeats; longer text is cut and ends with an ellipsis.
pub const MAX_ECHO: usize = 64;

/// The most characters of a library's words (a parse error, a key error) a message repeats.
pub(crate) const MAX_DETAIL: usize = 200;

/// `text` for an error message: control characters escaped (`\n`, `\u{1b}`), at most `max`
/// characters of that, and `…` when it was cut.
pub fn echo(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut used = 0usize;
    for c in text.chars() {
        let escaped = c.escape_debug();
        let width = if c.is_control() { escaped.len() } else { 1 };
        if used.saturating_add(width) > max {
            out.push('…');
            break;
        }
        used += width;
        if c.is_control() {
            out.extend(escaped);
        } else {
            out.push(c);
        }
    }
    out
}

/// The gRPC status of an error: one mapping for the whole server. The message is used as it
/// is: errors reach here through [`check`] and [`public`], which word them.
pub fn status(e: &SeqError) -> Status {
    let code = match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::UnknownStore => tonic::Code::InvalidArgument,
        ErrorKind::Unsupported | ErrorKind::Config => tonic::Code::FailedPrecondition,
        ErrorKind::Exhausted => tonic::Code::OutOfRange,
        // A local disk problem: the server cannot serve now.
        ErrorKind::Unavailable | ErrorKind::Io => tonic::Code::Unavailable,
        ErrorKind::Corrupt => tonic::Code::Internal,
        other => {
            unexpected(other);
            tonic::Code::Internal
        }
    };
    Status::new(code, e.message.clone())
}

/// An error kind this server does not know (floe-sequencer's `ErrorKind` is non-exhaustive):
/// answered as an internal error, and said on standard error so that it is not missed.
pub(crate) fn unexpected(kind: ErrorKind) {
    warn(
        Topic::Internal,
        format_args!(
            "an error of a kind this server does not map ({kind:?}) was answered as internal"
        ),
    );
}

/// What a warning is about: each topic is limited on its own, so that a store that fails
/// every request does not hide a clock refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topic {
    /// A store's error.
    Store = 0,
    /// A clock refused or a time bound not moving.
    Clock = 1,
    /// An error kind the server does not map.
    Internal = 2,
    /// A request refused for its token.
    Auth = 3,
}

/// A warning in the log, at most one a second per [`Topic`] (a store that is down fails every
/// request: the log says so once a second, with how many lines it left out).
pub(crate) fn warn(topic: Topic, line: std::fmt::Arguments<'_>) {
    static LAST: [Mutex<Option<(Instant, u64)>>; 4] = [
        Mutex::new(None),
        Mutex::new(None),
        Mutex::new(None),
        Mutex::new(None),
    ];
    let mut last = LAST[topic as usize]
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    match &mut *last {
        Some((at, left_out)) if now.duration_since(*at) < Duration::from_secs(1) => {
            *left_out = left_out.saturating_add(1);
        }
        _ => {
            let left_out = last.map_or(0, |(_, n)| n);
            if left_out > 0 {
                tracing::warn!(
                    left_out,
                    "{line} ({left_out} line(s) left out since the last)"
                );
            } else {
                tracing::warn!("{line}");
            }
            *last = Some((now, 0));
        }
    }
}

/// What a request asked of a store: the words of its errors depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// One ID.
    NextId(Mode),
    /// A segment.
    Segment,
}

/// A store's error in the server's own words: the store and the request's key (cut to
/// [`MAX_ECHO`]) and what went wrong, never what the store said about itself (a file path, a
/// server's address): that goes to standard error.
pub fn public(e: SeqError, handle: &StoreHandle, key: &str, asked: Asked) -> SeqError {
    let store = handle.name();
    let kind = handle.store().kind();
    let message = match e.kind {
        // The sequencer's words about an argument (a segment size, a key's length): no input
        // beyond a number, cut to a bound in case that changes.
        ErrorKind::InvalidArgument => echo(&e.message, MAX_DETAIL),
        ErrorKind::UnknownStore => format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        ErrorKind::Unsupported => match asked {
            Asked::NextId(Mode::Strong) => {
                format!("store {store} ({kind}) cannot serve STRONG: use WEAK")
            }
            Asked::NextId(Mode::Weak) => format!("store {store} ({kind}) cannot serve WEAK"),
            Asked::Segment => format!("store {store} ({kind}) cannot reserve segments"),
        },
        ErrorKind::Exhausted => format!(
            "the sequence of key {} in store {store} is exhausted: its next ID would pass i64::MAX",
            echo(key, MAX_ECHO)
        ),
        ErrorKind::Unavailable | ErrorKind::Io => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is unavailable or slow: retry later")
        }
        ErrorKind::Config => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store} ({kind}) is misconfigured: see the server's log")
        }
        ErrorKind::Corrupt => {
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!(
                "store {store} holds a value for key {} that floe did not write: see the server's log",
                echo(key, MAX_ECHO)
            )
        }
        other => {
            unexpected(other);
            warn(Topic::Store, format_args!("store {store}: {}", e.message));
            format!("store {store}: internal error: see the server's log")
        }
    };
    SeqError::new(e.kind, message)
}

/// A request checked as Layotto checks it, in its order: a store is configured, the key is not
/// empty, the increment is legal (`mode`, as parsed by the caller, in the server's words), the
/// store exists, then the key is a valid key. The error's kind gives its status ([`status`],
/// [`http::HttpError`]); its message repeats at most [`MAX_ECHO`] characters of the request.
pub fn check<'a>(
    sequencer: &'a Sequencer,
    store: &str,
    key: &str,
    mode: Result<Mode, String>,
) -> Result<(&'a StoreHandle, Mode), SeqError> {
    if sequencer.names().next().is_none() {
        return Err(SeqError::config("Sequencer store is not configured"));
    }
    if key.is_empty() {
        return Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!("Key is empty in sequencer store {}", echo(store, MAX_ECHO)),
        ));
    }
    let mode = mode.map_err(|e| SeqError::new(ErrorKind::InvalidArgument, e))?;
    let handle = sequencer.store(store).map_err(|e| match e.kind {
        // The sequencer's message lists every configured store: not for clients.
        ErrorKind::UnknownStore => SeqError::new(
            ErrorKind::UnknownStore,
            format!("Sequencer store {} not found", echo(store, MAX_ECHO)),
        ),
        _ => SeqError::new(e.kind, echo(&e.message, MAX_DETAIL)),
    })?;
    Key::check(key)
        .map_err(|e| SeqError::new(ErrorKind::InvalidArgument, echo(&e.to_string(), MAX_DETAIL)))?;
    Ok((handle, mode))
}

/// Layotto's `options.increment`: 0 is WEAK, 1 is STRONG.
fn grpc_mode(increment: i32) -> Result<Mode, String> {
    match increment {
        0 => Ok(Mode::Weak),
        1 => Ok(Mode::Strong),
        other => Err(format!(
            "options.increment is illegal: expected WEAK (0) or STRONG (1), found {other}"
        )),
    }
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct RuntimeService {
    sequencer: Arc<Sequencer>,
}

impl RuntimeService {
    /// Serves `sequencer`.
    pub fn new(sequencer: Arc<Sequencer>) -> Self {
        RuntimeService { sequencer }
    }
}

#[tonic::async_trait]
impl Runtime for RuntimeService {
    async fn get_next_id(
        &self,
        request: Request<GetNextIdRequest>,
    ) -> Result<Response<GetNextIdResponse>, Status> {
        let req = request.into_inner();
        let mode = grpc_mode(req.options.map(|o| o.increment).unwrap_or(0));
        let (handle, mode) =
            check(&self.sequencer, &req.store_name, &req.key, mode).map_err(|e| status(&e))?;
        let next_id = handle
            .next_id(&req.key, mode)
            .await
            .map_err(|e| status(&public(e, handle, &req.key, Asked::NextId(mode))))?;
        Ok(Response::new(GetNextIdResponse { next_id }))
    }
}

/// A gRPC answer whose message is bounded: the server's own messages are (at most
/// [`MAX_DETAIL`] characters), but tonic's can repeat a request header (an unknown
/// `grpc-encoding`): one longer than [`MAX_DETAIL`] is cut to [`MAX_ECHO`] + 40 characters.
fn bounded_grpc<B: Default>(response: hyper::Response<B>) -> hyper::Response<B> {
    let long = response
        .headers()
        .get(Status::GRPC_MESSAGE)
        .is_some_and(|m| m.len() > MAX_DETAIL);
    if !long {
        return response;
    }
    match Status::from_header_map(response.headers()) {
        Some(status) if status.message().chars().count() > MAX_DETAIL => {
            Status::new(status.code(), echo(status.message(), MAX_ECHO + 40)).into_http()
        }
        _ => response,
    }
}

/// Serves `sequencer` alone (no ID generators) over gRPC on `grpc` and HTTP on `http`: see
/// [`serve_app`].
///
/// # Errors
/// As [`serve_app`].
pub async fn serve(
    sequencer: Arc<Sequencer>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    limits: Limits,
    allowed_hosts: Vec<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let app = Arc::new(App::sequencer_only(sequencer, allowed_hosts));
    serve_app(app, grpc, http, limits, shutdown).await
}

/// The gRPC services of `app`: Layotto's Runtime, floe.v1, health (per service, kept by
/// [`watch`]) and reflection (v1 and v1alpha, for every grpcurl).
async fn grpc_routes(
    app: &Arc<App>,
) -> Result<
    (tonic::service::Routes, tonic_health::server::HealthReporter),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, &app.telemetry).await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let routes = tonic::service::Routes::new(RuntimeServer::new(RuntimeService::new(Arc::clone(
        &app.sequencer,
    ))))
    .add_service(proto_floe::floe_server::FloeServer::new(
        grpc::FloeService::new(Arc::clone(app)),
    ))
    .add_service(health_service)
    .add_service(reflection)
    .add_service(reflection_alpha);
    Ok((routes, health))
}

/// gRPC health per service: Layotto's Runtime (sequences) is serving while every store answers
/// and the server is not stopping; floe.v1.Floe (IDs and sequences) also needs every lease
/// held; `""` (the whole server) is serving when both are.
///
/// Updates are taken one at a time and each reads the state under the lock, so the last one
/// written is the latest state (the stop's NOT_SERVING is never overwritten by a probe's
/// SERVING computed just before it).
async fn set_health(health: &tonic_health::server::HealthReporter, t: &observe::Telemetry) {
    use std::sync::atomic::Ordering::Relaxed;
    use tonic_health::ServingStatus::{NotServing, Serving};
    let _one_at_a_time = t.health_updates.lock().await;
    let stores = t.stores_ready.iter().all(|(_, r)| r.answering());
    let leases = t.leases.iter().all(|l| !l.fenced());
    let runtime = stores && !t.stopping.load(Relaxed);
    let status = |ok: bool| if ok { Serving } else { NotServing };
    health
        .set_service_status("spec.proto.runtime.v1.Runtime", status(runtime))
        .await;
    health
        .set_service_status("floe.v1.Floe", status(runtime && leases))
        .await;
    health
        .set_service_status("", status(runtime && leases))
        .await;
}

/// How often stores are probed and readiness re-read.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// While the server runs: probes every store (each within its call timeout, all at once) every
/// [`WATCH_EVERY`] at most, samples issue totals for rates, keeps gRPC health per service and
/// logs each change of readiness.
async fn watch(app: Arc<App>, health: Option<tonic_health::server::HealthReporter>) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Vec<String> = Vec::new();
    loop {
        tick.tick().await;
        let probes = app.sequencer.stores().map(|h| {
            let h = Arc::clone(h);
            async move {
                let timeout = h.timeout();
                let ok = matches!(
                    tokio::time::timeout(timeout, h.store().ping()).await,
                    Ok(Ok(()))
                );
                (h.name().to_string(), ok)
            }
        });
        for (name, ok) in futures_util::future::join_all(probes).await {
            if let Some((_, probe)) = app.telemetry.stores_ready.iter().find(|(n, _)| *n == name) {
                probe.record(ok);
            }
        }
        app.telemetry.rates.sample(observe::totals(&app));
        let now = app.telemetry.not_ready();
        if now != last {
            if now.is_empty() {
                tracing::info!("ready");
            } else {
                tracing::warn!("not ready: {}", now.join("; "));
            }
            if let Some(h) = &health {
                set_health(h, &app.telemetry).await;
            }
            last = now;
        }
    }
}

/// Serves `app` over gRPC on `grpc` and HTTP on `http` (either may be `None`) within `limits`
/// until `shutdown` completes (HTTP answers to IP addresses, `localhost` and the app's allowed
/// host names), then stops accepting, lets connections end until `limits.shutdown_timeout` and
/// drops the rest. When it returns, no connection is open and the server holds no reference
/// to `app` beyond the caller's: the caller can close its stores.
///
/// # Errors
/// When `limits` are not valid ([`Limits::validate`]), or both listeners are `None`.
pub async fn serve_app(
    app: Arc<App>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    serve_app_secure(app, grpc, http, limits, Security::default(), shutdown).await
}

/// [`serve_app`] with TLS and bearer tokens ([`Security`]): a listener bound beyond loopback
/// without either is warned about.
///
/// # Errors
/// As [`serve_app`].
pub async fn serve_app_secure(
    app: Arc<App>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    limits: Limits,
    security: Security,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    limits.validate()?;
    for (name, listener) in [("listen.grpc", &grpc), ("listen.http", &http)] {
        if let Some(addr) = listener.as_ref().and_then(|l| l.local_addr().ok()) {
            security.warn_if_exposed(name, addr);
        }
    }
    if grpc.is_none() && http.is_none() {
        return Err("grpc, http: both are off: nothing to serve".into());
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut health = None;
    let grpc_service = match &grpc {
        Some(_) => {
            let (routes, reporter) = grpc_routes(&app).await?;
            health = Some(reporter);
            Some(routes)
        }
        None => None,
    };
    let stopping = {
        let app = Arc::clone(&app);
        let health = health.clone();
        async move {
            shutdown.await;
            app.telemetry
                .stopping
                .store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(h) = &health {
                set_health(h, &app.telemetry).await;
            }
            if limits.shutdown_delay.is_zero() {
                tracing::info!("stopping: no longer ready");
            } else {
                // Load balancers see /readyz 503 and take the server out while it still
                // serves whatever they send meanwhile.
                tracing::info!(
                    "stopping: no longer ready; serving {} s more before the listeners close (shutdown delay)",
                    limits.shutdown_delay.as_secs()
                );
                tokio::time::sleep(limits.shutdown_delay).await;
            }
            let _ = stop.send(true);
        }
    };
    let signal = tokio::spawn(stopping);
    let watcher = tokio::spawn(watch(Arc::clone(&app), health));
    let upkeep = app.telemetry.handle.clone().map(observe::spawn_upkeep);
    let metrics_on = app.telemetry.handle.is_some();
    let grpc_task = match (grpc, grpc_service) {
        (Some(listener), Some(routes)) => {
            let served = conn::Served {
                protocol: conn::Protocol::Http2,
                service: observe::Observed::new(
                    auth::Guarded {
                        inner: routes,
                        guard: security.guard(auth::GRPC_HEALTH),
                        refuse: auth::refuse_grpc,
                    },
                    observe::Listener::Grpc,
                    metrics_on,
                ),
                too_slow: || {
                    Status::deadline_exceeded(
                        "the request took longer than the server's request timeout",
                    )
                    .into_http()
                },
                answer: bounded_grpc,
                tls: security.tls.as_ref().map(|t| t.grpc.clone()),
            };
            Some(conn::run(listener, served, limits, stopped.clone()))
        }
        _ => None,
    };
    let http_task = http.map(|listener| {
        let served = conn::Served {
            protocol: conn::Protocol::Http1,
            service: observe::Observed::new(
                auth::Guarded {
                    inner: http::router(Arc::clone(&app)),
                    guard: security.guard(auth::HTTP_HEALTH),
                    refuse: auth::refuse_http,
                },
                observe::Listener::Http,
                metrics_on,
            ),
            too_slow: http::too_slow,
            answer: |r| r,
            tls: security.tls.as_ref().map(|t| t.http.clone()),
        };
        conn::run(listener, served, limits, stopped.clone())
    });
    drop(app);
    let grpc = async {
        if let Some(task) = grpc_task {
            task.await;
        }
    };
    let http = async {
        if let Some(task) = http_task {
            task.await;
        }
    };
    tokio::join!(grpc, http);
    signal.abort();
    let _ = signal.await;
    watcher.abort();
    let _ = watcher.await;
    if let Some(u) = upkeep {
        u.abort();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_cuts_at_the_bound_and_escapes_control_characters() {
        assert_eq!(echo("orders", MAX_ECHO), "orders");
        assert_eq!(echo(&"x".repeat(64), 64), "x".repeat(64));
        assert_eq!(echo(&"x".repeat(65), 64), format!("{}…", "x".repeat(64)));
        assert_eq!(echo(&"é".repeat(100), 3), "ééé…");
        assert_eq!(echo("a\nb\u{1b}", 64), "a\\nb\\u{1b}");
        // Escapes count at their printed width.
        assert_eq!(echo(&"\u{1b}".repeat(100), 14), "\\u{1b}\\u{1b}…");
        assert_eq!(echo("", 64), "");
    }
}
