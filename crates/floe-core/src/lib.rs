//! # floe-core
//!
//! The ID formats and generators of floe, with no I/O and no async runtime: everything here
//! is pure computation over an injected [`Clock`].
//!
//! ## Quick start
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::snowflake::{Layout, SnowflakeConfig};
//!
//! let gen = SnowflakeConfig::new(Layout::LEAF).worker(42).build(SystemClock).unwrap();
//! let id: u64 = gen.next_id().unwrap();
//! println!("{id} = {:?}", Layout::LEAF.decode(id));
//! ```
//!
//! ## Which ID should I use?
//!
//! | you need | use | size | coordination |
//! |---|---|---|---|
//! | a 64-bit integer key, time-ordered, for a B-tree | [`snowflake`] | 8 bytes | a unique worker ID per generator |
//! | a short URL-safe text key with a byte of your own (type, status) | [`sno`] | 10 bytes / 16 chars | a unique partition per generator |
//! | Cassandra `LexicalUUIDType` keys, Cassie compatibility | [`lexical`] | 16 bytes | a unique worker ID (host hash) |
//! | a standard UUID, no coordination | [`uuid7`] (UUIDv7 through the `uuid` crate) | 16 bytes | none (random bits) |
//! | a ULID, no coordination | [`ulid`] (through the `ulid` crate) | 16 bytes / 26 chars | none (random bits) |
//!
//! ## Time
//!
//! Generators read time only through [`clock::Clock`]. Production code passes
//! [`clock::SystemClock`]; tests pass a [`clock::ManualClock`] and move it forwards and
//! backwards to exercise every rule without sleeping.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod clock;
pub mod endpoint;
pub mod fence;
pub mod field;
pub mod horizon;
pub mod kind;
pub mod lexical;
pub mod poll;
pub mod scramble;
pub mod sequence;
pub mod sno;
pub mod snowflake;
pub mod template;
#[cfg(feature = "ulid")]
pub mod ulid;
#[cfg(feature = "uuid")]
pub mod uuid7;

pub use clock::{Clock, ManualClock, OffsetClock, SystemClock};
pub use field::FieldError;
pub use kind::{IdKind, IdText};
pub use poll::{Poll, WaitReason};
