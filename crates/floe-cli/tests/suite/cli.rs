//! Tests that run the real `floe` binary.

use std::collections::HashSet;

use assert_cmd::Command;

use crate::common;
use serde_json::Value;

fn floe() -> Command {
    Command::from_std(common::cmd())
}

fn run_ok(args: &[&str]) -> String {
    common::ok(common::run(args))
}

/// Runs floe expecting bad input: exit code 2, one line on stderr naming what was expected,
/// never a panic.
fn run_bad(args: &[&str]) -> String {
    let out = floe().args(args).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "floe {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn vectors(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/vectors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn gen_every_kind_unique_and_inspectable() {
    for (kind, format, len) in [
        ("snowflake", "snowflake", 0),
        ("sno", "sno", 16),
        ("lexical", "lexical", 35),
        ("uuid7", "uuid7", 36),
        ("ulid", "ulid", 26),
    ] {
        let out = run_ok(&["gen", kind, "-n", "20000"]);
        let ids: Vec<&str> = out.lines().collect();
        assert_eq!(ids.len(), 20000, "{kind}");
        assert_eq!(
            ids.iter().collect::<HashSet<_>>().len(),
            20000,
            "{kind}: duplicates"
        );
        if len > 0 {
            assert!(ids.iter().all(|i| i.len() == len), "{kind}");
        }
        // One process, one generator: each next ID sorts after the previous.
        if kind == "snowflake" {
            let nums: Vec<u64> = ids.iter().map(|i| i.parse().unwrap()).collect();
            assert!(nums.windows(2).all(|w| w[0] < w[1]), "{kind}");
        } else if kind != "ulid" {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{kind}");
        }
        let inspected = json_lines(&run_ok(&["inspect", "--json", ids[0], ids[19999]]));
        assert_eq!(inspected.len(), 2);
        for v in &inspected {
            assert_eq!(v["format"], format, "{v}");
            assert!(v["time"].as_str().unwrap().ends_with('Z'), "{v}");
        }
    }
}

#[test]
fn gen_snowflake_options_round_trip_through_inspect() {
    let out = run_ok(&[
        "gen",
        "snowflake",
        "--layout",
        "twitter",
        "--datacenter",
        "3",
        "--worker",
        "9",
        "-n",
        "3",
        "-o",
        "json",
    ]);
    for v in json_lines(&out) {
        assert_eq!(
            (v["datacenter"].as_u64(), v["worker"].as_u64()),
            (Some(3), Some(9))
        );
        let id = v["id"].as_str().unwrap();
        let back = json_lines(&run_ok(&["inspect", "--json", "--layout", "twitter", id]));
        assert_eq!(back[0], v);
    }
    // flake-idgen: --id 100 splits into datacenter 3, worker 4; IDs in hex.
    let out = run_ok(&[
        "gen",
        "snowflake",
        "--layout",
        "flake-idgen",
        "--id",
        "100",
        "-o",
        "hex",
    ]);
    let id = u64::from_str_radix(out.trim(), 16).unwrap();
    assert_eq!((id >> 12) & 0x3ff, 100);
    let out = run_ok(&[
        "gen",
        "snowflake",
        "--layout",
        "leaf",
        "--epoch",
        "2024-01-01T00:00:00Z",
        "-o",
        "json",
    ]);
    let v = &json_lines(&out)[0];
    assert!(v["timestamp_ms"].as_u64().unwrap() > 1_704_067_200_000);
}

#[test]
fn gen_sno_options() {
    let out = run_ok(&[
        "gen",
        "sno",
        "--meta",
        "7",
        "--partition",
        "0x410a",
        "--sequence-min",
        "100",
        "-n",
        "3",
        "-o",
        "json",
    ]);
    let v = json_lines(&out);
    assert_eq!(v[0]["meta"], 7);
    assert_eq!(v[0]["partition"], 0x410a);
    assert!(v[0]["sequence"].as_u64().unwrap() >= 100);
    let hex = run_ok(&["gen", "sno", "-o", "hex"]);
    assert_eq!(hex.trim().len(), 20);
}

