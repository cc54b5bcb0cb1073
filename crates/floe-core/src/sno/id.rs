//! The sno ID: 10 bytes, 16 characters of base32.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    SnoParseError, EPOCH_NANOS, MAX_TIMESTAMP, SIZE_BINARY, SIZE_ENCODED, TIME_UNIT_NANOS,
};

/// The encoding alphabet: two contiguous ASCII ranges, `2`-`9` and `a`-`x`.
pub const ALPHABET: &[u8; 32] = b"23456789abcdefghijklmnopqrstuvwx";

const INVALID: u8 = 0xFF;

/// Character → 5-bit value, `INVALID` for every byte outside the alphabet.
static DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 32 {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// A sno ID: 80 bits, big-endian, in two 40-bit blocks.
///
/// ```text
/// byte  0        1        2        3        4        5        6        7        8        9
///      +--------+--------+--------+--------+-------+-+--------+-----------------+-----------------+
///      | timestamp: 39 bits, 4 ms units since 2010  |T| meta   | partition       | sequence        |
///      +--------+--------+--------+--------+-------+-+--------+-----------------+-----------------+
///                                           T = tick-tock bit
/// ```
///
/// **Ordering:** `Ord` compares the bytes; the text encoding preserves that order, so sorting
/// IDs, their bytes or their text gives the same order.
///
/// **Text:** 16 characters of the alphabet `23456789abcdefghijklmnopqrstuvwx` (the 80 bits as
/// 16 groups of 5, most significant first). Parsing is strict: exactly 16 characters, all of
/// them in `[2-9a-x]`; anything else is an error saying what and where (sno's Go decoder
/// accepts some invalid characters and decodes them to garbage).
///
/// **serde:** text in human-readable formats (JSON), 10 bytes in binary ones. As in Go sno,
/// the zero ID serialises to JSON `null` and `null` reads back as the zero ID.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnoId([u8; SIZE_BINARY]);

/// The 2-byte partition of a sno generator (and of each ID it issues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Partition(pub [u8; 2]);

impl Partition {
    /// The partition as a big-endian `u16`.
    pub const fn as_u16(self) -> u16 {
        u16::from_be_bytes(self.0)
    }
    /// The partition of a big-endian `u16`.
    pub const fn from_u16(value: u16) -> Self {
        Partition(value.to_be_bytes())
    }
}

impl From<u16> for Partition {
    fn from(value: u16) -> Self {
        Partition::from_u16(value)
    }
}

impl SnoId {
    /// The zero ID (10 zero bytes).
    pub const ZERO: SnoId = SnoId([0; SIZE_BINARY]);

    /// Composes an ID from its components. `units` is the timestamp in 4 ms units since
    /// 2010-01-01 and is masked to 39 bits.
    pub const fn from_parts(
        units: u64,
        tick_tock: bool,
        meta: u8,
        partition: Partition,
        sequence: u16,
    ) -> Self {
        let hi = ((units & MAX_TIMESTAMP) << 1) | tick_tock as u64;
        let b = hi.to_be_bytes(); // bytes 3..8 hold the 40-bit block
        let s = sequence.to_be_bytes();
        SnoId([
            b[3],
            b[4],
            b[5],
            b[6],
            b[7],
            meta,
            partition.0[0],
            partition.0[1],
            s[0],
            s[1],
        ])
    }

    /// The ID of these 10 bytes.
    pub const fn from_bytes(bytes: [u8; SIZE_BINARY]) -> Self {
        SnoId(bytes)
    }

    /// The ID of a byte slice, which must be exactly 10 bytes long.
    ///
    /// # Errors
    /// [`SnoParseError::InvalidLength`] for any other length.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, SnoParseError> {
        match <[u8; SIZE_BINARY]>::try_from(bytes) {
            Ok(b) => Ok(SnoId(b)),
            Err(_) => Err(SnoParseError::InvalidLength {
                expected: SIZE_BINARY,
                found: bytes.len(),
            }),
        }
    }

    /// The 10 bytes.
    pub const fn to_bytes(self) -> [u8; SIZE_BINARY] {
        self.0
    }

    /// The 10 bytes, borrowed.
    pub const fn as_bytes(&self) -> &[u8; SIZE_BINARY] {
        &self.0
    }

    /// Whether this is the zero ID.
    pub const fn is_zero(&self) -> bool {
        u128::from_be_bytes(self.widen()) == 0
    }

    const fn widen(&self) -> [u8; 16] {
        let b = self.0;
        [
            0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
        ]
    }

    /// The first 40-bit block (timestamp and tick-tock bit).
    const fn block_hi(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, 0, b[0], b[1], b[2], b[3], b[4]])
    }

    /// The second 40-bit block (meta, partition, sequence).
    const fn block_lo(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, 0, b[5], b[6], b[7], b[8], b[9]])
    }

    /// The timestamp in 4 ms units since 2010-01-01T00:00:00Z (39 bits).
    pub const fn timestamp_units(&self) -> u64 {
        self.block_hi() >> 1
    }

    /// The timestamp as nanoseconds since the Unix epoch (sno's `Timestamp()`). Never
    /// overflows: the last one, in 2079, is about 3.5 * 10^18 (checked when compiling).
    pub const fn timestamp_unix_ns(&self) -> u64 {
        self.timestamp_units() * TIME_UNIT_NANOS + EPOCH_NANOS
    }

    /// The timestamp as a wall time (sno's `Time()`), at 4 ms resolution.
    pub fn time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.timestamp_unix_ns())
    }

    /// The tick-tock bit: set on IDs issued after an odd number of clock regressions.
    pub const fn tick_tock(&self) -> bool {
        self.0[4] & 1 == 1
    }

    /// The metabyte.
    pub const fn meta(&self) -> u8 {
        self.0[5]
    }

    /// The partition.
    pub const fn partition(&self) -> Partition {
        Partition([self.0[6], self.0[7]])
    }

    /// The sequence.
    pub const fn sequence(&self) -> u16 {
        u16::from_be_bytes([self.0[8], self.0[9]])
    }

    /// The 16-character text, as ASCII bytes.
    #[inline]
    pub fn encode(&self) -> [u8; SIZE_ENCODED] {
        let mut out = [0u8; SIZE_ENCODED];
        encode_block(self.block_hi(), &mut out[..8]);
        encode_block(self.block_lo(), &mut out[8..]);
        out
    }

    /// Parses the 16-character text (ASCII bytes).
    ///
    /// # Errors
    /// [`SnoParseError::InvalidLength`] or [`SnoParseError::InvalidChar`] (the first character
    /// outside `[2-9a-x]` and its index).
    #[inline]
    pub fn decode(text: &[u8]) -> Result<Self, SnoParseError> {
        let Ok(text) = <&[u8; SIZE_ENCODED]>::try_from(text) else {
            return Err(SnoParseError::InvalidLength {
                expected: SIZE_ENCODED,
                found: text.len(),
            });
        };
        let Some(bits) = decode_bits(text) else {
            return Err(invalid_char(text));
        };
        let b = bits.to_be_bytes();
        Ok(SnoId([
            b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
        ]))
    }
}

