//! `--template`, `floe scramble` and `floe unscramble`, on the real binary.

use crate::common;

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{cmd, ok, run};

fn state() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn lines(out: Output) -> Vec<String> {
    ok(out).lines().map(String::from).collect()
}

fn fails(out: &Output, code: i32, why: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert!(err.contains(why), "expected {why:?} in: {err}");
    err
}

/// The example, on a fresh state directory.
#[test]
fn seq_template_on_a_fresh_state_directory() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    let args = [
        "seq",
        "orders",
        "-n",
        "3",
        "--increment",
        "strong",
        "--state-dir",
        d,
    ];
    let out = cmd()
        .args(args)
        .args(["--template", "ORD-{seq:06}"])
        .output()
        .unwrap();
    assert_eq!(lines(out), ["ORD-000001", "ORD-000002", "ORD-000003"]);
    // The template only shows the number: the key goes on from 3.
    assert_eq!(lines(run(&args[..])), ["4", "5", "6"]);
}

/// `floe seq` with a dated template at a given time (libfaketime), in `dir`.
fn seq_at(dir: &str, at: &str, n: &str) -> Output {
    cmd()
        .args([
            "seq",
            "orders",
            "-n",
            n,
            "--increment",
            "strong",
            "--state-dir",
            dir,
        ])
        .args(["--template", "ORD-{date:%Y%m%d}-{seq:04}{damm}"])
        .env("LD_PRELOAD", common::faults::faketime_lib())
        .env("FAKETIME", format!("@{at}"))
        .env("DONT_FAKE_MONOTONIC", "1")
        .output()
        .unwrap()
}

/// Numbers start again each day under KEY@DATE; a run whose clock is behind (before
/// midnight again) goes on with that day's numbers: nothing repeats, nothing goes back.
#[test]
fn dated_templates_number_each_day_and_never_repeat_across_midnight() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    for (at, n) in [
        ("2026-11-23 23:59:58", "2"),
        ("2026-11-24 00:00:01", "2"),
        // A node whose clock is 5 s behind, after midnight.
        ("2026-11-23 23:59:57", "1"),
        ("2026-11-24 00:00:02", "1"),
    ] {
        for id in lines(seq_at(d, at, n)) {
            assert!(seen.insert(id.clone()), "{id} repeated");
            assert!(floe_core::template::damm_valid(&id), "{id}");
            all.push(id);
        }
    }
    let body: Vec<&str> = all.iter().map(|s| &s[..17]).collect();
    assert_eq!(
        body,
        [
            "ORD-20261123-0001",
            "ORD-20261123-0002",
            "ORD-20261124-0001",
            "ORD-20261124-0002",
            "ORD-20261123-0003",
            "ORD-20261124-0003",
        ]
    );
    // The period's key is an ordinary key.
    assert_eq!(
        lines(run(&[
            "seq",
            "orders@20261124",
            "--increment",
            "strong",
            "--state-dir",
            d
        ])),
        ["4"]
    );
    // In another time zone the same moment is another day: 2026-11-23 in New York, whose key
    // orders@20261123 is at 3 already (the key is the date, whatever the rest of the text).
    let out = cmd()
        .args(["seq", "orders", "--increment", "strong", "--state-dir", d])
        .args([
            "--template",
            "{date:%Y%m%d}-{seq}",
            "--utc-offset",
            "-05:00",
        ])
        .env("LD_PRELOAD", common::faults::faketime_lib())
        .env("FAKETIME", "@2026-11-24 00:00:03")
        .env("DONT_FAKE_MONOTONIC", "1")
        .output()
        .unwrap();
    assert_eq!(lines(out), ["20261123-4"]);
}

/// A number wider than its width stops the run with exit 2: never cut into a repeat.
#[test]
fn a_number_too_wide_stops_never_repeats() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    let out = run(&[
        "seq",
        "k",
        "-n",
        "12",
        "--increment",
        "strong",
        "--state-dir",
        d,
        "--template",
        "A{seq:01}",
    ]);
    let err = fails(
        &out,
        2,
        "{seq:01}: the value has 2 characters, more than its width of 1",
    );
    assert!(err.contains("refusing to cut it"), "{err}");
    let printed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        printed,
        (1..=9).map(|i| format!("A{i}")).collect::<Vec<_>>()
    );
}

