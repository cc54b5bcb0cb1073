//! floe's sequencer server: Layotto's gRPC `spec.proto.runtime.v1.Runtime/GetNextId`, wire
//! compatible, and the same over HTTP/JSON.
//!
//! [`serve`] takes listeners already bound and a shutdown future (as mini-redis does), so tests
//! bind `127.0.0.1:0` and drive it in-process; the `floe serve` binary only reads its options.
//!
//! **gRPC** (`proto/runtime.proto`, Layotto's messages): `store_name` picks a configured store
//! (an empty name picks the only one, when there is one), `key` is a sequence key, an absent
//! `options` or `increment = WEAK` asks for WEAK, `STRONG` for STRONG; `metadata` is accepted
//! and not used. Errors, checked in Layotto's order:
//!
//! | case | gRPC status | HTTP |
//! |---|---|---|
//! | no store configured | `FAILED_PRECONDITION` "Sequencer store is not configured" | 503 |
//! | empty key | `INVALID_ARGUMENT` "Key is empty in sequencer store S" | 400 |
//! | key too long or holding NUL | `INVALID_ARGUMENT` | 400 |
//! | increment not 0 or 1 | `INVALID_ARGUMENT` (Layotto: `UNKNOWN`) | 400 |
//! | unknown store | `INVALID_ARGUMENT` "Sequencer store S not found" | 404 |
//! | STRONG on a store that cannot | `FAILED_PRECONDITION` | 409 |
//! | sequence past `i64::MAX` | `OUT_OF_RANGE` | 409 |
//! | store unreachable or slow | `UNAVAILABLE` (retry) | 503 |
//!
//! **HTTP** ([`http`]): `GET` or `POST /v1/sequencer/{store}/{key}?increment=weak|strong` answers
//! `{"next_id":"42"}` (a string, as proto3's JSON mapping writes an int64);
//! `/v1/sequencer/{store}/{key}/segment?size=N` answers `{"start":"43","end":"142"}`;
//! `GET /v1/stores` lists the stores; `GET /healthz` answers `ok`.
#![deny(missing_docs)]

use std::future::Future;
use std::sync::Arc;

use floe_sequencer::{ErrorKind, Mode, SeqError, Sequencer};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

pub mod http;

/// The generated Layotto messages and service.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("spec.proto.runtime.v1");
}

use proto::runtime_server::{Runtime, RuntimeServer};
use proto::{GetNextIdRequest, GetNextIdResponse};

/// The gRPC status of an error: one mapping for the whole server.
pub fn status(e: &SeqError) -> Status {
    let code = match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::UnknownStore => tonic::Code::InvalidArgument,
        ErrorKind::Unsupported | ErrorKind::Config => tonic::Code::FailedPrecondition,
        ErrorKind::Exhausted => tonic::Code::OutOfRange,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        _ => tonic::Code::Internal,
    };
    Status::new(code, e.message.clone())
}

/// A request checked as Layotto checks it, in its order: a store is configured, the key is not
/// empty, the increment is legal (`mode`, as parsed by the caller), the store exists. The
/// error's kind gives its status ([`status`], [`http::HttpError`]).
pub fn check<'a>(
    sequencer: &'a Sequencer,
    store: &str,
    key: &str,
    mode: Result<Mode, String>,
) -> Result<(&'a floe_sequencer::StoreHandle, Mode), SeqError> {
    if sequencer.names().next().is_none() {
        return Err(SeqError::config("Sequencer store is not configured"));
    }
    if key.is_empty() {
        return Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!("Key is empty in sequencer store {store}"),
        ));
    }
    let mode = mode.map_err(|e| SeqError::new(ErrorKind::InvalidArgument, e))?;
    Ok((sequencer.store(store)?, mode))
}

/// Layotto's `options.increment`: 0 is WEAK, 1 is STRONG.
fn grpc_mode(increment: i32) -> Result<Mode, String> {
    match increment {
        0 => Ok(Mode::Weak),
        1 => Ok(Mode::Strong),
        other => Err(format!(
            "options.increment is illegal: expected WEAK (0) or STRONG (1), found {other}"
        )),
    }
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct RuntimeService {
    sequencer: Arc<Sequencer>,
}

impl RuntimeService {
    /// Serves `sequencer`.
    pub fn new(sequencer: Arc<Sequencer>) -> Self {
        RuntimeService { sequencer }
    }
}

#[tonic::async_trait]
impl Runtime for RuntimeService {
    async fn get_next_id(
        &self,
        request: Request<GetNextIdRequest>,
    ) -> Result<Response<GetNextIdResponse>, Status> {
        let req = request.into_inner();
        let mode = grpc_mode(req.options.map(|o| o.increment).unwrap_or(0));
        let (handle, mode) =
            check(&self.sequencer, &req.store_name, &req.key, mode).map_err(|e| status(&e))?;
        let next_id = handle
            .next_id(&req.key, mode)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(GetNextIdResponse { next_id }))
    }
}

/// Serves `sequencer` over gRPC on `grpc` and HTTP on `http` (either may be `None`) until
/// `shutdown` completes, then lets requests under way finish.
///
/// # Errors
/// When a server stops with an I/O error.
pub async fn serve(
    sequencer: Arc<Sequencer>,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let grpc_task = grpc.map(|listener| {
        let service = RuntimeServer::new(RuntimeService::new(Arc::clone(&sequencer)));
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let done = wait(stopped.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, done)
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })
        })
    });
    let http_task = http.map(|listener| {
        let app = http::router(Arc::clone(&sequencer));
        let done = wait(stopped.clone());
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(done)
                .await
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })
        })
    });
    for task in [grpc_task, http_task].into_iter().flatten() {
        task.await??;
    }
    Ok(())
}
