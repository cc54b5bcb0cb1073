//! Non-guessable public IDs: a keyed, reversible permutation of sequential numbers.
//!
//! Sequential IDs are what a database wants inside, and what nobody should see outside: the
//! next order number is the last one plus one (so pages can be scraped in order), and two order
//! numbers a day apart tell a competitor the day's volume. A [`Scrambler`] maps each number of
//! a [`Domain`] onto another number of the same domain with **FF1** (NIST SP 800-38G
//! format-preserving encryption) over AES-256, from the `fpe` crate: a permutation, so no two
//! inputs ever give the same output, and only the key's holder can run it backwards.
//!
//! floe does not implement the cipher. It gives `fpe`'s FF1 its numbers through
//! [`NumeralString`] (the trait `fpe` defines for that, "a type that can operate more
//! efficiently"): a number and its numeral count in a `u64`, instead of `fpe`'s general
//! `FlexibleNumeralString`, a vector of numerals and big integers, 10 to 20 times slower here.
//! The tests check it against `FlexibleNumeralString` on random inputs and against NIST's
//! published FF1 examples.
//!
//! **Domains.** [`Domain::Int63`]: any `i64` that is not negative (0 to 2^63 − 1), as 63
//! binary numerals; a scrambled sequence ID is then another non-negative `i64`. Or
//! [`Domain::Digits`]: N decimal digits (6 to 18), 0 to 10^N − 1, for IDs that must stay N
//! digits long (an order number printed on a receipt). FF1 needs at least a million values, so
//! 6 digits is the least.
//!
//! **Text and key IDs.** A [`Keyring`] holds one or more keys, each with a one-digit key ID;
//! the first one scrambles, all of them unscramble. [`Scrambler::encode`] writes the key ID,
//! then the scrambled number zero-padded to the domain's width (19 digits for `int63`): the
//! text says which key made it, so keys can be rotated: put the new key first, keep the old
//! ones (to decode what they made), and drop an old key only when none of its IDs matter.
//!
//! This is obfuscation of *which* number it is, with a key: it hides order and volume from
//! anyone without the key. It does not authenticate: anybody can try random IDs, and a
//! random ID in a domain that is mostly used decodes to a number that exists. Check access as
//! for any other ID.
//!
//! ```
//! use floe_core::scramble::{Domain, Keyring, Scrambler};
//!
//! let keys = Keyring::parse(&format!("1:{}", "6f".repeat(32))).unwrap();
//! let s = Scrambler::new(Domain::digits(10).unwrap(), &keys);
//! let public = s.encode(42).unwrap();
//! assert_eq!(public.len(), 11); // the key ID, then 10 digits
//! assert!(public.starts_with('1'));
//! assert_eq!(s.decode(&public).unwrap(), 42);
//! ```

use std::fmt;

use aes::Aes256;
use fpe::ff1::{NumeralString, Operations, FF1};

/// The numbers a [`Scrambler`] permutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// 0 to 2^63 − 1: every non-negative `i64` (63 binary numerals).
    Int63,
    /// 0 to 10^N − 1: N decimal digits, N from 6 to 18 (made by [`Domain::digits`] or
    /// [`Domain::parse`], which check N).
    #[non_exhaustive]
    Digits(u8),
}

impl Domain {
    /// The fewest digits [`Domain::Digits`] takes (FF1 needs a million values at least).
    pub const MIN_DIGITS: u8 = 6;
    /// The most digits [`Domain::Digits`] takes (10^18 − 1 still fits an `i64`).
    pub const MAX_DIGITS: u8 = 18;

    /// `int63`, or `digits:N`.
    ///
    /// # Errors
    /// [`ScrambleError::Domain`] saying what was expected.
    pub fn parse(text: &str) -> Result<Domain, ScrambleError> {
        let bad = || {
            ScrambleError::Domain(format!(
                "expected int63 or digits:N (N from {} to {}), found {}",
                Self::MIN_DIGITS,
                Self::MAX_DIGITS,
                crate::endpoint::quoted(text)
            ))
        };
        match text.trim() {
            "int63" => Ok(Domain::Int63),
            other => {
                let n = other.strip_prefix("digits:").ok_or_else(bad)?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let n: u8 = n.parse().map_err(|_| bad())?;
                Domain::digits(n).map_err(|_| bad())
            }
        }
    }

