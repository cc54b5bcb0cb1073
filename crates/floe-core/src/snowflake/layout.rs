//! Snowflake bit layouts: where the timestamp, node and sequence sit in a 64-bit ID.

use std::fmt;
use std::str::FromStr;

use super::SnowflakeError;
use crate::endpoint::quoted;

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
/// | `js-safe`     | 1672531200000 (2023-01-01)   | 38 (10 ms)| -          | 7      | 8        | clear   |
///
/// **`js-safe`** IDs use 53 bits, so they stay below 2^53 (`Number.MAX_SAFE_INTEGER` + 1) and a
/// JavaScript number holds every one of them exactly: 38 bits of 10 ms units run 87.1 years
/// from 2023-01-01 (to 2110-02-08), 7 worker bits give 128 workers, and 8 sequence bits give 256
/// IDs per 10 ms, 25,600 IDs a second per worker (3.27 million a second over 128 workers).
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

/// The last millisecond RFC 3339 can write, 9999-12-31T23:59:59.999Z, in milliseconds since the
/// Unix epoch. [`Layout::validate`] refuses a layout whose timestamp field reaches past it, so
/// every ID of a valid layout has a time that fits a `u64` of milliseconds and prints as
/// RFC 3339.
pub const MAX_TIME_MS: u64 = 253_402_300_799_999;

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
    /// `leaf`: the Go Leaf-Snowflake floe was started from: epoch 2023-01-01T00:00:00Z,
    /// 41-bit ms, 10-bit worker, 12-bit sequence. **Not Meituan's Leaf**, whose epoch is
    /// Twitter's: see [`Layout::MEITUAN_LEAF`].
    pub const LEAF: Layout = Layout::unchecked(41, 0, 10, 12, 1_672_531_200_000, 1);
    /// `meituan-leaf`: Meituan Leaf's `SnowflakeIDGenImpl`: Twitter's epoch 1288834974657 ms,
    /// 41-bit ms, one 10-bit worker field, 12-bit sequence. Its IDs are Leaf's, bit for bit, so
    /// a Leaf fleet moved to floe goes on above the IDs it issued.
    pub const MEITUAN_LEAF: Layout = Layout::unchecked(41, 0, 10, 12, 1_288_834_974_657, 1);
    /// Twitter's Snowflake: epoch 1288834974657 ms, 41-bit ms, 5-bit datacenter, 5-bit worker,
    /// 12-bit sequence. The same bits as [`Layout::MEITUAN_LEAF`], its 10 node bits split in two.
    pub const TWITTER: Layout = Layout::unchecked(41, 5, 5, 12, 1_288_834_974_657, 1);
    /// flake-idgen: Unix epoch, 42-bit ms, 5-bit datacenter, 5-bit worker,
    /// 12-bit counter. Use [`Layout::with_epoch_ms`] for its `epoch` option.
    pub const FLAKE_IDGEN: Layout = Layout::unchecked(42, 5, 5, 12, 0, 1);

    /// IDs below 2^53, exact in a JavaScript number: Leaf's epoch (2023-01-01), 38 bits of
    /// 10 ms units (87.1 years, to 2110), 7-bit worker (128), 8-bit sequence (25,600 IDs a
    /// second per worker).
    pub const JS_SAFE: Layout = Layout::unchecked(38, 0, 7, 8, 1_672_531_200_000, 10);

    /// The names accepted by [`Layout::preset`].
    pub const PRESETS: [&'static str; 5] =
        ["leaf", "meituan-leaf", "twitter", "flake-idgen", "js-safe"];

    /// Which system each preset matches, one line each, for help texts and docs.
    pub const PRESET_HELP: &'static str =
        "leaf (the Go Leaf-Snowflake: 41/10/12 on a 2023 epoch), \
meituan-leaf (Meituan Leaf: 41/10/12 on Twitter's epoch 1288834974657), \
twitter (41/5/5/12 on the same epoch: datacenter and worker), \
flake-idgen (42/5/5/12 on the Unix epoch), \
js-safe (38/7/8 of 10 ms: below 2^53 until 2110)";

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

    /// A preset by name (`leaf`, `meituan-leaf`, `twitter`, `flake-idgen`, `js-safe`: see
    /// [`Layout::PRESET_HELP`]), or field widths written
    /// `TS/WORKER/SEQ` or `TS/DC/WORKER/SEQ` (e.g. `41/10/12`, `42/5/5/12`) on the Unix epoch.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] with field `layout` for an unknown name.
    pub fn preset(name: &str) -> Result<Self, SnowflakeError> {
        match name {
            "leaf" => Ok(Self::LEAF),
            "meituan-leaf" | "meituan_leaf" => Ok(Self::MEITUAN_LEAF),
            "twitter" => Ok(Self::TWITTER),
            "flake-idgen" | "flake_idgen" | "flake" => Ok(Self::FLAKE_IDGEN),
            "js-safe" | "js_safe" => Ok(Self::JS_SAFE),
            custom if custom.contains('/') => {
                let bad = || SnowflakeError::InvalidLayout {
                    field: "layout",
                    reason: format!(
                        "expected TS/WORKER/SEQ or TS/DC/WORKER/SEQ bit widths, found {}",
                        quoted(custom)
                    ),
                };
                // Digits only (`u8::from_str` would also take a sign: `+41`).
                let width = |w: &str| {
                    let w = w.trim();
                    if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(bad());
                    }
                    w.parse::<u8>().map_err(|_| bad())
                };
                let widths: Vec<u8> = custom.split('/').map(width).collect::<Result<_, _>>()?;
                match widths[..] {
                    [ts, worker, seq] => Self::new(ts, 0, worker, seq),
                    [ts, dc, worker, seq] => Self::new(ts, dc, worker, seq),
                    _ => Err(bad()),
                }
            }
            other => Err(SnowflakeError::InvalidLayout {
                field: "layout",
                reason: format!(
                    "unknown layout {}: expected leaf, meituan-leaf, twitter, flake-idgen, js-safe or bit widths such as 41/10/12",
                    quoted(other)
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

    /// Checks the field widths, the time unit and the epoch, and that the last time the
    /// timestamp field can hold (`epoch + max_timestamp * time_unit`) is at most
    /// [`MAX_TIME_MS`] (9999-12-31T23:59:59.999Z): so no ID of a valid layout has a time that
    /// overflows a `u64` of milliseconds or that RFC 3339 cannot write.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] naming the field at fault (`layout` when the fields
    /// are each fine but their last time is out of range).
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
        if self.epoch_ms > MAX_TIME_MS {
            return invalid(
                "epoch",
                format!(
                    "{} ms is past 9999-12-31T23:59:59.999Z ({MAX_TIME_MS} ms), the last time RFC 3339 can write",
                    self.epoch_ms
                ),
            );
        }
        match self.last_time_ms() {
            Some(last) if last <= MAX_TIME_MS => Ok(()),
            _ => {
                // Exact in u128 (at most 2^64 + 2^64 * 2^27), for the message only.
                let last = u128::from(self.epoch_ms)
                    + u128::from(self.max_timestamp()) * u128::from(self.unit_ms);
                invalid(
                    "layout",
                    format!(
                        "{} timestamp_bits of {} ms time units from epoch {} ms reach {last} ms, past 9999-12-31T23:59:59.999Z ({MAX_TIME_MS} ms), the last time RFC 3339 can write: use fewer timestamp_bits, a shorter time unit or an earlier epoch",
                        self.timestamp_bits, self.unit_ms, self.epoch_ms
                    ),
                )
            }
        }
    }

    /// The time of the last time unit the timestamp field can hold,
    /// `epoch + max_timestamp * time_unit` in Unix milliseconds; `None` if that overflows a
    /// `u64`. At most [`MAX_TIME_MS`] for a layout that passes [`Layout::validate`].
    pub const fn last_time_ms(&self) -> Option<u64> {
        match self.max_timestamp().checked_mul(self.unit_ms) {
            Some(span) => self.epoch_ms.checked_add(span),
            None => None,
        }
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

    /// Checks that the layout can issue IDs at `now_ms`: its epoch is not in the future
    /// ([`validate_epoch`](Self::validate_epoch)) and its timestamp field has not run out.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidLayout`] with field `epoch` or `timestamp_bits`.
    pub fn validate_now(&self, now_ms: u64) -> Result<(), SnowflakeError> {
        self.validate_epoch(now_ms)?;
        match self.last_time_ms() {
            Some(last) if last < now_ms => Err(SnowflakeError::InvalidLayout {
                field: "timestamp_bits",
                reason: format!(
                    "the timestamp field ran out at {last} ms (Unix), before now ({now_ms} ms): choose a later epoch or more timestamp bits"
                ),
            }),
            _ => Ok(()),
        }
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

    /// The smallest ID any node can issue at `time_ms` (the time field alone; 0 before the
    /// epoch or past the field's end): what a template's width must hold from then on.
    pub fn smallest_id_at(&self, time_ms: u64) -> u64 {
        self.encode(SnowflakeParts {
            timestamp_ms: time_ms,
            datacenter: 0,
            worker: 0,
            sequence: 0,
        })
        .unwrap_or(0)
    }

    /// Whether every ID of this layout is below 2^53, so a JavaScript number (an IEEE double)
    /// holds it exactly.
    pub const fn fits_js(&self) -> bool {
        self.total_bits() <= 53
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
        // At most 16 + 31: every Layout's widths are checked when it is made.
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
    /// The most IDs one generator can issue per second: `2^sequence_bits * 1000 / unit_ms`
    /// (0 for a time unit of 0, which [`Layout::validate`] refuses).
    pub const fn cap_per_second(&self) -> u64 {
        // sequence_bits is at most 32 in every Layout (the widths are checked when one is
        // made), so 2^32 * 1000 fits; checked all the same.
        match 1u64.checked_shl(self.sequence_bits as u32) {
            Some(ids) => match ids.checked_mul(1000) {
                Some(per_s) => match per_s.checked_div(self.unit_ms) {
                    Some(cap) => cap,
                    None => 0,
                },
                None => u64::MAX,
            },
            None => u64::MAX,
        }
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
    /// [`SnowflakeError::InvalidLayout`] if the layout does not pass [`Layout::validate`];
    /// [`SnowflakeError::InvalidNode`] or [`SnowflakeError::InvalidParts`] naming the field that
    /// does not fit.
    pub fn encode(&self, parts: SnowflakeParts) -> Result<u64, SnowflakeError> {
        self.validate()?;
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
        // timestamp_ms >= epoch_ms (checked above) and unit_ms >= 1 (validated).
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
    ///
    /// On a layout that passes [`Layout::validate`] every time fits. On one that does not (an
    /// epoch or time unit set with [`Layout::with_epoch_ms`] or [`Layout::with_time_unit_ms`]
    /// and not validated), a time past `u64::MAX` ms reads as `u64::MAX` rather than wrap:
    /// use [`Layout::try_decode`] to be told instead.
    pub const fn decode(&self, id: u64) -> SnowflakeParts {
        let units = self.units_of(id);
        SnowflakeParts {
            timestamp_ms: match self.time_of(units) {
                Some(ms) => ms,
                None => u64::MAX,
            },
            datacenter: (id >> self.datacenter_shift()) & self.max_datacenter(),
            worker: (id >> self.worker_shift()) & self.max_worker(),
            sequence: (id >> self.sequence_shift()) & self.max_sequence(),
        }
    }

    /// Reads an ID's parts, as [`Layout::decode`], refusing an ID whose time does not fit.
    ///
    /// # Errors
    /// [`SnowflakeError::InvalidParts`] with field `timestamp_ms` when `epoch + units *
    /// time_unit` overflows a `u64` of milliseconds (never on a layout that passes
    /// [`Layout::validate`]).
    pub fn try_decode(&self, id: u64) -> Result<SnowflakeParts, SnowflakeError> {
        let units = self.units_of(id);
        if self.time_of(units).is_none() {
            return Err(SnowflakeError::InvalidParts {
                field: "timestamp_ms",
                reason: format!(
                    "the ID's time, epoch {} ms + {units} time units of {} ms, does not fit 64 bits of milliseconds",
                    self.epoch_ms, self.unit_ms
                ),
            });
        }
        Ok(self.decode(id))
    }

    /// The timestamp field of an ID, in time units since the epoch.
    const fn units_of(&self, id: u64) -> u64 {
        (id >> self.timestamp_shift()) & self.max_timestamp()
    }

    /// Unix milliseconds of `units` time units after the epoch; `None` past `u64::MAX`.
    const fn time_of(&self, units: u64) -> Option<u64> {
        match units.checked_mul(self.unit_ms) {
            Some(span) => self.epoch_ms.checked_add(span),
            None => None,
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

    /// The figures `js-safe`'s docs give: 53 bits, 87 years from 2023 (to 2110), 128 workers,
    /// 256 IDs per 10 ms; the largest ID it can ever make is below 2^53.
    #[test]
    fn js_safe_stays_below_2_pow_53_until_2110() {
        let l = Layout::preset("js-safe").unwrap();
        assert_eq!(l, Layout::JS_SAFE);
        l.validate().unwrap();
        assert!(l.fits_js() && l.fits_i64());
        assert!(!Layout::LEAF.fits_js());
        assert_eq!(l.total_bits(), 53);
        assert_eq!(l.max_worker() + 1, 128);
        assert_eq!((l.max_sequence() + 1) * 1000 / l.time_unit_ms(), 25_600);
        let last = l.last_time_ms().unwrap();
        let years = (last - l.epoch_ms()) as f64 / (365.25 * 86_400_000.0);
        assert!((87.0..87.2).contains(&years), "{years}");
        // 2110-02-08 is day 51,172 of the Unix epoch (1970-01-01 is day 0).
        assert_eq!(last / 86_400_000, 51_172);
        let biggest = l
            .encode(SnowflakeParts {
                timestamp_ms: last,
                datacenter: 0,
                worker: l.max_worker(),
                sequence: l.max_sequence(),
            })
            .unwrap();
        assert!(biggest < 1 << 53, "{biggest}");
    }

    #[test]
    fn validate_now_refuses_a_future_epoch_and_a_timestamp_field_run_out() {
        let now = 1_800_000_000_000;
        Layout::LEAF.validate_now(now).unwrap();
        let future = Layout::LEAF.with_epoch_ms(now + 1);
        assert!(matches!(
            future.validate_now(now),
            Err(SnowflakeError::InvalidLayout { field: "epoch", .. })
        ));
        // 22 bits of milliseconds from 1970 ran out in 1970.
        let short = Layout::preset("22/10/12").unwrap().with_epoch_ms(0);
        let e = short.validate_now(now).unwrap_err();
        assert!(e.to_string().contains("ran out"), "{e}");
        let last = short.last_time_ms().unwrap();
        short.validate_now(last).unwrap();
        assert!(short.validate_now(last + 1).is_err());
    }

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
        for name in Layout::PRESETS {
            assert!(Layout::PRESET_HELP.contains(&format!("{name} (")), "{name}");
        }
    }

    /// Meituan Leaf's own IDs read back as Leaf wrote them: `((ms - 1288834974657) << 22) |
    /// (worker << 12) | sequence`; `twitter` splits the same 10 node bits in two.
    #[test]
    fn meituan_leaf_is_leafs_own_layout() {
        let l = Layout::preset("meituan-leaf").unwrap();
        assert_eq!(l, Layout::MEITUAN_LEAF);
        let ms = 1_795_604_294_672u64;
        let id = ((ms - 1_288_834_974_657) << 22) | (5 << 12) | 7;
        assert_eq!(id, 2_125_544_586_016_215_047);
        let p = l.decode(id);
        assert_eq!(
            (p.timestamp_ms, p.datacenter, p.worker, p.sequence),
            (ms, 0, 5, 7)
        );
        let t = Layout::TWITTER.decode(id);
        assert_eq!((t.timestamp_ms, t.datacenter, t.worker), (ms, 0, 5));
        let far = ((ms - 1_288_834_974_657) << 22) | (1000 << 12);
        assert_eq!(l.decode(far).worker, 1000);
        assert_eq!(Layout::TWITTER.decode(far).datacenter, 31);
        // The Go Leaf's 2023 epoch reads Leaf's ID as a date 12 years on.
        assert!(Layout::LEAF.decode(id).timestamp_ms > ms + 11 * 365 * 86_400_000);
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
    fn the_last_time_must_fit_rfc3339() {
        // Issue 8: a day-long time unit on leaf's 41 bits reaches past u64 milliseconds.
        let day = 86_400_000;
        let e = Layout::LEAF.with_time_unit_ms(day).validate().unwrap_err();
        assert!(
            matches!(
                e,
                SnowflakeError::InvalidLayout {
                    field: "layout",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("9999-12-31T23:59:59.999Z"), "{e}");
        // 21 bits of days end exactly on the last RFC 3339 millisecond from this epoch...
        let l = Layout::new(21, 0, 10, 12).unwrap().with_time_unit_ms(day);
        let epoch = MAX_TIME_MS - l.max_timestamp() * day;
        l.with_epoch_ms(epoch).validate().unwrap();
        assert_eq!(l.with_epoch_ms(epoch).last_time_ms(), Some(MAX_TIME_MS));
        let last = l.max_timestamp() << l.timestamp_shift();
        assert_eq!(
            l.with_epoch_ms(epoch).decode(last).timestamp_ms,
            MAX_TIME_MS
        );
        // ...and one millisecond later they do not.
        let e = l.with_epoch_ms(epoch + 1).validate().unwrap_err();
        assert!(e.to_string().contains("timestamp_bits"), "{e}");
        // An epoch past the range names the epoch.
        let e = Layout::LEAF
            .with_epoch_ms(MAX_TIME_MS + 1)
            .validate()
            .unwrap_err();
        assert!(
            matches!(e, SnowflakeError::InvalidLayout { field: "epoch", .. }),
            "{e}"
        );
        let e = Layout::LEAF.with_epoch_ms(u64::MAX).validate().unwrap_err();
        assert!(e.to_string().starts_with("invalid epoch"), "{e}");
        // Bit widths alone: 47 bits of ms from 1970 end in 6429, 48 bits in 10889.
        Layout::new(47, 0, 5, 12).unwrap();
        let e = Layout::new(48, 0, 4, 12).unwrap_err();
        assert!(e.to_string().contains("48 timestamp_bits"), "{e}");
    }

    #[test]
    fn decode_of_an_unvalidated_layout_never_wraps() {
        let l = Layout::LEAF.with_time_unit_ms(86_400_000);
        let id = i64::MAX as u64;
        let e = l.try_decode(id).unwrap_err();
        assert!(
            matches!(
                e,
                SnowflakeError::InvalidParts {
                    field: "timestamp_ms",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(l.decode(id).timestamp_ms, u64::MAX);
        assert_eq!(l.decode(id).sequence, 4095);
        let l = Layout::LEAF.with_epoch_ms(u64::MAX);
        assert!(l.try_decode(1 << 22).is_err());
        assert_eq!(l.try_decode(0).unwrap().timestamp_ms, u64::MAX);
        // encode refuses a layout that does not validate (here: a time unit of 0, which
        // would divide by zero).
        let parts = SnowflakeParts {
            timestamp_ms: 5,
            datacenter: 0,
            worker: 0,
            sequence: 0,
        };
        let e = Layout::new(41, 0, 10, 12)
            .unwrap()
            .with_time_unit_ms(0)
            .encode(parts)
            .unwrap_err();
        assert!(e.to_string().contains("time_unit"), "{e}");
        assert_eq!(Layout::LEAF.with_time_unit_ms(0).cap_per_second(), 0);
        assert_eq!(
            Layout::new(31, 0, 0, 32).unwrap().cap_per_second(),
            1000 << 32
        );
    }

    #[test]
    fn widths_are_digits_only() {
        for bad in [
            "+41/10/12",
            "41/-0/12",
            "41//12",
            "41/10/12/",
            " / / ",
            "41/10/12/1/1",
        ] {
            let e = Layout::preset(bad).unwrap_err();
            assert!(e.to_string().contains("bit widths"), "{bad}: {e}");
        }
        assert_eq!(
            Layout::preset(" 41 / 10 / 12 ").unwrap(),
            Layout::new(41, 0, 10, 12).unwrap()
        );
        let e = Layout::preset("256/0/1").unwrap_err();
        assert!(e.to_string().contains("bit widths"), "{e}");
    }

    #[test]
    fn long_names_are_quoted_short() {
        let e = Layout::preset(&"x".repeat(100_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300 && e.contains("(100000 bytes)"), "{e}");
        let e = Layout::preset(&"1/".repeat(50_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300 && e.contains("(100000 bytes)"), "{e}");
        let e = Layout::preset("a\nb").unwrap_err().to_string();
        assert!(e.contains(r#""a\nb""#), "{e}");
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
