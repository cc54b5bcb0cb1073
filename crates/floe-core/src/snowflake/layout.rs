//! Snowflake bit layouts: where the timestamp, node and sequence sit in a 64-bit ID.

use std::fmt;
use std::str::FromStr;

use super::SnowflakeError;

/// How a 64-bit Snowflake ID is split, from the most significant bit down:
///
/// ```text
///  63                                                              0
/// +---+----------------------+------------+--------+----------------+
/// | 0 | timestamp            | datacenter | worker | sequence       |
/// +---+----------------------+------------+--------+----------------+
///       units since epoch     node bits            per time unit
/// ```
///
/// Unused high bits stay zero. The presets:
///
/// | preset        | epoch (Unix ms)              | timestamp | datacenter | worker | sequence | top bit |
/// |---------------|------------------------------|-----------|------------|--------|----------|---------|
/// | `leaf`        | 1672531200000 (2023-01-01)   | 41        | -          | 10     | 12       | clear   |
/// | `twitter`     | 1288834974657 (2010-11-04)   | 41        | 5          | 5      | 12       | clear   |
/// | `flake-idgen` | 0 (1970-01-01), configurable | 42        | 5          | 5      | 12       | used    |
///
/// **Carrying IDs of 64 bits.** `leaf` and `twitter` IDs always fit an `i64` (63 bits). A
/// `flake-idgen` ID uses the top bit from 2039-09-07 on the Unix epoch: floe's Rust API always
/// carries IDs as `u64`, the CLI prints them as unsigned decimal (or hex), and JSON output
/// carries every ID as a decimal *string*, because JSON numbers lose precision past 2^53 and
/// many parsers stop at 2^63. See [`Layout::fits_i64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    timestamp_bits: u8,
    datacenter_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    epoch_ms: u64,
    unit_ms: u64,
}

/// The parts of a Snowflake ID, as [`Layout::decode`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnowflakeParts {
    /// Wall time of the ID's time unit, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The datacenter field (0 in layouts without one).
    pub datacenter: u64,
    /// The worker field.
    pub worker: u64,
    /// The sequence within the time unit.
    pub sequence: u64,
}

impl Layout {
    /// Leaf-Snowflake as in seed 000: epoch 2023-01-01T00:00:00Z, 41-bit ms, 10-bit worker,
    /// 12-bit sequence.
    pub const LEAF: Layout = Layout::unchecked(41, 0, 10, 12, 1_672_531_200_000, 1);
    /// Twitter's Snowflake: epoch 1288834974657 ms, 41-bit ms, 5-bit datacenter, 5-bit worker,
    /// 12-bit sequence.
    pub const TWITTER: Layout = Layout::unchecked(41, 5, 5, 12, 1_288_834_974_657, 1);
    /// flake-idgen (seed 003): Unix epoch, 42-bit ms, 5-bit datacenter, 5-bit worker,
    /// 12-bit counter. Use [`Layout::with_epoch_ms`] for its `epoch` option.
    pub const FLAKE_IDGEN: Layout = Layout::unchecked(42, 5, 5, 12, 0, 1);