    /// N decimal digits, checked.
    ///
    /// # Errors
    /// [`ScrambleError::Domain`] outside 6 to 18.
    pub fn digits(n: u8) -> Result<Domain, ScrambleError> {
        if (Self::MIN_DIGITS..=Self::MAX_DIGITS).contains(&n) {
            Ok(Domain::Digits(n))
        } else {
            Err(ScrambleError::Domain(format!(
                "digits: expected {} to {}, found {n}",
                Self::MIN_DIGITS,
                Self::MAX_DIGITS
            )))
        }
    }

    /// The largest number of the domain.
    pub fn max(self) -> u64 {
        match self {
            Domain::Int63 => i64::MAX as u64,
            Domain::Digits(n) => 10u64.pow(u32::from(n)) - 1,
        }
    }

    /// How many decimal digits its largest number has (the text's width after the key ID).
    pub fn width(self) -> usize {
        match self {
            Domain::Int63 => 19,
            Domain::Digits(n) => usize::from(n),
        }
    }

    fn radix(self) -> u32 {
        match self {
            Domain::Int63 => 2,
            Domain::Digits(_) => 10,
        }
    }

    fn numerals(self) -> usize {
        match self {
            Domain::Int63 => 63,
            Domain::Digits(n) => usize::from(n),
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Domain::Int63 => f.write_str("int63"),
            Domain::Digits(n) => write!(f, "digits:{n}"),
        }
    }
}

/// Why scrambling, unscrambling or reading keys failed. No message ever holds key material.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScrambleError {
    /// A number outside the domain.
    OutOfDomain {
        /// The number.
        value: u64,
        /// The domain.
        domain: Domain,
    },
    /// Text that is not a scrambled ID: what was expected.
    Malformed(String),
    /// A key ID the keyring does not hold.
    UnknownKey(u8),
    /// The keyring text: which entry, and why (never the key itself).
    Key(String),
    /// A domain that is not `int63` or `digits:6` to `digits:18`.
    Domain(String),
}

impl fmt::Display for ScrambleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScrambleError::OutOfDomain { value, domain } => write!(
                f,
                "{value} is outside the scramble domain {domain} (0 to {})",
                domain.max()
            ),
            ScrambleError::Malformed(m) => f.write_str(m),
            ScrambleError::UnknownKey(id) => write!(
                f,
                "key ID {id}: no such key in the keyring (keep old keys to decode the IDs they made)"
            ),
            ScrambleError::Key(m) => write!(f, "scramble key: {m}"),
            ScrambleError::Domain(m) => write!(f, "scramble domain: {m}"),
        }
    }
}

impl std::error::Error for ScrambleError {}

/// Keys for a [`Scrambler`]: AES-256 keys, each with a key ID of one digit (0 to 9). The first
/// scrambles; all unscramble.
pub struct Keyring {
    keys: Vec<(u8, [u8; 32])>,
}

impl fmt::Debug for Keyring {
    /// The key IDs only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

impl Keyring {
    /// Reads keys from text: entries separated by new lines or commas, each `ID:HEX` (a key ID
    /// of one digit, then 64 hex digits: 32 bytes of AES-256 key), or one bare `HEX` (key ID
    /// 0). Blank lines and lines from `#` on are skipped. The first entry is the current key.
    ///
    /// # Errors
    /// [`ScrambleError::Key`] naming the entry by its position and saying what was wrong, never
    /// repeating it: no entry, a bad key ID, a repeated key ID, a key of the wrong length or
    /// not hex, or a key of all zeros (a placeholder, not a key).
    pub fn parse(text: &str) -> Result<Keyring, ScrambleError> {
        let entries: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.is_empty() {
            return Err(ScrambleError::Key(
                "no key: expected ID:HEX entries (a key ID 0-9, then 64 hex digits)".into(),
            ));
        }
        let mut keys: Vec<(u8, [u8; 32])> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let n = i + 1;
            let (id, hex) = match entry.split_once(':') {
                Some((id, hex)) => {
                    let id = id.trim();
                    let ok = id.len() == 1 && id.as_bytes()[0].is_ascii_digit();
                    if !ok {
                        return Err(ScrambleError::Key(format!(
                            "entry {n}: expected a key ID of one digit 0-9 before ':'"
                        )));
                    }
                    (id.as_bytes()[0] - b'0', hex.trim())
                }
                None if entries.len() == 1 => (0, *entry),
                None => {
                    return Err(ScrambleError::Key(format!(
                        "entry {n}: with several keys, each is ID:HEX (a key ID 0-9, then 64 hex digits)"
                    )))
                }
            };
            if keys.iter().any(|(k, _)| *k == id) {
                return Err(ScrambleError::Key(format!(
                    "entry {n}: key ID {id} is given twice"
                )));
            }
            let bytes = parse_key_hex(hex)
                .map_err(|why| ScrambleError::Key(format!("entry {n} (key ID {id}): {why}")))?;
            keys.push((id, bytes));
        }
        Ok(Keyring { keys })
    }

