//! The requests most clients send, answered in front of the router: `GET` or `POST` with no
//! query of `/v1/sequencer/{store}/{key}` and Leaf's `/api/segment/get/{key}` (the next WEAK ID
//! of one key), `/v1/ids/{kind}` and Leaf's `/api/snowflake/get/{key}` (one ID).
//!
//! Through axum, such a request pays for more than its answer: the router stores the path's
//! parameters in the request (percent-decoded into new strings, a vector and a map, each
//! allocated), the handler's extractors copy the URI, and the host guard's middleware boxes a
//! future of its own. Measured with callgrind over loopback, that was about 5,000 of the 28,000
//! instructions of the whole request, and the route served 0.82x the requests per second of
//! `/healthz` (scripts/load.sh). Here the same handler code answers it directly
//! (`floe::weak_next_id`, `floe::one_id`, `leaf::segment_number`, `leaf::snowflake_number`),
//! behind the same guard ([`super::guard`]).
//!
//! **Only what is certain to reach those routes is taken**: the method is `GET` or `POST`, the
//! query is absent or empty, and the path is exactly the route's, each parameter a non-empty
//! segment (a key or kind that is read: valid percent-encoded UTF-8). Everything else, `HEAD` and trailing
//! slashes included, goes to the router, which answers as it always has. A test compares every
//! answer with the router's own for the same requests.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use axum::http::{Method, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::{BoxFuture, Either};
use percent_encoding::percent_decode_str;

use crate::app::App;

/// floe's HTTP service: [`super::router`], with the common requests answered in front of it.
#[derive(Clone, Debug)]
pub struct Http {
    router: Router,
    app: Arc<App>,
    guard: Arc<super::guard::Guard>,
}

/// A route answered here, not by the router (its template in the route table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fast {
    /// `/v1/sequencer/{store}/{key}`: the path, decoded by the route's own code.
    Sequencer,
    /// `/api/segment/get/{key}`.
    LeafSegment,
    /// `/api/snowflake/get/{key}` (the key is not used, as in Leaf).
    LeafSnowflake,
    /// `/v1/ids/{kind}`.
    Ids,
}

impl Fast {
    const ALL: [(Fast, &'static str); 4] = [
        (Fast::Sequencer, super::SEQUENCER),
        (Fast::LeafSegment, super::LEAF_SEGMENT),
        (Fast::LeafSnowflake, super::LEAF_SNOWFLAKE),
        (Fast::Ids, super::IDS),
    ];
}

/// Each route's template cut once into the literal part before its first `{name}` and the
/// number of its parameters (its last segments), so that a request is matched with a prefix
/// compare and a split of what follows.
static SHAPES: LazyLock<[(Fast, &'static str, usize); 4]> = LazyLock::new(|| {
    Fast::ALL.map(|(fast, template)| {
        let at = template.find('{').unwrap_or(template.len());
        let params = template[at..].split('/').count();
        (fast, &template[..at], params)
    })
});

/// The route `path` is exactly (its literal part, then one non-empty segment per parameter),
/// and its first parameter (no allocation).
fn route_of(path: &str) -> Option<(Fast, &str)> {
    SHAPES.iter().find_map(|&(fast, prefix, params)| {
        let rest = path.strip_prefix(prefix)?;
        let mut segments = rest.split('/');
        let first = segments.next().filter(|s| !s.is_empty())?;
        let mut seen = 1;
        for s in segments {
            if s.is_empty() || seen == params {
                return None;
            }
            seen += 1;
        }
        (seen == params).then_some((fast, first))
    })
}

/// A segment percent-decoded; an undecodable one is the route's to refuse, in its words.
fn decoded(segment: &str) -> Option<Cow<'_, str>> {
    percent_decode_str(segment).decode_utf8().ok()
}

/// Which common request `method` and `uri` are, if they are one.
fn classify(method: &Method, uri: &axum::http::Uri) -> Option<Fast> {
    if !(method == Method::GET || method == Method::POST) || !uri.query().is_none_or(str::is_empty)
    {
        return None;
    }
    let (fast, param) = route_of(uri.path())?;
    // A key or kind that is read must decode here; otherwise the route refuses it.
    let read = matches!(fast, Fast::LeafSegment | Fast::Ids);
    (!read || decoded(param).is_some()).then_some(fast)
}

impl Http {
    pub(super) fn new(router: Router, app: Arc<App>, guard: Arc<super::guard::Guard>) -> Http {
        Http { router, app, guard }
    }
}

