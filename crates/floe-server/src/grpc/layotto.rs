//! Layotto's `spec.proto.runtime.v1.Runtime/GetNextId`, wire compatible (see the crate docs for
//! its errors, checked in Layotto's order).

use std::sync::Arc;

use floe_sequencer::{Mode, Sequencer};
use tonic::{Request, Response, Status};

use crate::proto::runtime_server::Runtime;
use crate::proto::{GetNextIdRequest, GetNextIdResponse};
use crate::{check, public, status, Asked};

/// Layotto's `options.increment`: 0 is WEAK, 1 is STRONG.
fn mode_of(increment: i32) -> Result<Mode, String> {
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
        let mode = mode_of(req.options.map(|o| o.increment).unwrap_or(0));
        let (handle, mode) =
            check(&self.sequencer, &req.store_name, &req.key, mode).map_err(|e| status(&e))?;
        let next_id = handle
            .next_id(&req.key, mode)
            .await
            .map_err(|e| status(&public(e, handle, &req.key, Asked::NextId(mode))))?;
        Ok(Response::new(GetNextIdResponse { next_id }))
    }
}