    /// The key IDs, the current one first.
    pub fn ids(&self) -> impl Iterator<Item = u8> + '_ {
        self.keys.iter().map(|(id, _)| *id)
    }

    /// The current key's ID.
    pub fn current(&self) -> u8 {
        self.keys[0].0
    }
}

/// 64 hex digits into 32 bytes; the reason, never the text, on failure.
fn parse_key_hex(hex: &str) -> Result<[u8; 32], String> {
    if !hex.is_ascii() {
        return Err("expected hex digits 0-9 a-f only".into());
    }
    if hex.len() != 64 {
        return Err(format!(
            "expected 64 hex digits (a 256-bit AES key), found {} characters",
            hex.chars().count()
        ));
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        if !pair.is_ascii() {
            return Err("expected hex digits 0-9 a-f only".into());
        }
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => out[i] = (h * 16 + l) as u8,
            _ => return Err("expected hex digits 0-9 a-f only".into()),
        }
    }
    if out.iter().all(|&b| b == 0) {
        return Err(
            "a key of all zeros is a placeholder: generate one, e.g. `openssl rand -hex 32`".into(),
        );
    }
    Ok(out)
}

/// A keyed permutation of a [`Domain`] (see the [module docs](self)).
pub struct Scrambler {
    domain: Domain,
    // FF1 with radix 2 for `int63` and 10 for digits, one per key; the current key first.
    keys: Vec<(u8, FF1<Aes256>)>,
}

impl fmt::Debug for Scrambler {
    /// The domain and key IDs only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<u8> = self.keys.iter().map(|(id, _)| *id).collect();
        f.debug_struct("Scrambler")
            .field("domain", &self.domain)
            .field("key_ids", &ids)
            .finish()
    }
}

impl Scrambler {
    /// A scrambler of `domain` with the keys of `keyring`.
    pub fn new(domain: Domain, keyring: &Keyring) -> Scrambler {
        let keys = keyring
            .keys
            .iter()
            .filter_map(|(id, key)| {
                // A 32-byte key and radix 2 or 10: `new` accepts both (it panics only on a key
                // of the wrong length, which the array's type rules out).
                FF1::<Aes256>::new(key, domain.radix())
                    .ok()
                    .map(|f| (*id, f))
            })
            .collect();
        Scrambler { domain, keys }
    }

    /// The domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The current key's ID.
    pub fn key_id(&self) -> u8 {
        self.keys[0].0
    }

