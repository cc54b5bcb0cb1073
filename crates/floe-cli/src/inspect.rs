//! `floe inspect`: recognise an ID's format from its text and decode it.

use std::io::{self, BufRead};

use floe_core::kind::{IdKind, IdText, Undetected, EXPECTED_TEXT};
use floe_core::lexical::LexicalUuid;
use floe_core::sno::SnoId;
use floe_core::snowflake::Layout;
use floe_core::ulid::Ulid;
use floe_core::uuid7::{self, Uuid};

use crate::describe::Described;

/// The format `inspect` reads: a kind, or `None` to tell it from the text ([`IdKind::detect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Format(pub Option<IdKind>);

/// `--format`: `auto` or a kind's name, floe-core's list and summaries the help's.
pub(crate) fn format_parser() -> impl clap::builder::TypedValueParser<Value = Format> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let auto = PossibleValue::new("auto").help("Tell the format from the text");
    let kinds = IdKind::ALL.map(|k| PossibleValue::new(k.name()).help(k.summary()));
    PossibleValuesParser::new(std::iter::once(auto).chain(kinds)).try_map(|name| {
        match name.as_str() {
            "auto" => Ok(Format(None)),
            kind => IdKind::parse(kind).map(|k| Format(Some(k))),
        }
    })
}

/// The longest line `floe inspect -` reads from standard input, in bytes (the longest ID's
/// text is 36 characters; the room left is for spaces around it).
pub(crate) const MAX_LINE: usize = 1024;

/// How much of a bad input an error message quotes, in characters.
const SHOWN_CHARS: usize = 64;

/// `text` quoted for an error message: all of it when short, else its first characters and
/// its length (a megabyte of garbage stays a short line).
pub(crate) fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// Decodes one ID (the caller trims it). An empty text is an error naming what was expected.
pub(crate) fn inspect(text: &str, format: Format, layout: &Layout) -> Result<Described, String> {
    let kind = match format.0 {
        Some(kind) => kind,
        None => IdKind::detect(text).map_err(|e| match e {
            Undetected::Empty => e.to_string(),
            Undetected::Ambiguous => format!(
                "{}: {e}; pass --format lexical or --format uuid7",
                shown(text)
            ),
            Undetected::Unrecognised => {
                format!("unrecognised ID {}: {EXPECTED_TEXT}", shown(text))
            }
        })?,
    };
    let parsed = |e: &dyn std::fmt::Display| format!("{}: {e}", shown(text));
    match kind {
        IdKind::Snowflake => snowflake(text, layout),
        IdKind::Sno => SnoId::parse_text(text)
            .map(Described::Sno)
            .map_err(|e| parsed(&e)),
        IdKind::Lexical => LexicalUuid::parse_text(text)
            .map(Described::Lexical)
            .map_err(|e| parsed(&e)),
        IdKind::Uuid7 => {
            let id = Uuid::parse_text(text).map_err(|e| {
                // The uuid crate's message can be as bare as "failed to parse a UUID": say
                // what was expected too.
                parsed(&format!(
                    "invalid UUID ({}): expected 32 hex digits as 8-4-4-4-12",
                    shown_error(&e.to_string())
                ))
            })?;
            let parts = uuid7::inspect(&id).map_err(|e| parsed(&e))?;
            Ok(Described::Uuid7 { id, parts })
        }
        IdKind::Ulid => Ulid::parse_text(text)
            .map(Described::Ulid)
            .map_err(|e| parsed(&e)),
    }
}

/// A library's error message, kept to one line and a bounded length (the `uuid` crate quotes
/// the input in some of its messages).
fn shown_error(msg: &str) -> String {
    let one_line: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match one_line.char_indices().nth(4 * SHOWN_CHARS) {
        None => one_line,
        Some((end, _)) => format!("{}...", &one_line[..end]),
    }
}

fn snowflake(text: &str, layout: &Layout) -> Result<Described, String> {
    let id = u64::parse_text(text).map_err(|e| format!("{}: {e}", shown(text)))?;
    if layout.has_stray_bits(id) {
        return Err(format!(
            "{}: has bits above the {} bits of layout {layout}; pass the layout it was made with (--layout)",
            shown(text),
            layout.total_bits()
        ));
    }
    // The layout was validated, so its times fit; an error here would be a bug, said as one.
    let parts = layout
        .try_decode(id)
        .map_err(|e| format!("{}: {e}", shown(text)))?;
    Ok(Described::Snowflake { id, parts })
}

