//! Each request measured (`floe_request_duration_seconds`) and logged at debug level
//! ([`Observed`]), labelled by a route template from the routers' own tables, from its head to
//! the end of its answer's body ([`Timed`]: a stream is timed whole), with its HTTP status
//! (`status`) and, on the gRPC listener, its gRPC status (`grpc_code`, from the trailers).

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

/// The HTTP status label of an answer ("100" to "999").
fn http_status_label<B>(response: &Response<B>) -> &'static str {
    HTTP_STATUS
        .get(usize::from(response.status().as_u16()))
        .map_or("other", String::as_str)
}

/// The gRPC status of an answer's head: its `grpc-status` (a trailers-only answer, as errors
/// are), else `None` while the call goes on (the status comes in the trailers), else the code a
/// client makes of an HTTP error without one (gRPC's HTTP-to-gRPC status mapping).
fn grpc_code_of_head<B>(response: &Response<B>) -> Option<&'static str> {
    if let Some(v) = response.headers().get("grpc-status") {
        return Some(grpc_code_name(tonic::Code::from_bytes(v.as_bytes())));
    }
    let status = response.status();
    if status.is_success() {
        return None;
    }
    Some(match status.as_u16() {
        400 => "INTERNAL",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "UNIMPLEMENTED",
        429 | 502 | 503 | 504 => "UNAVAILABLE",
        _ => "UNKNOWN",
    })
}

/// The gRPC status of a call, as far as its answer has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GrpcCode {
    /// Not a gRPC call (the HTTP listener): no `grpc_code` label.
    NotGrpc,
    /// Known (from the head or the trailers).
    Known(&'static str),
    /// Not known yet: the answer's trailers will say.
    Pending,
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
    type Response = Response<Timed<B>>;
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
    type Output = Result<Response<Timed<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let Ok(response) = result;
        let Some(started) = *this.started else {
            return Poll::Ready(Ok(response.map(Timed::untimed)));
        };
        let grpc = match this.listener {
            Listener::Http => GrpcCode::NotGrpc,
            Listener::Grpc => {
                grpc_code_of_head(&response).map_or(GrpcCode::Pending, GrpcCode::Known)
            }
        };
        let timer = Timer {
            started,
            metrics: *this.metrics,
            slot: *this.slot,
            listener: *this.listener,
            status: http_status_label(&response),
            grpc,
        };
        Poll::Ready(Ok(response.map(|body| Timed {
            body,
            timer: Some(timer),
        })))
    }
}

/// A request being answered: recorded (`floe_request_duration_seconds` and the debug line)
/// when dropped, which is when its answer's body ended or was dropped unfinished.
#[derive(Debug)]
struct Timer {
    started: Instant,
    metrics: bool,
    // The route (`slot / 4`, in the listener's table) and method (`slot % 4`).
    slot: usize,
    listener: Listener,
    /// The HTTP status of the answer's head.
    status: &'static str,
    grpc: GrpcCode,
}

