//! sno: compact (10-byte), sortable IDs with a metabyte, per the sno spec.
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::sno::{Partition, SnoGenerator, SnoSnapshot};
//!
//! let gen = SnoGenerator::from_snapshot(
//!     &SnoSnapshot { partition: Partition(*b"A\x0a"), ..Default::default() },
//!     SystemClock,
//! ).unwrap();
//! let id = gen.new_id(7).unwrap();
//! assert_eq!(id.meta(), 7);
//! assert_eq!(id.partition(), Partition(*b"A\x0a"));
//! let text = id.to_string();
//! assert_eq!(text.len(), 16);
//! assert_eq!(text.parse::<floe_core::sno::SnoId>().unwrap(), id);
//! ```
//!
//! The process-wide default generator is behind [`new`] and [`new_with_time`].

mod generator;
mod id;

pub use generator::{OverflowNotification, SnoGenerator, SnoSnapshot};
pub use id::{Partition, SnoId, ALPHABET};

use std::fmt;
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::clock::SystemClock;

/// Length of an ID in bytes.
pub const SIZE_BINARY: usize = 10;
/// Length of an ID's canonical text.
pub const SIZE_ENCODED: usize = 16;
/// sno's epoch, in seconds since the Unix epoch (2010-01-01T00:00:00Z).
pub const EPOCH: u64 = 1_262_304_000;
/// sno's epoch, in nanoseconds since the Unix epoch.
pub const EPOCH_NANOS: u64 = EPOCH * 1_000_000_000;
/// sno's epoch, in milliseconds since the Unix epoch.
pub const EPOCH_MS: u64 = EPOCH * 1000;
/// The time unit, 4 ms, in nanoseconds.
pub const TIME_UNIT_NANOS: u64 = 4_000_000;
/// The time unit, in milliseconds.
pub const TIME_UNIT_MS: u64 = 4;
/// The largest timestamp, in time units (2079-09-07T15:47:35.548Z).
pub const MAX_TIMESTAMP: u64 = (1 << 39) - 1;
/// The largest partition as a `u16`.
pub const MAX_PARTITION: u16 = u16::MAX;
/// The largest sequence.
pub const MAX_SEQUENCE: u16 = u16::MAX;
/// The smallest sequence pool a generator accepts (`sequence_max - sequence_min + 1`).
pub const MIN_SEQUENCE_POOL: u32 = 4;

/// Unix milliseconds of the start of time unit `wall` (4 ms units since sno's epoch, as in
/// [`SnoSnapshot::wall_hi`]).
///
/// Saturating, never overflowing: `wall` is first clamped to sno's range, `0..=`[`MAX_TIMESTAMP`],
/// as [`SnoGenerator::from_snapshot`] clamps a snapshot's units. So a negative `wall` gives
/// [`EPOCH_MS`] (2010-01-01T00:00:00Z) and anything past `MAX_TIMESTAMP` gives the start of the
/// last unit, 3_461_327_255_548 ms (2079-09-07T15:47:35.548Z).
///
/// ```
/// use floe_core::sno::{unix_ms_of_wall, EPOCH_MS};
/// assert_eq!(unix_ms_of_wall(0), EPOCH_MS);
/// assert_eq!(unix_ms_of_wall(10), EPOCH_MS + 40);
/// assert_eq!(unix_ms_of_wall(-1), EPOCH_MS);
/// ```
pub const fn unix_ms_of_wall(wall: i64) -> u64 {
    let units = if wall <= 0 {
        0
    } else if wall as u64 > MAX_TIMESTAMP {
        MAX_TIMESTAMP
    } else {
        wall as u64
    };
    // At most (2^39 - 1) * 4 + EPOCH_MS, about 3.5e12: no overflow.
    EPOCH_MS + units * TIME_UNIT_MS
}

/// The time unit (4 ms units since sno's epoch, as in [`SnoSnapshot::wall_hi`]) that Unix
/// millisecond `unix_ms` falls in: rounds down to the unit's start.
///
/// Saturating, never overflowing: a time before sno's epoch gives 0, a time past sno's range
/// (after 2079-09-07T15:47:35.551Z) gives [`MAX_TIMESTAMP`]. The inverse of
/// [`unix_ms_of_wall`] on sno's range.
///
/// ```
/// use floe_core::sno::{unix_ms_of_wall, wall_of_unix_ms, EPOCH_MS};
/// assert_eq!(wall_of_unix_ms(EPOCH_MS + 43), 10);
/// assert_eq!(unix_ms_of_wall(wall_of_unix_ms(EPOCH_MS + 43)), EPOCH_MS + 40);
/// assert_eq!(wall_of_unix_ms(0), 0);
/// ```
pub const fn wall_of_unix_ms(unix_ms: u64) -> i64 {
    let units = unix_ms.saturating_sub(EPOCH_MS) / TIME_UNIT_MS;
    if units > MAX_TIMESTAMP {
        MAX_TIMESTAMP as i64
    } else {
        units as i64
    }
}

/// Why a text or byte string is not a sno ID. Small and `Copy`: no allocation on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnoParseError {
    /// Wrong length (characters for text, bytes for binary).
    InvalidLength {
        /// The length a sno has in this form (16 or 10).
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// A character outside `[2-9a-x]`.
    InvalidChar {
        /// The character.
        found: char,
        /// Its index (in bytes) in the text.
        index: usize,
    },
}

impl SnoParseError {
    /// Fills in the real character and length of a `&str` input (the decoder sees bytes).
    fn with_text(self, text: &str) -> Self {
        match self {
            SnoParseError::InvalidLength { expected, .. } => SnoParseError::InvalidLength {
                expected,
                found: text.chars().count(),
            },
            SnoParseError::InvalidChar { index, found } => SnoParseError::InvalidChar {
                found: text
                    .get(index..)
                    .and_then(|rest| rest.chars().next())
                    .unwrap_or(found),
                index,
            },
        }
    }
}