/// Reads one line of at most `cap` bytes (without its `\n`) into `buf`, whatever the bytes:
/// `None` at the end of the input, else whether the line was longer than `cap` (its rest is
/// read and dropped, so a line of garbage never fills memory).
pub(crate) fn read_line<R: BufRead>(
    input: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Option<bool>> {
    buf.clear();
    let mut read_any = false;
    let mut too_long = false;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            break;
        }
        read_any = true;
        let (part, used, end) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], i + 1, true),
            None => (chunk, chunk.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        if part.len() > room {
            too_long = true;
        }
        buf.extend_from_slice(&part[..part.len().min(room)]);
        input.consume(used);
        if end {
            break;
        }
    }
    Ok(read_any.then_some(too_long))
}

/// The ID on line `number` of standard input (as [`read_line`] read it): `None` for a blank
/// line (skipped), an error naming the line for one too long or not UTF-8.
pub(crate) fn stdin_line(number: u64, line: &[u8], too_long: bool) -> Result<Option<&str>, String> {
    if too_long {
        return Err(format!(
            "standard input line {number}: longer than {MAX_LINE} bytes; expected one ID a line"
        ));
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|e| {
        format!(
            "standard input line {number}: not valid UTF-8 (a bad byte at byte {} of the line); expected one ID a line",
            e.valid_up_to() + 1
        )
    })?;
    let text = text.trim();
    Ok((!text.is_empty()).then_some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        let l = Layout::LEAF;
        assert!(matches!(
            inspect("12345", Format(None), &l),
            Ok(Described::Snowflake { .. })
        ));
        assert!(matches!(
            inspect("brpk4q72xwf2m63l", Format(None), &l),
            Ok(Described::Sno(_))
        ));
        assert!(matches!(
            inspect("00000000-00ff-9281-ffffffffa0091991", Format(None), &l),
            Ok(Described::Lexical(_))
        ));
        assert!(matches!(
            inspect("01ARZ3NDEKTSV4RRFFQ69G5FAV", Format(None), &l),
            Ok(Described::Ulid(_))
        ));
        assert!(matches!(
            inspect("2345678923456789", Format(None), &l),
            Ok(Described::Sno(_))
        ));
        assert!(matches!(
            inspect("2345678923456789", Format(Some(IdKind::Snowflake)), &l),
            Ok(Described::Snowflake { .. })
        ));
        assert!(matches!(
            inspect("1345678923456789", Format(None), &l),
            Ok(Described::Snowflake { .. })
        ));
        let e = inspect("0123456789abcdef0123456789abcdef", Format(None), &l).unwrap_err();
        assert!(e.contains("ambiguous"), "{e}");
        let e = inspect("hello", Format(None), &l).unwrap_err();
        assert!(e.contains("expected a decimal Snowflake ID"), "{e}");
        let e = inspect("18446744073709551615", Format(None), &l).unwrap_err();
        assert!(e.contains("bits above"), "{e}");
        let e = inspect("99999999999999999999", Format(None), &l).unwrap_err();
        assert!(e.contains("decimal number"), "{e}");
        let e = inspect("brpk4q72xwF2m63l", Format(None), &l).unwrap_err();
        assert!(e.contains("index 10"), "{e}");
    }
}

/// Hostile input for the command line's own parsers (`--epoch`, `--partition`, `--layout` with
/// `--epoch` and `--time-unit-ms`, `inspect`'s ID text and its standard input lines). They
/// live in the binary, so their properties live here; floe-core's parsers are in
/// `floe-core/tests/hostile.rs`.
#[cfg(test)]
mod hostile {
    use super::*;
    use crate::describe::rfc3339;
    use crate::{parse_epoch, parse_partition, SnowflakeArgs};
    use floe_core::sno::Partition;
    use floe_core::snowflake::MAX_TIME_MS;
    use proptest::prelude::*;
    use proptest::test_runner::Config;
    use std::io::{BufReader, Cursor};

    /// Cases for each property: these parse and format more per case than floe-core's, and
    /// floe-core's properties already run millions of cases of the same parsers.
    const CASES: u32 = 20_000;

