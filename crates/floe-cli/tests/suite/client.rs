//! `floe gen --server` and `floe seq --server` against a real `floe serve` child: every kind's
//! IDs, small counts (one message) and streamed ones, the same output forms as the local
//! commands, sequences WEAK and STRONG, the server's errors, an unreachable server, and an
//! output closed early (`| head -1`).

use crate::common;
use crate::serving;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Output, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use floe_core::lexical::LexicalUuid;
use floe_core::sno::SnoId;
use floe_core::ulid::Ulid;
use floe_core::uuid7::Uuid;
use serving::{next_strong, Serve};

/// A `floe serve` killed when the test ends (also when it fails).
struct Server {
    serve: Serve,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::with(&[])
    }

    /// With more `floe serve` flags.
    fn with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let mut args = vec!["--state-dir", state.to_str().unwrap()];
        args.extend(extra);
        let serve = serving::start(&args);
        Server { serve, _dir: dir }
    }

    fn url(&self) -> String {
        format!("http://{}", self.serve.grpc)
    }
}

fn run(args: &[&str]) -> Output {
    common::run(args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// The output of a run that must succeed with nothing on standard error.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "floe {args:?}: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "floe {args:?}");
    stdout(&out)
}

/// A run that must fail with exit code 2, nothing on standard output and one line on standard
/// error; that line.
fn bad(args: &[&str]) -> String {
    failing(2, args)
}

/// A run that must fail with exit code `code`, nothing on standard output and one line on
/// standard error; that line.
fn failing(code: i32, args: &[&str]) -> String {
    let out = run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "floe {args:?}: {err}");
    assert_eq!(stdout(&out), "", "floe {args:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// Whether `text` is one ID of `kind` as the local `floe gen` writes it.
pub(crate) fn parses(kind: &str, text: &str) -> bool {
    match kind {
        "snowflake" => u64::from_str(text).is_ok(),
        "sno" => SnoId::from_str(text).is_ok_and(|id| id.to_string() == text),
        "lexical" => LexicalUuid::from_str(text).is_ok_and(|id| id.to_string() == text),
        "uuid7" => Uuid::parse_str(text)
            .is_ok_and(|id| id.get_version_num() == 7 && id.hyphenated().to_string() == text),
        "ulid" => Ulid::from_string(text).is_ok_and(|id| id.to_string() == text),
        other => panic!("{other}"),
    }
}

const KINDS: [&str; 5] = ["snowflake", "sno", "lexical", "uuid7", "ulid"];

/// One ID (NextIds), a few (a stream of one message) and 25,000 (a stream of three messages of
/// the server's 10,000): the right count, all distinct, each one parsing as its kind.
#[test]
fn every_kind_small_and_streamed_counts_distinct_and_parsing() {
    let server = Server::start();
    let url = server.url();
    for kind in KINDS {
        let mut all = HashSet::new();
        for n in [1usize, 7, 25_000] {
            let out = ok(&["gen", kind, "--server", &url, "-n", &n.to_string()]);
            let ids: Vec<&str> = out.lines().collect();
            assert_eq!(ids.len(), n, "{kind} -n {n}");
            for id in &ids {
                assert!(parses(kind, id), "{kind}: {id:?}");
                assert!(all.insert(id.to_string()), "{kind}: {id} came back twice");
            }
        }
    }
    // The server's address without a scheme works as well.
    let out = ok(&["gen", "ulid", "--server", &server.serve.grpc]);
    assert!(parses("ulid", out.trim_end()), "{out}");
}

/// `-o json` of a server's IDs is what `floe inspect --json` says of their text (the local
/// output's parts), and `-o hex` is their big-endian bytes.
#[test]
fn json_and_hex_match_the_local_forms() {
    let server = Server::start();
    let url = server.url();
    for kind in ["sno", "lexical", "uuid7", "ulid"] {
        let json = ok(&["gen", kind, "--server", &url, "-o", "json", "-n", "3"]);
        let lines: Vec<&str> = json.lines().collect();
        assert_eq!(lines.len(), 3, "{kind}");
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["format"], kind, "{line}");
            let id = v["id"].as_str().unwrap();
            assert!(parses(kind, id), "{kind}: {id}");
            let inspected = ok(&["inspect", "--json", "--format", kind, id]);
            assert_eq!(inspected.trim_end(), line, "{kind}");
        }
        let hex = ok(&["gen", kind, "--server", &url, "-o", "hex", "-n", "3"]);
        let width = if kind == "sno" { 20 } else { 32 };
        for line in hex.lines() {
            assert_eq!(line.len(), width, "{kind}: {line}");
            assert!(line
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            // Its bytes read back as an ID of the kind.
            let inspected = ok(&[
                "inspect",
                "--json",
                "--format",
                kind,
                &hex_to_text(kind, line),
            ]);
            assert!(
                inspected.contains(&format!("\"format\":\"{kind}\"")),
                "{inspected}"
            );
        }
    }
    let hex = ok(&["gen", "snowflake", "--server", &url, "-o", "hex"]);
    assert_eq!(hex.trim_end().len(), 16, "{hex}");
    let dec = ok(&["gen", "snowflake", "--server", &url, "-o", "dec", "-n", "2"]);
    assert!(dec.lines().all(|l| parses("snowflake", l)), "{dec}");
    // A Snowflake ID's parts need its layout, which the server does not tell.
    let e = bad(&["gen", "snowflake", "--server", &url, "-o", "json"]);
    assert!(
        e.contains("--output json") && e.contains("floe inspect"),
        "{e}"
    );
}

/// The text of an ID of `kind` from the hex of its bytes.
pub(crate) fn hex_to_text(kind: &str, hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    match kind {
        "sno" => SnoId::from_bytes(bytes.try_into().unwrap()).to_string(),
        "lexical" => LexicalUuid::from_bytes(bytes.try_into().unwrap()).to_string(),
        "uuid7" => Uuid::from_bytes(bytes.try_into().unwrap()).to_string(),
        "ulid" => Ulid::from_bytes(bytes.try_into().unwrap()).to_string(),
        other => panic!("{other}"),
    }
}

/// `--meta` and `--layout` reach the server: a sno's metabyte, and the default Snowflake
/// generator when --layout is not given (the local default, leaf, is no generator's name).
#[test]
fn meta_and_layout_reach_the_server() {
    let server = Server::start();
    let url = server.url();
    let json = ok(&[
        "gen", "sno", "--server", &url, "--meta", "42", "-o", "json", "-n", "2",
    ]);
    for line in json.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["meta"], 42, "{line}");
    }
    let e = bad(&["gen", "snowflake", "--server", &url, "--layout", "leaf"]);
    assert!(
        e.starts_with("floe: error: server: INVALID_ARGUMENT: layout: no Snowflake generator is named \"leaf\""),
        "{e}"
    );
}