impl<B> tower::Service<Request<B>> for Http
where
    Router: tower::Service<Request<B>, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        BoxFuture<'static, Result<Response, Infallible>>,
        <Router as tower::Service<Request<B>>>::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        tower::Service::<Request<B>>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let Some(fast) = classify(request.method(), request.uri()) else {
            return Either::Right(self.router.call(request));
        };
        if let Some(refusal) = self.guard.refused(request.uri().path(), request.headers()) {
            return Either::Left(Box::pin(std::future::ready(Ok(with_length(refusal)))));
        }
        let uri = request.into_parts().0.uri;
        let app = Arc::clone(&self.app);
        Either::Left(Box::pin(async move {
            // Checked by `classify`: the path is the template's, its parameter decodes.
            let param = || {
                route_of(uri.path())
                    .and_then(|(_, p)| decoded(p))
                    .unwrap_or_default()
            };
            let response = match fast {
                Fast::Sequencer => super::floe::weak_next_id(&app, uri.path())
                    .await
                    .into_response(),
                Fast::LeafSegment => super::leaf::segment_number(&app, &param()).await,
                Fast::LeafSnowflake => super::leaf::snowflake_number(&app).await,
                Fast::Ids => super::floe::one_id(&app, &param()).await.into_response(),
            };
            Ok(with_length(response))
        }))
    }
}