    /// The names accepted by [`Layout::preset`].
    pub const PRESETS: [&'static str; 3] = ["leaf", "twitter", "flake-idgen"];

    const fn unchecked(ts: u8, dc: u8, worker: u8, seq: u8, epoch_ms: u64, unit_ms: u64) -> Self {
        Layout {
            timestamp_bits: ts,
            datacenter_bits: dc,
            worker_bits: worker,
            sequence_bits: seq,
            epoch_ms,
            unit_ms,
        }
    }

    /// A layout of the given field widths on the Unix epoch with 1 ms time units, validated.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] naming the field: more than 64 bits in all, no
    /// sequence or timestamp bits, or a field wider than it can be used.
    pub fn new(
        timestamp_bits: u8,
        datacenter_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
    ) -> Result<Self, SnowflakeError> {
        let layout = Self::unchecked(
            timestamp_bits,
            datacenter_bits,
            worker_bits,
            sequence_bits,
            0,
            1,
        );
        layout.validate()?;
        Ok(layout)
    }

    /// A preset by name (`leaf`, `twitter`, `flake-idgen`), or field widths written
    /// `TS/WORKER/SEQ` or `TS/DC/WORKER/SEQ` (e.g. `41/10/12`, `42/5/5/12`) on the Unix epoch.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] with field `layout` for an unknown name.
    pub fn preset(name: &str) -> Result<Self, SnowflakeError> {
        match name {
            "leaf" => Ok(Self::LEAF),
            "twitter" => Ok(Self::TWITTER),
            "flake-idgen" | "flake_idgen" | "flake" => Ok(Self::FLAKE_IDGEN),
            custom if custom.contains('/') => {
                let bad = || SnowflakeError::InvalidLayout {
                    field: "layout",
                    reason: format!(
                        "expected TS/WORKER/SEQ or TS/DC/WORKER/SEQ bit widths, found {custom:?}"
                    ),
                };
                let widths: Vec<u8> = custom
                    .split('/')
                    .map(|w| w.trim().parse::<u8>().map_err(|_| bad()))
                    .collect::<Result<_, _>>()?;
                match widths[..] {
                    [ts, worker, seq] => Self::new(ts, 0, worker, seq),
                    [ts, dc, worker, seq] => Self::new(ts, dc, worker, seq),
                    _ => Err(bad()),
                }
            }
            other => Err(SnowflakeError::InvalidLayout {
                field: "layout",
                reason: format!(
                    "unknown layout {other:?}: expected leaf, twitter, flake-idgen or bit widths such as 41/10/12"
                ),
            }),
        }
    }

    /// This layout with another epoch, in milliseconds since the Unix epoch.
    #[must_use]
    pub const fn with_epoch_ms(mut self, epoch_ms: u64) -> Self {
        self.epoch_ms = epoch_ms;
        self
    }

    /// This layout with another time unit, in milliseconds (1 by default; sonyflake uses 10).
    #[must_use]
    pub const fn with_time_unit_ms(mut self, unit_ms: u64) -> Self {
        self.unit_ms = unit_ms;
        self
    }

    /// Checks the field widths and time unit.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] naming the field at fault.
    pub fn validate(&self) -> Result<(), SnowflakeError> {
        let invalid = |field: &'static str, reason: String| {
            Err(SnowflakeError::InvalidLayout { field, reason })
        };
        let total = self.total_bits();
        if total > 64 {
            return invalid(
                "layout",
                format!(
                    "timestamp_bits + datacenter_bits + worker_bits + sequence_bits = {total}, more than 64"
                ),
            );
        }
        if self.sequence_bits == 0 {
            return invalid("sequence_bits", "must be at least 1".into());
        }
        if self.sequence_bits > 32 {
            return invalid(
                "sequence_bits",
                format!("must be at most 32, found {}", self.sequence_bits),
            );
        }
        if self.timestamp_bits == 0 {
            return invalid("timestamp_bits", "must be at least 1".into());
        }
        if self.datacenter_bits > 16 {
            return invalid(
                "datacenter_bits",
                format!("must be at most 16, found {}", self.datacenter_bits),
            );
        }
        if self.worker_bits > 31 {
            return invalid(
                "worker_bits",
                format!("must be at most 31, found {}", self.worker_bits),
            );
        }
        if self.unit_ms == 0 {
            return invalid("time_unit", "must be at least 1 ms".into());
        }
        if self.unit_ms > 86_400_000 {
            return invalid(
                "time_unit",
                format!(
                    "must be at most one day (86400000 ms), found {}",
                    self.unit_ms
                ),
            );
        }
        Ok(())
    }

