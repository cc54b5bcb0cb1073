//! The HTTP/JSON face of the sequencer (see the crate docs for the routes).
//!
//! Requests that issue IDs are `GET` (kept for compatibility: `curl URL`) or `POST`; `HEAD`
//! issues nothing (405). Cross-site browser requests, and on loopback listeners requests with a
//! foreign `Host` (DNS rebinding), are refused before any route runs ([`guard`]). Every error is
//! one line of JSON, `{"error":KIND,"message":TEXT}`, but on Leaf's routes, which answer as Leaf
//! does.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::app::App;

mod admin;
pub mod fast;
mod floe;
pub mod guard;
mod leaf;
mod ops;
mod params;

pub use leaf::{CACHE_KEYS, MAX_CACHE_KEYS};
pub use ops::Openapi;
pub(crate) use params::too_slow;
pub use params::HttpError;

/// The routes [`fast`] also answers, named once for both.
const IDS: &str = "/v1/ids/{kind}";
const SEQUENCER: &str = "/v1/sequencer/{store}/{key}";
const LEAF_SEGMENT: &str = "/api/segment/get/{key}";
const LEAF_SNOWFLAKE: &str = "/api/snowflake/get/{key}";

/// Every HTTP route, written once: the router is built from this table, and the metrics'
/// route labels come from the same table ([`route_label`]).
macro_rules! routes {
    ($($path:expr => $method:expr,)*) => {
        /// The route templates, in the router's syntax (`/v1/ids/{kind}`).
        pub(crate) const ROUTES: &[&str] = &[$($path),*];

        fn with_routes(router: Router<Arc<App>>) -> Router<Arc<App>> {
            router$(.route($path, $method))*
        }
    };
}

routes! {
    "/" => get(ops::status_page),
    "/healthz" => get(ops::healthz),
    "/readyz" => get(ops::readyz),
    "/metrics" => get(ops::metrics),
    "/openapi.json" => get(ops::openapi),
    "/v1/status" => get(ops::status_json),
    "/login" => get(ops::login_page).post(ops::login_submit),
    "/v1/stores" => get(floe::stores),
    IDS => issuing(floe::new_ids),
    SEQUENCER => issuing(floe::next_id),
    "/v1/sequencer/{store}/{key}/segment" => issuing(floe::segment),
    LEAF_SEGMENT => issuing(leaf::segment_id),
    LEAF_SNOWFLAKE => issuing(leaf::snowflake_id),
    "/decodeSnowflakeId" => get(leaf::decode),
    "/cache" => get(leaf::cache),
    "/v1/admin/stores/{store}/keys" => get(admin::keys),
    "/v1/admin/stores/{store}/keys/{key}" =>
        get(admin::key).put(admin::register).delete(admin::unregister),
    "/v1/admin/stores/{store}/keys/{key}/raise" => post(admin::raise),
    "/v1/admin/stores/{store}/registered" => get(admin::registered),
}

/// The routes, serving `app` on a listener bound to `listener` ([`guard`] decides from it
/// whether the `Host` is checked; unknown: checked), the admin API with it when `admin`
/// ([`crate::admin::allowed`]): [`router`], with the requests most clients send answered in
/// front of it ([`fast`]).
pub fn service(app: Arc<App>, listener: Option<SocketAddr>, admin: bool) -> fast::Http {
    let guard = app.hosts.guard(listener, admin);
    fast::Http::new(routed(Arc::clone(&app), Arc::clone(&guard)), app, guard)
}

/// The routes alone, as axum serves them (every request, the common ones too), on a listener
/// whose address is unknown (without the admin API).
pub fn router(app: Arc<App>) -> Router {
    let guard = app.hosts.guard(None, false);
    routed(app, guard)
}

fn routed(app: Arc<App>, guard: Arc<guard::Guard>) -> Router {
    with_routes(Router::new())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            guard,
            guard::same_origin,
        ))
        .with_state(app)
}

/// The label of a path that matches no route.
pub(crate) const UNMATCHED: &str = "unmatched";

