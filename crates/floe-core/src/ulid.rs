//! ULID through the `ulid` crate, on floe's injectable clock.
//!
//! floe does not hand-write ULIDs: [`UlidGenerator`] feeds the clock's time to
//! `ulid::Generator` (monotonic: within a millisecond the random part is incremented), and
//! [`random_at`] is `ulid::Ulid::from_datetime` (independent random bits each time). [`parse`]
//! checks a text before `ulid::Ulid::from_string` decodes it, refusing what that accepts but the
//! ULID spec does not (a first character above `7`).
//!
//! **Across restarts** ([`UlidGenerator::not_before_ms`], [`UlidGenerator::horizon`]): as
//! [`crate::uuid7`], the generator issues no time past its durable time bound, and a restart
//! none at or before the previous run's bound: a clock behind it does not wait, the IDs carry
//! on at the bound's next millisecond (the random part counting up) until the clock catches
//! up.
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

pub use ulid::Ulid;

use crate::clock::{Clock, NANOS_PER_MILLI};
use crate::horizon::{Bounds, Horizon, HorizonStalled};

// The time never wraps the ULID's 48-bit millisecond field (which the `ulid` crate masks):
// floe's clocks count u64 nanoseconds (to the year 2554), far within 2^48 ms (the year
// 10889). Proved here when compiling.
const LAST_CLOCK_MS: u64 = u64::MAX / 1_000_000;
const LAST_48_BIT_MS: u64 = (1 << 48) - 1;
const _: () = assert!(LAST_CLOCK_MS <= LAST_48_BIT_MS);

/// A thread-safe, monotonic ULID generator reading an injected clock.
#[derive(Debug)]
pub struct UlidGenerator<C> {
    inner: Mutex<ulid::Generator>,
    clock: C,
    bounds: Bounds,
}

/// Why a ULID could not be issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UlidError {
    /// The random part of a millisecond's ULIDs was incremented past its maximum (2^80 IDs in
    /// one millisecond): no larger ULID exists for that time.
    Overflow,
    /// The time is past the generator's durable time bound and the bound did not move.
    HorizonStalled(HorizonStalled),
}

impl fmt::Display for UlidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UlidError::Overflow => {
                f.write_str("ULID random part overflowed within one millisecond")
            }
            UlidError::HorizonStalled(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for UlidError {}

impl<C: Clock> UlidGenerator<C> {
    /// A generator.
    pub fn new(clock: C) -> Self {
        UlidGenerator {
            inner: Mutex::new(ulid::Generator::new()),
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

    /// A new ULID, greater than every earlier one of this generator (and of earlier runs on
    /// its time bound), waiting for the bound at most its stall wait.
    ///
    /// # Errors
    /// [`UlidError::Overflow`] if the random part cannot be incremented within the
    /// millisecond; [`UlidError::HorizonStalled`] past a bound that did not move.
    #[inline]
    pub fn generate(&self) -> Result<Ulid, UlidError> {
        self.make(true)
    }

    /// As [`generate`](Self::generate), but never waits for the bound (an async caller waits
    /// itself).
    ///
    /// # Errors
    /// As [`generate`](Self::generate).
    #[inline]
    pub fn try_generate(&self) -> Result<Ulid, UlidError> {
        self.make(false)
    }

    fn make(&self, wait: bool) -> Result<Ulid, UlidError> {
        // The time is read under the lock, so that the order of IDs is the order of readings.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let nanos = self.bounds.time_nanos(self.clock.now_nanos());
        self.bounds
            .admit(nanos, wait)
            .map_err(UlidError::HorizonStalled)?;
        g.generate_from_datetime(UNIX_EPOCH + Duration::from_nanos(nanos))
            .map_err(|_| UlidError::Overflow)
    }
}

/// A ULID at the clock's time with fresh random bits (not monotonic within a millisecond).
#[inline]
pub fn random_at(clock: &impl Clock) -> Ulid {
    Ulid::from_datetime(clock.now_system_time())
}

/// Why a text is not a ULID. Small and `Copy`: no allocation on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UlidParseError {
    /// Not 26 characters.
    InvalidLength {
        /// Characters found.
        found: usize,
    },
    /// A character outside Crockford's base32.
    InvalidChar {
        /// The character.
        found: char,
        /// Its index (in bytes) in the text.
        index: usize,
    },
    /// The first character is above `7`: the text holds more than 128 bits.
    Overflow {
        /// The first character.
        found: char,
    },
}

impl fmt::Display for UlidParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UlidParseError::InvalidLength { found } => write!(
                f,
                "invalid ULID length: expected 26 characters of Crockford base32, found {found}"
            ),
            UlidParseError::InvalidChar { found, index } => write!(
                f,
                "invalid ULID character {found:?} at index {index}: expected Crockford base32 (0-9 and A-Z but I, L, O, U; either case)"
            ),
            UlidParseError::Overflow { found } => write!(
                f,
                "invalid ULID: the first character is {found:?}, above 7: the largest ULID is 7ZZZZZZZZZZZZZZZZZZZZZZZZZ (26 characters hold 130 bits, a ULID 128)"
            ),
        }
    }
}

