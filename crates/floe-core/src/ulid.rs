//! ULID through the `ulid` crate, on floe's injectable clock.
//!
//! floe does not hand-write ULIDs: [`UlidGenerator`] feeds the clock's time to
//! `ulid::Generator` (monotonic: within a millisecond the random part is incremented), and
//! [`random_at`] is `ulid::Ulid::from_datetime` (independent random bits each time).
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::ulid::UlidGenerator;
//!
//! let gen = UlidGenerator::new(SystemClock);
//! let (a, b) = (gen.generate().unwrap(), gen.generate().unwrap());
//! assert!(b > a);
//! ```

use std::fmt;
use std::sync::Mutex;

pub use ulid::Ulid;

use crate::clock::Clock;

// The time never wraps the ULID's 48-bit millisecond field (which the `ulid` crate masks):
// floe's clocks count u64 nanoseconds (to the year 2554), far within 2^48 ms (the year
// 10889). Proved here when compiling.
const _: () = assert!(u64::MAX / 1_000_000 < 1 << 48);

/// A thread-safe, monotonic ULID generator reading an injected clock.
#[derive(Debug)]
pub struct UlidGenerator<C> {
    inner: Mutex<ulid::Generator>,
    clock: C,
}

/// The random part of a millisecond's ULIDs was incremented past its maximum (2^80 IDs in one
/// millisecond): no larger ULID exists for that time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UlidOverflow;

impl fmt::Display for UlidOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ULID random part overflowed within one millisecond")
    }
}

impl std::error::Error for UlidOverflow {}

impl<C: Clock> UlidGenerator<C> {
    /// A generator.
    pub fn new(clock: C) -> Self {
        UlidGenerator {
            inner: Mutex::new(ulid::Generator::new()),
            clock,
        }
    }

    /// A new ULID at the clock's time, greater than every earlier one of this generator.
    ///
    /// # Errors
    /// [`UlidOverflow`] if the random part cannot be incremented within the millisecond.
    #[inline]
    pub fn generate(&self) -> Result<Ulid, UlidOverflow> {
        // The time is read under the lock, so that the order of IDs is the order of readings.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.generate_from_datetime(self.clock.now_system_time())
            .map_err(|_| UlidOverflow)
    }
}

/// A ULID at the clock's time with fresh random bits (not monotonic within a millisecond).
#[inline]
pub fn random_at(clock: &impl Clock) -> Ulid {
    Ulid::from_datetime(clock.now_system_time())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn uses_the_injected_clock_and_increases() {
        let clock = ManualClock::from_millis(1_700_000_000_123);
        let g = UlidGenerator::new(clock.clone());
        let mut last = g.generate().unwrap();
        assert_eq!(last.timestamp_ms(), 1_700_000_000_123);
        for _ in 0..10_000 {
            let next = g.generate().unwrap();
            assert!(next > last);
            last = next;
        }
        assert_eq!(random_at(&clock).timestamp_ms(), 1_700_000_000_123);
    }
}
