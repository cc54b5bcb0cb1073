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

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use floe_sequencer::{ErrorKind, Mode, SeqError};
use serde_json::json;

use crate::app::App;
use crate::ids::{IdKind, IdOptions, Ids};
use crate::present::{Meta, Shown};
use crate::{echo, MAX_ECHO};

/// An error as an HTTP answer: a status, a kind (`"error"`) and a message.
#[derive(Debug)]
pub struct HttpError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The kind, for programs: `invalid_argument`, `unknown_store`, `forbidden`...
    pub error: &'static str,
    /// For people: one line, in the server's words.
    pub message: String,
}

impl HttpError {
    pub(crate) fn invalid(message: String) -> HttpError {
        HttpError {
            status: StatusCode::BAD_REQUEST,
            error: "invalid_argument",
            message,
        }
    }
}

impl From<SeqError> for HttpError {
    /// One mapping for every route. The message is used as it is: errors reach here through
    /// [`crate::check`] and [`crate::public`], which word them.
    fn from(e: SeqError) -> HttpError {
        let (status, error) = match e.kind {
            ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ErrorKind::UnknownStore => (StatusCode::NOT_FOUND, "unknown_store"),
            ErrorKind::Unsupported => (StatusCode::CONFLICT, "unsupported"),
            ErrorKind::Exhausted => (StatusCode::CONFLICT, "exhausted"),
            ErrorKind::Unavailable | ErrorKind::Io => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            ErrorKind::Config => (StatusCode::SERVICE_UNAVAILABLE, "not_configured"),
            ErrorKind::Corrupt => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            other => {
                crate::unexpected(other);
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        HttpError {
            status,
            error,
            message: e.message,
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "error": self.error, "message": self.message })),
        )
            .into_response()
    }
}

/// What a request slower than the request timeout is answered.
pub(crate) fn too_slow() -> Response {
    HttpError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        error: "unavailable",
        message: "the request took longer than the server's request timeout".into(),
    }
    .into_response()
}

/// `?increment=weak|strong` (or 0 / 1), WEAK when absent.
fn mode(params: &HashMap<String, String>) -> Result<Mode, String> {
    match params.get("increment") {
        None => Ok(Mode::Weak),
        Some(s) => s.parse().map_err(|_| {
            format!(
                "increment: expected weak or strong (or 0 / 1), found \"{}\"",
                echo(s, MAX_ECHO)
            )
        }),
    }
}

type StoreAndKey = Result<Path<(String, String)>, PathRejection>;
type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

/// The path's store and key and the query's parameters, or a 400 in the server's words (axum's
/// own rejections repeat the request).
fn arguments(
    path: StoreAndKey,
    query: Params,
) -> Result<(String, String, HashMap<String, String>), HttpError> {
    let Path((store, key)) = path.map_err(|_| {
        HttpError::invalid("path: the store and the key must be percent-encoded UTF-8".into())
    })?;
    let Query(params) = query.map_err(|_| {
        HttpError::invalid("query: expected name=value pairs of percent-encoded UTF-8".into())
    })?;
    Ok((store, key, params))
}

/// `?count=N`: `None` when absent, else N checked against the server's largest batch.
pub(crate) fn count(app: &App, params: &HashMap<String, String>) -> Result<Option<u32>, HttpError> {
    let Some(text) = params.get("count") else {
        return Ok(None);
    };
    let n = text.parse::<u32>().map_err(|_| {
        HttpError::invalid(format!(
            "count: expected 1 to {}, found \"{}\"",
            app.max_batch,
            echo(text, MAX_ECHO)
        ))
    })?;
    Ok(Some(app.count(n)?))
}

/// A JSON answer written by hand: `{"ids":["1","2"]}` costs no allocation per ID.
fn json_body(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// `{"ids":[...]}` of `n` IDs, each written by `write(i, out)` (text with no character JSON
/// would escape: digits and base32 / hex letters).
fn ids_json(n: usize, mut write: impl FnMut(usize, &mut String)) -> Response {
    let mut body = String::with_capacity(10 + n * 24);
    body.push_str("{\"ids\":[");
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push('"');
        write(i, &mut body);
        body.push('"');
    }
    body.push_str("]}");
    json_body(body)
}