    /// Checks that the epoch is not after `now_ms` (an epoch in the future would make every
    /// ID's time negative).
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] with field `epoch`.
    pub fn validate_epoch(&self, now_ms: u64) -> Result<(), SnowflakeError> {
        if self.epoch_ms > now_ms {
            return Err(SnowflakeError::InvalidLayout {
                field: "epoch",
                reason: format!(
                    "{} ms is in the future (now is {now_ms} ms since the Unix epoch)",
                    self.epoch_ms
                ),
            });
        }
        Ok(())
    }

    /// Bits used by all fields together.
    pub const fn total_bits(&self) -> u32 {
        self.timestamp_bits as u32
            + self.datacenter_bits as u32
            + self.worker_bits as u32
            + self.sequence_bits as u32
    }

    /// Whether every ID of this layout fits an `i64` (the top bit is never set).
    pub const fn fits_i64(&self) -> bool {
        self.total_bits() <= 63
    }

    /// Width of the timestamp field.
    pub const fn timestamp_bits(&self) -> u8 {
        self.timestamp_bits
    }
    /// Width of the datacenter field (0 when the node is a single worker field).
    pub const fn datacenter_bits(&self) -> u8 {
        self.datacenter_bits
    }
    /// Width of the worker field.
    pub const fn worker_bits(&self) -> u8 {
        self.worker_bits
    }
    /// Width of the sequence field.
    pub const fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }
    /// Width of datacenter and worker together.
    pub const fn node_bits(&self) -> u8 {
        self.datacenter_bits + self.worker_bits
    }
    /// The epoch, in milliseconds since the Unix epoch.
    pub const fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }
    /// The time unit, in milliseconds.
    pub const fn time_unit_ms(&self) -> u64 {
        self.unit_ms
    }

    /// The largest sequence number.
    pub const fn max_sequence(&self) -> u64 {
        mask(self.sequence_bits as u32)
    }
    /// The largest datacenter number.
    pub const fn max_datacenter(&self) -> u64 {
        mask(self.datacenter_bits as u32)
    }
    /// The largest worker number.
    pub const fn max_worker(&self) -> u64 {
        mask(self.worker_bits as u32)
    }
    /// The largest node number (datacenter and worker read as one field).
    pub const fn max_node(&self) -> u64 {
        mask(self.node_bits() as u32)
    }
    /// The largest timestamp, in time units since the epoch.
    pub const fn max_timestamp(&self) -> u64 {
        mask(self.timestamp_bits as u32)
    }
    /// The most IDs one generator can issue per second: `2^sequence_bits * 1000 / unit_ms`.
    pub const fn cap_per_second(&self) -> u64 {
        (1u64 << self.sequence_bits) * 1000 / self.unit_ms
    }

    pub(crate) const fn sequence_shift(&self) -> u32 {
        0
    }
    pub(crate) const fn worker_shift(&self) -> u32 {
        self.sequence_bits as u32
    }
    pub(crate) const fn datacenter_shift(&self) -> u32 {
        self.sequence_bits as u32 + self.worker_bits as u32
    }
    pub(crate) const fn timestamp_shift(&self) -> u32 {
        self.sequence_bits as u32 + self.worker_bits as u32 + self.datacenter_bits as u32
    }

    /// Splits a node number into (datacenter, worker): datacenter takes the high bits, worker
    /// the low `worker_bits`, as flake-idgen splits its 10-bit `id`.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidNode`] with field `id` if it does not fit the node bits.
    pub fn split_node(&self, id: u64) -> Result<(u64, u64), SnowflakeError> {
        check_range("id", id, self.max_node())?;
        Ok((id >> self.worker_bits, id & self.max_worker()))
    }

    /// Checks that a datacenter and worker fit this layout.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidNode`] naming `datacenter` or `worker`.
    pub fn check_node(&self, datacenter: u64, worker: u64) -> Result<(), SnowflakeError> {
        check_range("datacenter", datacenter, self.max_datacenter())?;
        check_range("worker", worker, self.max_worker())
    }

    /// Composes an ID from its parts; `timestamp_ms` is Unix milliseconds and is floored to the
    /// layout's time unit.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidNode`] or [`SnowflakeError::InvalidParts`] naming the field that
    /// does not fit.
    pub fn encode(&self, parts: SnowflakeParts) -> Result<u64, SnowflakeError> {
        self.check_node(parts.datacenter, parts.worker)?;
        if parts.timestamp_ms < self.epoch_ms {
            return Err(SnowflakeError::InvalidParts {
                field: "timestamp_ms",
                reason: format!(
                    "{} is before the epoch {}",
                    parts.timestamp_ms, self.epoch_ms
                ),
            });
        }
        let units = (parts.timestamp_ms - self.epoch_ms) / self.unit_ms;
        if units > self.max_timestamp() {
            return Err(SnowflakeError::InvalidParts {
                field: "timestamp_ms",
                reason: format!(
                    "{} is past the layout's last time ({} units of {} ms after the epoch)",
                    parts.timestamp_ms,
                    self.max_timestamp(),
                    self.unit_ms
                ),
            });
        }
        if parts.sequence > self.max_sequence() {
            return Err(SnowflakeError::InvalidParts {
                field: "sequence",
                reason: format!("{} is more than {}", parts.sequence, self.max_sequence()),
            });
        }
        Ok(self.compose(
            units,
            (parts.datacenter << self.worker_bits) | parts.worker,
            parts.sequence,
        ))
    }

    /// Composes an ID from raw fields already known to fit.
    #[inline]
    pub(crate) const fn compose(&self, units: u64, node: u64, sequence: u64) -> u64 {
        (units << self.timestamp_shift()) | (node << self.worker_shift()) | sequence
    }

    /// Reads an ID's parts. Bits above the layout's fields are ignored.
    pub const fn decode(&self, id: u64) -> SnowflakeParts {
        let units = (id >> self.timestamp_shift()) & self.max_timestamp();
        SnowflakeParts {
            timestamp_ms: self.epoch_ms + units * self.unit_ms,
            datacenter: (id >> self.datacenter_shift()) & self.max_datacenter(),
            worker: (id >> self.worker_shift()) & self.max_worker(),
            sequence: (id >> self.sequence_shift()) & self.max_sequence(),
        }
    }

    /// Whether `id` has bits set above the layout's fields (so it cannot come from it).
    pub const fn has_stray_bits(&self, id: u64) -> bool {
        let used = self.total_bits();
        used < 64 && (id >> used) != 0
    }
}

