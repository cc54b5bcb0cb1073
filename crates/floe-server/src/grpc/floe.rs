//! floe's own gRPC service, `floe.v1.Floe` (`proto/floe/v1/floe.proto`): every ID kind and
//! sequences, one at a time, in batches (packed repeated fields) and in server streams.
//!
//! Errors use the same statuses as Layotto's `GetNextId` ([`crate::status`]); a kind left
//! unspecified, a `count` above the server's `max_batch`, or an option that does not apply to
//! the kind is `INVALID_ARGUMENT`.

use std::pin::Pin;
use std::sync::{Arc, LazyLock};

use floe_sequencer::Mode;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::app::App;
use crate::ids::{IdKind, IdOptions, Ids};
use crate::present::{Meta, Shown};
use crate::proto_floe::floe_server::Floe;
use crate::proto_floe::{
    Increment, Kind, NextIdsRequest, NextIdsResponse, NextSequenceRequest, NextSequenceResponse,
    StreamIdsRequest, StreamSequenceRequest,
};
use crate::status;

/// The most IDs one stream may ask for.
pub const MAX_STREAM_TOTAL: u64 = 1_000_000_000;

/// The `floe.v1.Floe` service.
#[derive(Debug, Clone)]
pub struct FloeService {
    app: Arc<App>,
}

impl FloeService {
    /// Serves `app`.
    pub fn new(app: Arc<App>) -> Self {
        FloeService { app }
    }
}

fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

/// Each kind and the proto's value for it: `KIND_` and the kind's name, so that no kind is
/// mapped by hand (a kind the proto lacks gets `KIND_UNSPECIFIED`, which a test refuses).
static KINDS: LazyLock<[(IdKind, Kind); IdKind::ALL.len()]> = LazyLock::new(|| {
    IdKind::ALL.map(|k| {
        let name = format!("KIND_{}", k.name().to_ascii_uppercase());
        (k, Kind::from_str_name(&name).unwrap_or(Kind::Unspecified))
    })
});

/// The proto's kind of an ID kind.
pub fn proto_kind(kind: IdKind) -> Kind {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(Kind::Unspecified, |(_, p)| *p)
}

/// The ID kind of a request's kind number.
fn kind_of(kind: i32) -> Result<IdKind, Status> {
    KINDS
        .iter()
        .find(|(_, p)| *p != Kind::Unspecified && *p as i32 == kind)
        .map(|(k, _)| *k)
        .ok_or_else(|| {
            let expected = IdKind::listed(|k| {
                let p = proto_kind(k);
                format!("{} ({})", p.as_str_name(), p as i32)
            });
            invalid(format!("kind: expected {expected}, found {kind}"))
        })
}

fn mode_of(increment: i32) -> Result<Mode, String> {
    match Increment::try_from(increment) {
        Ok(Increment::Weak) => Ok(Mode::Weak),
        Ok(Increment::Strong) => Ok(Mode::Strong),
        Err(_) => Err(format!(
            "increment: expected INCREMENT_WEAK (0) or INCREMENT_STRONG (1), found {increment}"
        )),
    }
}

fn id_options(layout: String, meta: Option<u32>) -> Result<IdOptions, Status> {
    let meta = meta
        .map(|m| {
            u8::try_from(m).map_err(|_| invalid(format!("meta: expected 0 to 255, found {m}")))
        })
        .transpose()?;
    Ok(IdOptions {
        generator: (!layout.is_empty()).then_some(layout),
        meta,
    })
}

fn ids_response(ids: Ids, with_text: bool) -> NextIdsResponse {
    let text = if with_text { ids.texts() } else { Vec::new() };
    match ids {
        Ids::Snowflake(numbers) => NextIdsResponse {
            numbers,
            binary: Vec::new(),
            text,
        },
        other => NextIdsResponse {
            numbers: Vec::new(),
            binary: other.bytes(),
            text,
        },
    }
}

