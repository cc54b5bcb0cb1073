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

pub use generator::{OnExhausted, SnowflakeConfig, SnowflakeGenerator, SnowflakeStats};
pub use layout::{Layout, SnowflakeParts};

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