/// `{"next_id":"42"}` (the ID a string, as proto3's JSON mapping writes an int64), written by
/// hand: no JSON value is built for one number.
fn next_id_json(id: i64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(id);
    let mut body = String::with_capacity(15 + digits.len());
    body.push_str("{\"next_id\":\"");
    body.push_str(digits);
    body.push_str("\"}");
    body
}

/// `?template=NAME` or `?scramble=true` (not both): how the IDs are to be written, if asked.
pub(crate) fn presentation_asked(
    params: &HashMap<String, String>,
) -> Result<Option<Shown<'_>>, HttpError> {
    let scramble = match params.get("scramble").map(String::as_str) {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(HttpError::invalid(format!(
                "scramble: expected true or false, found \"{}\"",
                echo(other, MAX_ECHO)
            )))
        }
    };
    Ok(Shown::from_request(
        params.get("template").map(String::as_str),
        scramble,
    )?)
}

/// `meta.NAME` values are a template's: given without one, they would be ignored.
fn meta_needs_template(params: &HashMap<String, String>, templated: bool) -> Result<(), HttpError> {
    match params.keys().find(|k| k.starts_with("meta.")) {
        Some(name) if !templated => Err(HttpError::invalid(format!(
            "{}: a template's value: give template=NAME too",
            echo(name, MAX_ECHO)
        ))),
        _ => Ok(()),
    }
}

/// The request's `meta.NAME=VALUE` pairs.
pub(crate) fn meta_of(params: &HashMap<String, String>) -> Meta {
    Meta::exact(
        params
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("meta.")?.to_string(), v.clone())))
            .collect(),
    )
}

async fn next_id(
    State(app): State<Arc<App>>,
    path: StoreAndKey,
    query: Params,
) -> Result<Response, HttpError> {
    let (store, key, params) = arguments(path, query)?;
    let asked = presentation_asked(&params)?;
    meta_needs_template(&params, asked.is_some())?;
    if let Some(asked) = asked {
        // `{"next_id":"42","text":"ORD-000042"}`, or `{"ids":[...],"texts":[...]}`.
        let batch = count(&app, &params)?;
        let (ids, texts) = app
            .sequence_texts(
                &store,
                &key,
                mode(&params),
                batch.unwrap_or(1),
                asked,
                &meta_of(&params),
            )
            .await?;
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        return Ok(match batch {
            None => Json(json!({ "next_id": ids[0], "text": texts[0] })),
            Some(_) => Json(json!({ "ids": ids, "texts": texts })),
        }
        .into_response());
    }
    Ok(match count(&app, &params)? {
        None => json_body(next_id_json(
            app.next_id(&store, &key, mode(&params)).await?,
        )),
        Some(n) => {
            let ids = app.sequence(&store, &key, mode(&params), n).await?;
            ids_json(ids.len(), |i, out| {
                out.push_str(itoa::Buffer::new().format(ids[i]));
            })
        }
    })
}