    fn key(&self, id: u8) -> Result<&FF1<Aes256>, ScrambleError> {
        self.keys
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, f)| f)
            .ok_or(ScrambleError::UnknownKey(id))
    }

    fn check(&self, value: u64) -> Result<(), ScrambleError> {
        if value > self.domain.max() {
            return Err(ScrambleError::OutOfDomain {
                value,
                domain: self.domain,
            });
        }
        Ok(())
    }

    /// `value` scrambled with the current key.
    ///
    /// # Errors
    /// [`ScrambleError::OutOfDomain`] for a number past the domain.
    pub fn scramble(&self, value: u64) -> Result<u64, ScrambleError> {
        self.scramble_with(self.key_id(), value)
    }

    /// `value` scrambled with key `id`.
    ///
    /// # Errors
    /// [`ScrambleError::OutOfDomain`], or [`ScrambleError::UnknownKey`].
    pub fn scramble_with(&self, id: u8, value: u64) -> Result<u64, ScrambleError> {
        self.ff1(id, value, true)
    }

    /// The number key `id` scrambled into `value`.
    ///
    /// # Errors
    /// [`ScrambleError::OutOfDomain`], or [`ScrambleError::UnknownKey`].
    pub fn unscramble_with(&self, id: u8, value: u64) -> Result<u64, ScrambleError> {
        self.ff1(id, value, false)
    }

    /// FF1 with key `id`, forwards (encrypt) or backwards (decrypt), no tweak.
    fn ff1(&self, id: u8, value: u64, forward: bool) -> Result<u64, ScrambleError> {
        self.check(value)?;
        let key = self.key(id)?;
        let ns = Numerals::new(self.domain, value);
        let out = if forward {
            key.encrypt(&[], &ns)
        } else {
            key.decrypt(&[], &ns)
        };
        // The numerals were checked against the domain: FF1 has nothing to refuse.
        out.map(|n| n.value)
            .map_err(|e| ScrambleError::Malformed(format!("internal: FF1 refused: {e}")))
    }

    /// The text of `value` scrambled with the current key: the key ID, then the scrambled
    /// number zero-padded to [`Domain::width`].
    ///
    /// # Errors
    /// [`ScrambleError::OutOfDomain`].
    pub fn encode(&self, value: u64) -> Result<String, ScrambleError> {
        let mut out = String::with_capacity(1 + self.domain.width());
        self.write_encoded(value, &mut out)?;
        Ok(out)
    }

    /// [`Scrambler::encode`] appended to `out` (nothing is written on error).
    ///
    /// # Errors
    /// [`ScrambleError::OutOfDomain`].
    pub fn write_encoded(&self, value: u64, out: &mut String) -> Result<(), ScrambleError> {
        let id = self.key_id();
        let scrambled = self.scramble_with(id, value)?;
        out.push(char::from(b'0' + id));
        let mut digits = itoa::Buffer::new();
        let text = digits.format(scrambled);
        for _ in text.len()..self.domain.width() {
            out.push('0');
        }
        out.push_str(text);
        Ok(())
    }

    /// The number whose [`Scrambler::encode`] text is `text` (with whichever key of the
    /// keyring its key ID names).
    ///
    /// # Errors
    /// [`ScrambleError::Malformed`] saying what was expected, or
    /// [`ScrambleError::UnknownKey`].
    pub fn decode(&self, text: &str) -> Result<u64, ScrambleError> {
        let width = self.domain.width();
        let expected = || {
            ScrambleError::Malformed(format!(
                "{}: expected a scrambled ID of {} digits (a key ID, then {width} digits of {})",
                crate::endpoint::quoted(text),
                width + 1,
                self.domain
            ))
        };
        let bytes = text.as_bytes();
        if bytes.len() != width + 1 || !bytes.iter().all(u8::is_ascii_digit) {
            return Err(expected());
        }
        let id = bytes[0] - b'0';
        let value: u64 = text[1..].parse().map_err(|_| expected())?;
        if value > self.domain.max() {
            return Err(ScrambleError::Malformed(format!(
                "{}: the number after the key ID is past the scramble domain {} (0 to {}): not a scrambled ID",
                crate::endpoint::quoted(text),
                self.domain,
                self.domain.max()
            )));
        }
        self.unscramble_with(id, value)
    }
}

/// A numeral string of a domain held as its number: `len` numerals of `radix` whose value is
/// `value`, most significant first (NIST's NUM_radix). What `fpe`'s FF1 splits, adds to and
/// concatenates, in `u64`/`u128` arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Numerals {
    radix: u32,
    len: usize,
    value: u64,
}

impl Numerals {
    fn new(domain: Domain, value: u64) -> Numerals {
        Numerals {
            radix: domain.radix(),
            len: domain.numerals(),
            value,
        }
    }

    /// radix^len. Every length here is at most 63 binary or 18 decimal numerals, so it fits.
    fn modulus(radix: u32, len: usize) -> u128 {
        u128::from(radix).pow(len as u32)
    }
}

/// Up to 16 big-endian bytes.
#[derive(Debug)]
struct BeBytes {
    buf: [u8; 16],
    len: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.buf[16 - self.len..]
    }
}

/// `NUM(S)` of FF1's step 6iv reduced modulo `m`: the bytes, big-endian, folded in `u128`
/// (every partial value stays below `m * 256`, which fits).
fn reduce(bytes: impl Iterator<Item = u8>, m: u128) -> u128 {
    bytes.fold(0u128, |acc, b| ((acc << 8) | u128::from(b)) % m)
}

impl NumeralString for Numerals {
    type Ops = Numerals;

    fn is_valid(&self, radix: u32) -> bool {
        radix == self.radix && u128::from(self.value) < Self::modulus(self.radix, self.len)
    }

    fn numeral_count(&self) -> usize {
        self.len
    }

