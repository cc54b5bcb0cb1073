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

    /// Every kind written by `each`, as a message lists them: `a, b, c, d or e`.
    pub fn listed(each: impl Fn(IdKind) -> String) -> String {
        let all = IdKind::ALL.map(each);
        match all.split_last() {
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
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

/// The text of every kind, as [`IdKind::detect`] tells them apart: what an error says it
/// expected.
pub const EXPECTED_TEXT: &str = "expected a decimal Snowflake ID (or 0x and hex digits), a 16-character sno, an 8-4-4-16 LexicalUUID, a 36-character UUIDv7 or a 26-character ULID";

impl IdKind {
    /// The kind an ID's text is written in, told from its length and alphabet alone (the text
    /// is not checked further: the kind's parser says what is wrong with it).
    ///
    /// - digits: Snowflake, except 16 characters of `2`-`9`, which are sno text (sno's zero
    ///   ID is `2222222222222222`; as a Snowflake ID of the usual 22-bit shift it would lie
    ///   within 28 days of its epoch);
    /// - 26 characters: ULID (Crockford base32 reads `x` as `X`, so a ULID may start `0x`);
    /// - `0x` and more: Snowflake in hex;
    /// - 16 characters: sno; 8-4-4-16 with dashes: LexicalUUID; 8-4-4-4-12: UUID.
    ///
    /// Characters are counted, not bytes: 16 characters with one outside ASCII are a bad sno.
    ///
    /// # Errors
    /// [`Undetected`]: an empty text, 32 hex digits (a LexicalUUID or a UUID without dashes),
    /// or none of the above.
    pub fn detect(text: &str) -> Result<IdKind, Undetected> {
        let b = text.as_bytes();
        if b.is_empty() {
            return Err(Undetected::Empty);
        }
        let hex_prefix = b.len() >= 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X');
        let all_digits = b.iter().all(u8::is_ascii_digit);
        let dashes_at = |at: &[usize]| {
            b.iter()
                .enumerate()
                .all(|(i, &c)| (c == b'-') == at.contains(&i))
        };
        match text.chars().count() {
            16 if b.iter().all(|c| (b'2'..=b'9').contains(c)) => Ok(IdKind::Sno),
            _ if all_digits => Ok(IdKind::Snowflake),
            26 => Ok(IdKind::Ulid),
            _ if hex_prefix => Ok(IdKind::Snowflake),
            16 => Ok(IdKind::Sno),
            35 if dashes_at(&[8, 13, 18]) => Ok(IdKind::Lexical),
            36 if dashes_at(&[8, 13, 18, 23]) => Ok(IdKind::Uuid7),
            32 if b.iter().all(u8::is_ascii_hexdigit) => Err(Undetected::Ambiguous),
            _ => Err(Undetected::Unrecognised),
        }
    }
}

/// Why [`IdKind::detect`] could not tell a text's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undetected {
    /// No text.
    Empty,
    /// 32 hex digits: a LexicalUUID or a UUID without dashes.
    Ambiguous,
    /// The text of no kind.
    Unrecognised,
}

impl fmt::Display for Undetected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undetected::Empty => write!(f, "empty ID: {EXPECTED_TEXT}"),
            Undetected::Ambiguous => {
                f.write_str("ambiguous: 32 hex digits are a LexicalUUID or a UUID without dashes")
            }
            Undetected::Unrecognised => write!(f, "unrecognised ID: {EXPECTED_TEXT}"),
        }
    }
}

impl std::error::Error for Undetected {}

/// A name that is no kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKind {
    /// The name given.
    pub found: String,
}

impl UnknownKind {
    /// `snowflake, sno, lexical, uuid7 or ulid`.
    pub fn expected() -> String {
        IdKind::listed(|k| k.name().to_string())
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

    /// Why a text is not such an ID.
    type ParseError: std::error::Error;

    /// The ID a text writes: [`write_text`](Self::write_text)'s text, and the other texts the
    /// kind's parser takes (hex for Snowflake, upper case, a LexicalUUID without dashes).
    ///
    /// # Errors
    /// The kind's parse error, saying what was expected.
    fn parse_text(text: &str) -> Result<Self, Self::ParseError>
    where
        Self: Sized;
}

/// A Snowflake ID (its layout aside: the text and bytes are the number's).
impl IdText for u64 {
    fn write_text(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }

    type ParseError = crate::snowflake::ParseIdError;

    fn parse_text(text: &str) -> Result<Self, Self::ParseError> {
        crate::snowflake::parse_id(text)
    }
}

impl IdText for crate::sno::SnoId {
    fn write_text(&self, out: &mut String) {
        out.push_str(std::str::from_utf8(&self.encode()).unwrap_or_default());
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }

    type ParseError = crate::sno::SnoParseError;

    fn parse_text(text: &str) -> Result<Self, Self::ParseError> {
        text.parse()
    }
}

impl IdText for crate::lexical::LexicalUuid {
    fn write_text(&self, out: &mut String) {
        out.push_str(std::str::from_utf8(&self.encode()).unwrap_or_default());
    }

    fn to_be_vec(&self) -> Vec<u8> {
        self.to_bytes().to_vec()
    }

    type ParseError = crate::lexical::LexicalParseError;

    fn parse_text(text: &str) -> Result<Self, Self::ParseError> {
        crate::lexical::LexicalUuid::parse(text)
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

    type ParseError = uuid::Error;

    fn parse_text(text: &str) -> Result<Self, Self::ParseError> {
        uuid::Uuid::try_parse(text)
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

    type ParseError = crate::ulid::UlidParseError;

    fn parse_text(text: &str) -> Result<Self, Self::ParseError> {
        crate::ulid::parse(text)
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