impl Drop for Timer {
    fn drop(&mut self) {
        let seconds = self.started.elapsed().as_secs_f64();
        let listener = self.listener.label();
        let route = self.listener.route(self.slot / METHODS.len());
        let method = METHODS[self.slot % METHODS.len()];
        let status = self.status;
        let grpc_code = match self.grpc {
            GrpcCode::NotGrpc => None,
            GrpcCode::Known(code) => Some(code),
            // The body went before its trailers: the client cancelled the call (or its
            // connection went), which is what it sees too.
            GrpcCode::Pending => Some("CANCELLED"),
        };
        if self.metrics {
            let ok = status == "200" && grpc_code.is_none_or(|c| c == "OK");
            let register = || match grpc_code {
                None => histogram!(
                    "floe_request_duration_seconds",
                    "listener" => listener,
                    "route" => route,
                    "method" => method,
                    "status" => status
                ),
                Some(code) => histogram!(
                    "floe_request_duration_seconds",
                    "listener" => listener,
                    "route" => route,
                    "method" => method,
                    "status" => status,
                    "grpc_code" => code
                ),
            };
            match self.listener.ok_histograms().get(self.slot) {
                Some(cached) if ok => cached.get_or_init(register).record(seconds),
                _ => register().record(seconds),
            }
        }
        tracing::debug!(
            listener,
            route,
            method,
            status,
            grpc_code,
            micros = (seconds * 1e6) as u64,
            "request"
        );
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, timed to its end: its request is recorded when the body ends (a
    /// gRPC call with the status of its trailers) or is dropped unfinished (gRPC:
    /// `CANCELLED`). A stream's time is thus the whole stream's, not its first headers'.
    #[derive(Debug)]
    pub struct Timed<B> {
        #[pin]
        body: B,
        timer: Option<Timer>,
    }
}

impl<B> Timed<B> {
    /// `body`, not timed (metrics and debug lines off, or an answer made outside
    /// [`Observed`], such as a request timeout's).
    pub fn untimed(body: B) -> Timed<B> {
        Timed { body, timer: None }
    }
}

impl<B: Default> Default for Timed<B> {
    fn default() -> Timed<B> {
        Timed::untimed(B::default())
    }
}

impl<B: hyper::body::Body> hyper::body::Body for Timed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.body.poll_frame(cx));
        if let Some(timer) = this.timer.as_mut() {
            let ended = match &frame {
                Some(Ok(f)) => match f.trailers_ref() {
                    Some(trailers) => {
                        if timer.grpc == GrpcCode::Pending {
                            timer.grpc = GrpcCode::Known(
                                trailers.get("grpc-status").map_or("UNKNOWN", |v| {
                                    grpc_code_name(tonic::Code::from_bytes(v.as_bytes()))
                                }),
                            );
                        }
                        true
                    }
                    None => false,
                },
                // The body failed: the stream is reset, which a gRPC client reads as INTERNAL.
                Some(Err(_)) => {
                    if timer.grpc == GrpcCode::Pending {
                        timer.grpc = GrpcCode::Known("INTERNAL");
                    }
                    true
                }
                // Ended with no trailers: a gRPC client gets no status.
                None => {
                    if timer.grpc == GrpcCode::Pending {
                        timer.grpc = GrpcCode::Known("UNKNOWN");
                    }
                    true
                }
            };
            if ended {
                this.timer.take();
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
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

    #[test]
    fn a_grpc_head_without_status_waits_for_the_trailers() {
        let head = |status: u16, grpc: Option<&str>| {
            let mut r = Response::builder().status(status);
            if let Some(g) = grpc {
                r = r.header("grpc-status", g);
            }
            r.body(()).unwrap()
        };
        assert_eq!(grpc_code_of_head(&head(200, None)), None);
        assert_eq!(
            grpc_code_of_head(&head(200, Some("14"))),
            Some("UNAVAILABLE")
        );
        assert_eq!(grpc_code_of_head(&head(200, Some("0"))), Some("OK"));
        // gRPC's mapping of an HTTP error without a gRPC status.
        assert_eq!(grpc_code_of_head(&head(404, None)), Some("UNIMPLEMENTED"));
        assert_eq!(grpc_code_of_head(&head(503, None)), Some("UNAVAILABLE"));
        assert_eq!(grpc_code_of_head(&head(500, None)), Some("UNKNOWN"));
    }

    /// A body of the frames given, then its end.
    struct Frames(std::collections::VecDeque<hyper::body::Frame<hyper::body::Bytes>>);

    impl hyper::body::Body for Frames {
        type Data = hyper::body::Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    /// The answer of `path` on `listener` (metrics on), its body the frames given: a data
    /// frame, then trailers with `trailer_status` when given.
    async fn answer(
        listener: Listener,
        path: &str,
        trailer_status: Option<&'static str>,
    ) -> Response<Timed<Frames>> {
        use tower::Service;
        let mut service = Observed::new(
            tower::service_fn(move |_: Request<()>| async move {
                let mut frames = std::collections::VecDeque::new();
                frames.push_back(hyper::body::Frame::data(hyper::body::Bytes::from_static(
                    b"message",
                )));
                if let Some(code) = trailer_status {
                    let mut trailers = hyper::HeaderMap::new();
                    trailers.insert("grpc-status", code.parse().unwrap());
                    frames.push_back(hyper::body::Frame::trailers(trailers));
                }
                Ok::<_, Infallible>(Response::new(Frames(frames)))
            }),
            listener,
            true,
        );
        let request = Request::post(path).body(()).unwrap();
        match service.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Polls one frame of `body`.
    async fn frame(body: &mut Timed<Frames>) -> Option<hyper::body::Frame<hyper::body::Bytes>> {
        use hyper::body::Body;
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
            .await
            .map(|f| f.unwrap())
    }

    /// The count of `floe_request_duration_seconds` with exactly these labels.
    fn count(handle: &metrics_exporter_prometheus::PrometheusHandle, labels: &str) -> u64 {
        let prefix = format!("floe_request_duration_seconds_count{{{labels}}} ");
        handle
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn a_stream_is_recorded_at_its_end_with_its_trailers_status_or_cancelled() {
        let handle = crate::observe::recorder().expect("the recorder");
        let unavailable = r#"listener="grpc",route="/floe.v1.Floe/StreamSequence",method="POST",status="200",grpc_code="UNAVAILABLE""#;
        let before = count(&handle, unavailable);
        let mut body = answer(Listener::Grpc, "/floe.v1.Floe/StreamSequence", Some("14"))
            .await
            .into_body();
        assert!(frame(&mut body).await.unwrap().is_data());
        // The head is out, the stream goes on: nothing recorded yet.
        assert_eq!(count(&handle, unavailable), before);
        assert!(frame(&mut body).await.unwrap().is_trailers());
        assert_eq!(count(&handle, unavailable), before + 1);
        assert!(frame(&mut body).await.is_none());
        drop(body);
        assert_eq!(count(&handle, unavailable), before + 1, "recorded once");

        // Dropped before its trailers: the client cancelled.
        let cancelled = r#"listener="grpc",route="/floe.v1.Floe/StreamIds",method="POST",status="200",grpc_code="CANCELLED""#;
        let before = count(&handle, cancelled);
        let mut body = answer(Listener::Grpc, "/floe.v1.Floe/StreamIds", Some("0"))
            .await
            .into_body();
        assert!(frame(&mut body).await.unwrap().is_data());
        drop(body);
        assert_eq!(count(&handle, cancelled), before + 1);

        // HTTP: its status, no grpc_code.
        let http = r#"listener="http",route="unmatched",method="POST",status="200""#;
        let before = count(&handle, http);
        let mut body = answer(Listener::Http, "/no/such/route", None)
            .await
            .into_body();
        assert!(frame(&mut body).await.unwrap().is_data());
        assert!(frame(&mut body).await.is_none());
        assert_eq!(count(&handle, http), before + 1);
    }
}
