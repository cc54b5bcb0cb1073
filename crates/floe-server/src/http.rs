//! The HTTP/JSON face of the sequencer (see the crate docs for the routes).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use floe_sequencer::{ErrorKind, Mode, SeqError, Sequencer};
use serde_json::json;

/// An error as an HTTP answer: one mapping for every route.
#[derive(Debug)]
pub struct HttpError(pub SeqError);

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let e = self.0;
        let (code, kind) = match e.kind {
            ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ErrorKind::UnknownStore => (StatusCode::NOT_FOUND, "unknown_store"),
            ErrorKind::Unsupported => (StatusCode::CONFLICT, "unsupported"),
            ErrorKind::Exhausted => (StatusCode::CONFLICT, "exhausted"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::Config => (StatusCode::SERVICE_UNAVAILABLE, "not_configured"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        (code, Json(json!({ "error": kind, "message": e.message }))).into_response()
    }
}

/// `?increment=weak|strong` (or 0 / 1), WEAK when absent.
fn mode(params: &HashMap<String, String>) -> Result<Mode, String> {
    params
        .get("increment")
        .map_or(Ok(Mode::Weak), |s| s.parse())
}

async fn next_id(
    State(seq): State<Arc<Sequencer>>,
    Path((store, key)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, HttpError> {
    let (handle, mode) = crate::check(&seq, &store, &key, mode(&params)).map_err(HttpError)?;
    let id = handle.next_id(&key, mode).await.map_err(HttpError)?;
    Ok(Json(json!({ "next_id": id.to_string() })))
}

async fn segment(
    State(seq): State<Arc<Sequencer>>,
    Path((store, key)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, HttpError> {
    let (handle, _) = crate::check(&seq, &store, &key, Ok(Mode::Weak)).map_err(HttpError)?;
    let size = match params.get("size") {
        None => 1000,
        Some(s) => s.parse::<u32>().map_err(|_| {
            HttpError(SeqError::new(
                ErrorKind::InvalidArgument,
                format!("invalid size {s:?}: expected a positive integer"),
            ))
        })?,
    };
    let seg = handle.segment(&key, size).await.map_err(HttpError)?;
    Ok(Json(
        json!({ "start": seg.start.to_string(), "end": seg.end.to_string() }),
    ))
}

async fn stores(State(seq): State<Arc<Sequencer>>) -> Json<serde_json::Value> {
    let list: Vec<_> = seq
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

/// The routes, serving `sequencer`.
pub fn router(sequencer: Arc<Sequencer>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/stores", get(stores))
        .route("/v1/sequencer/{store}/{key}", get(next_id).post(next_id))
        .route(
            "/v1/sequencer/{store}/{key}/segment",
            get(segment).post(segment),
        )
        .with_state(sequencer)
}
