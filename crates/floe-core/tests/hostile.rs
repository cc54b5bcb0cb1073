//! Hostile input for every parser of floe-core: arbitrary bytes, strings and numbers.
//!
//! Each property asserts that the parser never panics, that its error is one line, and that
//! whatever it accepts round-trips (parse -> encode -> parse gives the same value; for layouts,
//! decode(encode(parts)) == parts for every accepted layout and in-range parts).
//!
//! The cheap parsers run [`MANY`] cases each (a few million in all): the whole file stays
//! within about a minute in a debug build on two cores. Inputs that once failed are kept at
//! the end as ordinary named tests, and the fuzz targets' inputs (`fuzz/regressions/`) are
//! replayed through the targets' own bodies.

use floe_core::endpoint::{check_addresses, check_root, servers_and_root, take_options};
use floe_core::lexical::LexicalUuid;
use floe_core::sequence::{Key, KeyError, Mode, MAX_KEY_LEN};
use floe_core::sno::{SnoId, SnoParseError};
use floe_core::snowflake::{parse_id, Layout, ParseIdError, SnowflakeParts, MAX_TIME_MS};
use floe_core::ulid::{self, Ulid, UlidParseError};
use floe_core::uuid7::{self, Uuid};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// The fuzz targets' bodies (fuzz/README.md), shared with `cargo fuzz`.
#[path = "../../../fuzz/src/formats.rs"]
mod fuzz_formats;
#[path = "../../../fuzz/src/replay.rs"]
mod fuzz_replay;

/// Cases for each cheap parser.
const MANY: u32 = 200_000;
/// Cases for the URL properties (each case does more, and URLs are checked again by the
/// registries' and stores' own tests).
const SOME: u32 = 50_000;

/// A config of `cases` cases that writes no regression file: a failure found here is kept as
/// a named test below, with its literal input.
fn cases(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Characters that often break parsers: line ends, NUL, signs, separators, a two-byte letter,
/// a right-to-left override, a four-byte emoji.
const SPECIALS: [char; 11] = [
    '\n',
    '\r',
    '\0',
    ' ',
    '-',
    '+',
    '/',
    ':',
    'é',
    '\u{202e}',
    '\u{1f600}',
];

/// Text mostly of `alphabet` (so that much of it comes close to valid input), with now and
/// then a special or any character, of `len` characters. One random `u32` a character: cheap
/// enough for hundreds of thousands of cases in a debug build.
fn hostile(alphabet: &'static str, len: std::ops::RangeInclusive<usize>) -> BoxedStrategy<String> {
    let chars: Vec<char> = alphabet.chars().collect();
    let text = proptest::collection::vec(any::<u32>(), len).prop_map(move |raw| {
        raw.into_iter()
            .map(|r| match r % 16 {
                0 => SPECIALS[(r >> 4) as usize % SPECIALS.len()],
                1 => char::from_u32((r >> 4) % 0x11_0000).unwrap_or('\u{fffd}'),
                _ => chars[(r >> 4) as usize % chars.len()],
            })
            .collect::<String>()
    });
    prop_oneof![
        9 => text,
        // The lossy UTF-8 of any bytes (replacement characters where they were not UTF-8).
        1 => proptest::collection::vec(any::<u8>(), 0..48)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
    .boxed()
}

/// An error message: one line, and short whatever the input's length.
fn one_line(e: &impl ToString) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(!msg.is_empty());
    prop_assert!(!msg.contains('\n') && !msg.contains('\r'), "{msg:?}");
    prop_assert!(msg.len() < 1024, "{} bytes: {msg:?}", msg.len());
    Ok(())
}

const HEX: &str = "0123456789abcdefABCDEF";
const SNO: &str = "23456789abcdefghijklmnopqrstuvwx";
const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyzILOU";

// ---------------------------------------------------------------------------------------------
// Snowflake IDs: decimal or 0x-hex text.

proptest! {
    #![proptest_config(cases(MANY))]

    #[test]
    fn snowflake_id_text_never_panics_and_round_trips(
        text in prop_oneof![
            3 => hostile("0123456789", 0..=24),
            2 => hostile("0123456789abcdefABCDEF", 0..=20).prop_map(|s| format!("0x{s}")),
            1 => hostile("0123456789xX", 0..=4),
        ]
    ) {
        match parse_id(&text) {
            Ok(v) => {
                prop_assert_eq!(parse_id(&v.to_string()), Ok(v));
                prop_assert_eq!(parse_id(&format!("{v:#x}")), Ok(v));
                prop_assert_eq!(parse_id(&format!("{v:#018X}").replacen('X', "x", 1)), Ok(v));
                // Exactly the texts the standard parsers read, minus signs.
                let expected = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => text.parse::<u64>(),
                };
                prop_assert_eq!(expected, Ok(v));
            }
            Err(e) => {
                one_line(&e)?;
                let signless = !text.contains(['+', '-']);
                let std_ok = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16).is_ok(),
                    None => text.parse::<u64>().is_ok(),
                };
                // The only texts std reads that floe refuses carry a sign.
                prop_assert!(!(signless && std_ok), "refused {text:?}: {e}");
                if let ParseIdError::InvalidChar { found, index } = e {
                    prop_assert_eq!(text[index..].chars().next(), Some(found));
                }
            }
        }
    }

    #[test]
    fn every_u64_reads_back_from_decimal_and_hex(v: u64, zeros in 0usize..4) {
        let pad = "0".repeat(zeros);
        prop_assert_eq!(parse_id(&format!("{pad}{v}")), Ok(v));
        prop_assert_eq!(parse_id(&format!("0x{pad}{v:x}")), Ok(v));
        prop_assert_eq!(parse_id(&format!("0X{pad}{v:X}")), Ok(v));
    }
}

