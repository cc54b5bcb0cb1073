//! Snowflake: 64-bit, time-ordered IDs of a timestamp, a node and a per-unit sequence.
//!
//! ```
//! use floe_core::clock::SystemClock;
//! use floe_core::snowflake::{Layout, SnowflakeConfig};
//!
//! let gen = SnowflakeConfig::new(Layout::LEAF).worker(7).build(SystemClock).unwrap();
//! let id = gen.next_id().unwrap();
//! let parts = Layout::LEAF.decode(id);
//! assert_eq!(parts.worker, 7);
//! ```
//!
//! See [`Layout`] for the bit layouts and [`SnowflakeGenerator`] for the rules: sequence reset
//! per time unit, exhaustion, and clock rollback.

mod generator;
mod layout;

pub use generator::{
    OnExhausted, SnowflakeConfig, SnowflakeGenerator, SnowflakeStats, StartSource, WyRand,
};
pub use layout::{Layout, SnowflakeParts, MAX_TIME_MS};

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong with Snowflake layouts, parts and generation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnowflakeError {
    /// A layout field is invalid (`field` is `layout`, `timestamp_bits`, `sequence_bits`,
    /// `datacenter_bits`, `worker_bits`, `time_unit` or `epoch`).
    InvalidLayout {
        /// The configuration field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A node number (`datacenter`, `worker` or `id`) does not fit the layout.
    InvalidNode {
        /// The configuration field at fault.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the layout allows.
        max: u64,
    },
    /// A part given to [`Layout::encode`] does not fit.
    InvalidParts {
        /// The part at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The clock is behind the last issued time by more than the generator waits for.
    ClockMovedBackwards {
        /// How far behind, in whole time units.
        by: Duration,
    },
    /// The clock reads a time before the layout's epoch.
    ClockBeforeEpoch {
        /// The clock, in Unix milliseconds.
        now_ms: u64,
        /// The epoch, in Unix milliseconds.
        epoch_ms: u64,
    },
    /// The clock is past the last time the timestamp field can hold.
    TimestampOverflow {
        /// The clock, in Unix milliseconds.
        now_ms: u64,
    },
    /// Every sequence number of the current time unit was issued and the generator was told
    /// to fail rather than wait ([`OnExhausted::Fail`]).
    SequenceExhausted {
        /// The exhausted time unit, in Unix milliseconds.
        timestamp_ms: u64,
    },
    /// The generator's fence is raised: its worker ID lease is lost, and no ID is issued
    /// until it is held again.
    LeaseLost,
    /// The clock passed the generator's durable time bound ([`crate::horizon`]) and the bound
    /// did not move within its stall wait: no ID is issued past a bound that is not on disk.
    HorizonStalled(crate::horizon::HorizonStalled),
}

impl SnowflakeError {
    /// Whether the same call may succeed later without a change of configuration.
    pub fn is_temporary(&self) -> bool {
        matches!(
            self,
            SnowflakeError::ClockMovedBackwards { .. }
                | SnowflakeError::SequenceExhausted { .. }
                | SnowflakeError::LeaseLost
                | SnowflakeError::HorizonStalled(_)
        )
    }
}

impl fmt::Display for SnowflakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnowflakeError::InvalidLayout { field, reason } => write!(f, "invalid {field}: {reason}"),
            SnowflakeError::InvalidNode { field, value, max } => {
                write!(f, "invalid {field}: {value} does not fit the layout (0..={max})")
            }
            SnowflakeError::InvalidParts { field, reason } => write!(f, "invalid {field}: {reason}"),
            SnowflakeError::ClockMovedBackwards { by } => write!(
                f,
                "clock moved backwards by {} ms: refusing to issue IDs until it catches up",
                by.as_millis()
            ),
            SnowflakeError::ClockBeforeEpoch { now_ms, epoch_ms } => write!(
                f,
                "clock reads {now_ms} ms since the Unix epoch, before the layout's epoch {epoch_ms} ms"
            ),
            SnowflakeError::TimestampOverflow { now_ms } => write!(
                f,
                "clock reads {now_ms} ms since the Unix epoch, past the last time the layout's timestamp field can hold"
            ),
            SnowflakeError::SequenceExhausted { timestamp_ms } => write!(
                f,
                "sequence exhausted for the time unit at {timestamp_ms} ms"
            ),
            SnowflakeError::LeaseLost => f.write_str(
                "worker ID lease lost: refusing to issue IDs until the ID is held again",
            ),
            SnowflakeError::HorizonStalled(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SnowflakeError {}

/// What a Snowflake ID's text must be, for error messages.
const EXPECTED_ID: &str =
    "expected a decimal number from 0 to 18446744073709551615, or 0x and 1 to 16 hex digits";

/// Why a text is not a Snowflake ID. Small and `Copy`: no allocation on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseIdError {
    /// No digits: an empty text, or `0x` alone.
    NoDigits,
    /// A character that is not a digit of the base (a sign, a space, a letter...).
    InvalidChar {
        /// The character.
        found: char,
        /// Its index (in bytes) in the text.
        index: usize,
    },
    /// The number is more than `u64::MAX`.
    TooLarge,
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseIdError::NoDigits => write!(f, "invalid Snowflake ID: no digits; {EXPECTED_ID}"),
            ParseIdError::InvalidChar { found, index } => write!(
                f,
                "invalid Snowflake ID: {found:?} at index {index}; {EXPECTED_ID}"
            ),
            ParseIdError::TooLarge => {
                write!(f, "invalid Snowflake ID: more than 64 bits; {EXPECTED_ID}")
            }
        }
    }
}