/// The metrics' labels of [`ROUTES`] (`/v1/ids/:kind`, as floe has always labelled them), and
/// [`UNMATCHED`] last.
pub(crate) static ROUTE_LABELS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ROUTES
        .iter()
        .map(|r| r.replace('{', ":").replace('}', ""))
        .chain(std::iter::once(UNMATCHED.to_string()))
        .collect()
});

/// [`ROUTES`], each cut at its slashes once.
static ROUTE_PARTS: LazyLock<Vec<Vec<&'static str>>> =
    LazyLock::new(|| ROUTES.iter().map(|r| r.split('/').collect()).collect());

/// The index in [`ROUTE_LABELS`] of the route `path` takes (no allocation): a `{name}` of a
/// template stands for any one segment.
pub(crate) fn route_index(path: &str) -> usize {
    let mut parts = [""; 8];
    let mut n = 0;
    for part in path.split('/') {
        let Some(slot) = parts.get_mut(n) else {
            return ROUTES.len();
        };
        *slot = part;
        n += 1;
    }
    let asked = &parts[..n];
    ROUTE_PARTS
        .iter()
        .position(|template| {
            template.len() == n
                && template
                    .iter()
                    .zip(asked)
                    .all(|(want, got)| want.starts_with('{') || want == got)
        })
        .unwrap_or(ROUTES.len())
}

/// The route label of an HTTP path: a template of the router's table, or `unmatched`; never the
/// request's own text.
pub fn route_label(path: &str) -> &'static str {
    ROUTE_LABELS[route_index(path)].as_str()
}

/// A route that issues IDs: `GET` (for `curl URL`) and `POST` run `handler`, `HEAD` is refused.
pub(crate) fn issuing<H, T>(handler: H) -> axum::routing::MethodRouter<Arc<App>>
where
    H: axum::handler::Handler<T, Arc<App>>,
    T: 'static,
{
    get(handler.clone()).post(handler).head(head_refused)
}

/// `HEAD` on a route that issues IDs: refused, so that it issues none (axum would otherwise
/// run the `GET` handler and drop its body).
async fn head_refused() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, HeaderValue::from_static("GET,POST"))],
    )
        .into_response()
}

