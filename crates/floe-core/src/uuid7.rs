//! UUIDv7 (RFC 9562) through the `uuid` crate, on floe's injectable clock.
//!
//! floe does not hand-write UUIDs: [`Uuid7Generator`] feeds the clock's time to
//! `uuid::Uuid::new_v7` with a `uuid::ContextV7` of its own, which keeps the IDs of one
//! generator strictly increasing (a 42-bit counter reseeded each millisecond).
//!
//! **Across restarts** ([`Uuid7Generator::not_before_ms`], [`Uuid7Generator::horizon`]): the
//! generator issues no time past its durable time bound ([`crate::horizon`]), and a restart
//! issues none at or before the previous run's bound. A clock behind that bound does not
//! wait: the IDs carry on at the bound's next millisecond, their counter counting up, until
//! the clock catches up (RFC 9562, 6.2, lets a generator's timestamp run ahead of the clock to
//! stay monotonic). So a run's IDs are above every earlier run's on the same state directory,
//! after a crash and a clock stepped back alike.
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::uuid7::{inspect, Uuid7Generator};
//!
//! let gen = Uuid7Generator::new(SystemClock);
//! let (a, b) = (gen.generate().unwrap(), gen.generate().unwrap());
//! assert!(b > a);
//! assert_eq!(inspect(&a).unwrap().version, 7);
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};

pub use uuid::Uuid;
use uuid::{ContextV7, Timestamp};

use crate::clock::{Clock, NANOS_PER_MILLI};
use crate::horizon::{Bounds, Horizon, HorizonStalled};

/// A thread-safe UUIDv7 generator reading an injected clock.
#[derive(Debug)]
pub struct Uuid7Generator<C> {
    context: Mutex<ContextV7>,
    clock: C,
    bounds: Bounds,
}

impl<C: Clock> Uuid7Generator<C> {
    /// A generator with a fresh counter context.
    pub fn new(clock: C) -> Self {
        Uuid7Generator {
            context: Mutex::new(ContextV7::new()),
            clock,
            bounds: Bounds::default(),
        }
    }

    /// Issues no time in or before the Unix millisecond `ms` (the previous run's durable time
    /// bound): while the clock is behind, the IDs carry on at `ms + 1`.
    #[must_use]
    pub fn not_before_ms(mut self, ms: u64) -> Self {
        self.bounds.set_not_before_ms(ms);
        self
    }

    /// Issues no time past `horizon` (one more atomic load per ID).
    #[must_use]
    pub fn horizon(mut self, horizon: Arc<Horizon>) -> Self {
        self.bounds.set_horizon(horizon);
        self
    }

    /// The Unix ms of the latest time issued or about to be (the clock's, or the floor):
    /// what the durable time bound records at a clean stop.
    pub fn last_time_ms(&self) -> u64 {
        self.bounds.time_nanos(self.clock.now_nanos()) / NANOS_PER_MILLI
    }

    /// A new UUIDv7, greater than every earlier one of this generator (and of earlier runs
    /// on its time bound), waiting for the bound at most its stall wait.
    ///
    /// # Errors
    /// [`HorizonStalled`] when the time is past the durable bound and the bound did not move.
    #[inline]
    pub fn generate(&self) -> Result<Uuid, HorizonStalled> {
        self.make(true)
    }

    /// As [`generate`](Self::generate), but never waits: a time past the bound is refused at
    /// once (an async caller waits for the bound itself).
    ///
    /// # Errors
    /// [`HorizonStalled`] when the time is past the durable bound.
    #[inline]
    pub fn try_generate(&self) -> Result<Uuid, HorizonStalled> {
        self.make(false)
    }

    fn make(&self, wait: bool) -> Result<Uuid, HorizonStalled> {
        let nanos = self.bounds.time_nanos(self.clock.now_nanos());
        self.bounds.admit(nanos, wait)?;
        let ts = Timestamp::from_unix(
            &self.context,
            nanos / 1_000_000_000,
            (nanos % 1_000_000_000) as u32,
        );
        Ok(Uuid::new_v7(ts))
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
        let mut last = g.generate().unwrap();
        assert_eq!(inspect(&last).unwrap().timestamp_ms, 1_700_000_000_123);
        for _ in 0..10_000 {
            let next = g.generate().unwrap();
            assert!(next > last);
            last = next;
        }
        clock.set_millis(1_800_000_000_000);
        assert_eq!(
            inspect(&g.generate().unwrap()).unwrap().timestamp_ms,
            1_800_000_000_000
        );
    }

    #[test]
    fn a_restart_behind_the_bound_carries_on_above_it_without_waiting() {
        use std::time::Duration;
        // The previous run's bound: 2 s ahead of this run's clock.
        let clock = ManualClock::from_millis(1_700_000_000_000);
        let bound = 1_700_000_002_000;
        let h = Arc::new(Horizon::new(bound + 1_000, Duration::ZERO));
        let g = Uuid7Generator::new(clock.clone())
            .not_before_ms(bound)
            .horizon(h.clone());
        let first = g.generate().unwrap();
        assert_eq!(inspect(&first).unwrap().timestamp_ms, bound + 1);
        let mut last = first;
        for _ in 0..1_000 {
            let next = g.try_generate().unwrap();
            assert!(next > last);
            last = next;
        }
        assert_eq!(g.last_time_ms(), bound + 1);
        // The clock catches up and passes: its own time again.
        clock.set_millis(bound + 500);
        assert_eq!(
            inspect(&g.generate().unwrap()).unwrap().timestamp_ms,
            bound + 500
        );
        // Never past the durable bound.
        clock.set_millis(bound + 1_001);
        let e = g.try_generate().unwrap_err();
        assert_eq!(e.bound_ms, bound + 1_000);
        assert!(g.generate().is_err());
    }

    #[test]
    fn rejects_other_versions() {
        let v4: Uuid = "550e8400-e29b-41d4-a716-446655440000".parse().unwrap();
        assert_eq!(inspect(&v4), Err(Uuid7Error::NotVersion7 { version: 4 }));
    }
}