/// A stream's total and batch size, checked.
fn stream_sizes(app: &App, total: u64, batch: u32) -> Result<(u64, u32), Status> {
    if total == 0 || total > MAX_STREAM_TOTAL {
        return Err(invalid(format!(
            "total: expected 1 to {MAX_STREAM_TOTAL}, found {total}"
        )));
    }
    let batch = if batch == 0 {
        app.max_batch
    } else {
        app.batch_of("batch", batch).map_err(|e| status(&e))?
    };
    Ok((total, batch))
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Messages of at most `batch` items until `total` were sent, each made by `next(n)` only when
/// the client reads (no task of its own: a stream ends with its connection). An error ends it.
fn batches<T, F, Fut>(total: u64, batch: u32, next: F) -> BoxStream<T>
where
    T: Send + 'static,
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, Status>> + Send,
{
    let stream =
        futures_util::stream::unfold((total, Some(next)), move |(left, next)| async move {
            let next = next?;
            if left == 0 {
                return None;
            }
            // At most `batch`, which is a u32.
            let n = left.min(u64::from(batch)) as u32;
            match next(n).await {
                Ok(item) => Some((Ok(item), (left - u64::from(n), Some(next)))),
                Err(e) => Some((Err(e), (0, None))),
            }
        });
    Box::pin(stream)
}

#[tonic::async_trait]
impl Floe for FloeService {
    async fn next_ids(
        &self,
        request: Request<NextIdsRequest>,
    ) -> Result<Response<NextIdsResponse>, Status> {
        let r = request.into_inner();
        let kind = kind_of(r.kind)?;
        let count = self.app.count(r.count.max(1)).map_err(|e| status(&e))?;
        let options = id_options(r.layout, r.meta)?;
        let ids = self
            .app
            .issue(kind, count, &options)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(ids_response(ids, r.with_text)))
    }

    type StreamIdsStream = BoxStream<NextIdsResponse>;

    async fn stream_ids(
        &self,
        request: Request<StreamIdsRequest>,
    ) -> Result<Response<Self::StreamIdsStream>, Status> {
        let r = request.into_inner();
        let kind = kind_of(r.kind)?;
        let (total, batch) = stream_sizes(&self.app, r.total, r.batch)?;
        let options = Arc::new(id_options(r.layout, r.meta)?);
        // Checked once before the first message: a bad option is the call's status.
        self.app
            .check_id_options(kind, &options)
            .map_err(|e| status(&e))?;
        let (app, with_text) = (Arc::clone(&self.app), r.with_text);
        Ok(Response::new(batches(total, batch, move |n| {
            let (app, options) = (Arc::clone(&app), Arc::clone(&options));
            async move {
                let ids = app.issue(kind, n, &options).await.map_err(|e| status(&e))?;
                Ok(ids_response(ids, with_text))
            }
        })))
    }

    async fn next_sequence(
        &self,
        request: Request<NextSequenceRequest>,
    ) -> Result<Response<NextSequenceResponse>, Status> {
        let meta = meta_of(request.metadata());
        let r = request.into_inner();
        let count = self.app.count(r.count.max(1)).map_err(|e| status(&e))?;
        let shown =
            // proto3: an empty `template` is no template.
            Shown::from_request(Some(r.template.as_str()).filter(|t| !t.is_empty()), r.scramble)
                .map_err(|e| status(&e))?;
        let mode = mode_of(r.increment);
        let (ids, texts) = match shown {
            None => (
                self.app.sequence(&r.store, &r.key, mode, count).await,
                Vec::new(),
            ),
            Some(shown) => match self
                .app
                .sequence_texts(&r.store, &r.key, mode, count, shown, &meta)
                .await
            {
                Ok((ids, texts)) => (Ok(ids), texts),
                Err(e) => (Err(e), Vec::new()),
            },
        };
        let ids = ids.map_err(|e| status(&e))?;
        Ok(Response::new(NextSequenceResponse { ids, texts }))
    }

    type StreamSequenceStream = BoxStream<NextSequenceResponse>;

    async fn stream_sequence(
        &self,
        request: Request<StreamSequenceRequest>,
    ) -> Result<Response<Self::StreamSequenceStream>, Status> {
        let r = request.into_inner();
        let (total, batch) = stream_sizes(&self.app, r.total, r.batch)?;
        let mode = mode_of(r.increment);
        // The request is checked (store, key, mode) before the stream starts.
        crate::check(&self.app.sequencer, &r.store, &r.key, mode.clone())
            .map_err(|e| status(&e))?;
        let (app, store, key) = (Arc::clone(&self.app), Arc::new(r.store), Arc::new(r.key));
        Ok(Response::new(batches(total, batch, move |n| {
            let (app, store, key, mode) = (
                Arc::clone(&app),
                Arc::clone(&store),
                Arc::clone(&key),
                mode.clone(),
            );
            async move {
                let ids = app
                    .sequence(&store, &key, mode, n)
                    .await
                    .map_err(|e| status(&e))?;
                Ok(NextSequenceResponse {
                    ids,
                    texts: Vec::new(),
                })
            }
        })))
    }
}

/// A request's `floe-meta-NAME` metadata, for a template's `{meta.NAME}` (ASCII values only;
/// other metadata, `authorization` among it, is never a template's value).
fn meta_of(metadata: &tonic::metadata::MetadataMap) -> Meta {
    Meta::lower_case(
        metadata
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((
                    k.as_str().strip_prefix("floe-meta-")?.to_string(),
                    v.to_str().ok()?.to_string(),
                )),
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_proto_kind_and_back() {
        for kind in IdKind::ALL {
            let proto = proto_kind(kind);
            assert_ne!(proto, Kind::Unspecified, "{kind}: no KIND_ in floe.proto");
            assert_eq!(kind_of(proto as i32).unwrap(), kind);
        }
        for bad in [Kind::Unspecified as i32, 99, -1] {
            let e = kind_of(bad).unwrap_err();
            assert_eq!(
                e.message(),
                format!("kind: expected KIND_SNOWFLAKE (1), KIND_SNO (2), KIND_LEXICAL (3), KIND_UUID7 (4) or KIND_ULID (5), found {bad}")
            );
        }
    }
}