/// `GET /v1/ids/{kind}`: `{"id":"..."}`, or with `?count=N` `{"ids":[...]}`; `?layout=NAME`
/// picks a configured Snowflake generator, `?meta=N` sno's metabyte.
async fn new_ids(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    query: Params,
) -> Result<Response, HttpError> {
    let Path(kind) = path
        .map_err(|_| HttpError::invalid("path: the kind must be percent-encoded UTF-8".into()))?;
    let Query(params) = query.map_err(|_| {
        HttpError::invalid("query: expected name=value pairs of percent-encoded UTF-8".into())
    })?;
    let kind = IdKind::parse(&kind)?;
    let batch = count(&app, &params)?;
    for name in params.keys() {
        let known = matches!(
            name.as_str(),
            "count" | "layout" | "meta" | "template" | "scramble"
        ) || name.starts_with("meta.");
        if !known {
            return Err(HttpError::invalid(format!(
                "query: unknown parameter \"{}\": expected count, layout (snowflake), meta (sno), template or scramble (snowflake) and meta.NAME",
                echo(name, MAX_ECHO)
            )));
        }
    }
    let asked = presentation_asked(&params)?;
    meta_needs_template(&params, asked.is_some())?;
    if asked.is_some() && kind != IdKind::Snowflake {
        return Err(HttpError::invalid(format!(
            "template, scramble: they write numbers: snowflake IDs (and sequences), not {}",
            kind.name()
        )));
    }
    let meta = params
        .get("meta")
        .map(|m| {
            m.parse::<u8>().map_err(|_| {
                HttpError::invalid(format!(
                    "meta: expected 0 to 255, found \"{}\"",
                    echo(m, MAX_ECHO)
                ))
            })
        })
        .transpose()?;
    let options = IdOptions {
        generator: params.get("layout").cloned(),
        meta,
    };
    if let Some(asked) = asked {
        return snowflake_texts(&app, asked, batch, &options, &meta_of(&params)).await;
    }
    let ids = app.issue(kind, batch.unwrap_or(1), &options).await?;
    Ok(match batch {
        None => {
            let mut id = String::new();
            ids.write_text(0, &mut id);
            Json(json!({ "id": id })).into_response()
        }
        Some(_) => ids_json(ids.len(), |i, out| Ids::write_text(&ids, i, out)),
    })
}

/// Snowflake IDs through a template: `{"id":"...","text":"..."}` or
/// `{"ids":[...],"texts":[...]}`, each dated by its own time. A bad `meta.NAME` fails before
/// any ID is made.
async fn snowflake_texts(
    app: &App,
    asked: Shown<'_>,
    batch: Option<u32>,
    options: &IdOptions,
    meta: &Meta,
) -> Result<Response, HttpError> {
    let p = &app.presentation;
    let template = p.template(asked)?;
    let layout = app
        .ids
        .as_deref()
        .ok_or_else(|| SeqError::config("this server has no Snowflake generator"))?
        .snowflake(options.generator.as_deref())?
        .layout();
    p.check_meta(template, meta)?;
    // A template too narrow for this layout's IDs of today fails every time: refused before
    // an ID is spent on it.
    let now_ms = floe_core::clock::Clock::now_nanos(&floe_core::clock::SystemClock) / 1_000_000;
    p.check_fits(template, layout.smallest_id_at(now_ms))?;
    let Ids::Snowflake(ids) = app
        .issue(IdKind::Snowflake, batch.unwrap_or(1), options)
        .await?
    else {
        return Err(SeqError::new(
            ErrorKind::Corrupt,
            "internal: the Snowflake generator issued another kind",
        )
        .into());
    };
    let values = ids
        .iter()
        .map(|&id| (id, layout.decode(id).timestamp_ms))
        .collect();
    let texts = p.render_all(template, values, meta).await?;
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Ok(match batch {
        None => Json(json!({ "id": ids[0], "text": texts[0] })),
        Some(_) => Json(json!({ "ids": ids, "texts": texts })),
    }
    .into_response())
}

async fn segment(
    State(app): State<Arc<App>>,
    path: StoreAndKey,
    query: Params,
) -> Result<Json<serde_json::Value>, HttpError> {
    let (store, key, params) = arguments(path, query)?;
    if params.contains_key("template") || params.contains_key("scramble") {
        return Err(HttpError::invalid(
            "template, scramble: a segment is a range of numbers; ask for IDs to have them written"
                .into(),
        ));
    }
    let (handle, _) = crate::check(&app.sequencer, &store, &key, Ok(Mode::Weak))?;
    let size = match params.get("size") {
        None => 1000,
        Some(s) => s.parse::<u32>().map_err(|_| {
            HttpError::invalid(format!(
                "size: expected a positive integer, found \"{}\"",
                echo(s, MAX_ECHO)
            ))
        })?,
    };
    let seg = handle
        .segment(&key, size)
        .await
        .map_err(|e| crate::public(e, handle, &key, crate::Asked::Segment))?;
    Ok(Json(
        json!({ "start": seg.start.to_string(), "end": seg.end.to_string() }),
    ))
}