// ---------------------------------------------------------------------------------------------
// Layouts: presets and bit widths, epochs, time units, and every ID under them.

/// Any layout text: a preset, widths near valid ones, or garbage.
fn layout_text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => proptest::sample::select(vec!["leaf", "twitter", "flake-idgen", "flake", "flake_idgen", "Leaf", ""])
            .prop_map(String::from),
        4 => proptest::collection::vec(0u16..=300, 0..=5).prop_map(|w| {
            w.iter().map(u16::to_string).collect::<Vec<_>>().join("/")
        }),
        2 => hostile("0123456789/ +-", 0..=16),
    ]
}

/// Numbers where a user's epoch or time unit may land: small, near the RFC 3339 limit, near
/// u64::MAX, or anything.
fn hostile_u64(typical: std::ops::RangeInclusive<u64>) -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => typical,
        1 => (MAX_TIME_MS - 1_000)..=(MAX_TIME_MS + 1_000),
        1 => (u64::MAX - 1_000)..=u64::MAX,
        1 => any::<u64>(),
        1 => Just(0u64),
    ]
}

/// Raw parts, reduced into a layout's ranges by [`parts_in`].
type RawParts = (u64, u64, u64, u64);

fn parts_in(layout: &Layout, (units, dc, worker, seq): RawParts) -> SnowflakeParts {
    let within = |v: u64, max: u64| if max == u64::MAX { v } else { v % (max + 1) };
    let units = within(units, layout.max_timestamp());
    SnowflakeParts {
        // A valid layout's last time fits (checked below), so this cannot overflow.
        timestamp_ms: layout.epoch_ms() + units * layout.time_unit_ms(),
        datacenter: within(dc, layout.max_datacenter()),
        worker: within(worker, layout.max_worker()),
        sequence: within(seq, layout.max_sequence()),
    }
}

