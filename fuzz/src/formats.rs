//! Fuzz target bodies for floe-core's decoders and parsers of outside input.
//!
//! Each function takes a target's raw input and panics only when a property fails: the parser
//! panicked, an error was not one line, or a value it accepted did not come back from its own
//! text (parse -> encode -> parse). Texts that are not UTF-8 are skipped where the parser takes
//! `&str` (every caller of these parsers has a `&str`).
//!
//! This file uses `floe_core` and `std` only: floe-core's tests include it (`#[path]`) to
//! replay `fuzz/regressions/<target>/` ([`TARGETS`]).

use std::sync::OnceLock;

use floe_core::lexical::LexicalUuid;
use floe_core::scramble::{Domain, Keyring, Scrambler};
use floe_core::sno::SnoId;
use floe_core::snowflake::{parse_id, Layout};
use floe_core::template::{self, Template};
use floe_core::ulid::{self, Ulid};
use floe_core::uuid7::{self, Uuid};

/// A target's body: it takes the raw input, and panics when a property fails.
pub type Body = fn(&[u8]);

/// Each target of this file by its name (its folder under `fuzz/regressions/`), with its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("snowflake", snowflake),
    ("sno", sno),
    ("lexical", lexical),
    ("ulid", ulid),
    ("template", template),
    ("scramble", scramble),
];

/// An error message as floe shows it: one line, never empty.
fn one_line(message: impl ToString) {
    let message = message.to_string();
    assert!(
        !message.is_empty() && !message.contains(['\n', '\r']),
        "not one line: {message:?}"
    );
}

/// Snowflake IDs and layouts. The whole input is read as an ID (`parse_id`, as `floe inspect`
/// reads one) and as a layout (`Layout::preset`, as `--layout` and `snowflake.layout`); then,
/// as lines `LAYOUT\nID[\nEPOCH_MS[\nUNIT_MS]]`, the ID is decoded against the layout.
///
/// An accepted ID comes back from its decimal and hex text; an accepted layout from its bit
/// widths; a valid layout encodes the parts it decodes back to the ID (less stray bits above
/// its fields), and an invalid one refuses to encode.
pub fn snowflake(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_id(text) {
        Ok(id) => {
            assert_eq!(parse_id(&id.to_string()), Ok(id));
            assert_eq!(parse_id(&format!("{id:#x}")), Ok(id));
            assert_eq!(parse_id(&format!("0X{id:016X}")), Ok(id));
        }
        Err(e) => one_line(e),
    }
    match text.parse::<Layout>() {
        Ok(layout) => {
            layout.validate().expect("a parsed layout is valid");
            let widths = if layout.datacenter_bits() == 0 {
                format!(
                    "{}/{}/{}",
                    layout.timestamp_bits(),
                    layout.worker_bits(),
                    layout.sequence_bits()
                )
            } else {
                format!(
                    "{}/{}/{}/{}",
                    layout.timestamp_bits(),
                    layout.datacenter_bits(),
                    layout.worker_bits(),
                    layout.sequence_bits()
                )
            };
            let again = Layout::preset(&widths)
                .unwrap_or_else(|e| panic!("{widths:?} of {text:?}: {e}"))
                .with_epoch_ms(layout.epoch_ms())
                .with_time_unit_ms(layout.time_unit_ms());
            assert_eq!(again, layout, "{widths:?} of {text:?}");
        }
        Err(e) => one_line(e),
    }

    let mut lines = text.split('\n');
    let (Some(layout), Some(id)) = (lines.next(), lines.next()) else {
        return;
    };
    let (Ok(mut layout), Ok(id)) = (Layout::preset(layout), parse_id(id)) else {
        return;
    };
    if let Some(Ok(epoch)) = lines.next().map(parse_id) {
        layout = layout.with_epoch_ms(epoch);
    }
    if let Some(Ok(unit)) = lines.next().map(parse_id) {
        layout = layout.with_time_unit_ms(unit);
    }
    let parts = layout.decode(id);
    match layout.validate() {
        Ok(()) => {
            assert_eq!(layout.try_decode(id), Ok(parts));
            let bits = layout.total_bits();
            let fields = if bits >= 64 {
                id
            } else {
                id & ((1 << bits) - 1)
            };
            assert_eq!(layout.has_stray_bits(id), fields != id);
            assert_eq!(layout.encode(parts), Ok(fields), "{layout} {parts:?}");
        }
        Err(e) => {
            one_line(e);
            if let Err(e) = layout.try_decode(id) {
                one_line(e);
            }
            assert!(layout.encode(parts).is_err());
        }
    }
}