#[test]
fn templates_are_checked_before_anything_is_issued() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    for (template, why) in [
        ("ORD-{sequence}", "unknown placeholder {sequence} at 4"),
        ("{meta.uid}{seq}", "both have no width"),
        ("{luhn}{seq}", "no digits before it"),
        ("{seq:0}", "expected a width of 1 to 20 digits"),
        ("ORD", "expected {seq}"),
        (
            "{meta.uid:08}{seq:08}",
            "{meta.uid} needs a value: --set uid=VALUE",
        ),
    ] {
        let out = run(&["seq", "k", "--state-dir", d, "--template", template]);
        fails(&out, 2, why);
    }
    for (option, value, why) in [
        ("--set", "x=1", "the template has no {meta.x}"),
        ("--utc-offset", "8", "expected +HH:MM, -HH:MM or UTC"),
    ] {
        let out = run(&[
            "seq",
            "k",
            "--state-dir",
            d,
            "--template",
            "{seq}",
            option,
            value,
        ]);
        fails(&out, 2, why);
    }
    // Nothing was issued by the refused runs.
    assert_eq!(
        lines(run(&[
            "seq",
            "k",
            "--increment",
            "strong",
            "--state-dir",
            d
        ])),
        ["1"]
    );
    let uid = run(&[
        "seq",
        "k",
        "--increment",
        "strong",
        "--state-dir",
        d,
        "--template",
        "{meta.uid:08}{seq:08}",
        "--set",
        "uid=1234",
    ]);
    assert_eq!(lines(uid), ["0000123400000002"]);
}

/// Snowflake IDs through a template: {date} is the ID's own time; a width today's IDs do not
/// fit is refused before any ID is made.
#[test]
fn gen_snowflake_with_a_template() {
    let out = run(&[
        "gen",
        "snowflake",
        "-n",
        "5000",
        "--worker",
        "3",
        "--template",
        "S{id}{luhn}",
    ]);
    let ids = lines(out);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 5000);
    assert!(ids
        .iter()
        .all(|i| i.starts_with('S') && floe_core::template::luhn_valid(i)));
    let today = {
        let out = run(&["gen", "snowflake", "--template", "{date:%Y-%m-%d} {id}"]);
        ok(out)
    };
    let (date, id) = today.trim().split_once(' ').unwrap();
    let inspected = ok(run(&["inspect", id]));
    assert!(inspected.contains(date), "{inspected} / {date}");
    fails(
        &run(&["gen", "snowflake", "--template", "{id:10}"]),
        2,
        "more than {id:10} can hold: widen it",
    );
    fails(
        &run(&["gen", "sno", "--template", "{id}"]),
        2,
        "applies to snowflake IDs",
    );
    fails(
        &run(&["gen", "snowflake", "-o", "json", "--template", "{id}"]),
        2,
        "--output must be text",
    );
}

fn key_file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn with_stdin(args: &[&str], input: &str, env: Option<(&str, &str)>) -> Output {
    let mut c: Command = cmd();
    c.args(args).stdin(Stdio::piped());
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    // Written from another thread: the output is read meanwhile, so neither pipe fills up.
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out
}

const OLD: &str = "3c1e8f4a9b2d7c6e5f40312a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c";
const NEW: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