async fn not_found() -> HttpError {
    HttpError {
        status: StatusCode::NOT_FOUND,
        error: "not_found",
        message: "no such route: see /openapi.json, /v1/ids/{kind}, /v1/sequencer/{store}/{key}, /v1/stores, /api/segment/get/{key}, /api/snowflake/get/{key}, /decodeSnowflakeId, /cache, /healthz".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_labels_are_templates_of_the_router() {
        assert_eq!(route_label("/"), "/");
        assert_eq!(route_label("/v1/ids/snowflake"), "/v1/ids/:kind");
        assert_eq!(
            route_label("/v1/sequencer/default/orders"),
            "/v1/sequencer/:store/:key"
        );
        assert_eq!(
            route_label("/v1/sequencer/default/orders/segment"),
            "/v1/sequencer/:store/:key/segment"
        );
        assert_eq!(
            route_label("/api/segment/get/anything"),
            "/api/segment/get/:key"
        );
        assert_eq!(
            route_label("/api/snowflake/get/k"),
            "/api/snowflake/get/:key"
        );
        // Keys never become labels: whatever is asked, the label set stays fixed.
        assert_eq!(route_label("/v1/sequencer/a/b/c"), "unmatched");
        assert_eq!(route_label("/no/such/route"), "unmatched");
        assert_eq!(route_label("/evil.Service/Anything"), "unmatched");
        assert_eq!(ROUTE_LABELS.len(), ROUTES.len() + 1);
    }

    /// The methods a route of the router answers, as its 405 to a method none has lists them
    /// (`Allow`), `HEAD` aside (axum's with every `GET`; refused on the routes that issue IDs).
    async fn methods_of(router: &Router, template: &str) -> std::collections::BTreeSet<String> {
        use tower::ServiceExt;
        let path = template.replace(['{', '}'], "");
        let request = axum::http::Request::builder()
            .method("PATCH")
            .uri(&path)
            .header("host", "127.0.0.1:1")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = router.clone().oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
        answer.headers()[header::ALLOW]
            .to_str()
            .unwrap()
            .split(',')
            .map(|m| m.trim().to_ascii_lowercase())
            .filter(|m| m != "head")
            .collect()
    }

    async fn served(app: App) -> (StatusCode, String, serde_json::Value) {
        use tower::ServiceExt;
        let app = Arc::new(app);
        // HEAD: the same headers, no body.
        let head = axum::http::Request::builder()
            .method("HEAD")
            .uri("/openapi.json")
            .header("host", "127.0.0.1:1")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = router(Arc::clone(&app)).oneshot(head).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await;
        assert!(body.unwrap().is_empty());
        let request = axum::http::Request::builder()
            .uri("/openapi.json")
            .header("host", "127.0.0.1:1")
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = router(app).oneshot(request).await.unwrap();
        let status = answer.status();
        let kind = answer.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, kind, serde_json::from_slice(&body).unwrap())
    }

    fn app() -> App {
        App::sequencer_only(Arc::new(floe_sequencer::Sequencer::new()), vec![])
    }

    /// `/openapi.json` is OpenAPI 3.1 and describes exactly the router's routes, each with
    /// exactly the methods it answers: no route undescribed, nothing described that is not
    /// served.
    #[tokio::test]
    async fn the_description_is_the_routers_routes_and_methods() {
        let (status, kind, doc) = served(app()).await;
        assert_eq!(
            (status, kind.as_str()),
            (StatusCode::OK, "application/json")
        );
        assert!(
            doc["openapi"].as_str().unwrap().starts_with("3.1."),
            "{}",
            doc["openapi"]
        );
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
        let paths = doc["paths"].as_object().unwrap();
        let described: std::collections::BTreeSet<&str> =
            paths.keys().map(String::as_str).collect();
        let in_router: std::collections::BTreeSet<&str> = ROUTES.iter().copied().collect();
        assert_eq!(described, in_router, "described (left) and routed (right)");
        // With the admin API, as a loopback listener or one with tokens serves it.
        let app = Arc::new(app());
        let router = routed(Arc::clone(&app), app.hosts.guard(None, true));
        const METHODS: [&str; 8] = [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ];
        for (path, item) in paths {
            let documented: std::collections::BTreeSet<String> = item
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .cloned()
                .collect();
            assert_eq!(documented, methods_of(&router, path).await, "{path}");
        }
        // Without tokens, nothing asks for one.
        assert!(doc.get("security").is_none());
        assert!(!doc.to_string().contains("\"security\""));
    }

    /// With tokens on, the description asks for a bearer token but where none is needed.
    #[tokio::test]
    async fn with_tokens_the_description_asks_for_them() {
        let mut app = app();
        app.openapi = Openapi::Tokens;
        let (status, _, doc) = served(app).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(doc["security"], serde_json::json!([{ "bearerAuth": [] }]));
        for open in crate::auth::HTTP_HEALTH.iter().chain(&["/login"]) {
            assert_eq!(
                doc["paths"][open]["get"]["security"],
                serde_json::json!([]),
                "{open}"
            );
        }
        assert_eq!(
            doc["paths"]["/"]["get"]["security"],
            serde_json::json!([{ "bearerAuth": [] }, { "sessionCookie": [] }])
        );
    }

    /// With `auth.health_needs_token`, the health routes ask for a token too (the guard opens
    /// none of them); `/login` stays open.
    #[tokio::test]
    async fn with_tokens_everywhere_no_health_route_is_described_open() {
        let mut app = app();
        app.openapi = Openapi::TokensEverywhere;
        let (status, _, doc) = served(app).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(doc["security"], serde_json::json!([{ "bearerAuth": [] }]));
        for health in crate::auth::HTTP_HEALTH {
            assert!(
                doc["paths"][health]["get"].get("security").is_none(),
                "{health}: {}",
                doc["paths"][health]["get"]
            );
        }
        assert_eq!(
            doc["paths"]["/login"]["get"]["security"],
            serde_json::json!([])
        );
    }
}