/// sno IDs: the input as 16 characters of text (bytes and `&str`), and as 10 bytes.
///
/// Text decodes to an ID whose text is the input again (16 characters of 5 bits are its 80
/// bits exactly); 10 bytes are an ID whose text decodes to them.
pub fn sno(data: &[u8]) {
    let decoded = SnoId::decode(data);
    match decoded {
        Ok(id) => assert_eq!(&id.encode()[..], data),
        Err(e) => one_line(e),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = text.parse::<SnoId>();
        assert_eq!(parsed.ok(), decoded.ok(), "{text:?}");
        if let Err(e) = parsed {
            one_line(e);
        }
    }
    match SnoId::from_slice(data) {
        Ok(id) => {
            assert_eq!(&id.to_bytes()[..], data);
            assert_eq!(id.to_string().parse::<SnoId>(), Ok(id));
            assert_eq!(SnoId::decode(&id.encode()), Ok(id));
            // The parts of any 10 bytes read without overflow.
            let _ = (id.time(), id.meta(), id.partition(), id.sequence());
            let _ = (id.tick_tock(), id.is_zero());
        }
        Err(e) => one_line(e),
    }
}

/// LexicalUUIDs: the input as text (8-4-4-16 or 32 hex digits), and as 16 bytes.
///
/// Accepted text comes back from the ID's text, which is the input in lower case (with the
/// dashes put in); 16 bytes come back from their text.
pub fn lexical(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        match LexicalUuid::parse(text) {
            Ok(id) => {
                let shown = id.to_string();
                assert_eq!(LexicalUuid::parse(&shown), Ok(id));
                assert_eq!(
                    shown.replace('-', ""),
                    text.replace('-', "").to_ascii_lowercase()
                );
                assert_eq!(LexicalUuid::from_bytes(id.to_bytes()), id);
            }
            Err(e) => one_line(e),
        }
    }
    if let Ok(bytes) = <[u8; 16]>::try_from(data) {
        let id = LexicalUuid::from_bytes(bytes);
        assert_eq!(id.to_bytes(), bytes);
        assert_eq!(id.to_string().parse::<LexicalUuid>(), Ok(id));
    }
}

/// ULIDs through floe's strict parser (26 characters of Crockford base32, the first at most 7),
/// and 16 bytes as a ULID and as a UUID that `floe inspect` reads as a UUIDv7.
///
/// Accepted text is the ID's text (in upper case), which the `ulid` crate reads the same; any
/// 16 bytes come back from their ULID text.
pub fn ulid(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        match ulid::parse(text) {
            Ok(id) => {
                let shown = id.to_string();
                assert_eq!(shown, text.to_ascii_uppercase());
                assert_eq!(ulid::parse(&shown), Ok(id));
                assert_eq!(Ulid::from_string(text), Ok(id));
            }
            Err(e) => one_line(e),
        }
    }
    if let Ok(bytes) = <[u8; 16]>::try_from(data) {
        let id = Ulid::from_bytes(bytes);
        assert_eq!(ulid::parse(&id.to_string()), Ok(id));
        match uuid7::inspect(&Uuid::from_bytes(bytes)) {
            Ok(parts) => {
                assert_eq!(parts.version, 7);
                assert!(parts.timestamp_ms < 1 << 48 && parts.rand < 1 << 74);
            }
            Err(e) => one_line(e),
        }
    }
}

/// The keyring every scrambling target uses when the input does not give one: key IDs 1
/// (current) and 2.
fn keyring() -> &'static Keyring {
    static KEYS: OnceLock<Keyring> = OnceLock::new();
    KEYS.get_or_init(|| {
        let text = format!("1:{}\n2:{}", "6f".repeat(32), "a5".repeat(32));
        Keyring::parse(&text).expect("the fuzz keyring")
    })
}

/// `digits:6`, the smallest domain.
fn six_digits() -> Domain {
    Domain::digits(6).expect("6 digits")
}

/// A scrambler of `domain` over [`keyring`].
fn scrambler(domain: Domain) -> Scrambler {
    Scrambler::new(domain, keyring())
}

