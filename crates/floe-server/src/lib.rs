//! floe's server: every ID kind and per-key sequences, over gRPC (floe.v1, and Layotto's
//! `spec.proto.runtime.v1.Runtime/GetNextId`, wire compatible) and HTTP (floe's routes and
//! Leaf's).
//!
//! A server is assembled from its configuration ([`config::ServerConfig`], what `floe serve
//! --config floe.toml` reads) by [`Server::start`]: listeners bound, Snowflake worker IDs and
//! the sno partition leased ([`lease`]), the generators built ([`ids`]), the stores opened;
//! [`Server::run`] serves until a shutdown future completes and closes everything in order.
//! [`serve_app`] takes listeners already bound and a shutdown future (as mini-redis does), so
//! tests bind `127.0.0.1:0` and drive it in-process; [`serve`] serves a sequencer alone. The
//! `floe serve` binary only fills the configuration. Connections live within [`Limits`]
//! ([`conn`]): a cap per listener, header, idle and request timeouts, and a shutdown deadline
//! after which open connections are dropped.
//!
//! **gRPC**: [`grpc`] (`floe.v1.Floe`: batches as packed repeated fields, server streams),
//! Layotto's `Runtime` (below), `grpc.health.v1.Health` and server reflection (v1, v1alpha).
//! **HTTP**: [`http`] (`/v1/ids/{kind}`, `/v1/sequencer/...`, `/v1/stores`, `/healthz`, and
//! `/openapi.json`: an OpenAPI 3.1 description of every route) and its Leaf room (Leaf's
//! `/api/segment/get/{key}`, `/api/snowflake/get/{key}`, `/decodeSnowflakeId`, `/cache`). The
//! gRPC port answers a request that is not gRPC with one line naming the HTTP listener.
//!
//! **Rooms**, one concern each:
//!
//! | module | what it holds |
//! |---|---|
//! | [`config`] | the configuration's schema: fields, defaults, `docs/floe.toml`'s keys |
//! | [`start`] | [`Server::start`] and [`Server::run`]: leases, generators, stores, listeners |
//! | [`app`] | what every route serves ([`App`]) and the steps requests share |
//! | [`http`] | the HTTP router (its one route table), floe's, Leaf's and the operator's routes |
//! | [`grpc`] | floe.v1, Layotto's Runtime, health and reflection |
//! | [`observe`] | metrics, readiness, the status page, rate-limited warnings |
//! | [`security`] | TLS and bearer tokens |
//! | [`conn`] | connections within [`Limits`] |
//! | [`ids`], [`present`] | the generators a server holds; templates and scramble keys |
//! | [`error`] | the server's own error ([`ServerError`]) and its words: [`status`], [`public`], [`check`] |
//!
//! **Layotto's GetNextId** (`proto/runtime.proto`, Layotto's messages): `store_name` picks a
//! configured store (an empty name picks the only one, when there is one), `key` is a sequence
//! key, an absent `options` or `increment = WEAK` asks for WEAK, `STRONG` for STRONG;
//! `metadata` is accepted and not used. Errors, checked in Layotto's order:
//!
//! | case | gRPC status | HTTP |
//! |---|---|---|
//! | no store configured | `FAILED_PRECONDITION` "Sequencer store is not configured" | 503 |
//! | empty key | `INVALID_ARGUMENT` "Key is empty in sequencer store S" | 400 |
//! | key too long or holding NUL | `INVALID_ARGUMENT` | 400 |
//! | increment not 0 or 1 | `INVALID_ARGUMENT` (Layotto: `UNKNOWN`) | 400 |
//! | unknown store | `INVALID_ARGUMENT` "Sequencer store S not found" | 404 |
//! | malformed message | `INVALID_ARGUMENT` (tonic: `INTERNAL`) | - |
//! | STRONG on a store that cannot | `FAILED_PRECONDITION` | 409 |
//! | sequence past `i64::MAX` | `OUT_OF_RANGE` | 409 |
//! | store unreachable or slow, a lease lost (fenced), a clock behind | `UNAVAILABLE` (retry) | 503 |
//! | request slower than the request timeout | `DEADLINE_EXCEEDED` | 503 |
//! | a `count` above the largest batch, an unknown kind or option | `INVALID_ARGUMENT` | 400 |
//! | cross-site browser request | - | 403 |
//!
//! Error messages are the server's own words: text from the request is echoed cut to
//! [`MAX_ECHO`] characters (with an ellipsis), the configured stores are not listed, and what a
//! store reports (file paths, server addresses) goes to standard error, not to the client.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod admin;
pub mod app;
pub mod config;
pub mod conn;
pub mod error;
pub mod grpc;
pub mod http;
pub mod ids;
pub mod observe;
pub mod present;
pub mod security;
mod serve;
pub mod start;

pub use app::App;
pub use config::ServerConfig;
pub use conn::Limits;
pub(crate) use error::MAX_DETAIL;
pub use error::{check, echo, public, status, Asked, ServerError, MAX_ECHO};
pub(crate) use observe::log::{warn, Topic};
pub use security::{auth, tls, Security};
pub use serve::{serve, serve_app, serve_app_secure};
pub use start::{lease, Reloader, Server, StartError, StartErrorKind};

/// The clock a server reads: the system's in production ([`floe_core::clock::SystemClock`]), a
/// test's own in tests ([`floe_core::clock::OffsetClock`]). Its monotonic reading must be the
/// system's when worker IDs come from ZooKeeper or etcd: their lease windows are measured on it.
pub type ServerClock = std::sync::Arc<dyn AnyClock>;

/// A [`Clock`](floe_core::clock::Clock) a server can hold and show in its `Debug` output.
pub trait AnyClock: floe_core::clock::Clock + std::fmt::Debug {}

impl<C: floe_core::clock::Clock + std::fmt::Debug> AnyClock for C {}

/// The generated Layotto messages and service.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("spec.proto.runtime.v1");
}

/// The generated floe.v1 messages and service (`proto/floe/v1/floe.proto`).
#[allow(missing_docs, clippy::all)]
pub mod proto_floe {
    tonic::include_proto!("floe.v1");
}

/// The descriptor set of both protos, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
