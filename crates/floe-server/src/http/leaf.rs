//! Leaf's HTTP routes, unchanged for Leaf's clients (Meituan Leaf's `LeafController` and
//! `MonitorController`):
//!
//! - `GET|POST /api/segment/get/{key}`: the key's next WEAK ID from the Leaf store
//!   (`sequencer.leaf_store`: the only store, or `default`), as a bare decimal number
//!   (`text/plain`), as Leaf answers.
//! - `GET|POST /api/snowflake/get/{key}`: the server's default Snowflake generator's next ID
//!   (Leaf's 41/10/12 layout on the 2023 epoch by default); the key is not used, as in Leaf.
//! - `GET /decodeSnowflakeId?snowflakeId=N`: the parts of an ID of the default layout as JSON
//!   strings, `{"timestamp":"MS(yyyy-MM-dd HH:mm:ss.SSS)","workerId":..,"sequenceId":..}`
//!   (UTC; `datacenterId` too), as Leaf's decode answers; an ID that is not a number of the
//!   layout is 400 with `{"errorMsg": ...}`.
//! - `GET /cache`: each key's WEAK segment buffers, a JSON view of Leaf's `/cache` page.
//!
//! **Errors.** Leaf answers every failure of its two ID routes with HTTP 500 (its
//! `LeafServerException` and `NoKeyException` carry `@ResponseStatus(INTERNAL_SERVER_ERROR)`),
//! and its clients treat any answer but 200 as a failure. floe does the same on these routes:
//! 500 with a one-line `text/plain` message, so no Leaf client reads an error as an ID; the
//! error's kind (`invalid_argument`, `unavailable`, ...) is in the `x-floe-error` header, for
//! operators. floe's own routes (`/v1/...`) answer proper statuses.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use floe_sequencer::Mode;

use crate::error::ServerError;
use serde_json::json;

use super::params::HttpError;
use crate::app::App;
use crate::ids::{decode_snowflake, IdKind, IdOptions, Ids};
use crate::{echo, MAX_ECHO};

/// A failure as Leaf answers it: 500, the message as text, the kind in `x-floe-error`.
fn leaf_error(e: ServerError) -> Response {
    let e = HttpError::from(e);
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::HeaderName::from_static("x-floe-error"),
                HeaderValue::from_static(e.error),
            ),
        ],
        e.message,
    )
        .into_response()
}

/// A text answer, as Leaf writes its numbers.
fn text(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

fn number(id: impl itoa::Integer) -> Response {
    text(itoa::Buffer::new().format(id).to_owned())
}

pub(super) async fn segment_id(
    State(app): State<Arc<App>>,
    key: Result<Path<String>, axum::extract::rejection::PathRejection>,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Path(key)) = key else {
        return leaf_error(ServerError::new(
            crate::error::ErrorKind::InvalidArgument,
            "path: the key must be percent-encoded UTF-8",
        ));
    };
    // `?template=NAME` / `?scramble=true`: the ID's text instead of the number.
    let params = query.map(|Query(p)| p).unwrap_or_default();
    match super::params::presentation_asked(&params) {
        Err(e) => {
            return leaf_error(ServerError::new(
                crate::error::ErrorKind::InvalidArgument,
                e.message,
            ))
        }
        Ok(Some(shown)) => {
            let meta = super::params::meta_of(&params);
            return match app
                .sequence_texts(leaf_store(&app), &key, Ok(Mode::Weak), 1, shown, &meta)
                .await
            {
                Ok((_, mut texts)) => text(texts.pop().unwrap_or_default()),
                Err(e) => leaf_error(e),
            };
        }
        Ok(None) => {}
    }
    segment_number(&app, &key).await
}

/// The store Leaf's segment route serves ("" when none is: refused as not configured).
fn leaf_store(app: &App) -> &str {
    app.leaf_store.as_deref().unwrap_or_default()
}

/// Leaf's common request, `/api/segment/get/{key}` with no parameter: the key's next WEAK ID
/// of the Leaf store as a bare number, or Leaf's 500 (answered by the route, and in front of
/// the router by [`super::fast`]).
pub(super) async fn segment_number(app: &App, key: &str) -> Response {
    match app.next_id(leaf_store(app), key, Ok(Mode::Weak)).await {
        Ok(id) => number(id),
        Err(e) => leaf_error(e),
    }
}

pub(super) async fn snowflake_id(State(app): State<Arc<App>>) -> Response {
    snowflake_number(&app).await
}

