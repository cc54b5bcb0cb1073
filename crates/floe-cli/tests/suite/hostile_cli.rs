//! The real `floe` binary against hostile input: empty and blank IDs, bytes that are not
//! UTF-8, huge and negative numbers, unicode, very long arguments and lines, layouts whose
//! times do not fit. Every case: the documented exit code, and bad input told on one line
//! naming what was expected, never a panic.

use assert_cmd::Command;
use serde_json::Value;

/// `floe` in a working directory of its own (its `.floe` state is never another test's).
fn floe() -> Command {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cwd = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hostile-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut c = Command::cargo_bin("floe").unwrap();
    c.current_dir(cwd);
    c
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str], stdin: &[u8]) -> Run {
    let out = floe().args(args).write_stdin(stdin).output().unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run
}

/// Bad input: exit 2, nothing on standard output, one short line on standard error, which
/// contains `needle`.
fn bad(args: &[&str], needle: &str) -> String {
    let r = run(args, b"");
    assert_eq!(r.code, Some(2), "floe {args:?}: {}", r.stderr);
    assert_eq!(r.stdout, "", "floe {args:?}");
    assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
    assert!(r.stderr.starts_with("floe: error: "), "{}", r.stderr);
    assert!(r.stderr.len() < 600, "short: {}", r.stderr);
    assert!(
        r.stderr.contains(needle),
        "floe {args:?}: {} lacks {needle:?}",
        r.stderr
    );
    r.stderr
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Empty and blank input.

#[test]
fn an_empty_or_blank_argument_is_an_error_naming_what_was_expected() {
    for text in ["", "   ", "\t\n"] {
        let e = bad(
            &["inspect", text],
            "empty ID: expected a decimal Snowflake ID",
        );
        assert!(e.contains("ULID"), "{e}");
    }
    // With a format, the format's own words.
    bad(&["inspect", "--format", "snowflake", ""], "no digits");
    bad(
        &["inspect", "--format", "sno", ""],
        "expected 16 characters, found 0",
    );
    // An empty argument among good ones: the good ones are still decoded, exit 2.
    let r = run(&["inspect", "--json", "1", "", "2"], b"");
    assert_eq!(r.code, Some(2));
    assert_eq!(r.stdout.lines().count(), 2, "{}", r.stdout);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn blank_lines_on_standard_input_are_skipped_and_empty_input_is_fine() {
    let r = run(&["inspect", "--json", "-"], b"\n  \n1\r\n\r\n\t\n2\n\n");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let ids: Vec<Value> = r.stdout.lines().map(json).collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        (ids[0]["id"].as_str(), ids[1]["id"].as_str()),
        (Some("1"), Some("2"))
    );
    // Nothing at all on standard input: nothing to decode, exit 0 (as `floe gen -n 0 | floe
    // inspect -`).
    let r = run(&["inspect", "-"], b"");
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (Some(0), "", "")
    );
    // A last line without its newline is still read.
    let r = run(&["inspect", "--json", "-"], b"7");
    assert_eq!(json(r.stdout.trim())["sequence"], 7);
}

// ---------------------------------------------------------------------------------------------
// Standard input that is not text.