#[test]
fn gen_lexical_worker_is_cassie_fnv_of_the_host() {
    let out = run_ok(&["gen", "lexical", "--host", "web-01", "-o", "json"]);
    // A 64-bit hash passes 2^53: JSON carries it as a string.
    assert_eq!(json_lines(&out)[0]["worker_id"], "7783801502514740743");
    let out = run_ok(&["gen", "lexical", "--worker-id", "-5"]);
    assert!(out.trim().ends_with("fffffffffffffffb"), "{out}");
}

#[test]
fn inspect_sno_vectors() {
    let v = vectors("sno.json");
    let cases = v["component_vectors"].as_array().unwrap();
    let ids: Vec<&str> = cases
        .iter()
        .map(|c| c["encoded"].as_str().unwrap())
        .collect();
    let mut args = vec!["inspect", "--json"];
    args.extend(&ids);
    let out = json_lines(&run_ok(&args));
    assert_eq!(out.len(), cases.len());
    for (got, case) in out.iter().zip(cases) {
        let d = &case["decoded"];
        assert_eq!(got["format"], "sno");
        assert_eq!(
            got["timestamp_unix_ns"].as_str().unwrap(),
            d["timestamp_unix_ns_str"].as_str().unwrap()
        );
        for key in ["meta", "partition", "sequence", "tick_tock"] {
            assert_eq!(got[key], d[key], "{key} of {}", case["name"]);
        }
        assert_eq!(got["bytes_hex"], case["bytes_hex"]);
    }
}

#[test]
fn inspect_leaf_and_flake_vectors() {
    let v = vectors("leaf_snowflake.json");
    for case in v["layout_vectors"].as_array().unwrap() {
        let epoch = case["twepoch"].to_string();
        let got = &json_lines(&run_ok(&[
            "inspect",
            "--json",
            "--epoch",
            &epoch,
            case["id"].as_str().unwrap(),
        ]))[0];
        assert_eq!(got["timestamp_ms"], case["now_ms"]);
        assert_eq!(got["worker"], case["worker_id"]);
        assert_eq!(got["sequence"], case["sequence"]);
    }
    let v = vectors("flake_idgen.json");
    for case in v["generator_vectors"].as_array().unwrap().iter().take(12) {
        let epoch = case["options"]["epoch"].to_string();
        let got = &json_lines(&run_ok(&[
            "inspect",
            "--json",
            "--layout",
            "flake-idgen",
            "--epoch",
            &epoch,
            case["dec"].as_str().unwrap(),
        ]))[0];
        let d = &case["decoded"];
        assert_eq!(got["datacenter"], d["datacenter"]);
        assert_eq!(got["worker"], d["worker"]);
        assert_eq!(got["sequence"], d["counter"]);
    }
    // A flake-idgen ID past 2^63 (year 2039 and later on the Unix epoch).
    let got = &json_lines(&run_ok(&[
        "inspect",
        "--json",
        "--layout",
        "flake-idgen",
        "18446744073709551615",
    ]))[0];
    assert_eq!(got["id"], "18446744073709551615");
    assert_eq!(got["sequence"], 4095);
}

#[test]
fn inspect_cassie_vectors_and_text_output() {
    let v = vectors("cassie_lexical_uuid.json");
    for case in v["lexical_uuid"].as_array().unwrap() {
        let text = case["to_string"].as_str().unwrap();
        let got = &json_lines(&run_ok(&["inspect", "--json", text]))[0];
        assert_eq!(got["format"], "lexical");
        // Any i64: strings in JSON.
        assert_eq!(got["timestamp"], case["timestamp"].to_string());
        assert_eq!(got["worker_id"], case["worker_id"].to_string());
    }
    let text = run_ok(&["inspect", "00000000-00ff-9281-ffffffffa0091991"]);
    assert!(text.contains("worker_id         -1610016367"), "{text}");
}

#[test]
fn inspect_reads_stdin() {
    let out = floe()
        .args(["inspect", "--json", "-"])
        .write_stdin("brpk4q72xwf2m63l\n\n2222222222222222\n")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = json_lines(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["meta"], 255);
}