/// `/api/snowflake/get/{key}`: the default Snowflake generator's next ID as a bare number, or
/// Leaf's 500 (answered by the route, and in front of the router by [`super::fast`]).
pub(super) async fn snowflake_number(app: &App) -> Response {
    match app.issue(IdKind::Snowflake, 1, &IdOptions::default()).await {
        Ok(Ids::Snowflake(ids)) => number(ids[0]),
        Ok(_) => leaf_error(ServerError::new(
            crate::error::ErrorKind::Internal,
            "internal: the Snowflake generator issued another kind",
        )),
        Err(e) => leaf_error(e),
    }
}

pub(super) async fn decode(
    State(app): State<Arc<App>>,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let refuse = |message: String| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({ "errorMsg": message })),
        )
            .into_response()
    };
    let Ok(Query(params)) = query else {
        return refuse("query: expected snowflakeId=N".into());
    };
    let Some(text) = params.get("snowflakeId") else {
        return refuse("snowflakeId: required, e.g. /decodeSnowflakeId?snowflakeId=123".into());
    };
    let Some(generators) = app.ids.as_deref() else {
        return refuse("this server has no Snowflake generator".into());
    };
    let layout = match generators.snowflake(None) {
        Ok(g) => g.layout(),
        Err(e) => return refuse(e.message),
    };
    // Exactly as written (Leaf's `Long.parseLong` refuses " 1" too); no sign.
    let id = match super::params::decimal::<u64>(text) {
        Some(id) => id,
        None => {
            return refuse(format!(
                "snowflakeId: expected a decimal number of 0 to {}, found \"{}\"",
                u64::MAX,
                echo(text, MAX_ECHO)
            ))
        }
    };
    match decode_snowflake(&layout, id) {
        Ok(parts) => Json(parts).into_response(),
        Err(e) => refuse(format!("snowflakeId: {e}")),
    }
}

/// The most keys `/cache` lists per store unless `?limit=N` asks for more (up to
/// [`MAX_CACHE_KEYS`]).
pub const CACHE_KEYS: usize = 1000;

/// The most keys `/cache` lists per store.
pub const MAX_CACHE_KEYS: usize = 100_000;

/// `GET /cache[?limit=N]`: per store, its WEAK keys in key order, at most `limit` (1,000 by
/// default), each with its buffers (Leaf's `SegmentBufferView`: the key, whether it was
/// initialised, whether the next segment is ready, the current segment and the step), numbers
/// as strings; `keys_in_memory` and `truncated` say whether there are more.
pub(super) async fn cache(
    State(app): State<Arc<App>>,
    query: Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, HttpError> {
    let params = query.map(|Query(p)| p).unwrap_or_default();
    let limit = match params.get("limit") {
        None => CACHE_KEYS,
        Some(text) => super::params::decimal::<usize>(text)
            .filter(|n| (1..=MAX_CACHE_KEYS).contains(n))
            .ok_or_else(|| {
                HttpError::invalid(format!(
                    "limit: expected 1 to {MAX_CACHE_KEYS}, found \"{}\"",
                    echo(text, MAX_ECHO)
                ))
            })?,
    };
    // Up to max_keys keys a store: built on the blocking pool, not on the async executor.
    let view = tokio::task::spawn_blocking(move || cache_view(&app, limit))
        .await
        .map_err(|e| HttpError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal",
            message: format!("/cache: the view was not built: {e}"),
        })?;
    Ok(Json(view))
}

fn cache_view(app: &App, limit: usize) -> serde_json::Value {
    let stores: Vec<_> = app
        .sequencer
        .stores()
        .map(|h| {
            let buffers = h.weak_buffers();
            let truncated = buffers.len() > limit;
            let keys: Vec<_> = buffers
                .into_iter()
                .take(limit)
                .map(|(key, b)| {
                    json!({
                        "key": key.as_str(),
                        "initOk": b.current_len > 0,
                        "nextReady": b.next.is_some(),
                        "fetching": b.fetching,
                        "step": b.step,
                        "current": {
                            "nextId": (b.left > 0).then(|| b.next_id.to_string()),
                            "left": b.left.to_string(),
                            "size": b.current_len.to_string(),
                        },
                        "next": b.next.map(|s| json!({
                            "start": s.start.to_string(),
                            "end": s.end.to_string(),
                        })),
                    })
                })
                .collect();
            json!({
                "store": h.name(),
                "kind": h.store().kind(),
                "keys_in_memory": h.keys_in_memory(),
                "truncated": truncated,
                "keys": keys,
            })
        })
        .collect();
    json!({ "stores": stores })
}
