//! The gRPC listener's services: floe's own `floe.v1.Floe` ([`floe`]) and `floe.v1.Admin`
//! ([`admin`]), Layotto's `Runtime`
//! ([`layotto`]), `grpc.health.v1.Health` (per service) and server reflection (v1, v1alpha).

use std::sync::Arc;

use tonic::Status;

use crate::app::App;
use crate::proto::runtime_server::RuntimeServer;
use crate::{echo, proto_floe, FILE_DESCRIPTOR_SET, MAX_DETAIL, MAX_ECHO};

pub mod admin;
pub(crate) mod codec;
pub mod floe;
pub mod layotto;

pub use admin::AdminService;
pub use floe::FloeService;
pub use layotto::RuntimeService;

/// The gRPC methods served, as route labels (the last: a method not served).
pub(crate) const ROUTES: [&str; 16] = [
    "/spec.proto.runtime.v1.Runtime/GetNextId",
    "/floe.v1.Floe/NextIds",
    "/floe.v1.Floe/StreamIds",
    "/floe.v1.Floe/NextSequence",
    "/floe.v1.Floe/StreamSequence",
    "/floe.v1.Admin/ListKeys",
    "/floe.v1.Admin/GetKey",
    "/floe.v1.Admin/RaiseKey",
    "/floe.v1.Admin/RegisterKey",
    "/floe.v1.Admin/UnregisterKey",
    "/floe.v1.Admin/ListRegistered",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "unknown",
];

/// The gRPC services of `app`: Layotto's Runtime, floe.v1, health (per service, kept by
/// [`watch`]) and reflection (v1 and v1alpha, for every grpcurl).
pub(crate) async fn routes(
    app: &Arc<App>,
    admin: bool,
) -> Result<
    (tonic::service::Routes, tonic_health::server::HealthReporter),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, app).await;
    let reflection = reflection_files().build_v1()?;
    let reflection_alpha = reflection_files().build_v1alpha()?;
    let routes = tonic::service::Routes::new(RuntimeServer::new(RuntimeService::new(Arc::clone(
        &app.sequencer,
    ))))
    .add_service(proto_floe::floe_server::FloeServer::new(FloeService::new(
        Arc::clone(app),
    )))
    .add_service(proto_floe::admin_server::AdminServer::new(
        AdminService::new(Arc::clone(app), admin),
    ))
    .add_service(health_service)
    .add_service(reflection)
    .add_service(reflection_alpha);
    Ok((routes, health))
}

/// Server reflection's files: both protos, grpc.health.v1's and both reflection versions', so
/// that either version lists (and describes) every service served.
fn reflection_files() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .include_reflection_service(false)
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
}

/// gRPC health per service: Layotto's Runtime (sequences) is serving while every store answers
/// and the server is not stopping; floe.v1.Floe (IDs and sequences) and `""` (the whole
/// server) are serving when `/readyz` says ready: also every lease held and no generator
/// refusing.
///
/// Updates are taken one at a time and each reads the state under the lock, so the last one
/// written is the latest state (the stop's NOT_SERVING is never overwritten by a probe's
/// SERVING computed just before it).
pub(crate) async fn set_health(health: &tonic_health::server::HealthReporter, app: &App) {
    use std::sync::atomic::Ordering::Relaxed;
    use tonic_health::ServingStatus::{NotServing, Serving};
    let t = &app.telemetry;
    let _one_at_a_time = t.health_updates.lock().await;
    let stores = t.stores_ready.iter().all(|(_, r)| r.answering());
    let runtime = stores && !t.stopping.load(Relaxed);
    // Every lease confirmed and no generator refusing, as /readyz says.
    let all = app.not_ready(None).is_empty();
    let status = |ok: bool| if ok { Serving } else { NotServing };
    health
        .set_service_status("spec.proto.runtime.v1.Runtime", status(runtime))
        .await;
    health.set_service_status("floe.v1.Floe", status(all)).await;
    health.set_service_status("", status(all)).await;
}

/// A gRPC answer whose message is bounded: the server's own messages are (at most
/// [`MAX_DETAIL`] characters), but tonic's can repeat a request header (an unknown
/// `grpc-encoding`): one longer than [`MAX_DETAIL`] is cut to [`MAX_ECHO`] + 40 characters.
pub(crate) fn bounded<B: Default>(response: hyper::Response<B>) -> hyper::Response<B> {
    let long = response
        .headers()
        .get(Status::GRPC_MESSAGE)
        .is_some_and(|m| m.len() > MAX_DETAIL);
    if !long {
        return response;
    }
    match Status::from_header_map(response.headers()) {
        Some(status) if status.message().chars().count() > MAX_DETAIL => {
            Status::new(status.code(), echo(status.message(), MAX_ECHO + 40)).into_http()
        }
        _ => response,
    }
}
