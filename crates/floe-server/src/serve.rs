//! A server's listeners served until a shutdown future completes ([`serve_app_secure`]), and
//! the watch that keeps readiness and gRPC health while they are.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floe_sequencer::Sequencer;
use tokio::net::TcpListener;
use tonic::Status;

use crate::app::App;
use crate::{auth, conn, grpc, http, observe, Limits, Security};

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
        let now = app.not_ready(None);
        // Compared without their figures: a refusal's reason says by how much the clock is
        // behind, which changes every second while nothing else does.
        let shape = |why: &[String]| -> Vec<String> {
            why.iter()
                .map(|w| w.chars().filter(|c| !c.is_ascii_digit()).collect())
                .collect()
        };
        if shape(&now) != shape(&last) {
            if now.is_empty() {
                tracing::info!("ready");
            } else {
                tracing::warn!("not ready: {}", now.join("; "));
            }
            if let Some(h) = &health {
                grpc::set_health(h, &app).await;
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
        Some(listener) => {
            let bound = listener.local_addr().ok();
            let admin = crate::admin::allowed(security.tokens.is_some(), bound);
            let (routes, reporter) = grpc::routes(&app, admin).await?;
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
                grpc::set_health(h, &app).await;
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
    security.record();
    let metrics_on = app.telemetry.handle.is_some();
    let hint = grpc_hint(
        http.as_ref().and_then(|l| l.local_addr().ok()),
        security.tls.is_some(),
    );
    let grpc_task = match (grpc, grpc_service) {
        (Some(listener), Some(routes)) => {
            let served = conn::Served {
                protocol: conn::Protocol::Http2,
                service: observe::Observed::new(
                    auth::Guarded {
                        inner: routes,
                        guard: security.guard(auth::GRPC_HEALTH, false),
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
                answer: grpc::bounded,
                tls: security.tls.as_ref().map(|t| t.grpc.clone()),
                hint: Some(hint),
            };
            Some(conn::run(listener, served, limits, stopped.clone()))
        }
        _ => None,
    };
    let http_task = http.map(|listener| {
        let bound = listener.local_addr().ok();
        let served = conn::Served {
            protocol: conn::Protocol::Http1,
            service: observe::Observed::new(
                auth::Guarded {
                    inner: http::service(
                        Arc::clone(&app),
                        bound,
                        crate::admin::allowed(security.tokens.is_some(), bound),
                    ),
                    guard: security.guard(auth::HTTP_HEALTH, true),
                    refuse: auth::refuse_http,
                },
                observe::Listener::Http,
                metrics_on,
            ),
            too_slow: || http::too_slow().map(observe::Timed::untimed),
            answer: |r| r,
            tls: security.tls.as_ref().map(|t| t.http.clone()),
            hint: None,
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

/// What the gRPC port answers a request that is not gRPC (a `curl` at the wrong port): one line
/// of text naming the HTTP listener (`http`, bound there; `None`: there is none), instead of a
/// closed connection (HTTP/1) or an empty 200 with a gRPC status (HTTP/2). HTTP/1: 426 (RFC
/// 9110: with the protocol to use in `Upgrade`); HTTP/2 without `content-type:
/// application/grpc...`: 415, as gRPC's protocol asks of servers.
pub(crate) fn grpc_hint(
    http: Option<std::net::SocketAddr>,
    tls: bool,
) -> conn::Hint<observe::Timed<tonic::body::Body>> {
    let scheme = if tls { "https" } else { "http" };
    let text: Arc<str> = match http {
        Some(addr) if addr.ip().is_unspecified() => format!(
            "this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on port {} ({scheme})\n",
            addr.port()
        ),
        Some(addr) => format!(
            "this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on {scheme}://{addr}/\n"
        ),
        None => "this is floe's gRPC port (gRPC over HTTP/2); this server has no HTTP listener\n"
            .to_string(),
    }
    .into();
    // h2c: HTTP/2 without TLS.
    let upgrade = if tls { "h2" } else { "h2c" };
    Arc::new(move |request: &hyper::Request<hyper::body::Incoming>| {
        let answer = hyper::Response::builder()
            .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8");
        let answer = if request.version() < hyper::Version::HTTP_2 {
            answer
                .status(hyper::StatusCode::UPGRADE_REQUIRED)
                .header(hyper::header::UPGRADE, upgrade)
        } else if request
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"))
        {
            return None;
        } else {
            answer.status(hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE)
        };
        // Not a request of the port's: answered before the metrics layer, so not timed.
        let body = |b| observe::Timed::untimed(b);
        // HEAD: the headers alone (a body would break HTTP/2's stream).
        let text = if request.method() == hyper::Method::HEAD {
            tonic::body::Body::empty()
        } else {
            tonic::body::Body::new(text.to_string())
        };
        Some(
            answer
                .body(body(text))
                .unwrap_or_else(|_| hyper::Response::new(body(tonic::body::Body::empty()))),
        )
    })
}
