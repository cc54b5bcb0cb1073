//! A Rust client of floe's gRPC API (`floe.v1.Floe`), with a local segment cache for WEAK
//! sequences and batched Snowflake IDs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), floe_client::Error> {
//! use floe_client::{CacheOptions, Client};
//!
//! let client = Client::builder("https://ids.example:50051")
//!     .ca_certificate_pem(std::fs::read("ca.pem").unwrap())
//!     .bearer_token("s3cret")
//!     .connect()
//!     .await?;
//!
//! // WEAK: segments of 10,000 IDs fetched ahead, handed out locally.
//! let orders = client.weak_sequence("", "orders", CacheOptions::default())?;
//! let id: i64 = orders.next().await?; // waits only when nothing is cached
//! let fast: Option<i64> = orders.try_next(); // never waits
//!
//! // Snowflake IDs, 10,000 a call, fetched ahead.
//! let ids = client.snowflake_buffer("", CacheOptions::default())?;
//! let snowflake: u64 = ids.next().await?;
//!
//! // STRONG: every call goes to the server (its order needs it); never cached.
//! let strong: i64 = client.next_strong("", "invoices").await?;
//! # let _ = (id, fast, snowflake, strong);
//! # Ok(())
//! # }
//! ```
//!
//! **What is cached, and how** ([`WeakSequence`], [`SnowflakeBuffer`]): per key (or generator),
//! the client asks the server for a segment of `segment` values in one call and hands them out
//! locally. Once `refill_at_percent` of the current segment is used (10 % by default, as in
//! Leaf), the next segment is fetched by a background task on the client's runtime, so a caller
//! rarely waits. Each thread takes a block of the segment at once under a short lock, then
//! hands its block out with no lock and no atomic read-modify-write: a cached `try_next()`
//! costs about what an uncontended `AtomicU64::fetch_add` does (benches/client.rs).
//!
//! **Failures**: a fetch that fails is [`Error`] for every caller waiting for it (never a
//! panic); the next call fetches again, and what was cached is still handed out while the
//! server is away. A value of a fetched segment is handed out exactly once or never (a gap):
//! WEAK allows gaps, never repeats. What a dropped cache holds is never handed out.
//!
//! **Bad input** is [`Error::InvalidArgument`] before anything is sent: a count of 0 or above
//! [`MAX_COUNT`] ([`MAX_SEQUENCE_COUNT`] for sequences), an empty key (or longer than 255
//! bytes, or holding NUL), a segment of 0 or above [`MAX_SEGMENT`] (a sequence's above
//! [`MAX_SEQUENCE_COUNT`]), a bad URL.
//!
//! **STRONG sequences** go through uncached ([`Client::next_sequence`], [`Client::next_strong`]):
//! their guarantee (each ID above every ID returned before, across servers) needs the server on
//! every call.
#![deny(missing_docs)]

mod cache;
mod client;
mod error;

/// floe's protocol (`floe.v1`), generated from floe-server's `proto/floe/v1/floe.proto`
/// (client side only).
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("floe.v1");
}

pub use cache::{CacheOptions, CacheStats, DEFAULT_SEGMENT, MAX_BLOCK, MAX_SEGMENT};
pub use client::{
    Bearer, Client, ClientBuilder, NextId, SnowflakeBuffer, WeakSequence, MAX_COUNT,
    MAX_SEQUENCE_COUNT,
};
pub use error::{Code, Error};
pub use proto::{Increment, Kind};
