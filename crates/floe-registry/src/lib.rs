//! # floe-registry
//!
//! A Snowflake generator is unique only if no two live generators share a worker ID, and no
//! generator reuses an ID's time after a restart or a clock step. This crate hands out worker
//! IDs (and sno partitions) and decides when it is safe to start:
//!
//! - [`Registry`]: one small trait, one module per backend. A registry gives an identity
//!   (service + host:port, as Leaf) a worker ID, the same one after a restart, and records the
//!   last time its holder was alive (told by a heartbeat). Backends (`src/backends/`, one
//!   file each): [`file`](mod@file) (the embedded default: the state directory and OS file
//!   locks), [`static_id`] (an ID from configuration, or a StatefulSet pod's ordinal),
//!   `zookeeper` and `etcd` (server registries, each behind its cargo feature, sharing one
//!   versioned-record primitive and a keeper that holds an ID again after its claim lapsed;
//!   ZooKeeper also in Meituan Leaf's node layout, `leaf+zk://`, to take a Leaf fleet's worker
//!   IDs over node by node), all behind the same trait and the same conformance suite.
//!   [`open`] opens one by URL.
//! - [`cache`]: every registration and heartbeat is also written to a local cache file,
//!   atomically; when the registry is unreachable at start-up floe starts from it.
//! - [`guard`]: at start-up, a clock behind the last recorded time refuses to start (or waits,
//!   within a small bound).
//! - [`horizon`]: the durable time bound of a generator slot in the state directory: IDs are
//!   never issued past a time that is not on disk, so a crash never hides the times it used.
//! - [`lease`]: the start-up decision put together: registry, then cache, then the explicit
//!   fallback, then the clock guard.
//! - [`terms`]: how long a holder may issue after the registry last confirmed its claim (a
//!   local deadline, so that a paused or cut-off process stops before another can take its
//!   ID), and how long a takeover waits.
//!
//! ## Quick start
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::snowflake::{Layout, SnowflakeConfig};
//! use floe_registry::{cache::LocalCache, lease, IdSpace, Identity};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let state = dir.path();
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! runtime.block_on(async {
//!     let registry = floe_registry::open(&format!("file://{}", state.display())).await.unwrap();
//!     let cache = LocalCache::new(state).unwrap();
//!     let config = lease::LeaseConfig::new(
//!         Identity::new("orders", "10.0.0.1", 8080),
//!         IdSpace::snowflake(&Layout::LEAF),
//!     );
//!     let lease = lease::acquire(registry.as_ref(), &cache, &config, &SystemClock).await.unwrap();
//!     let gen = SnowflakeConfig::new(Layout::LEAF)
//!         .worker(u64::from(lease.id))
//!         .not_before_ms(lease.not_before_ms)
//!         .build(SystemClock)
//!         .unwrap();
//!     assert_eq!(Layout::LEAF.decode(gen.next_id().unwrap()).worker, u64::from(lease.id));
//! });
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod backends;
mod blocking;
pub mod cache;
pub mod continuation;
mod error;
pub mod guard;
pub mod horizon;
mod identity;
pub mod lease;
mod open;
mod plan;
mod registry;
pub mod terms;
mod unreachable;

#[cfg(feature = "etcd")]
pub use backends::etcd;
#[cfg(feature = "zookeeper")]
pub use backends::zookeeper;
pub use backends::{file, static_id};
pub use error::{ErrorKind, RegistryError};
pub use identity::{IdSpace, Identity, RecordState, WorkerRecord, LEASE_RULE};
pub use open::{check_url, leases, location_of, open, open_or_unreachable};
pub use registry::{Continued, Registration, Registry};
pub use unreachable::Unreachable;

pub(crate) use registry::Hold;
