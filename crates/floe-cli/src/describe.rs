//! One ID of any format, read into its parts and printed as text or JSON.

use floe_core::kind::{IdKind, IdText};
use floe_core::lexical::LexicalUuid;
use floe_core::sno::SnoId;
use floe_core::snowflake::{Layout, SnowflakeParts};
use floe_core::ulid::Ulid;
use floe_core::uuid7::{self, Uuid};
use serde_json::{json, Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// An ID and what it decodes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Described {
    /// (Its datacenter, worker and sequence fields are at most 16, 31 and 32 bits: JSON
    /// numbers, exact in JavaScript.)
    Snowflake {
        id: u64,
        parts: SnowflakeParts,
    },
    Sno(SnoId),
    Lexical(LexicalUuid),
    Uuid7 {
        id: Uuid,
        parts: uuid7::Uuid7Parts,
    },
    Ulid(Ulid),
}

/// RFC 3339 in UTC of a time in nanoseconds since the Unix epoch; `None` outside the years
/// 0000 to 9999 (all RFC 3339 can write: `time` refuses the rest, it never wraps or panics).
pub(crate) fn rfc3339(unix_nanos: i128) -> Option<String> {
    OffsetDateTime::from_unix_timestamp_nanos(unix_nanos)
        .ok()?
        .format(&Rfc3339)
        .ok()
}

/// What the text output prints for a time RFC 3339 cannot write (JSON has `null`).
pub(crate) const OUT_OF_RANGE: &str = "(outside RFC 3339's years 0000 to 9999)";

fn time_value(unix_nanos: Option<i128>) -> Value {
    unix_nanos
        .and_then(rfc3339)
        .map_or(Value::Null, Value::String)
}

/// Nanoseconds of `count` units of `nanos_per_unit` ns since the Unix epoch; `None` if that
/// overflows an `i128` (never for a 64-bit count and a unit of at most a millisecond).
fn nanos(count: impl Into<i128>, nanos_per_unit: i128) -> Option<i128> {
    count.into().checked_mul(nanos_per_unit)
}

/// A number that can pass 2^53, as a decimal string (JSON numbers past 2^53 lose precision in
/// JavaScript and many parsers).
fn wide(n: impl std::fmt::Display) -> Value {
    Value::String(n.to_string())
}

impl Described {
    /// A Snowflake ID of a validated layout (whose times all fit: see `Layout::validate`).
    pub(crate) fn snowflake(layout: &Layout, id: u64) -> Self {
        Described::Snowflake {
            id,
            parts: layout.decode(id),
        }
    }

    /// A UUID as floe's generator makes it (version 7). Should another version ever come
    /// through, its parts read as zero rather than panic.
    pub(crate) fn uuid7(id: Uuid) -> Self {
        let parts = uuid7::inspect(&id).unwrap_or(uuid7::Uuid7Parts {
            version: id.get_version_num(),
            timestamp_ms: 0,
            rand: 0,
        });
        Described::Uuid7 { id, parts }
    }

    /// The kind of the ID.
    pub(crate) fn kind(&self) -> IdKind {
        match self {
            Described::Snowflake { .. } => IdKind::Snowflake,
            Described::Sno(_) => IdKind::Sno,
            Described::Lexical(_) => IdKind::Lexical,
            Described::Uuid7 { .. } => IdKind::Uuid7,
            Described::Ulid(_) => IdKind::Ulid,
        }
    }

    /// The ID in its usual text ([`IdText`]).
    pub(crate) fn id_text(&self) -> String {
        let mut out = String::new();
        match self {
            Described::Snowflake { id, .. } => id.write_text(&mut out),
            Described::Sno(id) => id.write_text(&mut out),
            Described::Lexical(id) => id.write_text(&mut out),
            Described::Uuid7 { id, .. } => id.write_text(&mut out),
            Described::Ulid(id) => id.write_text(&mut out),
        }
        out
    }

