//! The operator's HTTP routes: `/healthz`, `/readyz`, `/metrics`, the status page `/` and its
//! figures `/v1/status`, and the OpenAPI description of every route, `/openapi.json`.

use std::sync::{Arc, LazyLock};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::params::{query_of, HttpError};
use crate::app::App;
use crate::ids::kind_named;

/// `/healthz`: `ok` while the process can serve again without a restart; 503 with one reason a
/// line once it cannot (a worker lease lost for good: the registry gave the ID to another
/// process), so that an orchestrator restarts it and it leases another.
pub(super) async fn healthz(State(app): State<Arc<App>>) -> Response {
    lines(app.telemetry.unhealthy(), "ok", "not healthy\n")
}

/// `/readyz`: 200 `ready`, or 503 with one reason a line (the server stopping, a lease
/// fenced, a generator refusing: a clock stepped back, a time bound that stopped moving; a
/// store not answering). `?kind=K` asks about IDs of one kind only (`snowflake`, `sno`,
/// `lexical`, `uuid7`, `ulid`): a deployment that routes kinds apart keeps the others in
/// service.
pub(super) async fn readyz(State(app): State<Arc<App>>, uri: Uri) -> Result<Response, HttpError> {
    let params = query_of(&uri)?;
    let mut kind = None;
    for (name, value) in &params {
        match name.as_str() {
            "kind" => kind = Some(kind_named(value).map_err(HttpError::from)?),
            other => {
                return Err(HttpError::invalid(format!(
                    "{}: no such parameter of /readyz: expected kind",
                    crate::echo(other, crate::MAX_ECHO)
                )))
            }
        }
    }
    Ok(lines(app.not_ready(kind), "ready\n", "not ready\n"))
}

/// 200 `ok` when `why` is empty, else 503: `heading`, then one reason a line.
fn lines(why: Vec<String>, ok: &'static str, heading: &str) -> Response {
    if why.is_empty() {
        return (StatusCode::OK, ok).into_response();
    }
    let mut text = String::from(heading);
    for w in why {
        text.push_str(&w);
        text.push('\n');
    }
    (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
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
pub(super) async fn metrics(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
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
pub(super) async fn status_page(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
    let page = off_executor(app, "/", |app| {
        crate::observe::status::html(&crate::observe::status::snapshot(app))
    })
    .await?;
    Ok(axum::response::Html(page).into_response())
}

/// `GET /login`: the status page's sign-in form when tokens are on; with none, the page is
/// open: to it.
pub(super) async fn login_page(State(app): State<Arc<App>>) -> Response {
    match &app.login {
        Some(login) => login.page(),
        None => axum::response::Redirect::to("/").into_response(),
    }
}

/// `POST /login`: a token from the form, for a session cookie ([`crate::security::login`]).
pub(super) async fn login_submit(State(app): State<Arc<App>>, body: axum::body::Bytes) -> Response {
    match &app.login {
        Some(login) => login.submit(&body),
        None => axum::response::Redirect::to("/").into_response(),
    }
}

/// `/v1/status`: the status page's figures as JSON.
pub(super) async fn status_json(State(app): State<Arc<App>>) -> Result<Response, HttpError> {
    let snapshot = off_executor(app, "/v1/status", crate::observe::status::snapshot).await?;
    Ok(Json(snapshot).into_response())
}

/// The OpenAPI 3.1 description of the HTTP routes, written by hand beside the router
/// (`crates/floe-server/openapi.json`; a test holds it to the route table, schemathesis to the
/// answers). It describes a server with tokens on: [`Openapi`] adapts it.
pub(crate) const OPENAPI: &str = include_str!("../../openapi.json");

/// Which description a server serves: `crates/floe-server/openapi.json` adapted to its security
/// settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Openapi {
    /// No tokens: no `security` requirement anywhere, since none is asked for.
    Open,
    /// Tokens, with the health routes (`/healthz`, `/metrics`, `/openapi.json`...) open: as
    /// written.
    Tokens,
    /// Tokens on every route (`auth.health_needs_token`): no route is open.
    TokensEverywhere,
}

impl Openapi {
    /// The description's text, with this build's `info.version` (made once per variant).
    pub(crate) fn text(self) -> &'static str {
        static OPEN: LazyLock<String> = LazyLock::new(|| adapted(Openapi::Open));
        static TOKENS: LazyLock<String> = LazyLock::new(|| adapted(Openapi::Tokens));
        static EVERYWHERE: LazyLock<String> = LazyLock::new(|| adapted(Openapi::TokensEverywhere));
        match self {
            Openapi::Open => &OPEN,
            Openapi::Tokens => &TOKENS,
            Openapi::TokensEverywhere => &EVERYWHERE,
        }
    }
}

fn adapted(variant: Openapi) -> String {
    let Ok(mut doc) = serde_json::from_str::<serde_json::Value>(OPENAPI) else {
        // Never: a test parses it.
        return OPENAPI.to_string();
    };
    doc["info"]["version"] = env!("CARGO_PKG_VERSION").into();
    if variant == Openapi::Open {
        if let Some(doc) = doc.as_object_mut() {
            doc.remove("security");
        }
    }
    let Some(paths) = doc["paths"].as_object_mut() else {
        return doc.to_string();
    };
    for (path, operations) in paths.iter_mut() {
        // With `auth.health_needs_token`, the health routes' own `security: []` goes: the
        // document's requirement applies to them too (the guard opens none of them; `/login`
        // stays open, as its sessions do).
        let opened = match variant {
            Openapi::Open => true,
            Openapi::Tokens => false,
            Openapi::TokensEverywhere => {
                crate::security::auth::HTTP_HEALTH.contains(&path.as_str())
            }
        };
        if !opened {
            continue;
        }
        let operations = operations
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
            .filter_map(serde_json::Value::as_object_mut);
        for operation in operations {
            operation.remove("security");
        }
    }
    doc.to_string()
}

/// `/openapi.json`: the description of every route (open without a token: tokens protect IDs,
/// not the description).
pub(super) async fn openapi(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        app.openapi.text(),
    )
        .into_response()
}