#[test]
fn invalid_utf8_on_standard_input_names_the_line_and_the_rest_is_read() {
    let r = run(&["inspect", "--json", "-"], b"1\n\xff\xfe\n2\nab\xc3\n3\n");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let errors: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{}", r.stderr);
    assert!(
        errors[0].starts_with("floe: error: standard input line 2: not valid UTF-8"),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains("expected one ID a line"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with(
            "floe: error: standard input line 4: not valid UTF-8 (a bad byte at byte 3"
        ),
        "{}",
        errors[1]
    );
    let ids: Vec<String> = r
        .stdout
        .lines()
        .map(|l| json(l)["id"].to_string())
        .collect();
    assert_eq!(ids, ["\"1\"", "\"2\"", "\"3\""]);
}

#[test]
fn bad_ids_on_standard_input_name_their_line() {
    let r = run(&["inspect", "-"], b"1\nnope\n\n2222222222222222x\n");
    assert_eq!(r.code, Some(2));
    let errors: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{}", r.stderr);
    assert!(
        errors[0].starts_with("floe: error: standard input line 2: unrecognised ID \"nope\""),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with("floe: error: standard input line 4: "),
        "{}",
        errors[1]
    );
}

#[test]
fn a_line_too_long_is_an_error_and_the_next_line_is_read() {
    let mut input = vec![b'1'; 1_000_000];
    input.extend_from_slice(b"\n5\n");
    let r = run(&["inspect", "--json", "-"], &input);
    assert_eq!(r.code, Some(2));
    assert_eq!(
        r.stderr.trim_end(),
        "floe: error: standard input line 1: longer than 1024 bytes; expected one ID a line"
    );
    assert_eq!(json(r.stdout.trim())["sequence"], 5);
    // 1024 bytes is not too long (spaces around an ID are trimmed).
    let mut input = vec![b' '; 1023];
    input.push(b'9');
    let r = run(&["inspect", "--json", "-"], &input);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// A megabyte of pseudo-random bytes (a fixed seed): every line is decoded or refused on its
/// own one line naming it, and the exit code says so.
#[test]
fn random_bytes_on_standard_input() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let input: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let r = run(&["inspect", "--json", "-"], &input);
    assert!(r.code == Some(2) || r.code == Some(0), "{:?}", r.code);
    let mut last = 0;
    for line in r.stderr.lines() {
        let rest = line
            .strip_prefix("floe: error: standard input line ")
            .unwrap_or_else(|| panic!("{line}"));
        let number: u64 = rest[..rest.find(':').unwrap()].parse().unwrap();
        assert!(number > last, "errors in line order: {line}");
        last = number;
        assert!(line.len() < 600, "{line}");
    }
    for line in r.stdout.lines() {
        json(line);
    }
    // Every line that is not blank gets exactly one answer: an object or an error.
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    if input.ends_with(b"\n") {
        lines.pop();
    }
    let answered = lines
        .iter()
        .filter(|l| {
            // The 1024-byte cap counts a line's \r too.
            l.len() > 1024 || {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                std::str::from_utf8(l).map_or(true, |t| !t.trim().is_empty())
            }
        })
        .count();
    assert_eq!(
        r.stdout.lines().count() + r.stderr.lines().count(),
        answered
    );
    assert_eq!(r.code, Some(if r.stderr.is_empty() { 0 } else { 2 }));
}

// ---------------------------------------------------------------------------------------------
// Numbers: huge, negative, hex.

#[test]
fn huge_negative_and_signed_snowflake_ids() {
    bad(&["inspect", "18446744073709551616"], "more than 64 bits");
    bad(&["inspect", &"9".repeat(10_000)], "more than 64 bits");
    bad(
        &["inspect", "--format", "snowflake", "+1"],
        "'+' at index 0",
    );
    bad(&["inspect", "--format", "snowflake", "٣"], "decimal number");
    bad(&["inspect", "--", "-5"], "expected a decimal Snowflake ID");
    bad(&["inspect", "0x10000000000000000"], "more than 64 bits");
    // `-5` alone is taken for an option by the argument parser: still exit 2, not a panic.
    let r = run(&["inspect", "-5"], b"");
    assert_eq!(r.code, Some(2), "{}", r.stderr);
}

#[test]
fn hex_snowflake_ids_read_as_their_decimal() {
    let dec = run(&["inspect", "--json", "515033464970412032"], b"");
    let hex = run(&["inspect", "--json", "0x725c43527000000"], b"");
    assert_eq!(hex.code, Some(0), "{}", hex.stderr);
    assert_eq!(hex.stdout, dec.stdout);
    // As `gen -o hex` prints them, with 0x before.
    let out = run(&["gen", "snowflake", "-o", "hex"], b"");
    let printed = format!("0x{}", out.stdout.trim());
    let r = run(&["inspect", "--json", &printed], b"");
    assert_eq!(json(r.stdout.trim())["format"], "snowflake", "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// Layouts whose times do not fit.

/// `floe inspect --json --time-unit-ms 86400000 9223372036854775807` printed a wrapped time
/// (a debug build panicked): 41 bits of days from leaf's epoch reach past u64 milliseconds.
#[test]
fn a_day_unit_on_leaf_is_refused_naming_the_layout() {
    let e = bad(
        &[
            "inspect",
            "--json",
            "--time-unit-ms",
            "86400000",
            "9223372036854775807",
        ],
        "invalid layout: 41 timestamp_bits of 86400000 ms time units",
    );
    assert!(e.contains("9999-12-31T23:59:59.999Z"), "{e}");
    bad(
        &["gen", "snowflake", "--time-unit-ms", "86400000"],
        "invalid layout",
    );
}

/// The boundary: 21 bits of days whose last unit starts on the last millisecond RFC 3339 can
/// write are accepted, and that unit prints as 9999-12-31T23:59:59.999Z; one millisecond of
/// epoch later the layout is refused.
#[test]
fn the_last_representable_time_is_the_boundary() {
    let last_unit = ((1u64 << 21) - 1) << 22;
    let epoch = 253_402_300_799_999 - ((1u64 << 21) - 1) * 86_400_000;
    assert_eq!(epoch, 72_208_454_399_999);
    let args = |epoch: u64| {
        vec![
            "inspect".to_string(),
            "--json".into(),
            "--layout".into(),
            "21/10/12".into(),
            "--time-unit-ms".into(),
            "86400000".into(),
            "--epoch".into(),
            epoch.to_string(),
            last_unit.to_string(),
        ]
    };
    let ok = args(epoch);
    let r = run(&ok.iter().map(String::as_str).collect::<Vec<_>>(), b"");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = json(r.stdout.trim());
    assert_eq!(v["time"], "9999-12-31T23:59:59.999Z");
    assert_eq!(v["timestamp_ms"], 253_402_300_799_999u64);
    let over = args(epoch + 1);
    bad(
        &over.iter().map(String::as_str).collect::<Vec<_>>(),
        "reach 253402300800000 ms, past 9999-12-31T23:59:59.999Z",
    );
    // 47 bits of milliseconds from 1970 fit (year 6429); 48 do not (year 10889).
    let r = run(
        &[
            "inspect", "--json", "--layout", "47/5/12", "--epoch", "0", "1",
        ],
        b"",
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    bad(
        &["inspect", "--layout", "48/4/12", "1"],
        "48 timestamp_bits",
    );
}

#[test]
fn epochs_and_time_units_out_of_range() {
    bad(
        &["inspect", "--epoch", "18446744073709551615", "1"],
        "invalid epoch: 18446744073709551615 ms is past 9999",
    );
    bad(
        &["inspect", "--epoch", "18446744073709551616", "1"],
        "more than 18446744073709551615 ms",
    );
    bad(&["inspect", "--epoch=-1", "1"], "before 1970");
    bad(
        &["inspect", "--epoch", "1969-12-31T23:59:59.9995Z", "1"],
        "before 1970",
    );
    bad(
        &["inspect", "--epoch", "2023-01-01T00:00:00.0005Z", "1"],
        "finer than a millisecond",
    );
    bad(&["inspect", "--epoch", "+5", "1"], "RFC 3339");
    bad(
        &["inspect", "--epoch", "2016-12-31T23:59:60Z", "1"],
        "a leap second",
    );
    bad(
        &["inspect", "--epoch", "10000-01-01T00:00:00Z", "1"],
        "RFC 3339",
    );
    bad(
        &["inspect", "--epoch", "0000-01-01T00:00:00Z", "1"],
        "before 1970",
    );
    bad(
        &["inspect", "--epoch", "2023-02-30T00:00:00Z", "1"],
        "RFC 3339",
    );
    bad(
        &["inspect", "--epoch", &"é".repeat(50_000), "1"],
        "(100000 bytes)",
    );
    bad(
        &["inspect", "--time-unit-ms", "0", "1"],
        "invalid time_unit",
    );
    bad(
        &["inspect", "--time-unit-ms", "86400001", "1"],
        "at most one day",
    );
    bad(&["inspect", "--layout", "+41/10/12", "1"], "bit widths");
    bad(&["inspect", "--layout", "41/10/12/", "1"], "bit widths");
    // The argument parser refuses a negative or huge time unit itself: exit 2, no panic.
    for unit in ["-1", "18446744073709551616"] {
        let r = run(&["inspect", &format!("--time-unit-ms={unit}"), "1"], b"");
        assert_eq!(r.code, Some(2), "{unit}: {}", r.stderr);
    }
}

#[test]
fn partitions_with_signs_are_refused() {
    for p in ["+5", "0x+ff", "0x", "65536", "0x10000", " 1"] {
        bad(&["gen", "sno", "--partition", p], "invalid partition");
    }
    let r = run(&["gen", "sno", "--partition", "0XFFFF", "-o", "json"], b"");
    assert_eq!(json(r.stdout.trim())["partition"], 65535, "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// Unicode and very long arguments.

#[test]
fn unicode_and_control_characters_stay_on_one_escaped_line() {
    bad(&["inspect", "é"], "unrecognised ID \"é\"");
    bad(&["inspect", "\u{1f600}"], "unrecognised ID");
    // A right-to-left override and an escape sequence are quoted escaped, never raw.
    let e = bad(&["inspect", "ab\u{202e}cd"], "unrecognised ID");
    assert!(!e.contains('\u{202e}'), "{e:?}");
    let e = bad(&["inspect", "\u{1b}[31mred"], "unrecognised ID");
    assert!(!e.contains('\u{1b}'), "{e:?}");
    // 16 characters, 17 bytes: a sno whose character is wrong, not its length.
    bad(
        &["inspect", "222222222222222é"],
        "invalid sno character 'é' at index 15",
    );
    bad(
        &[
            "inspect",
            "--format",
            "lexical",
            "00000000-00ff-9281-ffffffffa009199é",
        ],
        "invalid LexicalUUID character 'é' at index 34",
    );
    bad(
        &["inspect", "--format", "uuid7", "a\u{202e}b\n"],
        "invalid UUID",
    );
}

#[test]
fn a_very_long_argument_is_quoted_short() {
    let long = "x".repeat(120_000);
    let e = bad(&["inspect", &long], "(120000 bytes)");
    assert!(e.len() < 300, "{} bytes", e.len());
    bad(&["inspect", "--format", "ulid", &long], "invalid ULID");
    bad(&["inspect", "--format", "uuid7", &long], "invalid UUID");
    bad(&["inspect", "--layout", &long, "1"], "unknown layout");
}

// ---------------------------------------------------------------------------------------------
// Surprises found by hand against the release binary.

/// The `ulid` crate reads a first character above 7 by dropping two bits:
/// `8ZZZZZZZZZZZZZZZZZZZZZZZZZ` printed as ULID `0ZZZZZZZZZZZZZZZZZZZZZZZZZ`.
#[test]
fn a_ulid_past_128_bits_is_refused() {
    bad(&["inspect", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"], "above 7");
    bad(
        &["inspect", "--format", "ulid", "zzzzzzzzzzzzzzzzzzzzzzzzzz"],
        "above 7",
    );
    let r = run(&["inspect", "--json", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"], b"");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v = json(r.stdout.trim());
    assert_eq!(v["id"], "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
    // 2^48 - 1 ms is in the year 10889: past RFC 3339, so no time, said so.
    assert_eq!(v["time"], Value::Null);
    assert_eq!(v["timestamp_ms"], 281_474_976_710_655u64);
    let r = run(&["inspect", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"], b"");
    assert!(
        r.stdout.contains("(outside RFC 3339's years 0000 to 9999)"),
        "{}",
        r.stdout
    );
}

/// Lower-case and mixed-case ULIDs read as their canonical upper case.
#[test]
fn ulids_read_in_either_case() {
    let r = run(&["inspect", "--json", "01arz3ndektsv4rrffq69g5fav"], b"");
    assert_eq!(
        json(r.stdout.trim())["id"],
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "{}",
        r.stderr
    );
}

/// The uuid crate's own message can be bare ("failed to parse a UUID"): the error also says
/// what was expected.
#[test]
fn a_bad_uuid_says_what_was_expected() {
    bad(
        &["inspect", "--format", "uuid7", &"a".repeat(200)],
        "expected 32 hex digits as 8-4-4-4-12",
    );
    bad(
        &["inspect", "01890a5d-ac96-774b-bcce-b302099a805g"],
        "expected 32 hex digits as 8-4-4-4-12",
    );
}

/// An argument that is not UTF-8 is refused by the argument parser before floe sees it: exit
/// 2, no panic (its message is clap's, several lines, naming no argument).
#[test]
fn an_argument_not_utf8_exits_2() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    for args in [
        vec![OsStr::new("inspect"), OsStr::from_bytes(b"\xff\xfe")],
        vec![
            OsStr::new("inspect"),
            OsStr::new("--epoch"),
            OsStr::from_bytes(b"\xff"),
            OsStr::new("1"),
        ],
    ] {
        let out = floe().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("invalid UTF-8"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
