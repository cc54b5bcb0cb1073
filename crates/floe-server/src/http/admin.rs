//! The admin API over HTTP (see [`crate::admin`] for who may call it):
//!
//! - `GET /v1/admin/stores/{store}/keys[?after=KEY&limit=N]`: a page of the store's keys in
//!   byte order, `{"keys":[STATE...]}`; pass the last key as `after` for the next page.
//! - `GET /v1/admin/stores/{store}/keys/{key}`: one key's STATE, nothing taken:
//!   `{"key":..,"value":"41","next_strong":"42","next_weak":"17","registered":true}` (numbers as
//!   strings; `null` where the store holds none or keeps no registrations).
//! - `POST /v1/admin/stores/{store}/keys/{key}/raise?above=N`: every ID issued afterwards is
//!   above N (by this server at once, by every other within 5 s); the key's STATE after it.
//! - `PUT` / `DELETE /v1/admin/stores/{store}/keys/{key}`: registers / unregisters the key
//!   (registered-keys mode), `{"changed":true}` when it was not / was registered.
//! - `GET /v1/admin/stores/{store}/registered[?after=KEY&limit=N]`: `{"keys":[...]}`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use floe_sequencer::KeyState;
use serde_json::{json, Value};

use super::params::{decimal, HttpError};
use crate::app::App;
use crate::{echo, MAX_ECHO};

type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;
type Parts = Result<Path<(String, String)>, axum::extract::rejection::PathRejection>;
type Store = Result<Path<String>, axum::extract::rejection::PathRejection>;

fn bad_path() -> HttpError {
    HttpError::invalid("path: the store and the key must be percent-encoded UTF-8".into())
}

fn query(params: Params) -> Result<HashMap<String, String>, HttpError> {
    params.map(|Query(p)| p).map_err(|_| {
        HttpError::invalid("query: expected name=value pairs of percent-encoded UTF-8".into())
    })
}

/// A key's state as JSON: numbers as strings, `null` where there is none.
pub(crate) fn state_json(s: &KeyState) -> Value {
    let text = |n: Option<i64>| n.map(|n| n.to_string());
    json!({
        "key": s.key.as_str(),
        "value": text(s.value),
        "next_strong": text(s.next_strong),
        "next_weak": text(s.next_weak),
        "registered": s.registered,
    })
}

/// A page's request: the store of its path and `?after=KEY&limit=N` (100 by default, at
/// most 1,000).
struct Page {
    store: String,
    after: Option<String>,
    limit: usize,
}

fn page(store: Store, params: Params) -> Result<Page, HttpError> {
    let Path(store) = store.map_err(|_| bad_path())?;
    let mut params = query(params)?;
    for name in params.keys() {
        if name != "after" && name != "limit" {
            return Err(HttpError::invalid(format!(
                "query: unknown parameter \"{}\": expected after and limit",
                echo(name, MAX_ECHO)
            )));
        }
    }
    let limit = match params.get("limit") {
        None => crate::admin::DEFAULT_PAGE,
        Some(t) => decimal::<usize>(t)
            .filter(|n| (1..=floe_sequencer::MAX_PAGE).contains(n))
            .ok_or_else(|| {
                HttpError::invalid(format!(
                    "limit: expected 1 to {}, found \"{}\"",
                    floe_sequencer::MAX_PAGE,
                    echo(t, MAX_ECHO)
                ))
            })?,
    };
    Ok(Page {
        store,
        after: params.remove("after"),
        limit,
    })
}

pub(super) async fn keys(
    State(app): State<Arc<App>>,
    store: Store,
    params: Params,
) -> Result<Json<Value>, HttpError> {
    let p = page(store, params)?;
    let states = app
        .admin_key_states(&p.store, p.after.as_deref(), p.limit)
        .await?;
    let keys: Vec<Value> = states.iter().map(state_json).collect();
    Ok(Json(json!({ "keys": keys })))
}

pub(super) async fn key(
    State(app): State<Arc<App>>,
    parts: Parts,
) -> Result<Json<Value>, HttpError> {
    let Path((store, key)) = parts.map_err(|_| bad_path())?;
    Ok(Json(state_json(&app.admin_key_state(&store, &key).await?)))
}

pub(super) async fn raise(
    State(app): State<Arc<App>>,
    parts: Parts,
    params: Params,
) -> Result<Json<Value>, HttpError> {
    let Path((store, key)) = parts.map_err(|_| bad_path())?;
    let params = query(params)?;
    let above = params.get("above").ok_or_else(|| {
        HttpError::invalid("above: required, the floor: every ID afterwards is above it".into())
    })?;
    // Digits, with a minus sign for a floor below zero: nothing trimmed.
    let (sign, digits) = above
        .strip_prefix('-')
        .map_or((1, above.as_str()), |d| (-1, d));
    let above = decimal::<i64>(digits)
        .map(|n| sign * n)
        .ok_or_else(|| {
            HttpError::invalid(format!(
                "above: expected an integer of -9223372036854775807 to 9223372036854775807, found \"{}\"",
                echo(above, MAX_ECHO)
            ))
        })?;
    Ok(Json(state_json(
        &app.admin_raise(&store, &key, above).await?,
    )))
}

pub(super) async fn register(
    State(app): State<Arc<App>>,
    parts: Parts,
) -> Result<Json<Value>, HttpError> {
    registration(&app, parts, true).await
}

pub(super) async fn unregister(
    State(app): State<Arc<App>>,
    parts: Parts,
) -> Result<Json<Value>, HttpError> {
    registration(&app, parts, false).await
}

/// `PUT` (`on`) or `DELETE`: `{"changed":BOOL}`.
async fn registration(app: &App, parts: Parts, on: bool) -> Result<Json<Value>, HttpError> {
    let Path((store, key)) = parts.map_err(|_| bad_path())?;
    let changed = app.admin_register(&store, &key, on).await?;
    Ok(Json(json!({ "changed": changed })))
}

pub(super) async fn registered(
    State(app): State<Arc<App>>,
    store: Store,
    params: Params,
) -> Result<Json<Value>, HttpError> {
    let p = page(store, params)?;
    let keys = app
        .admin_registered(&p.store, p.after.as_deref(), p.limit)
        .await?;
    let keys: Vec<&str> = keys.iter().map(floe_sequencer::Key::as_str).collect();
    Ok(Json(json!({ "keys": keys })))
}