async fn stores(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    let list: Vec<_> = app
        .sequencer
        .stores()
        .map(|h| {
            let caps = h.store().capabilities();
            json!({
                "name": h.name(),
                "kind": h.store().kind(),
                "strong": caps.strong,
                "segments": caps.segments,
                "durable": caps.durable,
                "shared": caps.shared,
            })
        })
        .collect();
    Json(json!({ "stores": list }))
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

/// Refuses cross-site browser requests and foreign `Host`s (see the module docs) before any
/// route runs.
async fn same_origin(
    State(allowed): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let why = foreign_host(request.headers(), &allowed).or_else(|| cross_site(request.headers()));
    match why {
        Some(why) => HttpError {
            status: StatusCode::FORBIDDEN,
            error: "forbidden",
            message: format!("cross-site browser requests are refused: {why}"),
        }
        .into_response(),
        None => next.run(request).await,
    }
}

/// `/readyz`: 200 `ready`, or 503 with one reason a line (a lease lost, a store not
/// answering, the server stopping).
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let why = app.telemetry.not_ready();
    if why.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        let mut text = String::from("not ready\n");
        for w in why {
            text.push_str(&w);
            text.push('\n');
        }
        (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
    }
}

/// Runs `f` on the blocking pool (it walks every store's keys).
async fn off_executor<T: Send + 'static>(
    app: Arc<App>,
    what: &'static str,
    f: fn(&App) -> T,
) -> Result<T, HttpError> {
    tokio::task::spawn_blocking(move || f(&app))
        .await
        .map_err(|e| HttpError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal",
            message: format!("{what}: not built: {e}"),
        })
}

/// `/metrics`: Prometheus text format (404 when metrics are off).
async fn metrics(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
    match off_executor(app, "/metrics", crate::observe::render).await? {
        Some(text) => Ok((
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response()),
        None => Err(HttpError {
            status: StatusCode::NOT_FOUND,
            error: "not_found",
            message: "metrics are off: metrics.enabled = false, or this process installed another metrics recorder before the server started".to_string(),
        }),
    }
}

/// `/`: the status page.
async fn status_page(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
    let page = off_executor(app, "/", |app| {
        crate::status::html(&crate::status::snapshot(app))
    })
    .await?;
    Ok(axum::response::Html(page).into_response())
}

/// `/v1/status`: the status page's figures as JSON.
async fn status_json(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
    let snapshot = off_executor(app, "/v1/status", crate::status::snapshot).await?;
    Ok(Json(snapshot).into_response())
}

/// The routes, serving `app`, answering to IP addresses, `localhost` and the app's allowed
/// host names.
pub fn router(app: Arc<App>) -> Router {
    let allowed_hosts = app.allowed_hosts.clone();
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/", get(status_page))
        .route("/v1/status", get(status_json))
        .route("/v1/ids/{kind}", issuing(new_ids))
        .route("/v1/stores", get(stores))
        .route("/v1/sequencer/{store}/{key}", issuing(next_id))
        .route("/v1/sequencer/{store}/{key}/segment", issuing(segment))
        .merge(crate::leaf::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(allowed_hosts),
            same_origin,
        ))
        .with_state(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_id_json_is_what_serde_json_writes() {
        for id in [i64::MIN, -1, 0, 1, 42, 1_000_000_007, i64::MAX] {
            let by_serde = serde_json::to_string(&json!({ "next_id": id.to_string() })).unwrap();
            assert_eq!(next_id_json(id), by_serde);
        }
    }

    #[tokio::test]
    async fn ids_json_is_what_serde_json_writes() {
        let ids = [i64::MIN, -1, 0, 42, i64::MAX];
        let response = ids_json(ids.len(), |i, out| {
            out.push_str(itoa::Buffer::new().format(ids[i]));
        });
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            HeaderValue::from_static("application/json")
        );
        let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let by_serde = serde_json::to_string(&json!({ "ids": texts })).unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await;
        assert_eq!(body.unwrap(), by_serde.as_bytes());
    }
}