impl std::error::Error for UlidParseError {}

/// Whether `c` is a digit of Crockford's base32 as ULIDs write it (either case).
fn is_crockford(c: char) -> bool {
    c.is_ascii_alphanumeric() && !matches!(c.to_ascii_uppercase(), 'I' | 'L' | 'O' | 'U')
}

/// Reads a ULID's 26 characters of Crockford base32 (either case), strictly.
///
/// `ulid::Ulid::from_string` drops the two bits above 128 of a first character past `7`, so
/// it reads `8ZZZZZZZZZZZZZZZZZZZZZZZZZ` as `0ZZZZZZZZZZZZZZZZZZZZZZZZZ`: two texts, one ID (its
/// issue dylanhart/ulid-rs#59). The ULID spec says to refuse them; this does.
///
/// ```
/// use floe_core::ulid::{parse, UlidParseError};
///
/// assert_eq!(parse("01arz3ndektsv4rrffq69g5fav").unwrap().to_string(), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
/// assert_eq!(parse("8ZZZZZZZZZZZZZZZZZZZZZZZZZ"), Err(UlidParseError::Overflow { found: '8' }));
/// ```
///
/// # Errors
/// [`UlidParseError`] saying what is wrong and where.
pub fn parse(text: &str) -> Result<Ulid, UlidParseError> {
    // A bad character first (a 26-character text of more bytes has one), then the length.
    if let Some((index, found)) = text.char_indices().find(|&(_, c)| !is_crockford(c)) {
        if text.chars().count() == 26 {
            return Err(UlidParseError::InvalidChar { found, index });
        }
    }
    let found = text.chars().count();
    if found != 26 {
        return Err(UlidParseError::InvalidLength { found });
    }
    // Every character is now a digit or a letter: above '7' in ASCII means above 7 in value.
    if let Some(first) = text.chars().next().filter(|&c| c > '7') {
        return Err(UlidParseError::Overflow { found: first });
    }
    // Checked above: 26 characters of the alphabet, the first at most 7. The crate decodes.
    Ulid::from_string(text).map_err(|_| UlidParseError::InvalidLength { found })
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

    #[test]
    fn a_restart_behind_the_bound_carries_on_above_it_without_waiting() {
        let clock = ManualClock::from_millis(1_700_000_000_000);
        let bound = 1_700_000_002_000;
        let h = Arc::new(Horizon::new(bound + 1_000, Duration::ZERO));
        let g = UlidGenerator::new(clock.clone())
            .not_before_ms(bound)
            .horizon(h);
        let mut last = g.generate().unwrap();
        assert_eq!(last.timestamp_ms(), bound + 1);
        for _ in 0..1_000 {
            let next = g.try_generate().unwrap();
            assert!(next > last);
            last = next;
        }
        clock.set_millis(bound + 500);
        assert_eq!(g.generate().unwrap().timestamp_ms(), bound + 500);
        clock.set_millis(bound + 1_001);
        assert!(matches!(
            g.try_generate(),
            Err(UlidError::HorizonStalled(e)) if e.bound_ms == bound + 1_000
        ));
    }

    #[test]
    fn parse_is_strict() {
        let max = parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ").unwrap();
        assert_eq!(max.0, u128::MAX);
        assert_eq!(parse("7zzzzzzzzzzzzzzzzzzzzzzzzz"), Ok(max));
        // The crate reads these as other IDs; the spec and floe refuse them.
        assert_eq!(
            Ulid::from_string("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")
                .unwrap()
                .to_string(),
            "0ZZZZZZZZZZZZZZZZZZZZZZZZZ"
        );
        for (text, first) in [
            ("8ZZZZZZZZZZZZZZZZZZZZZZZZZ", '8'),
            ("ZZZZZZZZZZZZZZZZZZZZZZZZZZ", 'Z'),
            ("g0000000000000000000000000", 'g'),
        ] {
            assert_eq!(parse(text), Err(UlidParseError::Overflow { found: first }));
        }
        assert_eq!(
            parse("0I000000000000000000000000"),
            Err(UlidParseError::InvalidChar {
                found: 'I',
                index: 1
            })
        );
        assert_eq!(
            parse("000000000000000000000000é"),
            Err(UlidParseError::InvalidLength { found: 25 })
        );
        assert_eq!(
            parse("0000000000000000000000000é"),
            Err(UlidParseError::InvalidChar {
                found: 'é',
                index: 25
            })
        );
        assert_eq!(parse(""), Err(UlidParseError::InvalidLength { found: 0 }));
        let e = parse("8ZZZZZZZZZZZZZZZZZZZZZZZZZ").unwrap_err().to_string();
        assert!(
            e.contains("above 7") && e.contains("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
            "{e}"
        );
    }
}
