//! `floe inspect`: recognise an ID's format from its text and decode it.

use floe_core::lexical::LexicalUuid;
use floe_core::sno::SnoId;
use floe_core::snowflake::Layout;
use floe_core::ulid::Ulid;
use floe_core::uuid7::{self, Uuid};

use crate::describe::Described;

/// The formats `inspect` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Detect from the text.
    Auto,
    /// A decimal 64-bit Snowflake ID (read with --layout and --epoch).
    Snowflake,
    /// A 16-character sno.
    Sno,
    /// A LexicalUUID: 8-4-4-16 hex, or 32 hex digits.
    Lexical,
    /// A UUIDv7.
    Uuid7,
    /// A 26-character ULID.
    Ulid,
}

const EXPECTED: &str = "expected a decimal Snowflake ID, a 16-character sno, an 8-4-4-16 LexicalUUID, a 36-character UUIDv7 or a 26-character ULID";

/// Decodes one ID.
pub fn inspect(text: &str, format: Format, layout: &Layout) -> Result<Described, String> {
    match format {
        // `detect` never answers Auto.
        Format::Auto => inspect(text, detect(text)?, layout),
        Format::Snowflake => snowflake(text, layout),
        Format::Sno => text
            .parse::<SnoId>()
            .map(Described::Sno)
            .map_err(|e| format!("{text:?}: {e}")),
        Format::Lexical => LexicalUuid::parse(text)
            .map(Described::Lexical)
            .map_err(|e| format!("{text:?}: {e}")),
        Format::Uuid7 => {
            let id = Uuid::try_parse(text).map_err(|e| format!("{text:?}: invalid UUID: {e}"))?;
            let parts = uuid7::inspect(&id).map_err(|e| format!("{text:?}: {e}"))?;
            Ok(Described::Uuid7 { id, parts })
        }
        Format::Ulid => Ulid::from_string(text).map(Described::Ulid).map_err(|e| {
            format!("{text:?}: invalid ULID ({e}): expected 26 characters of Crockford base32")
        }),
    }
}

fn detect(text: &str) -> Result<Format, String> {
    let b = text.as_bytes();
    let all_digits = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let dashes_at = |at: &[usize]| {
        b.iter()
            .enumerate()
            .all(|(i, &c)| (c == b'-') == at.contains(&i))
    };
    match b.len() {
        // 16 characters of 2-9 are sno text (sno's zero ID is 2222222222222222); as a
        // Snowflake ID of the usual 22-bit shift it would lie within 28 days of its epoch.
        // --format snowflake reads it as a number.
        16 if b.iter().all(|c| (b'2'..=b'9').contains(c)) => Ok(Format::Sno),
        _ if all_digits => Ok(Format::Snowflake),
        16 => Ok(Format::Sno),
        35 if dashes_at(&[8, 13, 18]) => Ok(Format::Lexical),
        36 if dashes_at(&[8, 13, 18, 23]) => Ok(Format::Uuid7),
        26 => Ok(Format::Ulid),
        32 if b.iter().all(u8::is_ascii_hexdigit) => Err(format!(
            "{text:?} is ambiguous: 32 hex digits are a LexicalUUID or a UUID without dashes; pass --format lexical or --format uuid7"
        )),
        _ => Err(format!("unrecognised ID {text:?}: {EXPECTED}")),
    }
}

fn snowflake(text: &str, layout: &Layout) -> Result<Described, String> {
    let id: u64 = text.parse().map_err(|_| {
        format!(
            "{text:?}: expected a Snowflake ID as a decimal number from 0 to 18446744073709551615"
        )
    })?;
    if layout.has_stray_bits(id) {
        return Err(format!(
            "{text:?}: has bits above the {} bits of layout {layout}; pass the layout it was made with (--layout)",
            layout.total_bits()
        ));
    }
    Ok(Described::snowflake(layout, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        let l = Layout::LEAF;
        assert!(matches!(
            inspect("12345", Format::Auto, &l),
            Ok(Described::Snowflake { .. })
        ));
        assert!(matches!(
            inspect("brpk4q72xwf2m63l", Format::Auto, &l),
            Ok(Described::Sno(_))
        ));
        assert!(matches!(
            inspect("00000000-00ff-9281-ffffffffa0091991", Format::Auto, &l),
            Ok(Described::Lexical(_))
        ));
        assert!(matches!(
            inspect("01ARZ3NDEKTSV4RRFFQ69G5FAV", Format::Auto, &l),
            Ok(Described::Ulid(_))
        ));
        assert!(matches!(
            inspect("2345678923456789", Format::Auto, &l),
            Ok(Described::Sno(_))
        ));
        assert!(matches!(
            inspect("2345678923456789", Format::Snowflake, &l),
            Ok(Described::Snowflake { .. })
        ));
        assert!(matches!(
            inspect("1345678923456789", Format::Auto, &l),
            Ok(Described::Snowflake { .. })
        ));
        let e = inspect("0123456789abcdef0123456789abcdef", Format::Auto, &l).unwrap_err();
        assert!(e.contains("ambiguous"), "{e}");
        let e = inspect("hello", Format::Auto, &l).unwrap_err();
        assert!(e.contains("expected a decimal Snowflake ID"), "{e}");
        let e = inspect("18446744073709551615", Format::Auto, &l).unwrap_err();
        assert!(e.contains("bits above"), "{e}");
        let e = inspect("99999999999999999999", Format::Auto, &l).unwrap_err();
        assert!(e.contains("decimal number"), "{e}");
        let e = inspect("brpk4q72xwF2m63l", Format::Auto, &l).unwrap_err();
        assert!(e.contains("index 10"), "{e}");
    }
}