impl Default for Layout {
    fn default() -> Self {
        Self::LEAF
    }
}

impl FromStr for Layout {
    type Err = SnowflakeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::preset(s)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.datacenter_bits == 0 {
            write!(
                f,
                "{}/{}/{}",
                self.timestamp_bits, self.worker_bits, self.sequence_bits
            )?;
        } else {
            write!(
                f,
                "{}/{}/{}/{}",
                self.timestamp_bits, self.datacenter_bits, self.worker_bits, self.sequence_bits
            )?;
        }
        write!(f, " epoch={}ms unit={}ms", self.epoch_ms, self.unit_ms)
    }
}

const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn check_range(field: &'static str, value: u64, max: u64) -> Result<(), SnowflakeError> {
    if value > max {
        return Err(SnowflakeError::InvalidNode { field, value, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_sized() {
        for name in Layout::PRESETS {
            let l = Layout::preset(name).unwrap();
            l.validate().unwrap();
        }
        assert!(Layout::LEAF.fits_i64());
        assert!(Layout::TWITTER.fits_i64());
        assert!(!Layout::FLAKE_IDGEN.fits_i64());
        assert_eq!(Layout::LEAF.max_worker(), 1023);
        assert_eq!(Layout::LEAF.max_datacenter(), 0);
        assert_eq!(Layout::TWITTER.max_node(), 1023);
        assert_eq!(Layout::LEAF.cap_per_second(), 4_096_000);
    }

    #[test]
    fn invalid_layouts_name_the_field() {
        let e = Layout::new(42, 5, 5, 13).unwrap_err();
        assert!(e.to_string().contains("more than 64"), "{e}");
        let e = Layout::new(41, 0, 10, 0).unwrap_err();
        assert!(e.to_string().contains("sequence_bits"), "{e}");
        let e = Layout::new(0, 0, 10, 12).unwrap_err();
        assert!(e.to_string().contains("timestamp_bits"), "{e}");
        let e = Layout::LEAF.with_time_unit_ms(0).validate().unwrap_err();
        assert!(e.to_string().contains("time_unit"), "{e}");
        let e = Layout::LEAF
            .with_epoch_ms(2_000)
            .validate_epoch(1_000)
            .unwrap_err();
        assert!(e.to_string().contains("epoch"), "{e}");
        let e = Layout::preset("sonyflakey").unwrap_err();
        assert!(e.to_string().contains("unknown layout"), "{e}");
        let e = Layout::preset("41/x/12").unwrap_err();
        assert!(e.to_string().contains("bit widths"), "{e}");
    }

    #[test]
    fn custom_widths_parse() {
        let l = Layout::preset("42/5/5/12").unwrap();
        assert_eq!(
            (
                l.timestamp_bits(),
                l.datacenter_bits(),
                l.worker_bits(),
                l.sequence_bits()
            ),
            (42, 5, 5, 12)
        );
        let l = Layout::preset("39/16/8").unwrap();
        assert_eq!(
            (l.datacenter_bits(), l.worker_bits(), l.sequence_bits()),
            (0, 16, 8)
        );
    }

    #[test]
    fn split_node_like_flake_idgen() {
        let l = Layout::FLAKE_IDGEN;
        assert_eq!(l.split_node(100).unwrap(), (3, 4));
        assert_eq!(l.split_node(295).unwrap(), (9, 7));
        assert_eq!(l.split_node(1023).unwrap(), (31, 31));
        let e = l.split_node(1024).unwrap_err();
        assert!(e.to_string().contains("id"), "{e}");
        let e = l.check_node(32, 0).unwrap_err();
        assert!(e.to_string().contains("datacenter"), "{e}");
        let e = Layout::LEAF.check_node(0, 1024).unwrap_err();
        assert!(e.to_string().contains("worker"), "{e}");
    }
}