/// WEAK IDs come back distinct and increasing for one caller; STRONG ones of a fresh key are
/// consecutive from 1, across NextSequence (one ID) and streams (several messages of the
/// server's --max-batch), and a second call carries on where the first ended. (The server
/// issues a STRONG batch one store increment per ID for now: the STRONG counts stay small.)
#[test]
fn sequences_weak_and_strong() {
    let server = Server::with(&["--max-batch", "1000"]);
    let url = server.url();
    let ids = |args: &[&str]| -> Vec<i64> {
        ok(args)
            .lines()
            .map(|l| l.parse::<i64>().unwrap())
            .collect()
    };
    let weak = ids(&["seq", "w", "--server", &url, "-n", "25000"]);
    assert_eq!(weak.len(), 25_000);
    assert!(weak.windows(2).all(|w| w[0] < w[1]), "WEAK not increasing");
    let more = ids(&["seq", "w", "--server", &url]);
    assert_eq!(more.len(), 1);
    assert!(more[0] > weak[weak.len() - 1]);

    let strong = ["--increment", "strong"];
    let first = ids(&[&["seq", "s", "--server", &url][..], &strong].concat());
    assert_eq!(first, [1]);
    let run = ids(&[&["seq", "s", "--server", &url, "-n", "2500"][..], &strong].concat());
    assert_eq!(run, (2..=2501).collect::<Vec<i64>>());
    let next = ids(&[
        &[
            "seq", "s", "--server", &url, "-n", "3", "--store", "default",
        ][..],
        &strong,
    ]
    .concat());
    assert_eq!(next, [2502, 2503, 2504]);
    // -n 0 prints nothing (on the wire a count of 0 would mean 1).
    assert_eq!(
        ok(&[&["seq", "s", "--server", &url, "-n", "0"][..], &strong].concat()),
        ""
    );
    assert_eq!(ok(&["gen", "uuid7", "--server", &url, "-n", "0"]), "");
    let after = ids(&[&["seq", "s", "--server", &url][..], &strong].concat());
    assert_eq!(after, [2505]);
}