/// Templates. The input is lines: `PATTERN[\nUTC_OFFSET[\nVALUE[\nAT_MS[\nNAME=VALUE...]]]]`
/// (each optional line empty or unreadable for its default: UTC, 42, 2026-11-23T01:02:03Z, no
/// `{meta.NAME}` values).
///
/// An accepted pattern is the template's text and parses again; an accepted offset comes back
/// from its `+HH:MM`. A template renders a value, or refuses it, without panicking; two values
/// never render the same (its "never a repeat"), a failed render appends nothing, and a
/// template ending in `{luhn}` or `{damm}` writes a text its check accepts.
pub fn template(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let pattern = lines.next().unwrap_or_default();
    let offset = lines.next().unwrap_or_default();
    let number = |line: Option<&str>| line.and_then(|l| parse_id(l).ok());
    let value = number(lines.next()).unwrap_or(42);
    let at_ms = number(lines.next()).unwrap_or(1_795_395_723_004);
    let meta: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();

    let offset = match template::parse_utc_offset(offset) {
        Ok(o) => {
            let (h, m, s) = o.as_hms();
            assert_eq!(s, 0);
            let sign = if o.is_negative() { '-' } else { '+' };
            let shown = format!("{sign}{:02}:{:02}", h.abs(), m.abs());
            assert_eq!(template::parse_utc_offset(&shown), Ok(o), "{shown}");
            Some(o)
        }
        Err(e) => {
            one_line(e);
            None
        }
    };

    let t = match Template::parse(pattern) {
        Ok(t) => t,
        Err(e) => {
            one_line(e);
            return;
        }
    };
    assert_eq!(t.to_string(), pattern);
    Template::parse(t.pattern()).expect("a template's own text parses");
    let t = match offset {
        Some(o) => t.with_utc_offset(o),
        None => t,
    };
    let at = t.moment(at_ms);
    let _ = t.sequence_key("orders", at);
    if let Err(e) = t.dated_key("orders", at) {
        one_line(e);
    }
    let _ = t.check_fits(value, Some(&scrambler(Domain::Int63)));
    let digits = scrambler(six_digits());
    let scrambler = t.scrambles().then_some(&digits);
    let checked = t.check_meta(&meta[..]);

    let mut out = String::from("x");
    let rendered = t.render_into(&mut out, value, at, &meta[..], scrambler);
    match &rendered {
        Ok(()) => {
            assert!(checked.is_ok());
            let written = &out[1..];
            assert!(!written.contains(|c: char| c.is_control()), "{written:?}");
            if pattern.ends_with("{luhn}") {
                assert!(template::luhn_valid(written), "{written:?}");
            }
            if pattern.ends_with("{damm}") {
                assert!(template::damm_valid(written), "{written:?}");
            }
            let other = value ^ 1;
            if let Ok(again) = t.render(other, at, &meta[..], scrambler) {
                assert_ne!(again, written, "{value} and {other} written the same");
            }
        }
        Err(e) => {
            assert_eq!(out, "x", "a failed render appended");
            one_line(e);
        }
    }
}

/// Scramble keys and scrambled IDs. The input is read as a keyring (`Keyring::parse`, what a
/// key file or `$FLOE_SCRAMBLE_KEY` holds), as a domain (`int63`, `digits:N`), and as a
/// scrambled ID decoded with a fixed keyring in `int63` and `digits:6` (what a client sends
/// back).
///
/// A keyring error never holds key material (no run of 32 hex digits); an accepted keyring's
/// key IDs are distinct digits, and it scrambles and unscrambles a number back. An accepted
/// domain comes back from its text. A decoded ID encodes back to a text that decodes to the
/// same number, the input itself when it names the current key.
pub fn scramble(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Keyring::parse(text) {
        Ok(keys) => {
            let ids: Vec<u8> = keys.ids().collect();
            assert_eq!(ids.first(), Some(&keys.current()));
            assert!(ids.iter().all(|&id| id <= 9));
            for (i, id) in ids.iter().enumerate() {
                assert!(!ids[..i].contains(id), "key ID {id} twice");
            }
            let s = Scrambler::new(six_digits(), &keys);
            let value = u64::from(data.len() as u32) % 1_000_000;
            let public = s.encode(value).expect("in the domain");
            assert_eq!(s.decode(&public), Ok(value));
        }
        Err(e) => {
            let message = e.to_string();
            one_line(&message);
            let mut run = 0;
            for c in message.chars() {
                run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
                assert!(run < 32, "a key error holds key material: {message:?}");
            }
        }
    }
    match Domain::parse(text) {
        Ok(domain) => assert_eq!(Domain::parse(&domain.to_string()), Ok(domain)),
        Err(e) => one_line(e),
    }
    for domain in [Domain::Int63, six_digits()] {
        let s = scrambler(domain);
        match s.decode(text) {
            Ok(value) => {
                assert!(value <= domain.max());
                let public = s.encode(value).expect("in the domain");
                assert_eq!(s.decode(&public), Ok(value));
                if text.starts_with(char::from(b'0' + keyring().current())) {
                    assert_eq!(public, text);
                }
            }
            Err(e) => one_line(e),
        }
    }
}