proptest! {
    #![proptest_config(cases(MANY))]

    #[test]
    fn layout_text_never_panics_and_widths_read_back(text in layout_text()) {
        match Layout::preset(&text) {
            Ok(l) => {
                prop_assert!(l.validate().is_ok());
                prop_assert!(l.total_bits() <= 64);
                // The widths, written back, read as the same widths.
                let widths = format!(
                    "{}/{}/{}/{}",
                    l.timestamp_bits(), l.datacenter_bits(), l.worker_bits(), l.sequence_bits()
                );
                let back = Layout::preset(&widths).unwrap();
                prop_assert_eq!(
                    back.with_epoch_ms(l.epoch_ms()).with_time_unit_ms(l.time_unit_ms()),
                    l
                );
                prop_assert_eq!(Layout::preset(&format!("0{widths}")).ok(), Some(back));
            }
            Err(e) => one_line(&e)?,
        }
    }

    #[test]
    fn any_widths_are_refused_or_valid(ts: u8, dc: u8, w: u8, seq: u8) {
        let text = format!("{ts}/{dc}/{w}/{seq}");
        match Layout::new(ts, dc, w, seq) {
            Ok(l) => {
                prop_assert!(l.validate().is_ok());
                prop_assert_eq!(Layout::preset(&text), Ok(l));
            }
            Err(e) => {
                one_line(&e)?;
                let refused = Layout::preset(&text).is_err();
                prop_assert!(refused);
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(MANY))]

    /// Any layout, epoch, time unit and ID: validation, decode, try_decode and encode never
    /// panic; a valid layout decodes every ID to a time that fits RFC 3339, encodes its parts
    /// back to the ID, and decode(encode(parts)) == parts for parts in range.
    #[test]
    fn any_layout_epoch_unit_and_id(
        widths in (1u8..=64, 0u8..=20, 0u8..=34, 0u8..=34),
        epoch in hostile_u64(0..=2_000_000_000_000),
        unit in hostile_u64(0..=86_400_001),
        id: u64,
        raw: RawParts,
    ) {
        let Ok(base) = Layout::new(widths.0, widths.1, widths.2, widths.3) else {
            return Ok(());
        };
        let l = base.with_epoch_ms(epoch).with_time_unit_ms(unit);
        let _ = (l.cap_per_second(), l.last_time_ms(), l.fits_i64(), l.to_string());
        let decoded = l.decode(id);
        match l.validate() {
            Ok(()) => {
                let last = l.last_time_ms();
                prop_assert!(last.is_some_and(|t| t <= MAX_TIME_MS), "{l}");
                let parts = l.try_decode(id).unwrap();
                prop_assert_eq!(parts, decoded);
                prop_assert!(parts.timestamp_ms >= epoch && parts.timestamp_ms <= MAX_TIME_MS);
                if !l.has_stray_bits(id) {
                    prop_assert_eq!(l.encode(parts), Ok(id));
                }
                let parts = parts_in(&l, raw);
                let id = l.encode(parts).unwrap();
                prop_assert_eq!(l.decode(id), parts);
                prop_assert!(!l.has_stray_bits(id));
                // Any time within the unit encodes to the unit's start.
                let within = SnowflakeParts {
                    timestamp_ms: parts.timestamp_ms + (raw.0 % unit),
                    ..parts
                };
                prop_assert_eq!(l.encode(within), Ok(id));
            }
            Err(e) => {
                one_line(&e)?;
                prop_assert!(l.encode(decoded).is_err());
                match l.try_decode(id) {
                    // A time that does not fit reads as u64::MAX in decode, never wrapped.
                    Err(e) => {
                        one_line(&e)?;
                        prop_assert_eq!(decoded.timestamp_ms, u64::MAX);
                    }
                    Ok(p) => {
                        prop_assert_eq!(p, decoded);
                        prop_assert!(p.timestamp_ms >= epoch);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// sno, LexicalUUID, UUID, ULID text.

proptest! {
    #![proptest_config(cases(MANY))]

    #[test]
    fn sno_text_never_panics_and_round_trips(text in hostile(SNO, 14..=18)) {
        match text.parse::<SnoId>() {
            Ok(id) => {
                // Strict: only the canonical text is accepted, so it is the encoding.
                prop_assert_eq!(id.to_string(), text.as_str());
                prop_assert_eq!(SnoId::decode(&id.encode()), Ok(id));
                prop_assert!(id.time() >= std::time::UNIX_EPOCH);
            }
            Err(e) => {
                one_line(&e)?;
                prop_assert!(SnoId::decode(text.as_bytes()).is_err());
                match e {
                    SnoParseError::InvalidChar { found, index } => {
                        prop_assert_eq!(text[index..].chars().next(), Some(found));
                        prop_assert!(!matches!(found, '2'..='9' | 'a'..='x'));
                    }
                    SnoParseError::InvalidLength { found, .. } => {
                        prop_assert_eq!(found, text.chars().count());
                        prop_assert_ne!(found, 16);
                    }
                }
            }
        }
    }

    #[test]
    fn sno_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..=20)) {
        match SnoId::decode(&bytes) {
            Ok(id) => prop_assert_eq!(&id.encode()[..], &bytes[..]),
            Err(e) => one_line(&e)?,
        }
        match SnoId::from_slice(&bytes) {
            Ok(id) => prop_assert_eq!(&id.to_bytes()[..], &bytes[..]),
            Err(e) => one_line(&e)?,
        }
    }

    #[test]
    fn lexical_text_never_panics_and_round_trips(
        text in prop_oneof![hostile("0123456789abcdefABCDEF-", 31..=36), hostile(HEX, 30..=33)]
    ) {
        match LexicalUuid::parse(&text) {
            Ok(id) => {
                // The canonical text is the input, lowercased, with its dashes.
                let mut canonical = text.to_ascii_lowercase();
                if canonical.len() == 32 {
                    for at in [8, 13, 18] {
                        canonical.insert(at, '-');
                    }
                }
                prop_assert_eq!(id.to_string(), canonical);
                prop_assert_eq!(LexicalUuid::parse(&id.to_string()), Ok(id));
                prop_assert_eq!(LexicalUuid::from_bytes(id.to_bytes()), id);
            }
            Err(e) => one_line(&e)?,
        }
    }

    #[test]
    fn uuid_text_never_panics_and_round_trips(
        text in prop_oneof![hostile("0123456789abcdefABCDEF-", 34..=38), hostile(HEX, 31..=33)]
    ) {
        if let Ok(id) = Uuid::try_parse(&text) {
            prop_assert_eq!(Uuid::try_parse(&id.to_string()), Ok(id));
            match uuid7::inspect(&id) {
                Ok(parts) => {
                    prop_assert_eq!(parts.version, 7);
                    prop_assert!(parts.timestamp_ms < 1 << 48);
                    prop_assert!(parts.rand < 1 << 74);
                }
                Err(e) => one_line(&e)?,
            }
        }
    }

    /// floe's strict ULID parser: what it accepts is the canonical text in either case (so
    /// no two texts are one ID); what the `ulid` crate alone accepts beyond it is exactly the
    /// texts whose first character is above 7.
    #[test]
    fn ulid_text_never_panics_and_round_trips(
        text in prop_oneof![
            hostile(CROCKFORD, 24..=28),
            // A first character of 0-7 then 25 near Crockford: mostly valid ULIDs.
            (0u8..8, hostile(CROCKFORD, 25..=25)).prop_map(|(d, rest)| format!("{d}{rest}")),
        ]
    ) {
        let crate_reads = Ulid::from_string(&text);
        match ulid::parse(&text) {
            Ok(id) => {
                prop_assert_eq!(id.to_string(), text.to_ascii_uppercase());
                prop_assert_eq!(crate_reads, Ok(id));
                prop_assert!(id.timestamp_ms() < 1 << 48);
            }
            Err(e) => {
                one_line(&e)?;
                if crate_reads.is_ok() {
                    prop_assert!(matches!(e, UlidParseError::Overflow { .. }), "{e}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Store and registry URLs, sequence keys and modes.

proptest! {
    #![proptest_config(cases(SOME))]

    #[test]
    fn server_urls_never_panic_and_round_trip(
        url in prop_oneof![
            4 => hostile("abz019:,/.[]", 0..=30).prop_map(|s| format!("zk://{s}")),
            1 => hostile("abz019:,/.?=&", 0..=30),
        ],
        default_root in prop_oneof![Just("/floe"), Just("/"), Just("")],
    ) {
        match servers_and_root("zk", &url, default_root) {
            Ok((servers, root)) => {
                prop_assert!(check_addresses("zk", servers).is_ok());
                prop_assert!(check_root("zk", root).is_ok());
                prop_assert!(!servers.chars().any(char::is_whitespace));
                // Written back as a URL with its root, it reads as the same servers and root.
                let again = format!("zk://{servers}{root}");
                prop_assert_eq!(servers_and_root("zk", &again, "/other"), Ok((servers, root)));
            }
            Err(e) => one_line(&e)?,
        }
    }

    #[test]
    fn url_options_are_taken_once_and_kept_in_order(
        url in hostile("abz019:/.?=&", 0..=40),
        names in proptest::sample::subsequence(vec!["a", "b", "ttl", "prefix"], 0..=4),
    ) {
        let (rest, own) = take_options(&url, &names);
        prop_assert!(own.iter().all(|(n, _)| names.contains(n)));
        // What is left holds none of floe's options: taking them again finds none.
        let (again, none) = take_options(&rest, &names);
        prop_assert!(none.is_empty());
        prop_assert_eq!(again, rest.clone());
        // Nothing is made up: the rest is no longer than the URL.
        prop_assert!(rest.len() <= url.len());
    }
}

proptest! {
    #![proptest_config(cases(MANY))]

    #[test]
    fn sequence_keys_never_panic_and_round_trip(
        key in prop_oneof![
            3 => hostile("abc_-./|:", 0..=8),
            // Around the 255-byte limit, in one- to four-byte characters.
            1 => hostile("aé€", 80..=200),
        ]
    ) {
        match Key::new(key.as_str()) {
            Ok(k) => {
                prop_assert_eq!(k.as_str(), key.as_str());
                prop_assert_eq!(k.to_string().parse::<Key>(), Ok(k));
                prop_assert!(key.len() <= MAX_KEY_LEN);
            }
            Err(e) => {
                one_line(&e)?;
                prop_assert_eq!(Key::check(&key), Err(e));
                if let KeyError::Nul { index } = e {
                    prop_assert_eq!(key.as_bytes()[index], 0);
                }
            }
        }
    }

    #[test]
    fn sequence_modes_never_panic_and_round_trip(text in hostile("weakstrongWEAKSTRONG01", 0..=7)) {
        match text.parse::<Mode>() {
            Ok(m) => prop_assert_eq!(m.as_str().parse::<Mode>(), Ok(m)),
            Err(e) => one_line(&e)?,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs that once failed (or surprised), kept with their literal input.

/// A day-long time unit on leaf's 41 bits (once, `floe inspect --time-unit-ms 86400000
/// 9223372036854775807` printed a wrapped time, or panicked in a debug build).
#[test]
fn regression_day_unit_on_leaf_is_refused_not_wrapped() {
    let l = Layout::LEAF.with_time_unit_ms(86_400_000);
    assert!(l.validate().is_err());
    assert!(l.try_decode(9_223_372_036_854_775_807).is_err());
    assert_eq!(l.decode(9_223_372_036_854_775_807).timestamp_ms, u64::MAX);
}

/// `+41/10/12` was a layout (`u8::from_str` takes a sign).
#[test]
fn regression_signed_widths_are_refused() {
    assert!(Layout::preset("+41/10/12").is_err());
    assert!(Layout::preset("41/+10/12").is_err());
}

/// A 45-bit timestamp of 10 ms units passes 9999: the old property strategy's layout, now
/// refused by validate (its encode used to succeed with times RFC 3339 cannot write).
#[test]
fn regression_45_bits_of_10ms_pass_9999() {
    let l = Layout::new(45, 0, 0, 12).unwrap().with_time_unit_ms(10);
    assert!(l.validate().is_err());
}

/// `222222222222222é` is 16 characters: the error said "expected 16 characters, found 16".
#[test]
fn regression_sno_of_16_chars_17_bytes_names_the_char() {
    let e = "222222222222222é".parse::<SnoId>().unwrap_err();
    assert_eq!(
        e,
        SnoParseError::InvalidChar {
            found: 'é',
            index: 15
        }
    );
}

/// `zk://a:+5` was accepted (`u16::from_str` takes a sign), and so was a host with a space.
#[test]
fn regression_signed_ports_and_spaced_hosts_are_refused() {
    assert!(servers_and_root("zk", "zk://a:+5", "/f").is_err());
    assert!(servers_and_root("zk", "zk://a b:5", "/f").is_err());
    assert!(check_addresses("etcd", "a:1, b:2").is_err());
}

/// A Snowflake ID with a sign, spaces or digits past 64 bits.
#[test]
fn regression_snowflake_id_signs_and_overflow() {
    assert!(parse_id("+1").is_err());
    assert!(parse_id("-0").is_err());
    assert!(parse_id(" 1").is_err());
    assert_eq!(
        parse_id("18446744073709551616"),
        Err(ParseIdError::TooLarge)
    );
    assert_eq!(
        parse_id("0x1_0"),
        Err(ParseIdError::InvalidChar {
            found: '_',
            index: 3
        })
    );
}

/// `"\n".parse::<Mode>()` gave a two-line error (found by `sequence_modes_never_panic_and_round_trip`).
#[test]
fn regression_mode_error_with_a_newline_is_one_line() {
    let e = "\n".parse::<Mode>().unwrap_err();
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("expected weak or strong"), "{e}");
}

/// `8ZZZZZZZZZZZZZZZZZZZZZZZZZ` read as `0ZZZZZZZZZZZZZZZZZZZZZZZZZ` through the `ulid` crate
/// (dylanhart/ulid-rs#59): two texts, one ID. floe's parser refuses it.
#[test]
fn regression_ulid_first_character_above_7() {
    assert_eq!(
        ulid::parse("8ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
        Err(UlidParseError::Overflow { found: '8' })
    );
    assert!(ulid::parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ").is_ok());
}

/// Every input kept under `fuzz/regressions/` for floe-core's fuzz targets (crashes they
/// found, and seeds), through the same function `cargo fuzz run TARGET` calls.
#[test]
fn fuzz_regressions_replay() {
    let regressions =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    fuzz_replay::replay(&regressions, fuzz_formats::TARGETS);
}
