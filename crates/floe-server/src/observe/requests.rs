//! Each request measured (`floe_request_duration_seconds`) and logged at debug level
//! ([`Observed`]), labelled by a route template from the routers' own tables.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{LazyLock, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::{Request, Response};
use metrics::histogram;

/// Which listener a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The gRPC port.
    Grpc,
    /// The HTTP port.
    Http,
}

use crate::grpc::ROUTES as GRPC_ROUTES;

/// The HTTP route labels: the router's own table ([`crate::http::ROUTES`]) and `unmatched`.
const HTTP_ROUTE_COUNT: usize = crate::http::ROUTES.len() + 1;

/// The index in [`GRPC_ROUTES`] of a gRPC path (the last: `unknown`).
fn grpc_route_index(path: &str) -> usize {
    let served = &GRPC_ROUTES[..GRPC_ROUTES.len() - 1];
    served
        .iter()
        .position(|m| *m == path)
        .unwrap_or(served.len())
}

/// The route label of a path on either listener (an HTTP route template, a gRPC method this
/// server serves, or `unmatched`): never the request's own text.
pub fn route_label(path: &str) -> &'static str {
    match GRPC_ROUTES[grpc_route_index(path)] {
        "unknown" => crate::http::route_label(path),
        method => method,
    }
}

/// The methods, as labels.
const METHODS: [&str; 4] = ["GET", "POST", "HEAD", "OTHER"];

fn method_index(method: &hyper::Method) -> usize {
    match *method {
        hyper::Method::GET => 0,
        hyper::Method::POST => 1,
        hyper::Method::HEAD => 2,
        _ => 3,
    }
}

/// Status labels: "100" to "999".
static HTTP_STATUS: LazyLock<Vec<String>> =
    LazyLock::new(|| (0..1000).map(|c: u16| c.to_string()).collect());

/// gRPC's name of a status code (`UNAVAILABLE`), as labels and messages write it.
pub fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn status_label<B>(listener: Listener, response: &Response<B>) -> &'static str {
    match listener {
        Listener::Http => HTTP_STATUS
            .get(usize::from(response.status().as_u16()))
            .map_or("other", String::as_str),
        Listener::Grpc => match response.headers().get("grpc-status") {
            Some(v) => grpc_code_name(tonic::Code::from_bytes(v.as_bytes())),
            None if response.status().is_success() => "OK",
            None => HTTP_STATUS
                .get(usize::from(response.status().as_u16()))
                .map_or("other", String::as_str),
        },
    }
}

/// A service whose requests are measured (`floe_request_duration_seconds`) and logged at debug
/// level.
#[derive(Clone, Debug)]
pub struct Observed<S> {
    inner: S,
    listener: Listener,
    /// Record `floe_request_duration_seconds` (metrics on).
    metrics: bool,
}

impl<S> Observed<S> {
    /// `inner`, measured as requests of `listener` when `metrics` is set.
    pub fn new(inner: S, listener: Listener, metrics: bool) -> Observed<S> {
        Observed {
            inner,
            listener,
            metrics,
        }
    }
}

/// The histograms of successful answers per route and method (`route * 4 + method`),
/// registered on first use in the process's recorder: a request records into one without a
/// registry lookup (every other status goes through the registry).
static HTTP_OK: [OnceLock<metrics::Histogram>; HTTP_ROUTE_COUNT * METHODS.len()] =
    [const { OnceLock::new() }; HTTP_ROUTE_COUNT * METHODS.len()];
static GRPC_OK: [OnceLock<metrics::Histogram>; GRPC_ROUTES.len() * METHODS.len()] =
    [const { OnceLock::new() }; GRPC_ROUTES.len() * METHODS.len()];

impl Listener {
    fn route(self, index: usize) -> &'static str {
        match self {
            Listener::Grpc => GRPC_ROUTES[index],
            Listener::Http => crate::http::ROUTE_LABELS[index].as_str(),
        }
    }

    fn route_index(self, path: &str) -> usize {
        match self {
            Listener::Grpc => grpc_route_index(path),
            Listener::Http => crate::http::route_index(path),
        }
    }

    fn ok_histograms(self) -> &'static [OnceLock<metrics::Histogram>] {
        match self {
            Listener::Grpc => &GRPC_OK,
            Listener::Http => &HTTP_OK,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Listener::Grpc => "grpc",
            Listener::Http => "http",
        }
    }
}

impl<S, B, ReqB> tower::Service<Request<ReqB>> for Observed<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<B>, Error = Infallible>,
{
    type Response = Response<B>;
    type Error = Infallible;
    type Future = ObservedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let slot = self.listener.route_index(request.uri().path()) * METHODS.len()
            + method_index(request.method());
        // Neither metrics nor debug lines: no clock read either.
        let timed = self.metrics || tracing::enabled!(tracing::Level::DEBUG);
        ObservedFuture {
            inner: self.inner.call(request),
            started: timed.then(Instant::now),
            metrics: self.metrics,
            slot,
            listener: self.listener,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of an [`Observed`] request.
    pub struct ObservedFuture<F> {
        #[pin]
        inner: F,
        started: Option<Instant>,
        metrics: bool,
        // The route (`slot / 4`, in the listener's table) and method (`slot % 4`).
        slot: usize,
        listener: Listener,
    }
}

impl<F, B> Future for ObservedFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    type Output = Result<Response<B>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let Some(started) = *this.started else {
            return Poll::Ready(result);
        };
        let status = match &result {
            Ok(response) => status_label(*this.listener, response),
            Err(never) => match *never {},
        };
        let seconds = started.elapsed().as_secs_f64();
        let listener = this.listener.label();
        let route = this.listener.route(*this.slot / METHODS.len());
        let method = METHODS[*this.slot % METHODS.len()];
        if *this.metrics {
            let register = || {
                histogram!(
                    "floe_request_duration_seconds",
                    "listener" => listener,
                    "route" => route,
                    "method" => method,
                    "status" => status
                )
            };
            match this.listener.ok_histograms().get(*this.slot) {
                Some(cached) if status == "200" || status == "OK" => {
                    cached.get_or_init(register).record(seconds);
                }
                _ => register().record(seconds),
            }
        }
        tracing::debug!(
            listener,
            route,
            method,
            status,
            micros = (seconds * 1e6) as u64,
            "request"
        );
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_routes_are_the_methods_served() {
        let grpc = |path| GRPC_ROUTES[grpc_route_index(path)];
        assert_eq!(grpc("/floe.v1.Floe/NextIds"), "/floe.v1.Floe/NextIds");
        assert_eq!(grpc("/evil.Service/Anything"), "unknown");
        assert_eq!(route_label("/evil.Service/Anything"), "unmatched");
        assert_eq!(route_label("/v1/ids/sno"), "/v1/ids/:kind");
    }
}