// timestamp_units() is at most MAX_TIMESTAMP (39 bits of a 40-bit block), so
// timestamp_unix_ns() cannot overflow: proved here when compiling.
const _: () = assert!(MAX_TIMESTAMP <= (u64::MAX - EPOCH_NANOS) / TIME_UNIT_NANOS);

#[inline(always)]
fn encode_block(block: u64, out: &mut [u8]) {
    for (i, c) in out.iter_mut().enumerate() {
        *c = ALPHABET[((block >> (35 - 5 * i)) & 31) as usize];
    }
}

/// Decodes the 16 characters into the 80 bits; `None` if any is outside the alphabet.
///
/// The alphabet is two ASCII ranges, `2`-`9` (values 0-7) and `a`-`x` (values 8-31). The
/// per-character loop has no branches and no table, so the compiler turns it into 16-byte
/// vector operations; the 5-bit values are then folded together in three steps (bytes ->
/// 10-bit pairs -> 20-bit quads -> 40-bit halves) instead of sixteen serial shifts.
#[inline(always)]
fn decode_bits(text: &[u8; SIZE_ENCODED]) -> Option<u128> {
    let mut values = [0u8; SIZE_ENCODED];
    let mut bad = 0u8;
    for (v, &c) in values.iter_mut().zip(text) {
        let digit = c.wrapping_sub(b'2');
        let letter = c.wrapping_sub(b'a');
        let is_digit = digit < 8;
        let is_letter = letter < 24;
        *v = if is_digit {
            digit
        } else {
            letter.wrapping_add(8)
        };
        bad |= u8::from(!(is_digit | is_letter));
    }
    if bad != 0 {
        return None;
    }
    // Fold neighbours within the one 128-bit word: 16 values of 5 bits -> 8 of 10 -> 4 of 20
    // -> 2 of 40. (Folding the two 64-bit halves separately, or folding arrays, measured 3x
    // slower here: the compiler stops vectorising the loop above.)
    let x = u128::from_be_bytes(values);
    let pairs = ((x & (0x1f00 * LANES16)) >> 3) | (x & (0x001f * LANES16));
    let quads = ((pairs & (0x03ff_0000 * LANES32)) >> 6) | (pairs & (0x0000_03ff * LANES32));
    let halves =
        ((quads & (0x000f_ffff_0000_0000 * LANES64)) >> 12) | (quads & (0x000f_ffff * LANES64));
    Some(((halves >> 64) << 40) | (halves & 0xff_ffff_ffff))
}

const LANES16: u128 = 0x0001_0001_0001_0001_0001_0001_0001_0001;
const LANES32: u128 = 0x0000_0001_0000_0001_0000_0001_0000_0001;
const LANES64: u128 = 0x0000_0000_0000_0001_0000_0000_0000_0001;

#[cold]
fn invalid_char(text: &[u8; SIZE_ENCODED]) -> SnoParseError {
    let index = text
        .iter()
        .position(|&c| DECODE[c as usize] == INVALID)
        .unwrap_or(0);
    let byte = text[index];
    SnoParseError::InvalidChar {
        found: if byte.is_ascii() {
            byte as char
        } else {
            char::REPLACEMENT_CHARACTER
        },
        index,
    }
}

