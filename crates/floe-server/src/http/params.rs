//! What the HTTP routes share below them: the error answer ([`HttpError`]), the query's
//! parameters read in the server's words, and JSON answers written by hand.

use std::borrow::Cow;
use std::collections::HashMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::Uri;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use floe_sequencer::Mode;
use percent_encoding::percent_decode_str;
use serde_json::json;

use crate::app::App;
use crate::error::{ErrorKind, ServerError};
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

impl From<ServerError> for HttpError {
    /// One mapping for every route.
    fn from(e: ServerError) -> HttpError {
        let (status, error) = match e.kind {
            ErrorKind::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
            ErrorKind::UnknownStore => (StatusCode::NOT_FOUND, "unknown_store"),
            ErrorKind::UnknownKey => (StatusCode::NOT_FOUND, "unknown_key"),
            ErrorKind::Unsupported => (StatusCode::CONFLICT, "unsupported"),
            ErrorKind::Exhausted => (StatusCode::CONFLICT, "exhausted"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::NotConfigured => (StatusCode::SERVICE_UNAVAILABLE, "not_configured"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ErrorKind::DataLoss => (StatusCode::INTERNAL_SERVER_ERROR, "data_loss"),
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
pub(crate) fn mode(params: &HashMap<String, String>) -> Result<Mode, String> {
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

/// A number of a query read exactly: ASCII digits only, nothing trimmed (`u32::from_str` would
/// also take `+5`, and Leaf's clients never send a sign or a space).
pub(crate) fn decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

pub(crate) type Params = Result<Query<HashMap<String, String>>, QueryRejection>;

/// The store and the key of `/v1/sequencer/{store}/{key}` (and its `/segment`), read from the
/// request's path as the router matched it: percent-decoded, and borrowed from the path when
/// nothing in them is encoded (the common request allocates nothing here).
pub(crate) fn store_and_key(path: &str) -> Result<(Cow<'_, str>, Cow<'_, str>), HttpError> {
    let bad =
        || HttpError::invalid("path: the store and the key must be percent-encoded UTF-8".into());
    let rest = path.strip_prefix("/v1/sequencer/").ok_or_else(bad)?;
    let mut parts = rest.split('/');
    let (Some(store), Some(key)) = (parts.next(), parts.next()) else {
        return Err(bad());
    };
    let decode = |s| percent_decode_str(s).decode_utf8().map_err(|_| bad());
    Ok((decode(store)?, decode(key)?))
}

/// The query's parameters, or a 400 in the server's words (axum's own rejection repeats the
/// request). No query is no parameter, read without allocating.
pub(crate) fn query_of(uri: &Uri) -> Result<HashMap<String, String>, HttpError> {
    if uri.query().is_none_or(str::is_empty) {
        return Ok(HashMap::new());
    }
    let Query(params) = Query::try_from_uri(uri).map_err(|_| {
        HttpError::invalid("query: expected name=value pairs of percent-encoded UTF-8".into())
    })?;
    Ok(params)
}

/// `?count=N`: `None` when absent, else N checked against the server's largest batch.
pub(crate) fn count(app: &App, params: &HashMap<String, String>) -> Result<Option<u32>, HttpError> {
    let Some(text) = params.get("count") else {
        return Ok(None);
    };
    let n = decimal::<u32>(text).ok_or_else(|| {
        HttpError::invalid(format!(
            "count: expected 1 to {}, found \"{}\"",
            app.max_batch,
            echo(text, MAX_ECHO)
        ))
    })?;
    Ok(Some(app.count(n)?))
}

/// A JSON answer written by hand: `{"ids":["1","2"]}` costs no allocation per ID.
pub(crate) fn json_body(body: String) -> Response {
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
pub(crate) fn ids_json(n: usize, mut write: impl FnMut(usize, &mut String)) -> Response {
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
pub(crate) fn next_id_json(id: i64) -> String {
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
pub(crate) fn meta_needs_template(
    params: &HashMap<String, String>,
    templated: bool,
) -> Result<(), HttpError> {
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

    #[test]
    fn the_store_and_key_are_read_from_the_path_and_decoded() {
        let (s, k) = store_and_key("/v1/sequencer/default/orders").unwrap();
        assert!(matches!(
            (&s, &k),
            (Cow::Borrowed("default"), Cow::Borrowed("orders"))
        ));
        let (s, k) = store_and_key("/v1/sequencer/a%2Eb/%E2%82%AC%20x/segment").unwrap();
        assert_eq!((s.as_ref(), k.as_ref()), ("a.b", "€ x"));
        // A lone % is kept as it is, as axum's own Path does.
        assert_eq!(store_and_key("/v1/sequencer/s/100%").unwrap().1, "100%");
        let e = store_and_key("/v1/sequencer/s/%FF").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("percent-encoded UTF-8"), "{}", e.message);
    }
}
