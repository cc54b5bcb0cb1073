//! UUIDv7 (RFC 9562) through the `uuid` crate, on floe's injectable clock.
//!
//! floe does not hand-write UUIDs: [`Uuid7Generator`] feeds the clock's time to
//! `uuid::Uuid::new_v7` with a `uuid::ContextV7` of its own, which keeps the IDs of one
//! generator strictly increasing (a 42-bit counter reseeded each millisecond).
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::uuid7::{inspect, Uuid7Generator};
//!
//! let gen = Uuid7Generator::new(SystemClock);
//! let (a, b) = (gen.generate(), gen.generate());
//! assert!(b > a);
//! assert_eq!(inspect(&a).unwrap().version, 7);
//! ```

use std::fmt;
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

pub use uuid::Uuid;
use uuid::{ContextV7, Timestamp};

use crate::clock::Clock;

/// A thread-safe UUIDv7 generator reading an injected clock.
#[derive(Debug)]
pub struct Uuid7Generator<C> {
    context: Mutex<ContextV7>,
    clock: C,
}

impl<C: Clock> Uuid7Generator<C> {
    /// A generator with a fresh counter context.
    pub fn new(clock: C) -> Self {
        Uuid7Generator {
            context: Mutex::new(ContextV7::new()),
            clock,
        }
    }

    /// A new UUIDv7 at the clock's time, greater than every earlier one of this generator.
    #[inline]
    pub fn generate(&self) -> Uuid {
        let since = self
            .clock
            .now_system_time()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ts = Timestamp::from_unix(&self.context, since.as_secs(), since.subsec_nanos());
        Uuid::new_v7(ts)
    }
}

// The time never wraps the 48-bit `unix_ts_ms` field: floe's clocks count u64 nanoseconds
// (to the year 2554), far within 2^48 ms (the year 10889). Proved here when compiling.
const LAST_CLOCK_MS: u64 = u64::MAX / 1_000_000;
const LAST_48_BIT_MS: u64 = (1 << 48) - 1;
const _: () = assert!(LAST_CLOCK_MS <= LAST_48_BIT_MS);

/// What [`inspect`] reads from a UUIDv7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uuid7Parts {
    /// The version number (7).
    pub version: usize,
    /// Milliseconds since the Unix epoch (the 48-bit `unix_ts_ms` field).
    pub timestamp_ms: u64,
    /// The 74 bits after the timestamp, version and variant: counter and random data.
    pub rand: u128,
}

/// Why a UUID could not be inspected as a UUIDv7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uuid7Error {
    /// Another version: only version 7 carries a Unix timestamp this module reads.
    NotVersion7 {
        /// The version found.
        version: usize,
    },
}

impl fmt::Display for Uuid7Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uuid7Error::NotVersion7 { version } => {
                write!(f, "expected a version 7 UUID, found version {version}")
            }
        }
    }
}

impl std::error::Error for Uuid7Error {}

/// Reads the timestamp and random bits of a UUIDv7.
///
/// # Errors
/// [`Uuid7Error::NotVersion7`] for any other version.
pub fn inspect(uuid: &Uuid) -> Result<Uuid7Parts, Uuid7Error> {
    let version = uuid.get_version_num();
    if version != 7 {
        return Err(Uuid7Error::NotVersion7 { version });
    }
    let v = uuid.as_u128();
    let rand_a = (v >> 64) & 0xfff;
    let rand_b = v & ((1u128 << 62) - 1);
    Ok(Uuid7Parts {
        version,
        timestamp_ms: (v >> 80) as u64,
        rand: (rand_a << 62) | rand_b,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn uses_the_injected_clock_and_increases() {
        let clock = ManualClock::from_millis(1_700_000_000_123);
        let g = Uuid7Generator::new(clock.clone());
        let mut last = g.generate();
        assert_eq!(inspect(&last).unwrap().timestamp_ms, 1_700_000_000_123);
        for _ in 0..10_000 {
            let next = g.generate();
            assert!(next > last);
            last = next;
        }
        clock.set_millis(1_800_000_000_000);
        assert_eq!(
            inspect(&g.generate()).unwrap().timestamp_ms,
            1_800_000_000_000
        );
    }

    #[test]
    fn rejects_other_versions() {
        let v4: Uuid = "550e8400-e29b-41d4-a716-446655440000".parse().unwrap();
        assert_eq!(inspect(&v4), Err(Uuid7Error::NotVersion7 { version: 4 }));
    }
}