impl fmt::Display for SnoParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnoParseError::InvalidLength { expected, found } => write!(
                f,
                "invalid sno length: expected {expected} {}, found {found}",
                if *expected == SIZE_ENCODED { "characters" } else { "bytes" }
            ),
            SnoParseError::InvalidChar { found, index } => write!(
                f,
                "invalid sno character {found:?} at index {index}: expected one of 2-9, a-x (lowercase)"
            ),
        }
    }
}

impl std::error::Error for SnoParseError {}

/// Why a sno generator could not be built or could not issue an ID.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnoError {
    /// The sequence bounds or current sequence of a snapshot are unusable.
    InvalidSequenceBounds {
        /// The lower bound given.
        min: u16,
        /// The upper bound given.
        max: u16,
        /// The current sequence given.
        sequence: u32,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// More than 65536 generators were created with default partitions in this process.
    PartitionPoolExhausted,
    /// The clock (or a time given to `new_with_time`) is outside sno's range, 2010-01-01 to
    /// 2079-09-07.
    TimeOutOfRange {
        /// The time, in nanoseconds since the Unix epoch.
        unix_nanos: u64,
    },
    /// The generator's fence is raised: its partition lease is lost, and no ID is issued until
    /// it is held again.
    LeaseLost,
    /// The clock passed the generator's durable time bound ([`crate::horizon`]) and the bound
    /// did not move within its stall wait: no ID is issued past a bound that is not on disk.
    HorizonStalled(crate::horizon::HorizonStalled),
}

impl fmt::Display for SnoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnoError::InvalidSequenceBounds { min, max, sequence, reason } => write!(
                f,
                "invalid sequence bounds (sequence_min {min}, sequence_max {max}, sequence {sequence}): {reason}"
            ),
            SnoError::PartitionPoolExhausted => f.write_str(
                "partition pool exhausted: more than 65536 sno generators with default partitions in this process",
            ),
            SnoError::HorizonStalled(e) => e.fmt(f),
            SnoError::LeaseLost => f.write_str(
                "partition lease lost: refusing to issue IDs until the partition is held again",
            ),
            SnoError::TimeOutOfRange { unix_nanos } => write!(
                f,
                "time {unix_nanos} ns since the Unix epoch is outside sno's range (2010-01-01T00:00:00Z to 2079-09-07T15:47:35.548Z)"
            ),
        }
    }
}

impl std::error::Error for SnoError {}

fn default_generator() -> Result<&'static SnoGenerator<SystemClock>, SnoError> {
    static DEFAULT: OnceLock<Result<SnoGenerator<SystemClock>, SnoError>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| SnoGenerator::new(SystemClock))
        .as_ref()
        .map_err(Clone::clone)
}

/// A new ID from the process-wide default generator (system clock, a partition from the
/// in-process pool, full sequence pool). Immutable: it cannot be restored from a snapshot.
///
/// # Errors
/// [`SnoError::TimeOutOfRange`] if the system clock is outside sno's range;
/// [`SnoError::PartitionPoolExhausted`] if the default generator could not get a partition.
pub fn new(meta: u8) -> Result<SnoId, SnoError> {
    default_generator()?.new_id(meta)
}

/// An ID at a given time from the process-wide default generator. See
/// [`SnoGenerator::new_with_time`] for the caveats.
///
/// # Errors
/// As [`new`], for the time given.
pub fn new_with_time(meta: u8, time: SystemTime) -> Result<SnoId, SnoError> {
    default_generator()?.new_with_time(meta, time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_times_round_trip_on_snos_range() {
        for wall in [
            0,
            1,
            2,
            1_000_000,
            MAX_TIMESTAMP as i64 - 1,
            MAX_TIMESTAMP as i64,
        ] {
            let ms = unix_ms_of_wall(wall);
            assert_eq!(wall_of_unix_ms(ms), wall);
            // Every millisecond of the unit maps back to it.
            assert_eq!(wall_of_unix_ms(ms + TIME_UNIT_MS - 1), wall);
            assert_eq!(ms, EPOCH_MS + wall as u64 * 4);
        }
        // The units agree with the IDs' own timestamps.
        let id = SnoId::from_parts(12_345, false, 0, Partition([0, 0]), 0);
        assert_eq!(
            u128::from(unix_ms_of_wall(12_345)) * 1_000_000,
            u128::from(id.timestamp_unix_ns())
        );
        assert_eq!(wall_of_unix_ms(EPOCH_MS + 43), 10);
        assert_eq!(unix_ms_of_wall(10), EPOCH_MS + 40);
    }

    #[test]
    fn unit_times_saturate_at_snos_bounds() {
        // The last unit starts at 2079-09-07T15:47:35.548Z.
        let last_ms = 3_461_327_255_548;
        assert_eq!(unix_ms_of_wall(MAX_TIMESTAMP as i64), last_ms);
        for wall in [MAX_TIMESTAMP as i64 + 1, i64::MAX] {
            assert_eq!(unix_ms_of_wall(wall), last_ms);
        }
        for wall in [-1, i64::MIN] {
            assert_eq!(unix_ms_of_wall(wall), EPOCH_MS);
        }
        for ms in [0, 1, EPOCH_MS - 1] {
            assert_eq!(wall_of_unix_ms(ms), 0);
        }
        assert_eq!(wall_of_unix_ms(last_ms + 3), MAX_TIMESTAMP as i64);
        for ms in [last_ms + 4, u64::MAX] {
            assert_eq!(wall_of_unix_ms(ms), MAX_TIMESTAMP as i64);
        }
    }
}