impl std::error::Error for ParseIdError {}

/// Reads a Snowflake ID written as decimal digits, or as `0x` (or `0X`) and 1 to 16 hex
/// digits of either case (leading zeros are fine in both). Nothing else: no sign, no spaces,
/// no `_`.
///
/// ```
/// use floe_core::snowflake::{parse_id, ParseIdError};
///
/// assert_eq!(parse_id("515033464970412032"), Ok(515033464970412032));
/// assert_eq!(parse_id("0x0725C43527000000"), Ok(515033464970412032));
/// assert_eq!(parse_id("18446744073709551616"), Err(ParseIdError::TooLarge));
/// assert!(parse_id("-1").is_err());
/// ```
///
/// # Errors
/// [`ParseIdError`] saying what is wrong and what was expected.
pub fn parse_id(text: &str) -> Result<u64, ParseIdError> {
    let (digits, radix, offset) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"))
    {
        Some(hex) => (hex, 16, 2),
        None => (text, 10, 0),
    };
    if digits.is_empty() {
        return Err(ParseIdError::NoDigits);
    }
    let mut value: u64 = 0;
    for (i, c) in digits.char_indices() {
        let Some(digit) = c.to_digit(radix) else {
            return Err(ParseIdError::InvalidChar {
                found: c,
                index: offset + i,
            });
        };
        value = value
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or(ParseIdError::TooLarge)?;
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_strictly() {
        assert_eq!(parse_id("0"), Ok(0));
        assert_eq!(parse_id("00018446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_id("0xFFFFffffFFFFffff"), Ok(u64::MAX));
        assert_eq!(parse_id("0X000000000000000001"), Ok(1));
        assert_eq!(parse_id("0x10000000000000000"), Err(ParseIdError::TooLarge));
        assert_eq!(parse_id(""), Err(ParseIdError::NoDigits));
        assert_eq!(parse_id("0x"), Err(ParseIdError::NoDigits));
        assert_eq!(
            parse_id("+1"),
            Err(ParseIdError::InvalidChar {
                found: '+',
                index: 0
            })
        );
        assert_eq!(
            parse_id("0x1g"),
            Err(ParseIdError::InvalidChar {
                found: 'g',
                index: 3
            })
        );
        // Non-ASCII digits are not digits here (char::to_digit is ASCII-only; checked).
        assert_eq!(
            parse_id("1\u{0663}"),
            Err(ParseIdError::InvalidChar {
                found: '\u{0663}',
                index: 1
            })
        );
        let e = parse_id("1 2").unwrap_err().to_string();
        assert!(
            e.contains("' ' at index 1") && e.contains("decimal number"),
            "{e}"
        );
    }
}