/// 20,000 consecutive numbers scramble to distinct IDs that read back, from stdin, with the
/// key from the environment; a rotated key file still reads what the old key made.
#[test]
fn scramble_and_unscramble_round_trip_and_rotate() {
    let dir = state();
    let input: String = (1..=20_000).map(|i| format!("{i}\n")).collect();
    let key = format!("1:{OLD}");
    let out = with_stdin(
        &["scramble", "-"],
        &input,
        Some(("FLOE_SCRAMBLE_KEY", &key)),
    );
    let scrambled = lines(out);
    assert_eq!(scrambled.len(), 20_000);
    assert_eq!(scrambled.iter().collect::<HashSet<_>>().len(), 20_000);
    assert!(scrambled
        .iter()
        .all(|s| s.len() == 20 && s.starts_with('1')));
    let ups = scrambled.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(
        (9_000..11_000).contains(&ups),
        "{ups} of 19,999 steps go up"
    );
    // Rotation: the new key first, the old one kept.
    let rotated = key_file(
        &dir,
        "keys",
        &format!("# rotated 2026-11\n2:{NEW}\n1:{OLD}\n"),
    );
    let back = with_stdin(
        &["unscramble", "--key-file", &rotated, "-"],
        &scrambled.join("\n"),
        None,
    );
    let back = lines(back);
    assert_eq!(
        back,
        (1..=20_000).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    let new_ids = lines(run(&["scramble", "--key-file", &rotated, "1", "2"]));
    assert!(new_ids.iter().all(|s| s.starts_with('2')));
    assert_ne!(new_ids[0][1..], scrambled[0][1..]);
    // The old key alone cannot read the new key's IDs, and says why.
    let old_only = key_file(&dir, "old", &format!("1:{OLD}"));
    fails(
        &run(&["unscramble", "--key-file", &old_only, &new_ids[0]]),
        2,
        "key ID 2: no such key",
    );
    // Raw numbers and a decimal domain.
    let raw = lines(run(&[
        "scramble",
        "--key-file",
        &rotated,
        "--domain",
        "digits:8",
        "--raw",
        "7",
    ]));
    assert!(raw[0].len() <= 8);
    let raw_back = run(&[
        "unscramble",
        "--key-file",
        &rotated,
        "--domain",
        "digits:8",
        "--raw",
        &raw[0],
    ]);
    assert_eq!(lines(raw_back), ["7"]);
}

/// Bad keys, domains and IDs exit 2 with the reason; no key ever appears in an error.
#[test]
fn scramble_refuses_bad_input_and_never_prints_a_key() {
    let dir = state();
    let short = &NEW[..62];
    for (text, why) in [
        (format!("1:{short}"), "found 62 characters"),
        (format!("1:{short}zz"), "hex digits"),
        (format!("{NEW}\n{OLD}"), "each is ID:HEX"),
        ("0".repeat(64), "all zeros"),
        (String::new(), "no key"),
    ] {
        let f = key_file(&dir, "bad", &text);
        let err = fails(&run(&["scramble", "--key-file", &f, "1"]), 2, why);
        assert!(!err.contains(short) && !err.contains(OLD), "{err}");
        let out = cmd()
            .args(["scramble", "1"])
            .env("FLOE_SCRAMBLE_KEY", &text)
            .output()
            .unwrap();
        let err = fails(&out, 2, why);
        assert!(
            err.contains("$FLOE_SCRAMBLE_KEY") && !err.contains(short),
            "{err}"
        );
    }
    fails(
        &run(&["scramble", "1"]),
        2,
        "no scramble key: give --key-file FILE or set $FLOE_SCRAMBLE_KEY",
    );
    fails(
        &run(&["scramble", "--key-file", "/nonexistent/k", "1"]),
        2,
        "--key-file /nonexistent/k",
    );
    let good = key_file(&dir, "good", &format!("1:{NEW}"));
    for (args, why) in [
        (
            vec!["scramble", "-1"],
            "expected a number of 0 to 9223372036854775807",
        ),
        (
            vec!["scramble", "9223372036854775808"],
            "outside the scramble domain int63",
        ),
        (vec!["scramble", "x"], "in decimal digits"),
        (
            vec!["scramble", "--domain", "digits:5", "1"],
            "expected int63 or digits:N (N from 6 to 18)",
        ),
        (
            vec!["unscramble", "123"],
            "expected a scrambled ID of 20 digits",
        ),
        (
            vec!["unscramble", "1234567890123456789O"],
            "expected a scrambled ID of 20 digits",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--key-file", &good]);
        fails(&run(&a), 2, why);
    }
}

/// `floe seq --template '{seq:scrambled}'` gives public IDs that `floe unscramble` reads back
/// to the sequence's numbers.
#[test]
fn seq_scrambled_template_reads_back() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    let keys = key_file(&dir, "k", &format!("4:{NEW}"));
    let out = run(&[
        "seq",
        "users",
        "-n",
        "50",
        "--increment",
        "strong",
        "--state-dir",
        d,
        "--template",
        "U-{seq:scrambled}",
        "--key-file",
        &keys,
        "--domain",
        "digits:10",
    ]);
    let public = lines(out);
    assert!(public.iter().all(|p| p.len() == 13 && p.starts_with("U-4")));
    let ids: Vec<&str> = public.iter().map(|p| &p[2..]).collect();
    let mut args = vec!["unscramble", "--key-file", &keys, "--domain", "digits:10"];
    args.extend(ids);
    assert_eq!(
        lines(run(&args)),
        (1..=50).map(|i| i.to_string()).collect::<Vec<_>>()
    );
    fails(
        &run(&[
            "seq",
            "users",
            "--state-dir",
            d,
            "--template",
            "{seq:scrambled}",
        ]),
        2,
        "no scramble key",
    );
}

/// From the hostile probe: bad --set values are refused before a number is taken; the offset
/// error names its option; a key given as the path is not repeated; an endless key file is
/// refused; standard input that is not UTF-8 is bad input; unused options are still checked.
#[test]
fn probe_findings_stay_fixed() {
    let dir = state();
    let d = dir.path().to_str().unwrap();
    let tpl = [
        "--template",
        "{meta.u:04}-{seq:06}",
        "--increment",
        "strong",
    ];
    let seq = |set: &str| {
        cmd()
            .args(["seq", "g", "--state-dir", d, "--set", set])
            .args(tpl)
            .output()
            .unwrap()
    };
    assert_eq!(lines(seq("u=1")), ["0001-000001"]);
    fails(&seq("u=abc"), 2, "meta.u: expected 1 to 4 digits");
    fails(
        &seq("u=12345"),
        2,
        "meta.u: expected 1 to 4 digits, found \"12345\"",
    );
    assert_eq!(
        lines(seq("u=1")),
        ["0001-000002"],
        "no number was spent on the refused runs"
    );

    let out = run(&[
        "seq",
        "k",
        "--state-dir",
        d,
        "--template",
        "{seq}",
        "--utc-offset",
        "+8:00",
    ]);
    fails(&out, 2, "--utc-offset: expected +HH:MM");
    let out = run(&[
        "seq",
        "k",
        "--state-dir",
        d,
        "--template",
        "{seq}",
        "--domain",
        "bogus",
    ]);
    fails(
        &out,
        2,
        "--domain: scramble domain: expected int63 or digits:N",
    );

    // Scramble options without a template would be ignored: refused.
    let out = run(&["seq", "k", "--state-dir", d, "--domain", "digits:8"]);
    fails(&out, 2, "give --template too");
    // A key pasted where an ID belongs is not repeated.
    let good_keys = key_file(&dir, "g2", &format!("1:{NEW}"));
    let err = fails(
        &run(&["unscramble", "--key-file", &good_keys, NEW]),
        2,
        "looks like a key",
    );
    assert!(!err.contains(NEW), "{err}");
    let key_as_path = format!("1:{NEW}");
    let err = fails(
        &run(&["scramble", "--key-file", &key_as_path, "5"]),
        2,
        "looks like a key",
    );
    assert!(!err.contains(NEW), "{err}");
    fails(
        &run(&["scramble", "--key-file", "/dev/zero", "5"]),
        2,
        "more than 65536 bytes",
    );
    fails(
        &run(&["scramble", "--key-file", "/tmp", "5"]),
        2,
        "--key-file /tmp: Is a directory",
    );
    let bom = key_file(&dir, "bom", &format!("\u{feff}1:{NEW}\n"));
    assert_eq!(
        lines(run(&["scramble", "--key-file", &bom, "--raw", "0"])).len(),
        1
    );

    let good = key_file(&dir, "good", &format!("1:{NEW}"));
    let mut c = cmd();
    c.args(["scramble", "--key-file", &good, "-"])
        .stdin(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"5\n\xff\n").unwrap();
    let out = child.wait_with_output().unwrap();
    fails(&out, 2, "standard input line 2: not UTF-8");
    // A 20-digit text past the domain says so.
    let err = fails(
        &run(&["unscramble", "--key-file", &good, "19999999999999999999"]),
        2,
        "past the scramble domain int63",
    );
    assert!(!err.contains("expected a scrambled ID"), "{err}");
    // A scrambled template whose domain today's Snowflake IDs are past: refused at load.
    let out = run(&[
        "gen",
        "snowflake",
        "--template",
        "{id:scrambled}",
        "--key-file",
        &good,
        "--domain",
        "digits:10",
    ]);
    fails(&out, 2, "past the scramble domain digits:10");
}

/// A key set below zero in the store by hand (Redis `SET`): its IDs -2, -1 are refused by a
/// template, never written as 2, 1; then 0, 1, 2 are written as themselves.
#[test]
fn ids_below_zero_are_never_written_as_their_absolute_value() {
    let url = floe_testkit::env("FLOE_TEST_REDIS");
    let key = floe_testkit::unique("neg");
    let set = Command::new("redis-cli")
        .args(["-u", &url, "SET", &format!("floe:seq:{key}"), "-3"])
        .output()
        .unwrap();
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let seq = || {
        run(&[
            "seq",
            &key,
            "--store",
            &url,
            "--increment",
            "strong",
            "--template",
            "N{seq:03}",
        ])
    };
    for id in [-2, -1] {
        fails(&seq(), 1, &format!("ID {id} is below 0"));
    }
    for text in ["N000", "N001", "N002"] {
        assert_eq!(lines(seq()), [text]);
    }
}
