//! The example clients in other languages (examples/clients/: Python, Node.js, Go), each run
//! against a real `floe serve` of its own (embedded store, ports of its own), their output
//! checked: every ID parses as its kind and its bytes or number are the ID the server wrote as
//! text, no ID repeats, WEAK IDs increase, STRONG ones of a fresh key run 1, 2, 3... across
//! calls and a stream. scripts/lib/clients.sh installs the languages' tools and packages and
//! exports `FLOE_TEST_CLIENT_PYTHON` (a venv's python), `FLOE_TEST_CLIENT_NODE` and
//! `FLOE_TEST_CLIENT_GO`: a test whose tool is missing fails.

use crate::client::{hex_to_text, parses};
use crate::serving;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const KINDS: [&str; 5] = ["snowflake", "sno", "lexical", "uuid7", "ulid"];

/// The repository's examples/clients/LANGUAGE.
fn example(language: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/clients")
        .join(language)
}

/// Runs `command ADDRESS` against a fresh `floe serve` and checks what it printed.
fn run_and_check(mut command: Command) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let server = serving::start(&["--state-dir", state.to_str().unwrap()]);
    let out = command.arg(&server.grpc).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?}: {stderr}\n{stdout}");
    check(&stdout);
}

/// The clients' line format: `NextIds|StreamIds KIND VALUE TEXT` (VALUE: a Snowflake ID's
/// number, another kind's bytes in hex), `NextSequence WEAK|STRONG ID`, `StreamSequence
/// STRONG ID`. Each client asks for 3 IDs of each kind, a stream of 1,000 Snowflake IDs, twice
/// 5 WEAK IDs, twice 5 STRONG IDs and a stream of 20 STRONG IDs of one fresh key.
fn check(stdout: &str) {
    let mut ids: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut weak = Vec::new();
    let mut strong = Vec::new();
    let mut streamed_strong = Vec::new();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            [method @ ("NextIds" | "StreamIds"), kind, value, text] => {
                assert!(KINDS.contains(&kind), "{line}");
                assert!(parses(kind, text), "not a {kind}: {line}");
                if kind == "snowflake" {
                    // The number, read as a 64-bit integer, is exactly the server's decimal.
                    assert_eq!(value, text, "{line}");
                } else {
                    assert_eq!(hex_to_text(kind, value), text, "{line}");
                }
                assert!(seen.insert((kind, text)), "{kind} {text} came twice");
                *ids.entry((method, kind)).or_default() += 1;
            }
            ["NextSequence", "WEAK", id] => weak.push(id.parse::<i64>().unwrap()),
            ["NextSequence", "STRONG", id] => strong.push(id.parse::<i64>().unwrap()),
            ["StreamSequence", "STRONG", id] => streamed_strong.push(id.parse::<i64>().unwrap()),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    let mut expected: BTreeMap<(&str, &str), usize> =
        KINDS.iter().map(|&kind| (("NextIds", kind), 3)).collect();
    expected.insert(("StreamIds", "snowflake"), 1000);
    assert_eq!(ids, expected);
    assert_eq!(weak.len(), 10, "{weak:?}");
    assert!(weak.windows(2).all(|w| w[0] < w[1]), "WEAK: {weak:?}");
    assert!(weak[0] >= 1, "{weak:?}");
    assert_eq!(strong, (1..=10).collect::<Vec<i64>>());
    assert_eq!(streamed_strong, (11..=30).collect::<Vec<i64>>());
}

#[test]
fn python_client() {
    let python = floe_testkit::env("FLOE_TEST_CLIENT_PYTHON");
    let mut command = Command::new("bash");
    command
        .arg(example("python").join("run.sh"))
        .env("PYTHON", python);
    run_and_check(command);
}

#[test]
fn node_client() {
    let node = floe_testkit::env("FLOE_TEST_CLIENT_NODE");
    let mut command = Command::new(node);
    command.arg(example("node").join("client.js"));
    run_and_check(command);
}

#[test]
fn go_client() {
    // The go command to build it with (run.sh finds protoc and its plugins on PATH).
    let go = floe_testkit::env("FLOE_TEST_CLIENT_GO");
    let mut command = Command::new("bash");
    command.arg(example("go").join("run.sh")).env("GO", go);
    run_and_check(command);
}
