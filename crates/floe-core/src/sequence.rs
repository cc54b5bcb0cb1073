//! The parts of floe's sequencer that need no I/O: sequence keys, the increment modes, ID
//! ranges (segments), and the rule that adapts a key's segment size to its rate.
//!
//! The stores and the WEAK buffer above them live in `floe-sequencer`; this module is what
//! every one of them agrees on.
//!
//! **Numbers.** A key's IDs are `i64` (Layotto's `next_id` is an int64), positive, and start at
//! 1 for a key nobody used, or just above the key's `bigger_than`. A store keeps the last value
//! it reserved; reserving `n` values moves it from `v` to `v + n` and hands out `v+1 ..= v+n`.
//! A reservation that would pass [`i64::MAX`] fails with `Exhausted` and changes nothing: a
//! sequence never wraps.

use std::fmt;
use std::time::Duration;

/// The longest key, in bytes of UTF-8.
///
/// 255 bytes fit every store's index (MySQL's `VARBINARY(255)` primary key, a ZooKeeper node
/// name even when every byte is percent-encoded, PostgreSQL's `text`).
pub const MAX_KEY_LEN: usize = 255;

/// A sequence key as users name it: non-empty UTF-8, at most [`MAX_KEY_LEN`] bytes, with no
/// NUL character (PostgreSQL's `text` cannot hold one).
///
/// Keys are compared byte for byte: `Orders` and `orders` are two sequences on every store.
///
/// # Examples
/// ```
/// use floe_core::sequence::{Key, KeyError};
///
/// assert_eq!(Key::new("order_table").unwrap().as_str(), "order_table");
/// assert_eq!(Key::new(""), Err(KeyError::Empty));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

/// Why a string is not a [`Key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a NUL character at this byte index.
    Nul {
        /// Byte index of the NUL.
        index: usize,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => {
                f.write_str("invalid key: expected 1 to 255 bytes of UTF-8, found an empty key")
            }
            KeyError::TooLong { len } => write!(
                f,
                "invalid key: expected at most {MAX_KEY_LEN} bytes of UTF-8, found {len}"
            ),
            KeyError::Nul { index } => {
                write!(f, "invalid key: a NUL character at byte {index}")
            }
        }
    }
}

impl std::error::Error for KeyError {}

impl Key {
    /// Checks `key` and wraps it.
    pub fn new(key: impl Into<String>) -> Result<Key, KeyError> {
        let key = key.into();
        Key::check(&key)?;
        Ok(Key(key))
    }

    /// Whether `key` is a valid key, without making one (no allocation).
    pub fn check(key: &str) -> Result<(), KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        if let Some(index) = key.bytes().position(|b| b == 0) {
            return Err(KeyError::Nul { index });
        }
        Ok(())
    }

    /// The key as the user named it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Maps keyed by `Key` are looked up by `&str` (equal keys hash alike: both are the bytes).
impl std::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Key {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Key, KeyError> {
        Key::new(s)
    }
}

/// What a caller asks of a key's IDs (Layotto's `SequencerOptions.AutoIncrement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Unique and trend-increasing: served from memory out of segments reserved in the store.
    /// One caller sees its IDs increase; callers on several threads or processes interleave.
    /// The wire's zero value, so also what an absent option means.
    #[default]
    Weak,
    /// Strictly increasing across every process sharing the store: one atomic increment in the
    /// store per ID, so an ID returned before another call starts is smaller than its ID.
    Strong,
}

impl Mode {
    /// `"weak"` or `"strong"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Weak => "weak",
            Mode::Strong => "strong",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s.to_ascii_lowercase().as_str() {
            "weak" | "0" => Ok(Mode::Weak),
            "strong" | "1" => Ok(Mode::Strong),
            // Quoted with escapes and cut short: a newline or a megabyte in the input stays a
            // short one-line error.
            _ => Err(format!(
                "invalid increment {}: expected weak or strong (or 0 / 1)",
                crate::endpoint::quoted(s)
            )),
        }
    }
}

/// IDs `start ..= end` that one reservation in a store handed to one caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The first ID.
    pub start: i64,
    /// The last ID (inclusive, so a segment ending at [`i64::MAX`] can be written).
    pub end: i64,
}

impl Segment {
    /// The segment a store's reservation of `n` values describes when the key's value moved to
    /// `last`: `last - n + 1 ..= last`.
    pub fn ending_at(last: i64, n: u32) -> Segment {
        Segment {
            start: last - i64::from(n) + 1,
            end: last,
        }
    }

    /// How many IDs it holds.
    pub fn len(&self) -> u64 {
        (self.end - self.start) as u64 + 1
    }

