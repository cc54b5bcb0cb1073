//! The HTTP/JSON face of the sequencer (see the crate docs for the routes).
//!
//! Requests that issue IDs are `GET` (kept for compatibility: `curl URL`) or `POST`; `HEAD`
//! issues nothing (405). A browser can be made to send a request to a server on the user's
//! machine from any page it shows, so a request carrying an `Origin` that is not this server's
//! own (`http://` or `https://` and the request's `Host`), or a `Sec-Fetch-Site` other than
//! `same-origin` or `none`, is refused with 403 before it reaches a route. A page can also
//! rebind its own host name to 127.0.0.1 (DNS rebinding) and so send requests that look
//! same-origin: a request whose `Host` is not an IP address, `localhost` or a name the operator
//! allowed (`--allow-host`) is refused with 403 too. Every error is one line of JSON,
//! `{"error":KIND,"message":TEXT}`.

use std::sync::{Arc, LazyLock};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::app::App;
use crate::{echo, MAX_ECHO};

pub mod fast;
mod floe;
mod leaf;
mod ops;
mod params;

pub use leaf::{CACHE_KEYS, MAX_CACHE_KEYS};
pub(crate) use params::too_slow;
pub use params::HttpError;

/// Every HTTP route, written once: the router is built from this table, and the metrics'
/// route labels come from the same table ([`route_label`]).
macro_rules! routes {
    ($($path:literal => $method:expr,)*) => {
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
    "/v1/status" => get(ops::status_json),
    "/v1/stores" => get(floe::stores),
    "/v1/ids/{kind}" => issuing(floe::new_ids),
    "/v1/sequencer/{store}/{key}" => issuing(floe::next_id),
    "/v1/sequencer/{store}/{key}/segment" => issuing(floe::segment),
    "/api/segment/get/{key}" => issuing(leaf::segment_id),
    "/api/snowflake/get/{key}" => issuing(leaf::snowflake_id),
    "/decodeSnowflakeId" => get(leaf::decode),
    "/cache" => get(leaf::cache),
}

/// The routes, serving `app`, answering to IP addresses, `localhost` and the app's allowed
/// host names: [`router`], with the requests most clients send answered in front of it
/// ([`fast`]).
pub fn service(app: Arc<App>) -> fast::Http {
    fast::Http::new(router(Arc::clone(&app)), app)
}

/// The routes alone, as axum serves them: every request, the common ones too.
pub fn router(app: Arc<App>) -> Router {
    let allowed_hosts = app.allowed_hosts.clone();
    with_routes(Router::new())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(allowed_hosts),
            same_origin,
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
        message: "no such route: see /v1/ids/{kind}, /v1/sequencer/{store}/{key}, /v1/stores, /api/segment/get/{key}, /api/snowflake/get/{key}, /decodeSnowflakeId, /cache, /healthz".into(),
    }
}

/// Why a request is a cross-site browser request, if it is one.
fn cross_site(headers: &HeaderMap) -> Option<String> {
    for site in headers.get_all("sec-fetch-site") {
        let same = site.as_bytes().eq_ignore_ascii_case(b"same-origin")
            || site.as_bytes().eq_ignore_ascii_case(b"none");
        if !same {
            return Some(format!(
                "Sec-Fetch-Site is \"{}\"",
                echo(&String::from_utf8_lossy(site.as_bytes()), MAX_ECHO)
            ));
        }
    }
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    for origin in headers.get_all(header::ORIGIN) {
        let o = origin.as_bytes();
        let own = host.is_some_and(|host| {
            [&b"http://"[..], b"https://"].iter().any(|scheme| {
                o.len() == scheme.len() + host.len()
                    && o[..scheme.len()].eq_ignore_ascii_case(scheme)
                    && o[scheme.len()..].eq_ignore_ascii_case(host)
            })
        });
        if !own {
            return Some(format!(
                "Origin \"{}\" is not this server's",
                echo(&String::from_utf8_lossy(o), MAX_ECHO)
            ));
        }
    }
    None
}

/// Why a request's `Host` is not one this server answers to, if it is not: an IP address,
/// `localhost`, or a name in `allowed` (compared without case; the port is not compared).
fn foreign_host(headers: &HeaderMap, allowed: &[String]) -> Option<String> {
    let host = headers.get(header::HOST)?;
    let text = String::from_utf8_lossy(host.as_bytes());
    let name = match text.strip_prefix('[') {
        // [IPv6]:port
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => text.rsplit_once(':').map_or(&*text, |(name, _)| name),
    };
    let ok = name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name));
    (!ok).then(|| {
        format!(
            "Host \"{}\" is not an IP address, localhost or an allowed name (floe serve --allow-host NAME)",
            echo(&text, MAX_ECHO)
        )
    })
}

/// The 403 of a cross-site browser request or a foreign `Host` (see the module docs), if the
/// request is one.
fn refused(headers: &HeaderMap, allowed: &[String]) -> Option<Response> {
    let why = foreign_host(headers, allowed).or_else(|| cross_site(headers))?;
    Some(
        HttpError {
            status: StatusCode::FORBIDDEN,
            error: "forbidden",
            message: format!("cross-site browser requests are refused: {why}"),
        }
        .into_response(),
    )
}

/// Refuses cross-site browser requests and foreign `Host`s (see the module docs) before any
/// route runs.
async fn same_origin(
    State(allowed): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    match refused(request.headers(), &allowed) {
        Some(refusal) => refusal,
        None => next.run(request).await,
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
}