/// `response` with the `Content-Length` of its body, as axum's routes give it.
fn with_length(mut response: Response) -> Response {
    use axum::http::{header, HeaderValue};
    if let Some(n) = hyper::body::Body::size_hint(response.body()).exact() {
        if !response.headers().contains_key(header::CONTENT_LENGTH) {
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Uri;

    fn class(method: Method, uri: &'static str) -> Option<Fast> {
        classify(&method, &Uri::from_static(uri))
    }

    #[test]
    fn only_the_routes_exact_shapes_are_taken() {
        use Fast::*;
        assert_eq!(
            class(Method::GET, "/v1/sequencer/default/k"),
            Some(Sequencer)
        );
        assert_eq!(
            class(Method::POST, "/v1/sequencer/a%20b/k%2Fx"),
            Some(Sequencer)
        );
        assert_eq!(
            class(Method::GET, "/v1/sequencer/default/k?"),
            Some(Sequencer)
        );
        assert_eq!(
            class(Method::GET, "/api/segment/get/a%20b"),
            Some(LeafSegment)
        );
        assert_eq!(
            route_of("/api/segment/get/a%20b"),
            Some((LeafSegment, "a%20b"))
        );
        assert_eq!(route_of("/v1/sequencer/s/k"), Some((Sequencer, "s")));
        assert_eq!(class(Method::GET, "/v1/ids/snowflake"), Some(Ids));
        assert_eq!(
            class(Method::POST, "/api/snowflake/get/%FF"),
            Some(LeafSnowflake)
        );
        for (method, uri) in [
            (Method::HEAD, "/v1/sequencer/default/k"),
            (Method::PUT, "/v1/sequencer/default/k"),
            (Method::GET, "/v1/sequencer/default/k?count=2"),
            (Method::GET, "/v1/sequencer/default/k/"),
            (Method::GET, "/v1/sequencer/default/k/segment"),
            (Method::GET, "/v1/sequencer//k"),
            (Method::GET, "/v1/sequencer/default/"),
            (Method::GET, "/v1/sequencer/default"),
            (Method::GET, "/v1/sequencer/"),
            (Method::GET, "/api/segment/get/"),
            (Method::GET, "/api/segment/get/k/"),
            (Method::GET, "/api/segment/get/%FF"),
            (Method::GET, "/api/segment/get/k?template=t"),
            (Method::HEAD, "/api/segment/get/k"),
            (Method::GET, "/healthz"),
            (Method::GET, "/v1/ids/"),
            (Method::GET, "/v1/ids/%FF"),
            (Method::GET, "/v1/ids/snowflake?count=2"),
            (Method::GET, "/v1/ids/snowflake/"),
            (Method::HEAD, "/api/snowflake/get/k"),
            (Method::GET, "/api/snowflake/get/"),
        ] {
            assert_eq!(class(method.clone(), uri), None, "{method} {uri}");
        }
    }

    /// A server of one memory store, `default`, which Leaf's route serves too.
    fn app() -> Arc<App> {
        use floe_sequencer::stores::memory::MemoryStore;
        use floe_sequencer::{Sequencer, ServeOptions, StoreHandle};
        let mut sequencer = Sequencer::new();
        sequencer.add(StoreHandle::new(
            "default",
            Arc::new(MemoryStore::new()),
            ServeOptions::default(),
        ));
        let mut app = App::sequencer_only(Arc::new(sequencer), vec!["floe.example".into()]);
        app.leaf_store = Some("default".into());
        // Snowflake IDs on a clock that stands still: two servers issue the same ones.
        let clock: crate::ServerClock = Arc::new(floe_core::clock::ManualClock::from_millis(
            1_800_000_000_000,
        ));
        let snowflake =
            floe_core::snowflake::SnowflakeConfig::new(floe_core::snowflake::Layout::LEAF)
                .worker(7)
                .build(Arc::clone(&clock))
                .unwrap();
        let generators = crate::ids::Generators::new(Arc::clone(&clock))
            .with_snowflake(vec![("default".into(), Arc::new(snowflake))]);
        app.ids = Some(Arc::new(generators));
        app.clock = clock;
        Arc::new(app)
    }

    /// The status, headers and body of an answer.
    async fn seen(response: Response) -> (u16, Vec<(String, String)>, String) {
        let (parts, body) = response.into_parts();
        let headers = parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status.as_u16(),
            headers,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    async fn answer<S>(
        service: &mut S,
        request: Request<axum::body::Body>,
    ) -> (u16, Vec<(String, String)>, String)
    where
        S: tower::Service<Request<axum::body::Body>, Response = Response, Error = Infallible>,
    {
        let ready = tower::ServiceExt::<Request<axum::body::Body>>::ready(service)
            .await
            .unwrap();
        seen(ready.call(request).await.unwrap()).await
    }

    fn request(
        method: &str,
        path: &str,
        host: &str,
        origin: Option<&str>,
    ) -> Request<axum::body::Body> {
        let mut r = Request::builder()
            .method(method)
            .uri(path)
            .header("host", host);
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.body(axum::body::Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn the_common_requests_are_answered_with_the_next_ids() {
        let mut service = super::super::service(app(), None, false);
        let get = |path| request("GET", path, "127.0.0.1:1", None);
        // Leaf's layout: 41 bits of milliseconds since 2023, 10 of worker, 12 of sequence.
        let first = ((1_800_000_000_000u64 - 1_672_531_200_000) << 22) | (7 << 12);
        for (path, body, kind) in [
            (
                "/v1/sequencer/default/k",
                "{\"next_id\":\"1\"}",
                "application/json",
            ),
            (
                "/v1/sequencer/default/k?",
                "{\"next_id\":\"2\"}",
                "application/json",
            ),
            // The same request through the route: its no-query answer is the same code's.
            (
                "/v1/sequencer/default/k?count=1",
                "{\"ids\":[\"3\"]}",
                "application/json",
            ),
            ("/api/segment/get/k", "4", "text/plain; charset=utf-8"),
            ("/api/segment/get/other", "1", "text/plain; charset=utf-8"),
            (
                "/v1/ids/snowflake",
                &format!("{{\"id\":\"{first}\"}}"),
                "application/json",
            ),
            (
                "/api/snowflake/get/k",
                &(first + 1).to_string(),
                "text/plain; charset=utf-8",
            ),
        ] {
            let (status, headers, text) = answer(&mut service, get(path)).await;
            assert_eq!((status, text.as_str()), (200, body), "{path}");
            assert!(
                headers.contains(&("content-type".into(), kind.into())),
                "{headers:?}"
            );
            let length = body.len().to_string();
            assert!(
                headers.contains(&("content-length".into(), length)),
                "{headers:?}"
            );
        }
        let (status, _, text) = answer(
            &mut service,
            request("GET", "/v1/sequencer/default/k", "evil.example", None),
        )
        .await;
        assert_eq!(status, 403, "{text}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever is asked, the service answers exactly as the router alone does: two
        /// servers of the same state, one behind each, given the same requests in turn.
        #[test]
        fn every_answer_is_the_routers_own(
            asked in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["GET", "POST", "HEAD", "PUT"]),
                    proptest::sample::select(vec![
                        "/v1/sequencer/", "/api/segment/get/", "/api/snowflake/get/", "/v1/ids/",
                        "/v1/sequencer", "/healthz/",
                    ]),
                    proptest::collection::vec(
                        proptest::sample::select(vec![
                            "default", "default", "default", "k", "k", "", "%20", "%FF", "a%2Fb", "segment", "%C3%A9",
                            "nostore", "x%00y", "..", "snowflake", "uuid7", "SNOWFLAKE",
                        ]),
                        0..4,
                    ),
                    proptest::sample::select(vec!["", "?", "?count=2", "?increment=strong", "?x"]),
                    proptest::sample::select(vec!["127.0.0.1:1", "evil.example", "FLOE.example:8", "[::1]:2"]),
                    proptest::sample::select(vec![None, Some("http://127.0.0.1:1"), Some("https://evil")]),
                ),
                1..12,
            )
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (fast, alone) = (app(), app());
                let mut service = super::super::service(fast, None, false);
                let mut router = super::super::router(alone);
                for (method, prefix, segments, query, host, origin) in &asked {
                    let path = format!("{prefix}{}{query}", segments.join("/"));
                    let Ok(uri) = path.parse::<Uri>() else { continue };
                    let path = uri.to_string();
                    let a = answer(&mut service, request(method, &path, host, *origin)).await;
                    let b = answer(&mut router, request(method, &path, host, *origin)).await;
                    proptest::prop_assert_eq!(&a, &b, "{} {}", method, path);
                }
                Ok(())
            })?;
        }
    }
}