    /// Never true: a segment holds at least one ID. (Here for clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// The value a key holds after reserving `n` more when it holds `current`, or `None` when
/// that would pass [`i64::MAX`] (the sequence is exhausted; nothing may change).
///
/// Every store checks with this, or with the same comparison in its own language
/// (`value <= i64::MAX - n`).
pub fn reserve_after(current: i64, n: u32) -> Option<i64> {
    current.checked_add(i64::from(n))
}

/// How a key's segment size (its step) follows its rate, as Leaf's segment mode does: a
/// segment used up in less than `target` doubles the next step; one that lasted more than twice
/// `target` halves it; always within `min ..= max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepPolicy {
    /// The smallest step, and the first one a key uses.
    pub min: u32,
    /// The largest step.
    pub max: u32,
    /// How long a segment should last.
    pub target: Duration,
}

impl Default for StepPolicy {
    /// 1,000 to 1,000,000 IDs (Leaf's bound), aiming at a segment a minute.
    fn default() -> Self {
        StepPolicy {
            min: 1_000,
            max: 1_000_000,
            target: Duration::from_secs(60),
        }
    }
}

impl StepPolicy {
    /// Checks the bounds, naming the field at fault (`step.min`, `step.max`, `step.target`).
    ///
    /// # Errors
    /// The first field out of its bounds.
    pub fn validate(&self) -> Result<(), crate::FieldError> {
        use crate::FieldError;
        if self.min == 0 {
            return Err(FieldError::new("step.min", "expected at least 1, found 0"));
        }
        if self.max < self.min {
            return Err(FieldError::new(
                "step.max",
                format!(
                    "expected at least step.min ({}), found {}",
                    self.min, self.max
                ),
            ));
        }
        if self.max > 1 << 30 {
            return Err(FieldError::new(
                "step.max",
                format!("expected at most {}, found {}", 1u32 << 30, self.max),
            ));
        }
        if self.target.is_zero() {
            return Err(FieldError::new(
                "step.target",
                "expected a positive duration, found 0",
            ));
        }
        Ok(())
    }

    /// The step after a segment of `step` IDs lasted `lasted` (from its fetch to the fetch of
    /// the next one).
    pub fn next_step(&self, step: u32, lasted: Duration) -> u32 {
        let step = step.clamp(self.min, self.max);
        if lasted < self.target {
            step.saturating_mul(2).min(self.max)
        } else if lasted > self.target * 2 {
            (step / 2).max(self.min)
        } else {
            step
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert_eq!(Key::new(""), Err(KeyError::Empty));
        assert_eq!(
            Key::new("a".repeat(256)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert!(Key::new("é".repeat(127)).is_ok()); // 254 bytes
        assert_eq!(
            Key::new("é".repeat(128)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert_eq!(Key::new("a\0b"), Err(KeyError::Nul { index: 1 }));
        assert_eq!(Key::new("a||b/c").unwrap().as_str(), "a||b/c");
        assert!(KeyError::TooLong { len: 300 }
            .to_string()
            .contains("found 300"));
    }

    #[test]
    fn modes_parse() {
        assert_eq!("STRONG".parse::<Mode>(), Ok(Mode::Strong));
        assert_eq!("0".parse::<Mode>(), Ok(Mode::Weak));
        assert!("2"
            .parse::<Mode>()
            .unwrap_err()
            .contains("expected weak or strong"));
        assert_eq!(Mode::default(), Mode::Weak);
        let e = "\n".parse::<Mode>().unwrap_err();
        assert!(!e.contains('\n') && e.contains(r#""\n""#), "{e}");
        let e = "x".repeat(100_000).parse::<Mode>().unwrap_err();
        assert!(e.len() < 300 && e.contains("(100000 bytes)"), "{e}");
    }

    #[test]
    fn reservations_never_wrap() {
        assert_eq!(reserve_after(0, 1), Some(1));
        assert_eq!(reserve_after(i64::MAX - 5, 5), Some(i64::MAX));
        assert_eq!(reserve_after(i64::MAX - 5, 6), None);
        let s = Segment::ending_at(i64::MAX, 5);
        assert_eq!((s.start, s.end, s.len()), (i64::MAX - 4, i64::MAX, 5));
    }

    #[test]
    fn steps_follow_the_rate() {
        let p = StepPolicy {
            min: 10,
            max: 80,
            target: Duration::from_secs(10),
        };
        assert!(p.validate().is_ok());
        assert_eq!(p.next_step(10, Duration::from_secs(1)), 20);
        assert_eq!(p.next_step(40, Duration::from_secs(1)), 80);
        assert_eq!(p.next_step(80, Duration::from_secs(1)), 80);
        assert_eq!(p.next_step(40, Duration::from_secs(15)), 40);
        assert_eq!(p.next_step(40, Duration::from_secs(25)), 20);
        assert_eq!(p.next_step(10, Duration::from_secs(3600)), 10);
        assert!(StepPolicy { min: 0, ..p }
            .validate()
            .is_err_and(|e| e.field == "step.min"));
        assert!(StepPolicy { max: 5, ..p }
            .validate()
            .is_err_and(|e| e.field == "step.max"));
    }
}