impl fmt::Display for SnoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.encode();
        // The alphabet is ASCII, so this never fails.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for SnoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SnoId({self})")
    }
}

impl FromStr for SnoId {
    type Err = SnoParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match SnoId::decode(s.as_bytes()) {
            Ok(id) => Ok(id),
            // 16 characters but more bytes: some are not ASCII, so not of the alphabet. Say
            // which (the length is right, "found 16" would mislead).
            Err(SnoParseError::InvalidLength { .. }) if s.chars().count() == SIZE_ENCODED => {
                let (index, found) = s
                    .char_indices()
                    .find(|&(_, c)| !matches!(c, '2'..='9' | 'a'..='x'))
                    .unwrap_or((0, char::REPLACEMENT_CHARACTER));
                Err(SnoParseError::InvalidChar { found, index })
            }
            Err(e) => Err(e.with_text(s)),
        }
    }
}

impl From<SnoId> for [u8; SIZE_BINARY] {
    fn from(id: SnoId) -> Self {
        id.0
    }
}

impl From<[u8; SIZE_BINARY]> for SnoId {
    fn from(bytes: [u8; SIZE_BINARY]) -> Self {
        SnoId(bytes)
    }
}

impl AsRef<[u8]> for SnoId {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(feature = "serde")]
mod serde_impl {
    use super::*;
    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    impl Serialize for SnoId {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if !s.is_human_readable() {
                return s.serialize_bytes(&self.0);
            }
            if self.is_zero() {
                return s.serialize_none();
            }
            let text = self.encode();
            s.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
        }
    }

    struct SnoVisitor;

    impl<'de> Visitor<'de> for SnoVisitor {
        type Value = SnoId;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sno ID: 16 characters of [2-9a-x], 10 bytes, or null")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<SnoId, E> {
            v.parse().map_err(E::custom)
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<SnoId, E> {
            SnoId::from_slice(v).map_err(E::custom)
        }
        fn visit_none<E: de::Error>(self) -> Result<SnoId, E> {
            Ok(SnoId::ZERO)
        }
        fn visit_unit<E: de::Error>(self) -> Result<SnoId, E> {
            Ok(SnoId::ZERO)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<SnoId, D::Error> {
            d.deserialize_any(SnoVisitor)
        }
    }

    impl<'de> Deserialize<'de> for SnoId {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SnoId, D::Error> {
            if d.is_human_readable() {
                d.deserialize_any(SnoVisitor)
            } else {
                d.deserialize_bytes(SnoVisitor)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sno_suite_encdec_table() {
        let cases: [(&str, [u8; 10]); 3] = [
            ("2222222222222222", [0; 10]),
            (
                "brpk4q72xwf2m63l",
                [78, 111, 33, 96, 160, 255, 154, 10, 16, 51],
            ),
            ("xxxxxxxxxxxxxxxx", [255; 10]),
        ];
        for (text, bytes) in cases {
            let id = SnoId::from_bytes(bytes);
            assert_eq!(id.to_string(), text);
            assert_eq!(text.parse::<SnoId>().unwrap(), id);
        }
    }

    #[test]
    fn strict_parse_says_what_and_where() {
        let e = "brpk4q72xwf2m63".parse::<SnoId>().unwrap_err();
        assert_eq!(
            e,
            SnoParseError::InvalidLength {
                expected: 16,
                found: 15
            }
        );
        let e = "brpk4q72xwF2m63l".parse::<SnoId>().unwrap_err();
        assert_eq!(
            e,
            SnoParseError::InvalidChar {
                found: 'F',
                index: 10
            }
        );
        assert!(e.to_string().contains("'F' at index 10"), "{e}");
        for bad in ["y", "z", "0", "1", "-", " "] {
            let text = format!("222222222222222{bad}");
            assert!(matches!(
                text.parse::<SnoId>(),
                Err(SnoParseError::InvalidChar { index: 15, .. })
            ));
        }
        // A multi-byte character reports the character, not a stray byte.
        let e = "22222222222222é".parse::<SnoId>().unwrap_err();
        assert!(e.to_string().contains('é'), "{e}");
        // 16 characters of 17 bytes: the length is right, the character is not.
        let e = "222222222222222é".parse::<SnoId>().unwrap_err();
        assert_eq!(
            e,
            SnoParseError::InvalidChar {
                found: 'é',
                index: 15
            }
        );
        let e = "!22222222222222é".parse::<SnoId>().unwrap_err();
        assert_eq!(
            e,
            SnoParseError::InvalidChar {
                found: '!',
                index: 0
            }
        );
        let e = "2222222222222222é".parse::<SnoId>().unwrap_err();
        assert_eq!(
            e,
            SnoParseError::InvalidLength {
                expected: 16,
                found: 17
            }
        );
    }

    #[test]
    fn partition_u16() {
        let p = Partition([255, 255]);
        assert_eq!(p.as_u16(), 65535);
        assert_eq!(Partition::from_u16(0xabcd), Partition([0xab, 0xcd]));
    }
}