    fn split(&self) -> (Numerals, Numerals) {
        let u = self.len / 2;
        let v = self.len - u;
        let low = Self::modulus(self.radix, v);
        let value = u128::from(self.value);
        (
            Numerals {
                radix: self.radix,
                len: u,
                value: (value / low) as u64,
            },
            Numerals {
                radix: self.radix,
                len: v,
                value: (value % low) as u64,
            },
        )
    }

    fn concat(a: Numerals, b: Numerals) -> Numerals {
        let value = u128::from(a.value) * Self::modulus(b.radix, b.len) + u128::from(b.value);
        Numerals {
            radix: a.radix,
            len: a.len + b.len,
            value: value as u64,
        }
    }
}

impl Operations for Numerals {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.len
    }

    fn to_be_bytes(&self, _radix: u32, b: usize) -> BeBytes {
        // b = ceil(v * log2(radix) / 8) is at most 5 here (32 binary or 9 decimal numerals).
        let mut buf = [0u8; 16];
        buf[8..].copy_from_slice(&self.value.to_be_bytes());
        BeBytes {
            buf,
            len: b.min(16),
        }
    }

    fn add_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Numerals {
        let modulus = Self::modulus(radix, m);
        let y = reduce(other, modulus);
        Numerals {
            radix,
            len: m,
            value: ((u128::from(self.value) + y) % modulus) as u64,
        }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Numerals {
        let modulus = Self::modulus(radix, m);
        let y = reduce(other, modulus);
        Numerals {
            radix,
            len: m,
            value: ((u128::from(self.value) % modulus + modulus - y) % modulus) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fpe::ff1::FlexibleNumeralString;
    use proptest::prelude::*;

    const NIST_KEY: &str = "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94";

    fn scrambler(domain: Domain) -> Scrambler {
        Scrambler::new(domain, &Keyring::parse(NIST_KEY).unwrap())
    }

    /// NIST SP 800-38G's FF1 example 7 (AES-256, radix 10, no tweak): 0123456789 becomes
    /// 6657667009.
    #[test]
    fn nist_ff1_sample_7() {
        let s = scrambler(Domain::Digits(10));
        assert_eq!(s.scramble(123_456_789).unwrap(), 6_657_667_009);
        assert_eq!(s.unscramble_with(0, 6_657_667_009).unwrap(), 123_456_789);
    }

    fn numerals_of(mut value: u64, radix: u64, n: usize) -> Vec<u16> {
        let mut v = vec![0u16; n];
        for d in v.iter_mut().rev() {
            *d = (value % radix) as u16;
            value /= radix;
        }
        v
    }

    fn value_of(numerals: &[u16], radix: u64) -> u64 {
        numerals
            .iter()
            .fold(0, |acc, &d| acc * radix + u64::from(d))
    }

    proptest! {
        /// floe's numerals give what fpe's own `FlexibleNumeralString` gives, both ways, over
        /// every domain.
        #[test]
        fn same_as_fpe_flexible_numerals(value in any::<u64>(), digits in 6u8..=18, int63 in any::<bool>()) {
            let domain = if int63 { Domain::Int63 } else { Domain::Digits(digits) };
            let value = value % (domain.max() + 1);
            let key = parse_key_hex(&NIST_KEY.to_lowercase()).unwrap();
            let radix = domain.radix();
            let ff1 = FF1::<Aes256>::new(&key, radix).unwrap();
            let flexible = FlexibleNumeralString::from(numerals_of(value, u64::from(radix), domain.numerals()));
            let theirs: Vec<u16> = ff1.encrypt(&[], &flexible).unwrap().into();
            let ours = scrambler(domain).scramble(value).unwrap();
            prop_assert_eq!(ours, value_of(&theirs, u64::from(radix)));
            let back: Vec<u16> = ff1.decrypt(&[], &FlexibleNumeralString::from(theirs)).unwrap().into();
            prop_assert_eq!(value_of(&back, u64::from(radix)), value);
            prop_assert_eq!(scrambler(domain).unscramble_with(0, ours).unwrap(), value);
        }

        /// Text round trip, and garbage never panics.
        #[test]
        fn encode_decode_round_trip(value in 0u64..=i64::MAX as u64, junk in ".{0,30}") {
            let s = scrambler(Domain::Int63);
            let text = s.encode(value).unwrap();
            prop_assert_eq!(text.len(), 20);
            prop_assert_eq!(s.decode(&text).unwrap(), value);
            let _ = s.decode(&junk);
        }
    }

    /// Every input of a whole 6-digit domain (a million) gives a different output: a
    /// permutation, as FF1 must be.
    #[test]
    fn a_whole_domain_is_permuted() {
        let s = scrambler(Domain::Digits(6));
        let mut seen = vec![false; 1_000_000];
        for v in 0..1_000_000u64 {
            let out = s.scramble(v).unwrap() as usize;
            assert!(!seen[out], "{v} gave {out} twice");
            seen[out] = true;
        }
    }

    #[test]
    fn out_of_domain_and_malformed_text_are_refused() {
        let s = scrambler(Domain::Digits(8));
        assert!(matches!(
            s.scramble(100_000_000),
            Err(ScrambleError::OutOfDomain { .. })
        ));
        assert_eq!(s.encode(99_999_999).unwrap().len(), 9);
        for bad in [
            "",
            "0",
            "01234567",
            "0123456789",
            "x12345678",
            "0-2345678",
            "012345６7",
        ] {
            let e = s.decode(bad).unwrap_err();
            assert!(
                e.to_string()
                    .contains("expected a scrambled ID of 9 digits"),
                "{e}"
            );
        }
        assert_eq!(s.decode("912345678"), Err(ScrambleError::UnknownKey(9)));
    }

    #[test]
    fn domains_parse_and_refuse_naming_what_is_expected() {
        assert_eq!(Domain::parse("int63").unwrap(), Domain::Int63);
        assert_eq!(Domain::parse("digits:12").unwrap(), Domain::Digits(12));
        for bad in [
            "",
            "int64",
            "digits:5",
            "digits:19",
            "digits:+8",
            "digits:",
            "12",
        ] {
            let e = Domain::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("expected int63 or digits:N (N from 6 to 18)"),
                "{e}"
            );
        }
        assert_eq!(Domain::Int63.max(), i64::MAX as u64);
        assert_eq!(Domain::Digits(18).max(), 999_999_999_999_999_999);
    }

    /// Key text: several keys with IDs, the first current; errors say which entry and why but
    /// never repeat the key.
    #[test]
    fn keyrings_parse_and_never_echo_a_key() {
        let a = "ab".repeat(32);
        let b = "cd".repeat(32);
        let ring = Keyring::parse(&format!("# keys\n2:{a}\n1:{b}  # old\n")).unwrap();
        assert_eq!(ring.ids().collect::<Vec<_>>(), [2, 1]);
        assert_eq!(ring.current(), 2);
        assert_eq!(format!("{ring:?}"), "Keyring { key_ids: [2, 1] }");
        assert_eq!(
            Keyring::parse(&format!("3:{a},1:{b}")).unwrap().current(),
            3
        );
        let secret = "ef".repeat(31);
        for (text, why) in [
            (String::new(), "no key"),
            (secret.clone(), "found 62 characters"),
            (format!("1:{secret}zz"), "hex digits"),
            (format!("12:{a}"), "one digit"),
            (format!("1:{a}\n1:{b}"), "given twice"),
            (format!("{a}\n{b}"), "each is ID:HEX"),
            ("0".repeat(64), "all zeros"),
        ] {
            let e = Keyring::parse(&text).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            assert!(
                !e.contains(&secret) && !e.contains(&a) && !e.contains(&b),
                "{e}"
            );
        }
    }

    /// Rotation: IDs made with the old key still decode once a new key is put first, and the
    /// new key's IDs say so in their first digit.
    #[test]
    fn rotated_keys_still_decode_old_ids() {
        let (a, b) = ("ab".repeat(32), "cd".repeat(32));
        let old = Scrambler::new(Domain::Int63, &Keyring::parse(&format!("1:{a}")).unwrap());
        let new = Scrambler::new(
            Domain::Int63,
            &Keyring::parse(&format!("2:{b}\n1:{a}")).unwrap(),
        );
        let before = old.encode(77).unwrap();
        let after = new.encode(77).unwrap();
        assert!(before.starts_with('1') && after.starts_with('2'));
        assert_ne!(before[1..], after[1..]);
        assert_eq!(new.decode(&before).unwrap(), 77);
        assert_eq!(new.decode(&after).unwrap(), 77);
        assert_eq!(old.decode(&after), Err(ScrambleError::UnknownKey(2)));
    }
}