/// The server's refusals: one line `floe: error: server: CODE: message`, exit 2.
#[test]
fn server_errors_are_one_line_and_exit_2() {
    let server = Server::start();
    let url = server.url();
    let cases: [(&[&str], &str); 6] = [
        (
            &["seq", "k", "--store", "nope"],
            "INVALID_ARGUMENT: Sequencer store nope not found",
        ),
        (
            &["seq", "k", "--store", "nope", "-n", "5"],
            "store nope not found",
        ),
        (&["seq", "", "-n", "3"], "INVALID_ARGUMENT: "),
        (
            &["gen", "snowflake", "--layout", "nope"],
            "no Snowflake generator is named \"nope\"",
        ),
        (
            &["gen", "uuid7", "--meta", "3"],
            "INVALID_ARGUMENT: meta: applies to sno IDs only",
        ),
        (
            &["gen", "ulid", "-n", "1000000001"],
            "total: expected 1 to 1000000000, found 1000000001",
        ),
    ];
    for (args, expected) in cases {
        let mut args = args.to_vec();
        args.extend(["--server", &url]);
        let e = bad(&args);
        assert!(e.starts_with("floe: error: server: "), "{args:?}: {e}");
        assert!(e.contains(expected), "{args:?}: {e}");
    }
    // A kind the CLI does not know never reaches the server: clap refuses it (exit 2).
    let out = run(&["gen", "nope", "--server", &url]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid value 'nope'"),
        "{}",
        stderr(&out)
    );
    // The HTTP port is not gRPC: one line, exit 69 (no gRPC server could be reached there).
    let e = failing(69, &["gen", "sno", "--server", &server.serve.http]);
    assert!(e.starts_with("floe: error: server: "), "{e}");
}

/// No server at the address: one line naming it, exit 69 (EX_UNAVAILABLE). A bad or https://
/// URL is refused before connecting, naming --server (exit 2).
#[test]
fn unreachable_server_names_the_url() {
    let port = floe_testkit::free_port();
    for url in [
        format!("127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}"),
        // TLS: the same words (floe-server's tests/suite/security.rs talks to a TLS server).
        format!("https://127.0.0.1:{port}"),
    ] {
        for args in [
            vec!["gen", "sno", "--server", &url],
            vec!["gen", "uuid7", "-n", "100000", "--server", &url],
            vec!["seq", "k", "--server", &url],
        ] {
            let e = failing(69, &args);
            assert!(
                e.starts_with(&format!("floe: error: cannot reach the server at {url}: ")),
                "{e}"
            );
        }
    }
    for (url, expected) in [
        ("127.0.0.1", "no port"),
        ("http://127.0.0.1:1/v1", "a path"),
        ("grpc://127.0.0.1:1", "unknown scheme"),
    ] {
        let e = bad(&["gen", "sno", "--server", url]);
        assert!(e.starts_with("floe: error: --server: "), "{e}");
        assert!(e.contains(expected), "{url}: {e}");
    }
}

