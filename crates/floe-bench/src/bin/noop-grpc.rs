//! A no-op gRPC server of floe's Layotto proto, the baseline of `scripts/load.sh`: it answers
//! every `spec.proto.runtime.v1.Runtime/GetNextId` with the constant 1, through the same
//! generated service and codec as `floe serve` (`floe_server::proto`), served by plain tonic
//! (`tonic::transport::Server::builder()`, its defaults) on the same runtime as `floe serve`
//! (tokio's multi-thread runtime, one worker per core).
//!
//! `noop-grpc [ADDR]` (default `127.0.0.1:0`) prints `noop serving grpc=ADDR` once it listens
//! and serves until SIGINT or SIGTERM.

use std::io::Write as _;

use floe_server::proto::runtime_server::{Runtime, RuntimeServer};
use floe_server::proto::{GetNextIdRequest, GetNextIdResponse};
use tonic::{Request, Response, Status};

struct Noop;

#[tonic::async_trait]
impl Runtime for Noop {
    async fn get_next_id(
        &self,
        _request: Request<GetNextIdRequest>,
    ) -> Result<Response<GetNextIdResponse>, Status> {
        Ok(Response::new(GetNextIdResponse { next_id: 1 }))
    }
}

async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("noop-grpc: cannot listen on {addr}: {e}"))?;
        println!("noop serving grpc={}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(RuntimeServer::new(Noop))
            .serve_with_incoming_shutdown(incoming, stopped())
            .await?;
        Ok(())
    })
}