    /// The fields, in display order. IDs are strings (a Snowflake ID can pass 2^53 and 2^63).
    pub(crate) fn fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), Value::String(self.id_text()));
        m.insert("format".into(), json!(self.kind().name()));
        match self {
            Described::Snowflake { parts, .. } => {
                m.insert(
                    "time".into(),
                    time_value(nanos(parts.timestamp_ms, 1_000_000)),
                );
                m.insert("timestamp_ms".into(), json!(parts.timestamp_ms));
                m.insert("datacenter".into(), json!(parts.datacenter));
                m.insert("worker".into(), json!(parts.worker));
                m.insert("sequence".into(), json!(parts.sequence));
            }
            Described::Sno(id) => {
                m.insert("time".into(), time_value(nanos(id.timestamp_unix_ns(), 1)));
                // Nanoseconds pass 2^53 since 1970-04-15: a string.
                m.insert("timestamp_unix_ns".into(), wide(id.timestamp_unix_ns()));
                m.insert("tick_tock".into(), json!(u8::from(id.tick_tock())));
                m.insert("meta".into(), json!(id.meta()));
                m.insert("partition".into(), json!(id.partition().as_u16()));
                m.insert("sequence".into(), json!(id.sequence()));
                m.insert("bytes_hex".into(), json!(hex(id.as_bytes())));
            }
            Described::Lexical(id) => {
                m.insert("time".into(), time_value(nanos(id.timestamp, 1_000)));
                // Both are any i64 (the worker ID a 64-bit hash): strings.
                m.insert("timestamp".into(), wide(id.timestamp));
                m.insert("worker_id".into(), wide(id.worker_id));
            }
            Described::Uuid7 { parts, .. } => {
                m.insert(
                    "time".into(),
                    time_value(nanos(parts.timestamp_ms, 1_000_000)),
                );
                m.insert("timestamp_ms".into(), json!(parts.timestamp_ms));
                m.insert("rand_hex".into(), json!(format!("{:019x}", parts.rand)));
            }
            Described::Ulid(id) => {
                m.insert(
                    "time".into(),
                    time_value(nanos(id.timestamp_ms(), 1_000_000)),
                );
                m.insert("timestamp_ms".into(), json!(id.timestamp_ms()));
                m.insert("random_hex".into(), json!(format!("{:020x}", id.random())));
            }
        }
        m
    }

    /// One JSON object on one line.
    pub(crate) fn json_line(&self) -> String {
        Value::Object(self.fields()).to_string()
    }

    /// Aligned `key  value` lines.
    pub(crate) fn text_block(&self) -> String {
        let mut out = String::new();
        for (k, v) in self.fields() {
            let v = match v {
                Value::String(s) => s,
                Value::Null => OUT_OF_RANGE.into(),
                other => other.to_string(),
            };
            out.push_str(&format!("{k:<18}{v}\n"));
        }
        out
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_672_531_200_123_000_000).unwrap(),
            "2023-01-01T00:00:00.123Z"
        );
        assert!(rfc3339(i128::from(i64::MAX) * 1000).is_none());
        // The edges RFC 3339 can write, and one nanosecond past each.
        let last = 253_402_300_799_999_999_999;
        assert_eq!(rfc3339(last).unwrap(), "9999-12-31T23:59:59.999999999Z");
        assert!(rfc3339(last + 1).is_none());
        let first = -62_167_219_200_000_000_000;
        assert_eq!(rfc3339(first).unwrap(), "0000-01-01T00:00:00Z");
        assert!(rfc3339(first - 1).is_none());
        assert!(rfc3339(i128::MIN).is_none());
        assert!(rfc3339(i128::MAX).is_none());
    }

    #[test]
    fn far_times_print_as_out_of_range() {
        // A LexicalUUID's timestamp is any i64 of microseconds: most of them are past 9999.
        for t in [i64::MAX, i64::MIN, 253_402_300_800_000_000] {
            let d = Described::Lexical(LexicalUuid::new(t, 1));
            assert_eq!(d.fields()["time"], Value::Null, "{t}");
            assert!(d.text_block().contains(OUT_OF_RANGE), "{t}");
        }
        let d = Described::Lexical(LexicalUuid::new(253_402_300_799_999_999, 1));
        assert_eq!(d.fields()["time"], "9999-12-31T23:59:59.999999Z");
    }
}
