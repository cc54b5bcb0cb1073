//! The admin API over gRPC, `floe.v1.Admin` (see [`crate::admin`] for who may call it and
//! what each call guarantees).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::App;
use crate::proto_floe::admin_server::Admin;
use crate::proto_floe::{
    KeyRequest, KeyState, ListKeysRequest, ListKeysResponse, ListRegisteredResponse,
    RaiseKeyRequest, RegisterKeyResponse,
};
use crate::status;

/// The `floe.v1.Admin` service of one listener.
#[derive(Debug, Clone)]
pub struct AdminService {
    app: Arc<App>,
    /// Whether this listener serves it ([`crate::admin::allowed`]).
    allowed: bool,
}

impl AdminService {
    /// Serves `app`'s admin API, or refuses every call (`allowed` false).
    pub fn new(app: Arc<App>, allowed: bool) -> Self {
        AdminService { app, allowed }
    }

    /// Registers (`on`) or unregisters the key asked for.
    async fn registration(
        &self,
        request: Request<KeyRequest>,
        on: bool,
    ) -> Result<Response<RegisterKeyResponse>, Status> {
        self.check()?;
        let r = request.into_inner();
        let changed = self
            .app
            .admin_register(&r.store, &r.key, on)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(RegisterKeyResponse { changed }))
    }

    fn check(&self) -> Result<(), Status> {
        if self.allowed {
            Ok(())
        } else {
            Err(Status::permission_denied(crate::admin::REFUSED))
        }
    }
}

fn state(s: &floe_sequencer::KeyState) -> KeyState {
    KeyState {
        key: s.key.as_str().to_string(),
        value: s.value,
        next_strong: s.next_strong,
        next_weak: s.next_weak,
        registered: s.registered,
    }
}

/// `after` ("": none) and `limit` (0: the default page).
fn page(r: &ListKeysRequest) -> (Option<&str>, usize) {
    let after = Some(r.after.as_str()).filter(|a| !a.is_empty());
    let limit = match r.limit {
        0 => crate::admin::DEFAULT_PAGE,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    (after, limit)
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn list_keys(
        &self,
        request: Request<ListKeysRequest>,
    ) -> Result<Response<ListKeysResponse>, Status> {
        self.check()?;
        let r = request.into_inner();
        let (after, limit) = page(&r);
        let states = self
            .app
            .admin_key_states(&r.store, after, limit)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(ListKeysResponse {
            keys: states.iter().map(state).collect(),
        }))
    }

    async fn get_key(&self, request: Request<KeyRequest>) -> Result<Response<KeyState>, Status> {
        self.check()?;
        let r = request.into_inner();
        let s = self
            .app
            .admin_key_state(&r.store, &r.key)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(state(&s)))
    }

    async fn raise_key(
        &self,
        request: Request<RaiseKeyRequest>,
    ) -> Result<Response<KeyState>, Status> {
        self.check()?;
        let r = request.into_inner();
        let s = self
            .app
            .admin_raise(&r.store, &r.key, r.above)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(state(&s)))
    }

    async fn register_key(
        &self,
        request: Request<KeyRequest>,
    ) -> Result<Response<RegisterKeyResponse>, Status> {
        self.registration(request, true).await
    }

    async fn unregister_key(
        &self,
        request: Request<KeyRequest>,
    ) -> Result<Response<RegisterKeyResponse>, Status> {
        self.registration(request, false).await
    }

    async fn list_registered(
        &self,
        request: Request<ListKeysRequest>,
    ) -> Result<Response<ListRegisteredResponse>, Status> {
        self.check()?;
        let r = request.into_inner();
        let (after, limit) = page(&r);
        let keys = self
            .app
            .admin_registered(&r.store, after, limit)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(ListRegisteredResponse {
            keys: keys.iter().map(|k| k.as_str().to_string()).collect(),
        }))
    }
}
