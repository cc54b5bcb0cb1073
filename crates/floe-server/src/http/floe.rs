//! floe's own HTTP routes: `/v1/ids/{kind}`, `/v1/sequencer/{store}/{key}` (and its
//! `/segment`), `/v1/stores`.

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::Json;
use floe_sequencer::Mode;

use crate::error::{ErrorKind, ServerError};
use serde_json::json;

use super::params::{
    count, decimal, ids_json, json_body, meta_needs_template, meta_of, mode, next_id_json,
    presentation_asked, query_of, store_and_key, HttpError, Params,
};
use crate::app::App;
use crate::ids::{IdKind, IdOptions, Ids};
use crate::present::{Meta, Shown};
use crate::{echo, MAX_ECHO};

/// `/v1/sequencer/{store}/{key}`: `{"next_id":"42"}`; with `?count=N` `{"ids":[...]}`,
/// `?increment=strong` STRONG, `?template=NAME` or `?scramble=true` the IDs written too.
pub(super) async fn next_id(State(app): State<Arc<App>>, uri: Uri) -> Result<Response, HttpError> {
    if uri.query().is_none_or(str::is_empty) {
        return weak_next_id(&app, uri.path()).await;
    }
    let (store, key) = store_and_key(uri.path())?;
    let params = query_of(&uri)?;
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

/// The common request, `/v1/sequencer/{store}/{key}` with no parameter: `{"next_id":"42"}`, the
/// next WEAK ID of the store and key of `path` (answered by the route, and in front of the
/// router by [`super::fast`]).
pub(super) async fn weak_next_id(app: &App, path: &str) -> Result<Response, HttpError> {
    let (store, key) = store_and_key(path)?;
    let id = app.next_id(&store, &key, Ok(Mode::Weak)).await?;
    Ok(json_body(next_id_json(id)))
}

/// The common request of `/v1/ids/{kind}`, with no parameter: `{"id":"..."}`, one ID of the
/// kind named (answered by the route, and in front of the router by [`super::fast`]).
pub(super) async fn one_id(app: &App, kind: &str) -> Result<Response, HttpError> {
    let kind = crate::ids::kind_named(kind)?;
    let ids = app.issue(kind, 1, &IdOptions::default()).await?;
    // An ID's text is digits, letters and hyphens: nothing JSON escapes.
    let mut body = String::with_capacity(48);
    body.push_str("{\"id\":\"");
    ids.write_text(0, &mut body);
    body.push_str("\"}");
    Ok(json_body(body))
}

/// `GET /v1/ids/{kind}`: `{"id":"..."}`, or with `?count=N` `{"ids":[...]}`; `?layout=NAME`
/// picks a configured Snowflake generator, `?meta=N` sno's metabyte.
pub(super) async fn new_ids(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    query: Params,
) -> Result<Response, HttpError> {
    let Path(kind) = path
        .map_err(|_| HttpError::invalid("path: the kind must be percent-encoded UTF-8".into()))?;
    let Query(params) = query.map_err(|_| {
        HttpError::invalid("query: expected name=value pairs of percent-encoded UTF-8".into())
    })?;
    if params.is_empty() {
        return one_id(&app, &kind).await;
    }
    let kind = crate::ids::kind_named(&kind)?;
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
            decimal::<u8>(m).ok_or_else(|| {
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
        .ok_or_else(|| ServerError::config("this server has no Snowflake generator"))?
        .snowflake(options.generator.as_deref())?
        .layout();
    p.check_meta(template, meta)?;
    // A template too narrow for this layout's IDs of today fails every time: refused before
    // an ID is spent on it.
    let now_ms = app.clock.now_nanos() / 1_000_000;
    p.check_fits(template, layout.smallest_id_at(now_ms))?;
    let Ids::Snowflake(ids) = app
        .issue(IdKind::Snowflake, batch.unwrap_or(1), options)
        .await?
    else {
        return Err(ServerError::new(
            ErrorKind::Internal,
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

/// `/v1/sequencer/{store}/{key}/segment?size=N`: a WEAK segment `{"start":..,"end":..}`.
pub(super) async fn segment(
    State(app): State<Arc<App>>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, HttpError> {
    let (store, key) = store_and_key(uri.path())?;
    let params = query_of(&uri)?;
    if params.contains_key("template") || params.contains_key("scramble") {
        return Err(HttpError::invalid(
            "template, scramble: a segment is a range of numbers; ask for IDs to have them written"
                .into(),
        ));
    }
    let (handle, _) = crate::check(&app.sequencer, &store, &key, Ok(Mode::Weak))?;
    let size = match params.get("size") {
        None => 1000,
        Some(s) => decimal::<u32>(s).ok_or_else(|| {
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

pub(super) async fn stores(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
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