#[test]
fn bad_input_exits_2_with_one_line() {
    assert!(run_bad(&["inspect", "nope"]).contains("expected a decimal Snowflake ID"));
    assert!(run_bad(&["inspect", "brpk4q72xwF2m63l"]).contains("'F' at index 10"));
    assert!(run_bad(&["inspect", "0123456789abcdef0123456789abcdef"]).contains("ambiguous"));
    assert!(run_bad(&["inspect", "99999999999999999999"]).contains("decimal number"));
    assert!(run_bad(&["inspect", "550e8400-e29b-41d4-a716-446655440000"]).contains("version 7"));
    assert!(run_bad(&["inspect", "01ARZ3NDEKTSV4RRFFQ69G5FAU!"]).contains("unrecognised"));
    assert!(run_bad(&["inspect", "0UARZ3NDEKTSV4RRFFQ69G5FAV"]).contains("ULID"));
    assert!(run_bad(&["gen", "snowflake", "--worker", "1024"]).contains("worker"));
    assert!(run_bad(&[
        "gen",
        "snowflake",
        "--layout",
        "twitter",
        "--datacenter",
        "32"
    ])
    .contains("datacenter"));
    assert!(run_bad(&[
        "gen",
        "snowflake",
        "--layout",
        "flake-idgen",
        "--id",
        "1024"
    ])
    .contains("id"));
    assert!(run_bad(&["gen", "snowflake", "--epoch", "2999-01-01T00:00:00Z"]).contains("epoch"));
    assert!(run_bad(&["gen", "snowflake", "--epoch", "yesterday"]).contains("RFC 3339"));
    assert!(run_bad(&["gen", "snowflake", "--layout", "42/5/5/13"]).contains("more than 64"));
    assert!(run_bad(&["gen", "snowflake", "--layout", "41/10/0"]).contains("sequence_bits"));
    assert!(run_bad(&["gen", "snowflake", "--layout", "nope"]).contains("unknown layout"));
    assert!(run_bad(&["gen", "sno", "--partition", "70000"]).contains("partition"));
    assert!(
        run_bad(&["gen", "sno", "--sequence-min", "9", "--sequence-max", "9"])
            .contains("identical")
    );
    assert!(run_bad(&["gen", "sno", "-o", "dec"]).contains("snowflake IDs only"));
    // clap's own errors also exit 2 (they take more than one line, so check the code only).
    let out = floe().args(["gen", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Every number a JSON line carries is exact in JavaScript (at most 2^53); anything that can
/// pass that is a string. Walked over every kind, with the widest Snowflake fields a layout
/// may have.
#[test]
fn json_numbers_never_pass_2_pow_53() {
    fn walk(v: &Value, path: &str) {
        match v {
            Value::Number(n) => {
                let ok = n.as_u64().is_some_and(|n| n <= 1 << 53)
                    || n.as_i64().is_some_and(|n| n.unsigned_abs() <= 1 << 53)
                    || n.is_f64();
                assert!(ok, "{path} = {n} passes 2^53 as a JSON number");
            }
            Value::Object(m) => m.iter().for_each(|(k, v)| walk(v, &format!("{path}.{k}"))),
            Value::Array(a) => a.iter().for_each(|v| walk(v, path)),
            _ => {}
        }
    }
    for args in [
        &["gen", "snowflake", "-n", "3", "-o", "json"][..],
        &[
            "gen",
            "snowflake",
            "--layout",
            "flake-idgen",
            "-n",
            "3",
            "-o",
            "json",
        ],
        &["gen", "sno", "-n", "3", "-o", "json"],
        &["gen", "lexical", "-n", "3", "-o", "json"],
        &["gen", "uuid7", "-n", "3", "-o", "json"],
        &["gen", "ulid", "-n", "3", "-o", "json"],
    ] {
        for line in json_lines(&run_ok(args)) {
            walk(&line, &args.join(" "));
        }
    }
}

/// `js-safe`: every ID below 2^53 (exact in a JavaScript number) and decoded again.
#[test]
fn js_safe_ids_stay_below_2_pow_53() {
    let out = run_ok(&[
        "gen",
        "snowflake",
        "--layout",
        "js-safe",
        "--worker",
        "127",
        "-n",
        "2000",
    ]);
    let ids: Vec<u64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 2000);
    assert!(ids.iter().all(|&id| id < 1 << 53), "{:?}", ids.iter().max());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let last = ids.last().unwrap().to_string();
    let parts = &json_lines(&run_ok(&[
        "inspect", "--json", "--layout", "js-safe", &last,
    ]))[0];
    assert_eq!(parts["worker"], 127);
}
