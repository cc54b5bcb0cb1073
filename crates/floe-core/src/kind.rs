//! The kinds of ID floe makes, declared once ([`IdKind`]: name, every kind, parse), and the one
//! small trait each kind's ID type implements for its text and bytes ([`IdText`]). The server's
//! answers, the CLI's output and its `--kind` read them from here.

use std::fmt;
use std::str::FromStr;

/// A kind of ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdKind {
    /// 64-bit Snowflake: a timestamp, a worker ID and a sequence, in a layout's widths.
    Snowflake,
    /// 10-byte sno: 16 characters of base32.
    Sno,
    /// 128-bit Cassie LexicalUUID.
    Lexical,
    /// UUID version 7.
    Uuid7,
    /// ULID: 26 characters of Crockford base32.
    Ulid,
}

impl IdKind {
    /// Every kind, in the order of the docs.
    pub const ALL: [IdKind; 5] = [
        IdKind::Snowflake,
        IdKind::Sno,
        IdKind::Lexical,
        IdKind::Uuid7,
        IdKind::Ulid,
    ];

    /// The kind's name (in routes, flags, configuration): `snowflake`, `sno`, `lexical`,
    /// `uuid7`, `ulid`.
    pub const fn name(self) -> &'static str {
        match self {
            IdKind::Snowflake => "snowflake",
            IdKind::Sno => "sno",
            IdKind::Lexical => "lexical",
            IdKind::Uuid7 => "uuid7",
            IdKind::Ulid => "ulid",
        }
    }

    /// One line on the kind, for help texts.
    pub const fn summary(self) -> &'static str {
        match self {
            IdKind::Snowflake => {
                "64-bit Snowflake (layouts: leaf, twitter, flake-idgen, js-safe, or bit widths)"
            }
            IdKind::Sno => "10-byte sno, 16 characters of base32",
            IdKind::Lexical => "128-bit Cassie LexicalUUID",
            IdKind::Uuid7 => "UUID version 7",
            IdKind::Ulid => "ULID",
        }
    }

    /// The kind a name names.
    ///
    /// # Errors
    /// [`UnknownKind`], listing the kinds.
    pub fn parse(name: &str) -> Result<IdKind, UnknownKind> {
        IdKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| UnknownKind {
                found: name.to_string(),
            })
    }
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IdKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdKind::parse(s)
    }
}

/// A name that is no kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKind {
    /// The name given.
    pub found: String,
}

impl UnknownKind {
    /// `snowflake, sno, lexical, uuid7 or ulid`.
    pub fn expected() -> String {
        let names: Vec<&str> = IdKind::ALL.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected {}, found {:?}",
            UnknownKind::expected(),
            self.found
        )
    }
}

impl std::error::Error for UnknownKind {}

/// An ID of a kind, as text and as bytes: what every kind's ID type gives the server's answers
/// and the CLI's output.
pub trait IdText {
    /// Appends its usual text (decimal for Snowflake; base32 or hex for the others: ASCII, no
    /// character JSON would escape).
    fn write_text(&self, out: &mut String);

    /// Its big-endian bytes.
    fn to_be_vec(&self) -> Vec<u8>;
}

/// A Snowflake ID (its layout aside: the text and bytes are the number's).
impl IdText for u64 {
    fn write_text(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
}

impl IdText for crate::sno::SnoId {
    fn write_text(&self, out: &mut String) {
        out.push_str(std::str::from_utf8(&self.encode()).unwrap_or_default());
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }
}

impl IdText for crate::lexical::LexicalUuid {
    fn write_text(&self, out: &mut String) {
        out.push_str(std::str::from_utf8(&self.encode()).unwrap_or_default());
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }
}

#[cfg(feature = "uuid")]
impl IdText for uuid::Uuid {
    fn write_text(&self, out: &mut String) {
        out.push_str(
            self.as_hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        );
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
}

#[cfg(feature = "ulid")]
impl IdText for ulid::Ulid {
    fn write_text(&self, out: &mut String) {
        out.push_str(self.array_to_str(&mut [0u8; 26]));
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_back_from_its_name() {
        for kind in IdKind::ALL {
            assert_eq!(IdKind::parse(kind.name()), Ok(kind));
            assert_eq!(kind.to_string().parse::<IdKind>(), Ok(kind));
        }
        let e = IdKind::parse("guid").unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected snowflake, sno, lexical, uuid7 or ulid, found \"guid\""
        );
    }

    #[test]
    fn snowflake_text_is_the_decimal_number() {
        for n in [0u64, 7, 10, 1_234_567_890_123, u64::MAX] {
            let mut text = String::new();
            n.write_text(&mut text);
            assert_eq!(text, n.to_string());
            assert_eq!(n.to_be_vec(), n.to_be_bytes());
        }
    }
}