    fn cases(cases: u32) -> Config {
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        }
    }

    /// Text mostly of `alphabet`, now and then any character or one that often breaks
    /// parsers (one random `u32` a character).
    fn hostile(
        alphabet: &'static str,
        len: std::ops::RangeInclusive<usize>,
    ) -> BoxedStrategy<String> {
        const SPECIALS: [char; 10] = [
            '\n',
            '\r',
            '\0',
            ' ',
            '-',
            '+',
            ':',
            'é',
            '\u{202e}',
            '\u{1f600}',
        ];
        let chars: Vec<char> = alphabet.chars().collect();
        proptest::collection::vec(any::<u32>(), len)
            .prop_map(move |raw| {
                raw.into_iter()
                    .map(|r| match r % 16 {
                        0 => SPECIALS[(r >> 4) as usize % SPECIALS.len()],
                        1 => char::from_u32((r >> 4) % 0x11_0000).unwrap_or('\u{fffd}'),
                        _ => chars[(r >> 4) as usize % chars.len()],
                    })
                    .collect()
            })
            .boxed()
    }

    /// A one-line message, short even for a long input.
    fn one_short_line(msg: &str) -> Result<(), TestCaseError> {
        prop_assert!(!msg.is_empty());
        prop_assert!(!msg.contains(['\n', '\r']), "{msg:?}");
        prop_assert!(msg.len() < 1024, "{} bytes: {msg:?}", msg.len());
        Ok(())
    }

    fn epoch_text() -> impl Strategy<Value = String> {
        prop_oneof![
            2 => hostile("0123456789", 0..=22),
            2 => hostile("0123456789-:TZ.+", 18..=36),
            1 => (0i64..=253_402_300_799_999, 0u32..3).prop_map(|(ms, style)| {
                let nanos = i128::from(ms) * 1_000_000;
                let text = rfc3339(nanos).unwrap();
                match style {
                    0 => text,
                    1 => text.replace('Z', "+00:00"),
                    _ => text.replace('Z', ".0000001Z"),
                }
            }),
            1 => any::<i64>().prop_map(|n| n.to_string()),
        ]
    }

    fn all_formats() -> impl Strategy<Value = Format> {
        let kinds = IdKind::ALL.map(|k| Format(Some(k)));
        proptest::sample::select(
            std::iter::once(Format(None))
                .chain(kinds)
                .collect::<Vec<_>>(),
        )
    }

    proptest! {
        #![proptest_config(cases(CASES))]

        /// An accepted epoch reads back from its digits and from its RFC 3339 time.
        #[test]
        fn epochs_never_panic_and_round_trip(text in epoch_text()) {
            match parse_epoch(&text) {
                Ok(ms) => {
                    prop_assert_eq!(parse_epoch(&ms.to_string()), Ok(ms));
                    if let Some(t) = rfc3339(i128::from(ms) * 1_000_000) {
                        prop_assert_eq!(parse_epoch(&t), Ok(ms));
                    }
                }
                Err(e) => {
                    one_short_line(&e)?;
                    prop_assert!(e.starts_with("invalid epoch"), "{e}");
                }
            }
        }

        #[test]
        fn every_u64_epoch_reads_and_no_negative_does(ms: u64, negative in i64::MIN..0) {
            prop_assert_eq!(parse_epoch(&ms.to_string()), Ok(ms));
            let e = parse_epoch(&negative.to_string()).unwrap_err();
            prop_assert!(e.contains("before 1970"), "{e}");
        }

        /// An accepted partition reads back from its decimal and its hex.
        #[test]
        fn partitions_never_panic_and_round_trip(
            text in prop_oneof![
                hostile("0123456789", 0..=7),
                hostile("0123456789abcdefABCDEF", 0..=6).prop_map(|h| format!("0x{h}")),
            ]
        ) {
            match parse_partition(&text) {
                Ok(p) => {
                    let n = p.as_u16();
                    prop_assert_eq!(parse_partition(&n.to_string()), Ok(p));
                    prop_assert_eq!(parse_partition(&format!("{n:#06x}")), Ok(p));
                    prop_assert_eq!(parse_partition(&format!("{n:#X}").replacen('x', "X", 1)), Ok(p));
                }
                Err(e) => one_short_line(&e)?,
            }
        }

        #[test]
        fn every_u16_partition_reads(n: u16) {
            prop_assert_eq!(parse_partition(&n.to_string()), Ok(Partition::from_u16(n)));
        }

        /// `--layout`, `--epoch` and `--time-unit-ms` of any value: refused on one line, or a
        /// valid layout under which any ID inspects to a time RFC 3339 can write.
        #[test]
        fn layout_options_never_panic(
            layout in prop_oneof![
                proptest::sample::select(vec!["leaf", "twitter", "flake-idgen", "nope", ""]).prop_map(String::from),
                (1u8..=64, 0u8..=20, 0u8..=34, 0u8..=34).prop_map(|(a, b, c, d)| format!("{a}/{b}/{c}/{d}")),
                hostile("0123456789/", 0..=12),
            ],
            epoch in proptest::option::of(epoch_text()),
            unit in proptest::option::of(prop_oneof![0u64..=86_400_001, any::<u64>()]),
            id: u64,
        ) {
            let args = SnowflakeArgs { layout, epoch, time_unit_ms: unit };
            match args.layout() {
                Ok(l) => {
                    prop_assert!(l.last_time_ms().is_some_and(|t| t <= MAX_TIME_MS));
                    let id = if l.total_bits() < 64 { id & ((1 << l.total_bits()) - 1) } else { id };
                    let d = inspect(&id.to_string(), Format(None), &l);
                    let d = match d {
                        Ok(d) => d,
                        // 16 digits of 2-9 are a sno, as the detection says.
                        Err(_) => inspect(&id.to_string(), Format(Some(IdKind::Snowflake)), &l).unwrap(),
                    };
                    prop_assert!(d.fields()["time"].is_string(), "{}", d.json_line());
                    let hex = inspect(&format!("{id:#x}"), Format(None), &l).unwrap();
                    prop_assert_eq!(hex.json_line(), inspect(&id.to_string(), Format(Some(IdKind::Snowflake)), &l).unwrap().json_line());
                }
                Err(e) => one_short_line(&e)?,
            }
        }

        /// Any text in any format: a one-line, short error, or an ID whose text inspects to
        /// the same ID again.
        #[test]
        fn inspect_never_panics_and_round_trips(
            text in prop_oneof![
                hostile("0123456789", 0..=22),
                hostile("0123456789abcdefx", 0..=20),
                hostile("23456789abcdefghijklmnopqrstuvwx", 15..=17),
                hostile("0123456789abcdef-", 31..=37),
                hostile("0123456789ABCDEFGHJKMNPQRSTVWXYZ", 25..=27),
                hostile("0123456789", 2000..=3000),
            ],
            format in all_formats(),
        ) {
            match inspect(&text, format, &Layout::LEAF) {
                Ok(d) => {
                    let again = inspect(&d.id_text(), format, &Layout::LEAF).unwrap();
                    prop_assert_eq!(again.json_line(), d.json_line());
                    let _ = d.text_block();
                }
                Err(e) => one_short_line(&e)?,
            }
        }

        /// Lines read with a cap are the input's lines, cut at the cap and flagged, whatever
        /// the bytes and wherever the reader's buffer ends.
        #[test]
        fn lines_are_read_within_the_cap(
            input in proptest::collection::vec(any::<u16>(), 0..200).prop_map(|raw| {
                // Any byte, with many line ends among them.
                raw.into_iter()
                    .map(|r| match r % 8 {
                        0 => b'\n',
                        1 => b'\r',
                        _ => (r >> 8) as u8,
                    })
                    .collect::<Vec<u8>>()
            }),
            cap in 0usize..20,
            buffer in 1usize..16,
        ) {
            let mut reader = BufReader::with_capacity(buffer, Cursor::new(input.clone()));
            let mut got = Vec::new();
            let mut line = Vec::new();
            while let Some(too_long) = read_line(&mut reader, &mut line, cap).unwrap() {
                got.push((line.clone(), too_long));
            }
            let mut want: Vec<(Vec<u8>, bool)> = input
                .split(|&b| b == b'\n')
                .map(|l| (l[..l.len().min(cap)].to_vec(), l.len() > cap))
                .collect();
            // A final newline ends the last line; it does not start an empty one.
            if input.is_empty() || input.ends_with(b"\n") {
                want.pop();
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn stdin_lines_never_panic(line in proptest::collection::vec(any::<u8>(), 0..80), number: u64) {
            match stdin_line(number, &line, false) {
                Ok(Some(text)) => prop_assert!(!text.is_empty() && text.trim() == text),
                Ok(None) => {}
                Err(e) => {
                    one_short_line(&e)?;
                    prop_assert!(e.starts_with(&format!("standard input line {number}: ")), "{e}");
                }
            }
        }
    }

    // Inputs that once failed or surprised, with their literal input.

    #[test]
    fn regression_empty_and_blank_ids_are_errors() {
        for text in ["", "   "] {
            let e = inspect(text.trim(), Format(None), &Layout::LEAF).unwrap_err();
            assert!(
                e.starts_with("empty ID: expected a decimal Snowflake ID"),
                "{e}"
            );
        }
    }

    #[test]
    fn regression_epochs() {
        // Truncated towards zero, this was epoch 0.
        let e = parse_epoch("1969-12-31T23:59:59.9995Z").unwrap_err();
        assert!(e.contains("before 1970"), "{e}");
        let e = parse_epoch("1969-12-31T23:59:59.999Z").unwrap_err();
        assert!(e.contains("before 1970"), "{e}");
        // `time` reads a leap second as 59.999999999: it was "finer than a millisecond".
        let e = parse_epoch("2016-12-31T23:59:60Z").unwrap_err();
        assert!(e.contains("a leap second"), "{e}");
        let e = parse_epoch("2023-01-01T00:00:00.0005Z").unwrap_err();
        assert!(e.contains("finer than a millisecond"), "{e}");
        assert_eq!(
            parse_epoch("2023-01-01T00:00:00.123Z"),
            Ok(1_672_531_200_123)
        );
        // u64::from_str takes a sign.
        assert!(parse_epoch("+5").is_err());
        let e = parse_epoch("18446744073709551616").unwrap_err();
        assert!(e.contains("more than 18446744073709551615"), "{e}");
        let e = parse_epoch(&"9".repeat(100_000)).unwrap_err();
        assert!(e.len() < 400, "{} bytes", e.len());
    }

    #[test]
    fn regression_partitions_with_signs() {
        for text in ["+5", "0x+ff", "0x", "", " 5", "-0"] {
            assert!(parse_partition(text).is_err(), "{text:?}");
        }
        assert_eq!(parse_partition("0XFFFF"), Ok(Partition::from_u16(u16::MAX)));
    }

    #[test]
    fn regression_day_unit_on_leaf() {
        let args = SnowflakeArgs {
            layout: "leaf".into(),
            epoch: None,
            time_unit_ms: Some(86_400_000),
        };
        let e = args.layout().unwrap_err();
        assert!(e.starts_with("invalid layout: 41 timestamp_bits"), "{e}");
    }

    #[test]
    fn regression_hex_snowflake_ids() {
        let l = Layout::LEAF;
        let dec = inspect("515033464970412032", Format(None), &l).unwrap();
        let hex = inspect("0x0725C43527000000", Format(None), &l).unwrap();
        assert_eq!(hex.json_line(), dec.json_line());
        // A ULID may start 0x (Crockford base32 reads x as X): 26 characters stay a ULID.
        assert!(matches!(
            inspect("0x000000000000000000000000", Format(None), &l),
            Ok(Described::Ulid(_))
        ));
        let e = inspect("0x", Format(None), &l).unwrap_err();
        assert!(e.contains("no digits"), "{e}");
    }

    /// The ulid crate read 8ZZZZZZZZZZZZZZZZZZZZZZZZZ as 0ZZZZZZZZZZZZZZZZZZZZZZZZZ (found
    /// by hand against the release binary).
    #[test]
    fn regression_ulid_past_128_bits() {
        let e = inspect("8ZZZZZZZZZZZZZZZZZZZZZZZZZ", Format(None), &Layout::LEAF).unwrap_err();
        assert!(e.contains("above 7"), "{e}");
    }

    #[test]
    fn regression_long_and_odd_text_is_quoted_short() {
        let long = "z".repeat(100_000);
        let e = inspect(&long, Format(None), &Layout::LEAF).unwrap_err();
        assert!(e.len() < 400 && e.contains("(100000 bytes)"), "{e}");
        let e = inspect(&"1".repeat(5_000), Format(None), &Layout::LEAF).unwrap_err();
        assert!(e.len() < 400 && e.contains("more than 64 bits"), "{e}");
        let e = inspect("a\u{202e}b\n", Format(Some(IdKind::Uuid7)), &Layout::LEAF).unwrap_err();
        assert!(!e.contains(['\n', '\u{202e}']), "{e:?}");
    }
}