/// The options of a local generator or store are refused with --server, before connecting.
#[test]
fn local_only_options_are_refused_with_server() {
    let url = "127.0.0.1:1";
    for extra in [
        &["gen", "snowflake", "--worker", "1"][..],
        &["gen", "snowflake", "--datacenter", "1"],
        &["gen", "snowflake", "--id", "1"],
        &["gen", "snowflake", "--epoch", "0"],
        &["gen", "snowflake", "--time-unit-ms", "10"],
        &["gen", "sno", "--partition", "3"],
        &["gen", "sno", "--sequence-max", "9"],
        &["gen", "lexical", "--worker-id", "5"],
        &["gen", "lexical", "--host", "h"],
        &["gen", "sno", "--registry", "static:1"],
        &["gen", "sno", "--state-dir", "x"],
        &["seq", "k", "--segment", "10"],
        &["seq", "k", "--bigger-than", "10"],
        &["seq", "k", "--state-dir", "x"],
        &["seq", "k", "--step-min", "10"],
        &["seq", "k", "--timeout-ms", "10"],
    ] {
        let mut args = extra.to_vec();
        args.extend(["--server", url]);
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{args:?}: {err}");
        assert!(!err.contains("cannot reach"), "{args:?}: {err}");
    }
}

/// Runs `floe args`, reads one line of its output and closes the pipe (`| head -1`); its exit
/// status and standard error.
fn read_one_line_then_close(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut child = common::cmd()
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // The reader (and the pipe) is dropped here.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("floe {args:?} did not exit after its output was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, line, err)
}

/// `| head -1`: the client exits 0 with nothing on standard error, and the stream is cancelled
/// on the server: a STRONG key streamed to a billion stops being issued once the client is
/// gone (two of its IDs asked for over HTTP half a second apart are then consecutive).
#[test]
fn early_close_exits_0_quietly_and_cancels_the_stream() {
    // Small messages: the server issues STRONG batches one store increment per ID.
    let server = Server::with(&["--max-batch", "100"]);
    let url = server.url();
    let (status, line, err) = read_one_line_then_close(&[
        "seq",
        "big",
        "--server",
        &url,
        "--increment",
        "strong",
        "-n",
        "1000000000",
    ]);
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(err, "");
    assert_eq!(line, "1\n");
    let mut stopped = false;
    let mut last = next_strong(&server.serve.http, "default", "big").unwrap();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let next = next_strong(&server.serve.http, "default", "big").unwrap();
        if next == last + 1 {
            stopped = true;
            break;
        }
        last = next;
    }
    assert!(stopped, "the stream is still issuing: {last}");

    for kind in KINDS {
        let (status, line, err) =
            read_one_line_then_close(&["gen", kind, "--server", &url, "-n", "1000000000"]);
        assert!(status.success(), "{kind}: {status:?}: {err}");
        assert_eq!(err, "", "{kind}");
        assert!(parses(kind, line.trim_end()), "{kind}: {line}");
    }
    // The server serves on.
    assert_eq!(
        ok(&["gen", "sno", "--server", &url, "-n", "3"])
            .lines()
            .count(),
        3
    );
}

/// A server that dies under a stream: what came is written, then one line and exit 69.
#[test]
fn a_server_gone_mid_stream_is_an_error() {
    let server = Server::start();
    let url = server.url();
    let mut child = common::cmd()
        .args(["gen", "uuid7", "--server", &url, "-n", "1000000000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(parses("uuid7", line.trim_end()), "{line}");
    server.serve.kill9();
    // Read to the end, so the client is never stuck on a full pipe.
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(69), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("floe: error: server: "), "{err}");
    // Every whole line written before is an ID.
    let rest = String::from_utf8(rest).unwrap();
    for l in rest.lines().filter(|l| l.len() == 36) {
        assert!(parses("uuid7", l), "{l}");
    }
}

/// The local `floe seq` closed early (`| head -1`) exits 0 quietly as well (it used to report
/// the broken pipe as an error, exit 2).
#[test]
fn local_seq_early_close_exits_0_quietly() {
    let (status, line, err) =
        read_one_line_then_close(&["seq", "k", "--store", "memory", "-n", "100000000"]);
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(err, "");
    assert_eq!(line, "1\n");
}
